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
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")

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


def check_same(op, devs):
    """RuntimeError naming both devices if an op mixes them."""
    first = devs[0]
    for d in devs[1:]:
        if d != first:
            raise RuntimeError(f"{op}: expected all tensors on the same device, "
                               f"but found at least two devices, {first} and {d}")


def special(name, array, n=None):
    """A special function (erf, erfc, erfinv, lgamma, digamma; polygamma of order ``n``)
    applied on the array's own device."""
    if isinstance(array, (np.ndarray, np.generic)):
        from . import cpu
        array = np.asarray(array)
        if array.dtype.kind != "f":
            array = array.astype(np.float64)
        if name in ("digamma", "polygamma", "erfinv"):
            from .cpu_kernels import special as kernels
            if name == "erfinv":
                return kernels.erfinv(array, array.dtype)
            return (kernels.digamma(array, array.dtype) if name == "digamma"
                    else kernels.polygamma(n, array, array.dtype))
        return cpu.special(name)(array)
    from . import cuda
    import importlib
    sp = importlib.import_module("cupyx.scipy.special")
    cuda.check_available()
    if name == "lgamma":
        return sp.gammaln(array)
    return sp.polygamma(n, array) if name == "polygamma" else getattr(sp, name)(array)


def igamma(a, x, upper):
    """The regularized lower (upper=False) or upper incomplete gamma function of
    ``a`` and ``x`` (broadcast), in their dtype on their device (CUDA: CuPy's)."""
    if isinstance(x, (np.ndarray, np.generic)):
        from .cpu_kernels import special as kernels
        dt = np.result_type(np.asarray(a).dtype, np.asarray(x).dtype)
        with np.errstate(all="ignore"):
            return kernels.igamma(a, x, upper, dt)
    import importlib
    sp = importlib.import_module("cupyx.scipy.special")
    return sp.gammaincc(a, x) if upper else sp.gammainc(a, x)


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
        return np.asarray(generator.standard_gamma(a.astype(np.float64))).astype(a.dtype, copy=False)
    from . import cuda
    cp = cuda.cupy()
    host = np.asarray(generator.standard_gamma(cp.asnumpy(alpha).astype(np.float64)))
    return cp.asarray(host.astype(alpha.dtype, copy=False))


def add_at(out, index, values):
    """``out[index] += values`` with repeated indices accumulating, on any device."""
    if isinstance(out, np.ndarray):
        np.add.at(out, index, values)
    else:
        import importlib
        importlib.import_module("cupyx").scatter_add(out, index, values)


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
