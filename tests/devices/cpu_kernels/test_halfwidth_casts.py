"""The compiled half-width casts (bfloat16/float16 <-> float32) against NumPy's and
ml_dtypes' own casts, and the blockwise half-width ``sum`` against float64 sums and
PyTorch."""
import ml_dtypes
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.devices.cpu_kernels import halfwidth as hw

HALF = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}


def _same(got, ref):
    """Bit for bit, except that a NaN only needs to be a NaN (hardware float16
    conversions quiet a signalling NaN; NumPy keeps its payload)."""
    assert got.dtype == ref.dtype and got.shape == ref.shape
    with np.errstate(invalid="ignore"):
        g, r = got.astype(np.float64), ref.astype(np.float64)
    nan = np.isnan(r)
    assert np.array_equal(np.isnan(g), nan)
    width = {2: np.uint16, 4: np.uint32}[ref.dtype.itemsize]
    assert np.array_equal(got.view(width)[~nan], ref.view(width)[~nan])


@pytest.mark.parametrize("name", sorted(HALF))
def test_widen_every_bit_pattern(name):
    h = np.arange(1 << 16, dtype=np.uint16).view(HALF[name])
    _same(hw.to_float32(h), h.astype(np.float32))


@pytest.mark.parametrize("name", sorted(HALF))
def test_round_matches_astype(name):
    r = np.random.default_rng(0)
    bits = r.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (r.standard_normal(1 << 16) * np.exp(r.uniform(-40, 40, 1 << 16))).astype(np.float32)
    edges = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504, 65519.99, 65520,
                      -65520, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -14, 1e-40,
                      3.3895314e38, 3.4028235e38], np.float32)
    for x in (bits, scaled, np.tile(edges, 2000)):
        with np.errstate(all="ignore"):
            _same(hw.from_float32(x, HALF[name]), x.astype(HALF[name]))


@pytest.mark.parametrize("name", sorted(HALF))
def test_casts_keep_layout(name):
    a = np.random.default_rng(1).standard_normal((300, 200)).astype(np.float32)
    h = a.astype(HALF[name])
    for src, wide in ((h.T, a.T), (h[:, ::2], a[:, ::2])):  # Fortran order; strided
        w, ref = hw.to_float32(src), src.astype(np.float32)
        _same(w, ref)
        assert (w.flags.c_contiguous, w.flags.f_contiguous) == \
            (ref.flags.c_contiguous, ref.flags.f_contiguous)
        _same(hw.from_float32(wide, HALF[name]), wide.astype(HALF[name]))


@pytest.mark.parametrize("name", sorted(HALF))
@pytest.mark.parametrize("shape,dim", [((1 << 17,), None), ((300, 400), None), ((300, 400), 0),
                                       ((300, 400), 1), ((3, 60000), 1), ((3, 60000), (0, 1)),
                                       ((60000, 3), 0), ((40, 30, 50), (0, 2)),
                                       ((40, 30, 50), (1,))])
def test_sum_blockwise(name, shape, dim):
    x = np.random.default_rng(2).standard_normal(shape).astype(HALF[name])
    got = tg.sum(tg.tensor(x), dim=dim)
    assert got.dtype == getattr(tg, name)
    exact = x.astype(np.float64).sum(axis=dim)
    copy = x.astype(np.float32).sum(axis=dim).astype(HALF[name])  # a float32 copy, rounded
    err = np.abs(got.numpy().astype(np.float64) - exact)
    assert np.all(err <= np.abs(copy.astype(np.float64) - exact) + np.spacing(
        np.abs(copy).astype(HALF[name])).astype(np.float64))
    ref = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, name))
    ref = (ref.sum() if dim is None else ref.sum(dim=dim)).float().numpy()
    np.testing.assert_allclose(got.float().numpy(), ref, rtol=2e-2 if name == "bfloat16"
                               else 2e-3, atol=1e-1)


def test_sum_keepdim_and_out_rows_exact():
    # a reduction that leaves the leading axis out sums each row as a float32 copy does
    x = np.random.default_rng(3).standard_normal((64, 5000)).astype(HALF["bfloat16"])
    got = tg.sum(tg.tensor(x), dim=1, keepdim=True).numpy()
    ref = x.astype(np.float32).sum(axis=1, keepdims=True).astype(x.dtype)
    _same(got, ref)
