"""The fused softmax / log-softmax row kernels (``ops/nn/softmax_rows.py``) against
PyTorch: values and gradients, large arrays (the rows split over the threads), rows
holding NaN or infinities, ``out=`` in place and into a strided array, and the
cross-entropy row passes (``ops/nn/loss.py``) on the same kinds of rows."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.nn import softmax_rows

torch = pytest.importorskip("torch")
F = tg.nn.functional

TOL = {np.float32: 2e-6, np.float64: 1e-13}


def _special_rows(x):
    x = x.copy()
    x[0, 0] = np.nan
    x[1, :] = -np.inf
    x[2, 3] = np.inf
    x[3, :] = 0.0
    x[4, 1] = -np.inf
    x[5, :] = 1e30 if x.dtype == np.float64 else 1e30
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(7, 5), (64, 4, 64, 64), (3000, 33), (2, 1)])
def test_against_torch(dtype, log, shape):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    a = tg.tensor(x, requires_grad=True)
    y = (F.log_softmax if log else F.softmax)(a, -1)
    y.backward(tg.tensor(g))
    b = torch.tensor(x, requires_grad=True)
    r = (torch.log_softmax if log else torch.softmax)(b, -1)
    r.backward(torch.tensor(g))
    tol = TOL[dtype]
    np.testing.assert_allclose(y.detach().numpy(), r.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_nan_and_infinite_rows_as_torch(dtype, log):
    x = _special_rows(np.random.default_rng(3).standard_normal((8, 6)).astype(dtype))
    g = np.ones_like(x)
    a = tg.tensor(x, requires_grad=True)
    y = (F.log_softmax if log else F.softmax)(a, 1)
    y.backward(tg.tensor(g))
    b = torch.tensor(x, requires_grad=True)
    r = (torch.log_softmax if log else torch.softmax)(b, 1)
    r.backward(torch.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(), r.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_the_kernels_are_used():
    """Float32 and float64 compile (a Numba failure would leave NumPy's passes)."""
    assert softmax_rows.kernels(np.float32) is not None
    assert softmax_rows.kernels(np.float64) is not None
    assert softmax_rows.kernels(np.float16) is None
    x = np.ones((2, 3), np.float32)
    assert softmax_rows.applies(x, 1) and softmax_rows.applies(x, -1)
    assert not softmax_rows.applies(x, 0) and not softmax_rows.applies(x.T, 1)


@pytest.mark.parametrize("log", [False, True])
def test_out_in_place_and_strided(log):
    from tapegrad.ops.nn.activation import _log_softmax_kernel, _softmax_kernel
    k = _log_softmax_kernel if log else _softmax_kernel
    x = np.random.default_rng(5).standard_normal((300, 70)).astype(np.float32)
    ref = (torch.log_softmax if log else torch.softmax)(torch.tensor(x), 1).numpy()
    a = x.copy()
    assert k(a, 1, out=a) is a
    np.testing.assert_allclose(a, ref, rtol=2e-6, atol=2e-6)
    big = np.zeros((300, 140), np.float32)
    out = big[:, ::2]
    assert k(x, 1, out=out) is out
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)
    assert not big[:, 1::2].any()
    shifted = np.zeros((301, 70), np.float32)
    shifted[:300] = x
    k(shifted[:300], 1, out=shifted[1:])     # overlapping: computed apart, then copied
    np.testing.assert_allclose(shifted[1:], ref, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_rows_as_torch(dtype, reduction):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2048, 65)) * 3).astype(dtype)
    t = rng.integers(0, 65, 2048)
    t[::7] = -100
    for xx in (x, _special_rows(x[:8])):
        tt = t[:len(xx)]
        a = tg.tensor(xx, requires_grad=True)
        loss = F.cross_entropy(a, tg.tensor(tt), reduction=reduction)
        loss.backward()
        b = torch.tensor(xx, requires_grad=True)
        ref = torch.nn.functional.cross_entropy(b, torch.tensor(tt), reduction=reduction)
        ref.backward()
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(loss.item(), ref.item(), rtol=tol, atol=tol, equal_nan=True)
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol)
