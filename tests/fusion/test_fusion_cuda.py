"""The CuPy path: same values as the CPU kernels. Skips without CuPy and a GPU."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.devices import cuda as _cuda

pytestmark = pytest.mark.skipif(not _cuda.available(), reason="needs CuPy and a CUDA GPU")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations_on_gpu_match_cpu(dtype):
    x0 = np.random.default_rng(0).uniform(-6, 6, (257, 33)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for name in ("gelu", "silu", "softplus", "logsigmoid", "elu", "mish"):
        xc = tg.tensor(x0, requires_grad=True)
        xg = tg.tensor(x0, device="cuda", requires_grad=True)
        yc, yg = getattr(tg, name)(xc), getattr(tg, name)(xg)
        np.testing.assert_allclose(yg.cpu().numpy(), yc.numpy(), rtol=tol, atol=tol)
        yc.sum().backward()
        yg.sum().backward()
        np.testing.assert_allclose(xg.grad.cpu().numpy(), xc.grad.numpy(), rtol=tol, atol=tol)


def test_fuse_on_gpu():
    @tg.fuse
    def f(x, y):
        return tg.tanh(x) * tg.sigmoid(y) + x * y

    x0 = np.random.default_rng(1).standard_normal((100, 3))
    y0 = np.random.default_rng(2).standard_normal((3,))
    xg = tg.tensor(x0, device="cuda", requires_grad=True)
    yg = tg.tensor(y0, device="cuda", requires_grad=True)
    out = f(xg, yg)
    out.sum().backward()
    ref = np.tanh(x0) / (1 + np.exp(-y0)) + x0 * y0
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("how", ["sum", "mean"])
def test_fused_reduction_on_gpu(how):
    @tg.fuse
    def f(x, y):
        return getattr(tg, how)(tg.tanh(x) * tg.sigmoid(y) + x * y)

    r = np.random.default_rng(3)
    x0, y0 = r.standard_normal((100, 3)), r.standard_normal((3,))
    xc, yc = tg.tensor(x0, requires_grad=True), tg.tensor(y0, requires_grad=True)
    xg = tg.tensor(x0, device="cuda", requires_grad=True)
    yg = tg.tensor(y0, device="cuda", requires_grad=True)
    oc, og = f(xc, yc), f(xg, yg)
    assert og.device.type == "cuda" and og.shape == ()
    np.testing.assert_allclose(og.item(), oc.item(), rtol=1e-12)
    oc.backward()
    og.backward()
    np.testing.assert_allclose(xg.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(yg.grad.cpu().numpy(), yc.grad.numpy(), rtol=1e-12)
