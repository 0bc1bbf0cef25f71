"""Indexing: ``__getitem__`` (basic, integer-array and boolean-mask indexing) and
its scatter-add adjoint; in-place ``__setitem__``; the slicing ops split, chunk,
tensor_split and unbind; gather/scatter, ``scatter_reduce`` (one registry op for
PyTorch's five reductions, with PyTorch's gradients), take_along_dim, index_select,
masks and nonzero.

Layering: indexing sits above shape (it imports ``reshape`` from ``shape``, which
imports nothing from here)."""
import operator

import numpy as np

from .. import devices as _devices
from .._util import (
    ShapeError,
    broadcast_shapes as _broadcast_shapes,
    distinct_values,
    normalize_dim,
    op_error,
    value_range,
)
from ..devices.cpu_kernels import scatter as _cpu_scatter
from ..dispatch import apply_inplace, bind
from ..dtypes import is_float as _isf
from ..tape import name_call
from ..tensor import Tensor
from . import _jvp, _vmap
from ._decl import Sample, TensorSpec, composite, rand, register
from .onnx_forms import (
    INT_MAX,
    INT_MIN,
    _diag_like as _onnx_diag_like,
    _expand_to as _onnx_expand_to,
    _index_positions as _onnx_index_positions,
)
from .shape import reshape

__all__ = ["scatter_reduce", "index_add_into", "getitem_raw", "getitem", "split", "chunk",
           "tensor_split", "unbind", "index_put_zero", "setitem", "gather", "scatter_add",
           "scatter", "scatter_add_", "scatter_", "index_select", "take_along_dim", "masked_fill",
           "masked_fill_", "nonzero", "argwhere", "masked_select"]


def _raw_index(index):
    """Tensors inside an index become raw arrays; lists become arrays."""
    if isinstance(index, tuple):
        return tuple(_raw_index_item(i) for i in index)
    return _raw_index_item(index)


def _raw_index_item(i):
    if isinstance(i, Tensor):  # a batched index (inside vmap) stays a Tensor: vmap slices it
        return i._data if i._vlevel is None else i
    if isinstance(i, list):
        return np.asarray(i)
    if isinstance(i, slice) and any(isinstance(b, Tensor) for b in (i.start, i.stop, i.step)):
        # (x[:n] with a one-element tensor n: its value read here, as Python ints, which
        # tg.compile guards; not inside the kernel)
        return slice(*(operator.index(b) if isinstance(b, Tensor) else b
                       for b in (i.start, i.stop, i.step)))
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
        if hasattr(i, "dtype") and _isf(i.dtype):
            raise op_error("getitem", "tensors used as indices must be long, int or bool, "
                                      f"got {i.dtype}", IndexError)
        if isinstance(i, float):
            raise op_error("getitem", f"float index {i} is not allowed", IndexError)


def _getitem_kernel(x, index):
    try:
        out = x[index]
        if not hasattr(out, "shape") or (out.ndim == 0 and out.base is None and x.ndim):
            # every dim taken by an int: NumPy gives a scalar (a copy); with ... it is a
            # 0-d view, as PyTorch's x[i]
            out = x[tuple(index) + (Ellipsis,)]
        return out
    except IndexError as e:
        raise op_error("getitem", f"{e} (tensor of shape {tuple(x.shape)})", IndexError) from None


def _index_into(x, index, out, block=1 << 14):
    """``x[index]`` written into a C-contiguous ``out`` for an index of leading full
    slices, then integer arrays, then full slices or nothing (NumPy's result is then
    (before, broadcast index, after)): the arrays' flat positions over the dims they
    index, a block of the broadcast index at a time, each block taken into its part
    of out. False where it does not apply (the caller computes, then copies)."""
    index = index if isinstance(index, tuple) else (index,)
    p = 0
    while p < len(index) and isinstance(index[p], slice) and index[p] == slice(None):
        p += 1
    k = p
    while k < len(index) and type(index[k]) is np.ndarray and index[k].dtype.kind in "iu":
        k += 1
    if (type(x) is not np.ndarray or type(out) is not np.ndarray or k == p
            or not out.flags.c_contiguous or not all(
                isinstance(i, slice) and i == slice(None) for i in index[k:])
            or np.may_share_memory(out, x)):
        return False
    if k == p + 1:  # one array: a take along its dim ("wrap": negatives count from
        # the end, the shape rule checked the range; "raise" would buffer out)
        np.take(x, index[p], axis=p, out=out, mode="wrap")
        return True
    sh = tuple(x.shape)
    try:
        x3 = np.reshape(x, (int(np.prod(sh[:p])), int(np.prod(sh[p:k])), -1), copy=False)
    except ValueError:
        return False
    arrays = np.broadcast_arrays(*index[p:k])
    n = arrays[0].size
    o3 = out.reshape(x3.shape[0], n, x3.shape[2])
    flats = [a.flat for a in arrays]
    for a in range(0, n, block):
        b = min(n, a + block)
        lin = np.ravel_multi_index(tuple(f[a:b] for f in flats), sh[p:k], mode="wrap")
        np.take(x3, lin, axis=1, out=o3[:, a:b], mode="clip")
    return True


def _index_kernel(x, index, out=None):
    """Advanced indexing, its result C-contiguous as PyTorch's (NumPy may lay out
    ``x[:, idx]`` otherwise; a later .view() relies on the layout)."""
    if out is not None:
        if not _index_into(x, index, out):
            out[...] = _index_kernel(x, index)
        return out
    out = _getitem_kernel(x, index)
    return out if out.flags.c_contiguous else _devices.xp_of(out).ascontiguousarray(out)


def _getitem_infer(x, index):
    _check_index(tuple(x.shape), index)
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=x.dtype), shape=tuple(x.shape),
                                            strides=(0,) * len(x.shape))
    arrays = [i for i in (index if type(index) is tuple else (index,)) if hasattr(i, "dtype")]
    if arrays and all(i.dtype == np.bool_ for i in arrays):
        # masks only: all-False ones of their shapes validate as well, and the probe's
        # result is then empty instead of the output's size
        index = tuple(np.broadcast_to(np.False_, i.shape) if hasattr(i, "dtype") else i
                      for i in (index if type(index) is tuple else (index,)))
    try:
        shape = probe[index].shape  # validates bounds and mask shapes too
    except IndexError as e:
        raise op_error("getitem", f"{e} (tensor of shape {tuple(x.shape)})", IndexError) from None
    if _has_mask(index):  # data-dependent size (known here only because index is data)
        return TensorSpec(None, x.dtype)
    return TensorSpec(shape, x.dtype)


def _getitem_vjp(ctx, g):
    return (ctx.m.index_add_into(g, ctx.shapes[0], ctx.attrs["index"]),)


def _getitem_samples(dtype=np.float64):
    """Basic indices only: the view op; integer arrays go to ``index``, masks to
    ``masked_index`` (see getitem_raw)."""
    x = rand((4, 5), dtype)
    return [Sample((x,), {"index": (slice(1, 3), slice(None, None, -2))}),
            Sample((x,), {"index": (None, 2, Ellipsis)}),
            Sample((rand((5, 4), dtype).T,), {"index": (slice(None, None, 2), -1)})]


def _index_samples(dtype=np.float64):
    x = rand((4, 5), dtype)
    return [Sample((x,), {"index": (np.array([0, 2, 2, 3]),)}),
            Sample((x,), {"index": (np.array([[0, 1], [1, 1]]), np.array([4, 0]))}),
            Sample((x,), {"index": (slice(None, None, -1), np.array([3, 3, 0]))})]


def _getitem_errors():
    return [((rand((3, 4)),), {"index": (5,)}, IndexError),
            ((rand((3, 4)),), {"index": (0, 0, 0)}, IndexError)]


# NumPy's indexing checks itself (infer_first=False: the shape rule explains a failure)
# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_index(b, st):
    shape = b.shape(st, 0)
    idx = _onnx_index_positions(shape, st.attrs["index"])
    b.gather_static(b.input(st, 0), shape, idx, [b.output(st)])


def onnx_index_from_input(b, st):
    """The ONNX form of ``index``, ``masked_index`` or ``index_put`` whose index arrays
    are inputs of the step (tensors of the exported function's, or computed from them:
    tg.compile's ``with_array_inputs``), as ``torch.onnx.export`` lowers them:

    - integer arrays at consecutive dims (the other items full slices): their
      broadcast stacked into the last axis of a ``GatherND`` (``x[i]``, ``x[i, j]``,
      ``x[:, i]``), or a ``ScatterND`` for an assignment from dim 0 (``y[i] = v``);
    - one bool mask over leading dims: ``NonZero`` and ``GatherND`` (``x[x > 0]``, a
      data-dependent count), or a ``Where`` for an assignment of one value
      (``y[y < 0] = 0``).

    Any other form is refused with the reason."""
    index = st.attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    put = st.op.name == "index_put"
    m = 2 if put else 1  # (the step's inputs: x (and the value), then the index arrays)
    shape = b.shape(st, 0)
    if sum(i is Ellipsis for i in index) > 1 or any(i is None for i in index):
        b.refuse(st, f"an index tensor computed from the inputs exports beside full "
                     f"slices only; got {index!r}")
    items, refs = [], []
    used = sum(len(b.shape(st, m + i.j)) if hasattr(i, "j") and
               np.dtype(b.dtype(st, m + i.j)) == np.bool_ else 1
               for i in index if i is not Ellipsis)
    for i in index:
        if i is Ellipsis:
            items += [slice(None)] * (len(shape) - used)
        else:
            items.append(i)
    axis = 0
    for i in items:
        if hasattr(i, "j"):
            pos = m + i.j
            refs.append((axis, pos, np.dtype(b.dtype(st, pos)) == np.bool_))
            axis += len(b.shape(st, pos)) if refs[-1][2] else 1
        elif isinstance(i, slice) and i == slice(None):
            axis += 1
        else:
            b.refuse(st, f"an index tensor computed from the inputs exports beside full "
                         f"slices only; got {index!r}")
    masks = [r for r in refs if r[2]]
    if masks and len(refs) > 1:
        b.refuse(st, "a mask computed from the inputs exports alone (no other index)")
    first = refs[0][0]
    if any(ax != first + k for k, (ax, _, _) in enumerate(refs)):
        b.refuse(st, "index tensors computed from the inputs export at consecutive dims")
    x = b.input(st, 0)
    if masks:
        pos = masks[0][1]
        k = len(b.shape(st, pos))
        if put:
            if first or b.shape(st, 1) not in ((), (1,)):
                b.refuse(st, "an assignment through a mask computed from the inputs "
                             "exports with one value and the mask over the leading dims")
            cond = b.input(st, pos)
            if k < len(shape):
                cond = b.unsqueeze(cond, list(range(k, len(shape))))
            v = b.input(st, 1, b.out_dtype(st))
            b.node("Where", [cond, b.reshape(v, []) if b.shape(st, 1) else v, x],
                   [b.output(st)])
            return
        idx = b.node("Transpose", [b.node("NonZero", [b.input(st, pos)])], perm=[1, 0])
        _gather_nd(b, st, x, idx, shape, first, k, 1)
        return
    bshape = np.broadcast_shapes(*[b.shape(st, pos) for _, pos, _ in refs])
    cols = []
    for ax, pos, _ in refs:   # (negative indices count from the end, as NumPy's)
        i = b.input(st, pos, np.int64)
        size = b.node("Gather", [b.node("Shape", [x]), b.ints([ax])])
        i = b.node("Where", [b.node("Less", [i, b.const(np.zeros((), np.int64))]),
                             b.node("Add", [i, b.reshape(size, [])]), i])
        if b.shape(st, pos) != bshape:
            i = b.node("Expand", [i, b.ints(bshape)])
        cols.append(b.unsqueeze(i, [len(bshape)]))
    idx = cols[0] if len(cols) == 1 else b.node("Concat", cols, axis=-1)
    k = len(refs)
    if put:
        if first:
            b.refuse(st, "an assignment through index tensors computed from the inputs "
                         "exports from dim 0")
        target = tuple(bshape) + tuple(shape[k:])
        v = b.input(st, 1, b.out_dtype(st))
        if b.shape(st, 1) != target:
            v = b.node("Expand", [v, b.ints(target)])
        b.node("ScatterND", [x, idx, v], [b.output(st)])
        return
    _gather_nd(b, st, x, idx, shape, first, k, len(bshape))


def _gather_nd(b, st, x, idx, shape, first, k, nb):
    """``x`` gathered by ``idx`` (..., k) over its dims ``first .. first + k - 1``, the
    result's ``nb`` index dims where NumPy puts them (in place of those dims)."""
    if first:
        dims = list(range(first, first + k)) + list(range(first)) + \
            list(range(first + k, len(shape)))
        x = b.node("Transpose", [x], perm=dims)
    y = b.node("GatherND", [x, idx])
    if first:
        y = b.node("Transpose", [y], perm=list(range(nb, nb + first)) + list(range(nb)) +
                   list(range(nb + first, nb + len(shape) - k)))
    b.node("Identity", [y], [b.output(st)])


def _onnx_getitem(b, st):
    index = st.attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    shape = b.shape(st, 0)
    basic = all(i is None or i is Ellipsis or isinstance(i, slice)
                or (isinstance(i, (int, np.integer)) and not isinstance(i, bool))
                for i in index)
    if not basic or sum(i is Ellipsis for i in index) > 1:
        _onnx_index(b, st)
        return
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    items = []
    for i in index:
        if i is Ellipsis:
            items += [slice(None)] * (len(shape) - used)
        else:
            items.append(i)
    items += [slice(None)] * (len(shape) - sum(1 for i in items if i is not None))
    starts, ends, axes, steps, drop, new = [], [], [], [], [], []
    ax = out = 0
    for i in items:
        if i is None:
            new.append(out)
            out += 1
            continue
        if isinstance(i, slice):
            if i != slice(None):
                step = 1 if i.step is None else int(i.step)
                lo = (0 if step > 0 else INT_MAX) if i.start is None else int(i.start)
                hi = (INT_MAX if step > 0 else INT_MIN) if i.stop is None else int(i.stop)
                starts.append(lo)
                ends.append(hi)
                axes.append(ax)
                steps.append(step)
            out += 1
        else:
            k = int(i)
            starts.append(k)
            ends.append(k + 1 if k != -1 else INT_MAX)
            axes.append(ax)
            steps.append(1)
            drop.append(ax)
        ax += 1
    x = b.input(st, 0)
    if axes:
        x = b.slice(x, starts, ends, axes, steps)
    if drop:
        x = b.squeeze(x, drop)
    if new:
        x = b.unsqueeze(x, new)
    b.node("Identity", [x], [b.output(st)])


def _onnx_index_put(b, st):
    shape = b.shape(st, 0)
    pos = _onnx_index_positions(shape, st.attrs["index"])
    if pos.shape == shape and np.array_equal(pos.reshape(-1), np.arange(pos.size)):
        # x[...] = v, x[:] = v: the value broadcast (the batch stays symbolic)
        v = b.input(st, 1, b.out_dtype(st))
        if b.shape(st, 1) == shape:
            b.node("Identity", [v], [b.output(st)])
        else:
            x = b.input(st, 0)
            b.node("Expand", [v, b.node("Shape", [x])], [b.output(st)])
        return
    flat = b.reshape(b.input(st, 0), [-1])
    v = b.input(st, 1, b.out_dtype(st))
    v = _onnx_expand_to(b, v, b.shape(st, 1), pos.shape) if pos.shape != b.shape(st, 1) else v
    upd = b.reshape(v, [-1])
    y = b.node("ScatterElements", [flat, b.const(pos.reshape(-1), "index"), upd], axis=0)
    b.node("Reshape", [y, b.ints(shape)], [b.output(st)])


def _onnx_index_add_into(b, st):
    shape = tuple(st.attrs["shape"])
    pos = _onnx_index_positions(shape, st.attrs["index"])
    g = b.input(st, 0)
    g = _onnx_expand_to(b, g, b.shape(st, 0), pos.shape) if pos.shape != b.shape(st, 0) else g
    zeros = b.const(np.zeros(int(np.prod(shape)), b.out_dtype(st)))
    y = b.node("ScatterElements", [zeros, b.const(pos.reshape(-1), "index"),
                                   b.reshape(g, [-1])], axis=0, reduction="add")
    b.node("Reshape", [y, b.ints(shape)], [b.output(st)])


def _onnx_gather(b, st):
    d = int(st.attrs["dim"]) % max(len(b.shape(st, 0)), 1)
    if not b.shape(st, 0):
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
        return
    b.node("GatherElements", [b.input(st, 0), b.input(st, 1, np.int64)], [b.output(st)], axis=d)


def _onnx_scatter(reduction):
    def lower(b, st):
        shape = b.shape(st, 0)
        d = int(st.attrs["dim"]) % max(len(shape), 1)
        ishape = b.shape(st, 1)
        src = b.input(st, 2, b.out_dtype(st))
        if not b.is_tensor(st, 2) or not b.shape(st, 2):
            src = b.node("Expand", [src, b.ints(ishape)])
        elif b.shape(st, 2) != ishape:
            src = b.slice(src, [0] * len(ishape), list(ishape), list(range(len(ishape))))
        kw = {"axis": d}
        if reduction:
            kw["reduction"] = reduction
        b.node("ScatterElements", [b.input(st, 0), b.input(st, 1, np.int64), src],
               [b.output(st)], **kw)
    return lower


def _onnx_scatter_reduce(b, st):
    a = st.attrs
    red, incl = a["reduce"], a.get("include_self", True)
    shape = b.shape(st, 0)
    d = int(a["dim"]) % max(len(shape), 1)
    dt = b.out_dtype(st)
    x, idx = b.input(st, 0), b.input(st, 1, np.int64)
    ishape = b.shape(st, 1)
    src = b.input(st, 2, dt)
    if b.shape(st, 2) != ishape:
        src = b.slice(src, [0] * len(ishape), list(ishape), list(range(len(ishape))))
    onnx_red = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "add"}[red]
    if onnx_red in ("max", "min") and b.opset < 18:
        b.refuse(st, f"scatter_reduce {red!r} needs opset_version 18 or newer")
    neutral = {"add": 0, "mul": 1, "max": -np.inf, "min": np.inf}[onnx_red]
    if dt.kind != "f" and onnx_red in ("max", "min"):
        info = np.iinfo(dt)
        neutral = info.min if onnx_red == "max" else info.max
    base = x
    if not incl:
        fill = b.node("Expand", [b.const(np.asarray(neutral, dt)), b.ints(ishape)])
        base = b.node("ScatterElements", [x, idx, fill], axis=d)
    y = b.node("ScatterElements", [base, idx, src], axis=d, reduction=onnx_red)
    if red == "mean":
        ones = b.node("Expand", [b.const(np.ones((), dt)), b.ints(ishape)])
        cbase = b.node("Expand", [b.const(np.ones((), dt)), b.ints(shape)])
        if not incl:
            cbase = b.node("ScatterElements", [cbase, idx, b.node(
                "Expand", [b.const(np.zeros((), dt)), b.ints(ishape)])], axis=d)
        cnt = b.node("ScatterElements", [cbase, idx, ones], axis=d, reduction="add")
        cnt = b.node("Max", [cnt, b.const(np.ones((), dt))])
        y = b.node("Div", [y, cnt])
    b.node("Identity", [y], [b.output(st)])


def _onnx_index_select(b, st):
    shape = b.shape(st, 0)
    d = int(st.attrs["dim"]) % max(len(shape), 1)
    idx = b.input(st, 1, np.int64)
    if not shape:
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
        return
    if not b.shape(st, 1):
        idx = b.unsqueeze(idx, [0])
    b.node("Gather", [b.input(st, 0), idx], [b.output(st)], axis=d)


def _onnx_take_along_dim(b, st):
    d = st.attrs.get("dim")
    x, idx = b.input(st, 0), b.input(st, 1, np.int64)
    if d is None:
        b.node("GatherElements", [b.reshape(x, [-1]), b.reshape(idx, [-1])],
               [b.output(st)], axis=0)
        return
    xs, ishp = b.shape(st, 0), b.shape(st, 1)
    nd = len(xs)
    d = int(d) % nd
    out = b.out_shape(st)
    tx = list(out)
    tx[d] = xs[d]
    if tuple(tx) != xs:
        x = _onnx_expand_to(b, x, xs, tx)
    if tuple(out) != ishp:
        idx = _onnx_expand_to(b, idx, ishp, out)
    b.node("GatherElements", [x, idx], [b.output(st)], axis=d)


def _onnx_masked_fill(b, st):
    dt = b.out_dtype(st)
    b.node("Where", [b.input(st, 1, np.bool_), b.input(st, 2, dt), b.input(st, 0, dt)],
           [b.output(st)])


def _onnx_nonzero(b, st):
    x = b.input(st, 0, np.bool_)
    if not b.shape(st, 0):
        x = b.unsqueeze(x, [0])
    nz = b.node("NonZero", [x])
    if not b.shape(st, 0):
        b.node("Transpose", [b.slice(nz, [0], [0], [0])], [b.output(st)], perm=[1, 0])
        return
    b.node("Transpose", [nz], [b.output(st)], perm=[1, 0])


def _onnx_masked_select(b, st):
    xs, ms = b.shape(st, 0), b.shape(st, 1)
    shape = tuple(np.broadcast_shapes(xs, ms))
    x, m = b.input(st, 0), b.input(st, 1, np.bool_)
    if xs != shape:
        x = _onnx_expand_to(b, x, xs, shape)
    if ms != shape:
        m = _onnx_expand_to(b, m, ms, shape)
    b.node("Compress", [b.reshape(x, [-1]), b.reshape(m, [-1])], [b.output(st)], axis=0)


def _getitem_vmap(ctx, x):
    """Basic indexing (ints, slices, None, Ellipsis) with the batch kept in front;
    tensor or array indices run as a _vmap.loop."""
    index = ctx.attrs["index"]
    idx = index if isinstance(index, tuple) else (index,)
    if not all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in idx) \
            or isinstance(index, bool):
        return _vmap.loop(ctx, x)
    return bind(ctx.op, x, index=(slice(None),) + idx)


def _getitem_grad_fn_name(attrs, shapes):
    """The last view PyTorch's basic indexing applies: one per index entry, left to
    right (an int selects, None unsqueezes, a slice slices unless it is ``:``); none at
    all is an alias, and a lone slice is always a slice."""
    index = attrs["index"]
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) == 1 and isinstance(idx[0], slice):
        return "SliceBackward0"
    last = "AliasBackward0"
    for i in idx:
        if i is None:
            last = "UnsqueezeBackward0"
        elif isinstance(i, slice):
            if (i.start not in (None, 0) or i.stop is not None
                    or i.step not in (None, 1)):
                last = "SliceBackward0"
        elif i is not Ellipsis:
            last = "IndexBackward0" if hasattr(i, "shape") and i.ndim else "SelectBackward0"
    return last


GETITEM = register(name="getitem", onnx=_onnx_getitem, vmap=_getitem_vmap, jvp=_jvp.linear,
                   kind="view", kernel=_getitem_kernel, infer=_getitem_infer,
                   infer_first=False, grad_fn_name=_getitem_grad_fn_name,
                   vjp=_getitem_vjp, samples=_getitem_samples, error_samples=_getitem_errors,
                   torch=lambda torch, x, index: _torch_getitem(torch, x, index))


def getitem(x, index):
    """``x[index]`` with NumPy semantics: ints, slices (negative steps too), None,
    Ellipsis, integer arrays, boolean masks; differentiable."""
    index = _raw_index(index)
    if not isinstance(index, tuple):
        index = (index,)
    return getitem_raw(x, index)


def _dims_used(i):
    """How many dims of the indexed tensor an index item consumes."""
    if i is None:
        return 0
    return i.ndim if isinstance(i, np.ndarray) and i.dtype == np.bool_ else 1


def _torch_getitem(torch, x, index):
    """PyTorch's x[index]; a negative slice step (PyTorch has none) becomes an
    index_select of the positions it picks, so the oracle stays differentiable."""
    items = list(index)
    ell = [k for k, i in enumerate(items) if i is Ellipsis]
    if ell:
        k = ell[0]
        rest = sum(_dims_used(i) for i in items if i is not Ellipsis)
        items[k:k + 1] = [slice(None)] * (x.ndim - rest)
    d = 0
    for k, i in enumerate(items):
        if isinstance(i, slice) and i.step is not None and i.step < 0:
            x = x.index_select(d, torch.tensor(list(range(*i.indices(x.shape[d]))),
                                               dtype=torch.int64))
            items[k] = slice(None)
        elif isinstance(i, np.ndarray):
            items[k] = torch.as_tensor(i)
        d += _dims_used(i)
    return x[tuple(items)]


def _named(name, infer):
    """``infer`` whose errors name ``name`` too (the ops behind getitem/setitem)."""
    def wrapped(*specs, **attrs):
        try:
            return infer(*specs, **attrs)
        except (IndexError, ValueError, RuntimeError, TypeError) as e:
            if str(e).startswith(name + ":"):
                raise
            raise type(e)(f"{name}: {e}") from None
    return wrapped


def _batchable_index(index):
    """Whether an index keeps its result dims in place behind a leading full slice:
    basic items and integer arrays that stand together (no masks)."""
    idx = index if isinstance(index, tuple) else (index,)
    adv = [k for k, i in enumerate(idx) if hasattr(i, "dtype")]
    if any(idx[k].dtype.kind not in "iu" for k in adv):
        return None
    if adv and adv[-1] - adv[0] + 1 != len(adv):
        return None
    if not all(k in adv or i is None or i is Ellipsis or isinstance(i, (int, slice))
               for k, i in enumerate(idx)):
        return None
    return (slice(None),) + idx


def _index_vmap(ctx, x):
    """Advanced indexing with (unbatched) integer arrays, kept together in the index:
    the batch stays in front behind a leading full slice; other indices (masks,
    advanced indices split by a slice or None, whose dims NumPy moves to the front)
    run as a _vmap.loop."""
    idx = _batchable_index(ctx.attrs["index"])
    if idx is None:
        return _vmap.loop(ctx, x)
    return bind(ctx.op, x, index=idx)


# NumPy's indexing checks itself; the shape rule would gather a probe of the result's
# size first (infer_first=False: it explains a failure instead)
INDEX = register(name="index", onnx=_onnx_index, vmap=_index_vmap, jvp=_jvp.linear,
                 kind="basic", kernel=_index_kernel, infer_first=False,
                 grad_fn_name="IndexBackward0",
                 infer=_named("index", _getitem_infer),
                 vjp=_getitem_vjp, samples=_index_samples, error_samples=_getitem_errors,
                 torch=lambda torch, x, index: _torch_getitem(torch, x, index))


def _compress_into(xp, mask, x, out):
    """``out[...] = x[mask]`` for a 1-D ``mask`` over ``x``'s dim 0, block by block
    (``compress`` finds its indices first and buffers its ``out=`` (``take``'s
    ``mode="raise"``): whole, both would be arrays of the output's size; a block's
    are the only scratch here)."""
    if xp is not np or x.size <= _CHUNK:
        return xp.compress(mask, x, axis=0, out=out)
    step = max(1, _CHUNK // max(1, x.size // max(mask.size, 1)))
    at = 0
    for i in range(0, mask.size, step):
        mb = mask[i:i + step]
        c = int(np.count_nonzero(mb))
        if c:
            np.compress(mb, x[i:i + step], axis=0, out=out[at:at + c])
            at += c
    return out


def _mask_kernel(x, index, alloc=None):
    """x[mask]: with one boolean mask over the leading dims, its count sizes the
    output, which ``alloc`` gives and ``compress`` writes; other indexes compute,
    then copy into the allocated memory."""
    if alloc is None:
        return _getitem_kernel(x, index)
    xp = _devices.xp_of(x)
    m = index[0] if type(index) is tuple and len(index) == 1 else index
    if isinstance(m, xp.ndarray) and m.dtype == np.bool_ and 0 < m.ndim <= x.ndim \
            and tuple(m.shape) == tuple(x.shape[:m.ndim]):
        rest = tuple(x.shape[m.ndim:])
        out = alloc((int(xp.count_nonzero(m)),) + rest, x.dtype)
        _compress_into(xp, m.reshape(-1), x.reshape((m.size,) + rest), out)
        return out
    r = _getitem_kernel(x, index)
    out = alloc(r.shape, r.dtype)
    out[...] = r
    return out


MASKED_INDEX = register(name="masked_index", onnx=_onnx_index, jvp=_jvp.linear, kind="dynamic",
                        kernel=_mask_kernel, grad_fn_name="IndexBackward0",
                        infer_first=False,  # as INDEX
                        infer=_named("masked_index", _getitem_infer), vjp=_getitem_vjp,
                        samples=lambda dtype=np.float64: [
                            Sample((rand((3, 4), dtype, seed=1),),
                                   {"index": (rand((3, 4), seed=2) > 0,)}),
                            Sample((rand((3, 4), dtype, seed=3),),
                                   {"index": (np.array([True, False, True]),)})],
                        error_samples=lambda: [((rand((3, 4)),), {"index": (np.ones(5, bool),)},
                                                IndexError)],
                        torch=lambda torch, x, index: _torch_getitem(torch, x, index))


# ---------------------------------------------------------------- scatter-add adjoint
def _into_infer(name, g, shape, index, check_g=True):
    spec = _getitem_infer(TensorSpec(tuple(shape), g.dtype), index)
    if check_g and spec.shape is not None:
        try:
            ok = np.broadcast_shapes(tuple(g.shape), spec.shape) == spec.shape
        except ValueError:
            ok = False
        if not ok:
            raise op_error(name, f"values of shape {tuple(g.shape)} don't fit the indexed "
                                 f"shape {spec.shape} of a tensor of shape {tuple(shape)}")
    return TensorSpec(tuple(shape), g.dtype)


def _index_add_into_kernel(g, shape, index, out=None):
    if out is None:
        out = _devices.xp_of(g).zeros(shape, dtype=g.dtype)
    elif _overlaps(out, g):
        out[...] = _index_add_into_kernel(g, shape, index)
        return out
    else:
        out[...] = 0
    if _is_basic(index):
        out[index] = g
    else:
        # repeated indices accumulate (np.add.at), as a gradient must
        _devices.add_at(out, index, g)
    return out


def _index_add_into_vmap(ctx, g):
    """The adjoint of indexing (scatter-add into zeros of ``shape``), batched as the
    index is."""
    idx = _batchable_index(ctx.attrs["index"])
    if idx is None or not ctx.batched[0]:
        return _vmap.loop(ctx, g)
    return bind(ctx.op, g, index=idx, shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


INDEX_ADD_INTO = register(
    name="index_add_into", onnx=_onnx_index_add_into, vmap=_index_add_into_vmap,
    jvp=_jvp.linear, kernel=_index_add_into_kernel, args=("g",),
    infer=lambda g, shape, index: _into_infer("index_add_into", g, shape, index),
    vjp=lambda ctx, gg: (ctx.m.getitem_raw(gg, ctx.attrs["index"]),),
    samples=lambda dtype=np.float64: [
        Sample((rand((2, 5), dtype),), {"shape": (4, 5), "index": (slice(1, 3),)}),
        Sample((rand((4,), dtype),), {"shape": (5,), "index": (np.array([0, 2, 2, 3]),)})],
    error_samples=lambda: [((rand((3,)),), {"shape": (2,), "index": (slice(0, 3),)}, ValueError)],
    torch=lambda torch, g, shape, index: _index_add_into_torch(torch, g, shape, index))


def index_add_into(g, shape, index):
    """Scatter-add ``g`` into zeros of ``shape`` at ``index`` (getitem's adjoint)."""
    return bind(INDEX_ADD_INTO, g, shape=tuple(shape), index=index)


def _index_add_into_torch(torch, g, shape, index):
    """PyTorch's gradient of ``x[index]`` for cotangent g (recorded, so that it is
    differentiable in g)."""
    x = torch.zeros(tuple(shape), dtype=g.dtype, requires_grad=True)
    return torch.autograd.grad(_torch_getitem(torch, x, index), x, g, create_graph=True)[0]


def getitem_raw(x, index):
    """``x[index]`` for an index already converted to raw arrays."""
    if _has_mask(index):
        return bind(MASKED_INDEX, x, index=index)
    if _is_basic(index):
        return bind(GETITEM, x, index=index)
    return bind(INDEX, x, index=index)


# ---------------------------------------------------------------- split / chunk
def _slice_along(input, d, start, stop):
    return getitem_raw(input, (slice(None),) * d + (slice(start, stop),))


def _split_dim(name, input, dim):
    """(shape, dim) for the slicing ops, which need a dim to slice (PyTorch refuses a
    0-d input whatever the dim)."""
    shape = tuple(input.shape)
    if not shape:
        raise op_error(name, "expects at least a 1-dimensional tensor, got a 0-d one",
                       RuntimeError)
    return shape, normalize_dim(name, dim, len(shape))


def _int_arg(name, v, what):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise op_error(name, f"{what} must be an int, got {v!r}", TypeError)
    return int(v)


def split(tensor, split_size_or_sections, dim=0):
    """Pieces of ``split_size_or_sections`` elements (an int: equal pieces, the last
    smaller; a list: those sizes) along ``dim``; a tuple of views."""
    shape, d = _split_dim("split", tensor, dim)
    n = shape[d]
    s = split_size_or_sections
    if isinstance(s, (list, tuple)):
        sizes = [_int_arg("split", v, "split sizes") for v in s]
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise op_error("split", f"split sizes {tuple(sizes)} must be non-negative and sum "
                                    f"to the size {n} of dim {d} (shape {shape})", RuntimeError)
    else:
        s = _int_arg("split", s, "split_size_or_sections")
        if s < 0 or (s == 0 and n != 0):
            raise op_error("split", f"split size {s} must be positive for dim {d} of size {n}",
                           RuntimeError)
        if n:
            _devices.check_pieces("split", -(-n // s))
        sizes = [min(s, n - i) for i in range(0, n, s)] if n else [0]
    out = []
    start = 0
    # each piece's node is PyTorch's split (split_with_sizes for a list of sizes)
    name = "SplitWithSizesBackward0" if isinstance(s, (list, tuple)) else "SplitBackward0"
    for v in sizes:
        out.append(name_call(_slice_along(tensor, d, start, start + v), tensor, name))
        start += v
    return tuple(out)


def chunk(input, chunks, dim=0):
    """At most ``chunks`` pieces of ceil(n / chunks) elements along ``dim``."""
    chunks = _int_arg("chunk", chunks, "chunks")
    if chunks <= 0:
        raise op_error("chunk", f"chunks must be greater than 0, got {chunks}", RuntimeError)
    shape, d = _split_dim("chunk", input, dim)
    n = shape[d]
    if n == 0:
        _devices.check_pieces("chunk", chunks)
        return tuple(_slice_along(input, d, 0, 0) for _ in range(chunks))
    return split(input, -(-n // chunks), d)


def tensor_split(input, indices_or_sections, dim=0):
    """Pieces along ``dim``: ``k`` near-equal sections, or cut at the given indices
    (Python slice semantics: negative indices count from the end, out-of-range ones
    clamp, a decreasing index gives an empty piece)."""
    shape, d = _split_dim("tensor_split", input, dim)
    n = shape[d]
    if isinstance(indices_or_sections, Tensor):  # PyTorch: 0-d sections or 1-d indices
        data = indices_or_sections._host()  # (a read of its values: tg.compile guards it)
        if data.ndim > 1 or data.dtype.kind not in "iu":
            raise op_error("tensor_split", f"a tensor of indices or sections must be an "
                                           f"integer tensor of 0 or 1 dims, got {data.dtype} of "
                                           f"shape {tuple(data.shape)}", RuntimeError)
        indices_or_sections = data.tolist()
    if isinstance(indices_or_sections, (list, tuple)):
        bounds = [0] + [_int_arg("tensor_split", i, "indices") for i in indices_or_sections]
        bounds.append(n)
    else:
        k = _int_arg("tensor_split", indices_or_sections, "sections")
        if k <= 0:
            raise op_error("tensor_split", f"sections must be positive, got {k}", RuntimeError)
        _devices.check_pieces("tensor_split", k)
        q, r = divmod(n, k)
        bounds = [0]
        for i in range(k):
            bounds.append(bounds[-1] + q + (1 if i < r else 0))
    return tuple(_slice_along(input, d, a, b) for a, b in zip(bounds, bounds[1:]))


def unbind(input, dim=0):
    """The slices of ``input`` along ``dim``, as a tuple of views, as ``torch.unbind``."""
    d = normalize_dim("unbind", dim, len(input.shape))
    _devices.check_pieces("unbind", input.shape[d])
    return tuple(name_call(getitem_raw(input, (slice(None),) * d + (i,)), input,
                           "UnbindBackward0") for i in range(input.shape[d]))


# the splitting functions in the registry: their shape rules, tuples of specs (the
# count follows the call)
def _split_infer(x, split_size_or_sections, dim=0):
    shape, d = _split_dim("split", x, dim)
    n, s = shape[d], split_size_or_sections
    if isinstance(s, (list, tuple)):
        sizes = [_int_arg("split", v, "split sizes") for v in s]
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise op_error("split", f"split sizes {tuple(sizes)} must be non-negative and sum "
                                    f"to the size {n} of dim {d} (shape {shape})", RuntimeError)
    else:
        s = _int_arg("split", s, "split_size_or_sections")
        if s < 0 or (s == 0 and n != 0):
            raise op_error("split", f"split size {s} must be positive for dim {d} of size {n}",
                           RuntimeError)
        sizes = [min(s, n - i) for i in range(0, n, s)] if n else [0]
    return tuple(TensorSpec(shape[:d] + (v,) + shape[d + 1:], x.dtype) for v in sizes)


def _chunk_infer(x, chunks, dim=0):
    chunks = _int_arg("chunk", chunks, "chunks")
    if chunks <= 0:
        raise op_error("chunk", f"chunks must be greater than 0, got {chunks}", RuntimeError)
    shape, d = _split_dim("chunk", x, dim)
    if shape[d] == 0:
        return tuple(TensorSpec(shape, x.dtype) for _ in range(chunks))
    return _split_infer(x, -(-shape[d] // chunks), d)


def _tensor_split_infer(x, indices_or_sections, dim=0):
    shape, d = _split_dim("tensor_split", x, dim)
    n = shape[d]
    if isinstance(indices_or_sections, (list, tuple)):
        cuts = [slice(*b).indices(n) for b in zip(
            [0] + [_int_arg("tensor_split", i, "indices") for i in indices_or_sections],
            [_int_arg("tensor_split", i, "indices") for i in indices_or_sections] + [n])]
        sizes = [max(b - a, 0) for a, b, _ in cuts]
    else:
        k = _int_arg("tensor_split", indices_or_sections, "sections")
        if k <= 0:
            raise op_error("tensor_split", f"sections must be positive, got {k}", RuntimeError)
        q, r = divmod(n, k)
        sizes = [q + (1 if i < r else 0) for i in range(k)]
    return tuple(TensorSpec(shape[:d] + (v,) + shape[d + 1:], x.dtype) for v in sizes)


def _unbind_infer(x, dim=0):
    shape = tuple(x.shape)
    d = normalize_dim("unbind", dim, len(shape))
    return tuple(TensorSpec(shape[:d] + shape[d + 1:], x.dtype) for _ in range(shape[d]))


composite(split, infer=_split_infer, args=("tensor",), nout=2,
          samples=lambda dtype=np.float64: [
              Sample((rand((5, 3), dtype),), {"split_size_or_sections": 2}),
              Sample((rand((2, 6), dtype),), {"split_size_or_sections": [1, 0, 5], "dim": -1})],
          error_samples=lambda: [((rand((5, 3)),), {"split_size_or_sections": [2, 2]},
                                  RuntimeError),
                                 ((rand((5, 3)),), {"split_size_or_sections": 2, "dim": 2},
                                  IndexError)],
          torch=lambda torch, x, split_size_or_sections, dim=0: torch.split(
              x, split_size_or_sections, dim))


composite(chunk, infer=_chunk_infer, nout=2,
          samples=lambda dtype=np.float64: [Sample((rand((5, 3), dtype),), {"chunks": 3}),
                                            Sample((rand((2, 6), dtype),),
                                                   {"chunks": 4, "dim": 1})],
          error_samples=lambda: [((rand((5, 3)),), {"chunks": 0}, RuntimeError),
                                 ((rand(()),), {"chunks": 2}, RuntimeError)],
          torch=lambda torch, x, chunks, dim=0: torch.chunk(x, chunks, dim))


composite(tensor_split, infer=_tensor_split_infer, nout=2,
          samples=lambda dtype=np.float64: [
              Sample((rand((5, 3), dtype),), {"indices_or_sections": 3}),
              Sample((rand((2, 7), dtype),), {"indices_or_sections": [2, -2, 1, 9], "dim": 1})],
          error_samples=lambda: [((rand((5, 3)),), {"indices_or_sections": 0}, RuntimeError),
                                 ((rand((5, 3)),), {"indices_or_sections": 2, "dim": -3},
                                  IndexError)],
          torch=lambda torch, x, indices_or_sections, dim=0: torch.tensor_split(
              x, indices_or_sections, dim))


composite(unbind, infer=_unbind_infer, nout=2,
          samples=lambda dtype=np.float64: [Sample((rand((3, 2), dtype),), {}),
                                            Sample((rand((2, 3, 2), dtype),), {"dim": -2})],
          error_samples=lambda: [((rand((3, 2)),), {"dim": 2}, IndexError)],
          torch=lambda torch, x, dim=0: torch.unbind(x, dim))


# ---------------------------------------------------------------- setitem
def _same_memory(a, b):
    """``a`` and ``b`` are the same elements (an in-place call: out is the input)."""
    return a is b or (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
                      and _devices.address(a) == _devices.address(b))


def _overlaps(out, *arrays):
    xp = np if type(out) is np.ndarray else _devices.xp_of(out)
    return any(hasattr(a, "shape") and xp.may_share_memory(out, a) for a in arrays)


def _index_put_kernel(x, value, index, out=None):
    if out is None:
        out = x.copy()
    elif _overlaps(out, value) or (_overlaps(out, x) and not _same_memory(out, x)):
        out[...] = _index_put_kernel(x, value, index)
        return out
    elif not _same_memory(out, x):  # out is x: written in place
        out[...] = x
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
            if len(vshape) > len(gv.shape):  # value had extra leading 1s
                gv = m.reshape(gv, (1,) * (len(vshape) - len(gv.shape)) + tuple(gv.shape))
            gv = m.sum_to(gv, vshape)
    return gx, gv


def _index_put_infer(x, value, index):
    try:
        spec = _getitem_infer(x, index)
    except IndexError as e:
        raise IndexError("setitem" + str(e)[len("getitem"):]) from None
    if hasattr(value, "shape") and spec.shape is not None:
        try:
            np.broadcast_shapes(tuple(value.shape), spec.shape)
        except ValueError:
            raise op_error("setitem", f"value of shape {tuple(value.shape)} cannot be broadcast "
                                      f"to the indexed shape {spec.shape}", ShapeError) from None
    return TensorSpec(tuple(x.shape), x.dtype)


INDEX_PUT = register(name="index_put", autocast={"cuda": "promote"}, onnx=_onnx_index_put,
                     jvp=_jvp.linear, kernel=_index_put_kernel, args=("x", "value"),
                     infer=_named("index_put", _index_put_infer), vjp=_index_put_vjp,
                     promote="none",
                     samples=lambda dtype=np.float64: [
                         Sample((rand((4, 5), dtype), rand((2, 5), dtype)),
                                {"index": (slice(1, 3),)}),
                         Sample((rand((4, 5), dtype), rand((5,), dtype)),
                                {"index": (np.array([0, 3]),)})],
                     error_samples=lambda: [((rand((4, 5)), rand((3,))), {"index": (0,)},
                                             ValueError)],
                     torch=lambda torch, x, value, index: _torch_setitem(torch, x, index, value))


def _torch_setitem(torch, x, index, value):
    """PyTorch's ``x[index] = value`` on a copy of x."""
    out = x.clone()
    out[tuple(torch.as_tensor(i) if isinstance(i, np.ndarray) else i for i in index)] = value
    return out


def _index_put_zero_kernel(g, index, out=None):
    if out is None:
        out = g.copy()
    elif _overlaps(out, g) and not _same_memory(out, g):
        out[...] = _index_put_zero_kernel(g, index)
        return out
    elif not _same_memory(out, g):
        out[...] = g
    out[index] = 0
    return out


INDEX_PUT_ZERO = register(name="index_put_zero", onnx=_onnx_diag_like, jvp=_jvp.linear,
                          kernel=_index_put_zero_kernel, args=("g",),
                          infer=lambda g, index: _named("index_put_zero", _into_infer)(
                              "index_put_zero", g, tuple(g.shape), index, False),
                          vjp=lambda ctx, gg: (ctx.m.index_put_zero(gg, ctx.attrs["index"]),),
                          samples=lambda dtype=np.float64: [
                              Sample((rand((4, 5), dtype),), {"index": (slice(1, 3),)})],
                          error_samples=lambda: [((rand((4,)),), {"index": (7,)}, IndexError)],
                          torch=lambda torch, g, index: _torch_setitem(torch, g, index, 0))


def index_put_zero(g, index):
    return bind(INDEX_PUT_ZERO, g, index=index)


# PyTorch's names of the scalar types, for its messages
_SCALAR_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half",
                "bfloat16": "BFloat16", "int64": "Long", "int32": "Int", "int16": "Short",
                "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def check_put_dtypes(x, value):
    """PyTorch's index_put rule: the values must have the tensor's dtype (no cast)."""
    if value.dtype != x.dtype:
        def name(d):
            d = getattr(d, "name", str(d))
            return _SCALAR_TYPE.get(d, d)
        raise RuntimeError(f"Index put requires the source and destination dtypes match, "
                           f"got {name(x.dtype)} for the destination and {name(value.dtype)} "
                           f"for the source.")


def _advanced(index):
    """Whether PyTorch indexes with ``index`` through index_put (an index array of at
    least one dim; a 0-d integer one is an int, as in PyTorch)."""
    return any(getattr(i, "ndim", 0) > 0 or (getattr(i, "dtype", None) == np.bool_)
               for i in index)


def setitem(x, index, value):
    """``x[index] = value`` in place; gradients flow to the old x and to value.

    As PyTorch: a tensor value is cast to ``x``'s dtype for basic indexing and for a
    boolean mask with a 0-d value (masked_fill); with an index tensor (advanced
    indexing, index_put) its dtype must be ``x``'s."""
    index = _raw_index(index)
    if not isinstance(index, tuple):
        index = (index,)
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    if isinstance(value, Tensor) and value.dtype != x.dtype:
        mask_fill = (len(index) == 1 and getattr(index[0], "dtype", None) == np.bool_
                     and value.ndim == 0)
        if _advanced(index) and not mask_fill:
            check_put_dtypes(x, value)
        value = value.to(x.dtype)
    apply_inplace(INDEX_PUT, x, value, index=index)


# ================================================================ gather / scatter family
class _IndexOutOfRange(IndexError, RuntimeError):
    """An index value out of range: IndexError, and RuntimeError as PyTorch raises."""


_IndexOutOfRange.__name__ = _IndexOutOfRange.__qualname__ = "IndexError"


def _raw(a):
    return getattr(a, "_data", a)


def _grid(index, dim):
    """The advanced index that picks ``x[..., index[i, j, ...] at dim, ...]``: index
    itself at ``dim``, an open arange grid over index's shape elsewhere."""
    xp = _devices.xp_of(index)
    nd = index.ndim
    out = []
    for d in range(nd):
        if d == dim:
            out.append(index)
        else:
            sh = [1] * nd
            sh[d] = index.shape[d]
            out.append(xp.arange(index.shape[d]).reshape(sh))
    return tuple(out)


def _spread_vector(index, dim, x_shape):
    """The vector ``v`` when ``index`` repeats ``v`` along ``dim`` over all of x's other
    dims (stride 0 there: the index ``index_add``/``index_copy``/``index_fill`` build):
    the op is then slice-wise, ``x[(:,) * dim + (v,)]``, several times faster than
    element-wise indexing. None otherwise."""
    if type(index) is not np.ndarray or index.ndim != len(x_shape) or index.ndim == 0:
        return None
    for j, (st, m) in enumerate(zip(index.strides, index.shape)):
        if j != dim and (m != x_shape[j] or (st != 0 and m > 1)):
            return None
    return index[tuple(slice(None) if j == dim else 0 for j in range(index.ndim))]


def _add_at(out, index, values):
    """``out[index] += values`` with repeated indices accumulating."""
    _devices.add_at(out, index, values)


def _check_int(name, index):
    if np.dtype(index.dtype).kind not in "iu":
        raise op_error(name, f"expected an integer index tensor (int64), got {index.dtype}",
                       RuntimeError)


def _check_range(name, index, x, dim, negative=False):
    """The index values' bound check along ``dim`` of ``x`` (a 0-d x has one
    position). Kernels make it, after the shape rule accepted the shapes: it reads
    the data, once, over the index's distinct memory (a broadcast index is not
    scanned element by element)."""
    span = value_range(index)
    if span is None:
        return
    shape = tuple(x.shape)
    size = shape[dim] if shape else 1
    lo, hi = span
    low = -size if negative else 0
    if lo < low or hi >= size:
        bad = lo if lo < low else hi
        raise _IndexOutOfRange(f"{name}: index {bad} is out of bounds for dim {dim} with size "
                               f"{size} (input shape {shape}, index shape "
                               f"{tuple(index.shape)})")


def _same_ndim(name, **specs):
    nds = {k: len(v.shape) for k, v in specs.items()}
    if len(set(nds.values())) > 1:
        shown = ", ".join(f"{k} {tuple(v.shape)}" for k, v in specs.items())
        raise op_error(name, f"index tensor must have the same number of dims as the input "
                             f"({shown})", RuntimeError)


def _index_not_larger(name, index, other, skip, what):
    for d, (a, b) in enumerate(zip(index.shape, other.shape)):
        if d != skip and a > b:
            raise op_error(name, f"size of index {tuple(index.shape)} must not exceed the "
                                 f"{what} shape {tuple(other.shape)} at dim {d}", RuntimeError)


def _int_sample(high, shape, seed):
    return np.random.default_rng(seed).integers(0, high, size=shape).astype(np.int64)


# ---------------------------------------------------------------- gather
def _gather_infer(x, index, dim):
    _check_int("gather", index)
    _same_ndim("gather", input=x, index=index)
    d = normalize_dim("gather", dim, len(x.shape))
    _index_not_larger("gather", index, x, d, "input")
    return TensorSpec(tuple(index.shape), x.dtype)


def _dim3(a, dim):
    """``a`` viewed as (before dim, dim, after dim), no copy; None where its strides
    do not allow that view."""
    sh = tuple(a.shape)
    try:
        return np.reshape(a, (int(np.prod(sh[:dim])), sh[dim], int(np.prod(sh[dim + 1:]))),
                          copy=False)
    except ValueError:
        return None


def _cut(a, shape, dim):
    """``a`` cut to ``shape`` in every dim but ``dim``."""
    return a[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(shape))]


def _gather_into(out, x, index, dim, negative_zero=False):
    """``out[..., k, ...] = x[..., index[..., k, ...], ...]`` along dim, written into
    out by one compiled loop over 3-D views (x cut to index's extent elsewhere);
    False where it does not apply (layouts, dtypes, devices, out overlapping)."""
    if type(out) is not np.ndarray or not x.ndim or _overlaps(out, x, index):
        return False
    views = [_dim3(a, dim) for a in (_cut(x, index.shape, dim), index, out)]
    return all(v is not None for v in views) and _cpu_scatter.gather_dim(*views, negative_zero)


def _scatter_into(out, x, index, src, dim, add):
    """x with src scattered (or added) along dim, written into out (out may be x
    itself: in place) by one compiled loop; False where it does not apply."""
    if type(out) is not np.ndarray or not x.ndim or _overlaps(out, index, src) or (
            _overlaps(out, x) and not _same_memory(out, x)):
        return False
    if not hasattr(src, "shape"):
        src = np.broadcast_to(np.asarray(src, dtype=x.dtype), index.shape)
    views = [_dim3(a, dim) for a in (_cut(out, index.shape, dim), index,
                                     _src_part(src, index))]
    if any(v is None for v in views) or not _cpu_scatter._along_fits(views[0], views[2], views[1]):
        return False
    if not _same_memory(out, x):
        out[...] = x
    return _cpu_scatter.scatter_dim(*views, add=add)


def _gather_kernel(x, index, dim, out=None):
    _gather_infer(x, index, dim)
    _check_range("gather", index, x, dim)
    if out is not None:
        if not _gather_into(out, x, index, dim):
            out[...] = _gather_kernel(x, index, dim)
        return out
    if x.ndim == 0:
        return x.copy()
    v = _spread_vector(index, dim, x.shape)
    if v is not None:
        return np.take(x, v, axis=dim)
    grid = _grid(index, dim)
    if type(x) is np.ndarray and x.flags.c_contiguous:
        pos = _devices.flat_positions(x.shape, grid)
        if pos is not None:  # one flat take: ~2x faster than the multi-array index
            return x.reshape(-1).take(pos)
    return x[grid]


GATHER = register(
    name="gather", onnx=_onnx_gather, vmap=_vmap.all_batched_dim(), jvp=_jvp.linear,
    kernel=_gather_kernel, infer=_gather_infer, args=("x", "index"),
    saves=("index",),
    vjp=lambda ctx, g: (ctx.m.index_add_into(g, ctx.shapes[0], _grid(_raw(ctx.inputs[1]),
                                                                     ctx.attrs["dim"])), None),
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype), _int_sample(4, (3, 5), 1)), {"dim": 1}),
        Sample((rand((3, 4), dtype), _int_sample(3, (4, 2), 2)), {"dim": 0}),
        Sample((rand((4, 3), dtype).T, _int_sample(4, (2, 3), 3)), {"dim": 1}),
        Sample((rand((2, 3, 4), dtype), _int_sample(3, (2, 6, 4), 4)), {"dim": 1}),
        Sample((rand((3, 4), dtype), _int_sample(4, (3, 0), 5)), {"dim": 1})],
    error_samples=lambda: [((rand((3, 4)), _int_sample(3, (3,), 0)), {"dim": 0}, RuntimeError),
                           ((rand((3, 4)), _int_sample(3, (5, 4), 0)), {"dim": 1}, RuntimeError),
                           ((rand((3, 4)), _int_sample(3, (3, 4), 0)), {"dim": 2}, IndexError),
                           ((rand(()), np.array(0)), {"dim": 1}, IndexError),
                           ((rand((3, 4)), np.full((3, 4), 4)), {"dim": 1}, IndexError)],
    torch=lambda torch, x, index, dim: torch.gather(x, dim, index))


def gather(input, dim, index, *, sparse_grad=False):
    """``out[i][j][k] = input[i][index[i][j][k]][k]`` (for dim=1); differentiable in
    input (repeated indices accumulate)."""
    return bind(GATHER, input, index, dim=normalize_dim("gather", dim, len(input.shape)))


# ---------------------------------------------------------------- scatter_add / scatter
def _scatter_infer(name):
    def infer(x, index, src, dim):
        _check_int(name, index)
        d = normalize_dim(name, dim, len(x.shape))
        if hasattr(src, "shape"):
            _same_ndim(name, input=x, index=index, src=src)
            _index_not_larger(name, index, src, -1, "src")
            if np.dtype(src.dtype) != np.dtype(x.dtype):
                raise op_error(name, f"expected self.dtype to be equal to src.dtype, got "
                                     f"{np.dtype(x.dtype)} and {np.dtype(src.dtype)}",
                               RuntimeError)
        else:
            _same_ndim(name, input=x, index=index)
        _index_not_larger(name, index, x, d, "input")
        return TensorSpec(tuple(x.shape), x.dtype)
    return infer


def _src_part(src, index):
    if not hasattr(src, "shape"):
        return src
    if tuple(src.shape) == tuple(index.shape):
        return src
    return src[tuple(slice(0, n) for n in index.shape)]


def _torch_src(src, index):
    """The part of a src tensor that PyTorch's scatter reads: cut to index's shape,
    since PyTorch's backward fails on a larger src."""
    if not hasattr(src, "shape") or tuple(src.shape) == tuple(index.shape):
        return src
    return src[tuple(slice(0, n) for n in index.shape)]


def _scatter_add_kernel(x, index, src, dim, out=None):
    _scatter_infer("scatter_add")(x, index, src, dim)
    _check_range("scatter_add", index, x, dim)
    if out is not None:
        if not _scatter_into(out, x, index, src, dim, True):
            out[...] = _scatter_add_kernel(x, index, src, dim)
        return out
    out = x.copy()
    if x.ndim == 0:
        return out + src
    v = _spread_vector(index, dim, x.shape)
    _add_at(out, _grid(index, dim) if v is None else (slice(None),) * dim + (v,),
            _src_part(src, index))
    return out


def _src_grad(m, g, index, dim, src_shape):
    """Gradient of src: g gathered at the scatter positions, zero where src was unused."""
    gs = m.getitem_raw(g, _grid(index, dim))
    if tuple(src_shape) != tuple(index.shape):
        gs = m.index_add_into(gs, tuple(src_shape), tuple(slice(0, n) for n in index.shape))
    return gs


def _scatter_add_vjp(ctx, g):
    index, dim = _raw(ctx.inputs[1]), ctx.attrs["dim"]
    gsrc = _src_grad(ctx.m, g, index, dim, ctx.shapes[2]) if ctx.needs_input_grad[2] else None
    return g, None, gsrc


def _scatter_samples(dtype=np.float64):
    return [Sample((rand((3, 4), dtype), _int_sample(4, (3, 5), 1), rand((3, 5), dtype)),
                   {"dim": 1}),
            Sample((rand((3, 4), dtype), _int_sample(3, (2, 3), 2), rand((4, 4), dtype)),
                   {"dim": 0}),
            Sample((rand((4, 3), dtype).T, _int_sample(4, (2, 2), 3), rand((3, 2), dtype).T),
                   {"dim": 1})]


SCATTER_ADD = register(
    name="scatter_add", autocast={"cuda": "promote"}, onnx=_onnx_scatter("add"),
    vmap=_vmap.all_batched_dim(), jvp=_jvp.linear, kernel=_scatter_add_kernel,
    infer=_scatter_infer("scatter_add"),
    args=("x", "index", "src"), saves=("index",), vjp=_scatter_add_vjp,
    samples=_scatter_samples,
    error_samples=lambda: [((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4), np.float32)),
                            {"dim": 1}, RuntimeError),
                           ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((2, 4))),
                            {"dim": 1}, RuntimeError),
                           ((rand(()), np.array(0), rand(())), {"dim": -2}, IndexError),
                           ((rand((3, 4)), np.full((3, 4), -1), rand((3, 4))), {"dim": 1},
                            IndexError)],
    torch=lambda torch, x, index, src, dim: torch.scatter_add(x, dim, index,
                                                              _torch_src(src, index)))


def scatter_add(input, dim, index, src):
    """A copy of input with ``src`` added at ``index`` along ``dim`` (repeated indices
    accumulate); differentiable in input and src."""
    d, src = _scatter_args("scatter_add", input, dim, index, src, None)
    return bind(SCATTER_ADD, input, index, src, dim=d)


def _once_along(index, dim):
    """``index`` cut to one entry along ``dim`` where broadcasting repeats it there
    (stride 0): a write of one value that many times to the same positions is one
    write (scatter of a number, the zeroing in its adjoint), so a broadcast index
    costs its memory, not its size."""
    strides = getattr(index, "strides", None)
    if strides and strides[dim] == 0 and index.shape[dim] > 1:
        return index[(slice(None),) * dim + (slice(0, 1),)]
    return index


def _scatter_kernel(x, index, src, dim, out=None):
    _scatter_infer("scatter")(x, index, src, dim)
    _check_range("scatter", index, x, dim)
    if out is not None:
        if not _scatter_into(out, x, index, src, dim, False):
            out[...] = _scatter_kernel(x, index, src, dim)
        return out
    out = x.copy()
    if x.ndim == 0:
        out[...] = src
        return out
    if not hasattr(src, "shape"):
        index = _once_along(index, dim)
    v = _spread_vector(index, dim, x.shape)
    if v is not None:
        out[(slice(None),) * dim + (v,)] = _src_part(src, index)
        return out
    grid = _grid(index, dim)
    pos = _devices.flat_positions(out.shape, grid) if type(out) is np.ndarray else None
    if pos is not None:  # one flat write: ~2x faster than the multi-array index
        out.reshape(-1)[pos] = _src_part(src, index)
    else:
        out[grid] = _src_part(src, index)
    return out


def _scatter_vjp(ctx, g):
    # with repeated indices the written value is unspecified (as PyTorch); these
    # gradients are those of the writes that were not overwritten only when unique
    index, dim = _raw(ctx.inputs[1]), ctx.attrs["dim"]
    m = ctx.m
    gx = None
    if ctx.needs_input_grad[0]:
        gx = m.index_put_zero(g, _grid(_once_along(index, dim), dim))
    gsrc = _src_grad(m, g, index, dim, ctx.shapes[2]) if ctx.needs_input_grad[2] else None
    return gx, None, gsrc


def _scatter_unique_samples(dtype=np.float64):
    perm = np.stack([np.random.default_rng(k).permutation(4) for k in range(3)])
    return [Sample((rand((3, 4), dtype), perm[:, :3].copy(), rand((3, 5), dtype)), {"dim": 1}),
            Sample((rand((3, 4), dtype), perm[:, :2].T.copy() % 3, rand((2, 4), dtype)),
                   {"dim": 0}, False),
            Sample((rand((3, 4), dtype), perm.copy(), 1.5), {"dim": 1})]


SCATTER = register(
    name="scatter", onnx=_onnx_scatter(None), vmap=_vmap.all_batched_dim(), jvp=_jvp.linear,
    kernel=_scatter_kernel, infer=_scatter_infer("scatter"),
    args=("x", "index", "src"), saves=("index",), vjp=_scatter_vjp,
    samples=_scatter_unique_samples,
    error_samples=lambda: [((rand((3, 4)), _int_sample(3, (3,), 0), rand((3,))),
                            {"dim": 0}, RuntimeError),
                           ((rand(()), np.array(0), 1.0), {"dim": 1}, IndexError),
                           ((rand((3, 4)), np.full((3, 4), 3), 1.0), {"dim": 0}, IndexError)],
    torch=lambda torch, x, index, src, dim: torch.scatter(x, dim, index,
                                                          _torch_src(src, index)))


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """A copy of input with ``src`` (a tensor, or the number ``value``) written at
    ``index`` along ``dim``."""
    if reduce is not None:
        if reduce == "add":
            return scatter_add(input, dim, index, src)
        raise op_error("scatter", f"reduce={reduce!r} is not supported", NotImplementedError)
    d, src = _scatter_args("scatter", input, dim, index, src, value)
    return bind(SCATTER, input, index, src, dim=d)


def _scatter_args(name, input, dim, index, src, value):
    if (src is None) == (value is None):
        raise op_error(name, "pass exactly one of src and value", TypeError)
    if src is None:
        src = value
    if not hasattr(src, "shape") and not isinstance(src, (int, float, bool)):
        src = np.asarray(src)
    if hasattr(src, "shape") and len(src.shape) == 0 and len(index.shape):
        src = src.item() if not getattr(src, "requires_grad", False) else src
    return normalize_dim(name, dim, len(input.shape)), src


def scatter_add_(input, dim, index, src):
    """Adds ``src`` into ``input`` at ``index`` along ``dim``, in place
    (``Tensor.scatter_add_``), as PyTorch's."""
    d, src = _scatter_args("scatter_add", input, dim, index, src, None)
    return apply_inplace(SCATTER_ADD, input, index, src, dim=d)


def scatter_(input, dim, index, src=None, *, value=None):
    """Writes ``src`` (or ``value``) into ``input`` at ``index`` along ``dim``, in place
    (``Tensor.scatter_``), as PyTorch's."""
    d, src = _scatter_args("scatter", input, dim, index, src, value)
    return apply_inplace(SCATTER, input, index, src, dim=d)


# ---------------------------------------------------------------- index_select
def _index_select_infer(x, index, dim):
    _check_int("index_select", index)
    if len(index.shape) > 1:
        raise op_error("index_select", f"index is supposed to be a vector, got shape "
                                       f"{tuple(index.shape)}", IndexError)
    shape = tuple(x.shape)
    d = normalize_dim("index_select", dim, len(shape))
    n = 1
    for s in index.shape:
        n *= s
    if not shape:
        if n != 1:
            raise op_error("index_select", f"index to a 0-d input can have only 1 value, got "
                                           f"{n}", RuntimeError)
        return TensorSpec((), x.dtype)
    return TensorSpec(shape[:d] + (n,) + shape[d + 1:], x.dtype)


def _select_index(index, dim):
    return (slice(None),) * dim + (index.reshape(-1),)


def _index_select_kernel(x, index, dim, out=None):
    _index_select_infer(x, index, dim)
    _check_range("index_select", index, x, dim)
    if out is not None:
        if x.ndim == 0 or type(out) is not np.ndarray or out.dtype != x.dtype \
                or np.may_share_memory(out, x):
            out[...] = _index_select_kernel(x, index, dim)
        else:  # range checked above: "wrap" takes straight into out (NumPy's "raise"
            # buffers a copy of out)
            np.take(x, index.reshape(-1), axis=dim, out=out, mode="wrap")
        return out
    if x.ndim == 0:
        return x.copy()
    out = x[_select_index(index, dim)]
    return out if out.flags.c_contiguous else _devices.xp_of(out).ascontiguousarray(out)


def _index_select_vmap(ctx, x, index):
    if not ctx.batched[1]:
        return bind(ctx.op, x, index, dim=ctx.dim(ctx.attrs["dim"], 0))
    m = ctx.m
    x = _vmap.batched_all(ctx, [x, index])[0]
    n = ctx.ndim(0)
    d = ctx.dim(ctx.attrs["dim"], 0) if n else 1
    if n == 0:
        x = m.unsqueeze(x, -1)
    k = tuple(index.shape)[1:]
    shape = tuple(x.shape)
    idx = m.reshape(index, (ctx.size,) + (1,) * (d - 1) + (-1,) + (1,) * (len(shape) - d - 1))
    idx = m.broadcast_to(idx, shape[:d] + (int(np.prod(k)) if k else 1,) + shape[d + 1:])
    out = m.gather(x, d, idx)
    return m.reshape(out, (ctx.size,)) if n == 0 else out


INDEX_SELECT = register(
    name="index_select", onnx=_onnx_index_select, vmap=_index_select_vmap, jvp=_jvp.linear,
    kernel=_index_select_kernel, infer=_index_select_infer,
    args=("x", "index"), saves=("index",),
    vjp=lambda ctx, g: (ctx.m.index_add_into(g, ctx.shapes[0], _select_index(
        _raw(ctx.inputs[1]), ctx.attrs["dim"])) if len(ctx.shapes[0]) else g, None),
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype), np.array([0, 2, 2, 1])), {"dim": 1}),
        Sample((rand((3, 4), dtype), np.array(1)), {"dim": 0}),
        Sample((rand((4, 3), dtype).T, np.array([3, 0])), {"dim": 1}),
        Sample((rand((2, 3, 2), dtype), np.zeros(0, np.int64)), {"dim": 1})],
    error_samples=lambda: [((rand((3, 4)), np.zeros((2, 2), np.int64)), {"dim": 0}, IndexError),
                           ((rand((3, 4)), np.array([0.5])), {"dim": 0}, RuntimeError),
                           ((rand(()), np.array([0])), {"dim": 1}, IndexError),
                           ((rand(()), np.array([0, 0])), {"dim": 0}, RuntimeError),
                           ((rand((3, 4)), np.array([4])), {"dim": 1}, IndexError)],
    torch=lambda torch, x, index, dim: torch.index_select(x, dim, index))


def index_select(input, dim, index):
    """The entries of ``index`` (a vector) along ``dim``."""
    return bind(INDEX_SELECT, input, index,
                dim=normalize_dim("index_select", dim, len(input.shape)))


# ---------------------------------------------------------------- take_along_dim
def _tad_shapes(x, indices, dim):
    xs, js = tuple(x.shape), tuple(indices.shape)
    rest = _broadcast_shapes("take_along_dim",
                             tuple(1 if i == dim else s for i, s in enumerate(xs)),
                            tuple(1 if i == dim else s for i, s in enumerate(js)))
    return rest


def _tad_infer(x, indices, dim):
    _check_int("take_along_dim", indices)
    _same_ndim("take_along_dim", input=x, indices=indices)
    if not x.shape:  # PyTorch: a 0-d input has no dim to take along (dim=None flattens)
        raise op_error("take_along_dim", f"dim {dim} specified, but a 0-d input has no dims",
                       IndexError)
    d = normalize_dim("take_along_dim", dim, len(x.shape))
    rest = list(_tad_shapes(x, indices, d))
    rest[d] = indices.shape[d]
    return TensorSpec(tuple(rest), x.dtype)


def _tad_index(xshape, indices, dim):
    xp = _devices.xp_of(indices)
    nd = len(xshape)
    rest = _tad_shapes(TensorSpec(xshape, None), indices, dim)
    out = []
    for d in range(nd):
        if d == dim:
            out.append(indices)
            continue
        sh = [1] * nd
        sh[d] = rest[d]
        a = xp.arange(rest[d]) if xshape[d] != 1 else xp.zeros(rest[d], dtype=np.int64)
        out.append(a.reshape(sh))
    return tuple(out)


def _tad_kernel(x, indices, dim, out=None):
    _tad_infer(x, indices, dim)
    _check_range("take_along_dim", indices, x, dim, negative=True)
    if out is not None:
        rest = list(out.shape)
        rest[dim] = x.shape[dim]
        xb = _devices.xp_of(x).broadcast_to(x, tuple(rest))  # broadcast: views
        ib = _devices.xp_of(indices).broadcast_to(indices, tuple(out.shape))
        if not _gather_into(out, xb, ib, dim):
            out[...] = _tad_kernel(x, indices, dim)
        return out
    return x[_tad_index(tuple(x.shape), indices, dim)]


TAKE_ALONG_DIM = register(
    name="take_along_dim", grad_fn_name="GatherBackward0",
    onnx=_onnx_take_along_dim, vmap=_vmap.all_batched_dim(), jvp=_jvp.linear,
    kernel=_tad_kernel, infer=_tad_infer, args=("x", "indices"),
    saves=("indices",),
    vjp=lambda ctx, g: (ctx.m.index_add_into(g, ctx.shapes[0], _tad_index(
        tuple(ctx.shapes[0]), _raw(ctx.inputs[1]), ctx.attrs["dim"])), None),
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype), _int_sample(4, (3, 2), 1)), {"dim": 1}),
        Sample((rand((3, 4), dtype), _int_sample(4, (1, 6), 2) - 4), {"dim": 1}),
        Sample((rand((3, 1), dtype), _int_sample(3, (5, 4), 3)), {"dim": 0}),
        Sample((rand((4, 3), dtype).T, _int_sample(3, (3, 2), 4)), {"dim": 1})],
    error_samples=lambda: [((rand((3, 4)), _int_sample(3, (3,), 0)), {"dim": 0}, RuntimeError),
                           ((rand((3, 4)), _int_sample(3, (2, 4), 0)), {"dim": 1}, ValueError),
                           ((rand(()), np.array(0)), {"dim": 0}, IndexError),
                           ((rand((3, 4)), np.full((3, 1), -5)), {"dim": 1}, IndexError)],
    torch=lambda torch, x, indices, dim: torch.take_along_dim(x, indices, dim))


def take_along_dim(input, indices, dim=None):
    """``input`` picked at ``indices`` along ``dim`` (other dims broadcast; None:
    both flattened)."""
    if dim is None:
        input, indices, d = reshape(input, (-1,)), reshape(indices, (-1,)), 0
    else:
        d = normalize_dim("take_along_dim", dim, max(len(input.shape), 1))
    return bind(TAKE_ALONG_DIM, input, indices, dim=d)


# ---------------------------------------------------------------- masked_fill
def _check_mask(name, mask):
    if np.dtype(mask.dtype) != np.bool_:
        raise op_error(name, f"expected a boolean mask, got {np.dtype(mask.dtype)}",
                       RuntimeError)


def _masked_fill_infer(x, mask, value):
    _check_mask("masked_fill", mask)
    if hasattr(value, "shape") and len(value.shape):
        raise op_error("masked_fill", f"only supports a 0-dimensional value tensor, got shape "
                                      f"{tuple(value.shape)}", RuntimeError)
    shape = _broadcast_shapes("masked_fill", tuple(x.shape), tuple(mask.shape))
    return TensorSpec(shape, x.dtype)


def _masked_fill_kernel(x, mask, value, out=None):
    _masked_fill_infer(x, mask, value)
    xp = _devices.xp_of(x)
    if out is not None:
        if any(isinstance(a, np.ndarray) and np.may_share_memory(out, a) for a in (mask, value)):
            out[...] = _masked_fill_kernel(x, mask, value)
            return out
        out[...] = x
        xp.copyto(out, xp.asarray(value).astype(out.dtype), where=mask)
        return out
    return xp.where(mask, xp.asarray(value).astype(x.dtype), x)


def _masked_fill_vjp(ctx, g):
    m, mask, need = ctx.m, ctx.inputs[1], ctx.needs_input_grad
    gx = m.where(mask, 0.0, g) if need[0] else None
    gv = m.where(mask, g, 0.0) if need[2] else None  # summed to () by the registry
    return gx, None, gv


class _SubsetCtx:
    """A rule context restricted to some of the inputs (``idx``), for ``_vmap.pad_rank``."""
    def __init__(self, ctx, idx):
        self.batched = tuple(ctx.batched[i] for i in idx)
        self.shapes = tuple(ctx.shapes[i] for i in idx)
        self.m, self.size = ctx.m, ctx.size

    def ndim(self, i):
        return len(self.shapes[i])


def _masked_fill_vmap(ctx, x, mask, value):
    """A batched fill value (one per example) is ``where``; else broadcasting."""
    m = ctx.m
    if not isinstance(value, Tensor) or not ctx.batched[2]:
        rank = max(ctx.ndim(0), ctx.ndim(1))
        x, mask = _vmap.pad_rank(_SubsetCtx(ctx, (0, 1)), [x, mask], rank)
        return bind(ctx.op, x, mask, value)
    rank = max(ctx.ndim(0), ctx.ndim(1))
    x, mask, value = _vmap.pad_rank(ctx, [x, mask, value], rank)
    return m.where(mask, value.to(x.dtype), x)


MASKED_FILL = register(
    name="masked_fill", onnx=_onnx_masked_fill, vmap=_masked_fill_vmap, jvp=_jvp.linear,
    kernel=_masked_fill_kernel, infer=_masked_fill_infer,
    args=("x", "mask", "value"), saves=("mask",), broadcasting=True, vjp=_masked_fill_vjp,
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype), rand((3, 4), seed=1) > 0, -1.5), {}),
        Sample((rand((3, 4), dtype), rand((4,), seed=2) > 0, rand((), dtype)), {}),
        Sample((rand((1, 4), dtype), rand((3, 1), seed=3) > 0, 2.0), {}),
        Sample((rand((4, 3), dtype).T, rand((3, 4), seed=4) > 0, rand((), dtype)), {})],
    error_samples=lambda: [((rand((3, 4)), rand((3, 4)), 1.0), {}, RuntimeError),
                           ((rand((3, 4)), rand((3, 4)) > 0, rand((2,))), {}, RuntimeError),
                           ((rand((3, 4)), rand((5,)) > 0, 1.0), {}, ValueError)],
    torch=lambda torch, x, mask, value: torch.masked_fill(x, mask, value))


def masked_fill(input, mask, value):
    """``value`` where ``mask`` is True, ``input`` elsewhere (mask broadcasts);
    differentiable in input and in a 0-d tensor ``value``."""
    return bind(MASKED_FILL, input, mask, _fill_value(value))


def _fill_value(value):
    if isinstance(value, (list, tuple)):
        value = np.asarray(value)
    if isinstance(value, np.generic):
        value = value.item()
    return value


def masked_fill_(input, mask, value):
    """Writes ``value`` into ``input`` where ``mask`` is true, in place
    (``Tensor.masked_fill_``), as PyTorch's."""
    return apply_inplace(MASKED_FILL, input, mask, _fill_value(value))


# ---------------------------------------------------------------- nonzero
def _nonzero_kernel(x, alloc=None):
    """The count sizes the (count, ndim) output first; each dim's indices are then
    written into its column."""
    xp = _devices.xp_of(x)
    d = distinct_values(x)
    if d is not x and d.size:
        # a broadcast view: count over its distinct memory first, so a huge one is
        # refused (or found empty) at once instead of scanned
        count = int(xp.count_nonzero(d)) * (x.size // d.size)
        _devices.check_alloc("nonzero", (count, x.ndim), np.int64)
    else:
        count = int(xp.count_nonzero(x))
    out = alloc((count, x.ndim), np.int64) if alloc is not None else \
        xp.empty((count, x.ndim), np.int64)
    if x.ndim and count:
        _nonzero_into(xp, x, out)
    return out


_CHUNK = 1 << 14  # elements per block of nonzero's scan: its only scratch


def _nonzero_into(xp, x, out):
    """Each dim's indices of ``x``'s nonzeros written into ``out``'s columns, block by
    block along dim 0 (a block's indices are the only scratch: nothing of the
    output's size is computed first and copied)."""
    row = max(1, x.size // max(x.shape[0], 1))
    step = max(1, _CHUNK // row)
    at = 0
    for i0 in range(0, x.shape[0], step):
        idx = xp.nonzero(x[i0:i0 + step])
        c = int(idx[0].size)
        if not c:
            continue
        col = out[at:at + c]
        xp.add(idx[0], i0, out=col[:, 0])
        for k in range(1, x.ndim):
            col[:, k] = idx[k]
        at += c


def _nonzero_infer(x, **attrs):
    if attrs:
        raise op_error("nonzero", f"takes no attributes, got {sorted(attrs)}", TypeError)
    if not hasattr(x, "shape"):
        raise op_error("nonzero", f"expected a tensor, got {type(x).__name__}", TypeError)
    return TensorSpec((None, len(x.shape)), np.dtype(np.int64))


NONZERO = register(
    name="nonzero", onnx=_onnx_nonzero, kind="dynamic", kernel=_nonzero_kernel,
    differentiable=False,
    infer=_nonzero_infer,
    samples=lambda dtype=np.float64: [
        Sample((np.where(rand((3, 4), seed=1) > 0, rand((3, 4), seed=2), 0).astype(dtype),), {}),
        Sample((rand((5,), seed=3) > 0,), {}),
        Sample((np.zeros((2, 0, 3), dtype),), {}),
        Sample((np.array(2.0, dtype),), {})],
    error_samples=lambda: [((rand((3,)),), {"as_tuple": True}, TypeError)],  # an attr it lacks
    torch=lambda torch, x: torch.nonzero(x))


def nonzero(input, *, as_tuple=False):
    """Indices of the non-zero elements: an (N, ndim) int64 tensor, or with
    ``as_tuple`` one 1-D tensor per dim."""
    if not hasattr(input, "shape"):
        raise op_error("nonzero", f"expected a Tensor, got {type(input).__name__}", TypeError)
    r = bind(NONZERO, input)
    if not as_tuple:
        return r
    if len(input.shape) == 0:
        return (getitem_raw(r, (slice(None), 0)) if r.shape[1] else
                bind(NONZERO, reshape(input, (1,)))[:, 0],)
    return tuple(getitem_raw(r, (slice(None), d)) for d in range(len(input.shape)))


def argwhere(input):
    """The indices of the nonzero elements, one row per element, as ``torch.argwhere``."""
    return nonzero(input)


composite(argwhere, infer=_nonzero_infer, kind="dynamic", differentiable=False,
          dynamic_kernel=_nonzero_kernel,  # sized first, written into the caller's memory
          samples=lambda dtype=np.float64: [
              Sample((np.where(rand((3, 4), seed=1) > 0, rand((3, 4), seed=2), 0).astype(dtype),),
                     {}),
              Sample((rand((5,), seed=3) > 0,), {})],
          error_samples=lambda: [(("a",), {}, TypeError)],
          torch=lambda torch, x: torch.argwhere(x))


# ---------------------------------------------------------------- masked_select
def _masked_select_infer(x, mask):
    _check_mask("masked_select", mask)
    _broadcast_shapes("masked_select", tuple(x.shape), tuple(mask.shape))
    return TensorSpec((None,), x.dtype)


def _masked_select_kernel(x, mask, alloc=None):
    _masked_select_infer(x, mask)
    xp = _devices.xp_of(x)
    shape = np.broadcast_shapes(x.shape, mask.shape)
    mb = xp.broadcast_to(mask, shape)
    n = int(xp.count_nonzero(mask)) * (mb.size // max(mask.size, 1))  # sized first
    _devices.check_alloc("masked_select", (n,), x.dtype)
    out = alloc((n,), x.dtype) if alloc is not None else xp.empty((n,), x.dtype)
    _compress_into(xp, mb.reshape(-1), xp.broadcast_to(x, shape).reshape(-1), out)
    return out


def _masked_select_vjp(ctx, g):
    mask = _raw(ctx.inputs[1])
    shape = tuple(np.broadcast_shapes(tuple(ctx.shapes[0]), tuple(mask.shape)))
    xp = _devices.xp_of(mask)
    # the registry sums this back over broadcast dims of x
    return ctx.m.index_add_into(g, shape, (xp.broadcast_to(mask, shape),)), None


MASKED_SELECT = register(
    name="masked_select", onnx=_onnx_masked_select, jvp=_jvp.linear, kind="dynamic",
    kernel=_masked_select_kernel,
    infer=_masked_select_infer, args=("x", "mask"), saves=("mask",), broadcasting=True,
    vjp=_masked_select_vjp,
    samples=lambda dtype=np.float64: [
        Sample((rand((3, 4), dtype), rand((3, 4), seed=1) > 0), {}),
        Sample((rand((4,), dtype), rand((3, 4), seed=2) > 0), {}),
        Sample((rand((4, 3), dtype).T, rand((3, 1), seed=3) > 0), {}),
        Sample((rand((3,), dtype), np.zeros(3, bool)), {})],
    error_samples=lambda: [((rand((3, 4)), rand((3, 4))), {}, RuntimeError),
                           ((rand((3, 4)), rand((5,)) > 0), {}, ValueError)],
    torch=lambda torch, x, mask: torch.masked_select(x, mask))


def masked_select(input, mask):
    """The elements of ``input`` where ``mask`` (broadcast) is True, as a 1-D tensor;
    differentiable in input."""
    return bind(MASKED_SELECT, input, mask)


def _scatter_back_vjp(ctx, g):
    """sort/topk: the values' gradient goes back to where each value came from."""
    gv = g[0]
    if gv is None:
        return (None,)
    shape = tuple(ctx.shapes[0])
    if not shape:
        return (gv,)
    idx = _raw(ctx.out[1])
    return (ctx.m.index_add_into(gv, shape, _grid(idx, ctx.attrs["dim"])),)


REDUCES = ("sum", "prod", "mean", "amax", "amin")


# ---------------------------------------------------------------- scatter_reduce
def _check_reduce(name, reduce, allowed=REDUCES):
    if reduce not in allowed:
        raise op_error(name, f"reduce argument must be either {', '.join(allowed[:-1])} or "
                             f"{allowed[-1]}, got {reduce!r}", RuntimeError)


def _sr_infer(x, index, src, dim, reduce, include_self=True):
    name = "scatter_reduce"
    _check_reduce(name, reduce)
    _check_int(name, index)
    d = normalize_dim(name, dim, len(x.shape))
    _same_ndim(name, input=x, index=index, src=src)
    _index_not_larger(name, index, src, -1, "src")
    _index_not_larger(name, index, x, d, "input")
    if np.dtype(src.dtype) != np.dtype(x.dtype):
        raise op_error(name, f"expected self.dtype to be equal to src.dtype, got "
                             f"{np.dtype(x.dtype)} and {np.dtype(src.dtype)}", RuntimeError)
    if np.dtype(x.dtype).kind == "b" and reduce != "amax" and reduce != "amin":
        raise op_error(name, f"reduce={reduce!r} is not implemented for bool tensors",
                       RuntimeError)
    return TensorSpec(tuple(x.shape), x.dtype)


def _identity(reduce, dt):
    dt = np.dtype(dt)
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dt.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if dt.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dt)
    return info.min if reduce == "amax" else info.max


def _sr_into(out, x, index, src, dim, reduce, include_self):
    """The scatter-reduce written into out (out may be x: in place) by one compiled
    loop over (before, dim, after) views; False where it does not apply."""
    if type(out) is not np.ndarray or not x.ndim or _overlaps(out, index, src) or (
            _overlaps(out, x) and not _same_memory(out, x)):
        return False
    views = [_dim3(a, dim) for a in (_cut(out, index.shape, dim), index,
                                     _src_part(src, index))]
    if any(v is None for v in views) or not _cpu_scatter._along_fits(views[0], views[2],
                                                                     views[1]):
        return False
    if not _same_memory(out, x):
        out[...] = x
    return _cpu_scatter.scatter_reduce_dim(*views, reduce, include_self,
                                           _identity(reduce, x.dtype))


def _sr_kernel(x, index, src, dim, reduce, include_self=True, out=None):
    _check_range("scatter_reduce", index, x, dim)
    if out is not None:
        if not _sr_into(out, x, index, src, dim, reduce, include_self):
            out[...] = _sr_kernel(x, index, src, dim, reduce, include_self)
        return out
    if type(x) is np.ndarray and x.ndim:  # the compiled loop (~3x NumPy's ufunc.at)
        out = np.empty_like(x, order="C")
        if _sr_into(out, x, index, src, dim, reduce, include_self):
            return out
    xp = _devices.xp_of(x)
    out = x.copy()
    if x.ndim == 0:  # one position: index is 0-d too
        grid = ()
        s = src
    else:
        grid = _grid(index, dim)
        s = _src_part(src, index)
    if not include_self:
        out[grid] = _identity(reduce, x.dtype)
    how = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum",
           "amin": "minimum"}[reduce]
    _devices.reduce_at(out, grid, s, how)
    if reduce == "mean":
        count = xp.ones(x.shape, dtype=np.int64)
        if not include_self:
            count[grid] = 0
        _devices.add_at(count, grid, xp.ones(index.shape, dtype=np.int64))
        count = xp.maximum(count, 1)  # untouched positions keep input (count 1)
        if _isf(out.dtype):
            out = out / count.astype(out.dtype)
        else:  # integer mean: floor division, as PyTorch
            out = (out // count).astype(out.dtype)
    return out


def _gather_at(m, t, index, dim):
    """``t`` at the scatter positions (shaped as index)."""
    if len(t.shape) == 0:
        return t
    return m.gather(t, dim, index)


def _scatter_sum(m, like, index, dim, v):
    """Zeros of ``like``'s shape and dtype with ``v`` (shaped as index) summed in at
    ``index`` along ``dim`` (a 0-d ``like`` takes them all)."""
    zero = m.zeros_like(like)
    if len(zero.shape) == 0:
        return zero + m.sum(v)
    return m.scatter_add(zero, dim, index, v)


def _recording(ctx):
    """Whether this adjoint is itself recorded (a higher-order gradient is wanted)."""
    from ..tensor import Tensor
    return any(isinstance(v, Tensor) for v in ctx.inputs)


def _weights(ctx, x, src):
    """``(w_self, w_src)``: d out / d input at each position, and d out[index] / d src
    at each scattered element (shaped as index), for the op's reduction. Computed with
    ``ctx.m``'s ops only (no host copy of an input), so they run wherever the adjoint
    does (an export's arrays, the GPU) and differentiate again."""
    m = ctx.m
    index = ctx.inputs[1]
    dim, reduce, inc = ctx.attrs["dim"], ctx.attrs["reduce"], ctx.attrs["include_self"]
    out = ctx.out
    src_p = _src_part(src, index) if len(src.shape) else src
    one_s = m.ones_like(src_p)
    one, zero = m.ones_like(out), m.zeros_like(out)
    hits = None  # how many src elements each position takes
    if not inc or reduce == "mean":
        hits = _scatter_sum(m, out, index, dim, one_s)
    # positions a scatter replaced (include_self=False) take nothing from input
    keep = one if inc else m.where(m.gt(hits, 0), zero, one)
    if reduce == "sum":
        return keep, one_s
    if reduce == "mean":
        c = m.clamp_min(hits + 1.0 if inc else hits, 1.0)  # untouched: input, count 1
        return keep / c, _gather_at(m, m.reciprocal(c), index, dim)
    if reduce in ("amax", "amin"):
        # as PyTorch, input's ties are counted even where include_self=False leaves
        # it out (then it takes no share)
        mself = m.where(m.eq(x, out), one, zero)
        msrc = m.where(m.eq(src_p, _gather_at(m, out, index, dim)), one_s, m.zeros_like(src_p))
        tied = m.clamp_min(mself + _scatter_sum(m, out, index, dim, msrc), 1.0)
        return mself * keep / tied, msrc / _gather_at(m, tied, index, dim)
    # prod, as PyTorch: the product of the others, exact where an element is zero
    zero_x = m.eq(x, 0)
    masked_x = m.where(zero_x, 1.0, x)
    w_self = m.scatter_reduce(masked_x, dim, index, src_p, "prod", include_self=inc) / masked_x
    if not inc:
        w_self = w_self * keep
    zero_s = m.eq(src_p, 0)
    nzs = _gather_at(m, _scatter_sum(m, out, index, dim, m.where(zero_s, one_s, 0.0)),
                     index, dim)  # how many zeros of src meet at each one's position
    if _recording(ctx) and bool(m.any(m.gt(nzs, 1))):
        raise RuntimeError("scatter_reduce: double backward is not supported for src when "
                           "more than one zero of src is scattered to the same position "
                           "(reduce='prod'), as in PyTorch")
    single = m.logical_and(zero_s, m.eq(nzs, 1))
    masked_src = m.where(single, 1.0, src_p)
    others = m.scatter_reduce(x, dim, index, masked_src, "prod", include_self=inc)
    w_src = m.where(single, _gather_at(m, others, index, dim),
                    _gather_at(m, out, index, dim) / m.where(zero_s, 1.0, src_p))
    return w_self, w_src


def _pad_src(m, gs, src_shape, index_shape):
    if tuple(src_shape) == tuple(index_shape):
        return gs
    return m.index_add_into(gs, tuple(src_shape), tuple(slice(0, n) for n in index_shape))


def _sr_vjp(ctx, g):
    x, index, src = ctx.inputs
    m = ctx.m
    w_self, w_src = _weights(ctx, x, src)
    gx = g * w_self if ctx.needs_input_grad[0] else None
    gsrc = None
    if ctx.needs_input_grad[2]:
        gsrc = _pad_src(m, _gather_at(m, g, index, ctx.attrs["dim"]) * w_src,
                        ctx.shapes[2], tuple(index.shape))
    return gx, None, gsrc


def _sr_jvp(ctx, tx, ti, tsrc):
    x, index, src = ctx.inputs
    m = ctx.m
    w_self, w_src = _weights(ctx, x, src)
    out = None if tx is None else tx * w_self
    if tsrc is not None:
        ts = _src_part(tsrc, index) if len(tsrc.shape) else tsrc
        part = _scatter_sum(m, ctx.out, index, ctx.attrs["dim"], ts * w_src)
        out = part if out is None else out + part
    return (out,)


def _sr_samples(dtype=np.float64):
    out = []
    base = rand((3, 4), dtype, seed=1)
    src = rand((3, 5), dtype, seed=2)
    idx = _int_sample(4, (3, 5), 3)
    for k, red in enumerate(REDUCES):
        for inc in (True, False):
            out.append(Sample((base, idx, src), {"dim": 1, "reduce": red, "include_self": inc}))
    # dim 0, a src larger than index, ties for amax, zeros for prod, 0-d
    out.append(Sample((rand((3, 4), dtype, seed=4), _int_sample(3, (2, 3), 5),
                       rand((4, 4), dtype, seed=6)), {"dim": 0, "reduce": "mean",
                                                      "include_self": True}))
    tie = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], dtype)
    out.append(Sample((tie, np.array([[0, 0, 2], [1, 1, 1]]),
                       np.array([[1.0, 0.5, 3.0], [0.5, -1.0, 0.5]], dtype)),
                      {"dim": 1, "reduce": "amax", "include_self": True}, False))
    out.append(Sample((tie, np.array([[0, 0, 2], [1, 1, 1]]),
                       np.array([[1.0, 0.5, 3.0], [0.5, -1.0, 0.5]], dtype)),
                      {"dim": 1, "reduce": "amin", "include_self": False}, False))
    zeros = np.array([[0.0, 2.0, 3.0], [1.5, -0.5, 2.0]], dtype)
    out.append(Sample((zeros, np.array([[0, 1, 1, 2], [0, 0, 2, 2]]),
                       np.array([[1.5, 0.0, 2.0, 0.5], [0.0, 0.0, 1.2, 0.0]], dtype)),
                      {"dim": 1, "reduce": "prod", "include_self": True}, False))
    one_zero = np.array([[0.0, 2.0, 3.0], [1.5, -0.5, 2.0]], dtype)
    out.append(Sample((one_zero, np.array([[0, 1, 1, 2], [0, 0, 2, 2]]),
                       np.array([[1.5, 0.0, 2.0, 0.5], [0.0, 1.1, 1.2, 0.0]], dtype)),
                      {"dim": 1, "reduce": "prod", "include_self": False}))
    out.append(Sample((np.array([[1, 5, 2]]), np.array([[0, 0, 2]]), np.array([[4, 3, 7]])),
                      {"dim": 1, "reduce": "mean", "include_self": True}, False))
    out.append(Sample((np.array([[1, 5, 2]]), np.array([[0, 0, 2]]), np.array([[4, 3, 7]])),
                      {"dim": 1, "reduce": "amax", "include_self": False}, False))
    return out


SCATTER_REDUCE = register(
    name="scatter_reduce", onnx=_onnx_scatter_reduce, kernel=_sr_kernel, infer=_sr_infer,
    args=("x", "index", "src"),
    saves=("x", "index", "src", "out"), vjp=_sr_vjp, jvp=_sr_jvp,
    vmap=_vmap.all_batched_dim(), samples=_sr_samples,
    error_samples=lambda: [
        ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4))),
         {"dim": 1, "reduce": "max", "include_self": True}, RuntimeError),
        ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4), np.float32)),
         {"dim": 1, "reduce": "sum", "include_self": True}, RuntimeError),
        ((rand((3, 4)), np.full((3, 4), 4), rand((3, 4))),
         {"dim": 1, "reduce": "amax", "include_self": True}, IndexError),
        ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4))),
         {"dim": 2, "reduce": "sum", "include_self": True}, IndexError),
        ((rand((3, 4)), _int_sample(3, (3, 4), 0).astype(np.float64), rand((3, 4))),
         {"dim": 1, "reduce": "sum", "include_self": True}, RuntimeError)],
    torch=lambda torch, x, index, src, dim, reduce, include_self=True: torch.scatter_reduce(
        x, dim, index, src[tuple(slice(0, n) for n in index.shape)], reduce,
        include_self=include_self))


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """A copy of ``input`` with the ``src`` values at ``index`` along ``dim`` reduced
    into it: ``reduce`` is "sum", "prod", "mean", "amax" or "amin"; with
    ``include_self=False`` input's values at the scattered positions are left out of
    the reduction. Differentiable in input and src (PyTorch's gradients: ties of
    amax/amin share it evenly)."""
    _check_reduce("scatter_reduce", reduce)
    d = normalize_dim("scatter_reduce", dim, len(input.shape))
    return bind(SCATTER_REDUCE, input, index, src, dim=d, reduce=reduce,
                include_self=bool(include_self))


METHODS = ("split chunk tensor_split unbind gather scatter_add scatter scatter_add_ scatter_ "
           "index_select take_along_dim masked_fill masked_fill_ nonzero argwhere masked_select")

