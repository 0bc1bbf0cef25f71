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
``fold_rule``   ops whose example is itself a batch of samples (NCHW: convolutions,
                pools, interpolate): the vmap batch folded into N.

and the pieces single-op rules are built from (``batched_all``, ``pad_rank``,
``matmul_values``, ``loop``, the fallback). A rule for one op (matmul, permute,
getitem, conv2d...) is declared with its op, in the op's family file.
"""
import warnings

from ..dispatch import bind
from ..tensor import Tensor

__all__ = ["leading", "leading_all", "dim_attrs", "dim_attrs_flat", "all_batched_dim", "shape_attr",
           "fold_rule", "nchw_rule", "loop", "batched_all", "pad_rank", "matmul_values"]


def batched_all(ctx, values):
    """Every tensor input with the batch in front (unbatched ones broadcast, a view)."""
    m = ctx.m
    return [m.broadcast_to(m.unsqueeze(v, 0), (ctx.size,) + tuple(v.shape))
            if isinstance(v, Tensor) and not b else v for v, b in zip(values, ctx.batched)]


def leading(ctx, *values):
    return bind(ctx.op, *values, **ctx.attrs)


def leading_all(ctx, *values):
    """The op on the values, every tensor input batched (for ops whose inputs must
    have the same leading dims)."""
    return bind(ctx.op, *batched_all(ctx, values), **ctx.attrs)


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
        values = batched_all(ctx, values)
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
        values = batched_all(ctx, values)
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
        values = batched_all(ctx, values)
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


def pad_rank(ctx, values, rank):
    """Batched values given singleton dims after the batch up to an example rank."""
    m = ctx.m
    out = []
    for i, (v, b) in enumerate(zip(values, ctx.batched)):
        if b and isinstance(v, Tensor) and ctx.ndim(i) < rank:
            s = tuple(v.shape)
            v = m.reshape(v, s[:1] + (1,) * (rank - ctx.ndim(i)) + s[1:])
        out.append(v)
    return out


def matmul_values(m, op, x, y, bx, by, nx, ny):
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
