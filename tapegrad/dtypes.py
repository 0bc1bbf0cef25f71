"""dtype objects, the default dtype, and array-API type promotion.

A tapegrad dtype wraps a NumPy dtype (CuPy uses the same dtype objects), compares
equal to it, and prints as PyTorch does (``tapegrad.float32``). ``bfloat16`` is
``ml_dtypes``' NumPy dtype; NumPy gives it the kind letter ``"V"``, so code asks
``is_float(np_dtype)`` rather than comparing the kind with ``"f"``.

ml_dtypes is imported when bfloat16 is first needed, not with tapegrad: its import
registers the casts and ufunc loops of a dozen dtypes with NumPy, about half a second
of CPU in every process (each test worker, MPI rank and subprocess). Until then
``BF16`` is a stand-in dtype no array has, so ``dt is BF16`` and ``dt in LOW`` answer
False, as they must: no bfloat16 array exists before ml_dtypes is imported. Whoever
imports it (``tg.bfloat16.np``, a cast to bfloat16, JAX, the user), ``BF16``,
``LOW``, ``LOW_SET`` and ``tg.bfloat16`` are bound to ml_dtypes' dtype as its import
finishes (``_BindOnImport``). Code reads them from this module when it runs (``_dt.BF16``),
never copies them at import; a table keyed by them registers with ``on_bfloat16``.
"""
import sys
import threading

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


# bfloat16's NumPy dtype (kind "V") once ml_dtypes is imported; until then a stand-in
BF16 = np.dtype([("bfloat16 before ml_dtypes is imported", np.uint16)])
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
LOW = (BF16, F16)  # half-width floats: computed in float32, rounded once per op
LOW_SET = frozenset(LOW)


def is_float(np_dtype):
    """Whether a NumPy dtype is a floating dtype (bfloat16 included)."""
    return np_dtype.kind == "f" or np_dtype is BF16


class _Bfloat16(DType):
    """``tg.bfloat16`` before ml_dtypes is imported: what it is needs no import, its
    ``np`` (or its hash, or a comparison with a NumPy dtype) imports ml_dtypes, which
    makes it a plain ``DType``."""
    __slots__ = ()

    def __init__(self):
        self.name = "bfloat16"
        self._kind = "f"
        self.is_floating_point = self.is_signed = True
        self.itemsize = 2

    @property
    def np(self):
        import ml_dtypes
        _bind(ml_dtypes)  # (done already by _BindOnImport, unless it was bypassed)
        return self.np


bfloat16 = _Bfloat16()
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
_BY_NP = {d.np: d for d in ALL if d is not bfloat16}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"half": float16, "float": float32, "double": float64, "long": int64,
                 "int": int32, "short": int16, "bool_": bool})

_default_float = [float32]
_bound = []  # the callbacks of on_bfloat16
_binding = threading.RLock()  # (a callback may register another)
_NP_SLOT = DType.np  # the slot under _Bfloat16's property


def on_bfloat16(callback):
    """Call ``callback(BF16)`` once bfloat16's NumPy dtype is known: now, if ml_dtypes
    is imported already, else when it is (for a module's table keyed by dtypes)."""
    with _binding:
        if type(bfloat16) is not DType:
            _bound.append(callback)
            return
    callback(BF16)


def _bind(ml_dtypes):
    """ml_dtypes is imported: bind ``BF16``, ``LOW``, ``LOW_SET`` and ``bfloat16``.

    In this order, under a lock: the tables of ``on_bfloat16``, then ``BF16`` and
    friends, then ``bfloat16.np``, and last ``bfloat16``'s class, which publishes it:
    another thread that sees ``tg.bfloat16`` bound finds everything it reads bound too
    (its ``np`` before, an AttributeError)."""
    global BF16, LOW, LOW_SET
    with _binding:
        if type(bfloat16) is DType:
            return
        bf16 = np.dtype(ml_dtypes.bfloat16)
        for callback in _bound:
            callback(bf16)
        del _bound[:]
        _BY_NP[bf16] = bfloat16
        BF16, LOW, LOW_SET = bf16, (bf16, F16), frozenset((bf16, F16))
        _NP_SLOT.__set__(bfloat16, bf16)
        bfloat16.__class__ = DType
    for finder in [f for f in sys.meta_path if isinstance(f, _BindOnImport)]:
        sys.meta_path.remove(finder)


class _BindOnImport:
    """A ``sys.meta_path`` finder that finds nothing itself: when ml_dtypes is imported
    (by anyone), it has the finder that would import it do so, and calls ``_bind`` once
    its module has run. It stays until then: ``importlib.util.find_spec("ml_dtypes")``
    (a library asking whether it is installed) finds a spec that is never run."""

    def find_spec(self, name, path=None, target=None):
        if name != "ml_dtypes":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None and finder is not self \
                else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            if module.__name__ == "ml_dtypes":  # (a loader may serve other modules)
                _bind(module)
        spec.loader.exec_module = exec_module
        return spec


if "ml_dtypes" in sys.modules:
    _bind(sys.modules["ml_dtypes"])
else:
    sys.meta_path.insert(0, _BindOnImport())


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
    if dtype is float:  # (PyTorch's and NumPy's: Python's float is a double)
        return float64
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
