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
