"""GEMM called from compiled code: the CBLAS ``sgemm``/``dgemm`` of the OpenBLAS that
NumPy loaded, handed to LLVM by name (llvmlite's ``add_symbol``, as ``devices/mpi.py``
does for MPI: the compiled code names the symbol, so Numba's on-disk cache holds it).
A Numba loop that calls ``gemm32``/``gemm64`` per step (the recurrent layers' step
loops, ``ops/nn/rnn.py``) runs a whole sequence without returning to Python, and
without the GIL, so one such loop per thread can run on its own block of rows.

``load()`` -> True once the symbols are registered and a check product matched
NumPy's; False where NumPy's BLAS is not an OpenBLAS with the 64-bit-integer CBLAS
symbols this looks for (MKL, Accelerate, a system library): callers keep their Python
loops then. Numba is imported by ``load`` only.

In compiled code, ``gemm32(a, b, c, trans_b)`` (float32; ``gemm64`` float64):
``c = a @ b`` (``trans_b``: ``a @ b.T``) for 2-D arrays whose rows are contiguous
(row slices of a C-contiguous array qualify), ``c`` overwritten. BLAS uses the thread
count it has (``devices.cpu.blas_single_thread`` sets one).
"""
import ctypes
import os

__all__ = ["load", "gemm32", "gemm64", "VERSION", "numpy_openblas"]

VERSION = 2  # (generated kernels that call gemm32/gemm64 name it: a new one recompiles them)

# the CBLAS names of NumPy's OpenBLAS wheels (64-bit integers): scipy-openblas64
# (NumPy >= 2), openblas64_ (NumPy 1.x)
_NAMES = (("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_"),
          ("cblas_sgemm64_", "cblas_dgemm64_"))
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_state = []  # [True/False] once load() ran

# module-level functions (Numba caches them); their externals are set by _build
_sgemm = _dgemm = None
gemm32 = gemm64 = None


def _ld(x, size):
    # the leading dimension of 2-D ``x`` (a single row's stride can be anything: NumPy
    # calls such an array contiguous whatever it is)
    return max(1, x.strides[0] // size if x.shape[0] > 1 else x.shape[1])


def _gemm32(a, b, c, trans_b):
    _sgemm(_ROW_MAJOR, _NO_TRANS, _TRANS if trans_b else _NO_TRANS,
           c.shape[0], c.shape[1], a.shape[1], 1.0, a.ctypes.data, _ld(a, 4),
           b.ctypes.data, _ld(b, 4), 0.0, c.ctypes.data, _ld(c, 4))


def _gemm64(a, b, c, trans_b):
    _dgemm(_ROW_MAJOR, _NO_TRANS, _TRANS if trans_b else _NO_TRANS,
           c.shape[0], c.shape[1], a.shape[1], 1.0, a.ctypes.data, _ld(a, 8),
           b.ctypes.data, _ld(b, 8), 0.0, c.ctypes.data, _ld(c, 8))


def numpy_openblas():
    """The path of the OpenBLAS that NumPy's wheel ships (mapped into this process),
    or None."""
    import numpy
    root = os.path.dirname(os.path.abspath(numpy.__file__))  # (also numpy.libs/)
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split(None, 5)[5].strip() for line in fh
                     if line.count(" ") >= 5 and "openblas" in line}
    except OSError:
        return None
    for p in sorted(paths):
        if p.startswith(root) and ".so" in os.path.basename(p):
            return p
    return None


def _build():
    import llvmlite.binding as llvm
    import numba
    from numba.core import types

    i32, i64, p = types.int32, types.int64, types.uintp
    g = globals()
    for name, dt in (("_sgemm", types.float32), ("_dgemm", types.float64)):
        g[name] = types.ExternalFunction(
            f"tapegrad_cblas{name}", types.void(i32, i32, i32, i64, i64, i64, dt, p, i64, p,
                                                 i64, dt, p, i64))
    jit = numba.njit(cache=True, nogil=True, boundscheck=False)
    g["_ld"] = jit(_ld)
    g["gemm32"], g["gemm64"] = jit(_gemm32), jit(_gemm64)
    return llvm


def load():
    """Register NumPy's OpenBLAS GEMMs and compile (or load) ``gemm32``/``gemm64``;
    whether they can be used (see the module's docstring). Once per process."""
    if _state:
        return _state[0]
    _state.append(False)
    try:
        import numpy as np
        np.dot(np.ones((2, 2)), np.ones((2, 2)))  # (NumPy's BLAS is mapped by now)
        path = numpy_openblas()
        if path is None:
            return False
        lib = ctypes.CDLL(path)
        for s, d in _NAMES:
            if hasattr(lib, s) and hasattr(lib, d):
                addrs = [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in (s, d)]
                break
        else:
            return False
        llvm = _build()
        llvm.add_symbol("tapegrad_cblas_sgemm", addrs[0])
        llvm.add_symbol("tapegrad_cblas_dgemm", addrs[1])
        rng = np.random.default_rng(0)
        for dt, fn in ((np.float32, gemm32), (np.float64, gemm64)):
            a = rng.standard_normal((5, 3)).astype(dt)
            b = rng.standard_normal((4, 3)).astype(dt)
            big = np.zeros((7, 6), dt)
            c = big[1:6, :4]          # (rows of a wider array: its leading dimension)
            fn(a, b, c, True)
            c2 = np.empty((5, 3), dt)
            fn(a, np.ascontiguousarray(b[:3].T), c2, False)
            if not (np.allclose(c, a @ b.T, rtol=1e-5) and
                    np.allclose(c2, a @ b[:3].T, rtol=1e-5)) or big[0].any() or \
                    big[6].any() or big[:, 4:].any():
                return False
    except Exception:
        return False
    _state[0] = True
    return True
