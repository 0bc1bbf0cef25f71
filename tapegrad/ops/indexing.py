"""Indexing: ``__getitem__`` (basic, integer-array and boolean-mask indexing) and
its scatter-add adjoint; in-place ``__setitem__``."""
import numpy as np

from ..tensor import bind, Tensor, apply_inplace
from .._util import op_error
from ._decl import register, Sample, TensorSpec, rand


def _raw_index(index):
    """Tensors inside an index become raw arrays; lists become arrays."""
    if isinstance(index, tuple):
        return tuple(_raw_index_item(i) for i in index)
    return _raw_index_item(index)


def _raw_index_item(i):
    if isinstance(i, Tensor):
        return i._data
    if isinstance(i, list):
        return np.asarray(i)
    return i


def _is_basic(index):
    items = index if isinstance(index, tuple) else (index,)
    for i in items:
        if not (i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer))) \
                or isinstance(i, bool):
            return False
    return True


def _has_mask(index):
    items = index if isinstance(index, tuple) else (index,)
    return any(getattr(i, "dtype", None) is not None and i.dtype == np.bool_ or isinstance(i, bool)
               for i in items)


def _check_index(shape, index):
    items = index if isinstance(index, tuple) else (index,)
    nd = len(shape)
    used = sum(1 if not (i is None or i is Ellipsis) else 0 for i in items
               if not (hasattr(i, "dtype") and i.dtype == np.bool_))
    used += sum(i.ndim for i in items if hasattr(i, "dtype") and i.dtype == np.bool_)
    if used > nd:
        raise op_error("getitem", f"too many indices for a tensor of shape {tuple(shape)}: "
                                  f"{used} given", IndexError)
    for i in items:
        if hasattr(i, "dtype") and i.dtype.kind == "f":
            raise op_error("getitem", "tensors used as indices must be long, int or bool, "
                                      f"got {i.dtype}", IndexError)
        if isinstance(i, float):
            raise op_error("getitem", f"float index {i} is not allowed", IndexError)


def _getitem_kernel(x, index):
    try:
        return x[index]
    except IndexError as e:
        raise op_error("getitem", f"{e} (tensor of shape {tuple(x.shape)})", IndexError) from None


def _getitem_infer(x, index):
    _check_index(tuple(x.shape), index)
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=x.dtype), shape=tuple(x.shape),
                                            strides=(0,) * len(x.shape))
    if _has_mask(index):
        return TensorSpec(None, x.dtype)
    try:
        return TensorSpec(probe[index].shape, x.dtype)
    except IndexError as e:
        raise op_error("getitem", f"{e} (tensor of shape {tuple(x.shape)})", IndexError) from None


def _getitem_vjp(ctx, g):
    return (ctx.m.index_add_into(g, ctx.shapes[0], ctx.attrs["index"]),)


def _getitem_samples(dtype=np.float64):
    x = rand((4, 5), dtype)
    return [Sample((x,), {"index": (slice(1, 3), slice(None, None, -2))}),
            Sample((x,), {"index": (None, 2, Ellipsis)}),
            Sample((x,), {"index": (np.array([0, 2, 2, 3]),)}),
            Sample((x,), {"index": (np.array([[0, 1], [1, 1]]), np.array([4, 0]))})]


def _getitem_errors():
    return [((rand((3, 4)),), {"index": (5,)}, IndexError),
            ((rand((3, 4)),), {"index": (0, 0, 0)}, IndexError)]


GETITEM = register(name="getitem", kind="view", kernel=_getitem_kernel, infer=_getitem_infer,
                   vjp=_getitem_vjp, samples=_getitem_samples, error_samples=_getitem_errors,
                   torch=lambda torch, x, index: x[tuple(torch.as_tensor(i) if isinstance(i, np.ndarray) else i
                                                         for i in index)])
INDEX = register(name="index", kind="basic", kernel=_getitem_kernel, infer=_getitem_infer,
                 vjp=_getitem_vjp, samples=_getitem_samples, error_samples=_getitem_errors)


def _mask_kernel(x, index, alloc=None):
    return _getitem_kernel(x, index)


MASKED_INDEX = register(name="masked_index", kind="dynamic", kernel=_mask_kernel,
                        infer=_getitem_infer, vjp=_getitem_vjp,
                        samples=lambda dtype=np.float64: [
                            Sample((rand((3, 4), dtype, seed=1),),
                                   {"index": (rand((3, 4), seed=2) > 0,)}),
                            Sample((rand((3, 4), dtype, seed=3),),
                                   {"index": (np.array([True, False, True]),)})],
                        error_samples=lambda: [((rand((3, 4)),), {"index": (np.ones(5, bool),)},
                                                IndexError)])


# ---------------------------------------------------------------- scatter-add adjoint
def _index_add_into_kernel(g, shape, index):
    out = np.zeros(shape, dtype=g.dtype) if isinstance(g, np.ndarray) else \
        __import__("cupy").zeros(shape, dtype=g.dtype)
    if _is_basic(index):
        out[index] = g
    else:
        # repeated indices accumulate (np.add.at), as a gradient must
        np.add.at(out, index, g) if isinstance(out, np.ndarray) else \
            __import__("cupyx").scatter_add(out, index, g)
    return out


INDEX_ADD_INTO = register(
    name="index_add_into", kernel=_index_add_into_kernel, args=("g",),
    infer=lambda g, shape, index: TensorSpec(tuple(shape), g.dtype),
    vjp=lambda ctx, gg: (ctx.m.getitem_raw(gg, ctx.attrs["index"]),),
    samples=lambda dtype=np.float64: [
        Sample((rand((2, 5), dtype),), {"shape": (4, 5), "index": (slice(1, 3),)}),
        Sample((rand((4,), dtype),), {"shape": (5,), "index": (np.array([0, 2, 2, 3]),)})],
    error_samples=lambda: [((rand((3,)),), {"shape": (2,), "index": (slice(0, 3),)}, ValueError)])


def index_add_into(g, shape, index):
    """Scatter-add ``g`` into zeros of ``shape`` at ``index`` (getitem's adjoint)."""
    return bind(INDEX_ADD_INTO, g, shape=tuple(shape), index=index)


def getitem_raw(x, index):
    """``x[index]`` for an index already converted to raw arrays."""
    if _has_mask(index):
        return bind(MASKED_INDEX, x, index=index)
    if _is_basic(index):
        return bind(GETITEM, x, index=index)
    return bind(INDEX, x, index=index)


def getitem(x, index):
    """``x[index]`` with NumPy semantics: ints, slices (negative steps too), None,
    Ellipsis, integer arrays, boolean masks; differentiable."""
    index = _raw_index(index)
    if not isinstance(index, tuple):
        index = (index,)
    return getitem_raw(x, index)


# ---------------------------------------------------------------- setitem
def _index_put_kernel(x, value, index):
    out = x.copy()
    out[index] = value
    return out


def _index_put_vjp(ctx, g):
    m = ctx.m
    index = ctx.attrs["index"]
    n = ctx.needs_input_grad
    gx = m.index_put_zero(g, index) if n[0] else None
    gv = None
    if n[1]:
        gv = m.getitem_raw(g, index)
        vshape = ctx.shapes[1]
        if vshape is not None and tuple(gv.shape) != tuple(vshape):
            gv = m.sum_to(gv, vshape)
    return gx, gv


def _index_put_infer(x, value, index):
    spec = _getitem_infer(x, index)
    if hasattr(value, "shape") and spec.shape is not None:
        try:
            np.broadcast_shapes(tuple(value.shape), spec.shape)
        except ValueError:
            raise op_error("setitem", f"value of shape {tuple(value.shape)} cannot be broadcast "
                                      f"to the indexed shape {spec.shape}") from None
    return TensorSpec(tuple(x.shape), x.dtype)


INDEX_PUT = register(name="index_put", kernel=_index_put_kernel, args=("x", "value"),
                     infer=_index_put_infer, vjp=_index_put_vjp, promote="none",
                     samples=lambda dtype=np.float64: [
                         Sample((rand((4, 5), dtype), rand((2, 5), dtype)),
                                {"index": (slice(1, 3),)}),
                         Sample((rand((4, 5), dtype), rand((5,), dtype)),
                                {"index": (np.array([0, 3]),)})],
                     error_samples=lambda: [((rand((4, 5)), rand((3,))), {"index": (0,)},
                                             ValueError)])


def _index_put_zero_kernel(g, index):
    out = g.copy()
    out[index] = 0
    return out


INDEX_PUT_ZERO = register(name="index_put_zero", kernel=_index_put_zero_kernel, args=("g",),
                          infer=lambda g, index: TensorSpec(tuple(g.shape), g.dtype),
                          vjp=lambda ctx, gg: (ctx.m.index_put_zero(gg, ctx.attrs["index"]),),
                          samples=lambda dtype=np.float64: [
                              Sample((rand((4, 5), dtype),), {"index": (slice(1, 3),)})],
                          error_samples=lambda: [((rand((4,)),), {"index": (7,)}, IndexError)])


def index_put_zero(g, index):
    return bind(INDEX_PUT_ZERO, g, index=index)


def setitem(x, index, value):
    """``x[index] = value`` in place; gradients flow to the old x and to value."""
    index = _raw_index(index)
    if not isinstance(index, tuple):
        index = (index,)
    if isinstance(value, Tensor) and value.dtype != x.dtype:
        value = value.to(x.dtype)
    apply_inplace(INDEX_PUT, x, value, index=index)
