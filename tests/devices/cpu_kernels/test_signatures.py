"""The library's Numba loops compile once per dtype: arrays of other layouts (F order,
strided views) and read-only arrays, bools and NumPy scalars convert to the declared
signature instead of compiling another specialization, and the results match NumPy's."""
import contextlib

import numpy as np
import pytest

from tapegrad.devices.cpu_kernels import scatter


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


@contextlib.contextmanager
def _compiles(fn):
    """Collects the Numba compiles of ``fn`` inside (into the yielded list)."""
    from numba.core import event
    with event.install_recorder("numba:compile") as rec:
        got = []
        yield got
    got += [e for e in rec.buffer if e[1].data["dispatcher"].py_func is fn]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_flat_one_specialization(dtype):
    r = np.random.default_rng(0)
    pos = r.integers(0, 50, 400)
    vals = r.normal(size=400).astype(dtype)
    want = np.zeros(50, dtype)
    np.add.at(want, pos, vals)
    for k, (p, v) in enumerate([(pos, vals), (_readonly(pos), _readonly(vals)),
                                (np.repeat(pos, 2)[::2], np.repeat(vals, 2)[::2])]):
        out = np.zeros(50, dtype)
        with _compiles(scatter._add_flat_loop) as got:
            assert scatter.add_flat(out, p, v)
        assert not (k and got)  # compiled (if not already) by the first call only
        np.testing.assert_allclose(out, want, rtol=1e-5)


def test_gather_and_scatter_dim_any_layout_one_specialization():
    r = np.random.default_rng(1)
    x = r.normal(size=(3, 7, 5))
    idx = r.integers(0, 7, (3, 4, 5))
    want = np.take_along_axis(x, idx, 1)
    for k, (xv, iv) in enumerate([(x, idx), (np.asfortranarray(x), _readonly(idx)),
                                  (_readonly(x), np.asfortranarray(idx))]):
        out = np.empty((3, 4, 5))
        with _compiles(scatter._gather_dim_loop) as got:
            assert scatter.gather_dim(xv, iv, out, negative_zero=bool(k % 2))
        assert not (k and got)
        np.testing.assert_array_equal(out, want)

    for k, (how, ufunc, src) in enumerate([("amax", np.maximum, x[:, :4]),
                                           ("prod", np.multiply, _readonly(x[:, :4]))]):
        out = np.ones((3, 7, 5))
        with _compiles(scatter._scatter_reduce_dim_loop) as got:
            assert scatter.scatter_reduce_dim(out, idx, src, how, True, np.float32(0))
        assert not (k and got)
        want = np.ones((3, 7, 5))
        p, _, q = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")
        ufunc.at(want, (p, idx, q), x[:, :4])
        np.testing.assert_allclose(out, want, rtol=1e-12)


def test_unaligned_array_still_computes():
    buf = np.zeros(8 * 20 + 1, np.uint8)
    out = buf[1:].view(np.float64)  # not aligned for float64
    assert not out.flags.aligned
    pos = np.arange(20) % 5
    vals = np.arange(20, dtype=np.float64)
    assert scatter.add_flat(out, pos, vals)
    want = np.zeros(20)
    np.add.at(want, pos, vals)
    np.testing.assert_array_equal(out, want)


def test_igamma_and_igammac_share_their_scalar_function():
    from tapegrad.devices.cpu_kernels import special
    special.ufunc("erfinv")  # the scalar functions compiled, rebound in the module
    scalar = special._igamma1.py_func
    with _compiles(scalar) as got:
        lo, up = special.ufunc("igamma"), special.ufunc("igammac")
    # a start and an end event per compile: the float64 one, which the float32 loops call too
    assert len(got) <= 2
    a = np.array([0.5, 2.0, 7.5])
    x = np.array([0.3, 2.5, 4.0])
    np.testing.assert_allclose(lo(a, x) + up(a, x), 1.0, rtol=1e-12)
    np.testing.assert_allclose(lo(a.astype(np.float32), x.astype(np.float32)) +
                               up(a.astype(np.float32), x.astype(np.float32)), 1.0, rtol=1e-5)
