"""scatter_reduce / index_reduce / cummax / cummin / mode where the registry's samples
cannot reach: gradients at ties and zeros (finite differences cannot follow a kink, so
these are compared with PyTorch's), the in-place methods, random calls against
PyTorch (hypothesis), and the double-backward refusal PyTorch also makes."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg

torch = pytest.importorskip("torch")

REDUCES = ["sum", "prod", "mean", "amax", "amin"]


def _grads(L, x, index, src, reduce, include_self, g):
    X = L.tensor(x, requires_grad=True)
    S = L.tensor(src, requires_grad=True)
    out = L.scatter_reduce(X, 1, L.tensor(index), S, reduce, include_self=include_self)
    out.backward(L.tensor(g))
    return out.detach().numpy(), X.grad.numpy(), S.grad.numpy()


@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_gradient_at_ties_and_zeros_is_pytorchs(reduce, include_self):
    # few distinct values: ties between input and src and within src; zeros (one and
    # two per position) for prod
    r = np.random.default_rng(0)
    x = r.choice([0.0, 1.0, 2.0], size=(4, 5))
    src = r.choice([0.0, 1.0, 2.0], size=(4, 7))
    index = r.integers(0, 5, size=(4, 7))
    g = r.standard_normal((4, 5))
    ours = _grads(tg, x, index, src, reduce, include_self, g)
    theirs = _grads(torch, x, index, src, reduce, include_self, g)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_prod_double_backward_with_two_zeros_refused_as_pytorch():
    x = tg.tensor([[1.0, 2.0]], requires_grad=True)
    src = tg.tensor([[0.0, 0.0, 3.0]], requires_grad=True)
    out = tg.scatter_reduce(x, 1, tg.tensor([[0, 0, 1]]), src, "prod")
    with pytest.raises(RuntimeError, match="scatter_reduce: double backward"):
        tg.grad(out.sum(), [src], create_graph=True)
    gs, = tg.grad(tg.scatter_reduce(x, 1, tg.tensor([[0, 0, 1]]), src, "prod").sum(), [src])
    np.testing.assert_allclose(gs.numpy(), [[0.0, 0.0, 2.0]])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 6), st.sampled_from(REDUCES),
       st.booleans(), st.integers(0, 2 ** 31 - 1), st.sampled_from(["float64", "int64"]))
def test_forward_matches_pytorch(rows, n, m, reduce, include_self, seed, dtype):
    r = np.random.default_rng(seed)
    x = r.integers(-3, 4, size=(rows, n)).astype(dtype)
    src = r.integers(-3, 4, size=(rows, m)).astype(dtype)
    index = r.integers(0, n, size=(rows, m))
    ours = tg.scatter_reduce(tg.tensor(x), 1, tg.tensor(index), tg.tensor(src), reduce,
                             include_self=include_self)
    theirs = torch.scatter_reduce(torch.tensor(x), 1, torch.tensor(index), torch.tensor(src),
                                  reduce, include_self=include_self)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_inplace_methods_and_index_reduce():
    x = np.random.default_rng(1).uniform(0.5, 2.0, (4, 3))
    src = np.random.default_rng(2).uniform(0.5, 2.0, (3, 3))
    for L in (tg, torch):
        a = L.tensor(x)
        a.scatter_reduce_(0, L.tensor([[0, 1, 0], [3, 3, 3], [0, 0, 0]]), L.tensor(src), "mean",
                          include_self=False)
        b = L.tensor(x)
        b.index_reduce_(0, L.tensor([0, 3, 0]), L.tensor(src), "amax")
        if L is tg:
            ours = (a.numpy(), b.numpy())
        else:
            np.testing.assert_allclose(ours[0], a.numpy())
            np.testing.assert_allclose(ours[1], b.numpy())
    with pytest.raises(RuntimeError, match="index_reduce"):
        tg.index_reduce(tg.tensor(x), 0, tg.tensor([0, 1, 0]), tg.tensor(src), "sum")


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_ties_gradient_and_nan_like_pytorch(name):
    x = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.5], [2.0, 2.0, 1.0, 1.0, 1.0, 4.0]])
    g = np.random.default_rng(3).standard_normal(x.shape)
    res = []
    for L in (tg, torch):
        X = L.tensor(x, requires_grad=True)
        v, i = getattr(L, name)(X, 1)
        v.backward(L.tensor(g))
        res.append((v.detach().numpy(), i.numpy(), X.grad.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b)
    y = [1.0, np.nan, 2.0, np.nan, 0.0]
    ours, theirs = getattr(tg, name)(tg.tensor(y), 0), getattr(torch, name)(torch.tensor(y), 0)
    np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
    np.testing.assert_allclose(ours.values.numpy(), theirs.values.numpy())


def test_mode_gradient_and_keepdim_like_pytorch():
    x = np.array([[1.0, 2.0, 2.0, 3.0, 1.0, 2.0], [0.5, 0.5, -1.0, -1.0, 4.0, 4.0]])
    res = []
    for L in (tg, torch):
        X = L.tensor(x, requires_grad=True)
        v, i = L.mode(X, 1, keepdim=True)
        (v * L.tensor([[2.0], [3.0]])).sum().backward()
        res.append((v.detach().numpy(), i.numpy(), X.grad.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b)
    assert tuple(tg.tensor(x).mode().values.shape) == (2,)


def test_unique_consecutive_dim_and_empty_like_pytorch():
    a = np.array([[1, 1, 2], [1, 1, 2], [3, 1, 1], [3, 1, 1]])
    for kw in ({"dim": 0, "return_inverse": True, "return_counts": True},
               {"dim": 1, "return_counts": True}, {"return_inverse": True}):
        ours = tg.unique_consecutive(tg.tensor(a), **kw)
        theirs = torch.unique_consecutive(torch.tensor(a), **kw)
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    e = tg.unique_consecutive(tg.tensor(np.zeros(0)))
    assert tuple(e.shape) == (0,)
