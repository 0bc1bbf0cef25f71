"""Tensors in POSIX shared memory, and their passage between processes by name."""
import atexit
import mmap
import os
import secrets
import weakref
from multiprocessing.reduction import ForkingPickler

import numpy as np

try:
    import _posixshmem
except ImportError:  # pragma: no cover - not a POSIX system
    _posixshmem = None

_OWNED = {}  # segment name -> the pid that unlinks it (its creator, or who adopted it)
_MAPS = {}  # id(mmap) -> (segment name, mmap): the segments this process maps


class _Segment:
    """One shared-memory segment mapped into this process (the owner of the mmap a
    shared tensor's array views)."""
    __slots__ = ("name", "map", "__weakref__")

    def __init__(self, name, size, create):
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        if _posixshmem is None:  # pragma: no cover
            raise RuntimeError("share_memory_: this platform has no POSIX shared memory")
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name = name
        if create:
            _OWNED[name] = os.getpid()
            weakref.finalize(self, _unlink, name, os.getpid())


def _unlink(name, pid):
    if _OWNED.get(name) == pid == os.getpid():
        del _OWNED[name]
        try:
            _posixshmem.shm_unlink("/" + name)
        except OSError:
            pass


@atexit.register
def _unlink_all():
    for name, pid in list(_OWNED.items()):
        _unlink(name, pid)


def _array_on(segment, shape, dtype, strides=None, offset=0):
    a = np.ndarray(shape, dtype=dtype, buffer=segment.map, offset=offset, strides=strides)
    _MAPS[id(segment.map)] = segment
    return a


def _segment_of(a):
    """The segment ``a`` views (None: not one)."""
    while isinstance(a, np.ndarray):
        a = a.base
    if isinstance(a, mmap.mmap):
        seg = _MAPS.get(id(a))
        if seg is not None and seg.map is a:
            return seg
    return None


def is_shared(t):
    """Whether tensor ``t``'s values live in shared memory (a GPU tensor's always do,
    as PyTorch's CUDA tensors)."""
    data = t._data
    if not isinstance(data, np.ndarray):
        return True
    return _segment_of(data) is not None


def share_memory_(t):
    """Move ``t``'s values into a new shared-memory segment (in place: ``t`` keeps its
    identity, autograd links and version); a no-op for a tensor already shared."""
    if is_shared(t):
        return t
    data = t._data
    seg = _Segment(f"tg_{os.getpid()}_{secrets.token_hex(6)}", max(data.nbytes, 1), True)
    a = _array_on(seg, data.shape, data.dtype)
    a[...] = data
    t._data = a
    return t


def _offset(a, seg):
    base = np.frombuffer(seg.map, dtype=np.uint8)
    return a.__array_interface__["data"][0] - base.__array_interface__["data"][0]


def _rebuild(cls, name, size, shape, dtype, strides, offset, requires_grad):
    from ..tensor import Tensor
    seg = _ATTACHED.get(name)
    if seg is None or seg() is None:
        s = _Segment(name, size, False)
        _ATTACHED[name] = weakref.ref(s)
        creator = int(name.split("_")[1])
        if creator not in (os.getpid(), os.getppid()) and name not in _OWNED:
            # made by a child (a forked one exits without cleaning up): this process
            # unlinks it at its exit
            _OWNED[name] = os.getpid()
    else:
        s = seg()
    t = Tensor(_array_on(s, shape, np.dtype(dtype), strides, offset))
    if cls is not Tensor:
        t = cls(t, requires_grad=requires_grad) if _takes_requires_grad(cls) else cls(t)
    elif requires_grad:
        t.requires_grad_(True)
    return t


_ATTACHED = {}  # segment name -> a weak reference to this process's mapping of it


def _takes_requires_grad(cls):
    return getattr(cls, "__name__", "") == "Parameter"


def _reduce(t):
    """A tensor as its segment's name (moved into shared memory first): what a Queue
    or a spawned process's arguments carry."""
    if not isinstance(t._data, np.ndarray):
        return t.__reduce_ex__(4)  # a device tensor: its values, as tg.save pickles it
    share_memory_(t)
    a = t._data
    seg = _segment_of(a)
    return (_rebuild, (type(t), seg.name, len(seg.map), a.shape, a.dtype.str, a.strides,
                       _offset(a, seg), bool(t.requires_grad)))


def register(cls):
    """Send tensors of class ``cls`` between processes by their shared segment."""
    ForkingPickler.register(cls, _reduce)


def _register_all():
    from ..tensor import Tensor
    todo = [Tensor]
    while todo:
        cls = todo.pop()
        register(cls)
        todo.extend(cls.__subclasses__())


_register_all()
