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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(8, 6, 40, 40), (4, 5, 20, 30, 8)])
def test_sum_over_all_but_channels_matches_torch(dtype, shape):
    # a conv bias gradient's reduction (one compiled pass for large NCHW arrays)
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    x[1, 2, 3, 4] = np.nan
    dims = (0,) + tuple(range(2, len(shape)))
    ref = torch.from_numpy(x.astype(np.float64)).sum(dim=dims, keepdim=True).numpy()
    got = tg.sum(tg.tensor(x), dim=dims, keepdim=True).numpy()
    assert got.dtype == dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-3)
    assert np.isnan(got[0, 2]).all() and not np.isnan(np.delete(got, 2, axis=1)).any()
    t = tg.tensor(x[:, :, ::1], requires_grad=True)
    tg.sum(t, dim=tuple(d - len(shape) for d in dims)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.ones(shape, dtype))


# ---------------------------------------------------------------- sums over the leading dims
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4096, 512), (2048, 65), (3, 7, 5), (2, 1), (1, 6)])
def test_sum_over_leading_dims_as_torch(dtype, shape):
    """The sum over every dim but the last (one GEMV with ones) and ``sum_to`` a shape
    of the last dim's size: values within a float32 sum's rounding of PyTorch's, the
    gradient through ``linear``'s bias, keepdim and ``out=``."""
    from tapegrad.ops.reduce import _sum_kernel, _sum_to_kernel
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    lead = tuple(range(len(shape) - 1))
    ref = torch.tensor(x).sum(dim=lead).numpy()
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(tg.tensor(x).sum(dim=lead).numpy(), ref, **tol)
    np.testing.assert_allclose(tg.tensor(x).sum(dim=lead, keepdim=True).numpy(),
                               torch.tensor(x).sum(dim=lead, keepdim=True).numpy(), **tol)
    out = np.empty((1,) * len(lead) + shape[-1:], dtype)
    assert _sum_kernel(x, lead, True, out=out) is out
    np.testing.assert_allclose(out.reshape(-1), ref, **tol)
    for target in (shape[-1:], (1,) * len(lead) + shape[-1:]):
        np.testing.assert_allclose(_sum_to_kernel(x, target).reshape(-1), ref, **tol)
    assert _sum_kernel(x.astype(np.int64), lead).dtype == np.int64  # (NumPy's path)
    with_nan = x.copy()
    with_nan[0, -1] = np.nan
    assert np.isnan(tg.tensor(with_nan).sum(dim=lead).numpy()[-1])


def test_linear_bias_gradient_uses_the_leading_sum():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 9, 16)).astype(np.float32)
    w = rng.standard_normal((5, 16)).astype(np.float32)
    b = tg.zeros(5, requires_grad=True)
    tg.nn.functional.linear(tg.tensor(x), tg.tensor(w), b).pow(2).sum().backward()
    tb = torch.zeros(5, requires_grad=True)
    torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), tb).pow(2).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-3)
