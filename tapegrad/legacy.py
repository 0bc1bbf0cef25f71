"""PyTorch's legacy tensor types: ``tg.FloatTensor([1, 2])`` (data), ``tg.FloatTensor(3, 4)``
(a shape; zeros, where PyTorch leaves memory uninitialized), ``isinstance(t,
tg.FloatTensor)`` (a CPU tensor of that dtype), and ``t.type(tg.FloatTensor)``; and the
legacy forms of the ``tg.Tensor`` class itself (``tensor_new``)."""
import numpy as np

from . import dtypes as _dt
from .ops import creation as _C
from .tensor import Size, Tensor, buffer, install_legacy_constructor

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor",
           "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"]


class _LegacyType(type):
    def __call__(cls, *args, device=None):
        if len(args) == 1 and not isinstance(args[0], int):
            data = args[0]
            if isinstance(data, Tensor):
                return _C.to(data, dtype=cls.dtype)
            return _C.tensor(data, dtype=cls.dtype, device=device)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return _C.zeros(tuple(args), dtype=cls.dtype, device=device)
        if len(args) == 1 and isinstance(args[0], tuple):
            return _C.zeros(args[0], dtype=cls.dtype, device=device)
        raise TypeError(f"{cls.__name__}(): expected a sequence of data or the sizes as ints, "
                        f"got ({', '.join(type(a).__name__ for a in args)})")

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == "cpu"

    def __repr__(cls):
        return f"<class 'tapegrad.{cls.__name__}'>"


def _make(name, dtype):
    return _LegacyType(name, (), {"dtype": dtype, "__doc__": f"Legacy constructor of "
                                                              f"{dtype} tensors."})


FloatTensor = _make("FloatTensor", _dt.float32)
DoubleTensor = _make("DoubleTensor", _dt.float64)
HalfTensor = _make("HalfTensor", _dt.float16)
LongTensor = _make("LongTensor", _dt.int64)
IntTensor = _make("IntTensor", _dt.int32)
ShortTensor = _make("ShortTensor", _dt.int16)
CharTensor = _make("CharTensor", _dt.int8)
ByteTensor = _make("ByteTensor", _dt.uint8)
BoolTensor = _make("BoolTensor", _dt.bool)


def tensor_new(data, sizes):
    """The array of PyTorch's legacy ``torch.Tensor(...)`` forms, for ``Tensor.__init__``
    given anything but an array: ``Tensor(3, 4)`` / ``Tensor(Size([3, 4]))``
    (uninitialised, of the default dtype, as PyTorch), ``Tensor()`` (empty),
    ``Tensor([1, 2])`` (data, of the default dtype), ``Tensor(t)`` (t's buffer, shared)."""
    dt = _dt.get_default_dtype().np
    args = (() if data is None else (data,)) + tuple(sizes)
    if not args:
        return np.empty((0,), dt)
    if all(isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))
           for a in args) or (len(args) == 1 and isinstance(data, Size)):
        shape = tuple(int(a) for a in (data if isinstance(data, Size) else args))
        if any(n < 0 for n in shape):
            raise RuntimeError(f"Trying to create tensor with negative dimension "
                               f"{min(shape)}: {list(shape)}")
        return np.empty(shape, dt)
    if len(args) == 1:
        if isinstance(data, Tensor):
            return buffer(data)
        if isinstance(data, (str, bytes, dict)) or not hasattr(data, "__iter__"):
            raise TypeError(f"Tensor(): data must be a sequence (got {type(data).__name__})")
        return buffer(_C.tensor(data, dtype=dt))
    bad = next(a for a in args if not isinstance(a, (int, np.integer)) or isinstance(a, bool))
    raise TypeError(f"Tensor(): expected a sequence of data or the sizes as ints, got an "
                    f"argument of type '{type(bad).__name__}' among "
                    f"({', '.join(type(a).__name__ for a in args)})")


install_legacy_constructor(tensor_new)
