"""Shape ops: reshape, view, transpose, permute, expand, squeeze, unsqueeze, ..."""
import numpy as np

from ..tensor import bind
from .._util import normalize_dim, op_error, shape_arg
from ._decl import register, Sample, TensorSpec, rand


def _resolve_shape(name, shape, numel):
    shape = tuple(int(s) for s in shape)
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise op_error(name, f"only one dimension can be -1, got shape {shape}", RuntimeError)
    if any(s < -1 for s in shape):
        raise op_error(name, f"invalid shape {shape}", RuntimeError)
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise op_error(name, f"shape {shape} is invalid for input of size {numel}",
                           RuntimeError)
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise op_error(name, f"shape {shape} is invalid for input of size {numel}", RuntimeError)
    return shape


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# ---------------------------------------------------------------- reshape
def _reshape_infer(x, shape):
    return TensorSpec(_resolve_shape("reshape", shape, _numel(x.shape)), x.dtype)


def _reshape_kernel(x, shape):
    return x.reshape(_resolve_shape("reshape", shape, x.size))


RESHAPE = register(name="reshape", kind="view", kernel=_reshape_kernel, infer=_reshape_infer,
                   vjp=lambda ctx, g: (ctx.m.reshape(g, ctx.shapes[0]),),
                   jvp=lambda ctx, xt: (reshape(xt, ctx.attrs["shape"]),),
                   samples=lambda dtype=np.float64: [
                       Sample((rand((3, 4), dtype),), {"shape": (4, 3)}),
                       Sample((rand((2, 3, 4), dtype),), {"shape": (-1, 4)}),
                       Sample((rand((1,), dtype),), {"shape": ()})],
                   error_samples=lambda: [((rand((3, 4)),), {"shape": (5, 2)}, RuntimeError)],
                   torch=lambda torch, x, shape: torch.reshape(x, shape))


# ---------------------------------------------------------------- permute
def _perm_check(name, dims, ndim):
    dims = tuple(normalize_dim(name, d, ndim) for d in dims)
    if sorted(dims) != list(range(ndim)):
        raise op_error(name, f"dims {dims} are not a permutation of the {ndim} dims of the "
                             f"input", ValueError)
    return dims


def _permute_infer(x, dims):
    dims = _perm_check("permute", dims, len(x.shape))
    return TensorSpec(tuple(x.shape[d] for d in dims), x.dtype)


def _permute_kernel(x, dims):
    return np.transpose(x, _perm_check("permute", dims, x.ndim))


PERMUTE = register(name="permute", kind="view", kernel=_permute_kernel, infer=_permute_infer,
                   vjp=lambda ctx, g: (ctx.m.permute(g, tuple(np.argsort(
                       _perm_check("permute", ctx.attrs["dims"], len(ctx.shapes[0]))).tolist())),),
                   samples=lambda dtype=np.float64: [
                       Sample((rand((2, 3, 4), dtype),), {"dims": (2, 0, 1)}),
                       Sample((rand((3, 4), dtype),), {"dims": (1, 0)})],
                   error_samples=lambda: [((rand((3, 4)),), {"dims": (0, 0)}, ValueError)],
                   torch=lambda torch, x, dims: x.permute(*dims))


# ---------------------------------------------------------------- broadcast_to / expand
def _broadcast_infer(x, shape):
    shape = tuple(shape)
    try:
        out = np.broadcast_shapes(tuple(x.shape), shape)
    except ValueError:
        out = None
    if out != shape:
        raise op_error("broadcast_to", f"cannot broadcast shape {tuple(x.shape)} to {shape}")
    return TensorSpec(shape, x.dtype)


BROADCAST_TO = register(name="broadcast_to", kind="view",
                        kernel=lambda x, shape: np.broadcast_to(x, shape), infer=_broadcast_infer,
                        vjp=lambda ctx, g: (ctx.m.sum_to(g, ctx.shapes[0]),),
                        samples=lambda dtype=np.float64: [
                            Sample((rand((3, 1), dtype),), {"shape": (2, 3, 4)}),
                            Sample((rand((), dtype),), {"shape": (3,)})],
                        error_samples=lambda: [((rand((3, 2)),), {"shape": (3, 4)}, ValueError)],
                        torch=lambda torch, x, shape: torch.broadcast_to(x, shape))


# ---------------------------------------------------------------- squeeze / unsqueeze
def _squeeze_dims(name, shape, dim):
    nd = len(shape)
    if dim is None:
        return tuple(i for i, s in enumerate(shape) if s == 1)
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    dims = tuple(normalize_dim(name, d, nd) for d in dims)
    return tuple(d for d in dims if shape[d] == 1)


def _squeeze_shape(shape, dim):
    dims = _squeeze_dims("squeeze", shape, dim)
    return tuple(s for i, s in enumerate(shape) if i not in dims)


SQUEEZE = register(name="squeeze", kind="view",
                   kernel=lambda x, dim=None: x.reshape(_squeeze_shape(x.shape, dim)),
                   infer=lambda x, dim=None: TensorSpec(_squeeze_shape(tuple(x.shape), dim), x.dtype),
                   vjp=lambda ctx, g: (ctx.m.reshape(g, ctx.shapes[0]),),
                   samples=lambda dtype=np.float64: [
                       Sample((rand((3, 1, 4, 1), dtype),), {"dim": None}),
                       Sample((rand((3, 1, 4), dtype),), {"dim": 1}),
                       Sample((rand((3, 4), dtype),), {"dim": 0})],
                   error_samples=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError)])


def _unsqueeze_shape(shape, dim):
    d = normalize_dim("unsqueeze", dim, len(shape) + 1)
    return tuple(shape[:d]) + (1,) + tuple(shape[d:])


UNSQUEEZE = register(name="unsqueeze", kind="view",
                     kernel=lambda x, dim: x.reshape(_unsqueeze_shape(x.shape, dim)),
                     infer=lambda x, dim: TensorSpec(_unsqueeze_shape(tuple(x.shape), dim), x.dtype),
                     vjp=lambda ctx, g: (ctx.m.reshape(g, ctx.shapes[0]),),
                     samples=lambda dtype=np.float64: [
                         Sample((rand((3, 4), dtype),), {"dim": 1}),
                         Sample((rand((3, 4), dtype),), {"dim": -1})],
                     error_samples=lambda: [((rand((3, 4)),), {"dim": 5}, IndexError)],
                     torch=lambda torch, x, dim: torch.unsqueeze(x, dim))


# ---------------------------------------------------------------- public functions
def reshape(input, *shape):
    """A tensor with the same data and a new shape (a view when possible)."""
    shape = shape_arg("reshape", shape)
    if tuple(input.shape) == shape:
        return bind(RESHAPE, input, shape=shape) if hasattr(input, "_data") else input
    return bind(RESHAPE, input, shape=shape)


def view(input, *shape):
    shape = shape_arg("view", shape)
    data = getattr(input, "_data", input)
    if not data.flags.c_contiguous and data.size > 1:
        r = bind(RESHAPE, input, shape=shape)
        if getattr(r, "_data", r).base is None:
            raise RuntimeError(f"view: view size is not compatible with input tensor's size "
                               f"and stride {tuple(input.shape)}; use .reshape(...) instead")
        return r
    return bind(RESHAPE, input, shape=shape)


def flatten(input, start_dim=0, end_dim=-1):
    shape = tuple(input.shape)
    nd = len(shape)
    if nd == 0:
        return reshape(input, (1,))
    s = normalize_dim("flatten", start_dim, nd)
    e = normalize_dim("flatten", end_dim, nd)
    if s > e:
        raise op_error("flatten", f"start_dim {start_dim} comes after end_dim {end_dim}")
    n = 1
    for d in shape[s:e + 1]:
        n *= d
    return reshape(input, shape[:s] + (n,) + shape[e + 1:])


def permute(input, *dims):
    dims = shape_arg("permute", dims) if dims and not isinstance(dims[0], (list, tuple)) else tuple(dims[0])
    return bind(PERMUTE, input, dims=tuple(dims))


def transpose(input, dim0=None, dim1=None):
    """Swap two dims (PyTorch); with no dims, reverse all (NumPy's .T)."""
    nd = len(input.shape)
    if dim0 is None and dim1 is None:
        return bind(PERMUTE, input, dims=tuple(range(nd))[::-1])
    if nd == 0:
        return input
    d0 = normalize_dim("transpose", dim0, nd)
    d1 = normalize_dim("transpose", dim1, nd)
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return bind(PERMUTE, input, dims=tuple(dims))


swapaxes = swapdims = transpose


def movedim(input, source, destination):
    nd = len(input.shape)
    src = source if isinstance(source, (list, tuple)) else (source,)
    dst = destination if isinstance(destination, (list, tuple)) else (destination,)
    if len(src) != len(dst):
        raise op_error("movedim", f"source {src} and destination {dst} differ in length")
    src = [normalize_dim("movedim", d, nd) for d in src]
    dst = [normalize_dim("movedim", d, nd) for d in dst]
    order = [d for d in range(nd) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return bind(PERMUTE, input, dims=tuple(order))


moveaxis = movedim


def broadcast_to(input, shape):
    shape = tuple(shape)
    if tuple(input.shape) == shape:
        return input
    return bind(BROADCAST_TO, input, shape=shape)


def expand(input, *sizes):
    """Broadcast to ``sizes``; -1 keeps that dim (PyTorch)."""
    sizes = shape_arg("expand", sizes)
    shape = tuple(input.shape)
    if len(sizes) < len(shape):
        raise op_error("expand", f"the number of sizes {sizes} must be at least the number "
                                 f"of dims of the input {shape}", RuntimeError)
    lead = len(sizes) - len(shape)
    out = []
    for i, s in enumerate(sizes):
        if s == -1:
            if i < lead:
                raise op_error("expand", f"-1 is not allowed in a new leading dim: {sizes}",
                               RuntimeError)
            s = shape[i - lead]
        out.append(s)
    try:
        return broadcast_to(input, tuple(out))
    except ValueError as e:
        raise op_error("expand", f"cannot expand shape {shape} to {tuple(sizes)}",
                       RuntimeError) from None


def squeeze(input, dim=None):
    return bind(SQUEEZE, input, dim=dim)


def unsqueeze(input, dim):
    return bind(UNSQUEEZE, input, dim=dim)


def mT(input):
    if len(input.shape) < 2:
        raise op_error("mT", f"expected a tensor of at least 2 dims, got shape "
                             f"{tuple(input.shape)}")
    return transpose(input, -2, -1)
