"""The Tensor's operators and methods, installed once from a table (``install``)."""

from .. import dtypes as _dt
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor, mark_written
from ..dispatch import apply_inplace, lane
from . import elementwise as E, reduce as R, shape as S, indexing as I, linalg as L
from . import creation as C, nn as N


def _r(fn):
    """Reflected binary operator: ``other OP self``."""
    def rop(self, other):
        return fn(other, self)
    return rop


def _inplace(op):
    def method(self, other, **attrs):
        if isinstance(other, Tensor) and other.dtype != self.dtype and not (
                self.dtype.is_floating_point or not other.dtype.is_floating_point):
            raise RuntimeError(f"{op.name}_: result type {other.dtype} can't be cast to the "
                               f"desired output type {self.dtype}")
        return apply_inplace(op, self, other, **attrs)
    return method


def _inplace_alpha(op):
    """``add_``/``sub_``: ``self op= alpha * other``, as PyTorch's."""
    plain = _inplace(op)

    def method(self, other, *, alpha=1):
        return plain(self, other if alpha == 1 else other * alpha)
    return method


def _truediv_inplace(self, other):
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"div_: result type Float can't be cast to the desired output type "
                           f"{self.dtype}")
    return apply_inplace(E.DIV, self, other)


def _unary_inplace(op):
    def method(self):
        return apply_inplace(op, self)
    return method


def _zero_(self):
    self._check_writable("zero_")
    if is_grad_enabled() and self.requires_grad and self._node is None:
        raise RuntimeError("zero_: a leaf Variable that requires grad is being used in an "
                           "in-place operation")
    self._data[...] = 0
    mark_written(self)
    if is_grad_enabled() and self._node is not None:
        self._node = None
        self.requires_grad = False
    return self


def _fill_(self, value):
    self._check_writable("fill_")
    if is_grad_enabled() and self.requires_grad and self._node is None:
        raise RuntimeError("fill_: a leaf Variable that requires grad is being used in an "
                           "in-place operation")
    if isinstance(value, Tensor) and value._vlevel is not None:
        raise RuntimeError("vmap: fill_: in-place fill with a vmapped value into a tensor "
                           "that is not vmapped is not possible; use full_like or where")
    self._data[...] = value._data if isinstance(value, Tensor) else value
    mark_written(self)
    return self


def _copy_(self, src, non_blocking=False):
    if not isinstance(src, Tensor):
        src = C.tensor(src)
    I.setitem(self, (Ellipsis,), src)
    return self


def _cast_method(dtype):
    def method(self, memory_format=None):
        return C.cast(self, dtype)
    return method


def _astype(self, dtype):
    return C.cast(self, dtype)


def _cuda(self, device=None, non_blocking=False):
    return C.to_device(self, "cuda" if device is None else device)


def _cpu(self):
    return C.to_device(self, "cpu")


def _view_method(self, *shape):
    if len(shape) == 1 and (isinstance(shape[0], _dt.DType) or not isinstance(shape[0], (int, tuple, list))):
        raise TypeError("view: reinterpreting dtypes is not supported; pass a shape")
    return S.view(self, *shape)


def _expand_as(self, other):
    return S.expand(self, *other.shape)


def _reshape_as(self, other):
    return S.reshape(self, tuple(other.shape))


def _type_as(self, other):
    return C.cast(self, other.dtype)


_direct = lane


_TABLE = {
    "__add__": _direct(E.ADD), "__radd__": _r(E.add), "__sub__": _direct(E.SUB), "__rsub__": _r(E.sub),
    "__mul__": _direct(E.MUL), "__rmul__": _r(E.mul), "__truediv__": _direct(E.DIV), "__rtruediv__": _r(E.div),
    "__floordiv__": E.floor_divide, "__rfloordiv__": _r(E.floor_divide),
    "__mod__": E.remainder, "__rmod__": _r(E.remainder),
    "__pow__": E.pow, "__rpow__": _r(E.pow), "__matmul__": _direct(L.MATMUL), "__rmatmul__": _r(L.matmul),
    "__neg__": _direct(E.NEG), "__pos__": lambda self: self, "__abs__": E.abs,
    "__eq__": E.eq, "__ne__": E.ne, "__lt__": E.lt, "__le__": E.le, "__gt__": E.gt, "__ge__": E.ge,
    "__and__": E.bitwise_and, "__rand__": _r(E.bitwise_and), "__or__": E.bitwise_or,
    "__ror__": _r(E.bitwise_or), "__xor__": E.bitwise_xor, "__rxor__": _r(E.bitwise_xor),
    "__invert__": E.bitwise_not,
    "__getitem__": I.getitem, "__setitem__": I.setitem,
    "__iadd__": _inplace(E.ADD), "__isub__": _inplace(E.SUB), "__imul__": _inplace(E.MUL),
    "__itruediv__": _truediv_inplace,
    "add_": _inplace_alpha(E.ADD), "sub_": _inplace_alpha(E.SUB), "mul_": _inplace(E.MUL),
    "div_": _truediv_inplace, "zero_": _zero_, "fill_": _fill_, "copy_": _copy_,
    "neg_": _unary_inplace(E.NEG), "exp_": _unary_inplace(E.EXP), "relu_": _unary_inplace(E.RELU),
    "sigmoid_": _unary_inplace(E.SIGMOID), "tanh_": _unary_inplace(E.TANH),
    "clamp_": None,
    "to": C.to, "cpu": _cpu, "cuda": _cuda, "astype": _astype,
    "type_as": _type_as,
    "float": _cast_method(_dt.float32), "double": _cast_method(_dt.float64),
    "half": _cast_method(_dt.float16), "long": _cast_method(_dt.int64),
    "int": _cast_method(_dt.int32), "bool": _cast_method(_dt.bool),
    "clone": C.clone, "contiguous": C.contiguous,
    "view": _view_method, "view_as": _reshape_as, "reshape_as": _reshape_as,
    "expand_as": _expand_as,
    "T": property(lambda self: S.transpose(self)),
    "mT": property(S.mT),
}

# ops whose public function is only ``bind(OP, input[, other])`` (add, sub, div take
# keywords): their methods, aliases and dunders call dispatch's lane directly
_PLAIN_OPS = (E.MUL, E.REMAINDER, E.FMOD, E.MAXIMUM, E.MINIMUM, E.ARCTAN2, E.LOGADDEXP,
              E.NEG, E.ABS, E.EXP, E.EXP2, E.EXPM1, E.LOG, E.LOG2, E.LOG10, E.LOG1P,
              E.SQRT, E.SIN, E.COS, E.TAN, E.ARCSIN, E.ARCCOS, E.ARCTAN, E.SINH, E.COSH,
              E.TANH)

# methods that are the public function of the same name, taking self first
_SAME_NAME = [
    (E, "add sub mul div true_divide floor_divide remainder pow neg abs sign exp exp2 log "
        "log2 log10 log1p expm1 sqrt rsqrt square reciprocal sin cos tan arcsin arccos arctan "
        "arctan2 sinh cosh tanh sigmoid relu erf maximum minimum where logaddexp floor ceil "
        "round isnan isinf isfinite logical_and logical_or logical_not logical_xor eq ne lt "
        "le gt ge bitwise_and bitwise_or bitwise_xor bitwise_not negative absolute subtract "
        "multiply divide asin acos atan atan2 less less_equal greater greater_equal not_equal"),
    (R, "sum mean prod amax amin"),
    (S, "reshape flatten squeeze unsqueeze expand broadcast_to transpose permute swapaxes "
        "swapdims movedim moveaxis"),
    (L, "matmul"),
    (N, "softmax log_softmax"),
]


def install(extra=(), methods=None):
    """Put the operator/method table onto Tensor (once, from tapegrad/__init__).

    Each family module may also list more method names in a ``METHODS`` string;
    ``methods`` adds methods from layers above the ops (``backward``, from autodiff).
    """
    from . import activations, special
    fams = [(m, getattr(m, "METHODS", "")) for m in (E, R, S, I, L, C, N, activations, special)]
    for mod, names in _SAME_NAME + fams + list(extra):
        for name in names.split():
            fn = getattr(mod, name, None)
            if fn is not None:
                setattr(Tensor, name, fn)
    from .compat import TABLE as compat_table  # t, narrow, new_*, type, flags...
    from . import methods2  # issue 17's census: same-name methods, x.foo_(), metadata
    from .. import ops as _ns
    more = methods2.table(_ns)
    more = {n: fn for n, fn in more.items() if n not in vars(Tensor) or n in methods2.REPLACE}
    tables = (list(more.items()) + list(_TABLE.items()) + list(compat_table.items())
              + list(special.TABLE.items()))
    for name, fn in tables + list((methods or {}).items()):
        if fn is not None:
            setattr(Tensor, name, fn)
    # a method (or alias, or dunder) that is the public function of one of these ops
    # calls dispatch's lane in one frame
    for op in _PLAIN_OPS:
        public = getattr(E, op.name)
        fast = _direct(op)
        fast.__doc__ = public.__doc__
        for name, value in list(vars(Tensor).items()):
            if value is public:
                setattr(Tensor, name, fast)
    # Tensor defines __eq__, so Python would drop __hash__; keep identity hashing
    Tensor.__hash__ = lambda self: id(self)

