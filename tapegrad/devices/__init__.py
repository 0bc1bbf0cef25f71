"""Devices: which array library holds a buffer, and the mixed-device check.

CPU buffers are NumPy arrays; CUDA buffers are CuPy arrays. CuPy is imported lazily
by ``devices.cuda`` so that everything works without it.
"""
import os

import numpy as np

__all__ = ["Device", "device", "device_of", "xp", "CPU", "check_same"]


class Device:
    """``tg.device("cpu")``, ``tg.device("cuda")``, ``tg.device("cuda:1")``."""
    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):
        if isinstance(type, Device):
            type, index = type.type, type.index
        elif isinstance(type, str) and ":" in type:
            type, _, idx = type.partition(":")
            try:
                index = int(idx)
            except ValueError:
                raise ValueError(f"device: invalid device string {type}:{idx!r}") from None
        if type not in ("cpu", "cuda"):
            raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {type!r}")
        if type == "cuda" and index is None:
            index = 0
        self.type, self.index = type, index

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None
                                               else ")")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = Device(other)
            except ValueError:
                return False
        return isinstance(other, Device) and self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))


CPU = Device("cpu")
_CUDA = {}


def device(spec="cpu", index=None):
    """Parse a device spec (str, Device, or int meaning a CUDA index)."""
    if spec is None:
        return CPU
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        return cuda_device(spec)
    d = Device(spec, index)
    return CPU if d.type == "cpu" else cuda_device(d.index)


def cuda_device(index):
    d = _CUDA.get(index)
    if d is None:
        d = _CUDA[index] = Device("cuda", index)
    return d


def device_of(array):
    """The Device a raw buffer lives on (NumPy -> cpu, CuPy -> cuda:N)."""
    if type(array) is np.ndarray or isinstance(array, (np.ndarray, np.generic)):
        return CPU
    dev = getattr(array, "device", None)
    if dev is not None and type(array).__module__.startswith("cupy"):
        return cuda_device(int(getattr(dev, "id", 0)))
    return CPU


def xp(dev):
    """The array namespace of a device: numpy or cupy."""
    if dev.type == "cpu":
        return np
    from . import cuda
    return cuda.cupy()


def xp_of(array):
    """The array namespace of a raw buffer."""
    if isinstance(array, np.ndarray):
        return np
    from . import cuda
    return cuda.cupy() if cuda.is_cupy(array) else np


def owner(array):
    """The array that owns ``array``'s memory (its ``.base`` chain followed to the
    end; NumPy and CuPy): two arrays share memory only if their owners are one. A
    NumPy reshape that had to copy returns a view of its fresh copy, so a result's
    ``.base`` alone does not say it aliases its input."""
    base = getattr(array, "base", None)
    while base is not None:
        array, base = base, getattr(base, "base", None)
    return array


def address(array):
    """The address of ``array``'s first element (a NumPy array or scalar, or a CuPy
    array): two arrays of one shape, strides and dtype at one address are the same
    elements."""
    if isinstance(array, (np.ndarray, np.generic)):
        return array.__array_interface__["data"][0]
    return int(array.data.ptr)


def check_same(op, devs):
    """RuntimeError naming both devices if an op mixes them."""
    first = devs[0]
    for d in devs[1:]:
        if d != first:
            raise RuntimeError(f"{op}: expected all tensors on the same device, "
                               f"but found at least two devices, {first} and {d}")


def special(name, array, n=None, out=None):
    """A special function (erf, erfc, erfinv, lgamma, digamma; polygamma of order ``n``)
    applied on the array's own device; written into ``out`` when given (an array of
    the result's shape and a floating dtype; it may be ``array`` itself)."""
    if isinstance(array, (np.ndarray, np.generic)):
        from . import cpu
        array = np.asarray(array)
        if array.dtype.kind != "f":
            array = array.astype(np.float64)
        if name in ("digamma", "polygamma", "erfinv"):
            from .cpu_kernels import special as kernels
            if name == "erfinv":
                return kernels.erfinv(array, array.dtype, out=out)
            return (kernels.digamma(array, array.dtype, out=out) if name == "digamma"
                    else kernels.polygamma(n, array, array.dtype, out=out))
        return cpu.special(name)(array) if out is None else cpu.special(name)(array, out=out)
    import importlib

    from . import cuda
    sp = importlib.import_module("cupyx.scipy.special")
    cuda.check_available()
    if name == "polygamma":  # (a Python function over ufuncs: computed, then copied)
        r = sp.polygamma(n, array)
        if out is None:
            return r
        out[...] = r
        return out
    fn = sp.gammaln if name == "lgamma" else getattr(sp, name)  # CuPy ufuncs
    return fn(array) if out is None else fn(array, out=out)


def igamma(a, x, upper, out=None):
    """The regularized lower (upper=False) or upper incomplete gamma function of
    ``a`` and ``x`` (broadcast), in their dtype on their device (CUDA: CuPy's);
    written into ``out`` when given."""
    if isinstance(x, (np.ndarray, np.generic)):
        from .cpu_kernels import special as kernels
        dt = np.result_type(np.asarray(a).dtype, np.asarray(x).dtype)
        with np.errstate(all="ignore"):
            return kernels.igamma(a, x, upper, dt, out=out)
    import importlib
    sp = importlib.import_module("cupyx.scipy.special")
    fn = sp.gammaincc if upper else sp.gammainc  # CuPy ufuncs
    return fn(a, x) if out is None else fn(a, x, out=out)


def gamma_grad(alpha, x):
    """dx/dalpha of standard Gamma(alpha) samples ``x`` (implicit reparameterisation),
    in ``x``'s dtype on its device (CUDA arrays are computed on the host)."""
    from .cpu_kernels import special as kernels
    if isinstance(x, (np.ndarray, np.generic)):
        return kernels.gamma_grad(alpha, x, np.asarray(x).dtype)
    from . import cuda
    cp = cuda.cupy()
    return cp.asarray(kernels.gamma_grad(cp.asnumpy(alpha), cp.asnumpy(x), x.dtype))


def standard_gamma(generator, alpha):
    """Standard Gamma(alpha) draws, one per element, from NumPy ``generator`` (so
    ``tg.manual_seed`` governs them on every device), in ``alpha``'s dtype and device."""
    if isinstance(alpha, (np.ndarray, np.generic)):
        a = np.asarray(alpha)
        drawn = np.asarray(generator.standard_gamma(a.astype(np.float64)))
        return drawn.astype(a.dtype, copy=False)
    from . import cuda
    cp = cuda.cupy()
    host = np.asarray(generator.standard_gamma(cp.asnumpy(alpha).astype(np.float64)))
    return cp.asarray(host.astype(alpha.dtype, copy=False))


def flat_positions(shape, index):
    """The C-order flat positions that NumPy's ``a[index]`` reads from an array of
    ``shape``, as an int64 array of the indexed result's shape; None where ``index``
    is not of the form handled: leading full slices (``:``), then a block of integer
    or bool arrays, then nothing (the remaining dims taken whole). Negative indices
    wrap; one out of range raises IndexError, as NumPy.

    One ``take``/``put``/1-D ``np.add.at`` on these positions is 2-5x faster than
    NumPy's multi-array advanced indexing (``np.add.at`` with a tuple index is ~6x
    slower than its 1-D form)."""
    if not isinstance(index, tuple):
        index = (index,)
    shape = tuple(int(s) for s in shape)
    def whole(i):
        return i is Ellipsis or (isinstance(i, slice) and i == slice(None))
    end = len(index)
    while end and whole(index[end - 1]):  # trailing ``:`` change nothing
        end -= 1
    p = 0
    while p < end and isinstance(index[p], slice) and index[p] == slice(None):
        p += 1
    arrays = []
    for ix in index[p:end]:
        if type(ix) is not np.ndarray:
            return None
        if ix.dtype == np.bool_:
            at = p + len(arrays)
            if not ix.ndim or ix.shape != shape[at:at + ix.ndim]:
                return None  # NumPy's own error
            arrays.extend(np.nonzero(ix))
        elif ix.dtype.kind in "iu":
            arrays.append(ix)
        else:
            return None
    k = len(arrays)
    if not k or p + k > len(shape):
        return None
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    adv = None
    for j, ix in enumerate(arrays):
        n = shape[p + j]
        # a broadcast index (stride 0 along some dims) is read and computed on once,
        # as its one copy along those dims; the sum below broadcasts it back
        ix = ix[tuple(slice(0, 1) if st == 0 and m > 1 else slice(None)
                      for st, m in zip(ix.strides, ix.shape))]
        if ix.size:
            lo, hi = int(ix.min()), int(ix.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of bounds for axis {p + j} with size {n}")
            if lo < 0:
                ix = np.where(ix < 0, ix + n, ix)
        term = ix.astype(np.int64, copy=False) * strides[p + j] if strides[p + j] != 1 \
            else ix.astype(np.int64, copy=False)
        adv = term if adv is None else adv + term
    bshape = np.broadcast_shapes(*[a.shape for a in arrays])
    tail = len(shape) - p - k
    pos = adv.reshape((1,) * p + adv.shape + (1,) * tail)
    for d in range(p):
        pos = pos + (np.arange(shape[d], dtype=np.int64) * strides[d]).reshape(
            (1,) * d + (shape[d],) + (1,) * (p - d - 1 + len(bshape) + tail))
    for m in range(tail):
        d = p + k + m
        pos = pos + (np.arange(shape[d], dtype=np.int64) * strides[d]).reshape(
            (1,) * (p + len(bshape) + m) + (shape[d],) + (1,) * (tail - m - 1))
    out_shape = shape[:p] + bshape + shape[p + k:]
    return pos if pos.shape == out_shape else np.broadcast_to(pos, out_shape)


def slice_index(ndim, index):
    """``(d, ix)`` when ``index`` reads whole slices along one dim: ``d`` full slices,
    one 1-D integer array ``ix``, then full slices or nothing; else None."""
    if not isinstance(index, tuple):
        index = (index,)
    d = 0
    while d < len(index) and isinstance(index[d], slice) and index[d] == slice(None):
        d += 1
    if d >= min(len(index), ndim):
        return None
    ix = index[d]
    if type(ix) is not np.ndarray or ix.ndim != 1 or ix.dtype.kind not in "iu" or not all(
            i is Ellipsis or (isinstance(i, slice) and i == slice(None)) for i in index[d + 1:]):
        return None
    return d, ix


def _add_slices(out, d, ix, values):
    """``out[(:,) * d + (ix,)] += values`` (repeats accumulate) as one compiled loop
    over (before, along, after) views; False where it does not apply."""
    from .cpu_kernels import scatter
    n = out.shape[d]
    if ix.size:
        lo, hi = int(ix.min()), int(ix.max())
        if lo < -n or hi >= n:
            raise IndexError(f"index {lo if lo < -n else hi} is out of bounds for axis {d} "
                             f"with size {n}")
        if lo < 0:
            ix = np.where(ix < 0, ix + n, ix)
    pre, post = int(np.prod(out.shape[:d])), int(np.prod(out.shape[d + 1:]))
    want = out.shape[:d] + (ix.size,) + out.shape[d + 1:]
    vals = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=out.dtype), want))
    return scatter.add_rows(out.reshape(pre, n, post), ix.astype(np.int64, copy=False),
                            vals.reshape(pre, ix.size, post))


def add_at(out, index, values):
    """``out[index] += values`` with repeated indices accumulating, on any device."""
    if isinstance(out, np.ndarray):
        sl = slice_index(out.ndim, index) if out.flags.c_contiguous else None
        if sl is not None and _add_slices(out, sl[0], sl[1], values):
            return
        pos = flat_positions(out.shape, index) if out.flags.c_contiguous and \
            out.dtype.kind in "iufc" else None
        if pos is None:
            np.add.at(out, index, values)
        else:  # one compiled loop, or NumPy's fast 1-D form of add.at
            from .cpu_kernels import scatter
            vals = np.broadcast_to(np.asarray(values, dtype=out.dtype), pos.shape)
            flat, pos, vals = out.reshape(-1), pos.reshape(-1), vals.reshape(-1)
            if not scatter.add_flat(flat, pos, vals):
                np.add.at(flat, pos, vals)
    else:
        import importlib
        importlib.import_module("cupyx").scatter_add(out, index, values)


def coo_mm(rows, cols, vals, b, out):
    """``out += A @ b`` for the sparse COO matrix ``A`` (``rows``, ``cols``, ``vals``)
    and a dense 2-D ``b``, on any device, without making ``A`` dense: a compiled loop
    over the stored elements on CPU, ``cupyx.scipy.sparse`` on CUDA, else
    ``np.add.at`` of the products row by row."""
    if isinstance(out, np.ndarray):
        from .cpu_kernels import sparse
        if sparse.coo_mm(rows, cols, vals, b, out):
            return
        np.add.at(out, rows, vals[:, None] * b[cols])
        return
    import importlib
    cusparse = importlib.import_module("cupyx.scipy.sparse")
    a = cusparse.coo_matrix((vals, (rows, cols)), shape=(out.shape[0], b.shape[0]))
    out += a @ b


def reduce_at(out, index, values, how):
    """``out[index] = how(out[index], values)`` with repeated indices reducing in turn
    (``how``: "add", "multiply", "maximum", "minimum"), on any device."""
    if isinstance(out, np.ndarray):
        getattr(np, how).at(out, index, values)
        return
    import importlib
    cupyx = importlib.import_module("cupyx")
    fn = {"add": "scatter_add", "maximum": "scatter_max", "minimum": "scatter_min"}.get(how)
    if fn is not None:
        getattr(cupyx, fn)(out, index, values)
        return
    # no CuPy scatter-multiply: reduce on the host and write back
    host = out.get()
    getattr(np, how).at(host, tuple(i.get() if hasattr(i, "get") else i for i in index)
                        if isinstance(index, tuple) else index.get(),
                        values.get() if hasattr(values, "get") else values)
    out[...] = xp_of(out).asarray(host)


def all_finite(array):
    """(finite?, 'nan' or 'inf') for a float buffer on any device."""
    xp_ = xp_of(array)
    if bool(xp_.isfinite(array).all()):
        return True, None
    return False, "nan" if bool(xp_.isnan(array).any()) else "inf"


def _physical_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no bound known
        return None


_PHYSICAL = _physical_bytes()


def check_alloc(op, shape, dtype):
    """Refuse, before allocating it, a result larger than this machine's memory: a
    RuntimeError in the op's terms (PyTorch's class), not NumPy's bare MemoryError."""
    n = 1
    for s in shape:
        n *= int(s)
    nbytes = n * np.dtype(dtype).itemsize
    if _PHYSICAL is not None and nbytes > _PHYSICAL:
        raise RuntimeError(f"{op}: not enough memory: a result of shape {tuple(shape)} and "
                           f"dtype {np.dtype(dtype).name} needs {nbytes} bytes, more than this "
                           f"machine's {_PHYSICAL}")


_PIECE_BYTES = 1024  # a Tensor, its array view and their dicts: well under 1 KiB each


def check_pieces(op, n):
    """Refuse, before making them, a tuple of ``n`` Tensors (split, unbind...) larger
    than this machine's memory: a huge broadcast view split into 2**39 pieces is a
    RuntimeError naming the op, not an hour of allocation."""
    if _PHYSICAL is not None and int(n) * _PIECE_BYTES > _PHYSICAL:
        raise RuntimeError(f"{op}: not enough memory: {int(n)} pieces of about "
                           f"{_PIECE_BYTES} bytes each are more than this machine's "
                           f"{_PHYSICAL} bytes")
