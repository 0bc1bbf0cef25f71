"""Reductions: sum, mean, prod, amax/amin, max/min, var/std, logsumexp, norm, ..."""
import numpy as np

from ..tensor import bind
from .._util import normalize_dims, op_error
from ._decl import register, Sample, TensorSpec, rand


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
            raise op_error(name, f"expected a floating point input, got {dt}", TypeError)
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
    if not keepdim and dims:
        g = m.reshape(g, _keep_shape(shape, dims))
    return m.broadcast_to(g, shape)


def _axis(dims, ndim):
    return None if dims is None or len(dims) == ndim else dims


# ---------------------------------------------------------------- sum / mean
def _sum_kernel(x, dim=None, keepdim=False):
    dims = normalize_dims("sum", dim, x.ndim)
    dt = np.int64 if x.dtype.kind in "biu" else None
    return np.asarray(np.sum(x, axis=dims, keepdims=keepdim, dtype=dt))


def _sum_vjp(ctx, g):
    shape = ctx.shapes[0]
    dims = normalize_dims("sum", ctx.attrs.get("dim"), len(shape))
    return (_expand_back(ctx.m, g, shape, dims, ctx.attrs.get("keepdim", False)),)


SUM = register(name="sum", kernel=_sum_kernel, infer=_reduce_infer("sum", "sum"), vjp=_sum_vjp,
               samples=_reduce_samples, error_samples=_dim_errors,
               jvp=lambda ctx, xt: (bind(SUM, xt, **ctx.attrs),),
               torch=lambda torch, x, dim=None, keepdim=False:
               torch.sum(x, dim=dim, keepdim=keepdim) if dim is not None else torch.sum(x))


def _mean_kernel(x, dim=None, keepdim=False):
    dims = normalize_dims("mean", dim, x.ndim)
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
    return (_expand_back(ctx.m, g / max(n, 1), shape, dims, ctx.attrs.get("keepdim", False)),)


MEAN = register(name="mean", kernel=_mean_kernel, infer=_reduce_infer("mean", "float"),
                vjp=_mean_vjp, samples=_reduce_samples, error_samples=_dim_errors,
                torch=lambda torch, x, dim=None, keepdim=False:
                torch.mean(x, dim=dim, keepdim=keepdim) if dim is not None else torch.mean(x))


# ---------------------------------------------------------------- sum_to
def _sum_to_dims(shape, target):
    lead = len(shape) - len(target)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(target)
                                      if s == 1 and shape[lead + i] != 1)
    return dims, lead


def _sum_to_kernel(x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    dims, lead = _sum_to_dims(x.shape, shape)
    r = np.sum(x, axis=dims, keepdims=True)
    return np.asarray(r.reshape(shape))


def _sum_to_infer(x, shape):
    shape = tuple(shape)
    try:
        np.broadcast_shapes(shape, tuple(x.shape))
        ok = len(shape) <= len(x.shape) and np.broadcast_shapes(shape, tuple(x.shape)) == tuple(x.shape)
    except ValueError:
        ok = False
    if not ok:
        raise op_error("sum_to", f"cannot sum shape {tuple(x.shape)} to shape {shape}")
    return TensorSpec(shape, x.dtype)


SUM_TO = register(name="sum_to", kernel=_sum_to_kernel, infer=_sum_to_infer,
                  vjp=lambda ctx, g: (ctx.m.broadcast_to(g, ctx.shapes[0]),),
                  samples=lambda dtype=np.float64: [
                      Sample((rand((2, 3, 4), dtype),), {"shape": (3, 1)}),
                      Sample((rand((3, 4), dtype),), {"shape": (3, 4)})],
                  error_samples=lambda: [((rand((3, 4)),), {"shape": (5,)}, ValueError)])


# ---------------------------------------------------------------- amax / amin
def _extreme_kernel(fn, name):
    def kernel(x, dim=None, keepdim=False):
        dims = normalize_dims(name, dim, x.ndim)
        if x.size == 0 and any(x.shape[d] == 0 for d in dims):
            raise op_error(name, f"cannot reduce over a zero-size dimension of shape "
                                 f"{tuple(x.shape)}", IndexError)
        return np.asarray(fn(x, axis=dims, keepdims=keepdim))
    return kernel


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
        mask = m.where(x == out_b, 1.0, 0.0)
        if hasattr(x, "dtype") and hasattr(mask, "astype") and not hasattr(mask, "_data"):
            mask = mask.astype(x.dtype)
        count = m.sum(mask, dim=dims, keepdim=True)
        gb = _expand_back(m, g, shape, dims, keep)
        return (gb * mask / count,)
    return vjp


AMAX = register(name="amax", kernel=_extreme_kernel(np.amax, "amax"),
                infer=_reduce_infer("amax"), vjp=_extreme_vjp("amax"), saves=("x", "out"),
                samples=_reduce_samples, error_samples=_dim_errors,
                torch=lambda torch, x, dim=None, keepdim=False:
                torch.amax(x, dim=dim if dim is not None else (), keepdim=keepdim))
AMIN = register(name="amin", kernel=_extreme_kernel(np.amin, "amin"),
                infer=_reduce_infer("amin"), vjp=_extreme_vjp("amin"), saves=("x", "out"),
                samples=_reduce_samples, error_samples=_dim_errors,
                torch=lambda torch, x, dim=None, keepdim=False:
                torch.amin(x, dim=dim if dim is not None else (), keepdim=keepdim))


# ---------------------------------------------------------------- prod
def _prod_kernel(x, dim=None, keepdim=False):
    dims = normalize_dims("prod", dim, x.ndim)
    dt = np.int64 if x.dtype.kind in "biu" else None
    return np.asarray(np.prod(x, axis=dims, keepdims=keepdim, dtype=dt))


def _prod_vjp(ctx, g):
    # out / x is wrong where x == 0; the product of the others is taken instead
    x = ctx.inputs[0]
    m = ctx.m
    shape = ctx.shapes[0]
    dims = normalize_dims("prod", ctx.attrs.get("dim"), len(shape))
    keep = ctx.attrs.get("keepdim", False)
    gb = _expand_back(m, g, shape, dims, keep)
    zero = x == 0
    safe = m.where(zero, 1.0, x)
    p_safe = m.prod(safe, dim=dims, keepdim=True)
    nz = m.sum(m.where(zero, 1.0, 0.0), dim=dims, keepdim=True)
    # one zero: only that position gets the product of the others; more: all zero
    others = m.where(zero, m.where(nz == 1, p_safe, 0.0), m.where(nz > 0, 0.0, p_safe / safe))
    return (gb * others,)


PROD = register(name="prod", kernel=_prod_kernel, infer=_reduce_infer("prod", "sum"),
                vjp=_prod_vjp, saves=("x",), samples=_reduce_samples, error_samples=_dim_errors)


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
    if dim is None:
        return None
    nd = len(x.shape)
    return normalize_dims(name, dim, nd)


def sum(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):  # noqa: A001
    """Sum over ``dim`` (int, tuple, or None for all)."""
    dim = _canon("sum", input, _dims("sum", dim, axis))
    r = bind(SUM, input, dim=dim, keepdim=_keep(keepdim, keepdims))
    return r.to(dtype) if dtype is not None else r


def mean(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    dim = _canon("mean", input, _dims("mean", dim, axis))
    if dtype is not None:
        input = input.to(dtype)
    return bind(MEAN, input, dim=dim, keepdim=_keep(keepdim, keepdims))


def sum_to(input, shape):
    """Sum a broadcast result back to ``shape`` (the adjoint of broadcasting)."""
    shape = tuple(shape)
    if tuple(input.shape) == shape:
        return input
    return bind(SUM_TO, input, shape=shape)


def amax(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    dim = _canon("amax", input, _dims("amax", dim, axis))
    if dim == ():
        dim = None
    return bind(AMAX, input, dim=dim, keepdim=_keep(keepdim, keepdims))


def amin(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    dim = _canon("amin", input, _dims("amin", dim, axis))
    if dim == ():
        dim = None
    return bind(AMIN, input, dim=dim, keepdim=_keep(keepdim, keepdims))


def prod(input, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
    dim = _canon("prod", input, _dims("prod", dim, axis))
    r = bind(PROD, input, dim=dim, keepdim=_keep(keepdim, keepdims))
    return r.to(dtype) if dtype is not None else r
