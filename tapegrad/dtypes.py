"""dtype objects, the default dtype, and array-API type promotion.

A tapegrad dtype wraps a NumPy dtype (CuPy uses the same dtype objects), compares
equal to it, and prints as PyTorch does (``tapegrad.float32``). ``bfloat16`` is
``ml_dtypes``' NumPy dtype; NumPy gives it the kind letter ``"V"``, so code asks
``is_float(np_dtype)`` rather than comparing the kind with ``"f"``.
"""
import ml_dtypes
import numpy as np

__all__ = ["DType", "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32",
           "int64", "uint8", "bool", "get_default_dtype", "set_default_dtype",
           "as_dtype", "result_type", "promote_with_scalars"]

_builtin_bool = bool


class DType:
    """A tensor element type: ``tg.float32`` and friends."""
    __slots__ = ("name", "np", "is_floating_point", "is_signed", "itemsize", "_kind")

    def __init__(self, name, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)
        self._kind = "b" if self.np.kind == "b" else ("f" if is_float(self.np) else "i")
        self.is_floating_point = self._kind == "f"
        self.is_signed = self.np.kind in "if" or self._kind == "f"
        self.itemsize = self.np.itemsize

    def __repr__(self):
        return f"tapegrad.{self.name}"

    def __eq__(self, other):
        if isinstance(other, DType):
            return self is other
        try:
            return self.np == np.dtype(other)
        except TypeError:
            return False

    def __hash__(self):
        return hash(self.np)

    def __reduce__(self):
        return (as_dtype, (self.name,))


BF16 = np.dtype(ml_dtypes.bfloat16)  # the NumPy dtype (kind "V")
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
LOW = (BF16, F16)  # half-width floats: computed in float32, rounded once per op


def is_float(np_dtype):
    """Whether a NumPy dtype is a floating dtype (bfloat16 included)."""
    return np_dtype.kind == "f" or np_dtype is BF16


bfloat16 = DType("bfloat16", BF16)
float16 = DType("float16", np.float16)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int8 = DType("int8", np.int8)
int16 = DType("int16", np.int16)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
uint8 = DType("uint8", np.uint8)
bool = DType("bool", np.bool_)  # noqa: A001 - the public name is torch's

ALL = (bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8, bool)
_BY_NP = {d.np: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"half": float16, "float": float32, "double": float64, "long": int64,
                 "int": int32, "short": int16, "bool_": bool})

_default_float = [float32]


def get_default_dtype():
    """The dtype Python floats become (``tg.float32`` unless changed)."""
    return _default_float[0]


def set_default_dtype(dtype):
    """Set the default floating dtype; only floating dtypes are allowed (as PyTorch)."""
    d = as_dtype(dtype)
    if not d.is_floating_point:
        raise TypeError(f"set_default_dtype: only floating dtypes are allowed, got {d}")
    _default_float[0] = d


def as_dtype(dtype):
    """Turn a DType, NumPy dtype, Python type or name into a tapegrad DType."""
    if isinstance(dtype, DType):
        return dtype
    if dtype is float:
        return _default_float[0]
    if dtype is int:
        return int64
    if dtype is _builtin_bool:
        return bool
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    try:
        d = _BY_NP.get(np.dtype(dtype))
    except TypeError:
        d = None
    if d is None:
        raise TypeError(f"unsupported dtype {dtype!r}; tapegrad supports "
                        + ", ".join(x.name for x in ALL))
    return d


def from_np(np_dtype):
    """The DType of a NumPy dtype (fast path for Tensor.dtype)."""
    d = _BY_NP.get(np_dtype)
    if d is None:
        return as_dtype(np_dtype)
    return d


_KIND_ORDER = {"b": 0, "i": 1, "f": 2}


def kind_rank(np_dtype):
    """bool < int < float: the categories of PyTorch's promotion."""
    return 2 if np_dtype is BF16 else _KIND_ORDER.get(np_dtype.kind, 1)


def operands_type(dims, zero_dims, scalars):
    """PyTorch's result dtype of an op's operands: the dimensioned arrays' dtypes
    decide; 0-d arrays only when of a higher kind, then with their own dtype; Python
    scalars are weak (``promote_with_scalars``)."""
    if not dims:
        dims, zero_dims = zero_dims, []
    target = result_type(*dims)
    higher = [d for d in zero_dims if kind_rank(d) > kind_rank(target)]
    if higher:
        target = result_type(*higher)
    return promote_with_scalars(target, scalars) if scalars else target


def result_type(*dtypes):
    """Array-API promotion of NumPy dtypes; ints with floats give the float;
    bfloat16 with float16 gives float32 (PyTorch's table)."""
    out = dtypes[0]
    for d in dtypes[1:]:
        if d == out:
            continue
        ko, kd = kind_rank(out), kind_rank(d)
        if ko == kd:
            out = np.promote_types(out, d)
        elif kd > ko:
            out = d
    return out


def promote_with_scalars(np_dtype, scalars):
    """Dtype after combining a tensor dtype with weak Python scalars (array API).

    bool tensor + int -> int64; int/bool tensor + float -> the default float.
    """
    kind = "f" if np_dtype is BF16 else np_dtype.kind
    for s in scalars:
        t = type(s)
        if t is float or isinstance(s, (float, np.floating)):
            if kind != "f":
                return _default_float[0].np
        elif t is int:
            if kind == "b":
                np_dtype, kind = int64.np, "i"
        elif t is complex:
            raise TypeError("tapegrad does not support complex numbers")
    return np_dtype


def default_float_np():
    return _default_float[0].np
