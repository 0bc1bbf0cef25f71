"""PyTorch's autograd semantics on everyday snippets, run in torch and tapegrad side
by side: version counters, index_put dtypes, grad mode decorators, hooks,
autograd.grad's options, module bookkeeping."""
import numpy as np
import pytest
import torch

import tapegrad as tg


def _same(run):
    """``run(lib)`` gives a list of plain values; both libraries give the same."""
    assert run(tg) == run(torch)


# ------------------------------------------------------------------ _version
def test_version_is_an_int_counting_in_place_writes():
    def run(m):
        r = []
        x = m.zeros(4)
        r.append(x._version)
        x.add_(1)
        r.append(x._version)
        x[0] = 5
        r.append(x._version)
        x += 1
        r.append(x._version)
        x.fill_(2)
        x.copy_(m.ones(4))
        r.append(x._version)
        r.append(m.ones(2).clone()._version)
        r.append(type(x._version).__name__)
        return r
    _same(run)


def test_version_is_shared_with_views_and_detach_not_data():
    def run(m):
        x = m.zeros(4)
        v = x[1:]
        v.mul_(2)
        r = [x._version, v._version]
        d = x.detach()
        d.zero_()
        r += [x._version, d._version]
        x.data.add_(1)  # .data has a counter of its own
        r.append(x._version)
        z = x.view(2, 2)
        z[0, 0] = 1
        r += [x._version, z._version]
        return r
    _same(run)


def test_version_counts_in_place_metadata_changes():
    def run(m):
        b = m.ones(2, 3)
        b.t_()
        r = [b._version]
        b.unsqueeze_(0)
        r.append(b._version)
        b.squeeze_(0)
        r.append(b._version)
        return r
    _same(run)


def test_version_under_no_grad_parameter_update():
    def run(m):
        w = m.ones(3, requires_grad=True)
        with m.no_grad():
            w -= 0.1
            w.mul_(2)
        return [w._version, w.requires_grad, w.is_leaf]
    _same(run)


# ------------------------------------------------------------------ index_put dtypes
def _outcome(fn):
    try:
        r = fn()
    except (RuntimeError, TypeError, IndexError) as e:
        return type(e).__name__, str(e).split(" got")[0]
    return str(r.dtype).split(".")[-1], r.tolist()


PUTS = {
    "index_put_long": lambda m: m.zeros(3).index_put_((m.tensor([0]),), m.tensor([1])),
    "index_put_double": lambda m: m.zeros(3).index_put((m.tensor([0]),),
                                                      m.tensor([1.0], dtype=m.float64)),
    "index_put_accumulate": lambda m: m.zeros(3).index_put_(
        (m.tensor([0]),), m.tensor([1.0], dtype=m.float64), accumulate=True),
    "index_put_same": lambda m: m.zeros(3).index_put_((m.tensor([0, 0]),), m.tensor([1.0, 2.0]),
                                                      accumulate=True),
    "index_put_bool_values": lambda m: m.zeros(3).index_put_((m.tensor([0]),), m.tensor([True])),
    "index_put_into_long": lambda m: m.zeros(3, dtype=m.int64).index_put_(
        (m.tensor([0]),), m.tensor([1.5])),
    "masked_scatter_double": lambda m: m.zeros(3).masked_scatter_(
        m.tensor([True, False, False]), m.tensor([2.0], dtype=m.float64)),
}


def _set(index, value):
    def run(m):
        a = m.zeros(2, 3)
        a[index(m)] = value(m)
        return a
    return run


SETS = {  # x[idx] = v: cast for basic indexing and a 0-d value under a mask, else index_put
    "basic_int": _set(lambda m: 0, lambda m: m.tensor([1, 2, 3])),
    "basic_slice": _set(lambda m: (slice(None), slice(1, None)),
                        lambda m: m.tensor([1.5, 2.5], dtype=m.float64)),
    "zero_dim_index": _set(lambda m: m.tensor(1), lambda m: m.tensor([4, 5, 6])),
    "tensor_index": _set(lambda m: m.tensor([0]), lambda m: m.tensor(7)),
    "list_index": _set(lambda m: (0, [0, 1]), lambda m: m.tensor([1, 2])),
    "mask_0d": _set(lambda m: m.tensor([[True, False, True], [False] * 3]),
                    lambda m: m.tensor(2.0, dtype=m.float64)),
    "mask_1d": _set(lambda m: m.tensor([[True, False, True], [False] * 3]),
                    lambda m: m.tensor([1, 2])),
    "python_number": _set(lambda m: m.tensor([0]), lambda m: 7),
    "half_value": _set(lambda m: m.tensor([1]), lambda m: m.tensor([7.0], dtype=m.float16)),
}


@pytest.mark.parametrize("name", list(PUTS) + list(SETS))
def test_index_put_dtypes_as_torch(name):
    fn = PUTS.get(name) or SETS[name]
    assert _outcome(lambda: fn(tg)) == _outcome(lambda: fn(torch))


def test_index_put_values_must_be_a_tensor():
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        tg.zeros(3).index_put_((tg.tensor([0]),), 1.0)
    with pytest.raises(TypeError):
        torch.zeros(3).index_put_((torch.tensor([0]),), 1.0)


# ------------------------------------------------------------------ sparse under autocast
SPARSE_MM = {
    "mm": lambda m, s, d: m.mm(s, d),
    "sparse_mm": lambda m, s, d: m.sparse.mm(s, d),
    "matmul_operator": lambda m, s, d: s @ d,
    "dense_sparse": lambda m, s, d: m.mm(d.t(), s),
    "sparse_addmm": lambda m, s, d: m.sparse.addmm(d, s, d, beta=0.5, alpha=2.0),
}


@pytest.mark.parametrize("name", SPARSE_MM)
def test_sparse_mm_under_cpu_autocast_is_lowered_as_torch(name):
    def run(m):
        s = m.sparse_coo_tensor(m.tensor([[0, 1], [1, 0]]), m.tensor([1.5, -2.0]), (2, 2))
        d = m.tensor([[0.5, 1.0], [2.0, -1.0]])
        with m.autocast("cpu"):
            r = SPARSE_MM[name](m, s, d)
        return str(r.dtype).split(".")[-1], r.float().tolist()
    got, want = run(tg), run(torch)
    assert got[0] == want[0] == "bfloat16"
    np.testing.assert_allclose(got[1], want[1], rtol=1e-2)


def test_sparse_mm_under_autocast_gradients_in_each_leaf_dtype():
    v = tg.tensor([1.5, -2.0], requires_grad=True)
    s = tg.sparse_coo_tensor(tg.tensor([[0, 1], [1, 0]]), v, (2, 2))
    d = tg.randn(2, 3, requires_grad=True)
    with tg.autocast("cpu"):
        out = tg.mm(s, d)
    out.float().sum().backward()
    assert out.dtype == tg.bfloat16 and d.grad.dtype == tg.float32 and v.grad.dtype == tg.float32


# ------------------------------------------------------------------ saved_tensors_hooks
def _hooked(m, build, pack=None, unpack=None):
    """The pack/unpack calls (shapes) made while ``build`` records and its backward
    runs, and the leaf's gradient."""
    log = []

    def p(t):
        log.append(("pack", tuple(t.shape)))
        return t if pack is None else pack(t)

    def u(v):
        t = v if unpack is None else unpack(v)
        log.append(("unpack", tuple(t.shape)))
        return t
    x = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
    w = m.tensor([1.5, 2.0, -0.5])
    with m.autograd.graph.saved_tensors_hooks(p, u):
        y = build(m, x, w)
    packed = list(log)
    y.sum().backward()
    return packed, log[len(packed):], np.round(x.grad.numpy(), 5).tolist()


HOOKED = {
    "mul_one_needs_grad": lambda m, x, w: x * w,
    "mul_both_saved": lambda m, x, w: x * x,
    "exp_saves_output": lambda m, x, w: x.exp(),
    "sin": lambda m, x, w: x.sin(),
    "nothing_saved": lambda m, x, w: x * 2 + 1,
    "matmul": lambda m, x, w: x.view(3, 1) @ w.view(1, 3),
    "chain": lambda m, x, w: (x * w).tanh().sum(0, keepdim=True),
}


@pytest.mark.parametrize("name", HOOKED)
def test_saved_tensors_hooks_pack_and_unpack_as_torch(name):
    assert _hooked(tg, HOOKED[name]) == _hooked(torch, HOOKED[name])


def test_unpack_hook_result_is_what_the_adjoint_reads():
    def run(m):
        return _hooked(m, HOOKED["mul_one_needs_grad"], unpack=lambda t: t * 2)[2]
    assert run(tg) == run(torch)


def test_pack_hook_copy_makes_a_later_in_place_write_safe():
    def run(m):
        x = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
        with m.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
            a = x * 1.0
            b = (a * a).sum()
        with m.no_grad():
            a.add_(1)
        b.backward()
        return x.grad.tolist()
    assert run(tg) == run(torch)


def test_pack_gets_the_saved_input_itself_and_hooks_nest():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        seen = []
        G = m.autograd.graph
        with G.saved_tensors_hooks(lambda t: ("outer", t), lambda p: p[1]):
            with G.saved_tensors_hooks(lambda t: (seen.append(t is x), ("inner", t))[1],
                                       lambda p: (seen.append(p[0]), p[1])[1]):
                y = (x * x).sum()
            y.backward()
        return seen, x.grad.tolist()
    assert run(tg) == run(torch)


def test_saved_tensors_hooks_errors_as_torch():
    def run(m):
        G = m.autograd.graph
        out = []
        x = m.tensor([1.0, 2.0], requires_grad=True)
        with G.saved_tensors_hooks(lambda t: 1, lambda t: 1):
            y = (x * x).sum()
        with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor") as e:
            y.backward()
        out.append(type(e.value).__name__)
        with G.disable_saved_tensors_hooks("hooks are off here"):
            with pytest.raises(RuntimeError, match="hooks are off here"):
                with G.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with G.saved_tensors_hooks(lambda t: t, lambda t: t):
            with pytest.raises(RuntimeError, match="no saving"):
                with G.disable_saved_tensors_hooks("no saving"):
                    pass
        with G.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = (x * x).sum()
        y.backward(retain_graph=True)
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()
        return out
    assert run(tg) == run(torch)


def test_save_on_cpu_and_function_ctx_go_through_the_hooks():
    def run(m):
        log = []

        class Cube(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 3

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                return g * 3 * x * x
        x = m.tensor([1.0, 2.0], requires_grad=True)
        with m.autograd.graph.saved_tensors_hooks(lambda t: log.append("p") or t,
                                                  lambda t: log.append("u") or t):
            y = Cube.apply(x).sum()
        y.backward()
        with m.autograd.graph.save_on_cpu(pin_memory=False):
            z = (x * x.exp()).sum()
        z.backward()
        return log, x.grad.tolist()
    got, want = run(tg), run(torch)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_create_graph_through_identity_hooks():
    def run(m):
        x = m.tensor([0.5, 1.5], requires_grad=True)
        with m.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = (x * x * x).sum()
        g, = m.autograd.grad(y, x, create_graph=True)
        g2, = m.autograd.grad(g.sum(), x)
        return g.tolist(), g2.tolist()
    assert run(tg) == run(torch)


# ------------------------------------------------------------------ grad_fn as a Node
def test_grad_fn_next_functions_and_node_hooks_as_torch():
    def run(m):
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 3
        nf = y.grad_fn.next_functions
        r = [len(nf), nf[0][0].variable is x, nf[0][0].name(), nf[1][0],
             isinstance(y.grad_fn, m.autograd.graph.Node),
             isinstance(nf[0][0], m.autograd.graph.Node)]
        z = (x * 2).exp().sum()
        r.append(z.grad_fn.next_functions[0][0].name())
        r.append(z.grad_fn.next_functions[0][0].next_functions[0][0].name())
        seen = []
        y.grad_fn.register_prehook(lambda go: (seen.append(("pre", len(go))), (go[0] * 2,))[1])
        h = y.grad_fn.register_hook(
            lambda gi, go: (seen.append(("post", len(gi), gi[1] is None)), (gi[0] * 10, None))[1])
        y.sum().backward()
        r += [seen, x.grad.tolist()]
        h.remove()
        x.grad = None
        y2 = x * 3
        y2.grad_fn.metadata["tag"] = 1
        r.append(dict(y2.grad_fn.metadata))
        y2.grad_fn.register_hook(lambda gi, go: (gi[0],))
        with pytest.raises(RuntimeError, match="incorrect number of values"):
            y2.sum().backward()
        return r
    assert run(tg) == run(torch)
