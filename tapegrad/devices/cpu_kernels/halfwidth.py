"""Conversions between the half-width floats (bfloat16, float16) and float32 on the
CPU, as compiled loops.

NumPy converts float16 one element at a time through a scalar routine (about 2 ns an
element each way), and ml_dtypes' bfloat16 casts run on one thread; a half-width
matmul or conv widens its operands and rounds its result, so these casts cost as
much as the arithmetic. Here each element goes through ``jit_helpers``'
``bf16_load``/``f16_load`` (exact) and ``bf16_store``/``f16_store`` (round to
nearest-even, infinities kept, a NaN stays a quiet NaN of its sign), branch-free
integer code or the CPU's own float16 instructions, so the loops vectorise.

``to_float32(a)`` and ``from_float32(a, dtype)`` take any NumPy array and give what
``a.astype(...)`` gives (a new array of ``a``'s shape), through the compiled loop
where ``a``'s elements are one contiguous block of at least ``MIN_NUMEL`` and Numba
works, through NumPy otherwise. Arrays below ``2 * CHUNK`` elements convert on the
calling thread, larger ones in chunks over every thread.
"""
import numpy as np

from ... import dtypes as _dt
from .. import cpu as _cpu

MIN_NUMEL = 1 << 14  # below this NumPy's cast costs less than a call of the loop
# elements one thread converts at least: a cast moves 6 bytes an element at memory
# speed (~0.1 ms a million on one core), so handing chunks to other threads pays only
# for large arrays (and a thread busy elsewhere, BLAS's spinning after a GEMM, would
# hold the caller up)
CHUNK = 1 << 20
_F32 = np.dtype(np.float32)
_NAMES = {_dt.F16: "f16"}  # and bfloat16's, once ml_dtypes is imported
_dt.on_bfloat16(lambda bf16: _NAMES.__setitem__(bf16, "bf16"))
_kernels = {}
_warm = set()  # kernels called once (compiled or loaded)
_broken = []


def _kernel(direction, name):
    """The serial nogil loop converting ``name``'s uint16 bits to float32
    (``direction`` "load") or float32 to them ("store")."""
    key = (direction, name)
    fn = _kernels.get(key)
    if fn is None:
        tag = f"v{_cpu.HELPERS_VERSION}{' native half' if _cpu.native_half() else ''}"
        src = (f"from tapegrad.devices.cpu import jit_helpers as _jit  # {tag}\n"
               f"_conv = _jit().{name}_{direction}\n\n\n"
               "def kernel(n, a, o):\n"
               "    for i in range(n):\n"
               "        o[i] = _conv(a[i])\n")
        fn = _kernels[key] = _cpu.compile_source(("halfwidth-cast", src), src, "kernel",
                                                 parallel=False, fastmath=frozenset(),
                                                 error_model="numpy")
    return fn


def _flat(a):
    """``a``'s elements as one flat view and the order to lay the result out in
    (C or Fortran), or None where they are not one contiguous block."""
    if a.flags.c_contiguous:
        return a.reshape(-1), "C"
    if a.flags.f_contiguous:
        return a.T.reshape(-1), "F"
    return None


def _run(direction, name, src, dst):
    fn = _kernel(direction, name)
    n = src.shape[0]
    if n < 2 * CHUNK or (direction, name) not in _warm:
        fn(n, src, dst)  # (the first call compiles, or loads from the disk cache)
        _warm.add((direction, name))
    else:
        _cpu.run_chunked(fn, n, src, dst, min_chunk=CHUNK)


def to_float32(a):
    """``a`` (bfloat16 or float16) as a new float32 array, exactly."""
    name = _NAMES.get(a.dtype)
    return _convert(a, _F32, "load", name) if name is not None else a.astype(_F32)


def from_float32(a, dtype):
    """The float32 array ``a`` as a new ``dtype`` (bfloat16 or float16) array,
    each element rounded to nearest-even, as ``a.astype(dtype)``."""
    dtype = np.dtype(dtype)
    name = _NAMES.get(dtype)
    if name is None or a.dtype != _F32:
        return a.astype(dtype)
    return _convert(a, dtype, "store", name)


def _convert(a, dtype, direction, name):
    """``a.astype(dtype)`` through the compiled loop ``direction`` of ``name``
    where it applies."""
    flat = None
    if type(a) is np.ndarray and a.size >= MIN_NUMEL and not _broken:
        flat = _flat(a)
    if flat is None:
        return a.astype(dtype)
    src, order = flat
    out = np.empty(a.shape, dtype, order=order)
    dst = out.reshape(-1, order="A")
    try:
        if direction == "load":
            _run(direction, name, src.view(np.uint16), dst)
        else:
            _run(direction, name, src, dst.view(np.uint16))
    except Exception:  # Numba unusable: NumPy's cast still works
        _broken.append(True)
        return a.astype(dtype)
    return out


def astype(a, dtype):
    """``a.astype(dtype)`` for any array: between float32 and a half-width dtype on
    a NumPy array through ``to_float32``/``from_float32``. Any other source goes to a
    half-width dtype through float32, as PyTorch's conversions do (a double rounds to
    float first): a float64 rounded once straight to float16 differs in ~1 of 20,000."""
    dtype = np.dtype(dtype)
    if dtype in _NAMES and a.dtype not in _NAMES and a.dtype != _F32 and a.dtype.kind in "fiub":
        a = a.astype(_F32)
    if type(a) is np.ndarray:
        if dtype == _F32 and a.dtype in _NAMES:
            return to_float32(a)
        if dtype in _NAMES and a.dtype == _F32:
            return from_float32(a, dtype)
    return a.astype(dtype)


BLOCK = 1 << 15  # elements widened at a time by ``sum``: the float32 block stays in cache


def sum(a, dims, keepdim):  # noqa: A001
    """The sum of the half-width NumPy array ``a`` over ``dims`` (a tuple of its
    axes) as a float32 array, ``a`` widened a block at a time into one reused
    float32 buffer, never copied whole. A block is a run of whole slices along one
    axis (the cut axis; one block per index of the axes before it). Each block is
    summed by NumPy in float32; where no reduced axis is the cut axis or before it,
    that is each output element's whole sum, as on a float32 copy of ``a``;
    otherwise the blocks' partial sums add up in float64 and are rounded to float32
    once."""
    shape = a.shape
    n = a.size
    kept = tuple(s for i, s in enumerate(shape) if i not in dims)
    if n <= BLOCK:
        r = to_float32(a).sum(axis=dims, keepdims=keepdim)
        return np.asarray(r, _F32)
    if a.ndim > 1 and len(dims) == a.ndim and a.flags.c_contiguous:  # one flat run
        r = sum(a.reshape(-1), (0,), False)
        return r.reshape((1,) * a.ndim) if keepdim else r
    p, per = 0, n // shape[0]  # the cut axis; elements in one index along it
    while per > BLOCK and p < a.ndim - 1:
        p += 1
        per //= shape[p]
    step = max(1, BLOCK // per)
    sub = tuple(d - p for d in dims if d >= p)
    acc = np.zeros(tuple(1 if i in dims else s for i, s in enumerate(shape)), np.float64)
    buf = np.empty(min(step, shape[p]) * per, _F32)
    for idx in np.ndindex(*shape[:p]):
        src = a[idx]
        dst = acc[tuple(0 if i in dims else j for i, j in enumerate(idx))]
        for lo in range(0, shape[p], step):
            part = src[lo:lo + step]
            wide = buf[:part.size].reshape(part.shape)
            _widen_into(part, wide)
            s = wide.sum(axis=sub, keepdims=True)
            if p in dims:
                dst += s
            else:
                dst[lo:lo + step] += s
    out = acc.astype(_F32)
    return out if keepdim else out.reshape(kept)


def _widen_into(part, wide):
    """``wide[...] = part`` (half-width to float32), through the compiled loop where
    ``part`` is contiguous."""
    name = _NAMES[part.dtype]
    if not _broken and part.flags.c_contiguous and part.size >= MIN_NUMEL:
        try:
            fn = _kernel("load", name)
            fn(part.size, part.reshape(-1).view(np.uint16), wide.reshape(-1))
            return
        except Exception:  # Numba unusable: NumPy's cast still works
            _broken.append(True)
    wide[...] = part
