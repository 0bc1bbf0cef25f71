"""The Tensor's operators and methods, installed once from tables (``install``):

- the core operator/method table (``_TABLE``) and each family's ``METHODS`` names;
- ``SAME_NAME``: methods that are the public function of the same name with ``self``
  first (``x.acosh()``, ``x.addmm(a, b)``), read from the ops namespace;
- ``INPLACE``: ``x.foo_(...)`` for the out-of-place ``foo`` of the same name, all by
  one mechanism (``inplace``): the function runs as an (unregistered) composite
  through ``dispatch.apply_inplace``, so the in-place rules are PyTorch's and the
  existing ones: the version counter, a leaf that requires grad refused, views
  rewriting their base's history, forward-mode tangents moved, the result cast to
  ``self``'s dtype where PyTorch casts and refused where it refuses;
- shape-changing in-place methods (``t_``, ``squeeze_``...), random fills
  (``uniform_``, ``normal_``...), Python-callable maps (``apply_``, ``map_``), and
  metadata (``stride``, ``is_contiguous``, ``itemsize``, ``layout``...)."""
import functools
import inspect

import numpy as np

from .. import dtypes as _dt
from .._util import normalize_dim, op_error
from ..dispatch import apply_inplace, lane
from ..grad_mode import is_grad_enabled
from ..ops_registry.opdef import OpDef
from ..tensor import Tensor, mark_written
from . import (
    creation as C,
    elementwise as E,
    indexing as I,
    linalg as L,
    nn as N,
    reduce as R,
    shape as S,
    sparse as SP,
)


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
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, tuple, list)):
        return _view_dtype(self, shape[0])
    return S.view(self, *shape)


def _storage_offset(self):
    """Elements of this tensor's dtype from the start of the memory it views to its
    first element (0 unless it is a view, as ``torch.Tensor.storage_offset``)."""
    data = self._data
    if isinstance(data, np.ndarray):
        root = data
        while isinstance(root.base, np.ndarray):
            root = root.base
        start, ptr = root.__array_interface__["data"][0], data.__array_interface__["data"][0]
    else:
        start, ptr = int(data.data.mem.ptr), int(data.data.ptr)
    return (ptr - start) // data.itemsize


def _view_dtype(self, dtype):
    """The same memory read as ``dtype`` (``Tensor.view(dtype)``), with PyTorch's rules:
    equal itemsizes keep the shape; otherwise the last dim must have stride 1 and its
    size scales by the ratio of the itemsizes (a larger itemsize needs the last size,
    the storage offset and the other strides divisible by it). Not differentiable; it
    shares the version counter, as PyTorch's."""
    try:
        new = _dt.as_dtype(dtype)
    except (TypeError, ValueError, KeyError):
        raise TypeError(f"view: expected a shape or a dtype, got {dtype!r}") from None
    data = self._data
    a, b = data.dtype.itemsize, new.np.itemsize
    if a != b:
        what = (f"to view {_dt.from_np(data.dtype)} as {new} (different element sizes)")
        if data.ndim == 0:
            raise RuntimeError(f"view: self.dim() cannot be 0 {what}")
        st = _stride(self)
        if st[-1] != 1:
            raise RuntimeError(f"view: self.stride(-1) must be 1 {what}, but got {st[-1]}")
        if b > a:
            r = b // a
            if data.shape[-1] % r:
                raise RuntimeError(f"view: self.size(-1) must be divisible by {r} {what}, "
                                   f"but got {data.shape[-1]}")
            off = _storage_offset(self)
            if off % r:
                raise RuntimeError(f"view: self.storage_offset() must be divisible by {r} "
                                   f"{what}, but got {off}")
            for d, sd in enumerate(st[:-1]):
                if sd % r:
                    raise RuntimeError(f"view: self.stride({d}) must be divisible by {r} "
                                       f"{what}, but got {sd}")
    out = Tensor(data.view(new.np))
    out._vc = self._vc
    return out


def _real(self):
    """The real part: the tensor itself for a real dtype (as PyTorch)."""
    if self.is_complex():
        raise TypeError("real: complex tensors are not supported")
    return self


def _expand_as(self, other):
    return S.expand(self, *other.shape)


def _reshape_as(self, other):
    return S.reshape(self, tuple(other.shape))


def _type_as(self, other):
    return C.cast(self, other.dtype)


_direct = lane


_TABLE = {
    "__add__": _direct(E.ADD), "__radd__": _r(E.add), "__sub__": _direct(E.SUB),
    "__rsub__": _r(E.sub),
    "__mul__": _direct(E.MUL), "__rmul__": _r(E.mul), "__truediv__": _direct(E.DIV),
    "__rtruediv__": _r(E.div),
    "__floordiv__": E.floor_divide, "__rfloordiv__": _r(E.floor_divide),
    "__mod__": E.remainder, "__rmod__": _r(E.remainder),
    "__pow__": E.pow, "__rpow__": _r(E.pow), "__matmul__": _direct(L.MATMUL),
    "__rmatmul__": _r(L.matmul),
    "__neg__": _direct(E.NEG), "__pos__": lambda self: self, "__abs__": E.abs,
    "__eq__": E.eq, "__ne__": E.ne, "__lt__": E.lt, "__le__": E.le, "__gt__": E.gt, "__ge__": E.ge,
    "__and__": E.bitwise_and, "__rand__": _r(E.bitwise_and), "__or__": E.bitwise_or,
    "__ror__": _r(E.bitwise_or), "__xor__": E.bitwise_xor, "__rxor__": _r(E.bitwise_xor),
    "__invert__": E.bitwise_not,
    "__getitem__": I.getitem, "__setitem__": I.setitem,
    "__iadd__": _inplace(E.ADD), "__isub__": _inplace(E.SUB), "__imul__": _inplace(E.MUL),
    "__itruediv__": _truediv_inplace,
    # (the other augmented assignments write in place too, as PyTorch's: not a rebinding)
    "__ipow__": lambda self, other: self.pow_(other),
    "__ifloordiv__": lambda self, other: self.floor_divide_(other),
    "__imod__": lambda self, other: self.remainder_(other),
    "__iand__": lambda self, other: self.bitwise_and_(other),
    "__ior__": lambda self, other: self.bitwise_or_(other),
    "__ixor__": lambda self, other: self.bitwise_xor_(other),
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
    from . import activations, sorting, special
    fams = [(m, getattr(m, "METHODS", ""))
            for m in (E, R, S, I, sorting, L, C, N, activations, special)]
    for mod, names in _SAME_NAME + fams + list(extra):
        for name in names.split():
            fn = getattr(mod, name, None)
            if fn is not None:
                setattr(Tensor, name, fn)
    from .. import ops as _ns
    from .compat import TABLE as compat_table  # t, narrow, new_*, type, flags...
    more = table(_ns)
    more = {n: fn for n, fn in more.items() if n not in vars(Tensor) or n in REPLACE}
    tables = (list(more.items()) + list(_TABLE.items()) + list(compat_table.items())
              + list(special.TABLE.items()) + list(SP.TABLE.items()))
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
    _autocast_methods()
    _alias_dims()
    # Tensor defines __eq__, so Python would drop __hash__; keep identity hashing
    Tensor.__hash__ = lambda self: id(self)


def _autocast_methods():
    """A method that is a composite's own function (``x.addmm``, ``x.mv``, ``x.prelu``)
    takes the op's autocast policy inside ``tg.autocast``, as ``tg.NAME`` does (the
    checked function applies it at the op's entry, ``dispatch.autocast_call``)."""
    from ..dispatch import autocast_call
    from ..tape import state
    from ._decl import composite_op
    for name, fn in list(vars(Tensor).items()):
        if name.startswith("__") or not inspect.isfunction(fn):
            continue
        op = composite_op(fn)
        if op is None or op.autocast is None:
            continue

        def method(*args, _op=op, _fn=fn, **kwargs):
            if state.autocast is not None:
                return autocast_call(_op, _fn, args, kwargs)
            return _fn(*args, **kwargs)
        setattr(Tensor, name, functools.wraps(fn)(method))


def _alias_dims():
    """Methods with ``dim``/``keepdim`` and no ``axis``/``keepdims`` take those NumPy
    names too (``x.sort(axis=1)``), as the checked public functions do."""
    from .guard import _aliases, _unalias
    for name, fn in list(vars(Tensor).items()):
        if name.startswith("__") or not inspect.isfunction(fn):
            continue
        aliases = _aliases(fn)
        if aliases:
            setattr(Tensor, name, _aliased(fn, name, aliases, _unalias))


def _aliased(fn, name, aliases, unalias):
    @functools.wraps(fn)
    def method(*args, **kwargs):
        if kwargs:
            kwargs = unalias(name, aliases, kwargs)
        return fn(*args, **kwargs)
    return method


# methods that are the public function of the same name (from the ops namespace)
SAME_NAME = """acosh arccosh asinh arcsinh atanh arctanh addcdiv addcmul copysign deg2rad
rad2deg erfc float_power frac hypot lerp logaddexp2 logit nan_to_num positive sgn xlogy
sinc heaviside ldexp signbit nextafter gcd lcm bitwise_left_shift bitwise_right_shift
isposinf isneginf isreal isclose fmax fmin aminmax dist nansum nanmean median nanmedian
quantile nanquantile
kthvalue msort count_nonzero logcumsumexp cumsum cumprod t mm narrow clamp clip
clamp_min clamp_max fix trunc exp2 expm1 diagonal diag tril triu roll flip fliplr flipud
repeat_interleave tile gather scatter scatter_add index_select masked_fill masked_select
nonzero argwhere unique sort argsort topk norm std var logsumexp max min argmax argmin
all any outer ger dot trace inverse det slogdet tensor_split split chunk unbind
unflatten diag_embed take_along_dim corrcoef cov cross diagflat diagonal_scatter diff dsplit
hsplit vsplit kron narrow_copy ravel renorm rot90 select select_scatter slice_scatter take
bincount histc histogram index_add index_copy index_fill addmm addmv addr addbmm baddbmm
bmm mv inner vdot matrix_power matrix_exp logdet cholesky cholesky_inverse cholesky_solve
triangular_solve scatter_reduce index_reduce cummax cummin mode unique_consecutive
bernoulli multinomial erfinv mvlgamma frexp qr svd pinverse i0 igamma igammac lu
lu_solve geqrf orgqr ormqr""".split()


# x.foo_(...) from foo (the method or function of that name)
INPLACE = """abs absolute acos arccos acosh arccosh asin arcsin asinh arcsinh atan arctan
atanh arctanh atan2 arctan2 ceil floor round trunc fix frac sign sgn sqrt rsqrt square
reciprocal log log2 log10 log1p exp2 expm1 sin cos tan sinh cosh erf erfc deg2rad
rad2deg logit lerp hypot copysign xlogy sinc heaviside ldexp nextafter gcd lcm
bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift
logical_and logical_or logical_xor logical_not eq ne lt le gt ge less less_equal greater
greater_equal not_equal fmod remainder pow float_power floor_divide true_divide divide
multiply subtract negative clamp clip clamp_min clamp_max nan_to_num cumsum cumprod
addcdiv addcmul tril triu masked_scatter index_add index_copy index_fill index_put put
addmm addmv addr addbmm baddbmm renorm scatter_reduce index_reduce erfinv mvlgamma
digamma lgamma i0 igamma igammac""".split()


# ``table`` may replace an existing Tensor attribute of these names (the old one was not
# PyTorch's: ``where``'s first argument is the condition's alternative, not the condition)
REPLACE = {"where"}


def _shim(name, fn):
    """An unregistered composite op running ``fn`` (the out-of-place function) for
    ``apply_inplace``: Tensor arguments are its inputs (so a gradient reaches them),
    the rest ride in the ``_tpl`` attribute. It saves input 0 (``apply_inplace`` then
    hands it a copy of the old value, which the function's own ops may save)."""
    def composite(x, *tensors, _tpl):
        args, kwargs = _fill(_tpl, iter(tensors))
        return fn(x, *args, **kwargs)
    op = OpDef(name=name, kernel=lambda *a, **k: None, infer=lambda *a, **k: None,
               args=("input",), composite=composite)
    op.save_idx = (0,)
    return op


class _Slot:
    pass


def _template(args, kwargs):
    tensors = []

    def tpl(v):
        if isinstance(v, Tensor):
            tensors.append(v)
            return _Slot
        if isinstance(v, tuple):
            return tuple(tpl(e) for e in v)
        return v
    return tensors, (tuple(tpl(a) for a in args), {k: tpl(v) for k, v in kwargs.items()})


def _fill(tpl, it):
    def put(v):
        if v is _Slot:
            return next(it)
        if isinstance(v, tuple):
            return tuple(put(e) for e in v)
        return v
    args, kwargs = tpl
    return tuple(put(a) for a in args), {k: put(v) for k, v in kwargs.items()}


def inplace(name, fn):
    """``self.<name>_(...)``: ``fn(self, ...)`` written into ``self``."""
    op = _shim(name, fn)

    def method(self, *args, **kwargs):
        tensors, tpl = _template(args, kwargs)
        return apply_inplace(op, self, *tensors, _tpl=tpl)
    method.__name__ = name + "_"
    method.__doc__ = f"In-place ``{name}``: ``self`` becomes ``self.{name}(...)``."
    return method


# ------------------------------------------------------------------ shape in place
def _reshaping(name, fn):
    """``t_``, ``squeeze_``...: ``self`` takes the new shape (its data and history
    become the result's: a view of the old buffer, as PyTorch's)."""
    def method(self, *args, **kwargs):
        res = fn(self, *args, **kwargs)
        self._data = res._data
        if res._node is not None:
            self._node, self._idx = res._node, res._idx
        mark_written(self)  # an in-place change of metadata counts as a write, as PyTorch's
        return self
    method.__name__ = name + "_"
    return method


# ------------------------------------------------------------------ fills (no gradient)
def _fill_with(self, name, values):
    self._check_writable(name)
    if is_grad_enabled() and self.requires_grad and self._node is None:
        raise RuntimeError(f"{name}: a leaf Variable that requires grad is being used in an "
                           f"in-place operation")
    self._data[...] = values
    mark_written(self)
    if is_grad_enabled() and self._node is not None:
        self._node = None
        self.requires_grad = False
    return self


def _float_only(name, self):
    if not self.dtype.is_floating_point:
        raise op_error(name, f"expects a floating point tensor, got {self.dtype}", RuntimeError)


def _draw(name, draw, floating=True):
    def method(self, *args, generator=None, **kwargs):
        if floating:
            _float_only(name, self)
        g = C.generator() if generator is None else C._rng(generator)
        vals = draw(g, tuple(self.shape), *args, **kwargs)
        return _fill_with(self, name, np.asarray(vals).astype(self.dtype.np))
    method.__name__ = name
    return method


def _random(g, shape, from_=0, to=None):
    if to is None:
        from_, to = 0, from_ if from_ else 2 ** 24
    return g.integers(from_, to, size=shape)


def _bernoulli_(self, p=0.5, *, generator=None):
    pv = np.asarray(p._data if isinstance(p, Tensor) else p)
    g = C.generator() if generator is None else C._rng(generator)
    return _fill_with(self, "bernoulli_", (g.random(self.shape) < pv)
                      .astype(self.dtype.np))


_DRAWS = {
    "uniform_": _draw("uniform_", lambda g, s, a=0.0, b=1.0: g.uniform(a, b, s)),
    "normal_": _draw("normal_", lambda g, s, mean=0.0, std=1.0: g.normal(mean, std, s)),
    "cauchy_": _draw("cauchy_", lambda g, s, median=0.0, sigma=1.0:
                     median + sigma * g.standard_cauchy(s)),
    "exponential_": _draw("exponential_", lambda g, s, lambd=1.0: g.exponential(1.0 / lambd, s)),
    "log_normal_": _draw("log_normal_", lambda g, s, mean=1.0, std=2.0: g.lognormal(mean, std, s)),
    "geometric_": _draw("geometric_", lambda g, s, p: g.geometric(p, s), floating=False),
    "random_": _draw("random_", _random, floating=False),
    "bernoulli_": _bernoulli_,
}


def _apply_(self, callable):  # noqa: A002 (PyTorch's name)
    f = np.vectorize(callable, otypes=[self.dtype.np])
    return _fill_with(self, "apply_", f(self._data) if self._data.size else self._data)


def _map_(self, tensor, callable):  # noqa: A002
    f = np.vectorize(callable, otypes=[self.dtype.np])
    other = np.broadcast_to(tensor._data, self.shape)
    return _fill_with(self, "map_", f(self._data, other) if self._data.size else self._data)


def _map2_(self, x, y, callable):  # noqa: A002
    f = np.vectorize(callable, otypes=[self.dtype.np])
    a, b = np.broadcast_to(x._data, self.shape), np.broadcast_to(y._data, self.shape)
    return _fill_with(self, "map2_", f(self._data, a, b) if self._data.size else self._data)


def _detach_(self):
    self._node = None
    self.requires_grad = False
    return self


def _fill_diagonal_(self, fill_value, wrap=False):
    if self.ndim < 2:
        raise op_error("fill_diagonal_", "dimensions must larger than 1", RuntimeError)
    if self.ndim > 2 and len(set(self.shape)) != 1:
        raise op_error("fill_diagonal_", "all dimensions of input must be of equal length",
                       RuntimeError)
    n = min(self.shape)
    rows = np.arange(n)
    if wrap and self.ndim == 2 and self.shape[0] > self.shape[1] + 1:
        step = self.shape[1] + 1
        flat = np.arange(0, self.shape[0] * self.shape[1], step)
        idx = (flat // self.shape[1], flat % self.shape[1])
    else:
        idx = (rows,) * self.ndim
    I.setitem(self, idx, fill_value)
    return self


# ------------------------------------------------------------------ metadata
STRIDED = SP.strided  # (a sparse COO tensor's layout is SP.sparse_coo)


def _stride(self, dim=None):
    st = tuple(s // self._data.itemsize for s in self._data.strides)
    if dim is None:
        return st
    return st[normalize_dim("stride", dim, self.ndim)]


def _get_device(self):
    return -1 if self.device.type == "cpu" else (self.device.index or 0)


def _is_signed(self):
    return self.dtype.np.kind in "if"


def _sum_to_size(self, *size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        np.broadcast_shapes(tuple(size), tuple(self.shape))
        if np.broadcast_shapes(tuple(size), tuple(self.shape)) != tuple(self.shape):
            raise ValueError
    except ValueError:
        raise op_error("sum_to_size", f"size {{{', '.join(map(str, size))}}} is not expandable "
                                      f"to size {{{', '.join(map(str, self.shape))}}}.",
                       RuntimeError) from None
    return R.sum_to(self, tuple(size))


def _new(self, *args, dtype=None, device=None):
    if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
        return C.tensor(args[0], dtype=dtype or self.dtype, device=device or self.device)
    return C.empty(args, dtype=dtype or self.dtype, device=device or self.device)


def _unfold(self, dimension, size, step):
    """Windows of ``size`` every ``step`` along ``dimension``, as a new last dim."""
    d = normalize_dim("unfold", dimension, max(self.ndim, 1))
    n = self.shape[d] if self.ndim else 1
    if size > n:
        raise op_error("unfold", f"maximum size for tensor at dimension {d} is {n} but size "
                                 f"is {size}", RuntimeError)
    if step <= 0:
        raise op_error("unfold", f"step is {step} but must be > 0", RuntimeError)
    if self.ndim == 0:
        return S.reshape(self, (1,))
    starts = np.arange(0, n - size + 1, step)
    idx = starts[:, None] + np.arange(size)[None, :]
    win = I.getitem(self, (slice(None),) * d + (idx,))   # (..., windows, size, ...)
    return S.movedim(win, d + 1, -1)


def _where(self, condition, y):
    from .elementwise import where
    return where(condition, self, y)


def _H(self):
    if self.ndim != 2:
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.ndim}-D tensor.")
    return S.transpose(self, 0, 1)


def _nonzero_static(self, *, size, fill_value=-1):
    nz = I.nonzero(self)
    k = nz.shape[0]
    if k >= size:
        return nz[:size]
    pad = C.full((size - k, nz.shape[1]), fill_value, dtype=nz.dtype)
    return S.cat([nz, pad], 0)


def _index_put(self, indices, values, accumulate=False):
    """``self`` with ``values`` at ``indices`` (a tuple of index tensors), summed in
    when ``accumulate`` (repeated indices too); ``values`` a Tensor of ``self``'s
    dtype, as PyTorch's."""
    if not isinstance(values, Tensor):
        raise TypeError(f"index_put(): argument 'values' (position 2) must be Tensor, not "
                        f"{type(values).__name__}")
    I.check_put_dtypes(self, values)
    return _put_values(self, indices, values, accumulate)


def _put_values(self, indices, values, accumulate=False):
    idx = tuple(i._data if isinstance(i, Tensor) else i for i in indices)
    if values.dtype != self.dtype:
        values = values.to(self.dtype)
    if accumulate:
        shape = np.empty(tuple(self.shape), dtype=bool)[idx].shape
        return self + I.index_add_into(S.broadcast_to(values, shape), tuple(self.shape), idx)
    from ..dispatch import bind
    return bind(I.INDEX_PUT, self, values, index=idx)


def _put(self, index, source, accumulate=False):
    """``self`` read as 1-D with ``source`` at ``index``."""
    if isinstance(source, Tensor) and source.dtype != self.dtype:
        raise op_error("put", f"self ({self.dtype}) and source ({source.dtype}) expected to "
                              f"have the same dtype", RuntimeError)
    flat = S.reshape(self, (-1,))
    out = _put_values(flat, (index,), S.reshape(source, (-1,)), accumulate)
    return S.reshape(out, tuple(self.shape))


def _masked_scatter(self, mask, source):
    """``self`` with ``source``'s first elements (in order) where ``mask`` is True."""
    m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise op_error("masked_scatter", f"masked_scatter_ only supports boolean masks, but "
                                         f"got mask with dtype {m.dtype}", RuntimeError)
    full = np.broadcast_to(m, np.broadcast_shapes(m.shape, tuple(self.shape)))
    k = int(full.sum())
    if k > source.numel():
        raise op_error("masked_scatter", "Number of elements of source < number of ones in "
                                         "mask", RuntimeError)
    if isinstance(source, Tensor) and source.dtype != self.dtype:
        raise op_error("masked_scatter", f"expected self and source to have same dtypes but "
                                         f"got {self.dtype} and {source.dtype}", RuntimeError)
    x = S.broadcast_to(self, full.shape) * 1 if tuple(full.shape) != tuple(self.shape) else self
    vals = S.reshape(source, (-1,))[:k]
    return _put_values(x, (full,), vals)


def _split_with_sizes(self, split_sizes, dim=0):
    return I.split(self, list(split_sizes), dim)


def _slice_inverse(self, src, dim=0, start=None, end=None, step=1):
    """``src`` with ``self`` as its slice ``[start:end:step]`` along ``dim`` (PyTorch's
    functionalization op; here a copy, ``slice_scatter(src, self, ...)``, not a view of
    ``src``'s memory)."""
    from .indexed_update import slice_scatter
    return slice_scatter(src, self, dim, start, end, step)


def _bfloat16(self, memory_format=None):
    return C.cast(self, _dt.bfloat16)


def table(ns):
    """The methods to install, ``ns`` the ops namespace (``tapegrad.ops``)."""
    out = {"index_put": _index_put, "put": _put, "masked_scatter": _masked_scatter}
    for n in SAME_NAME:
        fn = getattr(ns, n, None)
        if fn is not None:
            out[n] = fn
    for n in INPLACE:
        fn = out.get(n) or getattr(Tensor, n, None) or getattr(ns, n, None)
        if fn is not None:
            out[n + "_"] = inplace(n, fn)
    from .special import _polygamma_method  # x.polygamma(n): n first in the function
    out["polygamma_"] = inplace("polygamma", _polygamma_method)
    from .nn import activation as _nnp
    out.update({"hardshrink": _nnp.hardshrink, "prelu": _nnp.prelu,
                "slice_inverse": _slice_inverse, "bfloat16": _bfloat16})
    for n, fn in (("t", S.transpose), ("transpose", S.transpose), ("swapaxes", S.transpose),
                  ("swapdims", S.transpose), ("squeeze", S.squeeze),
                  ("unsqueeze", S.unsqueeze)):
        out[n + "_"] = _reshaping(n, getattr(ns, n, fn))
    out.update(_DRAWS)
    out.update({
        "apply_": _apply_, "map_": _map_, "map2_": _map2_, "detach_": _detach_,
        "fill_diagonal_": _fill_diagonal_, "where": _where,
        "H": property(_H), "mH": property(S.mT), "adjoint": S.mT,
        "stride": _stride, "storage_offset": _storage_offset, "real": property(_real),
        "is_contiguous": lambda self, memory_format=None:
            bool(self._data.flags.c_contiguous),
        "is_cpu": property(lambda self: self.device.type == "cpu"),
        "is_inference": lambda self: self._inference, "is_signed": _is_signed,
        "itemsize": property(lambda self: self._data.itemsize),
        "nbytes": property(lambda self: self._data.itemsize * self._data.size),
        "layout": property(lambda self: STRIDED),
        "output_nr": property(lambda self: self._idx if self._node is not None else 0),
        "ndimension": lambda self: self.ndim, "nelement": lambda self: self.numel(),
        "get_device": _get_device,
        "short": lambda self, memory_format=None: C.cast(self, _dt.int16),
        "byte": lambda self, memory_format=None: C.cast(self, _dt.uint8),
        "char": lambda self, memory_format=None: C.cast(self, _dt.int8),
        "is_same_size": lambda self, other: tuple(self.shape) == tuple(other.shape),
        "sum_to_size": _sum_to_size, "new": _new, "unfold": _unfold,
        "nonzero_static": _nonzero_static, "split_with_sizes": _split_with_sizes,
        "unsafe_chunk": I.chunk, "unsafe_split": I.split,
        "unsafe_split_with_sizes": _split_with_sizes,
        "retains_grad": property(lambda self: bool(
            self._node is not None and getattr(self._node, "retain", None))),
    })
    return out

