"""ONNX forms of ops: the helpers that op declarations build their ``onnx=``
lowerings with, and ``lower_expression``, the form of an elementwise op from its
scalar expression (``tapegrad.onnx`` gives it to the expression ops that declare no
lowering of their own).

A lowering ``lower(b, st)`` emits the nodes of one op call through the export's
``Builder`` ``b`` (``tapegrad/onnx/export.py``): ``b.input(st, j)`` names input ``j``,
``b.output(st, k)`` output ``k``, ``b.node(op_type, inputs, outputs, **attributes)``
adds a node, ``b.refuse(st, why)`` refuses this call; ``st.attrs`` holds the call's
attributes.

Shapes that the capture saw are static in the graph except where a lowering keeps
them symbolic (a reshape copies its leading dims, Expand broadcasts size-1 dims,
slices and reductions name axes, recurrences scan over any length), so a graph
exported with ``dynamic_axes`` runs at other batch sizes and sequence lengths.
Pure data movement with a static pattern (advanced indexing, diagonals,
``unfold``) becomes one Gather of the flattened input at indices computed at export
by running the op's kernel on the element positions (``_static_take``).
"""
import math

import numpy as np

from ..fusion import expr as E

__all__ = ["lower_expression"]

INT_MAX = np.iinfo(np.int64).max
INT_MIN = np.iinfo(np.int64).min


def _dims(d, ndim):
    """``dim`` (None, an int or a sequence) as a list of non-negative axes."""
    if d is None:
        return None
    d = [d] if isinstance(d, (int, np.integer)) else list(d)
    return [int(a) % ndim if ndim else 0 for a in d]


def _common(b, st, js=None, dtype=None):
    """The inputs ``js`` cast to one dtype (``dtype``, default the promotion of the
    tensor inputs' dtypes)."""
    js = range(len(st.ins)) if js is None else js
    if dtype is None:
        dts = [b.dtype(st, j) for j in js if b.is_tensor(st, j)]
        dims = [b.dtype(st, j) for j in js if b.is_tensor(st, j) and len(b.shape(st, j))]
        dtype = np.result_type(*(dims or dts)) if dts else b.out_dtype(st)
    return [b.input(st, j, dtype) for j in js], np.dtype(dtype)


# ---------------------------------------------------------------- elementwise
def _simple(op_type, cast_out=False, **fixed):
    """``op_type`` over the inputs cast to one dtype (the output cast to the op's
    dtype when ``cast_out``)."""
    def lower(b, st):
        ins, _ = _common(b, st)
        if cast_out:
            y = b.node(op_type, ins, **fixed)
            b.cast(y, b.out_dtype(st), [b.output(st)])
        else:
            b.node(op_type, ins, [b.output(st)], **fixed)
    return lower


def _float_simple(op_type):
    """A float op; integer inputs are promoted (as the op's output dtype says)."""
    def lower(b, st):
        ins, _ = _common(b, st, dtype=b.out_dtype(st))
        b.node(op_type, ins, [b.output(st)])
    return lower


def _compare(op_type, negate=False):
    def lower(b, st):
        ins, dt = _common(b, st)
        if dt.kind == "b" and op_type != "Equal":
            ins = [b.cast(i, np.int32) for i in ins]
        if negate:
            b.node("Not", [b.node(op_type, ins)], [b.output(st)])
        else:
            b.node(op_type, ins, [b.output(st)])
    return lower


def _logical(op_type):
    def lower(b, st):
        ins = [b.input(st, j, np.bool_) for j in range(len(st.ins))]
        b.node(op_type, ins, [b.output(st)])
    return lower


def _bitwise(op_type, logical):
    def lower(b, st):
        ins, dt = _common(b, st)
        if dt.kind == "b":
            b.node(logical, ins, [b.output(st)])
            return
        if b.opset < 18:
            b.refuse(st, f"integer {op_type} needs opset_version 18 or newer")
        b.node(op_type, ins, [b.output(st)])
    return lower


def _int_identity(op_type):
    """Floor, Ceil, Round: the identity on integers."""
    def lower(b, st):
        x = b.input(st, 0)
        b.node(op_type if b.dtype(st, 0).kind == "f" else "Identity", [x], [b.output(st)])
    return lower


# ---------------------------------------------------------------- from an expression
_E_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
             "maximum": "Max", "minimum": "Min", "lt": "Less", "le": "LessOrEqual",
             "gt": "Greater", "ge": "GreaterOrEqual", "eq": "Equal", "and": "And",
             "or": "Or"}
_E_UNARY = {"neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh",
            "sigmoid": "Sigmoid", "erf": "Erf", "abs": "Abs", "sign": "Sign", "sin": "Sin",
            "cos": "Cos", "not": "Not", "softplus": "Softplus"}


def lower_expression(b, st):
    """An elementwise op from its scalar expression (``OpDef.expr``, or the fusion
    graph of a ``tg.elementwise`` op for the call's attributes)."""
    op = st.op
    dtype = b.out_dtype(st)
    if dtype.kind == "b":
        dtype = np.result_type(*[b.dtype(st, j) for j in range(len(st.ins))])
    names = [b.input(st, j, dtype) for j in range(len(st.ins))]
    fz = getattr(op, "fusion", None)
    if fz is not None and hasattr(fz, "graph") and getattr(fz, "nout", 0) == 1:
        ins, outs = fz.graph(st.attrs)
        out = outs[0]
    else:
        if st.attrs:
            b.refuse(st, f"attributes {sorted(st.attrs)} with a scalar expression")
        ins = [E.var(f"__onnx{k}") for k in range(len(op.args))]
        out = E.parse(op.expr, dict(zip(op.args, ins)))
    vals = dict(zip(ins, names))
    for n in E.topo([out]):
        if n in vals:
            continue
        if n.op == "const":
            vals[n] = b.const(np.asarray(n.value, dtype=dtype).reshape(()))
            continue
        a = [vals[x] for x in n.args]
        res = b.output(st) if n is out else b.fresh(op.name)
        if n.op in _E_BINARY:
            b.node(_E_BINARY[n.op], a, [res])
        elif n.op == "ne":
            b.node("Not", [b.node("Equal", a)], [res])
        elif n.op in _E_UNARY:
            b.node(_E_UNARY[n.op], a, [res])
        elif n.op == "where":
            b.node("Where", a, [res])
        elif n.op == "log1p":
            one = b.const(np.asarray(1, dtype=dtype))
            b.node("Log", [b.node("Add", [a[0], one])], [res])
        elif n.op == "expm1":
            one = b.const(np.asarray(1, dtype=dtype))
            b.node("Sub", [b.node("Exp", [a[0]]), one], [res])
        elif n.op == "rsqrt":
            b.node("Reciprocal", [b.node("Sqrt", [a[0]])], [res])
        elif n.op == "exp2":
            b.node("Pow", [b.const(np.asarray(2, dtype=dtype)), a[0]], [res])
        elif n.op == "logaddexp":  # max + (log 2 where equal, else log1p(exp(-|x - y|)))
            one = b.const(np.asarray(1, dtype=dtype))
            tail = b.node("Log", [b.node("Add", [one, b.node("Exp", [b.node("Neg", [
                b.node("Abs", [b.node("Sub", a)])])])])])
            tail = b.node("Where", [b.node("Equal", a), b.const(np.asarray(math.log(2.0), dtype)),
                                    tail])
            b.node("Add", [b.node("Max", a), tail], [res])
        elif n.op in ("log2", "log10"):
            base = b.const(np.asarray(math.log(2.0 if n.op == "log2" else 10.0), dtype=dtype))
            b.node("Div", [b.node("Log", [a[0]]), base], [res])
        else:
            b.refuse(st, f"{n.op!r} in its scalar expression has no ONNX node")
        vals[n] = res
    if vals[out] != b.output(st):
        b.node("Identity", [vals[out]], [b.output(st)])


# ---------------------------------------------------------------- shapes
def _identity(b, st):
    b.node("Identity", [b.input(st, 0)], [b.output(st)])


def _expand_to(b, x, src, target, out=1):
    """Broadcast ``x`` (shape ``src``) to ``target``; dims the input already has at
    full size are 1 in the Expand's shape (so symbolic dims stay symbolic)."""
    t = list(target)
    off = len(t) - len(src)
    for i, d in enumerate(src):
        if d == t[off + i]:
            t[off + i] = 1
    return b.node("Expand", [x, b.ints(t)], out)


# ---------------------------------------------------------------- static data movement
def _positions(op, shape, attrs):
    """The op's kernel run on the element positions (1-based, as float64; zeros the
    kernel fills in become -1)."""
    n = int(np.prod(shape))
    pos = np.arange(1, n + 1, dtype=np.float64).reshape(shape)
    out = op.kernel(pos, **attrs)
    return np.asarray(out).astype(np.int64) - 1


def _static_take(b, st, attrs=None):
    """A data-movement op as one Gather of the flattened input (positions from the
    kernel); positions it fills get zero (or ``value``)."""
    shape = b.shape(st, 0)
    attrs = st.attrs if attrs is None else attrs
    idx = _positions(st.op, shape, attrs)
    fill = None
    if (idx < 0).any():
        v = attrs.get("value", 0) if st.op.name == "pad" else 0
        fill = b.const(np.asarray([v or 0], b.out_dtype(st)))
    b.gather_static(b.input(st, 0), shape, idx, [b.output(st)], fill=fill)


def _index_positions(shape, index):
    return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index]


def _diag_like(b, st):
    _static_take(b, st)


# ---------------------------------------------------------------- reductions
def _pnorm(b, st, x, dt, p, axes, keep, out):
    shape = b.shape(st, 0)
    if not shape:
        axes = None
    if p == "fro":
        p = 2
    p = float(p)
    if p == 2:
        return b.reduce("ReduceL2", x, axes, keep, out)
    if p == 1:
        return b.reduce("ReduceL1", x, axes, keep, out)
    ax = b.node("Abs", [x])
    if p == np.inf:
        return b.reduce("ReduceMax", ax, axes, keep, out)
    if p == -np.inf:
        return b.reduce("ReduceMin", ax, axes, keep, out)
    if p == 0:
        nz = b.cast(b.node("Not", [b.node("Equal", [x, b.const(np.zeros((), dt))])]), dt)
        return b.reduce("ReduceSum", nz, axes, keep, out)
    s = b.reduce("ReduceSum", b.node("Pow", [ax, b.const(np.asarray(p, dt))]), axes, keep)
    return b.node("Pow", [s, b.const(np.asarray(1.0 / p, dt))], out)


def _norm(key):
    def lower(b, st):
        shape = b.shape(st, 0)
        dt = b.out_dtype(st)
        x = b.input(st, 0, dt)
        p = st.attrs.get(key, 2)
        p = 2 if p is None else p
        if isinstance(p, str) and p != "fro":
            b.refuse(st, f"the norm {p!r}")
        _pnorm(b, st, x, dt, p, _dims(st.attrs.get("dim"), len(shape)),
               st.attrs.get("keepdim", False), [b.output(st)])
    return lower


# ---------------------------------------------------------------- nn
def _planes(b, x, shape):
    """(N, C, H, W) -> (N, C, H * W), the batch symbolic unless a size is zero."""
    if 0 in shape:
        return b.reshape(x, [shape[0], shape[1], int(np.prod(shape[2:]))])
    return b.reshape(x, [0, 0, -1])
