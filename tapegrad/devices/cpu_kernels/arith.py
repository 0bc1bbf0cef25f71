"""Floating remainder and floor division as Numba loops on the CPU, PyTorch's formulas
(``aten/src/ATen/native/cpu/BinaryOpsKernel.cpp``): one ``fmod`` per element where
NumPy's ``divmod`` computes more, so ``remainder`` (the sign of the divisor) and
``floor_divide`` run several times faster than ``np.remainder``/``np.floor_divide``.

- fmod: float32 exactly in float64 arithmetic (``_fmod32``: several times libm's
  speed, bit for bit the same), float64 by libm;
- remainder: ``m = fmod(a, b)``, plus ``b`` where ``m`` is non-zero and its sign
  differs from ``b``'s (a zero keeps fmod's sign, as PyTorch; NumPy gives it b's);
- floor_divide: ``a / b`` where ``b == 0``; else ``d = (a - fmod(a, b)) / b``, less 1
  where the remainder's sign differs from ``b``'s, then ``floor(d)`` rounded up when
  ``d - floor(d) > 0.5``, and a zero quotient signed as ``a / b``.

Same-shape C-contiguous float32/float64 operands only (the op falls back to NumPy for
anything else); each loop compiles on first use (cached on disk by Numba).
"""
import numpy as np

from ..cpu import numba


def _fmod32(a, b):
    """C's ``fmod`` of two float32 numbers, exactly, without libm: in float64 the
    quotient's integer part (below 2^29) times ``b`` is exact, and so is ``a`` less it;
    a quotient rounded up to an integer is corrected by one ``b``. NaN, infinite and
    huge-quotient cases take ``np.fmod``."""
    x = np.float64(a)
    y = np.float64(b)
    if y == 0 or not np.isfinite(x) or np.isnan(y):
        return np.fmod(a, b)
    if np.isinf(y):
        return a
    q = np.trunc(x / y)
    if abs(q) >= 536870912.0:
        return np.fmod(a, b)
    r = x - q * y
    if r == 0:
        return np.float32(np.copysign(0.0, x))
    if (r < 0) != (x < 0):
        r += np.copysign(abs(y), x)
    return np.float32(r)


def _fmod64(a, b):
    return np.fmod(a, b)


def _fmod_loop(a, b, out, fmod):
    for i in range(a.size):
        out[i] = fmod(a[i], b[i])


def _remainder_loop(a, b, out, fmod):
    for i in range(a.size):
        x = a[i]
        y = b[i]
        m = fmod(x, y)
        if m != 0 and (y < 0) != (m < 0):
            m += y
        out[i] = m


def _floor_divide_loop(a, b, out, fmod):
    for i in range(a.size):
        x = a[i]
        y = b[i]
        if y == 0:
            out[i] = x / y
            continue
        m = fmod(x, y)
        d = (x - m) / y
        if m != 0 and (y < 0) != (m < 0):
            d -= 1
        if d != 0:
            f = np.floor(d)
            if d - f > 0.5:
                f += 1
            out[i] = f
        else:
            out[i] = np.copysign(0.0, x / y)


_compiled = {}


def _jit(fn):
    if fn.__name__ not in _compiled:
        _compiled[fn.__name__] = numba().njit(cache=True, nogil=True, error_model="numpy",
                                                  no_cfunc_wrapper=True)(fn)
    return _compiled[fn.__name__]


def fits(x, other, out=None):
    """Whether the loops take these operands: two float arrays of one shape and dtype,
    C-contiguous (``out`` too, when given), not overlapping ``out``."""
    if not (isinstance(x, np.ndarray) and isinstance(other, np.ndarray)):
        return False
    if x.dtype != other.dtype or x.dtype not in (np.float32, np.float64) or \
            x.shape != other.shape or not (x.flags.c_contiguous and other.flags.c_contiguous):
        return False
    if out is not None:
        return (isinstance(out, np.ndarray) and out.dtype == x.dtype and out.shape == x.shape
                and out.flags.c_contiguous and not np.may_share_memory(out, x)
                and not np.may_share_memory(out, other))
    return True


def _run(fn, x, other, out):
    res = np.empty_like(x) if out is None else out
    if x.size:
        fmod = _jit(_fmod32 if x.dtype == np.float32 else _fmod64)
        _jit(fn)(x.reshape(-1), other.reshape(-1), res.reshape(-1), fmod)
    return res


def remainder(x, other, out=None):
    return _run(_remainder_loop, x, other, out)


def floor_divide(x, other, out=None):
    return _run(_floor_divide_loop, x, other, out)


def fmod(x, other, out=None):
    """float32: the exact loop; float64: libm's, through NumPy (no faster here)."""
    if x.dtype == np.float64:
        return np.fmod(x, other) if out is None else np.fmod(x, other, out=out)
    return _run(_fmod_loop, x, other, out)
