"""GEMM called from compiled code (``devices/cpu_kernels/blas.py``): NumPy's OpenBLAS
handed to LLVM by name. Where NumPy's BLAS is one ``load`` finds (the wheels' OpenBLAS),
``gemm32``/``gemm64`` from a Numba loop equal NumPy's products, on row slices of wider
arrays and single rows; elsewhere ``load`` says no and the recurrent layers keep their
Python step loops (``tests/training/test_sequence_layers.py`` runs both)."""
import numpy as np
import pytest

from tapegrad.devices.cpu_kernels import blas


def _openblas_wheel():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return False
    return any(i.get("internal_api") == "openblas" and "numpy" in i.get("filepath", "")
               for i in threadpool_info())


def test_load_finds_numpys_openblas():
    assert blas.load() == _openblas_wheel()
    assert blas.load() == blas.load()  # (once per process)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_matches_numpy(dtype, trans_b):
    if not blas.load():
        assert not _openblas_wheel()
        return
    gemm = blas.gemm32 if dtype == np.float32 else blas.gemm64
    rng = np.random.default_rng(0)
    for m, k, n in [(5, 3, 4), (1, 7, 2), (3, 1, 1), (16, 64, 128)]:
        wide = rng.standard_normal((m + 2, k + 3)).astype(dtype)
        a = wide[1:m + 1, :k]                         # rows of a wider array
        b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
        big = np.full((m + 2, n + 5), 7.0, dtype)
        c = big[1:m + 1, 2:n + 2]
        gemm(a, b, c, trans_b)
        want = a @ (b.T if trans_b else b)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(c, want, rtol=tol, atol=tol * k)
        c[...] = 7.0
        assert (big == 7.0).all()                     # nothing outside c written
