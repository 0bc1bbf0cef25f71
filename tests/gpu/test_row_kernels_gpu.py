"""The row kernels on the device (softmax, log_softmax, cross-entropy's forward,
layer_norm without grad: ``devices/cuda_kernels.py`` on the GPU) against the CPU, at
sizes where the block strides over long rows, with NaN and infinite entries."""
import numpy as np
import pytest
from gpu_env import DEVICE, close, on_device, require

import tapegrad as tg
import tapegrad.nn.functional as F

require()

TOL = {np.float32: dict(rtol=2e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}
DTYPES = [pytest.param(np.float32, id="float32"), pytest.param(np.float64, id="float64")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 1000), (3, 70001), (5, 7, 3)])
@pytest.mark.parametrize("fn", [tg.softmax, tg.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_rows(fn, shape, dtype):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype) * 10
    x.reshape(-1, shape[-1])[0, 1] = np.nan      # a NaN row stays NaN
    x.reshape(-1, shape[-1])[1, :] = -np.inf     # an all -inf row: NaN, as PyTorch
    x.reshape(-1, shape[-1])[2, 0] = np.inf
    got = fn(tg.tensor(x, device=DEVICE), dim=-1)
    exp = fn(tg.tensor(x), dim=-1)
    assert on_device(got)
    close(got, exp, f"{fn.__name__} {shape} on {DEVICE}", **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_forward_and_gradient(dtype):
    r = np.random.default_rng(1)
    x, y = r.standard_normal((64, 3001)).astype(dtype), r.integers(0, 3001, 64)
    res = {}
    for dev in ("cpu", DEVICE):
        xt = tg.tensor(x, device=dev, requires_grad=True)
        loss = F.cross_entropy(xt, tg.tensor(y, device=dev))
        loss.backward()
        res[dev] = (loss, xt.grad)
    for a, b in zip(res[DEVICE], res["cpu"]):
        close(a, b, "cross_entropy", **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_without_grad(dtype, affine):
    r = np.random.default_rng(2)
    x = (r.standard_normal((129, 2, 1500)) * 3 + 5).astype(dtype)
    w, b = (r.standard_normal((2, 1500)).astype(dtype) for _ in range(2))
    outs = {}
    for dev in ("cpu", DEVICE):
        args = [tg.tensor(w, device=dev), tg.tensor(b, device=dev)] if affine else [None, None]
        with tg.no_grad():
            outs[dev] = F.layer_norm(tg.tensor(x, device=dev), (2, 1500), *args, eps=1e-4)
    assert on_device(outs[DEVICE])
    close(outs[DEVICE], outs["cpu"], "layer_norm", rtol=1e-4 if dtype == np.float32 else 1e-10,
          atol=1e-5 if dtype == np.float32 else 1e-12)
