"""Reductions and scans: sum, mean, prod, amax/amin, max/min, var/std, logsumexp, norm,
cumsum/cumprod, all/any (registry ops); ``cummax``/``cummin`` (``(values, indices)``,
one op each: the values' gradient goes back to the index each running extremum came
from, as ``sort``'s); and composites of them: ``aminmax``, ``dist``,
``nansum``/``nanmean``, ``std_mean``/``var_mean``, ``count_nonzero``, ``logcumsumexp``,
``diff``, ``trapezoid``/``trapz``/``cumulative_trapezoid`` and ``gradient`` (central
differences along each dim, a composite of slicing: differentiable).

Layering: reduce sits above elementwise (``max(x, other)`` is ``maximum``)."""
import builtins as _builtins
import math
from collections import namedtuple

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import DtypeError, normalize_dim, normalize_dims, op_error
from ..devices import cpu as _cpu
from ..devices.cpu_kernels import halfwidth as _cpu_halfwidth
from ..dispatch import bind
from ..dtypes import is_float as _isf
from ..tape import name_call
from ..tensor import Tensor
from . import _jvp, _vmap, elementwise as _elementwise, indexing as I, shape as SH
from ._decl import S, Sample, TensorSpec, decl, floating, rand, register
from .indexing import _scatter_back_vjp, take_along_dim
from .onnx_forms import _dims as _onnx_dims, _norm as _onnx_norm

__all__ = ["gradient", "sum", "mean", "sum_to", "amax", "amin", "prod", "max", "min", "argmax",
           "argmin", "var", "std", "logsumexp", "norm", "cumsum", "cumprod", "all", "any",
           "aminmax", "dist", "nansum", "nanmean", "std_mean", "var_mean", "count_nonzero",
           "logcumsumexp", "cummax", "cummin", "diff", "trapezoid", "trapz", "cumulative_trapezoid"]


def _keep_shape(shape, dims):
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


def _reduced_shape(shape, dims, keepdim):
    if keepdim:
        return _keep_shape(shape, dims)
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _reduce_infer(name, out_dtype=None):
    def infer(x, dim=None, keepdim=False, **attrs):
        dims = normalize_dims(name, dim, len(x.shape))
        dt = np.dtype(x.dtype)
        if out_dtype == "sum" and dt.kind in "biu":
            dt = np.dtype(np.int64)
        elif out_dtype == "float" and dt.kind != "f":
            raise op_error(name, f"expected a floating point input, got {dt}", DtypeError)
        return TensorSpec(_reduced_shape(tuple(x.shape), dims, keepdim), dt)
    return infer


def _reduce_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype, seed=1),), {"dim": None, "keepdim": False}),
            Sample((rand((3, 4), dtype, seed=2),), {"dim": (1,), "keepdim": False}),
            Sample((rand((2, 3, 4), dtype, seed=3),), {"dim": (0, 2), "keepdim": True}),
            Sample((rand((), dtype, seed=4),), {"dim": None, "keepdim": False})]


def _dim_errors():
    return [((rand((2, 3)),), {"dim": 3}, IndexError)]


def _expand_back(m, g, shape, dims, keepdim):
    """Broadcast a reduced cotangent back to the input shape."""
    if isinstance(g, np.generic):
        g = np.asarray(g)
    if not keepdim and dims and g.ndim:  # a 0-d g broadcasts as it is
        g = m.reshape(g, _keep_shape(shape, dims))
    return m.broadcast_to(g, shape)


# ---------------------------------------------------------------- sum / mean
def _channel_sum_loop(x, acc):
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            s = 0.0
            for k in range(x.shape[2]):
                s += x[n, c, k]
            acc[c] += s


# compiled on first call
_CHANNEL_SUM = _cpu.njit(_channel_sum_loop, fastmath=set(_cpu.FASTMATH_SUM))


def _channel_sum(x, dims, keepdim):
    """The sum over every dim but dim 1 (a conv or batch norm's bias gradient, NCHW)
    of a C-contiguous float32/float64 NumPy array: one pass accumulating in float64,
    rounded once (~3x faster than NumPy's strided reduction); None where it does not
    apply."""
    if type(x) is not np.ndarray or x.ndim < 3 or x.dtype not in (np.float32, np.float64) \
            or not x.flags.c_contiguous or x.size < 1 << 16 \
            or tuple(sorted(dims)) != (0,) + tuple(range(2, x.ndim)):
        return None
    acc = np.zeros(x.shape[1])
    _CHANNEL_SUM(x.reshape(x.shape[0], x.shape[1], -1), acc)
    r = acc.astype(x.dtype)
    return r.reshape(_keep_shape(x.shape, dims)) if keepdim else r


_ONES = {}


def _leading_sum(x, dims, out=None):
    """The sum over every dim but the last (a linear layer's bias gradient) of a
    C-contiguous float32/float64 NumPy array as one GEMV with a ones vector, into
    ``out`` (a C-contiguous array of the last dim's size) or a new array; None where
    it does not apply. (4096, 512) float32: 0.31 -> 0.20 ms, (2048, 65): 53 -> 12 us,
    and closer to the float64 sum than NumPy's strided reduction.)"""
    if type(x) is not np.ndarray or x.ndim < 2 or x.dtype not in _GEMV_DTYPES \
            or not x.flags.c_contiguous or tuple(sorted(dims)) != tuple(range(x.ndim - 1)):
        return None
    n = x.shape[-1]
    rows = x.size // n if n else 0
    if rows < 2 or n == 0:
        return None
    key = (rows, x.dtype.char)
    ones = _ONES.get(key)
    if ones is None:
        if len(_ONES) > 64:
            _ONES.clear()
        ones = _ONES[key] = np.ones(rows, x.dtype)
        ones.flags.writeable = False
    if out is not None and not (type(out) is np.ndarray and out.dtype == x.dtype
                                and out.size == n and out.flags.c_contiguous
                                and not np.may_share_memory(out, x)):
        out[...] = _leading_sum(x, dims).reshape(out.shape)
        return out
    r = np.matmul(ones, x.reshape(rows, n), out=None if out is None else out.reshape(n))
    return r if out is None else out


_GEMV_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _sum_kernel(x, dim=None, keepdim=False, out=None):
    dims = normalize_dims("sum", dim, x.ndim)
    if x.dtype in _dt.LOW:
        # accumulated in float32 (a NumPy array a block at a time: no float32 copy
        # of the input), rounded once
        r = _cpu_halfwidth.sum(x, dims, keepdim) if type(x) is np.ndarray else \
            x.astype(np.float32).sum(axis=dims, keepdims=keepdim)
        r = _cpu_halfwidth.astype(_devices.xp_of(x).asarray(r), x.dtype)
        if out is None:
            return r
        out[...] = r
        return out
    r = _channel_sum(x, dims, keepdim)
    if r is not None:
        if out is None:
            return r
        out[...] = r
        return out
    r = _leading_sum(x, dims, out)
    if r is not None:
        return r if out is not None or not keepdim else r.reshape(_keep_shape(x.shape, dims))
    dt = np.int64 if x.dtype.kind in "biu" else None
    # the method, not np.sum: the same reduction without np.sum's dispatch layer
    if out is not None:
        x.sum(axis=dims, keepdims=keepdim, dtype=dt, out=out)
        return out
    return np.asarray(x.sum(axis=dims, keepdims=keepdim, dtype=dt))


def _sum_vjp(ctx, g):
    shape = ctx.shapes[0]
    dims = normalize_dims("sum", ctx.attrs.get("dim"), len(shape))
    return (_expand_back(ctx.m, g, shape, dims, ctx.attrs.get("keepdim", False)),)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_reduce(op_type):
    def lower(b, st):
        shape = b.shape(st, 0)
        axes = _onnx_dims(st.attrs.get("dim"), len(shape))
        keep = st.attrs.get("keepdim", False)
        x = b.input(st, 0, b.out_dtype(st))
        if axes is None and not shape:
            b.node("Identity", [x], [b.output(st)])
            return
        if op_type in ("ReduceMax", "ReduceMin") and _isf(b.out_dtype(st)):
            _onnx_nan_extreme(b, op_type, x, axes, keep, b.out_dtype(st), [b.output(st)])
            return
        b.reduce(op_type, x, axes, keep, [b.output(st)])
    return lower


def _onnx_nan_any(b, x, axes, keep):
    """Whether the reduced elements hold a NaN, as bool."""
    return b.cast(b.reduce("ReduceMax", b.cast(b.node("IsNaN", [x]), np.int32), axes, keep),
                  np.bool_)


def _onnx_nan_extreme(b, op_type, x, axes, keep, dt, out=1):
    """ReduceMax/ReduceMin with PyTorch's NaN: any NaN among the elements gives NaN
    (onnxruntime's ignore a NaN after the first element)."""
    y = b.reduce(op_type, x, axes, keep)
    return b.node("Where", [_onnx_nan_any(b, x, axes, keep),
                            b.const(np.asarray(np.nan, dt)), y], out)


def _onnx_nan_arg(b, op_type, x, axis, keep, out=1):
    """ArgMax/ArgMin with PyTorch's NaN: the first NaN's index where there is one."""
    i = b.node(op_type, [x], axis=axis, keepdims=keep)
    first = b.node("ArgMax", [b.cast(b.node("IsNaN", [x]), np.int32)], axis=axis,
                   keepdims=keep)
    return b.node("Where", [_onnx_nan_any(b, x, [axis], keep), first, i], out)


def _onnx_reduce_bool(op_type):
    """amax/amin of bools: over int32."""
    def lower(b, st):
        if b.dtype(st, 0).kind != "b":
            _onnx_reduce(op_type)(b, st)
            return
        shape = b.shape(st, 0)
        axes = _onnx_dims(st.attrs.get("dim"), len(shape))
        y = b.reduce(op_type, b.cast(b.input(st, 0), np.int32), axes,
                     st.attrs.get("keepdim", False))
        b.cast(y, np.bool_, [b.output(st)])
    return lower


def _onnx_all_any(is_all):
    """any: a count of the true elements above 0; all: no false element (an empty
    reduction gives False and True)."""
    def lower(b, st):
        shape = b.shape(st, 0)
        axes = _onnx_dims(st.attrs.get("dim"), len(shape))
        x = b.input(st, 0, np.bool_)
        if is_all:
            x = b.node("Not", [x])
        x = b.cast(x, np.int64)
        n = b.reduce("ReduceSum", x, axes, st.attrs.get("keepdim", False)) if shape else x
        zero = b.const(np.zeros((), np.int64))
        if b.out_dtype(st) == np.uint8:  # a uint8 input gives a uint8 result
            b.cast(b.node("Equal" if is_all else "Greater", [n, zero]), np.uint8,
                   [b.output(st)])
        else:
            b.node("Equal" if is_all else "Greater", [n, zero], [b.output(st)])
    return lower


def _onnx_sum_to(b, st):
    xs = b.shape(st, 0)
    target = tuple(st.attrs["shape"])
    lead = len(xs) - len(target)
    axes = list(range(lead)) + [lead + i for i, t in enumerate(target)
                                if t == 1 and xs[lead + i] != 1]
    x = b.input(st, 0)
    if axes:
        x = b.reduce("ReduceSum", x, axes, True)
    if lead:
        x = b.squeeze(x, list(range(lead)))
    b.node("Identity", [x], [b.output(st)])


def _onnx_arg(op_type):
    def lower(b, st):
        shape = b.shape(st, 0)
        d = st.attrs.get("dim")
        keep = int(bool(st.attrs.get("keepdim", False)))
        x = b.input(st, 0)
        if b.dtype(st, 0).kind == "b":
            x = b.cast(x, np.int32)
        if not shape:
            b.node("Identity", [b.const(np.zeros((), np.int64))], [b.output(st)])
            return
        nan = _isf(b.dtype(st, 0))
        if d is None:
            x = b.reshape(x, [-1])
            y = _onnx_nan_arg(b, op_type, x, 0, 0) if nan else \
                b.node(op_type, [x], axis=0, keepdims=0)
            b.node("Reshape", [y, b.ints(b.out_shape(st))], [b.output(st)])
            return
        if nan:
            _onnx_nan_arg(b, op_type, x, int(d) % len(shape), keep, [b.output(st)])
            return
        b.node(op_type, [x], [b.output(st)], axis=int(d) % len(shape), keepdims=keep)
    return lower


def _onnx_max_min(op_type, arg):
    def lower(b, st):
        shape = b.shape(st, 0)
        d = st.attrs.get("dim")
        keep = bool(st.attrs.get("keepdim", False))
        x = b.input(st, 0)
        if not shape:
            b.node("Identity", [x], [b.output(st, 0)])
            b.node("Identity", [b.const(np.zeros((), np.int64))], [b.output(st, 1)])
            return
        d = int(d) % len(shape)
        if _isf(b.dtype(st, 0)):  # (PyTorch's NaN: the value and the first NaN's index)
            _onnx_nan_extreme(b, op_type, x, [d], keep, b.dtype(st, 0), [b.output(st, 0)])
            _onnx_nan_arg(b, arg, x, d, int(keep), [b.output(st, 1)])
            return
        xi = b.cast(x, np.int32) if b.dtype(st, 0).kind == "b" else x
        v = b.reduce(op_type, xi, [d], keep)
        b.cast(v, b.out_dtype(st, 0), [b.output(st, 0)])
        b.node(arg, [xi], [b.output(st, 1)], axis=d, keepdims=int(keep))
    return lower


def _onnx_moments(b, st, axes, keep, correction):
    shape = b.shape(st, 0)
    dt = b.out_dtype(st)
    x = b.input(st, 0, dt)
    axes = list(range(len(shape))) if axes is None else axes
    n = int(np.prod([shape[a] for a in axes])) if shape else 1
    m = b.reduce("ReduceMean", x, axes, True) if shape else x
    dev = b.node("Sub", [x, m])
    ss = b.reduce("ReduceSum", b.node("Mul", [dev, dev]), axes, keep) if shape else \
        b.node("Mul", [dev, dev])
    return b.node("Div", [ss, b.const(np.asarray(_builtins.max(n - correction, 0), dt))])


def _onnx_var(std):
    def lower(b, st):
        shape = b.shape(st, 0)
        a = st.attrs
        c = a.get("correction", 1)
        c = 1 if c is None else c
        v = _onnx_moments(b, st, _onnx_dims(a.get("dim"), len(shape)), a.get("keepdim", False), c)
        b.node("Sqrt" if std else "Identity", [v], [b.output(st)])
    return lower


def _onnx_logsumexp(b, st):
    shape = b.shape(st, 0)
    axes = _onnx_dims(st.attrs.get("dim"), len(shape))
    keep = st.attrs.get("keepdim", False)
    dt = b.out_dtype(st)
    x = b.input(st, 0, dt)
    if not shape:
        b.node("Identity", [x], [b.output(st)])
        return
    axes = list(range(len(shape))) if axes is None else axes
    m = b.reduce("ReduceMax", x, axes, True)
    zero = b.const(np.zeros((), dt))
    m = b.node("Where", [b.node("IsInf", [m]), zero, m])   # all -inf: no shift
    s = b.reduce("ReduceSum", b.node("Exp", [b.node("Sub", [x, m])]), axes, keep)
    mm = m if keep else b.squeeze(m, axes)
    b.node("Add", [b.node("Log", [s]), mm], [b.output(st)])


def _onnx_cumsum(reverse):
    def lower(b, st):
        shape = b.shape(st, 0)
        x = b.input(st, 0, b.out_dtype(st))
        if not shape:
            b.node("Identity", [x], [b.output(st)])
            return
        d = int(st.attrs["dim"]) % len(shape)
        b.node("CumSum", [x, b.const(np.asarray(d, np.int64))], [b.output(st)],
               reverse=int(reverse))
    return lower


def _onnx_cumprod(b, st):
    shape = b.shape(st, 0)
    x = b.input(st, 0, b.out_dtype(st))
    if not shape or shape[int(st.attrs["dim"]) % len(shape)] <= 1:
        b.node("Identity", [x], [b.output(st)])
        return
    d = int(st.attrs["dim"]) % len(shape)
    parts = b.split(x, [1] * shape[d], d)
    acc = [parts[0]]
    for p in parts[1:]:
        acc.append(b.node("Mul", [acc[-1], p]))
    b.node("Concat", acc, [b.output(st)], axis=d)


def _with_dim(name):
    """PyTorch's node names of a reduction: ``...Backward0`` over all elements,
    ``...Backward1`` for its overload with ``dim``."""
    return lambda attrs, shapes: f"{name}Backward{0 if attrs.get('dim') is None else 1}"


SUM = register(name="sum", autocast={"cuda": "fp32_unless_dtype"}, onnx=_onnx_reduce("ReduceSum"),
               halfwidth=True,
               vmap=_vmap.dim_attrs(), kernel=_sum_kernel, infer=_reduce_infer("sum", "sum"),
               vjp=_sum_vjp,
               samples=_reduce_samples, error_samples=_dim_errors,
               jvp=lambda ctx, xt: (bind(SUM, xt, **ctx.attrs),), grad_fn_name=_with_dim("Sum"),
               torch=lambda torch, x, dim=None, keepdim=False:
               torch.sum(x, dim=dim, keepdim=keepdim) if dim is not None else torch.sum(x))


def sum(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):  # noqa: A001
    """Sum over ``dim`` (int, tuple, or None for all)."""
    if isinstance(input, np.ndarray) and hasattr(input, "full_reduce"):  # @fuse tracing
        return input.full_reduce("sum", _dims("sum", dim, axis), _keep(keepdim, keepdims), dtype)
    dim = _canon("sum", input, _dims("sum", dim, axis))
    r = bind(SUM, input, dim=dim, keepdim=_keep(keepdim, keepdims))
    return r.to(dtype) if dtype is not None else r


def _mean_kernel(x, dim=None, keepdim=False, out=None):
    dims = normalize_dims("mean", dim, x.ndim)
    if x.size == 0:  # np.mean warns "Mean of empty slice"; PyTorch's NaN comes silently
        r = np.sum(x, axis=dims, keepdims=keepdim) / _count(x.shape, dims)
        r = np.asarray(r, dtype=x.dtype)
        if out is None:
            return r
        out[...] = r
        return out
    if out is not None:
        np.mean(x, axis=dims, keepdims=keepdim, out=out)
        return out
    return np.asarray(np.mean(x, axis=dims, keepdims=keepdim))


def _count(shape, dims):
    n = 1
    for d in dims:
        n *= shape[d]
    return n


def _mean_vjp(ctx, g):
    shape = ctx.shapes[0]
    dims = normalize_dims("mean", ctx.attrs.get("dim"), len(shape))
    n = _count(shape, dims)
    return (_expand_back(ctx.m, g / _builtins.max(n, 1), shape, dims,
                         ctx.attrs.get("keepdim", False)),)


MEAN = register(name="mean", onnx=_onnx_reduce("ReduceMean"), vmap=_vmap.dim_attrs(),
                jvp=_jvp.linear, kernel=_mean_kernel, infer=_reduce_infer("mean", "float"),
                vjp=_mean_vjp, samples=_reduce_samples, error_samples=_dim_errors,
                grad_fn_name=_with_dim("Mean"),
                torch=lambda torch, x, dim=None, keepdim=False:
                torch.mean(x, dim=dim, keepdim=keepdim) if dim is not None else torch.mean(x))


def mean(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """The mean over ``dim`` (all elements by default), of a floating tensor, as
    ``torch.mean``."""
    if isinstance(input, np.ndarray) and hasattr(input, "full_reduce"):  # @fuse tracing
        return input.full_reduce("mean", _dims("mean", dim, axis), _keep(keepdim, keepdims),
                                 dtype)
    dim = _canon("mean", input, _dims("mean", dim, axis))
    if dtype is not None:
        input = input.to(dtype)
    return bind(MEAN, input, dim=dim, keepdim=_keep(keepdim, keepdims))


# ---------------------------------------------------------------- sum_to
def _sum_to_dims(shape, target):
    lead = len(shape) - len(target)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(target)
                                      if s == 1 and shape[lead + i] != 1)
    return dims, lead


def _sum_to_kernel(x, shape, out=None):
    shape = tuple(shape)
    if out is not None:
        if x.shape == shape or not out.flags.c_contiguous or np.may_share_memory(out, x):
            out[...] = _sum_to_kernel(x, shape)
        else:  # (leading 1s added to a contiguous out: a view of it)
            dims, lead = _sum_to_dims(x.shape, shape)
            np.sum(x, axis=dims, keepdims=True, out=out.reshape((1,) * lead + shape))
        return out
    if x.shape == shape:
        return x
    dims, lead = _sum_to_dims(x.shape, shape)
    if len(shape) and shape[-1] == x.shape[-1] and _builtins.all(s == 1 for s in shape[:-1]):
        # (..., n) to (n,) or (1, n): a sum over every dim but the last
        r = _leading_sum(x, dims if lead == 0 else tuple(range(x.ndim - 1)))
        if r is not None:
            return r.reshape(shape)
    r = np.sum(x, axis=dims, keepdims=True)
    return np.asarray(r.reshape(shape))


def _sum_to_infer(x, shape):
    shape = tuple(shape)
    try:
        np.broadcast_shapes(shape, tuple(x.shape))
        ok = (len(shape) <= len(x.shape)
              and np.broadcast_shapes(shape, tuple(x.shape)) == tuple(x.shape))
    except ValueError:
        ok = False
    if not ok:
        raise op_error("sum_to", f"cannot sum shape {tuple(x.shape)} to shape {shape}")
    return TensorSpec(shape, x.dtype)


SUM_TO = register(name="sum_to", onnx=_onnx_sum_to, vmap=_vmap.shape_attr(), jvp=_jvp.linear,
                  kernel=_sum_to_kernel, infer=_sum_to_infer,
                  vjp=lambda ctx, g: (ctx.m.broadcast_to(g, ctx.shapes[0]),),
                  samples=lambda dtype=np.float64: [
                      Sample((rand((2, 3, 4), dtype),), {"shape": (3, 1)}),
                      Sample((rand((3, 4), dtype),), {"shape": (3, 4)})],
                  error_samples=lambda: [((rand((3, 4)),), {"shape": (5,)}, ValueError)],
                  torch=lambda torch, x, shape: x.sum_to_size(tuple(shape)))


def sum_to(input, shape):
    """Sum a broadcast result back to ``shape`` (the adjoint of broadcasting)."""
    shape = tuple(shape)
    if tuple(input.shape) == shape:
        return input
    return bind(SUM_TO, input, shape=shape)


# ---------------------------------------------------------------- amax / amin
def _check_extreme(name, shape, dim):
    """max and min have no value over nothing: PyTorch's IndexError for an empty dim
    named, RuntimeError for an empty tensor reduced whole."""
    dims = normalize_dims(name, dim, len(shape))
    for d in dims:
        if shape[d] == 0:
            if dim is None:
                raise op_error(name, f"expected a reduction dim to be specified for an empty "
                                     f"input of shape {shape}", RuntimeError)
            raise op_error(name, f"expected reduction dim {d} to have non-zero size (shape "
                                 f"{shape})", IndexError)
    return dims


def _extreme_kernel(fn, name):
    def kernel(x, dim=None, keepdim=False, out=None):
        dims = _check_extreme(name, tuple(x.shape), dim) if x.size == 0 else \
            normalize_dims(name, dim, x.ndim)
        if out is not None:
            fn(x, axis=dims, keepdims=keepdim, out=out)
            return out
        return np.asarray(fn(x, axis=dims, keepdims=keepdim))
    return kernel


def _extreme_infer(name):
    def infer(x, dim=None, keepdim=False):
        _check_extreme(name, tuple(x.shape), dim)
        return _reduce_infer(name)(x, dim, keepdim)
    return infer


def _extreme_vjp(name):
    def vjp(ctx, g):
        x = ctx.inputs[0]
        out = ctx.out
        m = ctx.m
        shape = ctx.shapes[0]
        dims = normalize_dims(name, ctx.attrs.get("dim"), len(shape))
        keep = ctx.attrs.get("keepdim", False)
        # the gradient is split evenly among tied extremes (as PyTorch's amax)
        out_b = _expand_back(m, out, shape, dims, keep)
        mask = _mask_like(m, x == out_b, x)
        count = m.sum(mask, dim=dims, keepdim=True)
        gb = _expand_back(m, g, shape, dims, keep)
        return (gb * mask / count,)
    return vjp


def _extreme_errors():
    return _dim_errors() + [((rand((0, 3)),), {"dim": None}, RuntimeError),
                            ((rand((0, 3)),), {"dim": (0,)}, IndexError)]


AMAX = register(name="amax", onnx=_onnx_reduce_bool("ReduceMax"), vmap=_vmap.dim_attrs(),
                jvp=_jvp.reduction, kernel=_extreme_kernel(np.amax, "amax"),
                infer=_extreme_infer("amax"), vjp=_extreme_vjp("amax"), saves=("x", "out"),
                samples=_reduce_samples, error_samples=_extreme_errors,
                torch=lambda torch, x, dim=None, keepdim=False:
                torch.amax(x, dim=dim if dim is not None else (), keepdim=keepdim))


def amax(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The largest value over ``dim`` (all dims by default), as ``torch.amax``."""
    dim = _canon_named("amax", input, _dims("amax", dim, axis))
    return bind(AMAX, input, dim=dim, keepdim=_keep(keepdim, keepdims))


AMIN = register(name="amin", onnx=_onnx_reduce_bool("ReduceMin"), vmap=_vmap.dim_attrs(),
                jvp=_jvp.reduction, kernel=_extreme_kernel(np.amin, "amin"),
                infer=_extreme_infer("amin"), vjp=_extreme_vjp("amin"), saves=("x", "out"),
                samples=_reduce_samples, error_samples=_dim_errors,
                torch=lambda torch, x, dim=None, keepdim=False:
                torch.amin(x, dim=dim if dim is not None else (), keepdim=keepdim))


def amin(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The smallest value over ``dim`` (all dims by default), as ``torch.amin``."""
    dim = _canon_named("amin", input, _dims("amin", dim, axis))
    return bind(AMIN, input, dim=dim, keepdim=_keep(keepdim, keepdims))


# ---------------------------------------------------------------- prod
def _prod_kernel(x, dim=None, keepdim=False, out=None):
    dims = normalize_dims("prod", dim, x.ndim)
    dt = np.int64 if x.dtype.kind in "biu" else None
    if out is not None:
        np.prod(x, axis=dims, keepdims=keepdim, dtype=dt, out=out)
        return out
    return np.asarray(np.prod(x, axis=dims, keepdims=keepdim, dtype=dt))


def _prod_vjp(ctx, g):
    x = ctx.inputs[0]
    m = ctx.m
    shape = ctx.shapes[0]
    dims = normalize_dims("prod", ctx.attrs.get("dim"), len(shape))
    gb = _expand_back(m, g, shape, dims, ctx.attrs.get("keepdim", False))
    if not dims:
        return (gb,)
    if not bool((getattr(x, "_data", x) == 0).any()):
        return (gb * m.prod(x, dim=dims, keepdim=True) / x,)
    # with zeros, out / x is wrong: the product of all the others is taken instead,
    # built from exclusive cumulative products so that it differentiates again
    return (gb * _prod_of_others(m, x, shape, dims),)


def _prod_of_others(m, x, shape, dims):
    """``prod_{k != i} x_k`` over the reduced dims, for every position i."""
    rest = [d for d in range(len(shape)) if d not in dims]
    perm = rest + list(dims)
    k = 1
    for d in dims:
        k *= shape[d]
    flat = m.reshape(m.permute(x, tuple(perm)), tuple(shape[d] for d in rest) + (k,))
    one = m.ones_like(flat[..., :1])
    left = m.cumprod(m.cat([one, flat[..., :-1]], dim=-1), dim=-1)
    right = m.flip(m.cumprod(m.flip(m.cat([flat[..., 1:], one], dim=-1), dims=(-1,)), dim=-1),
                   dims=(-1,))
    others = m.reshape(left * right, tuple(shape[d] for d in perm))
    return m.permute(others, tuple(int(i) for i in np.argsort(perm)))


def _prod_samples(dtype=np.float64):
    # zeros take the vjp's other branch: one zero in row 0, two in row 1
    z = rand((3, 4), dtype, seed=5)
    z[0, 1] = 0
    z[1, [0, 2]] = 0
    return _reduce_samples(dtype) + [Sample((z,), {"dim": (1,), "keepdim": False}),
                                     Sample((z,), {"dim": None, "keepdim": True})]


def _prod_torch(torch, x, dim=None, keepdim=False):
    """torch.prod takes one dim at a time (or none: all of them, no keepdim)."""
    if x.ndim == 0:
        return torch.prod(x)
    dims = range(x.ndim) if dim is None else dim if isinstance(dim, (tuple, list)) else (dim,)
    for d in sorted((d % x.ndim for d in dims), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


PROD = register(name="prod", autocast={"cpu": "fp32", "cuda": "fp32_unless_dtype"},
                grad_fn_name=_with_dim("Prod"),
                onnx=_onnx_reduce("ReduceProd"), vmap=_vmap.dim_attrs_flat(), jvp=_jvp.reduction,
                kernel=_prod_kernel, infer=_reduce_infer("prod", "sum"),
                vjp=_prod_vjp, saves=("x",), samples=_prod_samples, error_samples=_dim_errors,
                torch=_prod_torch)


def prod(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    """The product over ``dim`` (all elements by default), as ``torch.prod``."""
    dim = _canon("prod", input, _dims("prod", dim, axis))
    r = bind(PROD, input, dim=dim, keepdim=_keep(keepdim, keepdims))
    return r.to(dtype) if dtype is not None else r


# ---------------------------------------------------------------- helpers for the ops below
def _raw(v):
    """The array behind a Tensor (for data-dependent choices and device-local constants)."""
    return v._data if isinstance(v, Tensor) else v


def _mask_like(m, cond, like):
    """0/1 of ``like``'s dtype and shape where ``cond`` (no gradient), made with ops (an
    adjoint run by an export gets its own framework's arrays)."""
    return m.where(cond, m.ones_like(like), m.zeros_like(like))


def _dim_samples(dtype=np.float64, keep=(False, True)):
    """Single-dim samples: size-1 dims, negative dim, non-contiguous, 0-d."""
    out = []
    for k, keepdim in enumerate(keep):
        out += [Sample((rand((3, 4), dtype, seed=1 + k),), {"dim": 1, "keepdim": keepdim}),
                Sample((rand((2, 3, 4), dtype, seed=3 + k),), {"dim": -2, "keepdim": keepdim}),
                Sample((rand((1, 4), dtype, seed=5 + k),), {"dim": 0, "keepdim": keepdim}),
                Sample((rand((4, 3), dtype, seed=7 + k).T,), {"dim": 0, "keepdim": keepdim})]
    out.append(Sample((rand((), dtype, seed=9),), {"dim": 0, "keepdim": False}))
    return out


def _multi_samples(dtype=np.float64, seed=0):
    """Multi-dim samples: None, int, negative, tuple dims, keepdim, size-1 dims."""
    return [Sample((rand((3, 4), dtype, seed=seed + 1),), {"dim": None, "keepdim": False}),
            Sample((rand((3, 4), dtype, seed=seed + 2),), {"dim": (1,), "keepdim": False}),
            Sample((rand((3, 4), dtype, seed=seed + 3),), {"dim": (0,), "keepdim": True}),
            Sample((rand((2, 3, 4), dtype, seed=seed + 4),), {"dim": (0, 2), "keepdim": True}),
            Sample((rand((2, 1, 4), dtype, seed=seed + 5),), {"dim": (1, 2), "keepdim": False}),
            Sample((rand((4, 3), dtype, seed=seed + 6).T,), {"dim": (1,), "keepdim": False}),
            Sample((rand((), dtype, seed=seed + 7),), {"dim": None, "keepdim": False})]


# ---------------------------------------------------------------- max / min with a dim
# values and indices together (nout=2); the gradient goes to the selected index only
_values_indices = {n: namedtuple(n, ["values", "indices"]) for n in ("max", "min")}


def _dim_reduced_shape(shape, dim, keepdim):
    if len(shape) == 0:
        return ()
    return _reduced_shape(tuple(shape), (dim,), keepdim)


def _argext_kernel(arg, name):
    ext = np.amax if name == "max" else np.amin

    def kernel(x, dim, keepdim=False, out=None):
        if out is not None:  # (values, indices): the caller's buffers
            vo, io = out
            if x.ndim == 0:
                vo[...] = x
                io[...] = 0
                return vo, io
            if x.shape[dim] == 0:
                raise op_error(name, f"expected reduction dim {dim} to have non-zero size "
                                     f"(shape {tuple(x.shape)})", IndexError)
            dim = dim % x.ndim
            n = x.shape[dim]
            if n == 1 or np.may_share_memory(vo, x):  # (out is x: n is 1)
                vo[...] = x if keepdim else np.squeeze(x, dim)
                io[...] = 0
                return vo, io
            ext(x, axis=dim, out=vo, keepdims=keepdim)  # a ufunc reduction: no temporary
            if dim == x.ndim - 1 or io.size < 4096:
                # (argmax along another dim copies x to make that dim contiguous)
                arg(x, axis=dim, out=io, keepdims=keepdim)
                return vo, io
            # the first position holding the extremum (NaN wins, as in argmax), found
            # from the last position back, each step on output-sized slices (boolean
            # masks only beside the outs)
            v = vo if not keepdim else np.squeeze(vo, dim)
            i = io if not keepdim else np.squeeze(io, dim)
            nan = _isf(x.dtype) and bool(np.isnan(v).any())
            hit = np.empty(v.shape, np.bool_)
            lead = (slice(None),) * dim
            for k in range(n - 1, -1, -1):
                xk = x[lead + (k,)]
                np.equal(xk, v, out=hit)
                if nan:  # (a row with a NaN has a NaN extremum: the NaNs hit)
                    hit |= np.isnan(xk)
                np.copyto(i, k, where=hit)
            return vo, io
        if x.ndim == 0:
            return (x.copy(), np.zeros((), np.int64))
        if x.shape[dim] == 0:
            raise op_error(name, f"expected reduction dim {dim} to have non-zero size "
                                 f"(shape {tuple(x.shape)})", IndexError)
        idx = np.expand_dims(arg(x, axis=dim), dim)  # first occurrence; NaN wins
        vals = np.take_along_axis(x, idx, axis=dim)
        idx = idx.astype(np.int64, copy=False)
        if not keepdim:
            vals, idx = np.squeeze(vals, dim), np.squeeze(idx, dim)
        return vals, idx
    return kernel


def _argext_infer(name):
    def infer(x, dim, keepdim=False):
        shape = tuple(x.shape)
        dim = normalize_dim(name, dim, len(shape))
        if shape and shape[dim] == 0:
            raise op_error(name, f"expected reduction dim {dim} to have non-zero size "
                                 f"(shape {shape})", IndexError)
        out = _dim_reduced_shape(shape, dim, keepdim)
        return TensorSpec(out, x.dtype), TensorSpec(out, np.dtype(np.int64))
    return infer


def _argext_vjp(ctx, g):
    gv = g[0]
    shape = ctx.shapes[0]
    if len(shape) == 0:
        return (gv,)
    dim = normalize_dim("max", ctx.attrs["dim"], len(shape))
    keep = ctx.attrs.get("keepdim", False)
    hit = _index_onehot(ctx.out[1], shape, dim)
    return (ctx.m.where(hit, _expand_back(ctx.m, gv, shape, (dim,), keep), 0.0),)


def _argext_errors():
    return [((rand((2, 3)),), {"dim": 2}, IndexError),
            ((rand((0, 3)),), {"dim": 0}, IndexError)]


def _argext_torch(name):
    def oracle(torch, x, dim, keepdim=False):
        return getattr(torch, name)(x, dim, keepdim)
    return oracle


MAX_DIM = register(name="max", onnx=_onnx_max_min("ReduceMax", "ArgMax"), vmap=_vmap.dim_attrs(),
                   jvp=_jvp.reduction, kernel=_argext_kernel(np.argmax, "max"), nout=2,
                   infer=_argext_infer("max"), vjp=_argext_vjp, saves=("out",), out_checked=1,
                   doc="max with a dim: (values, indices); max without one is amax",
                   samples=_dim_samples, error_samples=_argext_errors,
                   torch=_argext_torch("max"))


def max(input, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """The largest value; with ``dim`` the named tuple ``(values, indices)``.

    As PyTorch: ``max(x)`` splits the gradient among tied maxima; ``max(x, dim)``
    gives it to the returned index only; ``max(x, other_tensor)`` is ``maximum``.
    """
    return _max_min("max", MAX_DIM, "maximum", input, dim, keepdim, axis, keepdims)


MIN_DIM = register(name="min", onnx=_onnx_max_min("ReduceMin", "ArgMin"), vmap=_vmap.dim_attrs(),
                   jvp=_jvp.reduction, kernel=_argext_kernel(np.argmin, "min"), nout=2,
                   infer=_argext_infer("min"), vjp=_argext_vjp, saves=("out",), out_checked=1,
                   samples=_dim_samples, error_samples=_argext_errors,
                   torch=_argext_torch("min"))


def min(input, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """The smallest value; with ``dim`` the named tuple ``(values, indices)`` (see ``max``)."""
    return _max_min("min", MIN_DIM, "minimum", input, dim, keepdim, axis, keepdims)


def _onehot_kernel(indices, shape, dim, out=None):
    shape = tuple(shape)
    if indices.dtype.kind not in "iu":
        raise op_error("index_onehot", f"indices must be integers, got {indices.dtype}",
                       TypeError)
    if len(shape) == 0:
        if out is not None:
            out[...] = True
            return out
        return np.ones_like(indices, dtype=np.bool_)
    dim = normalize_dim("index_onehot", dim, len(shape))
    idx = indices if indices.ndim == len(shape) else np.expand_dims(indices, dim)
    pos = np.arange(shape[dim], like=indices).reshape(
        tuple(-1 if d == dim else 1 for d in range(len(shape))))
    if out is not None:  # the comparison broadcast straight into out
        if np.broadcast_shapes(idx.shape, pos.shape) == shape:
            np.equal(idx, pos, out=out)
        else:
            out[...] = idx == pos
        return out
    return np.broadcast_to(idx == pos, shape)


def _onehot_infer(indices, shape, dim):
    shape = tuple(shape)
    if np.dtype(indices.dtype).kind not in "iu":
        raise op_error("index_onehot", f"indices must be integers, got {np.dtype(indices.dtype)}",
                       TypeError)
    if shape:
        normalize_dim("index_onehot", dim, len(shape))
    return TensorSpec(shape, np.dtype(np.bool_))


INDEX_ONEHOT = register(
    name="index_onehot", kernel=_onehot_kernel, infer=_onehot_infer, args=("indices",),
    differentiable=False,
    samples=lambda dtype=None: [
        Sample((np.array([2, 0, 1]),), {"shape": (3, 4), "dim": 1}, False),
        Sample((np.array([[1, 0, 1, 1]]),), {"shape": (2, 4), "dim": 0}, False)],
    error_samples=lambda: [((rand((3,)),), {"shape": (3, 4), "dim": 1}, TypeError)],
    torch=lambda torch, indices, shape, dim: _onehot_torch(torch, indices, shape, dim))


def _onehot_torch(torch, indices, shape, dim):
    """The same mask written by scattering True into zeros, one per line along dim."""
    shape = tuple(shape)
    if not shape:
        return torch.ones_like(indices, dtype=torch.bool)
    dim %= len(shape)
    idx = indices if indices.ndim == len(shape) else indices.unsqueeze(dim)
    idx = idx.expand(tuple(1 if d == dim else n for d, n in enumerate(shape)))
    return torch.zeros(shape, dtype=torch.bool).scatter(dim, idx, True)


def _index_onehot(indices, shape, dim):
    """Bool mask of ``shape``: True where the position along ``dim`` is ``indices``."""
    return bind(INDEX_ONEHOT, indices, shape=tuple(shape), dim=dim)


# ---------------------------------------------------------------- argmax / argmin
def _arg_kernel(fn, name):
    def kernel(x, dim=None, keepdim=False, out=None):
        if out is not None:
            if x.size == 0:
                out[...] = 0
            elif out.dtype != np.intp or type(out) is not np.ndarray:  # NumPy's index type
                out[...] = kernel(x, dim, keepdim)
            else:
                fn(x, axis=None if dim is None or x.ndim == 0 else dim, keepdims=keepdim,
                   out=out)
            return out
        if x.size == 0:  # along a non-empty dim of an empty input: an empty result
            return np.zeros(_arg_infer(name)(x, dim, keepdim).shape, np.int64)
        if dim is None or x.ndim == 0:
            r = np.asarray(fn(x)).astype(np.int64)
            return r.reshape((1,) * x.ndim) if keepdim else r
        return np.asarray(fn(x, axis=dim, keepdims=keepdim)).astype(np.int64, copy=False)
    return kernel


def _arg_infer(name):
    def infer(x, dim=None, keepdim=False):
        shape = tuple(x.shape)
        if np.dtype(x.dtype).kind == "b":  # PyTorch's RuntimeError
            raise op_error(name, "does not support bool input", RuntimeError)
        if dim is None or not shape:
            if 0 in shape:
                raise op_error(name, f"cannot take {name} of an empty tensor of shape {shape} "
                                     f"without a dim", IndexError)
            out = (1,) * len(shape) if keepdim else ()
        else:
            d = normalize_dim(name, dim, len(shape))
            if shape[d] == 0:
                raise op_error(name, f"expected reduction dim {d} to have non-zero size "
                                     f"(shape {shape})", IndexError)
            out = _dim_reduced_shape(shape, d, keepdim)
        return TensorSpec(out, np.dtype(np.int64))
    return infer


def _arg_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype, seed=1),), {"dim": None, "keepdim": False}, False),
            Sample((rand((3, 4), dtype, seed=2),), {"dim": None, "keepdim": True}, False),
            Sample((rand((2, 3, 4), dtype, seed=3),), {"dim": 2, "keepdim": False}, False),
            Sample((rand((2, 3, 4), dtype, seed=4),), {"dim": 1, "keepdim": True}, False),
            Sample((rand((4, 3), dtype, seed=5).T,), {"dim": 0, "keepdim": False}, False),
            Sample((rand((), dtype, seed=6),), {"dim": None, "keepdim": False}, False),
            Sample((np.array([[1, 5, 5], [7, 7, 0]]),), {"dim": 1, "keepdim": False}, False),
            Sample((rand((0, 4), dtype, seed=7),), {"dim": 1, "keepdim": False}, False),
            Sample((rand((2, 0), dtype, seed=8),), {"dim": 0, "keepdim": True}, False)]


def _arg_torch(name):
    def oracle(torch, x, dim=None, keepdim=False):
        return getattr(torch, name)(x, dim=dim, keepdim=keepdim)
    return oracle


ARGMAX = register(name="argmax", onnx=_onnx_arg("ArgMax"), vmap=_vmap.dim_attrs_flat(),
                  kernel=_arg_kernel(np.argmax, "argmax"),
                  infer=_arg_infer("argmax"), differentiable=False, samples=_arg_samples,
                  error_samples=lambda: [((rand((2, 3)),), {"dim": -3}, IndexError),
                                         ((rand((0,)),), {}, IndexError)],
                  torch=_arg_torch("argmax"))


def argmax(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Index of the largest value (the first one); ``dim=None``: into the flattened tensor."""
    return _arg("argmax", ARGMAX, input, dim, keepdim, axis, keepdims)


ARGMIN = register(name="argmin", onnx=_onnx_arg("ArgMin"), vmap=_vmap.dim_attrs_flat(),
                  kernel=_arg_kernel(np.argmin, "argmin"),
                  infer=_arg_infer("argmin"), differentiable=False, samples=_arg_samples,
                  error_samples=lambda: [((rand((2, 3)),), {"dim": 2}, IndexError),
                                         ((rand((2, 0)),), {"dim": 1}, IndexError)],
                  torch=_arg_torch("argmin"))


def argmin(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """Index of the smallest value (the first one); ``dim=None``: into the flattened tensor."""
    return _arg("argmin", ARGMIN, input, dim, keepdim, axis, keepdims)


# ---------------------------------------------------------------- var / std
def _float_only(name, x):
    if not _isf(x.dtype):
        raise op_error(name, f"expected a floating point input, got {x.dtype}", DtypeError)


def _dof(shape, dims, correction):
    return _count(shape, dims) - correction


def _var_kernel(x, dim=None, correction=1, keepdim=False):
    _float_only("var", x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.var(x, axis=dim, ddof=correction, keepdims=keepdim))


def _var_grad(m, x, g, dims, correction):
    """d var / dx times ``g`` (already broadcast): 2 (x - mean) / (N - correction)."""
    dof = _dof(tuple(x.shape), dims, correction)
    mean = m.mean(x, dim=dims, keepdim=True)
    return g * (x - mean) * (2.0 / dof if dof > 0 else math.nan)


def _var_vjp(ctx, g):
    shape = ctx.shapes[0]
    dims = normalize_dims("var", ctx.attrs.get("dim"), len(shape))
    gb = _expand_back(ctx.m, g, shape, dims, ctx.attrs.get("keepdim", False))
    return (_var_grad(ctx.m, ctx.inputs[0], gb, dims, ctx.attrs.get("correction", 1)),)


def _var_samples(dtype=np.float64):
    out = _multi_samples(dtype, seed=20)
    out = [Sample(s.args, dict(s.attrs, correction=1)) for s in out[:-1]]
    return out + [Sample((rand((3, 4), dtype, seed=30),), {"dim": (1,), "correction": 0,
                                                           "keepdim": False}),
                  Sample((rand((3, 4), dtype, seed=31),), {"dim": None, "correction": 2,
                                                           "keepdim": True})]


def _var_torch(name):
    def oracle(torch, x, dim=None, correction=1, keepdim=False):
        return getattr(torch, name)(x, dim=dim, correction=correction, keepdim=keepdim)
    return oracle


def _var_errors():
    return [((rand((2, 3)),), {"dim": (2,)}, IndexError),
            ((np.arange(6),), {}, TypeError)]


VAR = register(name="var", onnx=_onnx_var(False), vmap=_vmap.dim_attrs(), jvp=_jvp.reduction,
               kernel=_var_kernel, infer=_reduce_infer("var", "float"), vjp=_var_vjp,
               saves=("x",), samples=_var_samples, error_samples=_var_errors,
               torch=_var_torch("var"))


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None,
        keepdims=None):
    """Variance over ``dim``, dividing by ``N - correction`` (``correction=1`` default;
    ``unbiased=False`` is ``correction=0``)."""
    dim, correction = _correction("var", _dims("var", dim, axis), unbiased, correction)
    return bind(VAR, input, dim=_canon("var", input, dim), correction=correction,
                keepdim=_keep(keepdim, keepdims))


def _std_kernel(x, dim=None, correction=1, keepdim=False):
    _float_only("std", x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.std(x, axis=dim, ddof=correction, keepdims=keepdim))


def _std_vjp(ctx, g):
    # d std = d var / (2 std); 0 where std == 0 (as PyTorch), with a safe denominator
    # so the masked branch adds no NaN to higher-order gradients
    m = ctx.m
    shape = ctx.shapes[0]
    dims = normalize_dims("std", ctx.attrs.get("dim"), len(shape))
    keep = ctx.attrs.get("keepdim", False)
    out = ctx.out
    zero = out == 0
    gs = m.where(zero, 0.0, g / (2 * m.where(zero, 1.0, out)))
    gb = _expand_back(m, gs, shape, dims, keep)
    return (_var_grad(m, ctx.inputs[0], gb, dims, ctx.attrs.get("correction", 1)),)


STD = register(name="std", onnx=_onnx_var(True), vmap=_vmap.dim_attrs(), jvp=_jvp.reduction,
               kernel=_std_kernel, infer=_reduce_infer("std", "float"), vjp=_std_vjp,
               saves=("x", "out"), samples=_var_samples, error_samples=_var_errors,
               torch=_var_torch("std"))


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None,
        keepdims=None):
    """Standard deviation, ``sqrt(var)``; its gradient is 0 where it is 0 (as PyTorch)."""
    dim, correction = _correction("std", _dims("std", dim, axis), unbiased, correction)
    return bind(STD, input, dim=_canon("std", input, dim), correction=correction,
                keepdim=_keep(keepdim, keepdims))


# ---------------------------------------------------------------- logsumexp
def _logsumexp_kernel(x, dim=None, keepdim=False):
    # shift by the max (0 where it is infinite), so nothing overflows
    top = np.max(x, axis=dim, keepdims=True, initial=-np.inf)
    top = np.where(np.isfinite(top), top, 0).astype(x.dtype, copy=False)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - top), axis=dim, keepdims=True)) + top
    if not keepdim:
        dims = normalize_dims("logsumexp", dim, x.ndim)
        out = out.reshape(_reduced_shape(x.shape, dims, False))
    return np.asarray(out)


def _logsumexp_vjp(ctx, g):
    x, out = ctx.inputs[0], ctx.out
    m = ctx.m
    shape = ctx.shapes[0]
    dims = normalize_dims("logsumexp", ctx.attrs.get("dim"), len(shape))
    keep = ctx.attrs.get("keepdim", False)
    gb = _expand_back(m, g, shape, dims, keep)
    return (gb * m.exp(x - _expand_back(m, out, shape, dims, keep)),)


def _logsumexp_samples(dtype=np.float64):
    big = np.array([[1e4, 1e4 - 1, -1e4], [-1e4, -1e4 + 2, -1e4 - 1]], dtype)
    return _multi_samples(dtype, seed=40) + [
        Sample((big,), {"dim": (1,), "keepdim": False}),
        Sample((big,), {"dim": (0,), "keepdim": True}),
        Sample((np.array([[-np.inf, -np.inf], [0.0, -np.inf]], dtype),),
               {"dim": (1,), "keepdim": False}, False)]


LOGSUMEXP = register(name="logsumexp", autocast={"cuda": "fp32"}, onnx=_onnx_logsumexp,
                     vmap=_vmap.dim_attrs(), jvp=_jvp.reduction, kernel=_logsumexp_kernel,
                     promote="float",
                     infer=_reduce_infer("logsumexp", "float"), vjp=_logsumexp_vjp,
                     saves=("x", "out"), samples=_logsumexp_samples,
                     error_samples=lambda: [((rand((2, 3)),), {"dim": (0, 2)}, IndexError)],
                     torch=lambda torch, x, dim=None, keepdim=False: torch.logsumexp(
                         x, dim if dim is not None else tuple(range(x.ndim)), keepdim))


def logsumexp(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """``log(sum(exp(x)))`` over ``dim`` (required, as PyTorch), without overflow."""
    dim = _dims("logsumexp", dim, axis)
    if dim is None:
        raise op_error("logsumexp", "missing the required argument 'dim'", TypeError)
    return bind(LOGSUMEXP, input, dim=_canon("logsumexp", input, dim),
                keepdim=_keep(keepdim, keepdims))


# ---------------------------------------------------------------- norm
def _norm_kernel(x, p=2.0, dim=None, keepdim=False):
    _float_only("norm", x)
    if p == 2:
        r = np.sqrt(np.sum(x * x, axis=dim, keepdims=keepdim))
    elif p == 1:
        r = np.sum(np.abs(x), axis=dim, keepdims=keepdim)
    elif p == math.inf:
        r = np.max(np.abs(x), axis=dim, keepdims=keepdim, initial=0)
    elif p == -math.inf:
        r = np.min(np.abs(x), axis=dim, keepdims=keepdim, initial=math.inf)
    elif p == 0:
        r = np.sum(x != 0, axis=dim, keepdims=keepdim).astype(x.dtype)
    else:
        r = np.sum(np.abs(x) ** p, axis=dim, keepdims=keepdim) ** (1.0 / p)
    return np.asarray(r).astype(x.dtype, copy=False)


def _norm_vjp(ctx, g):
    x, out = ctx.inputs[0], ctx.out
    m = ctx.m
    p = ctx.attrs.get("p", 2.0)
    shape = ctx.shapes[0]
    dims = normalize_dims("norm", ctx.attrs.get("dim"), len(shape))
    keep = ctx.attrs.get("keepdim", False)
    gb = _expand_back(m, g, shape, dims, keep)
    if p == 0:
        return (gb * 0,)
    if p == 1:
        return (gb * m.sign(x),)
    outb = _expand_back(m, out, shape, dims, keep)
    zero = outb == 0
    if p == 2:
        # x / norm, subgradient 0 at x == 0 (safe denominator: no NaN at higher order)
        return (gb * x / m.where(zero, 1.0, outb),)
    if p in (math.inf, -math.inf):
        # the gradient is split evenly among the tied extremes, as PyTorch
        hit = _mask_like(m, m.abs(x) == outb, x)
        return (gb * m.sign(x) * hit / m.sum(hit, dim=dims, keepdim=True),)
    # sign(x) |x|^(p-1) / norm^(p-1), 0 where x == 0 or the norm is 0
    ax = m.abs(x)
    xz = ax == 0
    t = m.sign(x) * m.pow(m.where(xz, 1.0, ax), p - 1) / m.pow(m.where(zero, 1.0, outb), p - 1)
    return (m.where(xz | zero, 0.0, gb * t),)


def _norm_samples(dtype=np.float64):
    out = []
    for k, p in enumerate((2.0, 1.0, math.inf, -math.inf, 3.0, 0.5, 0.0)):
        for j, s in enumerate(_multi_samples(dtype, seed=50 + 10 * k)):
            if j in (0, 3, 5) or (p == 2.0 and j in (1, 2, 4, 6)):
                a = _away0(s.args[0])
                out.append(Sample((a,), dict(s.attrs, p=p), p != 0.0))
    z = np.zeros((2, 3), dtype)
    out += [Sample((z,), {"p": 2.0, "dim": None, "keepdim": False}, False),
            Sample((z,), {"p": 3.0, "dim": (1,), "keepdim": False}, False)]
    return out


def _away0(a):
    a = np.array(a)
    a[np.abs(a) < 0.2] += 0.5
    return a


def _norm_infer(x, p=2.0, dim=None, keepdim=False):
    spec = _reduce_infer("norm", "float")(x, dim, keepdim)
    if p == math.inf or p < 0:  # max and min-like norms have no value over nothing
        shape = tuple(x.shape)
        for d in normalize_dims("norm", dim, len(shape)):
            if shape[d] == 0:
                raise op_error("norm", f"cannot compute the {p:g} norm over the empty dim {d} "
                                       f"of shape {shape}: the operation has no identity",
                               RuntimeError)
    return spec


NORM = register(name="norm", autocast={"cuda": "fp32"}, onnx=_onnx_norm("p"),
                vmap=_vmap.dim_attrs(), jvp=_jvp.reduction, kernel=_norm_kernel, infer=_norm_infer,
                vjp=_norm_vjp, saves=("x", "out"), samples=_norm_samples,
                grad_fn_name="LinalgVectorNormBackward0",  # (torch.norm calls vector_norm)
                error_samples=lambda: [((rand((2, 3)),), {"dim": (5,)}, IndexError),
                                       ((np.arange(3),), {}, TypeError),
                                       ((rand((0, 3)),), {"p": math.inf, "dim": (0,)},
                                        RuntimeError),
                                       ((rand((0, 3)),), {"p": -1.0, "dim": None},
                                        RuntimeError)],
                torch=lambda torch, x, p=2.0, dim=None, keepdim=False:
                torch.linalg.vector_norm(x, p, dim, keepdim))


def norm(input, p="fro", dim=None, keepdim=False, dtype=None, *, axis=None, keepdims=None):
    """Vector p-norm over ``dim`` (all dims by default), as ``torch.norm``.

    ``p``: a number (2 by default, 1, 0, any real), ``inf``/``-inf``, or ``"fro"``
    (the 2-norm of the entries). The gradient of the 2-norm at 0 is 0.
    """
    dim = _dims("norm", dim, axis)
    if isinstance(p, str):
        if p != "fro":
            raise op_error("norm", f"p={p!r} is not supported (use tg.linalg for matrix "
                                   f"norms); expected a number, inf or 'fro'", RuntimeError)
        if dim is not None and not isinstance(dim, int) and len(dim) > 2:
            raise op_error("norm", f"'fro' takes at most 2 dims, got {tuple(dim)}",
                           RuntimeError)
        p = 2.0
    elif p is None:
        p = 2.0
    elif not isinstance(p, (int, float)) or isinstance(p, bool):
        raise op_error("norm", f"p must be a number or 'fro', got {p!r}", TypeError)
    if dtype is not None:
        input = input.to(dtype)
    return bind(NORM, input, p=float(p), dim=_canon("norm", input, dim),
                keepdim=_keep(keepdim, keepdims))


# ---------------------------------------------------------------- cumsum / cumprod
def _cum_infer(name, int_out):
    def infer(x, dim):
        normalize_dim(name, dim, len(x.shape))
        dt = np.dtype(x.dtype)
        if int_out and dt.kind in "biu":
            dt = np.dtype(np.int64)
        return TensorSpec(tuple(x.shape), dt)
    return infer


def _cum_kernel(fn):
    def kernel(x, dim, out=None):
        dt = np.int64 if x.dtype.kind in "biu" else None
        if x.ndim == 0:
            if out is not None:
                out[...] = x
                return out
            return x.astype(dt or x.dtype)
        return fn(x, axis=dim, dtype=dt, out=out)
    return kernel


def _cum_samples(dtype=np.float64, low=-2.0, high=2.0):
    return [Sample((rand((3, 4), dtype, low, high, seed=1),), {"dim": 1}),
            Sample((rand((3, 4), dtype, low, high, seed=2),), {"dim": 0}),
            Sample((rand((2, 3, 4), dtype, low, high, seed=3),), {"dim": -2}),
            Sample((rand((4, 3), dtype, low, high, seed=4).T,), {"dim": 1}),
            Sample((rand((1, 5), dtype, low, high, seed=5),), {"dim": 0}),
            Sample((rand((), dtype, low, high, seed=6),), {"dim": 0}),
            Sample((np.array([[True, False, True]]),), {"dim": 1}, False),
            Sample((np.arange(6).reshape(2, 3),), {"dim": 0}, False)]


def _cum_errors():
    return [((rand((2, 3)),), {"dim": 2}, IndexError)]


def _reverse_cumsum_kernel(x, dim, out=None):
    if out is not None:  # the scan of the flipped input into the flipped out (views)
        if x.ndim == 0:
            out[...] = x
        else:
            np.cumsum(np.flip(x, dim), axis=dim, out=np.flip(out, dim))
        return out
    if x.ndim == 0:
        return x.copy()
    return np.flip(np.cumsum(np.flip(x, dim), axis=dim), dim)


def _cumsum_vjp(ctx, g):
    if len(ctx.shapes[0]) == 0:
        return (g,)
    return (bind(REVERSE_CUMSUM, g, dim=ctx.attrs["dim"]),)


def _reverse_cumsum_vjp(ctx, g):
    if len(ctx.shapes[0]) == 0:
        return (g,)
    return (bind(CUMSUM, g, dim=ctx.attrs["dim"]),)


CUMSUM = register(name="cumsum", autocast={"cuda": "fp32_unless_dtype"}, onnx=_onnx_cumsum(False),
                  vmap=_vmap.dim_attrs_flat(), kernel=_cum_kernel(np.cumsum),
                  infer=_cum_infer("cumsum", True),
                  vjp=_cumsum_vjp, samples=_cum_samples, error_samples=_cum_errors,
                  jvp=lambda ctx, xt: (bind(CUMSUM, xt, **ctx.attrs),),
                  torch=lambda torch, x, dim: torch.cumsum(x, dim))


def cumsum(input, dim=None, *, dtype=None, axis=None):
    """Running sum along ``dim`` (ints and bools give int64, as PyTorch)."""
    return _cum("cumsum", CUMSUM, input, dim, axis, dtype)


# the adjoint of cumsum: sums from the end (its own adjoint is cumsum)
REVERSE_CUMSUM = register(name="reverse_cumsum", onnx=_onnx_cumsum(True), vmap=_vmap.dim_attrs(),
                          jvp=_jvp.linear, kernel=_reverse_cumsum_kernel,
                          infer=_cum_infer("reverse_cumsum", False), vjp=_reverse_cumsum_vjp,
                          samples=lambda dtype=np.float64: _cum_samples(dtype)[:6],
                          error_samples=_cum_errors,
                          torch=lambda torch, x, dim: torch.flip(
                              torch.cumsum(torch.flip(x, (dim,)), dim), (dim,))
                          if x.ndim else x.clone())


def _cumprod_vjp(ctx, g):
    x = ctx.inputs[0]
    m = ctx.m
    shape = ctx.shapes[0]
    if len(shape) == 0:
        return (g,)
    dim = ctx.attrs["dim"]
    raw = _raw(x)
    if not bool((raw == 0).any()):
        # sum_{j >= i} g_j out_j / x_i
        return (bind(REVERSE_CUMSUM, g * ctx.out, dim=dim) / x,)
    # with zeros: grad_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k, built as an
    # (n, n) table per position (O(n^2), only taken when a zero is present)
    xl = m.movedim(x, dim, -1)
    gl = m.movedim(g, dim, -1)
    # masks made from x with ops: x's device, dtype and framework (an export's arrays)
    ones = m.ones_like(m.unsqueeze(xl, -1) * m.unsqueeze(xl, -2))  # [..., n, n]
    upper = m.triu(ones) == 1  # [i, j]: j >= i
    eye = m.tril(m.triu(ones)) == 1
    table = m.where(eye, 1.0, m.unsqueeze(xl, -2))  # [..., i, k]: x_k, 1 at k == i
    pre = bind(CUMPROD, table, dim=len(table.shape) - 1)  # [..., i, j]
    gi = m.sum(m.where(upper, pre * m.unsqueeze(gl, -2), 0.0), dim=-1)
    return (m.movedim(gi, -1, dim),)


def _cumprod_samples(dtype=np.float64):
    out = _cum_samples(dtype, 0.5, 1.5)
    z = rand((3, 4), dtype, 0.5, 1.5, seed=8)
    z[0, 1] = 0.0
    z[2, 0] = z[2, 2] = 0.0
    return out + [Sample((z,), {"dim": 1}), Sample((z,), {"dim": 0})]


CUMPROD_OP = []  # filled below: the rule calls its own op


def _cumprod_jvp(ctx, t):
    # out_k = prod_{j<=k} x_j, so d out_k = sum_{i<=k} t_i prod_{j<=k, j!=i} x_j: row i of
    # M holds x with x_i replaced by t_i, its cumprod gives each term (exact at zeros,
    # where out * cumsum(t / x) is not); O(n^2) in the scanned dim's length
    m = ctx.m
    x = ctx.inputs[0]
    if x.ndim == 0:
        return (t,)
    dim = ctx.attrs["dim"] % x.ndim
    xm, tm = m.movedim(x, dim, -1), m.movedim(t, dim, -1)
    n = xm.shape[-1]
    eye = m.eye(n, dtype=x.dtype)
    rows = m.unsqueeze(xm, -2) * (1 - eye) + m.unsqueeze(tm, -2) * eye
    upper = m.triu(m.ones((n, n), dtype=x.dtype))  # term i counts from k = i on
    d = m.sum(bind(CUMPROD_OP[0], rows, dim=-1) * upper, dim=-2)
    return (m.movedim(d, -1, dim),)


CUMPROD = register(name="cumprod", autocast={"cuda": "fp32_unless_dtype"}, onnx=_onnx_cumprod,
                   vmap=_vmap.dim_attrs_flat(), jvp=_cumprod_jvp, kernel=_cum_kernel(np.cumprod),
                   infer=_cum_infer("cumprod", True), vjp=_cumprod_vjp, saves=("x", "out"),
                   samples=_cumprod_samples, error_samples=_cum_errors,
                   torch=lambda torch, x, dim: torch.cumprod(x, dim))


def cumprod(input, dim=None, *, dtype=None, axis=None):
    """Running product along ``dim``; the gradient is exact with zeros in the input too."""
    return _cum("cumprod", CUMPROD, input, dim, axis, dtype)


CUMPROD_OP.append(CUMPROD)


# ---------------------------------------------------------------- all / any
def _bool_reduce_kernel(fn):
    def kernel(x, dim=None, keepdim=False, out=None):
        if out is not None:
            fn(x, axis=dim, keepdims=keepdim, out=out)
            return out
        r = np.asarray(fn(x, axis=dim, keepdims=keepdim))
        return r.astype(np.uint8) if x.dtype == np.uint8 else r
    return kernel


def _bool_reduce_infer(name):
    def infer(x, dim=None, keepdim=False):
        dims = normalize_dims(name, dim, len(x.shape))
        u8 = np.dtype(getattr(x.dtype, "np", x.dtype)) == np.uint8  # uint8 in, uint8 out
        return TensorSpec(_reduced_shape(tuple(x.shape), dims, keepdim),
                          np.dtype(np.uint8 if u8 else np.bool_))
    return infer


def _bool_samples(dtype=np.float64):
    b = rand((3, 4), seed=60) > -1.0
    out = [Sample((np.asarray(s.args[0] > 0),), s.attrs, False)
           for s in _multi_samples(dtype, seed=60)]
    return out + [Sample((b,), {"dim": (1,), "keepdim": False}, False),
                  Sample((rand((2, 3), dtype, seed=61),), {"dim": None, "keepdim": False}, False),
                  Sample((np.array([[0, 2], [0, 0]]),), {"dim": (0,), "keepdim": True}, False),
                  Sample((np.zeros((0, 3), np.bool_),), {"dim": (0,), "keepdim": False}, False)]


def _bool_torch(name):
    def oracle(torch, x, dim=None, keepdim=False):
        if dim is None:
            return getattr(torch, name)(x)
        return getattr(torch, name)(x, dim=dim, keepdim=keepdim)
    return oracle


ALL = register(name="all", onnx=_onnx_all_any(True), vmap=_vmap.dim_attrs(),
               kernel=_bool_reduce_kernel(np.all), infer=_bool_reduce_infer("all"),
               differentiable=False, samples=_bool_samples, torch=_bool_torch("all"),
               error_samples=lambda: [((rand((2, 3)) > 0,), {"dim": (3,)}, IndexError)])


def all(input, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """True where every element (over ``dim``, int or tuple) is nonzero; bool result
    (uint8 for a uint8 input, as PyTorch)."""
    return bind(ALL, input, dim=_canon("all", input, _dims("all", dim, axis)),
                keepdim=_keep(keepdim, keepdims))


ANY = register(name="any", onnx=_onnx_all_any(False), vmap=_vmap.dim_attrs(),
               kernel=_bool_reduce_kernel(np.any), infer=_bool_reduce_infer("any"),
               differentiable=False, samples=_bool_samples, torch=_bool_torch("any"),
               error_samples=lambda: [((rand((2, 3)) > 0,), {"dim": (-3,)}, IndexError)])


def any(input, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001
    """True where some element (over ``dim``, int or tuple) is nonzero; bool result
    (uint8 for a uint8 input, as PyTorch)."""
    return bind(ANY, input, dim=_canon("any", input, _dims("any", dim, axis)),
                keepdim=_keep(keepdim, keepdims))


# ---------------------------------------------------------------- public functions
def _dims(name, dim, axis):
    if axis is not None:
        if dim is not None:
            raise op_error(name, "pass either dim or axis, not both", TypeError)
        dim = axis
    return dim


def _keep(keepdim, keepdims):
    return bool(keepdims) if keepdims is not None else bool(keepdim)


def _canon(name, x, dim):
    """Public dim -> None (all dims) or a sorted tuple of non-negative dims.

    ``dim=()`` means all dims (as PyTorch); a 0-d tensor accepts dim 0 / -1.
    """
    if dim is None:
        return None
    nd = len(x.shape)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        return None
    dims = normalize_dims(name, dim, nd)
    return None if nd == 0 or len(dims) == nd else dims


def _canon1(name, x, dim):
    """One public dim (an int) -> a non-negative int (0 for a 0-d tensor)."""
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            raise op_error(name, f"dim must be a single int, got {tuple(dim)}", TypeError)
        dim = dim[0]
    return normalize_dim(name, dim, len(x.shape))


def _canon_named(name, x, dim):
    """As ``_canon``, but dims named stay named even when they are all of them: an
    empty input reduced over a named empty dim is PyTorch's IndexError, over none
    named its RuntimeError (``_check_extreme``)."""
    dims = _canon(name, x, dim)
    if dims is None and dim is not None and dim != () and dim != [] and len(x.shape):
        return normalize_dims(name, dim, len(x.shape))
    return dims


def _max_min(name, op, pairwise, input, dim, keepdim, axis, keepdims):
    if isinstance(dim, Tensor) or isinstance(axis, Tensor):
        # max(input, other): the elementwise maximum, as PyTorch's overload
        return getattr(_elementwise, pairwise)(input, dim if dim is not None else axis)
    dim = _dims(name, dim, axis)
    if dim is None:
        if keepdim or keepdims:
            raise op_error(name, "keepdim needs a dim", TypeError)
        # PyTorch's max()/min() without a dim is its own overload (MaxBackward1)
        return name_call(bind(AMAX if name == "max" else AMIN, input, dim=None, keepdim=False),
                         input, f"{name.capitalize()}Backward1")
    d = _canon1(name, input, dim)
    values, indices = bind(op, input, dim=d, keepdim=_keep(keepdim, keepdims))
    return _values_indices[name](values, indices)


def _arg(name, op, input, dim, keepdim, axis, keepdims):
    dim = _dims(name, dim, axis)
    if dim is not None:
        dim = _canon1(name, input, dim)
    return bind(op, input, dim=dim, keepdim=_keep(keepdim, keepdims))


def _correction(name, dim, unbiased, correction):
    if isinstance(dim, bool):  # var(x, True): the old (input, unbiased) overload
        if unbiased is not None:
            raise op_error(name, "unbiased given twice", TypeError)
        dim, unbiased = None, dim
    if unbiased is not None:
        if correction is not None:
            raise op_error(name, "pass either unbiased or correction, not both", TypeError)
        correction = 1 if unbiased else 0
    return dim, 1 if correction is None else correction


def _cum(name, op, input, dim, axis, dtype):
    dim = _dims(name, dim, axis)
    if dim is None:
        raise op_error(name, "missing the required argument 'dim'", TypeError)
    if dtype is not None:
        input = input.to(dtype)
    return bind(op, input, dim=_canon1(name, input, dim))


# Tensor methods (x.max(dim=1), x.var(), ...) beyond the core table in methods.py
METHODS = ("sum mean prod amax amin max min argmax argmin var std logsumexp norm cumsum "
           "cumprod all any")


_aminmax = namedtuple("aminmax", ("min", "max"))


def _distinct_entries(shape, dtype=np.float64, seed=0):
    """Values with no ties (sorts and medians have one answer)."""
    n = int(np.prod(shape)) if shape else 1
    a = np.random.default_rng(seed).permutation(n).astype(dtype) / _builtins.max(n, 1) * 4 - 2
    return a.reshape(shape)


def aminmax(input, *, dim=None, keepdim=False):
    """``(min, max)`` over ``dim`` (all elements by default)."""
    return _aminmax(amin(input, dim, keepdim), amax(input, dim, keepdim))


decl(aminmax, lambda dtype=np.float64: [S(_distinct_entries((3, 4), dtype)),
                                        S(_distinct_entries((3, 4), dtype, 1), dim=1,
                                          keepdim=True)],
     nout=2)


def dist(input, other, p=2):
    """The ``p``-norm of ``input - other``."""
    return norm(input - other, p)


decl(dist, lambda dtype=np.float64: [S(rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2)),
                                     S(rand((3, 4), dtype, seed=3), rand((4,), dtype, seed=4), 1)],
     args=("input", "other"), autocast={"cuda": "fp32"},
     errors=lambda: [((rand((3, 4)), rand((5,))), {}, ValueError)])


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """``sum`` with NaNs counted as zero."""
    x = input
    if input.dtype.is_floating_point:
        x = _elementwise.where(_elementwise.isnan(input), 0.0, input)
    return sum(x, dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """``mean`` of the elements that are not NaN."""
    if not input.dtype.is_floating_point:
        raise op_error("nanmean", f"nanmean(): expected input to have floating point dtype "
                                  f"but got {input.dtype}", RuntimeError)
    keep = ~_elementwise.isnan(input)
    total = sum(_elementwise.where(keep, input, 0.0), dim, keepdim, dtype=dtype)
    return total / sum(keep, dim, keepdim).to(total.dtype)


def _nan_samples(dtype=np.float64):
    a = rand((3, 4), dtype, seed=1)
    a[0, 1] = a[2, 3] = np.nan
    return [S(rand((3, 4), dtype, seed=2)), S(rand((3, 4), dtype, seed=3), dim=1, keepdim=True),
            Sample((a,), {"dim": 0}, False)]


decl(nansum, _nan_samples)


decl(nanmean, _nan_samples)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``."""
    return (std(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim``."""
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


for _f in (std_mean, var_mean):
    decl(_f, lambda dtype=np.float64: [S(rand((3, 4), dtype)),
                                       S(rand((3, 4), dtype, seed=1), 1, keepdim=True),
                                       S(rand((3, 4), dtype, seed=2), dim=1, correction=0)],
         nout=2)


def count_nonzero(input, dim=None):
    """The number of non-zero elements (over ``dim``), int64."""
    return sum(input != 0, dim)


decl(count_nonzero, lambda dtype=np.float64: [
        S(np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]], dtype=dtype)),
        S(np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]], dtype=dtype), 1)],
     differentiable=False)


def logcumsumexp(input, dim):
    """``log(cumsum(exp(input), dim))``, computed stably."""
    if not input.dtype.is_floating_point:
        raise op_error("logcumsumexp", f"logcumsumexp(): expected a floating point input, "
                                       f"got {input.dtype}", RuntimeError)
    d = normalize_dim("logcumsumexp", dim, input.ndim)
    if input.numel() == 0:
        return input * 1
    m = amax(input, d, True).detach()
    m = _elementwise.where(_elementwise.isfinite(m), m, 0.0)
    return _elementwise.log(cumsum(_elementwise.exp(input - m), d)) + m


decl(logcumsumexp, lambda dtype=np.float64: [S(rand((3, 4), dtype), 1),
                                             S(rand((3, 4), dtype, seed=2) * 5, 0)])


_cum_mode_result = {n: namedtuple(n, ("values", "indices")) for n in ("cummax", "cummin", "mode")}


# ---------------------------------------------------------------- cummax / cummin
def _cumext_infer(name):
    def infer(x, dim):
        normalize_dim(name, dim, len(x.shape))
        if np.dtype(x.dtype).kind == "c":
            raise op_error(name, "not implemented for complex tensors", RuntimeError)
        return TensorSpec(tuple(x.shape), x.dtype), TensorSpec(tuple(x.shape), np.dtype(np.int64))
    return infer


def _cumext_kernel(name):
    acc = np.maximum if name == "cummax" else np.minimum

    def kernel(x, dim, out=None):
        xp = _devices.xp_of(x)
        dim = dim % _builtins.max(x.ndim, 1)
        if out is not None and (x.ndim == 0 or x.shape[dim] == 0):
            out[0][...] = x
            out[1][...] = 0
            return out
        if x.ndim == 0:
            return x.copy(), xp.zeros((), np.int64)
        if x.shape[dim] == 0:
            return x.copy(), xp.zeros(x.shape, np.int64)
        if out is not None and xp.may_share_memory(out[0], x):
            x = x.copy()  # (the values out is the input: the index pass reads x after)
        vals = getattr(xp, acc.__name__).accumulate(
            x, axis=dim, **({} if out is None else {"out": out[0]}))
        pos = xp.arange(x.shape[dim]).reshape([-1 if k == dim else 1 for k in range(x.ndim)])
        # the running extremum's index is the last position holding it (ties: the
        # later index, as PyTorch); once a NaN is met the value stays NaN and each
        # later NaN takes the index (PyTorch's rule)
        hold = x == vals
        if _isf(x.dtype):
            hold |= xp.isnan(x)
        if out is None:
            idx = xp.maximum.accumulate(xp.where(hold, pos, -1), axis=dim)
            return vals, idx.astype(np.int64)
        # in the caller's index buffer: the position where held, else -1, then the
        # running maximum of that along dim, in place (boolean masks only beside it)
        idx = out[1]
        idx[...] = pos
        xp.logical_not(hold, out=hold)
        xp.copyto(idx, -1, where=hold)
        xp.maximum.accumulate(idx, axis=dim, out=idx)
        return vals, idx
    kernel.__name__ = name
    return kernel


def _cum_jvp(ctx, t):
    if len(t.shape) == 0:  # one element: the value is the input
        return (t * 1, None)
    return (take_along_dim(t, ctx.out[1], dim=ctx.attrs["dim"]), None)


def _cumext_samples(dtype=np.float64):
    return [Sample((rand((3, 5), dtype, seed=1),), {"dim": 1}),
            Sample((rand((4, 3), dtype, seed=2),), {"dim": 0}),
            Sample((rand((2, 3, 4), dtype, seed=3),), {"dim": 2}),
            Sample((rand((), dtype, seed=4),), {"dim": 0}),
            Sample((np.array([1.0, 3.0, 3.0, 2.0, np.nan, 5.0, np.nan], dtype),), {"dim": 0},
                   False),
            Sample((np.array([[2, 1, 2, 0, 5]]),), {"dim": 1}, False)]


def _cum_op(name):
    return register(
        name=name, kernel=_cumext_kernel(name), infer=_cumext_infer(name), args=("x",), nout=2,
        saves=("out",), out_checked=1, vjp=_scatter_back_vjp, jvp=_cum_jvp, vmap=_vmap.dim_attrs(),
        samples=_cumext_samples,
        error_samples=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError)],
        torch=lambda torch, x, dim: getattr(torch, name)(x, dim))


CUMMAX, CUMMIN = _cum_op("cummax"), _cum_op("cummin")


def cummax(input, dim):
    """``(values, indices)``: the running maximum along ``dim`` and where it was
    (ties: the later index); differentiable in the values."""
    d = normalize_dim("cummax", dim, len(input.shape))
    return _cum_mode_result["cummax"](*bind(CUMMAX, input, dim=d))


def cummin(input, dim):
    """``(values, indices)``: the running minimum along ``dim`` and where it was."""
    d = normalize_dim("cummin", dim, len(input.shape))
    return _cum_mode_result["cummin"](*bind(CUMMIN, input, dim=d))


def _no_bool(name, *ts):
    for t in ts:
        if hasattr(t, "dtype") and str(t.dtype).endswith(".bool"):
            raise op_error(name, "not implemented for 'Bool'", RuntimeError)


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first)."""
    if input.ndim == 0:
        raise op_error("diff", "diff expects input to be at least one-dimensional",
                       RuntimeError)
    d = normalize_dim("diff", dim, input.ndim)
    x = input
    if prepend is not None or append is not None:
        parts = ([prepend] if prepend is not None else []) + [x] + \
                ([append] if append is not None else [])
        x = SH.cat(parts, d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi = I.getitem(x, (slice(None),) * d + (slice(1, m),))
        lo = I.getitem(x, (slice(None),) * d + (slice(0, m - 1),))
        x = (hi != lo) if x.dtype == _dt.bool else hi - lo
    return x


decl(diff, lambda dtype=np.float64: [S(rand((3, 5), dtype)), S(rand((4, 3), dtype), 2, 0),
                                     S(rand((3, 4), dtype), 1, 1, rand((3, 1), dtype, seed=1),
                                       rand((3, 2), dtype, seed=2))],
     args=("input", "n", "dim", "prepend", "append"), optional=("prepend", "append"))


def _trap_dx(y, x, dx, d):
    if x is None:
        return dx
    if x.ndim == 1:
        sh = [1] * y.ndim
        sh[d] = x.shape[0]
        x = SH.reshape(x, tuple(sh))
    m = x.shape[d] if x.ndim == y.ndim else y.shape[d]
    return I.getitem(x, (slice(None),) * d + (slice(1, m),)) - \
        I.getitem(x, (slice(None),) * d + (slice(0, m - 1),))


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule along ``dim`` (spacing ``dx``, or sample points ``x``)."""
    _no_bool("trapezoid", y, x)
    d = normalize_dim("trapezoid", dim, y.ndim)
    m = y.shape[d]
    if m == 0:
        return sum(y, d) * 0
    lo = I.getitem(y, (slice(None),) * d + (slice(0, m - 1),))
    hi = I.getitem(y, (slice(None),) * d + (slice(1, m),))
    h = _trap_dx(y, x, 1.0 if dx is None else dx, d)
    return sum((lo + hi) * h, d) * 0.5


def trapz(y, x=None, *, dx=None, dim=-1):
    """Alias of ``trapezoid``."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal rule along ``dim``."""
    _no_bool("cumulative_trapezoid", y, x)
    d = normalize_dim("cumulative_trapezoid", dim, y.ndim)
    m = y.shape[d]
    lo = I.getitem(y, (slice(None),) * d + (slice(0, _builtins.max(m - 1, 0)),))
    hi = I.getitem(y, (slice(None),) * d + (slice(1, m),))
    h = _trap_dx(y, x, 1.0 if dx is None else dx, d)
    return cumsum((lo + hi) * h * 0.5, d)


for _f in (trapezoid, trapz, cumulative_trapezoid):
    decl(_f, lambda dtype=np.float64: [S(rand((3, 5), dtype)),
                                       S(rand((3, 4), dtype), rand((4,), dtype, seed=1)),
                                       S(rand((4, 3), dtype), dx=0.5, dim=0)],
         args=("y", "x"), optional=("x",))


# ---------------------------------------------------------------- gradient
def _spacings(name, spacing, dims):
    if isinstance(spacing, (int, float)) and not isinstance(spacing, bool):
        return [float(spacing)] * len(dims)
    if isinstance(spacing, (list, tuple)) and _builtins.all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in spacing):
        if len(spacing) != len(dims):
            raise op_error(name, f"torch.gradient expected spacing to be unspecified, a "
                                 f"scalar or a list of length {len(dims)} (the number of "
                                 f"dims), got a list of length {len(spacing)}", RuntimeError)
        return [float(s) for s in spacing]
    raise op_error(name, "spacing must be a number or a list of numbers (coordinate "
                         "tensors are not supported)", NotImplementedError)


def _along(x, d, start, stop):
    idx = [slice(None)] * x.ndim
    idx[d] = slice(start, stop)
    return x[tuple(idx)]


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The derivative of ``input`` sampled on a uniform grid, along each of ``dim``
    (every dim by default): central differences inside, one-sided differences of
    order ``edge_order`` (1 or 2) at the edges; a tuple, one tensor per dim."""
    name = "gradient"
    if edge_order not in (1, 2):
        raise op_error(name, f"torch.gradient only supports edge_order=1 and edge_order=2, "
                             f"got {edge_order}", RuntimeError)
    if input.ndim == 0:
        raise op_error(name, "torch.gradient expected each tensor to be at least 1-D",
                       RuntimeError)
    if dim is None:
        dims = list(range(input.ndim))
    elif isinstance(dim, (int, np.integer)):
        dims = [normalize_dim(name, dim, input.ndim)]
    else:
        dims = [normalize_dim(name, d, input.ndim) for d in dim]
    if input.dtype.name == "bool":
        raise op_error(name, "torch.gradient does not support bool tensors", RuntimeError)
    hs = _spacings(name, spacing, dims)
    x = floating(input)
    out = []
    for d, h in zip(dims, hs):
        n = x.shape[d]
        if n < edge_order + 1:
            raise op_error(name, f"torch.gradient expected each dimension size to be at "
                                 f"least edge_order+1, got size {n} at dim {d}",
                           RuntimeError)
        mid = (_along(x, d, 2, None) - _along(x, d, 0, n - 2)) / (2 * h)
        if edge_order == 1:
            first = (_along(x, d, 1, 2) - _along(x, d, 0, 1)) / h
            last = (_along(x, d, n - 1, n) - _along(x, d, n - 2, n - 1)) / h
        else:
            first = (-1.5 * _along(x, d, 0, 1) + 2 * _along(x, d, 1, 2)
                     - 0.5 * _along(x, d, 2, 3)) / h
            last = (0.5 * _along(x, d, n - 3, n - 2) - 2 * _along(x, d, n - 2, n - 1)
                    + 1.5 * _along(x, d, n - 1, n)) / h
        out.append(SH.cat([first, mid, last], d))
    return tuple(out)


decl(gradient, lambda dtype=np.float64: [
         S(rand((5,), dtype, seed=1)),
         S(rand((3, 4), dtype, seed=2), spacing=0.5),
         S(rand((4, 5), dtype, seed=3), spacing=[2.0], dim=1, edge_order=2),
         S(rand((3, 4, 3), dtype, seed=4), dim=(0, 2), spacing=[1.0, 0.25])],
     nout=2, errors=lambda: [((rand((3, 4)),), {"edge_order": 3}, RuntimeError),
                             ((rand((1, 4)),), {"dim": 0}, RuntimeError)])

del _f
