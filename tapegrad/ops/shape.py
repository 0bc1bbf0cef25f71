"""Shape ops: reshape, view, transpose, permute, expand, squeeze, unsqueeze, ...

Layering: shape sits below indexing (``indexing`` imports ``reshape`` from here; this
module imports nothing from ``indexing``, and slicing ops such as split live there).
"""
import itertools

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import normalize_dim, normalize_dims as _normalize_dims, op_error, shape_arg
from ..dispatch import bind
from ..tape import name_call
from . import _jvp, _vmap
from ._decl import S, Sample, TensorSpec, alias, composite, decl, rand, register
from .creation import arange
from .onnx_forms import (
    INT_MAX,
    INT_MIN,
    _diag_like as _onnx_diag_like,
    _dims as _onnx_dims,
    _expand_to as _onnx_expand_to,
    _static_take as _onnx_static_take,
)

__all__ = ["reshape", "view", "flatten", "permute", "transpose", "swapaxes", "swapdims", "movedim",
           "moveaxis", "broadcast_to", "expand", "squeeze", "unsqueeze", "mT", "unflatten", "flip",
           "fliplr", "flipud", "roll", "repeat", "tile", "cat", "concatenate", "concat", "stack",
           "hstack", "vstack", "pad", "tril", "triu", "diagonal_into", "diagonal", "diag",
           "diag_embed", "repeat_interleave", "adjoint", "real", "as_strided"]


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


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_reshape(b, st):
    """Leading dims kept as they are (the batch) are copied from the input (0), so
    the graph works for any size of them; trailing dims kept are given; a single dim
    left between them is inferred (-1): a flatten of the leading dims (``view(-1,
    V)``) works at any batch and length too."""
    src = b.shape(st, 0)
    target = list(b.out_shape(st))
    if 0 in src or 0 in target:
        b.node("Reshape", [b.input(st, 0), b.ints(target)], [b.output(st)])
        return
    k = 0
    while k < min(len(src), len(target)) and src[k] == target[k]:
        k += 1
    t = 0
    while (t < min(len(src), len(target)) - k and src[len(src) - 1 - t] == target[-1 - t]):
        t += 1
    shape = [0] * k + target[k:]
    middle = list(range(k, len(target) - t))
    if len(middle) == 1:
        shape[middle[0]] = -1
    b.node("Reshape", [b.input(st, 0), b.ints(shape)], [b.output(st)])


def _onnx_permute(b, st):
    dims = st.attrs["dims"]
    n = len(b.shape(st, 0))
    b.node("Transpose", [b.input(st, 0)], [b.output(st)], perm=[int(d) % n for d in dims])


def _onnx_broadcast_to(b, st):
    _onnx_expand_to(b, b.input(st, 0), b.shape(st, 0), b.out_shape(st), [b.output(st)])


def _onnx_squeeze(b, st):
    shape = b.shape(st, 0)
    d = _onnx_dims(st.attrs.get("dim"), len(shape))
    axes = [a for a in (range(len(shape)) if d is None else d) if shape[a] == 1]
    if not axes:
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
    else:
        b.squeeze(b.input(st, 0), axes, [b.output(st)])


def _onnx_unsqueeze(b, st):
    n = len(b.shape(st, 0)) + 1
    b.unsqueeze(b.input(st, 0), [int(st.attrs["dim"]) % n], [b.output(st)])


def _onnx_flip(b, st):
    shape = b.shape(st, 0)
    axes = _onnx_dims(st.attrs["dims"], len(shape))
    if not axes or not shape:
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
        return
    b.slice(b.input(st, 0), [-1] * len(axes), [INT_MIN] * len(axes), axes,
            [-1] * len(axes), [b.output(st)])


def _onnx_roll(b, st):
    shape = b.shape(st, 0)
    shifts, dims = st.attrs["shifts"], st.attrs.get("dims")
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    x = b.input(st, 0)
    if dims is None or (isinstance(dims, (tuple, list)) and not dims):
        flat = b.reshape(x, [-1])
        n = int(np.prod(shape))
        y = _onnx_roll_axis(b, flat, shifts[0], 0, n)
        b.node("Reshape", [y, b.ints(shape)], [b.output(st)])
        return
    for s, d in zip(shifts, _onnx_dims(dims, len(shape))):
        x = _onnx_roll_axis(b, x, s, d, shape[d])
    b.node("Identity", [x], [b.output(st)])


def _onnx_roll_axis(b, x, shift, axis, n):
    s = shift % n if n else 0
    if s == 0:
        return x
    tail = b.slice(x, [n - s], [INT_MAX], [axis])
    head = b.slice(x, [0], [n - s], [axis])
    return b.node("Concat", [tail, head], axis=axis)


def _onnx_repeat(b, st):
    sizes = list(st.attrs["sizes"])
    x = b.input(st, 0)
    extra = len(sizes) - len(b.shape(st, 0))
    if extra > 0:
        x = b.unsqueeze(x, list(range(extra)))
    b.node("Tile", [x, b.ints(sizes)], [b.output(st)])


def _onnx_cat(b, st):
    dt = b.out_dtype(st)
    nd = len(b.out_shape(st))
    ins = [b.input(st, j, dt) for j in range(len(st.ins))
           if not (len(b.shape(st, j)) == 1 and b.shape(st, j)[0] == 0 and nd > 1)]
    b.node("Concat", ins, [b.output(st)], axis=int(st.attrs.get("dim", 0)) % max(nd, 1))


def _onnx_stack(b, st):
    dt = b.out_dtype(st)
    nd = len(b.out_shape(st))
    d = int(st.attrs.get("dim", 0)) % nd
    ins = [b.unsqueeze(b.input(st, j, dt), [d]) for j in range(len(st.ins))]
    b.node("Concat", ins, [b.output(st)], axis=d)


def _onnx_pad(b, st):
    shape = b.shape(st, 0)
    pad = list(st.attrs["pad"])
    mode = st.attrs.get("mode", "constant")
    nd = len(shape)
    begin, end = [0] * nd, [0] * nd
    for k in range(len(pad) // 2):
        begin[nd - 1 - k], end[nd - 1 - k] = pad[2 * k], pad[2 * k + 1]
    x = b.input(st, 0)
    pos = [max(p, 0) for p in begin] + [max(p, 0) for p in end]
    if any(pos):
        if mode == "circular":
            if b.opset < 19:
                _onnx_static_take(b, st)
                return
            onnx_mode = "wrap"
        else:
            onnx_mode = {"constant": "constant", "reflect": "reflect",
                         "replicate": "edge"}[mode]
        ins = [x, b.ints(pos)]
        if onnx_mode == "constant":
            ins.append(b.const(np.asarray(st.attrs.get("value", 0) or 0, b.dtype(st, 0))))
        x = b.node("Pad", ins, mode=onnx_mode)
    neg = [(a, -bb, e) for a, (bb, e) in enumerate(zip(begin, end)) if bb < 0 or e < 0]
    if neg:
        axes = [a for a, _, _ in neg]
        starts = [max(s, 0) for _, s, _ in neg]
        ends = [e if e < 0 else INT_MAX for _, _, e in neg]
        x = b.slice(x, starts, ends, axes)
    b.node("Identity", [x], [b.output(st)])


def _onnx_trilu(upper):
    def lower(b, st):
        k = b.const(np.asarray(int(st.attrs.get("diagonal", 0)), np.int64))
        dt = b.dtype(st, 0)
        x = b.input(st, 0)
        if dt.kind == "b":
            y = b.node("Trilu", [b.cast(x, np.int32), k], upper=int(upper))
            b.cast(y, dt, [b.output(st)])
        else:
            b.node("Trilu", [x, k], [b.output(st)], upper=int(upper))
    return lower


RESHAPE = register(name="reshape", onnx=_onnx_reshape, vmap=_vmap.shape_attr(), kind="view",
                   kernel=_reshape_kernel, infer=_reshape_infer,
                   vjp=lambda ctx, g: (ctx.m.reshape(g, ctx.shapes[0]),),
                   jvp=lambda ctx, xt: (reshape(xt, ctx.attrs["shape"]),),
                   samples=lambda dtype=np.float64: [
                       Sample((rand((3, 4), dtype),), {"shape": (4, 3)}),
                       Sample((rand((2, 3, 4), dtype),), {"shape": (-1, 4)}),
                       Sample((rand((1,), dtype),), {"shape": ()}),
                       # transposed: splitting a dim is a view, flattening must copy
                       Sample((rand((4, 3), dtype).T,), {"shape": (3, 2, 2)}),
                       Sample((rand((4, 3), dtype).T,), {"shape": (12,)})],
                   error_samples=lambda: [((rand((3, 4)),), {"shape": (5, 2)}, RuntimeError)],
                   grad_fn_name="ViewBackward0",  # (a reshape that copies names itself)
                   torch=lambda torch, x, shape: torch.reshape(x, shape))


# ---------------------------------------------------------------- public functions
def reshape(input, *shape):
    """A tensor with the same data and a new shape (a view when possible)."""
    shape = shape_arg("reshape", shape)
    if tuple(input.shape) == shape:
        return bind(RESHAPE, input, shape=shape) if hasattr(input, "_data") else input
    res = bind(RESHAPE, input, shape=shape)
    data = getattr(input, "_data", None)
    if data is not None and not data.flags.c_contiguous and res.grad_fn is not None \
            and not np.may_share_memory(getattr(res, "_data", data), data):
        res.grad_fn.call_name = "UnsafeViewBackward0"  # a copy, as PyTorch's reshape
    return res


# ---------------------------------------------------------------- permute
def _perm_check(name, dims, ndim):
    dims = tuple(normalize_dim(name, d, ndim) for d in dims)
    if sorted(dims) != list(range(ndim)):
        raise op_error(name, f"dims {dims} are not a permutation of the {ndim} dims of the "
                             f"input", RuntimeError)
    return dims


def _permute_infer(x, dims):
    dims = _perm_check("permute", dims, len(x.shape))
    return TensorSpec(tuple(x.shape[d] for d in dims), x.dtype)


def _permute_kernel(x, dims):
    return np.transpose(x, _perm_check("permute", dims, x.ndim))


def _permute_vmap(ctx, x):
    n = ctx.ndim(0)
    dims = tuple(ctx.attrs["dims"])
    return bind(ctx.op, x, dims=(0,) + tuple((d % max(n, 1)) + 1 for d in dims))


PERMUTE = register(name="permute", onnx=_onnx_permute, vmap=_permute_vmap, jvp=_jvp.linear,
                   kind="view", kernel=_permute_kernel, infer=_permute_infer,
                   vjp=lambda ctx, g: (ctx.m.permute(g, tuple(np.argsort(
                       _perm_check("permute", ctx.attrs["dims"], len(ctx.shapes[0]))).tolist())),),
                   samples=lambda dtype=np.float64: [
                       Sample((rand((2, 3, 4), dtype),), {"dims": (2, 0, 1)}),
                       Sample((rand((3, 4), dtype),), {"dims": (1, 0)}),
                       Sample((rand((4, 3, 2), dtype).transpose(1, 2, 0),), {"dims": (2, 0, 1)})],
                   error_samples=lambda: [((rand((3, 4)),), {"dims": (0, 0)}, RuntimeError),
                                          ((rand(()),), {"dims": (0,)}, RuntimeError)],
                   torch=lambda torch, x, dims: x.permute(*dims))


def permute(input, *dims, **kwargs):
    """A view of ``input`` with its dims reordered as ``dims``, as ``torch.permute``
    (``permute(x, (1, 0))``, ``permute(x, dims=(1, 0))``, ``x.permute(1, 0)``)."""
    if kwargs:
        if dims or set(kwargs) != {"dims"}:
            raise TypeError(f"permute() got an unexpected keyword argument "
                            f"{next(k for k in kwargs if k != 'dims' or dims)!r}")
        dims = (kwargs["dims"],)
    if dims and not isinstance(dims[0], (list, tuple)):
        dims = shape_arg("permute", dims)
    else:
        dims = tuple(dims[0])
    return bind(PERMUTE, input, dims=tuple(dims))


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


def _broadcast_to_kernel(x, shape):
    # a 0-d NumPy source (the gradient of a full reduction, every backward of a loss)
    # becomes the same read-only stride-0 view directly: np.broadcast_to builds an
    # nditer for it, ~5 us, a noticeable part of a small backward
    if type(x) is np.ndarray and x.ndim == 0 and x.dtype.kind in "biuf":
        try:
            view = np.ndarray(shape, x.dtype, x, 0, (0,) * len(shape))
        except (TypeError, ValueError):  # a bad shape: NumPy's own words below
            return np.broadcast_to(x, shape)
        view.flags.writeable = False
        return view
    return np.broadcast_to(x, shape)


BROADCAST_TO = register(name="broadcast_to", onnx=_onnx_broadcast_to, vmap=_vmap.shape_attr(),
                        jvp=_jvp.linear, kind="view",
                        kernel=_broadcast_to_kernel, infer=_broadcast_infer,
                        vjp=lambda ctx, g: (ctx.m.sum_to(g, ctx.shapes[0]),),
                        samples=lambda dtype=np.float64: [
                            Sample((rand((3, 1), dtype),), {"shape": (2, 3, 4)}),
                            Sample((rand((), dtype),), {"shape": (3,)}),
                            Sample((rand((1, 3), dtype).T,), {"shape": (2, 3, 4)})],
                        error_samples=lambda: [((rand((3, 2)),), {"shape": (3, 4)}, ValueError)],
                        grad_fn_name="ExpandBackward0",
                        torch=lambda torch, x, shape: torch.broadcast_to(x, shape))


def broadcast_to(input, shape):
    """A view of ``input`` broadcast to ``shape``, as ``torch.broadcast_to``."""
    shape = tuple(shape)
    if tuple(input.shape) == shape:
        return input
    return bind(BROADCAST_TO, input, shape=shape)


# ---------------------------------------------------------------- squeeze / unsqueeze
def _squeeze_dims(name, shape, dim):
    nd = len(shape)
    if dim is None:
        return tuple(i for i, s in enumerate(shape) if s == 1)
    if isinstance(dim, (tuple, list)):
        dims = _normalize_dims(name, dim, nd)
    else:
        dims = (normalize_dim(name, dim, nd),)
    return tuple(d for d in dims if nd and shape[d] == 1)  # a 0-d input: dim 0 or -1


def _squeeze_shape(shape, dim):
    dims = _squeeze_dims("squeeze", shape, dim)
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _squeeze_vmap(ctx, x):
    d = ctx.attrs.get("dim")
    if d is None:  # every size-1 dim of an example, never the batch
        d = tuple(i + 1 for i, s in enumerate(tuple(x.shape)[1:]) if s == 1)
        return bind(ctx.op, x, dim=d) if d else x
    return bind(ctx.op, x, dim=ctx.dims(d, 0))


SQUEEZE = register(name="squeeze", onnx=_onnx_squeeze, vmap=_squeeze_vmap, jvp=_jvp.linear,
                   kind="view",
                   # PyTorch's overloads: no dim, one dim, a tuple of dims
                   grad_fn_name=lambda attrs, shapes: "SqueezeBackward" + (
                       "0" if attrs.get("dim") is None else
                       "2" if isinstance(attrs["dim"], (tuple, list)) else "1"),
                   kernel=lambda x, dim=None: x.squeeze(
                       axis=_squeeze_dims("squeeze", x.shape, dim)),
                   infer=lambda x, dim=None: TensorSpec(_squeeze_shape(tuple(x.shape), dim),
                                                        x.dtype),
                   vjp=lambda ctx, g: (ctx.m.reshape(g, ctx.shapes[0]),),
                   samples=lambda dtype=np.float64: [
                       Sample((rand((3, 1, 4, 1), dtype),), {"dim": None}),
                       Sample((rand((3, 1, 4), dtype),), {"dim": 1}),
                       Sample((rand((3, 4), dtype),), {"dim": 0}),
                       Sample((rand((4, 1, 3), dtype).transpose(2, 1, 0),), {"dim": (1, 0)})],
                   error_samples=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError),
                                          ((rand(()),), {"dim": 1}, IndexError),
                                          ((rand((1, 3)),), {"dim": (0, 0)}, RuntimeError)],
                   torch=lambda torch, x, dim=None:
                   torch.squeeze(x) if dim is None else torch.squeeze(x, dim))


def squeeze(input, dim=None):
    """A view of ``input`` without its size-1 dims (only ``dim``, when given), as
    ``torch.squeeze``."""
    return bind(SQUEEZE, input, dim=dim)


def _unsqueeze_shape(shape, dim):
    d = normalize_dim("unsqueeze", dim, len(shape) + 1)
    return tuple(shape[:d]) + (1,) + tuple(shape[d:])


def _unsqueeze_vmap(ctx, x):
    n = ctx.ndim(0) + 1
    d = ctx.attrs["dim"]
    return bind(ctx.op, x, dim=(d % n) + 1 if -n <= d < n else d)


UNSQUEEZE = register(name="unsqueeze", onnx=_onnx_unsqueeze, vmap=_unsqueeze_vmap,
                     jvp=_jvp.linear, kind="view",
                     kernel=lambda x, dim: x.reshape(_unsqueeze_shape(x.shape, dim)),
                     infer=lambda x, dim: TensorSpec(_unsqueeze_shape(tuple(x.shape), dim),
                                                     x.dtype),
                     vjp=lambda ctx, g: (ctx.m.reshape(g, ctx.shapes[0]),),
                     samples=lambda dtype=np.float64: [
                         Sample((rand((3, 4), dtype),), {"dim": 1}),
                         Sample((rand((3, 4), dtype),), {"dim": -1}),
                         Sample((rand((4, 3), dtype).T,), {"dim": 1})],
                     error_samples=lambda: [((rand((3, 4)),), {"dim": 5}, IndexError)],
                     torch=lambda torch, x, dim: torch.unsqueeze(x, dim))


def unsqueeze(input, dim):
    """A view of ``input`` with a size-1 dim inserted at ``dim``, as ``torch.unsqueeze``."""
    return bind(UNSQUEEZE, input, dim=dim)


def view(input, *shape):
    """A view of ``input``'s data with another shape (one size may be -1), as
    ``torch.Tensor.view``."""
    shape = shape_arg("view", shape)
    data = getattr(input, "_data", input)
    if not data.flags.c_contiguous and data.size > 1 and isinstance(data, np.ndarray):
        target = _resolve_shape("view", shape, data.size)
        try:
            np.reshape(data, target, copy=False)  # only when no copy is needed
        except ValueError:
            raise RuntimeError(f"view: view size is not compatible with input tensor's size "
                               f"and stride (shape {tuple(input.shape)}, strides "
                               f"{data.strides}); use .reshape(...) instead") from None
    return bind(RESHAPE, input, shape=shape)


def _view_infer(x, *shape):
    return TensorSpec(_resolve_shape("view", shape_arg("view", shape), _numel(x.shape)), x.dtype)


composite(view, infer=_view_infer,
          samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype), 2, -1, 2), {}),
                                            Sample((rand((2, 3), dtype), 6), {})],
          error_samples=lambda: [((rand((3, 4)), 5), {}, RuntimeError),
                                 ((rand((3, 4)).T, 12), {}, RuntimeError)],
          torch=lambda torch, x, *shape: x.view(*shape))


def real(input):
    """The real part of ``input``: ``input`` itself for a real dtype, as ``torch.real``."""
    if not hasattr(input, "is_complex"):
        raise op_error("real", f"expected a Tensor, got {type(input).__name__}", TypeError)
    if input.is_complex():
        raise TypeError("real: complex tensors are not supported")
    return input


def flatten(input, start_dim=0, end_dim=-1):
    """``input`` with dims ``start_dim`` to ``end_dim`` merged into one, as
    ``torch.flatten``."""
    shape = tuple(input.shape)
    nd = len(shape)
    s = normalize_dim("flatten", start_dim, nd)
    e = normalize_dim("flatten", end_dim, nd)
    if nd == 0:
        return reshape(input, (1,))
    if s > e:
        raise op_error("flatten", f"start_dim {start_dim} cannot come after end_dim {end_dim}",
                       RuntimeError)
    n = 1
    for d in shape[s:e + 1]:
        n *= d
    return reshape(input, shape[:s] + (n,) + shape[e + 1:])


def _flatten_infer(x, start_dim=0, end_dim=-1):
    shape = tuple(x.shape)
    s = normalize_dim("flatten", start_dim, len(shape))
    e = normalize_dim("flatten", end_dim, len(shape))
    if not shape:
        return TensorSpec((1,), x.dtype)
    if s > e:
        raise op_error("flatten", f"start_dim {start_dim} cannot come after end_dim {end_dim}",
                       RuntimeError)
    return TensorSpec(shape[:s] + (_numel(shape[s:e + 1]),) + shape[e + 1:], x.dtype)


composite(flatten, infer=_flatten_infer,
          samples=lambda dtype=np.float64: [Sample((rand((2, 3, 4), dtype),), {"start_dim": 1}),
                                            Sample((rand((2, 3, 4, 1), dtype),),
                                                   {"start_dim": -3, "end_dim": 2}),
                                            Sample((rand((), dtype),), {})],
          error_samples=lambda: [((rand((2, 3, 4)),), {"start_dim": 2, "end_dim": 1}, RuntimeError),
                                 ((rand((2, 3)),), {"start_dim": 3}, IndexError)],
          torch=lambda torch, x, **k: torch.flatten(x, **k))


def transpose(input, dim0=None, dim1=None):
    """Swap two dims (PyTorch); with no dims, reverse all (NumPy's .T)."""
    nd = len(input.shape)
    if dim0 is None and dim1 is None:
        return bind(PERMUTE, input, dims=tuple(range(nd))[::-1])
    d0 = normalize_dim("transpose", dim0, nd)
    d1 = normalize_dim("transpose", dim1, nd)
    if nd == 0:
        return input
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return name_call(bind(PERMUTE, input, dims=tuple(dims)), input, "TransposeBackward0")


def _transpose_infer(x, dim0=None, dim1=None):
    shape = list(x.shape)
    nd = len(shape)
    if dim0 is None and dim1 is None:
        return TensorSpec(tuple(shape[::-1]), x.dtype)
    d0 = normalize_dim("transpose", dim0, nd)
    d1 = normalize_dim("transpose", dim1, nd)
    if nd:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return TensorSpec(tuple(shape), x.dtype)


composite(transpose, infer=_transpose_infer, args=("input",),
          samples=lambda dtype=np.float64: [Sample((rand((2, 3, 4), dtype),),
                                                   {"dim0": 0, "dim1": 2}),
                                            Sample((rand((3, 5), dtype),), {"dim0": -1, "dim1": 0}),
                                            Sample((rand((), dtype),), {"dim0": 0, "dim1": -1})],
          error_samples=lambda: [((rand((2, 3)),), {"dim0": 2, "dim1": 0}, IndexError)],
          torch=lambda torch, x, dim0=None, dim1=None: torch.transpose(x, dim0, dim1))


swapaxes = swapdims = transpose


for _name in ("swapaxes", "swapdims"):  # PyTorch names their dims axis0/axis1, dim0/dim1
    alias(transpose, _name, "transpose",
          samples=lambda dtype=np.float64: [Sample((rand((2, 3, 4), dtype), 0, 2), {}),
                                            Sample((rand((3, 5), dtype), -1, 0), {})],
          error_samples=lambda: [((rand((2, 3)), 2, 0), {}, IndexError)])


def _movedim_dims(nd, source, destination):
    """movedim's source and destination dims, checked and normalized."""
    src = source if isinstance(source, (list, tuple)) else (source,)
    dst = destination if isinstance(destination, (list, tuple)) else (destination,)
    if len(src) != len(dst):
        raise op_error("movedim", f"source {tuple(src)} and destination {tuple(dst)} must "
                                  f"have the same number of dims", RuntimeError)
    src = [normalize_dim("movedim", d, nd) for d in src]
    dst = [normalize_dim("movedim", d, nd) for d in dst]
    for what, ds in (("source", src), ("destination", dst)):
        if len(set(ds)) != len(ds):
            raise op_error("movedim", f"repeated dim in {what} {tuple(ds)}", RuntimeError)
    return src, dst


def movedim(input, source, destination):
    """A view of ``input`` with dims ``source`` moved to positions ``destination``, as
    ``torch.moveaxis``."""
    nd = len(input.shape)
    src, dst = _movedim_dims(nd, source, destination)
    if nd == 0:
        return input
    order = [d for d in range(nd) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return bind(PERMUTE, input, dims=tuple(order))


moveaxis = movedim


def _movedim_infer(x, source, destination):
    shape = tuple(x.shape)
    nd = len(shape)
    src, dst = _movedim_dims(nd, source, destination)
    out = [None] * nd
    for s, d in zip(src, dst):
        out[d] = shape[s]
    rest = iter(n for i, n in enumerate(shape) if i not in src)
    return TensorSpec(tuple(n if n is not None else next(rest) for n in out), x.dtype)


composite(movedim, infer=_movedim_infer,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 4), dtype),), {"source": 0, "destination": -1}),
              Sample((rand((2, 3, 4, 5), dtype),), {"source": (0, 3), "destination": (2, 0)})],
          error_samples=lambda: [((rand((2, 3)),), {"source": (0, 1), "destination": 0},
                                  RuntimeError),
                                 ((rand((2, 3)),), {"source": 2, "destination": 0}, IndexError)],
          torch=lambda torch, x, source, destination: torch.movedim(x, source, destination))


alias(movedim, "moveaxis", "movedim")


def _expand_sizes(shape, sizes):
    """``expand``'s target shape: -1 keeps that dim; a size must match its dim or
    the dim must be 1 (PyTorch's rules, the function's and its shape rule's)."""
    sizes = shape_arg("expand", sizes)
    if len(sizes) < len(shape):
        raise op_error("expand", f"the number of sizes {sizes} must be at least the number "
                                 f"of dims of the input {shape}", RuntimeError)
    lead = len(sizes) - len(shape)
    out = []
    for i, s in enumerate(sizes):
        if s == -1 and i < lead:
            raise op_error("expand", f"-1 is not allowed in a new leading dim: {sizes}",
                           RuntimeError)
        n = shape[i - lead] if s == -1 else s
        if i >= lead and shape[i - lead] not in (1, n):
            raise op_error("expand", f"cannot expand shape {shape} to {tuple(sizes)}",
                           RuntimeError)
        out.append(n)
    return tuple(out)


def expand(input, *sizes):
    """Broadcast to ``sizes``; -1 keeps that dim (PyTorch)."""
    return broadcast_to(input, _expand_sizes(tuple(input.shape), sizes))


def _expand_infer(x, *sizes):
    return TensorSpec(_expand_sizes(tuple(x.shape), sizes), x.dtype)


composite(expand, infer=_expand_infer,
          samples=lambda dtype=np.float64: [Sample((rand((3, 1), dtype), 2, -1, 4), {}),
                                            Sample((rand((), dtype), 3), {})],
          error_samples=lambda: [((rand((3, 2)), 3, 4), {}, RuntimeError),
                                 ((rand((3, 2)), -1, 3, 2), {}, RuntimeError)],
          torch=lambda torch, x, *sizes: x.expand(*sizes))


def mT(input):
    """The transpose of the last two dims (a view), as ``torch.Tensor.mT``."""
    if len(input.shape) < 2:
        raise op_error("mT", f"expected a tensor of at least 2 dims, got shape "
                             f"{tuple(input.shape)}")
    return transpose(input, -2, -1)


def _mT_infer(x):
    if len(x.shape) < 2:
        raise op_error("mT", f"expected a tensor of at least 2 dims, got shape {tuple(x.shape)}")
    return TensorSpec(tuple(x.shape[:-2]) + (x.shape[-1], x.shape[-2]), x.dtype)


composite(mT, infer=_mT_infer,
          samples=lambda dtype=np.float64: [Sample((rand((2, 3, 4), dtype),), {}),
                                            Sample((rand((3, 5), dtype),), {})],
          error_samples=lambda: [((rand((3,)),), {}, ValueError)],
          torch=lambda torch, x: x.mT)


def unflatten(input, dim, sizes):
    """Split dim ``dim`` into ``sizes`` (one entry may be -1)."""
    shape = tuple(input.shape)
    d = normalize_dim("unflatten", dim, len(shape))
    if not shape:
        raise op_error("unflatten", "a 0-d input has no dim to unflatten", RuntimeError)
    sizes = shape_arg("unflatten", (sizes,), "sizes")
    if not sizes:
        raise op_error("unflatten", "sizes must be non-empty", RuntimeError)
    sizes = _resolve_shape("unflatten", sizes, shape[d])
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


def _unflatten_infer(x, dim, sizes):
    shape = tuple(x.shape)
    d = normalize_dim("unflatten", dim, len(shape))
    if not shape:
        raise op_error("unflatten", "a 0-d input has no dim to unflatten", RuntimeError)
    sizes = shape_arg("unflatten", (sizes,), "sizes")
    if not sizes:
        raise op_error("unflatten", "sizes must be non-empty", RuntimeError)
    return TensorSpec(shape[:d] + _resolve_shape("unflatten", sizes, shape[d]) + shape[d + 1:],
                      x.dtype)


composite(unflatten, infer=_unflatten_infer,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 6), dtype),), {"dim": 1, "sizes": (3, -1)}),
              Sample((rand((4, 3), dtype),), {"dim": -2, "sizes": (2, 1, 2)})],
          error_samples=lambda: [((rand((2, 6)),), {"dim": 1, "sizes": (4, 2)}, RuntimeError),
                                 ((rand((2, 6)),), {"dim": 2, "sizes": (2, 3)}, IndexError)],
          torch=lambda torch, x, dim, sizes: torch.unflatten(x, dim, sizes))


# ================================================================ more shape ops
def _same_spec(x):
    return TensorSpec(tuple(x.shape), x.dtype)


def _seq(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


# ---------------------------------------------------------------- flip
def _flip_infer(x, dims):
    _normalize_dims("flip", dims, len(x.shape))
    return _same_spec(x)


def _flip_kernel(x, dims, out=None):
    if out is not None:  # (the flipped view copied in: NumPy buffers it when out is x)
        out[...] = x if x.ndim == 0 or not dims else np.flip(x, axis=dims)
        return out
    # PyTorch's flip copies, keeping the input's layout (a flip of a transposed view is
    # transposed too): NumPy's order "K"
    if x.ndim == 0 or not dims:
        return x.copy(order="K")
    return np.flip(x, axis=dims).copy(order="K")


FLIP = register(name="flip", onnx=_onnx_flip, vmap=_vmap.dim_attrs("dims"), kernel=_flip_kernel,
                infer=_flip_infer,
                vjp=lambda ctx, g: (ctx.m.flip(g, ctx.attrs["dims"]),),
                jvp=lambda ctx, xt: (flip(xt, ctx.attrs["dims"]),),
                samples=lambda dtype=np.float64: [
                    Sample((rand((3, 4), dtype),), {"dims": (0,)}),
                    Sample((rand((2, 3, 4), dtype),), {"dims": (0, 2)}),
                    Sample((rand((4, 3), dtype).T,), {"dims": (1,)}),
                    Sample((rand((2, 0), dtype),), {"dims": (1,)})],
                error_samples=lambda: [((rand((3, 4)),), {"dims": (2,)}, IndexError),
                                       ((rand(()),), {"dims": (1,)}, IndexError),
                                       ((rand((3, 4)),), {"dims": (0, 0)}, RuntimeError)],
                torch=lambda torch, x, dims: torch.flip(x, dims))


def flip(input, *args, dims=None):
    """Reverse the order of elements along ``dims`` (a copy, as PyTorch)."""
    if dims is None:
        dims = args[0] if len(args) == 1 else args
    nd = len(input.shape)
    dims = _normalize_dims("flip", shape_arg("flip", (_seq(dims),), "dims"), nd)
    return bind(FLIP, input, dims=dims if nd else ())


def fliplr(input):
    """``input`` reversed along dim 1 (left/right), as ``torch.fliplr``."""
    _flip_lr_ud("fliplr", 1, 2)(input)  # PyTorch: a 1-d input is refused
    return flip(input, (1,))


def flipud(input):
    """``input`` reversed along dim 0 (up/down), as ``torch.flipud``."""
    _flip_lr_ud("flipud", 0, 1)(input)  # PyTorch: a 0-d input is refused (NumPy too)
    return flip(input, (0,))


def _flip_lr_ud(name, dim, least):
    def infer(x):
        if len(x.shape) < least:
            raise op_error(name, f"input must be >= {least}-d, got shape {tuple(x.shape)}",
                           RuntimeError)
        return _flip_infer(x, (dim,))
    return infer


for _fn, _dim in ((fliplr, 1), (flipud, 0)):
    composite(_fn, infer=_flip_lr_ud(_fn.__name__, _dim, _dim + 1),
              samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype),), {}),
                                                Sample((rand((2, 3, 2), dtype),), {})],
              error_samples=(lambda d: lambda: [((rand((3,) * d),), {}, RuntimeError)])(_dim),
              torch=(lambda n: lambda torch, x: getattr(torch, n)(x))(_fn.__name__))


# ---------------------------------------------------------------- roll
def _roll_infer(x, shifts, dims=None):
    if not shifts:
        raise op_error("roll", "shifts required (an int or a non-empty sequence of ints)",
                       RuntimeError)
    if dims is not None:
        if dims and not x.shape:  # PyTorch: a 0-d input rolls only with dims=None
            raise op_error("roll", f"dims {dims} specified, but a 0-d input has no dims",
                           IndexError)
        for d in dims:
            normalize_dim("roll", d, len(x.shape))
        if len(dims) != len(shifts):
            raise op_error("roll", f"shifts {shifts} and dims {dims} must have the same "
                                   f"length", RuntimeError)
    return _same_spec(x)


def _roll_kernel(x, shifts, dims=None, out=None):
    _roll_infer(x, shifts, dims)
    if out is not None:
        flat = dims is None and x.flags.c_contiguous and out.flags.c_contiguous
        if x.ndim == 0 or (dims is None and not flat) \
                or _devices.xp_of(out).may_share_memory(out, x):
            out[...] = _roll_kernel(x, shifts, dims)  # (strided flat roll, out is x's memory)
        elif flat:  # the flattened roll, on views
            _roll_into(x.reshape(-1), shifts[:1], (0,), out.reshape(-1))
        else:
            _roll_into(x, shifts, dims, out)
        return out
    if dims is None:
        return np.roll(x, shifts[0])
    return np.roll(x, shifts, axis=dims)


def _roll_into(x, shifts, dims, out):
    """``out[..., (i + s) % n, ...] = x[..., i, ...]``: per rolled dim two blocks
    (the head moved to the tail and the tail to the head), copied block by block."""
    by_dim = {}
    for s, d in zip(shifts, dims):
        d = d % x.ndim
        by_dim[d] = by_dim.get(d, 0) + s
    pieces = [[(slice(None), slice(None))] for _ in range(x.ndim)]
    for d, s in by_dim.items():
        n = x.shape[d]
        k = s % n if n else 0
        if k:
            pieces[d] = [(slice(k, None), slice(0, n - k)), (slice(0, k), slice(n - k, None))]
    for combo in itertools.product(*pieces):
        out[tuple(p[0] for p in combo)] = x[tuple(p[1] for p in combo)]


def _roll_vmap(ctx, x):
    dims = ctx.attrs.get("dims")
    if dims is None or dims == ():  # rolls the flattened example
        m = ctx.m
        flat = m.reshape(x, (ctx.size, -1))
        out = bind(ctx.op, flat, shifts=ctx.attrs["shifts"], dims=(1,))
        return m.reshape(out, tuple(x.shape))
    return bind(ctx.op, x, shifts=ctx.attrs["shifts"], dims=ctx.dims(dims, 0))


ROLL = register(name="roll", onnx=_onnx_roll, vmap=_roll_vmap, jvp=_jvp.linear,
                kernel=_roll_kernel, infer=_roll_infer,
                vjp=lambda ctx, g: (bind(ROLL, g, shifts=tuple(-s for s in ctx.attrs["shifts"]),
                                         dims=ctx.attrs["dims"]),),
                samples=lambda dtype=np.float64: [
                    Sample((rand((3, 4), dtype),), {"shifts": (1,), "dims": (1,)}),
                    Sample((rand((3, 4), dtype),), {"shifts": (5,), "dims": None}),
                    Sample((rand((2, 3, 4), dtype),), {"shifts": (-1, 2), "dims": (0, 2)}),
                    Sample((rand((4, 3), dtype).T,), {"shifts": (2,), "dims": (0,)})],
                error_samples=lambda: [((rand((3, 4)),), {"shifts": (1, 2), "dims": (0,)},
                                        RuntimeError),
                                       ((rand((3, 4)),), {"shifts": (), "dims": ()}, RuntimeError),
                                       ((rand(()),), {"shifts": (1,), "dims": (0,)}, IndexError)],
                torch=lambda torch, x, shifts, dims=None:
                torch.roll(x, shifts, dims) if dims is not None else torch.roll(x, shifts[0]))


def roll(input, shifts, dims=None):
    """Roll elements along ``dims`` (all elements, flattened, when ``dims`` is None)."""
    shifts = shape_arg("roll", (_seq(shifts),), "shifts")
    if dims is not None:
        nd = len(input.shape)
        dims = tuple(normalize_dim("roll", d, nd) for d in _seq(dims))
    if not dims:  # None or (): the flattened elements roll
        dims = None
        if len(shifts) != 1:
            raise op_error("roll", f"shifts {shifts} need dims of the same length",
                           RuntimeError)
    return bind(ROLL, input, shifts=shifts, dims=dims)


# ---------------------------------------------------------------- repeat / tile
def _repeat_infer(x, sizes):
    shape = tuple(x.shape)
    if len(sizes) < len(shape):
        raise op_error("repeat", f"the number of repeat sizes {sizes} can not be smaller than "
                                 f"the number of dims of the input {shape}", RuntimeError)
    if any(s < 0 for s in sizes):
        raise op_error("repeat", f"repeat sizes must be non-negative, got {sizes}",
                       RuntimeError)
    padded = (1,) * (len(sizes) - len(shape)) + shape
    return TensorSpec(tuple(p * s for p, s in zip(padded, sizes)), x.dtype)


def _repeat_kernel(x, sizes, out=None):
    _repeat_infer(x, sizes)
    if out is not None:
        shape = tuple(x.shape)
        padded = (1,) * (len(sizes) - len(shape)) + shape
        if out.flags.c_contiguous and not _devices.xp_of(out).may_share_memory(out, x):
            # out as (r0, d0, r1, d1, ...): x broadcast over the r's, one copy
            inter = tuple(n for r, d in zip(sizes, padded) for n in (r, d))
            out.reshape(inter)[...] = x.reshape(tuple(n for d in padded for n in (1, d)))
        else:
            out[...] = _repeat_kernel(x, sizes)
        return out
    return np.tile(x, sizes) if sizes else x.copy()


def _repeat_vjp(ctx, g):
    m = ctx.m
    shape = tuple(ctx.shapes[0])
    sizes = ctx.attrs["sizes"]
    padded = (1,) * (len(sizes) - len(shape)) + shape
    inter = []
    for r, d in zip(sizes, padded):
        inter += [r, d]
    g = m.reshape(g, tuple(inter))
    g = m.sum(g, dim=tuple(range(0, 2 * len(sizes), 2)))
    return (m.reshape(g, shape),)


def _repeat_vmap(ctx, x):
    sizes = tuple(ctx.attrs["sizes"])
    n = ctx.ndim(0)
    if len(sizes) > n:
        s = tuple(x.shape)
        x = ctx.m.reshape(x, s[:1] + (1,) * (len(sizes) - n) + s[1:])
    return bind(ctx.op, x, sizes=(1,) + sizes)


REPEAT = register(name="repeat", onnx=_onnx_repeat, vmap=_repeat_vmap, jvp=_jvp.linear,
                  kernel=_repeat_kernel, infer=_repeat_infer, vjp=_repeat_vjp,
                  samples=lambda dtype=np.float64: [
                      Sample((rand((2, 3), dtype),), {"sizes": (2, 1)}),
                      Sample((rand((2, 3), dtype),), {"sizes": (2, 1, 3)}),
                      Sample((rand((3,), dtype),), {"sizes": (0, 2)}),
                      Sample((rand((4, 2), dtype).T,), {"sizes": (1, 2)}),
                      Sample((rand((), dtype),), {"sizes": (3,)})],
                  error_samples=lambda: [((rand((2, 3)),), {"sizes": (2,)}, RuntimeError)],
                  torch=lambda torch, x, sizes: x.repeat(*sizes))


def repeat(input, *sizes):
    """Tile the tensor ``sizes[i]`` times along each dim (PyTorch's ``Tensor.repeat``;
    NumPy's ``repeat`` is ``repeat_interleave``)."""
    return bind(REPEAT, input, sizes=shape_arg("repeat", sizes))


def tile(input, *args, dims=None):
    """As ``repeat``, with ``dims`` padded with leading 1s to the input's ndim."""
    dims = shape_arg("tile", args if dims is None else _seq(dims))
    nd = len(input.shape)
    dims = (1,) * (nd - len(dims)) + dims
    return bind(REPEAT, input, sizes=dims)


def _tile_infer(x, *args, dims=None):
    dims = shape_arg("tile", args if dims is None else _seq(dims))
    return _repeat_infer(x, (1,) * (len(x.shape) - len(dims)) + dims)


composite(tile, infer=_tile_infer,
          samples=lambda dtype=np.float64: [Sample((rand((2, 3), dtype),), {"dims": (2,)}),
                                            Sample((rand((3,), dtype),), {"dims": (2, 1, 2)})],
          error_samples=lambda: [((rand((2, 3)),), {"dims": (-1,)}, RuntimeError)],
          torch=lambda torch, x, dims: torch.tile(x, dims))


# ---------------------------------------------------------------- cat / stack
def _cat_infer(*xs, dim):
    if not xs:
        raise op_error("cat", "expected a non-empty sequence of tensors", RuntimeError)
    nd = len(xs[0].shape)
    if nd == 0:
        raise op_error("cat", "zero-dimensional tensors cannot be concatenated",
                       RuntimeError)
    d = normalize_dim("cat", dim, nd)
    first = tuple(xs[0].shape)
    total = 0
    for k, x in enumerate(xs):
        s = tuple(x.shape)
        if len(s) != nd or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != d):
            raise op_error("cat", f"sizes of tensors must match except in dim {d}: tensor 0 "
                                  f"has shape {first}, tensor {k} has shape {s}", RuntimeError)
        total += s[d]
    dt = _dt.result_type(*[np.dtype(x.dtype) for x in xs])
    return TensorSpec(first[:d] + (total,) + first[d + 1:], dt)


def _cat_kernel(*xs, dim, out=None):
    _cat_infer(*xs, dim=dim)
    if out is None and xs and all(type(x) is np.ndarray for x in xs):
        # C-contiguous, as PyTorch's (NumPy's follows its inputs' layout: the cat of
        # transposed views is one too, and .view() of it then fails where PyTorch's works)
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        out = np.empty(shape, np.result_type(*xs))
    return np.concatenate(xs, axis=dim, out=out)


def _cat_vjp(ctx, g):
    dim = ctx.attrs["dim"]
    out = []
    start = 0
    for s, need in zip(ctx.shapes, ctx.needs_input_grad):
        n = s[dim]
        out.append(ctx.m.getitem_raw(g, (slice(None),) * dim + (slice(start, start + n),))
                   if need else None)
        start += n
    return out


CAT = register(name="cat", autocast={"cpu": "promote"}, onnx=_onnx_cat,
               vmap=_vmap.all_batched_dim(), jvp=_jvp.linear, kernel=_cat_kernel, infer=_cat_infer,
               args=("tensors",),
               vjp=_cat_vjp, promote="same",
               samples=lambda dtype=np.float64: [
                   Sample((rand((2, 3), dtype), rand((1, 3), dtype)), {"dim": 0}),
                   Sample((rand((2, 3), dtype), rand((2, 1), dtype), rand((2, 2), dtype)),
                          {"dim": 1}),
                   Sample((rand((2, 0), dtype), rand((3, 2), dtype).T), {"dim": 1}),
                   Sample((rand((3,), dtype),), {"dim": 0})],
               error_samples=lambda: [((rand((2, 3)), rand((2, 4))), {"dim": 0}, RuntimeError),
                                      ((rand((2, 3)), rand((2, 3))), {"dim": 2}, IndexError)],
               torch=lambda torch, *xs, dim: torch.cat(xs, dim))


def cat(tensors, dim=None, *, axis=None, out=None):
    """Concatenate tensors along an existing dim (gradients split back to each)."""
    ts = _tensor_list("cat", tensors)
    dim = _dim_alias("cat", dim, axis)
    # PyTorch's legacy rule: 1-D empty tensors are skipped next to tensors of other rank
    nds = {len(t.shape) for t in ts}
    if len(nds) > 1:
        ts = [t for t in ts if tuple(t.shape) != (0,)] or ts[:1]
    nd = len(ts[0].shape)
    d = normalize_dim("cat", dim, nd) if nd else dim
    return _out("cat", bind(CAT, *ts, dim=d), out)


def _tensor_list(name, tensors):
    if hasattr(tensors, "shape") or not isinstance(tensors, (list, tuple)):
        raise op_error(name, f"expected a sequence of tensors, got {type(tensors).__name__}",
                       TypeError)
    if not tensors:  # PyTorch: cat's is a ValueError, stack's and the others' RuntimeError
        raise op_error(name, "expected a non-empty sequence of tensors",
                       ValueError if name == "cat" else RuntimeError)
    return list(tensors)


def _dim_alias(name, dim, axis, default=0):
    if axis is not None:
        if dim is not None:
            raise op_error(name, "pass either dim or axis, not both", TypeError)
        return axis
    return default if dim is None else dim


concatenate = concat = cat


for _name in ("concatenate", "concat"):
    composite(cat, name=_name, infer=_cat_infer, args=("tensors",), sequence=True,
              samples=lambda dtype=np.float64: [
                  Sample((rand((2, 3), dtype), rand((1, 3), dtype)), {"dim": 0}),
                  Sample((rand((2, 3), dtype), rand((2, 1), dtype)), {"dim": -1})],
              error_samples=lambda: [((rand((2, 3)), rand((2, 4))), {"dim": 0}, RuntimeError),
                                     ((rand((2, 3)), rand((2, 3))), {"dim": 2}, IndexError)],
              torch=(lambda n: lambda torch, *xs, dim: getattr(torch, n)(xs, dim))(_name))


def _stack_infer(*xs, dim):
    if not xs:
        raise op_error("stack", "expected a non-empty sequence of tensors", RuntimeError)
    first = tuple(xs[0].shape)
    d = normalize_dim("stack", dim, len(first) + 1)
    for k, x in enumerate(xs):
        if tuple(x.shape) != first:
            raise op_error("stack", f"stack expects each tensor to be equal size, but got "
                                    f"{first} at entry 0 and {tuple(x.shape)} at entry {k}",
                           RuntimeError)
    dt = _dt.result_type(*[np.dtype(x.dtype) for x in xs])
    return TensorSpec(first[:d] + (len(xs),) + first[d:], dt)


def _stack_kernel(*xs, dim, out=None):
    _stack_infer(*xs, dim=dim)
    if out is None and xs and all(type(x) is np.ndarray for x in xs):
        # C-contiguous, as PyTorch's (see _cat_kernel)
        shape = list(xs[0].shape)
        shape.insert(dim % (len(shape) + 1), len(xs))
        out = np.empty(shape, np.result_type(*xs))
    return np.stack(xs, axis=dim, out=out)


def _stack_vmap(ctx, *values):
    values = _vmap.batched_all(ctx, values)
    n = ctx.ndim(0) + 1
    d = ctx.attrs["dim"]
    return bind(ctx.op, *values, dim=(d % n) + 1 if -n <= d < n else d)


STACK = register(name="stack", autocast={"cpu": "promote"}, onnx=_onnx_stack, vmap=_stack_vmap,
                 jvp=_jvp.linear, kernel=_stack_kernel, infer=_stack_infer, args=("tensors",),
                 promote="same",
                 vjp=lambda ctx, g: [ctx.m.getitem_raw(g, (slice(None),) * ctx.attrs["dim"] + (k,))
                                     if need else None
                                     for k, need in enumerate(ctx.needs_input_grad)],
                 samples=lambda dtype=np.float64: [
                     Sample((rand((2, 3), dtype), rand((2, 3), dtype)), {"dim": 0}),
                     Sample((rand((2, 3), dtype), rand((2, 3), dtype), rand((3, 2), dtype).T),
                            {"dim": 2}),
                     Sample((rand((), dtype), rand((), dtype)), {"dim": 0}),
                     Sample((rand((0, 2), dtype),), {"dim": 1})],
                 error_samples=lambda: [((rand((2, 3)), rand((3, 2))), {"dim": 0}, RuntimeError),
                                        ((rand((2, 3)),), {"dim": 3}, IndexError)],
                 torch=lambda torch, *xs, dim: torch.stack(xs, dim))


def stack(tensors, dim=None, *, axis=None, out=None):
    """Join same-shaped tensors along a new dim."""
    ts = _tensor_list("stack", tensors)
    dim = _dim_alias("stack", dim, axis)
    d = normalize_dim("stack", dim, len(ts[0].shape) + 1)
    return _out("stack", bind(STACK, *ts, dim=d), out)


def _out(name, result, out):
    """``result``, or PyTorch's ``out=``: copied into ``out``, which is returned."""
    if out is None:
        return result
    from .compat import write_out
    return write_out(name, result, out)


def hstack(tensors):
    """The tensors concatenated along dim 1 (dim 0 for 1-d tensors), as ``torch.hstack``."""
    ts = _tensor_list("hstack", tensors)
    return cat(ts, 0 if all(len(t.shape) <= 1 for t in ts) else 1)


def vstack(tensors):
    """The tensors (1-d ones as rows) concatenated along dim 0, as ``torch.vstack``."""
    ts = [t if len(t.shape) >= 2 else reshape(t, (1, -1) if len(t.shape) else (1, 1))
          for t in _tensor_list("vstack", tensors)]
    return cat(ts, 0)


def _hstack_infer(*xs):
    return _cat_infer(*xs, dim=0 if all(len(x.shape) <= 1 for x in xs) else 1)


def _vstack_infer(*xs):
    return _cat_infer(*[x if len(x.shape) >= 2 else TensorSpec((1, _numel(x.shape)), x.dtype)
                        for x in xs], dim=0)


for _fn, _infer in ((hstack, _hstack_infer), (vstack, _vstack_infer)):
    composite(_fn, infer=_infer, args=("tensors",), sequence=True,
              samples=lambda dtype=np.float64: [
                  Sample((rand((2, 3), dtype), rand((2, 3), dtype)), {}),
                  Sample((rand((3,), dtype), rand((3,), dtype), rand((3,), dtype)), {})],
              error_samples=lambda: [((rand((2, 3)), rand((3, 4))), {}, RuntimeError)],
              torch=(lambda n: lambda torch, *xs: getattr(torch, n)(xs))(_fn.__name__))


# ---------------------------------------------------------------- pad
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_widths(name, shape, pad):
    nd = len(shape)
    if len(pad) % 2:
        raise op_error(name, f"pad {pad} must have an even length", RuntimeError)
    k = len(pad) // 2
    if k > nd:
        raise op_error(name, f"pad {pad} pads {k} dims but the input has shape {shape}",
                       RuntimeError)
    widths = [(0, 0)] * (nd - k)
    for i in range(k):  # pad lists the last dim first
        widths.append((pad[2 * (k - 1 - i)], pad[2 * (k - 1 - i) + 1]))
    return widths


def _pad_infer(x, pad, mode="constant", value=0.0):
    shape = tuple(x.shape)
    if mode not in _PAD_MODES:
        raise op_error("pad", f"mode must be one of {_PAD_MODES}, got {mode!r}",
                       NotImplementedError)
    widths = _pad_widths("pad", shape, pad)
    out = []
    for d, ((b, a), s) in enumerate(zip(widths, shape)):
        if s - max(-b, 0) - max(-a, 0) < 0:
            raise op_error("pad", f"the input size {s} of dim {d}, plus negative padding {b} "
                                  f"and {a}, gives a negative size (shape {shape})",
                           RuntimeError)
        if (b or a) and mode == "reflect" and (b >= s or a >= s):
            raise op_error("pad", f"reflect padding ({b}, {a}) must be smaller than the size "
                                  f"{s} of dim {d} (shape {shape})", RuntimeError)
        if (b > 0 or a > 0) and mode == "replicate" and s == 0:
            raise op_error("pad", f"replicate padding of an empty dim {d} (shape {shape})",
                           RuntimeError)
        if (b or a) and mode == "circular" and (b > s or a > s):
            raise op_error("pad", f"circular padding ({b}, {a}) may be at most the size {s} "
                                  f"of dim {d} (shape {shape})", RuntimeError)
        out.append(s + b + a)
    return TensorSpec(tuple(out), x.dtype)


def _pad_index(shape, widths, mode, xp=np):
    """The gather index that non-constant padding is: out = x[index]."""
    lead = next((i for i, w in enumerate(widths) if w != (0, 0)), len(widths))
    arrays = []
    for d in range(lead, len(shape)):
        (b, a), s = widths[d], shape[d]
        i = np.arange(-b, s + a)
        if mode == "reflect":
            i = np.abs(i)
            i = np.where(i > s - 1, 2 * (s - 1) - i, i)
        elif mode == "replicate":
            i = np.clip(i, 0, s - 1)
        else:
            i = i % max(s, 1)
        arrays.append(i)
    grids = np.ix_(*arrays) if arrays else ()
    if xp is not np:
        grids = tuple(xp.asarray(g) for g in grids)
    return (slice(None),) * lead + tuple(grids)


def _pad_into(x, out, widths, mode, value):
    """The padded x written into ``out``: the kept part of x copied into its interior,
    then the border filled (a constant; or, dim by dim, planes copied from out's own
    rows, each over the dims already padded and the interior of the rest, so corners
    come out as ``x[_pad_index(...)]``). Non-constant modes with a negative width go
    through the index (their border may read rows cropped away)."""
    if mode != "constant" and any(b < 0 or a < 0 for b, a in widths):
        out[...] = x[_pad_index(tuple(x.shape), widths, mode, _devices.xp_of(x))]
        return out
    keep = tuple(slice(max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(widths, x.shape))
    inner = tuple(slice(max(b, 0), max(b, 0) + (k.stop - k.start))
                  for (b, a), k in zip(widths, keep))
    if mode == "constant":
        for d, ((b, a), k) in enumerate(zip(widths, inner)):
            pre = (slice(None),) * d
            if b > 0:
                out[pre + (slice(0, b),)] = value
            if a > 0:
                out[pre + (slice(k.stop, None),)] = value
        out[inner] = x[keep]
        return out
    out[inner] = x
    for d, ((b, a), s) in enumerate(zip(widths, x.shape)):
        if not (b or a):
            continue
        src = np.arange(-b, s + a)
        if mode == "reflect":
            src = np.abs(src)
            src = np.where(src > s - 1, 2 * (s - 1) - src, src)
        elif mode == "replicate":
            src = np.clip(src, 0, s - 1)
        else:
            src = src % max(s, 1)
        pre, post = (slice(None),) * d, inner[d + 1:]
        for k in list(range(b)) + list(range(b + s, b + s + a)):
            out[pre + (k,) + post] = out[pre + (int(src[k]) + b,) + post]
    return out


def _pad_kernel(x, pad, mode="constant", value=0.0, out=None):
    _pad_infer(x, pad, mode, value)
    widths = _pad_widths("pad", tuple(x.shape), pad)
    if out is not None:
        if _devices.xp_of(out).may_share_memory(out, x):
            out[...] = _pad_kernel(x, pad, mode, value)
            return out
        return _pad_into(x, out, widths, mode, value)
    if mode == "constant":
        crop = tuple(slice(max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(widths, x.shape))
        return np.pad(x[crop], [(max(b, 0), max(a, 0)) for b, a in widths], mode="constant",
                      constant_values=value)
    return x[_pad_index(tuple(x.shape), widths, mode, _devices.xp_of(x))]


def _pad_vjp(ctx, g):
    pad, mode = ctx.attrs["pad"], ctx.attrs["mode"]
    shape = tuple(ctx.shapes[0])
    if mode == "constant":  # the adjoint crops what was padded and zero-pads what was cropped
        return (bind(PAD, g, pad=tuple(-p for p in pad), mode="constant", value=0.0),)
    widths = _pad_widths("pad", shape, pad)
    index = _pad_index(shape, widths, mode, _devices.xp_of(getattr(g, "_data", g)))
    return (ctx.m.index_add_into(g, shape, index),)


def _pad_samples(dtype=np.float64):
    x = rand((2, 3, 4), dtype, seed=5)
    return [Sample((x,), {"pad": (1, 2), "mode": "constant", "value": 0.0}),
            Sample((x,), {"pad": (1, -1, -1, 2), "mode": "constant", "value": 1.5}),
            Sample((rand((4, 3), dtype).T,), {"pad": (0, 1, 2, 0), "mode": "constant",
                                              "value": 0.0}),
            Sample((x,), {"pad": (2, 1), "mode": "reflect", "value": 0.0}),
            Sample((x,), {"pad": (1, 2, 2, 1), "mode": "reflect", "value": 0.0}),
            Sample((x,), {"pad": (2, 3, 1, 0), "mode": "replicate", "value": 0.0}),
            Sample((x,), {"pad": (1, 3, 2, 1), "mode": "circular", "value": 0.0}),
            Sample((x,), {"pad": (-1, 2), "mode": "replicate", "value": 0.0})]


PAD_OP = []  # filled below: the rule calls its own op


def _pad_jvp(ctx, t):
    # affine in the input: the tangent is padded with zeros (reflect/replicate/circular
    # copy the tangent as they copy the input)
    attrs = dict(ctx.attrs)
    if "value" in attrs:
        attrs["value"] = 0.0
    return (bind(PAD_OP[0], t, **attrs),)


def _pad_vmap(ctx, x):
    """Pads of the last dims map over the batch; a mode whose kernel limits the rank
    (reflect on 2-D/3-D inputs) folds the batch into the first dim."""
    if ctx.attrs.get("mode", "constant") == "constant" or ctx.ndim(0) < 1:
        return bind(ctx.op, x, **ctx.attrs)
    m = ctx.m
    s = tuple(x.shape)
    folded = m.reshape(x, (s[0] * s[1],) + s[2:]) if ctx.ndim(0) >= 2 else x
    out = bind(ctx.op, folded, **ctx.attrs)
    return m.reshape(out, s[:2] + tuple(out.shape[1:])) if ctx.ndim(0) >= 2 else out


def _pad_grad_fn_name(attrs, shapes):
    """PyTorch's pad kernels: constant_pad_nd, and per mode and number of padded dims
    reflection/replication_pad{1,2,3}d (circular pads by copying slices)."""
    mode = attrs.get("mode", "constant")
    n = len(attrs["pad"]) // 2
    if mode == "reflect":
        return f"ReflectionPad{n}DBackward0"
    if mode == "replicate":
        return f"ReplicationPad{n}DBackward0"
    return "CopySlices" if mode == "circular" else "ConstantPadNdBackward0"


PAD = register(name="pad", onnx=_onnx_pad, vmap=_pad_vmap, jvp=_pad_jvp, kernel=_pad_kernel,
               infer=_pad_infer, vjp=_pad_vjp,
               samples=_pad_samples, grad_fn_name=_pad_grad_fn_name,
               error_samples=lambda: [
                   ((rand((2, 3)),), {"pad": (1,), "mode": "constant", "value": 0.0},
                    RuntimeError),
                   ((rand((3,)),), {"pad": (1, 1, 1, 1), "mode": "constant", "value": 0.0},
                    RuntimeError),
                   ((rand((2, 3)),), {"pad": (3, 0), "mode": "reflect", "value": 0.0},
                    RuntimeError),
                   ((rand((2, 3)),), {"pad": (-2, -2), "mode": "constant", "value": 0.0},
                    RuntimeError)],
               torch=lambda torch, x, pad, mode="constant", value=0.0:
               torch.nn.functional.pad(x, pad, mode=mode,
                                       value=value if mode == "constant" else None))


def pad(input, pad, mode="constant", value=None):
    """Pad with PyTorch's flat ``pad`` tuple (last dim first); negative pads crop.
    Modes: constant (``value``, default 0), reflect, replicate, circular."""
    pad = shape_arg("pad", (pad,), "pad")
    if value is not None and mode != "constant":
        raise op_error("pad", f"padding mode {mode!r} doesn't take in value argument",
                       RuntimeError)
    value = 0.0 if value is None else value
    if isinstance(value, (str, bytes)) or not isinstance(mode, str):
        raise op_error("pad", f"value must be a number and mode a string, got {value!r} and "
                              f"{mode!r}", TypeError)
    if mode not in _PAD_MODES:
        raise op_error("pad", f"mode must be one of {_PAD_MODES}, got {mode!r}",
                       NotImplementedError)
    if not any(pad):
        _pad_widths("pad", tuple(input.shape), pad)
    return bind(PAD, input, pad=pad, mode=mode, value=value)


PAD_OP.append(PAD)


# ---------------------------------------------------------------- tril / triu
def _tri_infer(name):
    def infer(x, diagonal=0):
        if len(x.shape) < 2:
            raise op_error(name, f"input tensor must have at least 2 dimensions, got shape "
                                 f"{tuple(x.shape)}", RuntimeError)
        return _same_spec(x)
    return infer


def _tri_kernel(fn, name):
    def kernel(x, diagonal=0, out=None):
        _tri_infer(name)(x, diagonal)
        if out is None:
            return fn(x, k=diagonal)
        out[...] = x
        n, m = x.shape[-2:]
        # the part zeroed: above the diagonal for tril, below it for triu (one matrix
        # of bools, broadcast over the batch)
        zero = np.tri(n, m, diagonal, dtype=bool) if name == "tril" else \
            np.tri(n, m, diagonal - 1, dtype=bool)
        if name == "tril":
            np.logical_not(zero, out=zero)
        xp = _devices.xp_of(out)
        xp.copyto(out, xp.zeros((), out.dtype), where=xp.asarray(zero))
        return out
    return kernel


def _tri_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype),), {"diagonal": 0}),
            Sample((rand((2, 4, 3), dtype),), {"diagonal": 1}),
            Sample((rand((4, 3), dtype).T,), {"diagonal": -1}),
            Sample((rand((3, 3), dtype),), {"diagonal": 5})]


TRIL = register(name="tril", onnx=_onnx_trilu(False), vmap=_vmap.leading, jvp=_jvp.linear,
                kernel=_tri_kernel(np.tril, "tril"), infer=_tri_infer("tril"),
                vjp=lambda ctx, g: (bind(TRIL, g, **ctx.attrs),), samples=_tri_samples,
                error_samples=lambda: [((rand((3,)),), {"diagonal": 0}, RuntimeError)],
                torch=lambda torch, x, diagonal=0: torch.tril(x, diagonal))


def tril(input, diagonal=0):
    """Lower triangle of the last two dims (elements above ``diagonal`` zeroed)."""
    return bind(TRIL, input, diagonal=_int("tril", diagonal, "diagonal"))


TRIU = register(name="triu", onnx=_onnx_trilu(True), vmap=_vmap.leading, jvp=_jvp.linear,
                kernel=_tri_kernel(np.triu, "triu"), infer=_tri_infer("triu"),
                vjp=lambda ctx, g: (bind(TRIU, g, **ctx.attrs),), samples=_tri_samples,
                error_samples=lambda: [((rand((3,)),), {"diagonal": 0}, RuntimeError)],
                torch=lambda torch, x, diagonal=0: torch.triu(x, diagonal))


def triu(input, diagonal=0):
    """Upper triangle of the last two dims (elements below ``diagonal`` zeroed)."""
    return bind(TRIU, input, diagonal=_int("triu", diagonal, "diagonal"))


def _int(name, v, what):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise op_error(name, f"{what} must be an int, got {v!r}", TypeError)
    return int(v)


# ---------------------------------------------------------------- diagonal / diag
def _diag_len(s1, s2, offset):
    return max(min(s1, s2 - offset) if offset >= 0 else min(s1 + offset, s2), 0)


def _diagonal_shape(name, shape, offset, dim1, dim2):
    nd = len(shape)
    d1 = normalize_dim(name, dim1, nd)
    d2 = normalize_dim(name, dim2, nd)
    if d1 == d2:
        raise op_error(name, f"dim1 and dim2 cannot be the same dim ({dim1}, {dim2}) for "
                             f"shape {tuple(shape)}", RuntimeError)
    rest = tuple(s for i, s in enumerate(shape) if i not in (d1, d2))
    return rest + (_diag_len(shape[d1], shape[d2], offset),)


def _diag_index(xp, n, offset):
    i = xp.arange(n)
    return i + max(-offset, 0), i + max(offset, 0)


def _diagonal_kernel(x, offset=0, dim1=0, dim2=1):
    """A writable view, as PyTorch's (NumPy's diagonal is a read-only view): the
    diagonal's elements are one stride apart, the sum of the two dims' strides."""
    shape = _diagonal_shape("diagonal", x.shape, offset, dim1, dim2)
    moved = _devices.xp_of(x).moveaxis(x, (dim1, dim2), (-2, -1))
    start = moved[..., max(-offset, 0):, max(offset, 0):]
    strides = moved.strides[:-2] + (moved.strides[-2] + moved.strides[-1],)
    return _devices.xp_of(x).lib.stride_tricks.as_strided(start, shape, strides)


def _diagonal_vmap(ctx, x):
    a = dict(ctx.attrs)
    a["dim1"] = ctx.dim(a["dim1"], 0)
    a["dim2"] = ctx.dim(a["dim2"], 0)
    return bind(ctx.op, x, **a)


DIAGONAL = register(name="diagonal", onnx=_onnx_diag_like, vmap=_diagonal_vmap,
                    jvp=_jvp.linear, kind="view", kernel=_diagonal_kernel,
                    infer=lambda x, offset=0, dim1=0, dim2=1: TensorSpec(
                        _diagonal_shape("diagonal", tuple(x.shape), offset, dim1, dim2), x.dtype),
                    vjp=lambda ctx, g: (ctx.m.diagonal_into(g, ctx.shapes[0], **ctx.attrs),),
                    samples=lambda dtype=np.float64: [
                        Sample((rand((3, 4), dtype),), {"offset": 0, "dim1": 0, "dim2": 1}),
                        Sample((rand((3, 4), dtype),), {"offset": 2, "dim1": 0, "dim2": 1}),
                        Sample((rand((2, 3, 4), dtype),), {"offset": -1, "dim1": 2, "dim2": 0}),
                        Sample((rand((4, 3), dtype).T,), {"offset": 1, "dim1": 1, "dim2": 0}),
                        Sample((rand((3, 3), dtype),), {"offset": 4, "dim1": 0, "dim2": 1})],
                    error_samples=lambda: [((rand((3, 4)),), {"offset": 0, "dim1": 1, "dim2": 1},
                                            RuntimeError),
                                           ((rand((3, 4)),), {"offset": 0, "dim1": 0, "dim2": 2},
                                            IndexError)],
                    torch=lambda torch, x, offset=0, dim1=0, dim2=1:
                    torch.diagonal(x, offset, dim1, dim2))


def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal of dims ``dim1, dim2`` (``offset`` > 0 above the main one), moved to
    the last dim. (A copy, not a view.)"""
    nd = len(input.shape)
    d1 = normalize_dim("diagonal", dim1, nd)
    d2 = normalize_dim("diagonal", dim2, nd)
    return bind(DIAGONAL, input, offset=_int("diagonal", offset, "offset"), dim1=d1, dim2=d2)


def _diagonal_into_infer(g, shape, offset=0, dim1=0, dim2=1):
    want = _diagonal_shape("diagonal_into", tuple(shape), offset, dim1, dim2)
    if tuple(g.shape) != want:
        raise op_error("diagonal_into", f"the diagonal of shape {tuple(shape)} has shape "
                                        f"{want}, got {tuple(g.shape)}", RuntimeError)
    return TensorSpec(tuple(shape), g.dtype)


def _diagonal_into_kernel(g, shape, offset=0, dim1=0, dim2=1, out=None):
    _diagonal_into_infer(g, shape, offset, dim1, dim2)
    xp = _devices.xp_of(g)
    if out is None:
        out = xp.zeros(shape, dtype=g.dtype)
    else:
        if np.may_share_memory(out, g):  # (g is the diagonal's size: a small copy)
            g = g.copy()
        out[...] = 0
    r, c = _diag_index(xp, g.shape[-1], offset)
    np.moveaxis(out, (dim1, dim2), (-2, -1))[..., r, c] = g
    return out


def _diagonal_into_rule(ctx, g):
    """The batch in front of the result: its shape gains it, the dims shift past it."""
    a = dict(ctx.attrs)
    n = len(a["shape"])
    a["shape"] = (ctx.size,) + tuple(a["shape"])
    for k, d in (("dim1", 0), ("dim2", 1)):
        a[k] = a.get(k, d) % n + 1
    return bind(ctx.op, g, **a)


DIAGONAL_INTO = register(
    name="diagonal_into", onnx=_onnx_diag_like, jvp=_jvp.linear, vmap=_diagonal_into_rule,
    kernel=_diagonal_into_kernel, infer=_diagonal_into_infer, args=("g",),
    vjp=lambda ctx, gg: (bind(DIAGONAL, gg, offset=ctx.attrs["offset"], dim1=ctx.attrs["dim1"],
                              dim2=ctx.attrs["dim2"]),),
    samples=lambda dtype=np.float64: [
        Sample((rand((3,), dtype),), {"shape": (3, 4), "offset": 0, "dim1": 0, "dim2": 1}),
        Sample((rand((2, 3), dtype),), {"shape": (3, 2, 4), "offset": -1, "dim1": 2, "dim2": 0})],
    error_samples=lambda: [((rand((2,)),), {"shape": (3, 4), "offset": 0, "dim1": 0, "dim2": 1},
                            RuntimeError)],
    torch=lambda torch, g, shape, offset=0, dim1=0, dim2=1: torch.diagonal_scatter(
        torch.zeros(shape, dtype=g.dtype), g, offset, dim1, dim2))


def diagonal_into(g, shape, offset=0, dim1=0, dim2=1):
    """Zeros of ``shape`` with ``g`` written on the diagonal (``diagonal``'s adjoint)."""
    return bind(DIAGONAL_INTO, g, shape=tuple(shape), offset=offset, dim1=dim1, dim2=dim2)


def _diag_infer(x, diagonal=0):
    shape = tuple(x.shape)
    if len(shape) == 1:
        n = shape[0] + abs(diagonal)
        return TensorSpec((n, n), x.dtype)
    if len(shape) == 2:
        return TensorSpec((_diag_len(shape[0], shape[1], diagonal),), x.dtype)
    raise op_error("diag", f"supports 1-D or 2-D tensors, got shape {shape}", RuntimeError)


def _diag_kernel(x, diagonal=0, out=None):
    _diag_infer(x, diagonal)
    if x.ndim == 1:
        n = x.shape[0] + abs(diagonal)
        return _diagonal_into_kernel(x, (n, n), diagonal, 0, 1, out=out)
    if out is None:  # a copy, as PyTorch's diag (diagonal is the view)
        return _diagonal_kernel(x, diagonal, 0, 1).copy()
    out[...] = _diagonal_kernel(x, diagonal, 0, 1)  # (a view of x: copied, no temporary)
    return out


def _diag_vjp(ctx, g):
    k = ctx.attrs["diagonal"]
    shape = tuple(ctx.shapes[0])
    if len(shape) == 1:
        return (bind(DIAGONAL, g, offset=k, dim1=0, dim2=1),)
    return (diagonal_into(g, shape, k, 0, 1),)


DIAG = register(name="diag", onnx=_onnx_diag_like, jvp=_jvp.linear, kernel=_diag_kernel,
                infer=_diag_infer, vjp=_diag_vjp,
                samples=lambda dtype=np.float64: [
                    Sample((rand((3,), dtype),), {"diagonal": 0}),
                    Sample((rand((3,), dtype),), {"diagonal": -2}),
                    Sample((rand((3, 4), dtype),), {"diagonal": 1}),
                    Sample((rand((4, 3), dtype).T,), {"diagonal": -1})],
                error_samples=lambda: [((rand((2, 3, 4)),), {"diagonal": 0}, RuntimeError)],
                torch=lambda torch, x, diagonal=0: torch.diag(x, diagonal))


def diag(input, diagonal=0):
    """1-D: a square matrix with ``input`` on the ``diagonal``; 2-D: that diagonal."""
    return bind(DIAG, input, diagonal=_int("diag", diagonal, "diagonal"))


def _diag_embed_dims(shape, offset, dim1, dim2):
    """diag_embed's output shape, offset and the two dims, checked."""
    nd = len(shape) + 1
    offset = _int("diag_embed", offset, "offset")
    d1 = normalize_dim("diag_embed", dim1, nd)
    d2 = normalize_dim("diag_embed", dim2, nd)
    if d1 == d2:
        raise op_error("diag_embed", f"dim1 and dim2 cannot be the same ({dim1}, {dim2})",
                       RuntimeError)
    rest = iter(shape[:-1])
    n = shape[-1] + abs(int(offset))
    return tuple(n if i in (d1, d2) else next(rest) for i in range(nd)), int(offset), d1, d2


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Tensors whose diagonals (``offset``, between dims ``dim1`` and ``dim2``) hold the
    last dimension of ``input``, as ``torch.diag_embed``."""
    shape, offset, d1, d2 = _diag_embed_dims(tuple(input.shape), offset, dim1, dim2)
    return diagonal_into(input, shape, offset, d1, d2)


def _diag_embed_infer(x, offset=0, dim1=-2, dim2=-1):
    return TensorSpec(_diag_embed_dims(tuple(x.shape), offset, dim1, dim2)[0], x.dtype)


composite(diag_embed, infer=_diag_embed_infer,
          samples=lambda dtype=np.float64: [Sample((rand((2, 3), dtype),), {}),
                                            Sample((rand((2, 3), dtype),),
                                                   {"offset": -1, "dim1": 0, "dim2": 2}),
                                            Sample((rand((3,), dtype),), {"offset": 2})],
          error_samples=lambda: [((rand((2, 3)),), {"dim1": 1, "dim2": -2}, RuntimeError),
                                 ((rand((2, 3)),), {"dim1": 3}, IndexError)],
          torch=lambda torch, x, **k: torch.diag_embed(x, **k))


# ---------------------------------------------------------------- repeat_interleave
def _ri_index(xp, n, repeats):
    if isinstance(repeats, int):
        return xp.repeat(xp.arange(n), repeats)
    return xp.repeat(xp.arange(n), xp.asarray(repeats, dtype=np.int64))


def _ri_infer(x, repeats, dim):
    shape = tuple(x.shape)
    d = normalize_dim("repeat_interleave", dim, len(shape))
    n = shape[d] if shape else 1
    if isinstance(repeats, int):
        if repeats < 0:
            raise op_error("repeat_interleave", f"repeats must be non-negative, got {repeats}",
                           RuntimeError)
        total = n * repeats
    else:
        if len(repeats) != n or any(r < 0 for r in repeats):
            raise op_error("repeat_interleave", f"repeats must have the same size as input "
                                                f"along dim {d} ({n}), and be non-negative, got "
                                                f"{len(repeats)} repeats", RuntimeError)
        total = int(sum(repeats))
    return TensorSpec(shape[:d] + (total,) + shape[d + 1:], x.dtype)


def _ri_kernel(x, repeats, dim, out=None):
    _ri_infer(x, repeats, dim)
    if out is not None:
        xp = _devices.xp_of(out)
        n = x.shape[dim] if x.ndim else 1
        if x.ndim == 0 or xp.may_share_memory(out, x):
            out[...] = _ri_kernel(x, repeats, dim)
        elif out.flags.c_contiguous and xp is np and 32 * out.shape[dim] < out.nbytes:
            # one take along dim (the index is a small part of out; "clip" writes
            # straight into a contiguous out, "raise" would buffer it)
            ridx = np.repeat(np.arange(n), repeats if isinstance(repeats, int) else
                             np.asarray(repeats, dtype=np.int64))
            np.take(x, ridx, axis=dim, out=out, mode="clip")
        elif isinstance(repeats, int):
            if out.flags.c_contiguous:  # out as (..., n, repeats, ...): x broadcast
                sh = tuple(x.shape)
                out.reshape(sh[:dim + 1] + (repeats,) + sh[dim + 1:])[...] = \
                    xp.expand_dims(x, dim + 1)
            else:
                out[...] = _ri_kernel(x, repeats, dim)
        else:  # one slab copy per input row along dim
            pre, at = (slice(None),) * dim, 0
            for i, r in enumerate(repeats):
                if r:
                    out[pre + (slice(at, at + r),)] = x[pre + (slice(i, i + 1),)]
                    at += r
        return out
    return np.repeat(x, repeats if isinstance(repeats, int) else
                     np.asarray(repeats, dtype=np.int64), axis=dim)


def _ri_vjp(ctx, g):
    shape = tuple(ctx.shapes[0])
    d, reps = ctx.attrs["dim"], ctx.attrs["repeats"]
    index = (slice(None),) * d + (_ri_index(np, shape[d], reps),)
    return (ctx.m.index_add_into(g, shape, index),)


REPEAT_INTERLEAVE = register(
    name="repeat_interleave", onnx=_onnx_diag_like, vmap=_vmap.dim_attrs_flat(), jvp=_jvp.linear,
    kernel=_ri_kernel, infer=_ri_infer, vjp=_ri_vjp,
    samples=lambda dtype=np.float64: [
        Sample((rand((2, 3), dtype),), {"repeats": 2, "dim": 1}),
        Sample((rand((3, 2), dtype),), {"repeats": (1, 0, 3), "dim": 0}),
        Sample((rand((3, 2), dtype).T,), {"repeats": 3, "dim": 0})],
    error_samples=lambda: [((rand((3,)),), {"repeats": (1, 2), "dim": 0}, RuntimeError),
                           ((rand((3,)),), {"repeats": (1, -1, 1), "dim": 0}, RuntimeError),
                           ((rand(()),), {"repeats": 2, "dim": 1}, IndexError)],
    torch=lambda torch, x, repeats, dim: torch.repeat_interleave(
        x, repeats if isinstance(repeats, int) else torch.tensor(repeats), dim))


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times along ``dim`` (flattened when None);
    ``repeat_interleave(counts)`` gives ``arange(len(counts))`` repeated."""
    if repeats is None:  # the one-tensor form: repeats the indices
        if len(input.shape) != 1:
            raise op_error("repeat_interleave", f"the one-tensor form takes a 1-D tensor of "
                                                f"counts, got shape {tuple(input.shape)}",
                           RuntimeError)
        repeats = _repeats_arg(input, input.shape[0])
        input, dim = arange(input.shape[0]), 0
    if dim is None:
        input = reshape(input, (-1,))
        dim = 0
    d = normalize_dim("repeat_interleave", dim, len(input.shape))
    n = input.shape[d] if input.shape else 1
    return bind(REPEAT_INTERLEAVE, input, repeats=_repeats_arg(repeats, n), dim=d)


def _repeats_arg(repeats, n):
    """``repeats`` (an int, a sequence, or an integer tensor of 0 or 1 dims) as an
    int or a tuple of ``n`` ints; its shape and dtype are checked before any value
    is read (a huge broadcast tensor is refused, not converted)."""
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, bool):
        return int(repeats)
    # (a tensor's values read through _host: tg.compile guards them)
    data = np.asarray(repeats._host() if hasattr(repeats, "_host") else repeats)
    if data.ndim > 1:
        raise op_error("repeat_interleave", f"repeats must be an int or a tensor of 0 or 1 "
                                            f"dims, got shape {data.shape}", RuntimeError)
    if data.dtype.kind not in "iu" and data.size:
        raise op_error("repeat_interleave", f"repeats must be integers, got {data.dtype}",
                       RuntimeError)
    if data.size == 1:  # one count for every element
        return int(data.reshape(-1)[0])
    if data.shape[0] != n:
        raise op_error("repeat_interleave", f"repeats must have the same size as the input "
                                            f"along dim ({n}), got {data.shape[0]} repeats",
                       RuntimeError)
    return tuple(data.tolist())


# ---------------------------------------------------------------- as_strided
# A tensor's storage is the memory of the array its buffer views (NumPy's base chain
# to its root, which owns it), counted in elements of the tensor's dtype: the same
# origin ``Tensor.storage_offset()`` counts from. A geometry is (shape, strides,
# offset) in elements of that storage. The op's attribute ``input_geometry`` (besides
# PyTorch's arguments) is its input's, which its gradient needs: as PyTorch's node keeps
# its input's geometry, not its values (an in-place write into the input, or through
# the view, leaves the gradient valid). The kernel checks it against the input.
def _storage(name, a):
    """(the storage as a flat array of ``a``'s dtype, ``a``'s geometry in it)."""
    xp = _devices.xp_of(a)
    root = a
    while isinstance(root.base, xp.ndarray):
        root = root.base
    item = a.dtype.itemsize
    if not (root.flags.c_contiguous or root.flags.f_contiguous) or root.nbytes % item:
        raise op_error(name, "the input views memory that is not one storage of its dtype "
                             "(a broadcast or a reinterpretation of foreign memory); call "
                             "input.clone() first", RuntimeError)
    flat = root.reshape(-1) if root.flags.c_contiguous else root.T.reshape(-1)
    flat = flat.view(a.dtype)
    start = (_devices.address(a) - _devices.address(root)) // item
    if any(s % item for s in a.strides):
        raise op_error(name, f"the input's strides {a.strides} (bytes) are not whole elements "
                             f"of {a.dtype}", RuntimeError)
    return flat, (tuple(a.shape), tuple(s // item for s in a.strides), start)


def _positions(xp, geometry):
    """The storage position of each element of a geometry, as an int64 array."""
    shape, strides, offset = geometry
    pos = xp.full(tuple(shape), offset, dtype=np.int64)
    for k, (n, s) in enumerate(zip(shape, strides)):
        pos += (xp.arange(n, dtype=np.int64) * s).reshape((n,) + (1,) * (len(shape) - k - 1))
    return pos


def _overlaps(xp, geometry):
    """Whether two elements of the geometry share a storage position."""
    dims = sorted((abs(s), n) for n, s in zip(*geometry[:2]) if n > 1)
    reach = 0
    for s, n in dims:  # each stride past the reach of the smaller ones: no overlap
        if s <= reach:
            pos = _positions(xp, geometry).reshape(-1)
            return int(xp.unique(pos).size) != pos.size
        reach += (n - 1) * s
    return False


def _as_strided_infer(x, size, stride, storage_offset=None, input_geometry=None):
    if len(size) != len(stride):
        raise op_error("as_strided", f"mismatch in length of strides and shape (size {size}, "
                                     f"stride {stride})", RuntimeError)
    if any(s < 0 for s in stride):
        raise op_error("as_strided", f"Negative strides are not supported at the moment, got "
                                     f"strides: {list(stride)}", RuntimeError)
    if any(n < 0 for n in size):
        raise op_error("as_strided", f"Trying to create tensor with negative dimension: "
                                     f"{list(size)}", RuntimeError)
    if storage_offset is not None and storage_offset < 0:
        raise op_error("as_strided", f"invalid storage offset {storage_offset}", RuntimeError)
    return TensorSpec(tuple(size), x.dtype)


def _as_strided_kernel(input, size, stride, storage_offset=None, input_geometry=None):
    _as_strided_infer(input, size, stride, storage_offset)
    flat, geometry = _storage("as_strided", input)
    if input_geometry is not None and tuple(map(tuple, input_geometry[:2])) + (
            input_geometry[2],) != geometry:
        raise op_error("as_strided", f"input_geometry {input_geometry} is not the input's "
                                     f"{geometry}", RuntimeError)
    off = geometry[2] if storage_offset is None else storage_offset
    xp = _devices.xp_of(input)
    need = off + sum((n - 1) * s for n, s in zip(size, stride)) + 1
    if _numel(size) == 0:  # (no element: any offset, as PyTorch)
        off = min(off, flat.size)
    elif need > flat.size:
        item = input.dtype.itemsize
        raise op_error("as_strided", f"sizes {list(size)}, strides {list(stride)}, storage "
                                     f"offset {off}, and itemsize {item} requiring a storage "
                                     f"size of {need * item} are out of bounds for storage of "
                                     f"size {flat.size * item}", RuntimeError)
    item = input.dtype.itemsize
    if xp is np:
        return np.ndarray(tuple(size), input.dtype, buffer=flat, offset=off * item,
                          strides=tuple(s * item for s in stride))
    return xp.ndarray(tuple(size), input.dtype, memptr=flat.data + off * item,
                      strides=tuple(s * item for s in stride))


def _geometries(ctx):
    """(the input's geometry, the output's) of an as_strided call; refused where the
    input's elements overlap (an expanded view: its gradient is not one)."""
    a = ctx.attrs
    src = a.get("input_geometry")
    if src is None:
        raise op_error("as_strided", "a call without input_geometry (made by tg.as_strided) "
                                     "has no gradient", RuntimeError)
    src = (tuple(src[0]), tuple(src[1]), src[2])
    if _overlaps(np, src):
        raise op_error("as_strided", f"differentiating with respect to an input whose "
                                     f"elements overlap in memory (shape {src[0]}, strides "
                                     f"{src[1]}) is not supported; pass input.clone()",
                       RuntimeError)
    off = src[2] if a.get("storage_offset") is None else a["storage_offset"]
    return src, (tuple(a["size"]), tuple(a["stride"]), off)


def _as_strided_vjp(ctx, g):
    """PyTorch's as_strided_backward: ``g`` added into a zero storage at the output's
    positions (overlapping outputs accumulate), then read at the input's."""
    src, dst = _geometries(ctx)
    return (bind(RESTRIDE, g, src=dst, dst=src),)


def _as_strided_jvp(ctx, x_t):
    src, dst = _geometries(ctx)
    return None if x_t is None else bind(RESTRIDE, x_t, src=src, dst=dst)


def _as_strided_samples(dtype=np.float64):
    x, g = rand((3, 4), dtype), ((3, 4), (4, 1), 0)
    return [Sample((x,), {"size": (2, 2), "stride": (1, 2), "storage_offset": 1,
                          "input_geometry": g}),
            Sample((x,), {"size": (3, 3), "stride": (1, 1),  # overlapping windows
                          "input_geometry": g}),
            Sample((x,), {"size": (2, 3), "stride": (0, 4), "storage_offset": 0,
                          "input_geometry": g}),
            Sample((rand((5,), dtype),), {"size": (), "stride": (), "storage_offset": 4,
                                          "input_geometry": ((5,), (1,), 0)})]


AS_STRIDED = register(
    name="as_strided", kind="view", kernel=_as_strided_kernel, infer=_as_strided_infer,
    vjp=_as_strided_vjp, jvp=_as_strided_jvp, args=("input",), samples=_as_strided_samples,
    onnx="as_strided views a storage: ONNX tensors have none",
    error_samples=lambda: [
        ((rand((2, 3)),), {"size": (3, 3), "stride": (1, 2), "storage_offset": 0}, RuntimeError),
        ((rand((2, 3)),), {"size": (2, 2), "stride": (1,), "storage_offset": 0}, RuntimeError),
        ((rand((2, 3)),), {"size": (2,), "stride": (-1,), "storage_offset": 1}, RuntimeError)],
    torch=lambda torch, x, size, stride, storage_offset=None, input_geometry=None:
    torch.as_strided(x, size, stride, storage_offset))


def as_strided(input, size, stride, storage_offset=None):
    """A view of ``input``'s storage with the given ``size``, ``stride`` and
    ``storage_offset`` (in elements, from the storage's start; default: ``input``'s own),
    as ``torch.as_strided``. Elements of the view may overlap; its gradient adds their
    contributions. Sizes past the storage raise RuntimeError.

    >>> x = tg.arange(6.0)
    >>> tg.as_strided(x, (2, 2), (1, 2))
    tensor([[0., 2.],
            [1., 3.]])
    """
    size = shape_arg("as_strided", (size,), "size")
    stride = shape_arg("as_strided", (stride,), "stride")
    if storage_offset is not None:
        storage_offset = _int("as_strided", storage_offset, "storage_offset")
    if getattr(input, "_vlevel", None) is not None:
        raise op_error("as_strided", "not supported under vmap: a batched tensor has no "
                                     "storage of one example to view", RuntimeError)
    data = getattr(input, "_data", None)
    geometry = None if data is None else _storage("as_strided", data)[1]
    return bind(AS_STRIDED, input, size=size, stride=stride, storage_offset=storage_offset,
                input_geometry=geometry)


def _restride_infer(g, src, dst):
    if tuple(g.shape) != tuple(src[0]):
        raise op_error("restride", f"expected a gradient of shape {tuple(src[0])}, got "
                                   f"{tuple(g.shape)}", RuntimeError)
    return TensorSpec(tuple(dst[0]), g.dtype)


def _restride_kernel(g, src, dst, out=None):
    xp = _devices.xp_of(g)
    ps, pd = _positions(xp, src).reshape(-1), _positions(xp, dst)
    res = xp.zeros(tuple(dst[0]), dtype=g.dtype) if out is None else out
    if not ps.size or not pd.size:
        res[...] = 0
        return res
    lo = min(int(ps.min()), int(pd.min()))
    buf = xp.zeros(max(int(ps.max()), int(pd.max())) + 1 - lo, dtype=g.dtype)
    _devices.add_at(buf, (ps - lo,), g.reshape(-1))
    res[...] = buf[pd - lo]
    return res


def _restride_reference(g, src, dst):
    ps, pd = _positions(np, src).reshape(-1), _positions(np, dst)
    buf = np.zeros(max(int(ps.max()), int(pd.max())) + 1, dtype=g.dtype)
    np.add.at(buf, ps, np.asarray(g).reshape(-1))
    return buf[pd]


# ``as_strided``'s adjoint and tangent: ``g`` (of geometry ``src``'s shape) added into a
# zero storage at ``src``'s positions, read at ``dst``'s; linear, its adjoint the same
# with the geometries swapped
RESTRIDE = register(
    name="restride", kernel=_restride_kernel, infer=_restride_infer, args=("g",),
    vjp=lambda ctx, gg: (bind(RESTRIDE, gg, src=ctx.attrs["dst"], dst=ctx.attrs["src"]),),
    jvp=_jvp.linear, reference=_restride_reference,
    onnx="as_strided's adjoint: ONNX tensors have no storage",
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 3), dtype),), {"src": ((3, 3), (1, 1), 0), "dst": ((3, 4), (4, 1), 0)}),
        Sample((rand((2, 2), dtype),), {"src": ((2, 2), (1, 2), 1), "dst": ((6,), (1,), 0)})],
    error_samples=lambda: [((rand((2,)),), {"src": ((3,), (1,), 0), "dst": ((3,), (1,), 0)},
                            RuntimeError)])


METHODS = ("flip fliplr flipud roll repeat tile unflatten tril triu diag diagonal diag_embed "
           "repeat_interleave as_strided")


# ------------------------------------------------------------------ splits and stacks
def adjoint(input):
    """The conjugate transpose of the last two dims (the transpose, for real tensors)."""
    if input.ndim < 2:
        raise op_error("adjoint", "tensor.adjoint() is only supported on matrices or batches "
                                  "of matrices. Got 1-D tensor.", RuntimeError)
    return mT(input)


decl(adjoint, lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((2, 3, 4), dtype))])
decl(real, lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((), dtype))])



del _name, _fn, _dim, _infer
