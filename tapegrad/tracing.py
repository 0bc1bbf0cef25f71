"""``@fuse``: trace a function of tensors into one expression op.

It sits above ``ops`` (it traces calls of them, and a stand-in's ``.sum()`` takes
``tg.sum``'s argument rules); the expression machinery it builds on, ``fusion/``,
sits below them.

The function is called once per signature (input dtypes and constant arguments) on
symbolic stand-ins: ``_Proxy`` is a 0-d NumPy array subclass whose ufunc calls
(``__array_ufunc__``) build IR nodes instead of computing. Tensor operators and
tapegrad's elementwise functions reach the stand-ins through ``bind``, which passes
raw arrays to the op kernels, whose NumPy ufuncs then record themselves; expression
ops (``tg.elementwise``, the activations) splice their own IR in. Anything else (a
reshape, indexing, a captured tensor, a reduction over some dims) raises
``_NotFusable``, and the function then runs unfused, with a warning saying why. A
``sum()`` or ``mean()`` over all elements as the function's last step marks the
stand-in (``_Proxy.reduce``) and the op becomes a ``ReduceExprOp``.
"""
import functools
import inspect
import itertools
import warnings

import numpy as np

from .devices import cpu
from .dispatch import bind, observe, raw_arrays
from .fusion import expr as E
from .fusion.op import ExprOp, ReduceExprOp, proxy_hook
from .ops import reduce as _reduce
from .tensor import Tensor

_ids = itertools.count()


class _NotFusable(Exception):
    pass


_UFUNCS = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div",
    "true_divide": "div", "power": "pow", "float_power": "pow", "maximum": "maximum",
    "minimum": "minimum", "less": "lt", "less_equal": "le", "greater": "gt",
    "greater_equal": "ge", "equal": "eq", "not_equal": "ne", "logical_and": "and",
    "logical_or": "or", "negative": "neg", "exp": "exp", "log": "log", "log1p": "log1p",
    "expm1": "expm1", "sqrt": "sqrt", "tanh": "tanh", "sin": "sin", "cos": "cos",
    "absolute": "abs", "fabs": "abs", "sign": "sign", "logical_not": "not", "erf": "erf",
    "exp2": "exp2", "log2": "log2", "log10": "log10", "logaddexp": "logaddexp",
}
_MACRO_UFUNCS = {"square": "square", "reciprocal": "reciprocal", "tan": "tan", "sinh": "sinh",
                 "cosh": "cosh"}
_REFUSED = ("reshape", "transpose", "swapaxes", "ravel", "flatten", "squeeze", "prod", "max", "min",
            "cumsum", "cumprod", "argmax", "argmin", "std", "var",
            "repeat", "take", "dot", "__getitem__", "__setitem__", "__matmul__", "__rmatmul__")


class _Proxy(np.ndarray):
    """A symbolic scalar standing for one tensor (or intermediate) while tracing."""

    def __array_finalize__(self, obj):
        self.node = getattr(obj, "node", None)
        self.reduce = None

    def full_reduce(self, how, dim, keepdim, dtype):
        """``sum``/``mean`` of a stand-in: fusable over all elements, as the last step."""
        if dim is not None and not (isinstance(dim, (tuple, list)) and len(dim) == 0):
            raise _NotFusable(f"{how} over dim={dim!r} is not elementwise (only a {how} over "
                              "all elements, as the last step, fuses)")
        if keepdim or dtype is not None:
            raise _NotFusable(f"{how} with keepdim or dtype does not fuse")
        return mark_reduced(how, self)

    def sum(self, *args, **kwargs):  # x.sum(): tg.sum's argument rules, then the hook
        return _reduce.sum(self, *args, **kwargs)

    def mean(self, *args, **kwargs):
        return _reduce.mean(self, *args, **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = getattr(ufunc, "__name__", "")
        if method != "__call__" or kwargs.get("out") is not None:
            raise _NotFusable(f"np.{name}.{method} is not elementwise")
        args = [_node_of(x) for x in inputs]
        if name in _UFUNCS:
            op = _UFUNCS[name]
            node = (E.where(*args) if op == "where" else
                    E.unary(op, args[0]) if len(args) == 1 else E.binary(op, *args))
        elif name in _MACRO_UFUNCS:
            node = E.parse_call(_MACRO_UFUNCS[name], args)
        elif _special_name(ufunc) is not None:  # devices.cpu.special("erf"), a Numba ufunc
            node = E.parse_call(_special_name(ufunc), args)
        else:
            raise _NotFusable(f"the ufunc {name or ufunc!r} has no expression")
        return _proxy(node, _dtype_of(node, inputs))

    def __array_function__(self, func, types, args, kwargs):
        if func is np.where and len(args) == 3 and not kwargs:
            node = E.where(*[_node_of(a) for a in args])
            return _proxy(node, _dtype_of(node, args[1:]))
        raise _NotFusable(f"np.{func.__name__} is not elementwise")

    def __getattr__(self, name):
        # Tensor methods (x.tanh(), x.sigmoid()) go through tapegrad's own functions
        method = getattr(Tensor, name, None)
        if method is None or name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(method, self)


def _special_name(ufunc):
    for name, fn in cpu._special.items():
        if ufunc is fn or ufunc is getattr(fn, "ufunc", None):
            return name if name in ("erf",) else None
    return None


def _refuse(name):
    def method(self, *args, **kwargs):
        raise _NotFusable(f"{name} is not elementwise")
    return method


for _name in _REFUSED:
    setattr(_Proxy, _name, _refuse(_name))
_Proxy.T = property(_refuse("transpose"))
_Proxy.mT = property(_refuse("transpose"))


def _proxy(node, dtype):
    p = np.ndarray.__new__(_Proxy, (), dtype)
    p.node = node
    return p


def mark_reduced(how, p):
    """The stand-in for ``how`` (sum or mean) over all elements of stand-in ``p``."""
    if p.reduce is not None:
        raise _NotFusable("a reduction of a reduction")
    r = _proxy(p.node, p.dtype)
    r.reduce = how
    return r


def _node_of(x):
    if isinstance(x, _Proxy):
        if x.reduce is not None:
            raise _NotFusable(f"the result of {x.reduce}() is used again (a reduction over "
                              "all elements fuses only as the last step)")
        return x.node
    if isinstance(x, (bool, int, float, np.generic)) or (
            isinstance(x, np.ndarray) and x.ndim == 0):
        return E.const(float(x))
    raise _NotFusable(f"a {type(x).__name__} of shape {getattr(x, 'shape', '?')} that is "
                      "not an input of the fused function (pass it as an argument)")


def _dtype_of(node, inputs):
    if node.is_bool:
        return np.dtype(bool)
    dts = [x.dtype for x in inputs if isinstance(x, np.ndarray) and x.dtype.kind == "f"]
    return np.result_type(*dts) if dts else np.dtype(np.float64)


def splice(op, arrays, attrs):
    """An expression op called on stand-ins: its IR with the inputs substituted."""
    ins, outs = op.graph(attrs)
    mapping = {n: _node_of(a) for n, a in zip(ins, arrays)}
    new = E.substitute(outs, mapping)
    dt = _dtype_of(new[0], arrays)
    res = [_proxy(n, dt) for n in new]
    return res[0] if len(res) == 1 else tuple(res)


proxy_hook[0] = (_Proxy, splice, mark_reduced)


def _splice_exprs(op, kernel, *arrays, **attrs):
    """The observer while tracing (``dispatch.observe``): on stand-ins, an op with a
    parsable expression contributes it (``sigmoid(x)``, with its cheap derived
    adjoint) rather than whatever ufuncs its NumPy kernel calls."""
    if not attrs and len(arrays) == len(op.args) and _splices(op) and \
            any(isinstance(a, _Proxy) for a in arrays):
        node = E.parse(op.expr, {n: _node_of(a) for n, a in zip(op.args, arrays)})
        return _proxy(node, _dtype_of(node, arrays))
    return kernel(*arrays, **attrs)


@functools.lru_cache(maxsize=None)
def _splices(op):
    """Whether ``op`` carries an expression the tracer can splice (arctan2, arcsin ...
    have no expression rule: their ufuncs decide)."""
    if not op.expr or getattr(op, "fusion", None) is not None:
        return False
    try:
        if not set(E.free_names(op.expr)) <= set(op.args):
            return False
        E.parse(op.expr, {n: E.var(n) for n in op.args})
    except ValueError:
        return False
    return True


def fuse(fn):
    """Compile a function of tensors whose body is elementwise into one forward and
    one backward kernel, recorded as one tape entry.

    The body may use operators, ``where`` and tapegrad's elementwise functions
    (``exp``, ``tanh``, ``sigmoid``, ``gelu`` ...); inputs broadcast. Non-tensor
    arguments are constants of the trace. The body may end in ``sum()`` or
    ``mean()`` over all elements: the forward then sums as it computes and stores
    nothing but the scalar. A body that is not elementwise (a reduction over some
    dims, a reshape, indexing, a tensor captured from outside) runs unfused, with a
    warning saying why.

    >>> import tapegrad as tg
    >>> @tg.fuse
    ... def f(x, y):
    ...     return tg.tanh(x) * y + x * x
    >>> f(tg.ones(3, requires_grad=True), tg.ones(3)).sum().backward()
    """
    traces = {}

    @functools.wraps(fn)
    def fused(*args, **kwargs):
        key = _signature(args, kwargs)
        entry = traces.get(key) if key is not None else "unhashable constant arguments"
        if entry is None:
            inspect.signature(fn).bind(*args, **kwargs)  # a wrong call fails as itself
            entry = traces[key] = _trace(fn, args, kwargs)
            if isinstance(entry, str):  # warned once per signature
                warnings.warn(f"tg.fuse: {fn.__qualname__} is not fusable ({entry}); running "
                              "it unfused", RuntimeWarning, stacklevel=2)
        if isinstance(entry, str):
            return fn(*args, **kwargs)
        op, positions, single = entry
        return bind(op.op, *[args[i] for i in positions])
    fused.traces = traces
    return fused


def _is_tensor(a):
    return isinstance(a, (Tensor, np.ndarray))


def _signature(args, kwargs):
    key = []
    for a in args:
        if _is_tensor(a):
            key.append(("T", np.dtype(a._data.dtype if isinstance(a, Tensor) else a.dtype).str))
        else:
            key.append(("C", type(a).__name__, a))
    key.append(tuple(sorted(kwargs.items())))
    key = tuple(key)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _trace(fn, args, kwargs):
    """An (ExprOp, tensor positions, single output) for ``fn``, or why it can't be."""
    positions = [i for i, a in enumerate(args) if _is_tensor(a)]
    uid = next(_ids)
    names = [f"input{i}" for i in positions]
    ins = [E.var(f"__fuse{uid}_{k}") for k in range(len(positions))]
    call = list(args)
    for k, i in enumerate(positions):
        a = args[i]
        dt = a._data.dtype if isinstance(a, Tensor) else a.dtype
        call[i] = _proxy(ins[k], dt if dt.kind == "f" else np.dtype(np.float64))
    try:
        with observe(_splice_exprs), raw_arrays():
            out = fn(*call, **kwargs)
    except _NotFusable as e:
        return str(e)
    except Exception as e:  # anything the stand-ins cannot do
        return f"{type(e).__name__}: {e}"
    single = not isinstance(out, (tuple, list))
    outs = [out] if single else list(out)
    if not outs or not all(isinstance(o, _Proxy) for o in outs):
        return "it must return tensors computed from its tensor arguments"
    if any(o.node.is_bool for o in outs):
        return "a boolean output (comparisons are not differentiable)"
    reduce = [o.reduce for o in outs]
    if any(reduce) and len(outs) > 1:
        return "a reduction fuses only as the one output"
    nodes = [o.node for o in outs]
    name = f"fused_{fn.__name__}_{uid}"
    body = ExprOp(name + ("_body" if reduce[0] else ""), names,
                  lambda attrs: (ins, nodes), nout=len(nodes),
                  expr="; ".join(str(n) for n in nodes),
                  doc=f"@fuse of {fn.__qualname__}" + (" (before its reduction)" if reduce[0]
                                                       else ""))
    if reduce[0]:
        return ReduceExprOp(name, body, reduce[0], doc=f"@fuse of {fn.__qualname__}"), \
            positions, single
    return body, positions, single
