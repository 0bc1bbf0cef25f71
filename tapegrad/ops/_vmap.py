"""Batching rules shared by op families (``OpDef.vmap``; see ``tapegrad/vmap.py``).

A rule is ``vmap(ctx, *values)`` -> the output value(s) with the batch at dim 0.
``ctx.batched[i]``: input ``i``'s value has the batch at its dim 0; ``ctx.ndim(i)``
is an example's rank of input ``i``; ``ctx.dim(d, i)``/``ctx.dims(ds, i)`` turn an
example's dims into the value's. Kinds of rule here:

``leading``     the op already maps over leading dims (linalg ops on stacks of
                matrices, copies, casts, ``one_hot``, pads of the last dims): the op
                on the values, unbatched inputs broadcast by the op itself.
``dim_attrs``   one tensor input and dims in attributes (reductions, softmax, scans,
                sort, flip...): the dims shifted past the batch; ``None`` (all dims)
                becomes an example's dims, or a flattened example for ops whose
                ``None`` means "flattened".
``shape_attr``  reshape/broadcast_to/sum_to: the batch prepended to the shape.
and rules for single ops next to them (matmul, permute, getitem, cat, stack...).
"""
import warnings

import numpy as np

from ..dispatch import bind
from ..tensor import Tensor

__all__ = ["leading", "dim_attrs", "dim_attrs_flat", "shape_attr", "all_batched_dim"]


def _batched_all(ctx, values):
    """Every tensor input with the batch in front (unbatched ones broadcast, a view)."""
    m = ctx.m
    return [m.broadcast_to(m.unsqueeze(v, 0), (ctx.size,) + tuple(v.shape))
            if isinstance(v, Tensor) and not b else v for v, b in zip(values, ctx.batched)]


def leading(ctx, *values):
    return bind(ctx.op, *values, **ctx.attrs)


def leading_all(ctx, *values):
    """The op on the values, every tensor input batched (for ops whose inputs must
    have the same leading dims)."""
    return bind(ctx.op, *_batched_all(ctx, values), **ctx.attrs)


def _shift(ctx, keys, flat_none):
    x = 0
    attrs = dict(ctx.attrs)
    for k in keys:
        if k not in attrs:
            continue
        d = attrs[k]
        if d is None:
            attrs[k] = None if flat_none else ctx.dims(None, x)
        elif isinstance(d, (tuple, list)):
            attrs[k] = ctx.dims(tuple(d), x) if d else ctx.dims(None, x)
        else:
            attrs[k] = ctx.dim(d, x)
    return attrs


def _scalar_example(ctx, values, keys):
    """A 0-d example (dim 0 or -1 name the scalar itself): the op on (B, 1) values
    over dim 1, its outputs back to (B,)."""
    m = ctx.m
    attrs = dict(ctx.attrs)
    for k in keys:
        if k in attrs:
            attrs[k] = (1,) if isinstance(attrs[k], (tuple, list)) else 1
    if "keepdim" in attrs:
        attrs["keepdim"] = False
    out = bind(ctx.op, m.unsqueeze(values[0], -1), *values[1:], **attrs)
    if isinstance(out, tuple):
        return tuple(m.reshape(o, (ctx.size,)) for o in out)
    return m.reshape(out, (ctx.size,))


def dim_attrs(*keys):
    """Rule for one batched tensor input (the first) and dims in ``keys``; a None
    dim means all of an example's dims."""
    keys = keys or ("dim",)

    def rule(ctx, *values):
        values = _batched_all(ctx, values)
        if ctx.ndim(0) == 0 and any(ctx.attrs.get(k) is not None for k in keys):
            return _scalar_example(ctx, values, keys)
        return bind(ctx.op, *values, **_shift(ctx, keys, False))
    return rule


def dim_attrs_flat(*keys):
    """As ``dim_attrs``, for ops whose ``dim=None`` means "over the flattened input"
    (argmax, prod, cumsum without dim...): the example is flattened first."""
    keys = keys or ("dim",)

    def rule(ctx, *values):
        m = ctx.m
        values = _batched_all(ctx, values)
        attrs = dict(ctx.attrs)
        if all(attrs.get(k) is None for k in keys if k in attrs):
            x = values[0]
            keep = attrs.get("keepdim", False)
            flat = m.reshape(x, (ctx.size, -1))
            for k in keys:
                if k in attrs:
                    attrs[k] = 1
            out = bind(ctx.op, flat, *values[1:], **attrs)
            if keep:
                shape = (ctx.size,) + (1,) * ctx.ndim(0)
                return tuple(m.reshape(o, shape) for o in out) if isinstance(out, tuple) \
                    else m.reshape(out, shape)
            return out
        if ctx.ndim(0) == 0:
            return _scalar_example(ctx, values, keys)
        return bind(ctx.op, *values, **_shift(ctx, keys, False))
    return rule


def all_batched_dim(*keys):
    """Several tensor inputs and dims in ``keys`` (cat, stack, gather, index_select,
    scatter...): every input batched, the dims shifted; ``new_dim`` keys count the
    output's rank (stack, unsqueeze)."""
    keys = keys or ("dim",)

    def rule(ctx, *values):
        values = _batched_all(ctx, values)
        return bind(ctx.op, *values, **_shift(ctx, keys, False))
    return rule


def shape_attr(key="shape"):
    """reshape, broadcast_to, sum_to, expand: the batch prepended to the shape, the
    value first given singleton dims so an example's dims line up on the right."""
    def rule(ctx, x, *rest):
        m = ctx.m
        shape = tuple(ctx.attrs[key])
        attrs = dict(ctx.attrs)
        if ctx.op.name in ("broadcast_to", "sum_to") and len(shape) != ctx.ndim(0):
            if ctx.op.name == "broadcast_to" and len(shape) > ctx.ndim(0):
                vs = tuple(x.shape)
                x = m.reshape(x, vs[:1] + (1,) * (len(shape) - ctx.ndim(0)) + vs[1:])
            elif ctx.op.name == "sum_to" and len(shape) < ctx.ndim(0):
                padded = (1,) * (ctx.ndim(0) - len(shape)) + shape
                attrs[key] = (ctx.size,) + padded
                return m.reshape(bind(ctx.op, x, *rest, **attrs), (ctx.size,) + shape)
        attrs[key] = (ctx.size,) + shape
        return bind(ctx.op, x, *rest, **attrs)
    return rule


_warned = set()


def loop(ctx, *values):
    """The op once per example, stacked: the fallback for an op without a rule, and
    for calls a rule does not cover; warns once per op."""
    op = ctx.op
    if op.name not in _warned:
        _warned.add(op.name)
        warnings.warn(f"vmap: {op.name} has no batching rule for this call; it runs as a "
                      f"loop over the batch ({ctx.size} calls)", RuntimeWarning, stacklevel=4)
    m = ctx.m
    outs = [bind(ctx.op, *[v[b] if bt else v for v, bt in zip(values, ctx.batched)],
                 **ctx.attrs) for b in range(ctx.size)]
    if ctx.op.nout == 1:
        return m.stack(outs)
    return tuple(m.stack([o[k] for o in outs]) for k in range(ctx.op.nout))


def _pad_rank(ctx, values, rank):
    """Batched values given singleton dims after the batch up to an example rank."""
    m = ctx.m
    out = []
    for i, (v, b) in enumerate(zip(values, ctx.batched)):
        if b and isinstance(v, Tensor) and ctx.ndim(i) < rank:
            s = tuple(v.shape)
            v = m.reshape(v, s[:1] + (1,) * (rank - ctx.ndim(i)) + s[1:])
        out.append(v)
    return out


def solve_rule(ctx, a, b):
    # both are stacks of matrices: line their batch dims up
    rank = max(ctx.ndim(0), ctx.ndim(1))
    a, b = _pad_rank(ctx, [a, b], rank)
    return bind(ctx.op, a, b, **ctx.attrs)


def permute_rule(ctx, x):
    n = ctx.ndim(0)
    dims = tuple(ctx.attrs["dims"])
    return bind(ctx.op, x, dims=(0,) + tuple((d % max(n, 1)) + 1 for d in dims))


def unsqueeze_rule(ctx, x):
    n = ctx.ndim(0) + 1
    d = ctx.attrs["dim"]
    return bind(ctx.op, x, dim=(d % n) + 1 if -n <= d < n else d)


def squeeze_rule(ctx, x):
    d = ctx.attrs.get("dim")
    if d is None:  # every size-1 dim of an example, never the batch
        d = tuple(i + 1 for i, s in enumerate(tuple(x.shape)[1:]) if s == 1)
        return bind(ctx.op, x, dim=d) if d else x
    return bind(ctx.op, x, dim=ctx.dims(d, 0))


def stack_rule(ctx, *values):
    values = _batched_all(ctx, values)
    n = ctx.ndim(0) + 1
    d = ctx.attrs["dim"]
    return bind(ctx.op, *values, dim=(d % n) + 1 if -n <= d < n else d)


def _matmul(m, op, x, y, bx, by, nx, ny):
    """``x @ y`` of values (batched or not, examples of ranks nx, ny >= 1)."""
    # vectors become matrices (and back), so batch dims always sit in front
    if nx == 1:
        x = m.unsqueeze(x, -2)
    if ny == 1:
        y = m.unsqueeze(y, -1)
    rx, ry = max(nx, 2), max(ny, 2)
    rank = max(rx, ry)
    if bx:
        s = tuple(x.shape)
        x = m.reshape(x, s[:1] + (1,) * (rank - rx) + s[1:])
    if by:
        s = tuple(y.shape)
        y = m.reshape(y, s[:1] + (1,) * (rank - ry) + s[1:])
    out = bind(op, x, y)
    if ny == 1:
        out = m.squeeze(out, -1)
    if nx == 1:
        out = m.squeeze(out, -2 if ny != 1 else -1)
    return out


def matmul_rule(ctx, x, y):
    if ctx.ndim(0) == 0 or ctx.ndim(1) == 0:
        return loop(ctx, x, y)
    m = ctx.m
    if not ctx.batched[0] and ctx.ndim(0) == 2 and ctx.batched[1]:
        # one matrix times a batch: one GEMM, the batch folded into the other side
        if ctx.ndim(1) == 1:                                  # (B, K) @ x.T -> (B, M)
            return bind(ctx.op, y, m.mT(x))
        if ctx.ndim(1) == 2:                                  # x @ (K, B*N) -> (B, M, N)
            s = tuple(y.shape)
            wide = m.reshape(m.movedim(y, 0, 1), (s[1], s[0] * s[2]))
            out = bind(ctx.op, x, wide)
            return m.movedim(m.reshape(out, (tuple(x.shape)[0], s[0], s[2])), 1, 0)
    return _matmul(ctx.m, ctx.op, x, y, ctx.batched[0], ctx.batched[1], ctx.ndim(0),
                   ctx.ndim(1))


def linear_rule(ctx, x, w, b):
    """Unbatched weights: linear maps over the input's leading dims already; batched
    ones: a batched matmul with the weight transposed, plus the bias."""
    m = ctx.m
    wb = ctx.batched[1]
    bb = b is not None and ctx.batched[2]
    if not wb and not bb:
        return bind(ctx.op, x, w, b)
    if ctx.ndim(0) == 0:
        return loop(ctx, x, w, b)
    if not wb:
        out = bind(ctx.op, x, w, None)
    else:
        from ..ops_registry import get
        nw = ctx.ndim(1)
        wt = m.mT(w) if nw == 2 else w
        out = _matmul(m, get("matmul"), x, wt, ctx.batched[0], wb, ctx.ndim(0), nw)
    if b is not None:
        if bb:
            s = tuple(b.shape)
            rank = len(tuple(out.shape)) - (1 if ctx.batched[0] or wb else 0)
            b = m.reshape(b, s[:1] + (1,) * (rank - len(s[1:])) + s[1:])
        out = out + b
    return out


def fold_rule(per_sample=(0,), shape_attr=None):
    """Ops whose example is itself a batch of samples along dim 0 (N of NCHW: convs,
    pools, interpolate, unfold/fold, group_norm, their adjoints): the vmap batch folds
    into N for the per-sample inputs (``shape_attr``, an input shape in the attrs,
    folds too); weights must be unbatched, else a loop."""
    def rule(ctx, *values):
        m = ctx.m
        if any(b for i, b in enumerate(ctx.batched) if i not in per_sample) or \
                any(ctx.ndim(i) < 1 for i in per_sample if i < len(values)):
            return loop(ctx, *values)
        vals = list(values)
        for i in per_sample:
            if i < len(vals) and isinstance(vals[i], Tensor):
                v = vals[i] if ctx.batched[i] else m.broadcast_to(
                    m.unsqueeze(vals[i], 0), (ctx.size,) + tuple(vals[i].shape))
                s = tuple(v.shape)
                vals[i] = m.reshape(v, (s[0] * s[1],) + s[2:])
        attrs = dict(ctx.attrs)
        if shape_attr is not None:
            shp = tuple(attrs[shape_attr])
            attrs[shape_attr] = (shp[0] * ctx.size,) + shp[1:]
        out = bind(ctx.op, *vals, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        res = tuple(m.reshape(o, (ctx.size, tuple(o.shape)[0] // ctx.size) + tuple(o.shape)[1:])
                    for o in outs)
        return res if isinstance(out, tuple) else res[0]
    return rule


nchw_rule = fold_rule()


def conv2d_rule(ctx, x, w, b):
    """Unbatched weights: the batch folds into N. Batched weights (or bias): a grouped
    convolution, the batch folded into the channels (groups times the batch)."""
    if not ctx.batched[1] and not (b is not None and ctx.batched[2]):
        return nchw_rule(ctx, x, w, b)
    m = ctx.m
    B = ctx.size
    x, w = _batched_all(ctx, [x, w, b])[:2]
    sx, sw = tuple(x.shape), tuple(w.shape)           # (B, N, C, H, W), (B, O, Cg, kh, kw)
    xg = m.reshape(m.movedim(x, 0, 1), (sx[1], B * sx[2]) + sx[3:])
    wg = m.reshape(w, (B * sw[1],) + sw[2:])
    bg = None
    if b is not None:
        bb = b if ctx.batched[2] else m.broadcast_to(m.unsqueeze(b, 0), (B,) + tuple(b.shape))
        bg = m.reshape(bb, (B * sw[1],))
    attrs = dict(ctx.attrs)
    attrs["groups"] = attrs.get("groups", 1) * B
    out = bind(ctx.op, xg, wg, bg, **attrs)           # (N, B*O, H', W')
    so = tuple(out.shape)
    return m.movedim(m.reshape(out, (so[0], B, sw[1]) + so[2:]), 1, 0)


def embedding_rule(ctx, indices, weight):
    """Unbatched weights map over any index shape; batched ones gather per example."""
    if not ctx.batched[1]:
        return bind(ctx.op, indices, weight, **ctx.attrs)
    m = ctx.m
    B = ctx.size
    idx = indices if ctx.batched[0] else m.broadcast_to(m.unsqueeze(indices, 0),
                                                        (B,) + tuple(indices.shape))
    ishape = tuple(idx.shape)[1:]
    D = tuple(weight.shape)[-1]
    flat = m.reshape(idx, (B, -1, 1))
    flat = m.broadcast_to(flat, (B, tuple(flat.shape)[1], D))
    out = m.reshape(m.take_along_dim(weight, flat, dim=1), (B,) + ishape + (D,))
    pad = ctx.attrs.get("padding_idx")
    if ctx.attrs.get("mask_padding") and pad is not None:
        out = m.where(m.unsqueeze(m.eq(idx, pad), -1), 0.0, out)
    return out


def getitem_rule(ctx, x):
    """Basic indexing (ints, slices, None, Ellipsis) with the batch kept in front;
    tensor or array indices run as a loop."""
    index = ctx.attrs["index"]
    idx = index if isinstance(index, tuple) else (index,)
    if not all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in idx) \
            or isinstance(index, bool):
        return loop(ctx, x)
    return bind(ctx.op, x, index=(slice(None),) + idx)


def einsum_rule(ctx, *values):
    eq = ctx.attrs["equation"]
    if "..." in eq or "->" not in eq:
        return loop(ctx, *values)
    ins, out = eq.split("->")
    terms = ins.split(",")
    used = set(eq)
    z = next(c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba" if c not in used)
    terms = [z + t if b else t for t, b in zip(terms, ctx.batched)]
    return bind(ctx.op, *values, equation=",".join(terms) + "->" + z + out)


def trace_rule(ctx, x):
    return ctx.m.sum(ctx.m.diagonal(x, 0, -2, -1), dim=-1)


def diagonal_rule(ctx, x):
    a = dict(ctx.attrs)
    a["dim1"] = ctx.dim(a["dim1"], 0)
    a["dim2"] = ctx.dim(a["dim2"], 0)
    return bind(ctx.op, x, **a)


def repeat_rule(ctx, x):
    sizes = tuple(ctx.attrs["sizes"])
    n = ctx.ndim(0)
    if len(sizes) > n:
        s = tuple(x.shape)
        x = ctx.m.reshape(x, s[:1] + (1,) * (len(sizes) - n) + s[1:])
    return bind(ctx.op, x, sizes=(1,) + sizes)


def _align(ctx, values, rank):
    """Batched values with singleton dims after the batch up to an example rank."""
    return _pad_rank(ctx, values, rank)


def outer_rule(ctx, x, y):
    m = ctx.m
    return m.mul(m.unsqueeze(x, -1), m.unsqueeze(y, -2))


def dot_rule(ctx, x, y):
    m = ctx.m
    return m.sum(m.mul(x, y), dim=-1)


def masked_fill_rule(ctx, x, mask, value):
    """A batched fill value (one per example) is ``where``; else broadcasting."""
    m = ctx.m
    if not isinstance(value, Tensor) or not ctx.batched[2]:
        rank = max(ctx.ndim(0), ctx.ndim(1))
        x, mask = _pad_rank(_Ctx2(ctx, (0, 1)), [x, mask], rank)
        return bind(ctx.op, x, mask, value)
    rank = max(ctx.ndim(0), ctx.ndim(1))
    x, mask, value = _pad_rank(ctx, [x, mask, value], rank)
    return m.where(mask, value.to(x.dtype), x)


class _Ctx2:
    """A rule context restricted to some inputs (for the helpers above)."""
    def __init__(self, ctx, idx):
        self.batched = tuple(ctx.batched[i] for i in idx)
        self.shapes = tuple(ctx.shapes[i] for i in idx)
        self.m, self.size = ctx.m, ctx.size

    def ndim(self, i):
        return len(self.shapes[i])


def roll_rule(ctx, x):
    dims = ctx.attrs.get("dims")
    if dims is None or dims == ():  # rolls the flattened example
        m = ctx.m
        flat = m.reshape(x, (ctx.size, -1))
        out = bind(ctx.op, flat, shifts=ctx.attrs["shifts"], dims=(1,))
        return m.reshape(out, tuple(x.shape))
    return bind(ctx.op, x, shifts=ctx.attrs["shifts"], dims=ctx.dims(dims, 0))


def pad_rule(ctx, x):
    """Pads of the last dims map over the batch; a mode whose kernel limits the rank
    (reflect on 2-D/3-D inputs) folds the batch into the first dim."""
    if ctx.attrs.get("mode", "constant") == "constant" or ctx.ndim(0) < 1:
        return bind(ctx.op, x, **ctx.attrs)
    m = ctx.m
    s = tuple(x.shape)
    folded = m.reshape(x, (s[0] * s[1],) + s[2:]) if ctx.ndim(0) >= 2 else x
    out = bind(ctx.op, folded, **ctx.attrs)
    return m.reshape(out, s[:2] + tuple(out.shape[1:])) if ctx.ndim(0) >= 2 else out


def index_select_rule(ctx, x, index):
    if not ctx.batched[1]:
        return bind(ctx.op, x, index, dim=ctx.dim(ctx.attrs["dim"], 0))
    m = ctx.m
    x = _batched_all(ctx, [x, index])[0]
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


def _grouped(ctx, x, w, b, chan_dim_w):
    """Batched weights of a convolution-like op as groups: x (B, N, C, ...) ->
    (N, B*C, ...), w (B, A, ...) -> (B*A, ...), bias (B*O,), groups times B."""
    m = ctx.m
    B = ctx.size
    sx, sw = tuple(x.shape), tuple(w.shape)
    xg = m.reshape(m.movedim(x, 0, 1), (sx[1], B * sx[2]) + sx[3:])
    wg = m.reshape(w, (B * sw[1],) + sw[2:])
    bg = None
    if b is not None:
        bb = b if ctx.batched[2] else m.broadcast_to(m.unsqueeze(b, 0), (B,) + tuple(b.shape))
        bg = m.reshape(bb, (-1,))
    attrs = dict(ctx.attrs)
    attrs["groups"] = attrs.get("groups", 1) * B
    return xg, wg, bg, attrs


def _ungroup(ctx, out):
    m = ctx.m
    so = tuple(out.shape)
    return m.movedim(m.reshape(out, (so[0], ctx.size, so[1] // ctx.size) + so[2:]), 1, 0)


def conv_transpose2d_rule(ctx, x, w, b):
    if not ctx.batched[1] and not (b is not None and ctx.batched[2]):
        return nchw_rule(ctx, x, w, b)
    x, w = _batched_all(ctx, [x, w, b])[:2]
    xg, wg, bg, attrs = _grouped(ctx, x, w, b, 0)
    return _ungroup(ctx, bind(ctx.op, xg, wg, bg, **attrs))


def conv2d_input_grad_rule(ctx, g, w):
    if not ctx.batched[1]:
        return fold_rule((0,), "input_shape")(ctx, g, w)
    g, w = _batched_all(ctx, [g, w])
    gg, wg, _, attrs = _grouped(ctx, g, w, None, 0)
    n, c = tuple(attrs["input_shape"])[:2]
    attrs["input_shape"] = (n, c * ctx.size) + tuple(attrs["input_shape"])[2:]
    return _ungroup(ctx, bind(ctx.op, gg, wg, **attrs))


def group_norm_rule(ctx, x, w, b):
    """The normalisation folds the batch into N; batched affine parameters apply after
    it, per example."""
    if not ctx.batched[1] and not (b is not None and ctx.batched[2]):
        return nchw_rule(ctx, x, w, b)
    m = ctx.m
    y = nchw_rule(_Ctx3(ctx, (True, False, False)), x, None, None) if ctx.batched[0] \
        else bind(ctx.op, x, None, None, **ctx.attrs)
    rank = ctx.ndim(0)  # (N, C, ...): the parameters line up with C
    def shaped(p, batched):
        if p is None:
            return None
        c = tuple(p.shape)[-1]
        shape = (1, c) + (1,) * (rank - 2)
        return m.reshape(p, ((ctx.size,) if batched else ()) + shape)
    if w is not None:
        y = y * shaped(w, ctx.batched[1])
    if b is not None:
        y = y + shaped(b, ctx.batched[2])
    return y


class _Ctx3:
    """The context with other batched flags (x batched, parameters passed as None)."""
    def __init__(self, ctx, batched):
        self.op, self.attrs, self.m, self.size, self.shapes = (ctx.op, ctx.attrs, ctx.m,
                                                               ctx.size, ctx.shapes)
        self.batched = batched

    def ndim(self, i):
        return len(self.shapes[i])


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


def index_add_into_rule(ctx, g):
    """The adjoint of indexing (scatter-add into zeros of ``shape``), batched as the
    index is."""
    idx = _batchable_index(ctx.attrs["index"])
    if idx is None or not ctx.batched[0]:
        return loop(ctx, g)
    return bind(ctx.op, g, index=idx, shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


def index_rule(ctx, x):
    """Advanced indexing with (unbatched) integer arrays, kept together in the index:
    the batch stays in front behind a leading full slice; other indices (masks,
    advanced indices split by a slice or None, whose dims NumPy moves to the front)
    run as a loop."""
    idx = _batchable_index(ctx.attrs["index"])
    if idx is None:
        return loop(ctx, x)
    return bind(ctx.op, x, index=idx)
