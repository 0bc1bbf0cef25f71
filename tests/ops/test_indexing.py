"""scatter_reduce where the registry's samples cannot reach: gradients at ties and zeros
(finite differences cannot follow a kink, so these are compared with PyTorch's), random
calls against PyTorch (hypothesis), and the double-backward refusal PyTorch also makes."""
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
