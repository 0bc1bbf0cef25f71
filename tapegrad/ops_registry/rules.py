"""Rules the registry derives from an op's other declarations."""

__all__ = ["diagonal"]


class _VjpCtx:
    __slots__ = ("inputs", "out", "attrs", "shapes", "dtypes", "needs_input_grad", "m", "op")


def diagonal(ctx, *tangents):
    """The forward-mode rule of an elementwise op, from its vjp: the Jacobian of an
    elementwise op is diagonal (per input and output, after broadcasting), so the vjp
    of a tangent, as the cotangent of output k, is input i's share of output k's
    tangent; the shares add up. One vjp call per (input with a tangent, output)."""
    op = ctx.op
    n = len(tangents)
    res = []
    for k in range(op.nout):
        total = None
        for i, t in enumerate(tangents):
            if t is None:
                continue
            c = _VjpCtx()
            c.inputs, c.out, c.attrs, c.shapes, c.dtypes, c.m, c.op = (
                ctx.inputs, ctx.out, ctx.attrs, ctx.shapes, ctx.dtypes, ctx.m, op)
            c.needs_input_grad = tuple(j == i for j in range(n))
            g = t if op.nout == 1 else tuple(t if j == k else None for j in range(op.nout))
            share = op.vjp(c, g)[i]
            if share is not None:
                total = share if total is None else total + share
        res.append(total)
    return tuple(res)
