"""Float32 GEMM in register tiles (``devices/cpu_kernels/tiled_gemm.py``), the LSTM's
per-step product where the host has AVX-512: equal to NumPy's product in float64 for
every band of rows and columns the tiles leave over, on row slices of wider arrays,
writing nothing outside ``c``; where the host lacks AVX-512, ``load`` says no and the
LSTM's loops call BLAS (``tests/devices/cpu_kernels/test_blas.py``)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tapegrad.devices.cpu_kernels import tiled_gemm


def _host_avx512():
    import llvmlite.binding as llvm
    from numba.core import config
    return (config.CPU_NAME or "host") == "host" and not config.CPU_FEATURES and \
        bool(llvm.get_host_cpu_features().get("avx512f"))


def test_load_where_the_host_has_avx512():
    assert tiled_gemm.load() == _host_avx512()
    assert tiled_gemm.load() == tiled_gemm.load()  # (once per process)


def _check(m, k, n, trans_b, seed):
    rng = np.random.default_rng(seed)
    wide = rng.standard_normal((m + 2, k + 3)).astype(np.float32)
    a = wide[1:m + 1, :k]                             # rows of a wider array
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    big = np.full((m + 2, n + 5), 7.0, np.float32)
    c = big[1:m + 1, 2:n + 2]
    tiled_gemm.gemm32(a, b, c, trans_b)
    want = a.astype(np.float64) @ (b.T if trans_b else b)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * max(k, 1) ** 0.5 * 4)
    c[...] = 7.0
    assert (big == 7.0).all()                         # nothing outside c written


@pytest.mark.parametrize("m,k,n", [(16, 256, 1024), (16, 1024, 256), (32, 64, 96),
                                   (8, 1, 16), (7, 3, 47), (1, 0, 33), (0, 4, 4)])
def test_step_shapes_match_numpy(m, k, n):
    if not tiled_gemm.load():
        assert not _host_avx512()
        return
    _check(m, k, n, False, 0)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20), k=st.integers(0, 40), n=st.integers(1, 80),
       trans_b=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_any_shape_matches_numpy(m, k, n, trans_b, seed):
    if not tiled_gemm.load():
        assert not _host_avx512()
        return
    _check(m, k, n, trans_b, seed)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(0, 300), n=st.integers(1, 70),
       add=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_transposed_product_matches_numpy(m, k, n, add, seed):
    """``gemm32_tn(a, b, c, add)``: ``c (+)= a.T @ b`` (the recurrent weights' gradient
    over all steps), ``a`` columns of a wider array, k past one k-block."""
    if not tiled_gemm.load():
        assert not _host_avx512()
        return
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m + 3)).astype(np.float32)[:, 1:m + 1]
    b = rng.standard_normal((k, n)).astype(np.float32)
    big = np.full((m + 2, n + 5), 7.0, np.float32)
    c = big[1:m + 1, 2:n + 2]
    c[...] = rng.standard_normal((m, n))
    want = (c.astype(np.float64) if add else 0) + a.T.astype(np.float64) @ b
    tiled_gemm.gemm32_tn(a, b, c, add)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * max(k, 1) ** 0.5 * 4)
    c[...] = 7.0
    assert (big == 7.0).all()


def _forms(m, k, n, rng):
    """(name, a, b) of one product in each layout: rows by columns, columns by columns
    (``g.T @ x``), columns by rows, rows by rows (``x @ w.T``)."""
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    at, bt = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T
    return [("nn", a, b), ("tn", at, b), ("tt", at, bt), ("nt", a, bt)]


@pytest.mark.parametrize("m,k,n", [(32, 40, 48), (16, 4096, 16), (1024, 24, 64),
                                   (96, 300, 1040)])
def test_product_matches_numpy_and_its_transpose_bit_for_bit(m, k, n):
    """``product``: NumPy's product to float32 rounding in every layout; the same bits
    as the transposed product (a compiled program may compute either); ``out``
    written; rows by rows below ``NT_ROWS`` left to NumPy."""
    if not tiled_gemm.load():
        assert tiled_gemm.product(np.ones((16, 16), np.float32),
                                  np.ones((16, 16), np.float32)) is None
        return
    rng = np.random.default_rng(m + k + n)
    ref = None
    for name, a, b in _forms(m, k, n, rng):
        got = tiled_gemm.product(a, b)
        if m * n * k < tiled_gemm.MIN_WORK or \
                (name == "nt" and max(m, n) < tiled_gemm.NT_ROWS):
            assert got is None
            continue
        want = a.astype(np.float64) @ b
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * k ** 0.5 * 4)
        np.testing.assert_array_equal(tiled_gemm.product(b.T, a.T).T, got)
        if ref is not None:
            np.testing.assert_array_equal(got, ref)     # (one chain per element)
        ref = got
        out = np.full((m, n), 7.0, np.float32)
        assert tiled_gemm.product(a, b, out) is out
        np.testing.assert_array_equal(out, got)
        out_t = np.full((n, m), 7.0, np.float32).T      # (a layout the tiles don't write)
        assert tiled_gemm.product(a, b, out_t) is out_t
        np.testing.assert_array_equal(out_t, got)


def test_product_leaves_what_it_does_not_apply_to_numpy():
    """Not float32, fewer than 16 rows or columns, a count not a multiple of 16, too
    little work: None, and ``matmul`` gives NumPy's product."""
    rng = np.random.default_rng(0)
    cases = [((64, 64), (64, 64), np.float64), ((8, 4096), (4096, 64), np.float32),
             ((64, 4096), (4096, 40), np.float32), ((16, 8), (8, 16), np.float32)]
    for sa, sb, dt in cases:
        a, b = rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt)
        assert tiled_gemm.product(a, b) is None
        np.testing.assert_array_equal(tiled_gemm.matmul(a, b), a @ b)


def test_product_copies_both_operands_apart():
    """Operands that both need a contiguous copy, of one shape (each has its own scratch
    buffer, reused by the next product: no buffer of the result's size per call)."""
    if not tiled_gemm.load():
        return
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1024, 1024)).astype(np.float32)[::2, ::2]   # neither way
    b = rng.standard_normal((512, 512)).astype(np.float32).T            # w.T
    want = a.astype(np.float64) @ b
    for _ in range(2):
        np.testing.assert_allclose(tiled_gemm.product(a, b), want, rtol=1e-5, atol=1e-3)
