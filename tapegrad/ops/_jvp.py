"""Forward-mode rules shared by op families (``OpDef.jvp``).

A rule is ``jvp(ctx, *tangents)`` -> one tangent per output (a Tensor, or None for a
zero tangent); ``tangents[i]`` is None for an input without one. ``ctx`` holds the
call (``op``, ``inputs``, ``out``, ``attrs``, ``m``). Rules compute with ops, so a
tangent records and differentiates again like any value. Kinds of rule here:

``linear``       the op is linear in its float inputs together (views, indexing,
                 sums, copies): the op itself on the tangents (zeros for inputs
                 without one, 0 for numbers, which are the constant part of an affine
                 map such as ``masked_fill``'s value).
``multilinear``  linear in each float input separately (matmul, einsum, mul-like):
                 the sum over inputs of the op with that input replaced by its tangent.
``reduction``    each output element depends on the elements of one slice of the
                 input (``max``, ``prod``, ``var``, ``norm``, ``det``...): the
                 tangent summed against the op's own vjp of ones over that slice.
Elementwise ops derive theirs from their vjp (``ops_registry.rules.diagonal``).
"""
from ..dispatch import bind
from ..tensor import Tensor

__all__ = ["linear", "multilinear", "reduction", "reduction_over"]


def _is_float(a):
    return isinstance(a, Tensor) and a.is_floating_point()


def _seq(ctx, tangents):
    """The op's arguments with each float input replaced by its tangent (zeros
    when it has none) and each number by 0."""
    m = ctx.m
    args = []
    for a, t in zip(ctx.inputs, tangents):
        if t is not None:
            args.append(t)
        elif _is_float(a):
            args.append(m.zeros_like(a))
        elif type(a) is float or type(a) is int:
            args.append(type(a)(0))
        else:
            args.append(a)
    return args


def linear(ctx, *tangents):
    return bind(ctx.op, *_seq(ctx, tangents), **ctx.attrs)


def multilinear(ctx, *tangents):
    total = None
    for i, t in enumerate(tangents):
        if t is None:
            continue
        args = list(ctx.inputs)
        args[i] = t
        term = bind(ctx.op, *args, **ctx.attrs)
        if ctx.op.nout > 1:
            term = term[0]
        total = term if total is None else total + term
    return total


def _ones_cotangent(ctx):
    m = ctx.m
    outs = ctx.out if type(ctx.out) is tuple else (ctx.out,)
    g = tuple(m.ones_like(o) if k == 0 else None for k, o in enumerate(outs))
    return g if len(outs) > 1 else g[0]


def reduction_over(dims_of):
    """A reduction rule for an op whose reduced dims are ``dims_of(ctx)`` (a tuple of
    the input's dims, and whether the output keeps them)."""
    def rule(ctx, t, *rest):
        if t is None:
            return None
        grad_ctx = _GradCtx(ctx, (True,) + (False,) * len(rest))
        dx = ctx.op.vjp(grad_ctx, _ones_cotangent(ctx))[0]
        dims, keepdim = dims_of(ctx)
        m = ctx.m
        tangent = m.sum(dx * t, dim=dims, keepdim=keepdim) if dims else dx * t
        return (tangent,) + (None,) * (ctx.op.nout - 1)
    return rule


def _attr_dims(ctx):
    x = ctx.inputs[0]
    dim = ctx.attrs.get("dim", None)
    keepdim = bool(ctx.attrs.get("keepdim", False))
    if dim is None:
        return tuple(range(x.ndim)), keepdim
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:  # PyTorch: dim=() on these reductions means all dims
        return tuple(range(x.ndim)), keepdim
    return tuple(d % max(x.ndim, 1) for d in dims), keepdim


reduction = reduction_over(_attr_dims)


class _GradCtx:
    """A vjp's context built from a forward-mode context (a rule that runs the op's
    own vjp: the derivative is the same, only its use differs)."""
    __slots__ = ("inputs", "out", "attrs", "shapes", "dtypes", "needs_input_grad", "m",
                 "op")

    def __init__(self, ctx, needs):
        self.inputs = ctx.inputs
        self.out = ctx.out
        self.attrs = ctx.attrs
        self.shapes = ctx.shapes
        self.dtypes = ctx.dtypes
        self.needs_input_grad = needs
        self.m = ctx.m
        self.op = ctx.op
