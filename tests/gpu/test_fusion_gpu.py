"""Fused kernels on the GPU: ``tg.elementwise`` ops and ``@tg.fuse`` bodies (their
reductions over all elements included), forward, first- and second-order gradients,
against the same calls on CPU Tensors; float32 and float64; constants that are
infinite or NaN; broadcast and scalar operands. Sizes are above
``fusion.config.min_numel`` so compiled kernels run on both sides (CuPy kernels on the
GPU, Numba ones on the CPU).
"""
import warnings

import numpy as np
import pytest
from gpu_env import DEVICE, close, host, on_device, require

import tapegrad as tg
from tapegrad import fusion

require()

TOL = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=1e-4, atol=1e-5)}
DTYPES = [pytest.param(np.float64, id="float64"), pytest.param(np.float32, id="float32")]


def body(x, y):
    return tg.gelu(x, approximate="tanh") * tg.sigmoid(y) + x * x - tg.tanh(x - y)


@tg.fuse
def fused(x, y):
    return body(x, y)


@tg.fuse
def fused_sum(x, y):
    return tg.sum(body(x, y))


@tg.fuse
def fused_mean(x, y):
    return body(x, y).mean()


def _pair(dtype, shape_x=(300, 70), shape_y=(70,), seed=0):
    r = np.random.default_rng(seed)
    return (r.uniform(-2, 2, shape_x).astype(dtype), r.uniform(-2, 2, shape_y).astype(dtype))


def _run(fn, arrays, device, order=1):
    ts = [tg.tensor(a, device=device, requires_grad=True) for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fused body must fuse, not fall back
        out = fn(*ts)
    v = out if out.shape == () else (out * tg.tensor(
        np.random.default_rng(9).standard_normal(out.shape).astype(arrays[0].dtype),
        device=device)).sum()
    gs = tg.grad(v, ts, create_graph=order == 2)
    if order == 1:
        return out, gs
    w = [tg.tensor(np.random.default_rng(10 + k).standard_normal(a.shape).astype(a.dtype),
                   device=device) for k, a in enumerate(arrays)]
    total = (gs[0] * w[0]).sum() + (gs[1] * w[1]).sum()
    return out, tg.grad(total, ts)


@pytest.fixture(autouse=True)
def _compiled_kernels(monkeypatch):
    monkeypatch.setattr(fusion.config, "min_numel", 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [fused, fused_sum, fused_mean], ids=["elementwise", "sum", "mean"])
def test_fused_forward_and_gradients(fn, dtype):
    arrays = _pair(dtype)
    oc, gc = _run(fn, arrays, "cpu")
    og, gg = _run(fn, arrays, DEVICE)
    assert on_device(og) and all(on_device(g) for g in gg)
    close(og, oc, f"{fn.__name__} forward on {DEVICE}", **TOL[dtype])
    for k, (a, b) in enumerate(zip(gg, gc)):
        close(a, b, f"{fn.__name__} gradient {k} on {DEVICE}", **TOL[dtype])


@pytest.mark.parametrize("fn", [fused, fused_sum, fused_mean], ids=["elementwise", "sum", "mean"])
def test_fused_second_order(fn):
    arrays = _pair(np.float64, (40, 5), (5,))
    _, gc = _run(fn, arrays, "cpu", order=2)
    _, gg = _run(fn, arrays, DEVICE, order=2)
    for k, (a, b) in enumerate(zip(gg, gc)):
        assert on_device(a)
        close(a, b, f"{fn.__name__} second order, input {k}", **TOL[np.float64])


def test_fused_sum_matches_numpy_in_float64():
    """The one-pass reduction sums float32 values in float64, as the CPU kernel."""
    x, y = _pair(np.float32, (1 << 12, 64), (64,), seed=3)
    got = fused_sum(tg.tensor(x, device=DEVICE), tg.tensor(y, device=DEVICE))
    xs, ys = x.astype(np.float64), y.astype(np.float64)
    c = np.sqrt(2 / np.pi)
    gelu = 0.5 * xs * (1 + np.tanh(c * (xs + 0.044715 * xs ** 3)))
    ref = np.sum(gelu / (1 + np.exp(-ys)) + xs * xs - np.tanh(xs - ys))
    assert host(got).dtype == np.float32
    np.testing.assert_allclose(float(host(got)), ref, rtol=2e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src,expected", [
    ("where(x > 0, x, -inf)", lambda x: np.where(x > 0, x, -np.inf)),
    ("minimum(x, inf) + 0 * x", lambda x: x),
    ("where(x > 0, nan, x)", lambda x: np.where(x > 0, np.nan, x)),
], ids=["neg-inf", "inf", "nan"])
def test_infinite_and_nan_constants(src, expected, dtype, fresh_name):
    """Kernels with infinite or NaN literals compile and give IEEE values (the CUDA
    source defines its own constants: no CUDART_* macro is needed)."""
    f = tg.elementwise(fresh_name, src, ["x"])
    x = np.linspace(-3, 3, 4096).astype(dtype)
    got = f(tg.tensor(x, device=DEVICE))
    np.testing.assert_array_equal(host(got), expected(x).astype(dtype))


def test_elementwise_broadcast_scalar_and_second_order(fresh_name):
    f = tg.elementwise(fresh_name, "a * exp(-b * x) + softplus(x)")
    r = np.random.default_rng(4)
    args = [r.uniform(0.5, 1.5, (64, 1)), r.uniform(0.1, 1, (1, 33)), r.uniform(-2, 2, (64, 33))]
    res = {}
    for dev in ("cpu", DEVICE):
        ts = [tg.tensor(a, device=dev, requires_grad=True) for a in args]
        out = f(*ts)
        g = tg.grad(out.sum(), ts, create_graph=True)
        gg = tg.grad(sum((x * x).sum() for x in g), ts)
        res[dev] = [out, *g, *gg]
    for k, (a, b) in enumerate(zip(res[DEVICE], res["cpu"])):
        close(a, b, f"result {k}", **TOL[np.float64])
    scalar = f(tg.tensor(args[0], device=DEVICE), 0.5, tg.tensor(args[2], device=DEVICE))
    close(scalar, f(tg.tensor(args[0]), 0.5, tg.tensor(args[2])), "scalar operand",
          **TOL[np.float64])


def test_float16_runs_in_float32():
    x = np.linspace(-2, 2, 3000).astype(np.float16)
    got = fused(tg.tensor(x, device=DEVICE), tg.tensor(x, device=DEVICE))
    exp = fused(tg.tensor(x), tg.tensor(x))
    assert host(got).dtype == np.float16
    close(got, exp, "float16", rtol=2e-3, atol=2e-3)
