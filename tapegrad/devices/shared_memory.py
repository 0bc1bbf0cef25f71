"""Host arrays in POSIX shared memory (``Tensor.share_memory_``, tensors passed
between processes): a forked child inherits a segment's mapping, any other process
maps it by name."""
import atexit
import mmap
import os
import secrets
import weakref

import numpy as np

try:
    import _posixshmem
except ImportError:  # pragma: no cover - not a POSIX system
    _posixshmem = None

__all__ = ["share", "is_shared", "describe", "attach"]

_OWNED = {}  # segment name -> the pid that unlinks it (its creator, or who adopted it)
_MAPS = {}  # id(mmap) -> the _Segment mapping it in this process
_ATTACHED = {}  # segment name -> a weak reference to this process's mapping of it


class _Segment:
    """One shared-memory segment mapped into this process (the owner of the mmap a
    shared array views)."""
    __slots__ = ("name", "map", "__weakref__")

    def __init__(self, name, size, create):
        if _posixshmem is None:  # pragma: no cover
            raise RuntimeError("share_memory_: this platform has no POSIX shared memory")
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name = name
        _MAPS[id(self.map)] = self
        if create:
            _OWNED[name] = os.getpid()
            weakref.finalize(self, _unlink, name)


def _unlink(name):
    """Remove the segment's name (mappings stay valid) if this process unlinks it."""
    if _OWNED.get(name) == os.getpid():
        del _OWNED[name]
        try:
            _posixshmem.shm_unlink("/" + name)
        except OSError:
            pass


@atexit.register
def _unlink_all():
    for name in list(_OWNED):
        _unlink(name)


def _segment_of(a):
    while isinstance(a, np.ndarray):
        a = a.base
    if isinstance(a, mmap.mmap):
        seg = _MAPS.get(id(a))
        if seg is not None and seg.map is a:
            return seg
    return None


def is_shared(a):
    """Whether array ``a`` lives in shared memory (a device array always counts, as
    PyTorch's CUDA tensors)."""
    return not isinstance(a, np.ndarray) or _segment_of(a) is not None


def share(a):
    """``a`` itself if it is shared, else a copy of it in a new shared segment."""
    if is_shared(a):
        return a
    seg = _Segment(f"tg_{os.getpid()}_{secrets.token_hex(6)}", max(a.nbytes, 1), True)
    out = np.ndarray(a.shape, dtype=a.dtype, buffer=seg.map)
    out[...] = a
    return out


def describe(a):
    """What another process needs to map shared array ``a``: (segment name, size,
    shape, dtype, strides, byte offset)."""
    seg = _segment_of(a)
    if seg is None:
        raise ValueError("describe: the array is not in shared memory (share it first)")
    start = np.frombuffer(seg.map, dtype=np.uint8).__array_interface__["data"][0]
    return (seg.name, len(seg.map), a.shape, a.dtype.str, a.strides,
            a.__array_interface__["data"][0] - start)


def attach(name, size, shape, dtype, strides, offset):
    """The array ``describe`` gave, on this process's mapping of its segment. A
    segment a child made (a forked child exits without cleaning up) is unlinked by
    this process at its exit."""
    ref = _ATTACHED.get(name)
    seg = ref() if ref is not None else None
    if seg is None:
        seg = _Segment(name, size, False)
        _ATTACHED[name] = weakref.ref(seg)
        creator = int(name.split("_")[1])
        if creator not in (os.getpid(), os.getppid()) and name not in _OWNED:
            _OWNED[name] = os.getpid()
    return np.ndarray(shape, dtype=np.dtype(dtype), buffer=seg.map, offset=offset,
                      strides=strides)
