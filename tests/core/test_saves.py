"""An op saves only what its adjoint reads for the inputs that require grad
(``OpDef.saves`` per input, API.md "PyTorch compatibility, continued").

Over the registry: each op with a per-input declaration, run with every subset of its
floating inputs requiring grad, keeps exactly what the declaration names for that
subset (nothing else reaches its vjp) and still gives the gradients of the run where
every input requires grad. Then PyTorch's behaviour for in-place writes: a write into
a value no adjoint reads is allowed, a write into one that is read is caught; and a
value nobody needs is freed as soon as the user drops it.
"""
import gc
import itertools
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.ops_registry import list_ops
from tapegrad.tensor import buffer

torch = pytest.importorskip("torch")

PER_INPUT = [op for op in list_ops() if op.save_for is not None]


def _float_positions(args):
    return [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]


def _tensors(args, needs):
    return [tg.tensor(a.copy(), requires_grad=bool(needs.get(i))) if isinstance(a, np.ndarray)
            else a for i, a in enumerate(args)]


def _outs(res):
    return list(res) if isinstance(res, tuple) else [res]


def _grads(op, sample, wanted, seed_rng):
    """The gradients of ``wanted`` (positions) for fixed cotangents, with exactly those
    inputs requiring grad, and the node the call recorded."""
    ts = _tensors(sample.args, {i: True for i in wanted})
    outs = [o for o in _outs(bind(op, *ts, **sample.attrs)) if o.requires_grad]
    rng = np.random.default_rng(seed_rng)
    cot = [tg.tensor(rng.standard_normal(tuple(o.shape))) for o in outs]
    node = outs[0].grad_fn
    kept = [s is not None for s in (node.saved or [None] * len(ts))]
    kept_out = node.out is not None
    gs = tg.grad(outs, [ts[i] for i in wanted], grad_outputs=cot, allow_unused=True)
    return (kept, kept_out), [None if g is None else g.numpy() for g in gs]


def _cases(limit):
    out = []
    for op in PER_INPUT:
        samples = [s for s in op.samples(np.float64) if s.grad]
        for k, s in enumerate(samples[:limit]):
            if len(_float_positions(s.args)) >= 1:
                out.append(pytest.param(op, s, id=f"{op.name}-sample{k}"))
    return out


def _check_subsets(op, sample):
    pos = _float_positions(sample.args)
    _, full = _grads(op, sample, pos, 1)
    full = dict(zip(pos, full))
    for r in range(1, len(pos) + 1):
        for subset in itertools.combinations(pos, r):
            (kept, kept_out), gs = _grads(op, sample, list(subset), 1)
            needs = [i in subset for i in range(len(sample.args))]
            keep, keep_out = op.saved_for(needs)
            for i in range(len(sample.args)):
                if i not in keep:  # withheld: the vjp could not have read it
                    assert not kept[i], (op.name, subset, i)
            assert kept_out == keep_out, (op.name, subset)
            for i, g in zip(subset, gs):
                want = full[i]
                if g is None or want is None:
                    assert g is None and want is None, (op.name, subset, i)
                else:
                    np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12,
                                               err_msg=f"{op.name} {subset} input {i}")


@pytest.mark.parametrize("op,sample", _cases(1))
def test_each_subset_keeps_what_it_declares_and_gets_the_full_gradients(op, sample):
    _check_subsets(op, sample)


@pytest.mark.slow
@pytest.mark.parametrize("op,sample", _cases(None))
def test_each_subset_every_sample(op, sample):
    _check_subsets(op, sample)


def test_common_ops_declare_per_input():
    names = {op.name for op in PER_INPUT}
    for n in ("mul", "div", "pow", "matmul", "linear", "conv2d", "einsum", "dot",
              "outer", "tensordot", "linalg_solve", "conv_transpose2d"):
        assert n in names, n


def test_declaration_naming_a_non_input_is_refused():
    with pytest.raises(ValueError, match="not one of its inputs"):
        tg.ops_registry.register(name="bad_saves_decl", kernel=np.multiply,
                                 infer=lambda x, y: x, args=("x", "y"),
                                 vjp=lambda ctx, g: (g, g), saves={"z": ("x",)},
                                 samples=lambda dtype=None: [])


# ---------------------------------------------------------------- in-place writes
def test_issue_example_constant_factor():
    x = tg.ones(3, requires_grad=True)
    y = x * 1
    z = (y * 2).sum()
    y.add_(1)
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def _run(lib, prog, write):
    """``prog`` in ``lib`` (tapegrad or torch): returns x's gradient, or the exception
    class raised by backward."""
    rng = np.random.default_rng(0)
    x0, c0 = rng.random((3, 4)) + 0.5, rng.standard_normal((3, 4)) + 3.0
    a0 = rng.standard_normal((4, 4))
    t = lib.tensor
    x = t(x0, requires_grad=True)
    c, a = t(c0), t(a0)
    h = x * 1.0  # a non-leaf: it may be written in place
    out = prog(lib, h, c, a)
    with lib.no_grad() if write == "c" else _nothing():
        (h if write == "h" else c if write == "c" else a).add_(1.0)
    try:
        out.sum().backward()
    except RuntimeError:
        return RuntimeError
    return x.grad.numpy().copy()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _F(lib):
    return lib.nn.functional


PROGRAMS = {
    "add": lambda lib, h, c, a: h + c,
    "sub": lambda lib, h, c, a: c - h,
    "mul": lambda lib, h, c, a: h * c,
    "mul_scalar": lambda lib, h, c, a: h * 2.0,
    "div": lambda lib, h, c, a: h / c,
    "div_by": lambda lib, h, c, a: c / h,
    "matmul": lambda lib, h, c, a: h @ a,
    "matmul_left": lambda lib, h, c, a: a.T @ h.T,
    "linear": lambda lib, h, c, a: _F(lib).linear(h, a),
    "pow_const_exp": lambda lib, h, c, a: h ** c,
    "einsum": lambda lib, h, c, a: lib.einsum("ij,jk->ik", h, a),
}


@pytest.mark.parametrize("write", ["h", "c", "a"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_inplace_write_as_pytorch(name, write):
    """A write into the tensor that requires grad (``h``) or into a constant (``c``,
    ``a``) after the op: an error exactly where PyTorch raises one (the value is read
    by the gradient of ``h``), the same gradient where it does not."""
    prog = PROGRAMS[name]
    ours = _run(tg, prog, write)
    theirs = _run(torch, prog, write)
    if theirs is RuntimeError:
        assert ours is RuntimeError, f"{name}, write into {write}: PyTorch raises, we do not"
    else:
        assert ours is not RuntimeError, f"{name}, write into {write}: PyTorch does not raise"
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_needed_value_written_is_caught_with_the_input_named():
    x = tg.ones(3, requires_grad=True)
    w = tg.full((3,), 2.0)
    y = x * w
    w.add_(1)
    with pytest.raises(RuntimeError, match="input 'other' of mul"):
        y.sum().backward()


def test_inplace_op_keeps_a_copy_only_when_read():
    # x.mul_(2): the gradient reads the factor, not x's old value (no snapshot); x.mul_(w)
    # with w requiring grad reads x's old value, which must survive the write
    x = tg.ones(3, requires_grad=True)
    h = x * 1.0
    h.mul_(2.0)
    h.mul_(3.0)
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0] * 3)
    w = tg.full((3,), 5.0, requires_grad=True)
    h = x * 1.0
    h.mul_(w)
    h.add_(1.0)
    h.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0] * 3)


def test_double_backward_with_one_side_constant():
    # second order through a node that kept only the constant side
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = tg.tensor([2.0, -1.0, 0.5])
    y = (x * x * c).sum()
    (g,) = tg.grad(y, x, create_graph=True)
    (gg,) = tg.grad(g.sum(), x)
    tx = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    tc = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    (tgr,) = torch.autograd.grad((tx * tx * tc).sum(), tx, create_graph=True)
    (tgg,) = torch.autograd.grad(tgr.sum(), tx)
    np.testing.assert_allclose(g.detach().numpy(), tgr.detach().numpy())
    np.testing.assert_allclose(gg.numpy(), tgg.numpy())


# ---------------------------------------------------------------- memory
def test_unneeded_value_is_freed_when_dropped():
    x = tg.ones(1000, requires_grad=True)
    c = tg.full((1000,), 3.0)
    h = x * 2.0          # its node keeps nothing (the factor is a number)
    y = h * c            # y's node keeps c, not h: x's gradient reads c alone
    ref = weakref.ref(buffer(h))
    del h
    gc.collect()
    assert ref() is None, "a value no adjoint reads is kept alive by the recording"
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(1000, 6.0))


def test_needed_value_is_kept():
    x = tg.ones(1000, requires_grad=True)
    c = tg.full((1000,), 3.0, requires_grad=True)
    h = x * 2.0
    y = h * c            # c requires grad: its gradient reads h
    ref = weakref.ref(buffer(h))
    del h
    gc.collect()
    assert ref() is not None
    y.sum().backward()
    np.testing.assert_array_equal(c.grad.numpy(), np.full(1000, 2.0))


def test_expression_op_derives_what_each_input_reads():
    f = tg.elementwise("saves_axpy", "a * x + y")
    assert f.op.saves == {"a": ("x",), "x": ("a",), "y": ()}
    a, x, y = (tg.tensor(np.arange(1.0, 4.0) + k) for k in range(3))
    y.requires_grad_(True)
    out = f(a, x, y)
    assert out.grad_fn.saved is None  # y's gradient reads nothing
    a.add_(1.0)
    x.add_(1.0)
    out.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [1.0] * 3)
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    x = tg.tensor([3.0, 4.0])
    out = f(a, x, tg.zeros(2))
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
