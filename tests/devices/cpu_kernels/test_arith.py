"""The compiled remainder / floor_divide / fmod loops (``devices/cpu_kernels/arith.py``, taken
for same-shape contiguous float operands of 256 elements and more) against PyTorch's,
on signs, zeros, infinities and NaNs, in float32 and float64, with and without out=."""
import numpy as np
import pytest
import torch

import tapegrad as tg


def _operands(dtype, n=4000):
    r = np.random.default_rng(0)
    a = r.uniform(-7, 7, n)
    b = r.uniform(-3, 3, n)
    a[:8] = [0.0, -0.0, 6.0, -6.0, np.inf, -np.inf, np.nan, 5.0]
    b[:8] = [2.0, -2.0, -3.0, 3.0, 2.0, -2.0, 1.0, 0.0]
    a[8:12] = [1.5, -1.5, 2.0, -2.0]
    b[8:12] = [np.inf, np.inf, -np.inf, np.nan]
    a[12:16] = [7.0, -7.0, 1e-30, -1e30]
    b[12:16] = [0.0, 0.0, 3.0, 7.0]
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["remainder", "floor_divide", "fmod"])
def test_matches_torch(name, dtype):
    a, b = _operands(dtype)
    with np.errstate(all="ignore"):
        got = getattr(tg, name)(tg.tensor(a), tg.tensor(b)).numpy()
    want = getattr(torch, name)(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14,
                               atol=0, equal_nan=True)
    # these operands take the compiled loop (same-shape contiguous floats)
    from tapegrad.devices.cpu_kernels import arith
    assert arith.fits(a, b)


@pytest.mark.parametrize("name", ["remainder", "floor_divide", "fmod"])
def test_out_and_the_numpy_fallbacks(name):
    a, b = _operands(np.float64)
    op = tg.ops_registry.get(name)
    out = np.full_like(a, 7.0)
    with np.errstate(all="ignore"):
        assert op.compute(a, b, out=out) is out
        want = getattr(torch, name)(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        np.testing.assert_allclose(out, want, rtol=1e-14, equal_nan=True)
        # broadcast and strided operands take NumPy's ufunc, same values
        got = getattr(tg, name)(tg.tensor(a[::2]), tg.tensor(b[:1])).numpy()
        want = getattr(torch, name)(torch.from_numpy(a[::2].copy()),
                                    torch.from_numpy(b[:1].copy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-14, equal_nan=True)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4, 1e9, 1e30])
def test_float32_exact_fmod_across_scales(scale):
    """float32's fmod runs in float64 arithmetic (no libm): equal to PyTorch's bit for
    bit, quotients near integers and beyond 2^29 included."""
    r = np.random.default_rng(int(np.log10(scale)) + 40)
    a = (r.uniform(-1, 1, 20000) * scale).astype(np.float32)
    b = r.uniform(-3, 3, 20000).astype(np.float32)
    b[:100] = a[:100] / np.float32(7)      # quotients at (or a rounding off) an integer
    for name in ("remainder", "floor_divide", "fmod"):
        got = getattr(tg, name)(tg.tensor(a), tg.tensor(b)).numpy()
        want = getattr(torch, name)(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        np.testing.assert_array_equal(got, want)
