"""cummax / cummin where the registry's samples cannot reach: the gradient at ties
(finite differences cannot follow a kink) and NaNs, against PyTorch."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


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
