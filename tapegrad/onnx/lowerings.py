"""ONNX lowerings of the registry's ops, keyed by op name (``LOWERINGS``).

A lowering ``lower(b, st)`` emits the nodes of one op call through the ``Builder``
``b`` (``export.py``): ``b.input(st, j)`` names input ``j``, ``b.output(st, k)``
output ``k``, ``b.node(op_type, inputs, outputs, **attributes)`` adds a node, and
``st.attrs`` holds the call's attributes. ``support.attach`` sets each op's
``OpDef.onnx`` from this table; an op whose declaration sets ``onnx`` itself keeps it.

Shapes that the capture saw are static in the graph except where a lowering keeps
them symbolic (a reshape copies its leading dims, Expand broadcasts size-1 dims,
slices and reductions name axes, recurrences scan over any length), so a graph
exported with ``dynamic_axes`` runs at other batch sizes and sequence lengths.
Pure data movement with a static pattern (advanced indexing, diagonals,
``unfold``) becomes one Gather of the flattened input at indices computed at export
by running the op's kernel on the element positions.
"""
import numpy as np

from ..fusion import expr as E
from .export import UnsupportedOperatorError

__all__ = ["LOWERINGS"]

INT_MAX = np.iinfo(np.int64).max
INT_MIN = np.iinfo(np.int64).min


def _refuse(st, why):
    raise UnsupportedOperatorError(f"onnx.export: the op '{st.op.name}' cannot be exported "
                                   f"here: {why}")


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
            _refuse(st, f"integer {op_type} needs opset_version 18 or newer")
        b.node(op_type, ins, [b.output(st)])
    return lower


def _floor_divide(b, st):
    (x, y), dt = _common(b, st, dtype=b.out_dtype(st))
    if dt.kind == "f":
        b.node("Floor", [b.node("Div", [x, y])], [b.output(st)])
    else:  # Python's floor: (x - x mod y) / y, exact
        b.node("Div", [b.node("Sub", [x, b.node("Mod", [x, y], fmod=0)]), y], [b.output(st)])


def _remainder(b, st):
    (x, y), dt = _common(b, st, dtype=b.out_dtype(st))
    if dt.kind == "f":  # x - y floor(x / y)
        q = b.node("Floor", [b.node("Div", [x, y])])
        b.node("Sub", [x, b.node("Mul", [y, q])], [b.output(st)])
    else:
        b.node("Mod", [x, y], [b.output(st)], fmod=0)


def _fmod(b, st):
    (x, y), _ = _common(b, st, dtype=b.out_dtype(st))
    b.node("Mod", [x, y], [b.output(st)], fmod=1)


def _int_identity(op_type):
    """Floor, Ceil, Round: the identity on integers."""
    def lower(b, st):
        x = b.input(st, 0)
        b.node(op_type if b.dtype(st, 0).kind == "f" else "Identity", [x], [b.output(st)])
    return lower


def _trunc(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind != "f":
        b.node("Identity", [x], [b.output(st)])
        return
    neg = b.node("Less", [x, b.const(np.zeros((), b.dtype(st, 0)))])
    b.node("Where", [neg, b.node("Ceil", [x]), b.node("Floor", [x])], [b.output(st)])


def _isnan(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind == "f":
        b.node("IsNaN", [x], [b.output(st)])
    else:
        b.node("Not", [b.node("Equal", [x, x])], [b.output(st)])


def _isinf(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind == "f":
        b.node("IsInf", [x], [b.output(st)])
    else:
        b.node("Not", [b.node("Equal", [x, x])], [b.output(st)])


def _isfinite(b, st):
    x = b.input(st, 0)
    if b.dtype(st, 0).kind == "f":
        bad = b.node("Or", [b.node("IsNaN", [x]), b.node("IsInf", [x])])
        b.node("Not", [bad], [b.output(st)])
    else:
        b.node("Equal", [x, x], [b.output(st)])


def _signbit(b, st):
    x, dt = b.input(st, 0), b.dtype(st, 0)
    zero = b.const(np.zeros((), dt))
    neg = b.node("Less", [x, zero])
    if dt.kind != "f":
        b.node("Identity", [neg], [b.output(st)])
        return
    # -0.0: 1 / x is -inf
    negzero = b.node("And", [b.node("Equal", [x, zero]),
                             b.node("Less", [b.node("Reciprocal", [x]), zero])])
    b.node("Or", [neg, negzero], [b.output(st)])


def _atan2(b, st):
    """atan(y / x), moved by pi where x < 0 (x = 0: atan(+-inf) = +-pi/2)."""
    (y, x), dt = _common(b, st, dtype=b.out_dtype(st))
    zero = b.const(np.zeros((), dt))
    r = b.node("Atan", [b.node("Div", [y, x])])
    pi = b.node("Where", [b.node("GreaterOrEqual", [y, zero]), b.const(np.asarray(np.pi, dt)),
                          b.const(np.asarray(-np.pi, dt))])
    r = b.node("Add", [r, b.node("Where", [b.node("Less", [x, zero]), pi, zero])])
    both = b.node("And", [b.node("Equal", [x, zero]), b.node("Equal", [y, zero])])
    b.node("Where", [both, zero, r], [b.output(st)])


def _where(b, st):
    c = b.input(st, 0, np.bool_)
    (x, y), _ = _common(b, st, [1, 2], dtype=b.out_dtype(st))
    b.node("Where", [c, x, y], [b.output(st)])


def _clamp(b, st):
    dt = b.out_dtype(st)
    y = b.input(st, 0, dt)
    lo, hi = st.attrs.get("min"), st.attrs.get("max")
    if lo is not None:
        y = b.node("Max", [y, b.const(np.asarray(lo, dt))])
    if hi is not None:
        y = b.node("Min", [y, b.const(np.asarray(hi, dt))])
    b.node("Identity", [y], [b.output(st)])


def _clamp_tensor(b, st):
    dt = b.out_dtype(st)
    y = b.input(st, 0, dt)
    if b.literal(st, 1) is not None or b.is_tensor(st, 1):
        y = b.node("Max", [y, b.input(st, 1, dt)])
    if b.literal(st, 2) is not None or b.is_tensor(st, 2):
        y = b.node("Min", [y, b.input(st, 2, dt)])
    b.node("Identity", [y], [b.output(st)])


def _relu_backward(b, st):
    g, y = b.input(st, 0), b.input(st, 1)
    pos = b.node("Greater", [y, b.const(np.zeros((), b.dtype(st, 1)))])
    b.node("Where", [pos, g, b.const(np.zeros((), b.dtype(st, 0)))], [b.output(st)])


def _isin(b, st):
    dt = np.result_type(b.dtype(st, 0), b.dtype(st, 1))
    x, t = b.input(st, 0, dt), b.input(st, 1, dt)
    eq = b.node("Equal", [b.unsqueeze(x, [-1]), b.reshape(t, [-1])])
    hit = b.reduce("ReduceMax", b.cast(eq, np.int32), [-1], 0)
    hit = b.cast(hit, np.bool_)
    if st.attrs.get("invert"):
        hit = b.node("Not", [hit])
    b.node("Identity", [hit], [b.output(st)])


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
            _refuse(st, f"attributes {sorted(st.attrs)} with a scalar expression")
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
        else:
            _refuse(st, f"{n.op!r} in its scalar expression has no ONNX node")
        vals[n] = res
    if vals[out] != b.output(st):
        b.node("Identity", [vals[out]], [b.output(st)])


# ---------------------------------------------------------------- shapes
def _identity(b, st):
    b.node("Identity", [b.input(st, 0)], [b.output(st)])


def _cast(b, st):
    b.cast(b.input(st, 0), st.attrs["dtype"], [b.output(st)])


def _reshape(b, st):
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


def _permute(b, st):
    dims = st.attrs["dims"]
    n = len(b.shape(st, 0))
    b.node("Transpose", [b.input(st, 0)], [b.output(st)], perm=[int(d) % n for d in dims])


def _expand_to(b, x, src, target, out=1):
    """Broadcast ``x`` (shape ``src``) to ``target``; dims the input already has at
    full size are 1 in the Expand's shape (so symbolic dims stay symbolic)."""
    t = list(target)
    off = len(t) - len(src)
    for i, d in enumerate(src):
        if d == t[off + i]:
            t[off + i] = 1
    return b.node("Expand", [x, b.ints(t)], out)


def _broadcast_to(b, st):
    _expand_to(b, b.input(st, 0), b.shape(st, 0), b.out_shape(st), [b.output(st)])


def _squeeze(b, st):
    shape = b.shape(st, 0)
    d = _dims(st.attrs.get("dim"), len(shape))
    axes = [a for a in (range(len(shape)) if d is None else d) if shape[a] == 1]
    if not axes:
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
    else:
        b.squeeze(b.input(st, 0), axes, [b.output(st)])


def _unsqueeze(b, st):
    n = len(b.shape(st, 0)) + 1
    b.unsqueeze(b.input(st, 0), [int(st.attrs["dim"]) % n], [b.output(st)])


def _flip(b, st):
    shape = b.shape(st, 0)
    axes = _dims(st.attrs["dims"], len(shape))
    if not axes or not shape:
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
        return
    b.slice(b.input(st, 0), [-1] * len(axes), [INT_MIN] * len(axes), axes,
            [-1] * len(axes), [b.output(st)])


def _roll(b, st):
    shape = b.shape(st, 0)
    shifts, dims = st.attrs["shifts"], st.attrs.get("dims")
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    x = b.input(st, 0)
    if dims is None or (isinstance(dims, (tuple, list)) and not dims):
        flat = b.reshape(x, [-1])
        n = int(np.prod(shape))
        y = _roll_axis(b, flat, shifts[0], 0, n)
        b.node("Reshape", [y, b.ints(shape)], [b.output(st)])
        return
    for s, d in zip(shifts, _dims(dims, len(shape))):
        x = _roll_axis(b, x, s, d, shape[d])
    b.node("Identity", [x], [b.output(st)])


def _roll_axis(b, x, shift, axis, n):
    s = shift % n if n else 0
    if s == 0:
        return x
    tail = b.slice(x, [n - s], [INT_MAX], [axis])
    head = b.slice(x, [0], [n - s], [axis])
    return b.node("Concat", [tail, head], axis=axis)


def _repeat(b, st):
    sizes = list(st.attrs["sizes"])
    x = b.input(st, 0)
    extra = len(sizes) - len(b.shape(st, 0))
    if extra > 0:
        x = b.unsqueeze(x, list(range(extra)))
    b.node("Tile", [x, b.ints(sizes)], [b.output(st)])


def _cat(b, st):
    dt = b.out_dtype(st)
    nd = len(b.out_shape(st))
    ins = [b.input(st, j, dt) for j in range(len(st.ins))
           if not (len(b.shape(st, j)) == 1 and b.shape(st, j)[0] == 0 and nd > 1)]
    b.node("Concat", ins, [b.output(st)], axis=int(st.attrs.get("dim", 0)) % max(nd, 1))


def _stack(b, st):
    dt = b.out_dtype(st)
    nd = len(b.out_shape(st))
    d = int(st.attrs.get("dim", 0)) % nd
    ins = [b.unsqueeze(b.input(st, j, dt), [d]) for j in range(len(st.ins))]
    b.node("Concat", ins, [b.output(st)], axis=d)


def _pad(b, st):
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
                _static_take(b, st)
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


def _trilu(upper):
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


def _index(b, st):
    shape = b.shape(st, 0)
    idx = _index_positions(shape, st.attrs["index"])
    b.gather_static(b.input(st, 0), shape, idx, [b.output(st)])


def _getitem(b, st):
    index = st.attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    shape = b.shape(st, 0)
    basic = all(i is None or i is Ellipsis or isinstance(i, slice)
                or (isinstance(i, (int, np.integer)) and not isinstance(i, bool))
                for i in index)
    if not basic or sum(i is Ellipsis for i in index) > 1:
        _index(b, st)
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


def _index_put(b, st):
    shape = b.shape(st, 0)
    pos = _index_positions(shape, st.attrs["index"])
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
    v = _expand_to(b, v, b.shape(st, 1), pos.shape) if pos.shape != b.shape(st, 1) else v
    upd = b.reshape(v, [-1])
    y = b.node("ScatterElements", [flat, b.const(pos.reshape(-1), "index"), upd], axis=0)
    b.node("Reshape", [y, b.ints(shape)], [b.output(st)])


def _index_add_into(b, st):
    shape = tuple(st.attrs["shape"])
    pos = _index_positions(shape, st.attrs["index"])
    g = b.input(st, 0)
    g = _expand_to(b, g, b.shape(st, 0), pos.shape) if pos.shape != b.shape(st, 0) else g
    zeros = b.const(np.zeros(int(np.prod(shape)), b.out_dtype(st)))
    y = b.node("ScatterElements", [zeros, b.const(pos.reshape(-1), "index"),
                                   b.reshape(g, [-1])], axis=0, reduction="add")
    b.node("Reshape", [y, b.ints(shape)], [b.output(st)])


def _diag_like(b, st):
    _static_take(b, st)


def _unfold(b, st):
    _static_take(b, st)


def _fold(b, st):
    """``fold`` scatters-adds its columns: each column element goes where ``unfold``
    of the output takes it from."""
    from ..ops_registry import get
    a = st.attrs
    n, ckk, L = b.shape(st, 0)
    if 0 in b.shape(st, 0) or 0 in b.out_shape(st):
        b.node("Identity", [b.const(np.zeros(b.out_shape(st), b.out_dtype(st)))], [b.output(st)])
        return
    oh, ow = a["output_size"]
    kh, kw = a["kernel_size"] if isinstance(a["kernel_size"], tuple) else (a["kernel_size"],) * 2
    c = ckk // (kh * kw)
    out_shape = (1, c, oh, ow)
    attrs = {k: a[k] for k in ("kernel_size", "dilation", "padding", "stride")}
    dest = _positions(get("unfold"), out_shape, attrs)[0]   # (ckk, L): -1 = padding
    size = c * oh * ow
    dest = np.where(dest < 0, size, dest)                    # a slot thrown away
    x = b.reshape(b.input(st, 0), [0, -1])
    idx = b.const(dest.reshape(1, -1), "index")
    idx = b.node("Expand", [idx, b.node("Concat", [b.slice(b.node("Shape", [x]), [0], [1], [0]),
                                                    b.ints([dest.size])], axis=0)])
    zeros = b.node("Expand", [b.const(np.zeros((1, size + 1), b.out_dtype(st))),
                              b.node("Concat", [b.slice(b.node("Shape", [x]), [0], [1], [0]),
                                                b.ints([size + 1])], axis=0)])
    y = b.node("ScatterElements", [zeros, idx, x], axis=1, reduction="add")
    y = b.slice(y, [0], [size], [1])
    b.node("Reshape", [y, b.ints([0, c, oh, ow])], [b.output(st)])


def _gather(b, st):
    d = int(st.attrs["dim"]) % max(len(b.shape(st, 0)), 1)
    if not b.shape(st, 0):
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
        return
    b.node("GatherElements", [b.input(st, 0), b.input(st, 1, np.int64)], [b.output(st)], axis=d)


def _scatter(reduction):
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


def _scatter_reduce(b, st):
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
        _refuse(st, f"scatter_reduce {red!r} needs opset_version 18 or newer")
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


def _index_select(b, st):
    shape = b.shape(st, 0)
    d = int(st.attrs["dim"]) % max(len(shape), 1)
    idx = b.input(st, 1, np.int64)
    if not shape:
        b.node("Identity", [b.input(st, 0)], [b.output(st)])
        return
    if not b.shape(st, 1):
        idx = b.unsqueeze(idx, [0])
    b.node("Gather", [b.input(st, 0), idx], [b.output(st)], axis=d)


def _take_along_dim(b, st):
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
        x = _expand_to(b, x, xs, tx)
    if tuple(out) != ishp:
        idx = _expand_to(b, idx, ishp, out)
    b.node("GatherElements", [x, idx], [b.output(st)], axis=d)


def _masked_fill(b, st):
    dt = b.out_dtype(st)
    b.node("Where", [b.input(st, 1, np.bool_), b.input(st, 2, dt), b.input(st, 0, dt)],
           [b.output(st)])


def _nonzero(b, st):
    x = b.input(st, 0, np.bool_)
    if not b.shape(st, 0):
        x = b.unsqueeze(x, [0])
    nz = b.node("NonZero", [x])
    if not b.shape(st, 0):
        b.node("Transpose", [b.slice(nz, [0], [0], [0])], [b.output(st)], perm=[1, 0])
        return
    b.node("Transpose", [nz], [b.output(st)], perm=[1, 0])


def _masked_select(b, st):
    xs, ms = b.shape(st, 0), b.shape(st, 1)
    shape = tuple(np.broadcast_shapes(xs, ms))
    x, m = b.input(st, 0), b.input(st, 1, np.bool_)
    if xs != shape:
        x = _expand_to(b, x, xs, shape)
    if ms != shape:
        m = _expand_to(b, m, ms, shape)
    b.node("Compress", [b.reshape(x, [-1]), b.reshape(m, [-1])], [b.output(st)], axis=0)


def _unique(b, st):
    d = st.attrs.get("dim")
    x = b.input(st, 0)
    shape = b.shape(st, 0)
    if d is None:
        y, _, inv, cnt = b.node("Unique", [b.reshape(x, [-1])], 4, sorted=1)
        b.node("Identity", [y], [b.output(st, 0)])
        b.node("Reshape", [inv, b.ints(shape)], [b.output(st, 1)])
    else:
        d = int(d) % len(shape)
        y, _, inv, cnt = b.node("Unique", [x], 4, sorted=1, axis=d)
        b.node("Identity", [y], [b.output(st, 0)])
        b.node("Identity", [inv], [b.output(st, 1)])
    b.node("Identity", [cnt], [b.output(st, 2)])


def _topk_all(b, st, largest, k=None, dim=None):
    shape = b.shape(st, 0)
    x = b.input(st, 0)
    if not shape:
        return b.node("Identity", [x]), b.const(np.zeros((), np.int64))
    d = int(st.attrs.get("dim", -1) if dim is None else dim) % len(shape)
    k = shape[d] if k is None else k
    return b.node("TopK", [x, b.ints([k])], 2, axis=d, largest=int(largest), sorted=1)


def _sort(b, st):
    v, i = _topk_all(b, st, st.attrs.get("descending", False))
    b.node("Identity", [v], [b.output(st, 0)])
    b.node("Identity", [i], [b.output(st, 1)])


def _argsort(b, st):
    _, i = _topk_all(b, st, st.attrs.get("descending", False))
    b.node("Identity", [i], [b.output(st)])


def _topk(b, st):
    a = st.attrs
    v, i = _topk_all(b, st, a.get("largest", True), int(a["k"]), a.get("dim", -1))
    b.node("Identity", [v], [b.output(st, 0)])
    b.node("Identity", [i], [b.output(st, 1)])


# ---------------------------------------------------------------- reductions
def _reduce(op_type):
    def lower(b, st):
        shape = b.shape(st, 0)
        axes = _dims(st.attrs.get("dim"), len(shape))
        keep = st.attrs.get("keepdim", False)
        x = b.input(st, 0, b.out_dtype(st))
        if axes is None and not shape:
            b.node("Identity", [x], [b.output(st)])
            return
        b.reduce(op_type, x, axes, keep, [b.output(st)])
    return lower


def _reduce_bool(op_type):
    """amax/amin of bools: over int32."""
    def lower(b, st):
        if b.dtype(st, 0).kind != "b":
            _reduce(op_type)(b, st)
            return
        shape = b.shape(st, 0)
        axes = _dims(st.attrs.get("dim"), len(shape))
        y = b.reduce(op_type, b.cast(b.input(st, 0), np.int32), axes,
                     st.attrs.get("keepdim", False))
        b.cast(y, np.bool_, [b.output(st)])
    return lower


def _all_any(is_all):
    """any: a count of the true elements above 0; all: no false element (an empty
    reduction gives False and True)."""
    def lower(b, st):
        shape = b.shape(st, 0)
        axes = _dims(st.attrs.get("dim"), len(shape))
        x = b.input(st, 0, np.bool_)
        if is_all:
            x = b.node("Not", [x])
        x = b.cast(x, np.int64)
        n = b.reduce("ReduceSum", x, axes, st.attrs.get("keepdim", False)) if shape else x
        zero = b.const(np.zeros((), np.int64))
        b.node("Equal" if is_all else "Greater", [n, zero], [b.output(st)])
    return lower


def _sum_to(b, st):
    xs = b.shape(st, 0)
    target = tuple(st.attrs["shape"])
    lead = len(xs) - len(target)
    axes = list(range(lead)) + [lead + i for i, t in enumerate(target)
                                if t == 1 and xs[lead + i] != 1]
    x = b.input(st, 0)
    if axes:
        x = b.reduce("ReduceSum", x, axes, True)
    if lead:
        x = b.squeeze(x, list(range(lead)))
    b.node("Identity", [x], [b.output(st)])


def _arg(op_type):
    def lower(b, st):
        shape = b.shape(st, 0)
        d = st.attrs.get("dim")
        keep = int(bool(st.attrs.get("keepdim", False)))
        x = b.input(st, 0)
        if b.dtype(st, 0).kind == "b":
            x = b.cast(x, np.int32)
        if not shape:
            b.node("Identity", [b.const(np.zeros((), np.int64))], [b.output(st)])
            return
        if d is None:
            y = b.node(op_type, [b.reshape(x, [-1])], axis=0, keepdims=0)
            b.node("Reshape", [y, b.ints(b.out_shape(st))], [b.output(st)])
            return
        b.node(op_type, [x], [b.output(st)], axis=int(d) % len(shape), keepdims=keep)
    return lower


def _max_min(op_type, arg):
    def lower(b, st):
        shape = b.shape(st, 0)
        d = st.attrs.get("dim")
        keep = bool(st.attrs.get("keepdim", False))
        x = b.input(st, 0)
        if not shape:
            b.node("Identity", [x], [b.output(st, 0)])
            b.node("Identity", [b.const(np.zeros((), np.int64))], [b.output(st, 1)])
            return
        d = int(d) % len(shape)
        xi = b.cast(x, np.int32) if b.dtype(st, 0).kind == "b" else x
        v = b.reduce(op_type, xi, [d], keep)
        b.cast(v, b.out_dtype(st, 0), [b.output(st, 0)])
        b.node(arg, [xi], [b.output(st, 1)], axis=d, keepdims=int(keep))
    return lower


def _moments(b, st, axes, keep, correction):
    shape = b.shape(st, 0)
    dt = b.out_dtype(st)
    x = b.input(st, 0, dt)
    axes = list(range(len(shape))) if axes is None else axes
    n = int(np.prod([shape[a] for a in axes])) if shape else 1
    m = b.reduce("ReduceMean", x, axes, True) if shape else x
    dev = b.node("Sub", [x, m])
    ss = b.reduce("ReduceSum", b.node("Mul", [dev, dev]), axes, keep) if shape else \
        b.node("Mul", [dev, dev])
    return b.node("Div", [ss, b.const(np.asarray(max(n - correction, 0), dt))])


def _var(std):
    def lower(b, st):
        shape = b.shape(st, 0)
        a = st.attrs
        c = a.get("correction", 1)
        c = 1 if c is None else c
        v = _moments(b, st, _dims(a.get("dim"), len(shape)), a.get("keepdim", False), c)
        b.node("Sqrt" if std else "Identity", [v], [b.output(st)])
    return lower


def _logsumexp(b, st):
    shape = b.shape(st, 0)
    axes = _dims(st.attrs.get("dim"), len(shape))
    keep = st.attrs.get("keepdim", False)
    dt = b.out_dtype(st)
    x = b.input(st, 0, dt)
    if not shape:
        b.node("Identity", [x], [b.output(st)])
        return
    axes = list(range(len(shape))) if axes is None else axes
    m = b.reduce("ReduceMax", x, axes, True)
    zero = b.const(np.zeros((), dt))
    m = b.node("Where", [b.node("IsInf", [m]), zero, m])   # all -inf: no shift
    s = b.reduce("ReduceSum", b.node("Exp", [b.node("Sub", [x, m])]), axes, keep)
    mm = m if keep else b.squeeze(m, axes)
    b.node("Add", [b.node("Log", [s]), mm], [b.output(st)])


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
            _refuse(st, f"the norm {p!r}")
        _pnorm(b, st, x, dt, p, _dims(st.attrs.get("dim"), len(shape)),
               st.attrs.get("keepdim", False), [b.output(st)])
    return lower


def _cumsum(reverse):
    def lower(b, st):
        shape = b.shape(st, 0)
        x = b.input(st, 0, b.out_dtype(st))
        if not shape:
            b.node("Identity", [x], [b.output(st)])
            return
        d = int(st.attrs["dim"]) % len(shape)
        b.node("CumSum", [x, b.const(np.asarray(d, np.int64))], [b.output(st)],
               reverse=int(reverse))
    return lower


def _cumprod(b, st):
    shape = b.shape(st, 0)
    x = b.input(st, 0, b.out_dtype(st))
    if not shape or shape[int(st.attrs["dim"]) % len(shape)] <= 1:
        b.node("Identity", [x], [b.output(st)])
        return
    d = int(st.attrs["dim"]) % len(shape)
    parts = b.split(x, [1] * shape[d], d)
    acc = [parts[0]]
    for p in parts[1:]:
        acc.append(b.node("Mul", [acc[-1], p]))
    b.node("Concat", acc, [b.output(st)], axis=d)


# ---------------------------------------------------------------- linear algebra
def _matmul(b, st):
    (x, y), _ = _common(b, st, dtype=b.out_dtype(st))
    b.node("MatMul", [x, y], [b.output(st)])


def _einsum(b, st):
    eq = st.attrs["equation"].replace(" ", "")
    ins, _ = _common(b, st, dtype=b.out_dtype(st))
    if "->" not in eq:  # the implicit output: the letters seen once, sorted
        lhs = eq.replace(",", "").replace(".", "")
        eq = eq + "->" + ("..." if "..." in eq else "") + "".join(
            sorted(c for c in set(lhs) if lhs.count(c) == 1))
    b.node("Einsum", ins, [b.output(st)], equation=eq)


def _tensordot(b, st):
    na, nb = len(b.shape(st, 0)), len(b.shape(st, 1))
    dims = st.attrs["dims"]
    if isinstance(dims, (int, np.integer)):
        da, db = list(range(na - dims, na)), list(range(dims))
    else:
        da, db = [[int(x) for x in (d if isinstance(d, (tuple, list)) else [d])] for d in dims]
        da, db = [x % na for x in da], [x % nb for x in db]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    la = [next(letters) for _ in range(na)]
    lb = [next(letters) for _ in range(nb)]
    for i, j in zip(da, db):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in da] + [c for k, c in enumerate(lb) if k not in db]
    eq = "".join(la) + "," + "".join(lb) + "->" + "".join(out)
    ins, _ = _common(b, st, dtype=b.out_dtype(st))
    b.node("Einsum", ins, [b.output(st)], equation=eq)


def _outer(b, st):
    (x, y), _ = _common(b, st, dtype=b.out_dtype(st))
    b.node("Mul", [b.unsqueeze(x, [1]), b.unsqueeze(y, [0])], [b.output(st)])


def _trace(b, st):
    n, m = b.shape(st, 0)
    k = min(n, m)
    idx = np.arange(k) * m + np.arange(k)
    d = b.gather_static(b.input(st, 0, b.out_dtype(st)), (n, m), idx)
    b.reduce("ReduceSum", d, [0], False, [b.output(st)])


def _det(b, st):
    b.node("Det", [b.input(st, 0)], [b.output(st)])


def _slogdet(b, st):
    d = b.node("Det", [b.input(st, 0)])
    b.node("Sign", [d], [b.output(st, 0)])
    b.node("Log", [b.node("Abs", [d])], [b.output(st, 1)])


# ---------------------------------------------------------------- nn
def _softmax(op_type):
    def lower(b, st):
        shape = b.shape(st, 0)
        x = b.input(st, 0, b.out_dtype(st))
        if not shape:
            x = b.unsqueeze(x, [0])
            y = b.node(op_type, [x], axis=0)
            b.squeeze(y, [0], [b.output(st)])
            return
        b.node(op_type, [x], [b.output(st)], axis=int(st.attrs.get("dim", -1)) % len(shape))
    return lower


def _linear(b, st):
    x, w = b.input(st, 0), b.input(st, 1)
    bias = b.input(st, 2) if b.is_tensor(st, 2) else ""
    xs, ws = b.shape(st, 0), b.shape(st, 1)
    if len(xs) == 2 and len(ws) == 2:
        b.node("Gemm", [x, w] + ([bias] if bias else []), [b.output(st)], transB=1)
        return
    wt = b.node("Transpose", [w], perm=[1, 0]) if len(ws) == 2 else w
    if bias:
        b.node("Add", [b.node("MatMul", [x, wt]), bias], [b.output(st)])
    else:
        b.node("MatMul", [x, wt], [b.output(st)])


def _conv2d(b, st):
    a = st.attrs
    (pt, pb), (pl, pr) = a["padding"]
    ins = [b.input(st, 0), b.input(st, 1)]
    if b.is_tensor(st, 2):
        ins.append(b.input(st, 2))
    kh, kw = b.shape(st, 1)[2:]
    b.node("Conv", ins, [b.output(st)], kernel_shape=[kh, kw], strides=list(a["stride"]),
           pads=[pt, pl, pb, pr], dilations=list(a["dilation"]), group=a["groups"])


def _conv_transpose2d(b, st):
    a = st.attrs
    ph, pw = a["padding"]
    ins = [b.input(st, 0), b.input(st, 1)]
    if b.is_tensor(st, 2):
        ins.append(b.input(st, 2))
    kh, kw = b.shape(st, 1)[2:]
    b.node("ConvTranspose", ins, [b.output(st)], kernel_shape=[kh, kw],
           strides=list(a["stride"]), pads=[ph, pw, ph, pw], dilations=list(a["dilation"]),
           group=a["groups"], output_padding=list(a["output_padding"]))


def _conv2d_input_grad(b, st):
    a = st.attrs
    (pt, pb), (pl, pr) = a["padding"]
    kh, kw = b.shape(st, 1)[2:]
    H, W = a["input_shape"][2:]
    oh, ow = b.shape(st, 0)[2:]
    (sh, sw), (dh, dw) = a["stride"], a["dilation"]
    eh = H - ((oh - 1) * sh + (kh - 1) * dh + 1 - pt - pb)
    ew = W - ((ow - 1) * sw + (kw - 1) * dw + 1 - pl - pr)
    b.node("ConvTranspose", [b.input(st, 0), b.input(st, 1)], [b.output(st)],
           kernel_shape=[kh, kw], strides=[sh, sw], pads=[pt, pl, pb, pr],
           dilations=[dh, dw], group=a["groups"], output_padding=[eh, ew])


def _max_pool2d(b, st):
    a = st.attrs
    ph, pw = a.get("padding", (0, 0))
    x = b.input(st, 0)
    v, i = b.node("MaxPool", [x], 2, kernel_shape=list(a["kernel_size"]),
                  strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                  ceil_mode=int(bool(a.get("ceil_mode", False))),
                  dilations=list(a.get("dilation", (1, 1))))
    b.node("Identity", [v], [b.output(st, 0)])
    H, W = b.shape(st, 0)[2:]  # ONNX's indices run over the whole tensor, ours per plane
    b.node("Mod", [i, b.const(np.asarray(H * W, np.int64))], [b.output(st, 1)])


def _avg_pool2d(b, st):
    a = st.attrs
    ph, pw = a.get("padding", (0, 0))
    kh, kw = a["kernel_size"]
    div = a.get("divisor_override")
    kw_ = dict(kernel_shape=[kh, kw], strides=list(a["stride"]), pads=[ph, pw, ph, pw],
               ceil_mode=int(bool(a.get("ceil_mode", False))),
               count_include_pad=int(bool(a.get("count_include_pad", True))))
    if div:
        kw_["count_include_pad"] = 1
        if kw_["ceil_mode"]:
            _refuse(st, "divisor_override with ceil_mode")
        y = b.node("AveragePool", [b.input(st, 0)], **kw_)
        b.node("Mul", [y, b.const(np.asarray(kh * kw / div, b.out_dtype(st)))],
               [b.output(st)])
        return
    b.node("AveragePool", [b.input(st, 0)], [b.output(st)], **kw_)


def _planes(b, x, shape):
    """(N, C, H, W) -> (N, C, H * W), the batch symbolic unless a size is zero."""
    if 0 in shape:
        return b.reshape(x, [shape[0], shape[1], int(np.prod(shape[2:]))])
    return b.reshape(x, [0, 0, -1])


def _max_pool2d_gather(b, st):
    x, idx = b.input(st, 0), b.input(st, 1, np.int64)
    g = b.node("GatherElements", [_planes(b, x, b.shape(st, 0)),
                                  _planes(b, idx, b.shape(st, 1))], axis=2)
    b.node("Reshape", [g, b.node("Shape", [idx])], [b.output(st)])


def _max_pool2d_input_grad(b, st):
    N, C, H, W = st.attrs["input_shape"]
    g, idx = b.input(st, 0), b.input(st, 1, np.int64)
    zeros = b.const(np.zeros((N, C, H * W), b.out_dtype(st)))
    y = b.node("ScatterElements", [zeros, _planes(b, idx, b.shape(st, 1)),
                                   _planes(b, g, b.shape(st, 0))], axis=2, reduction="add")
    b.node("Reshape", [y, b.ints([N, C, H, W])], [b.output(st)])


def _embedding(b, st):
    idx = b.input(st, 0, np.int64)
    y = b.node("Gather", [b.input(st, 1), idx], axis=0)
    p = st.attrs.get("padding_idx")
    if st.attrs.get("mask_padding") and p is not None:
        p = p % b.shape(st, 1)[0]
        hit = b.unsqueeze(b.node("Equal", [idx, b.const(np.asarray(p, np.int64))]), [-1])
        y = b.node("Where", [hit, b.const(np.zeros((), b.out_dtype(st))), y])
    b.node("Identity", [y], [b.output(st)])


def _embedding_backward(b, st):
    a = st.attrs
    g, idx = b.input(st, 0), b.input(st, 1, np.int64)
    D = b.shape(st, 0)[-1]
    zeros = b.const(np.zeros((a["num_weights"], D), b.out_dtype(st)))
    y = b.node("ScatterND", [zeros, b.unsqueeze(idx, [-1]), g], reduction="add")
    p = a.get("padding_idx")
    if p is not None:
        keep = np.ones((a["num_weights"], 1), b.out_dtype(st))
        keep[p] = 0
        y = b.node("Mul", [y, b.const(keep)])
    b.node("Identity", [y], [b.output(st)])


def _one_hot(b, st):
    n = b.out_shape(st)[-1]
    idx = b.unsqueeze(b.input(st, 0, np.int64), [-1])
    eq = b.node("Equal", [idx, b.const(np.arange(n, dtype=np.int64))])
    b.cast(eq, b.out_dtype(st), [b.output(st)])


def _group_norm(b, st):
    a = st.attrs
    shape = b.shape(st, 0)
    dt = b.out_dtype(st)
    G = a["num_groups"]
    x = b.input(st, 0)
    xs = b.node("Shape", [x])
    g = b.reshape(x, [0, G, -1])
    m = b.reduce("ReduceMean", g, [2], True)
    d = b.node("Sub", [g, m])
    v = b.reduce("ReduceMean", b.node("Mul", [d, d]), [2], True)
    y = b.node("Div", [d, b.node("Sqrt", [b.node("Add", [v, b.const(np.asarray(a["eps"], dt))])])])
    y = b.node("Reshape", [y, xs])
    cshape = [shape[1]] + [1] * (len(shape) - 2)
    if b.is_tensor(st, 1):
        y = b.node("Mul", [y, b.reshape(b.input(st, 1), cshape)])
    if b.is_tensor(st, 2):
        y = b.node("Add", [y, b.reshape(b.input(st, 2), cshape)])
    b.node("Identity", [y], [b.output(st)])


def _bins(n, m, dtype):
    """(m, n): row i averages adaptive pooling's bin i of n inputs."""
    A = np.zeros((m, n), dtype)
    for i in range(m):
        lo, hi = (i * n) // m, -((-(i + 1) * n) // m)
        A[i, lo:hi] = 1.0 / (hi - lo)
    return A


def _area(b, st, x, shape):
    """Mode 'area' (adaptive average pooling): a matrix product per spatial axis."""
    out = b.out_shape(st)
    nd = len(shape) - 2
    dt = b.out_dtype(st)
    y = x
    for k in range(nd):
        A = _bins(shape[2 + k], out[2 + k], dt)
        # contract axis 2 + k with A^T: move it last, MatMul, move it back
        perm = list(range(len(shape)))
        perm[2 + k], perm[-1] = perm[-1], perm[2 + k]
        if 2 + k != len(shape) - 1:
            y = b.node("Transpose", [y], perm=perm)
        y = b.node("MatMul", [y, b.const(A.T.copy())])
        if 2 + k != len(shape) - 1:
            y = b.node("Transpose", [y], perm=perm)
    b.node("Identity", [y], [b.output(st)])


def _interpolate(b, st):
    a = st.attrs
    mode = a.get("mode", "nearest")
    shape = b.shape(st, 0)
    x = b.input(st, 0)
    ac = bool(a.get("align_corners"))
    kw = {}
    if mode == "nearest":
        kw = dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor")
    elif mode == "nearest-exact":
        kw = dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                  nearest_mode="round_prefer_ceil")
    elif mode in ("linear", "bilinear", "trilinear", "bicubic"):
        kw = dict(mode="cubic" if mode == "bicubic" else "linear",
                  coordinate_transformation_mode="align_corners" if ac else "pytorch_half_pixel")
        if mode == "bicubic":
            kw["cubic_coeff_a"] = -0.75
    elif mode == "area":
        _area(b, st, x, shape)
        return
    else:
        _refuse(st, f"interpolate mode {mode!r}")
    scales = a.get("scales")
    if scales is not None and not ac and all(s is not None for s in scales):
        sc = b.const(np.asarray([1.0, 1.0] + [float(s) for s in scales], np.float32))
        b.node("Resize", [x, "", sc], [b.output(st)], **kw)
        return
    size = list(b.out_shape(st)[2:])
    lead = b.slice(b.node("Shape", [x]), [0], [2], [0])
    sizes = b.node("Concat", [lead, b.ints(size)], axis=0)
    del shape
    b.node("Resize", [x, "", "", sizes], [b.output(st)], **kw)


# ---------------------------------------------------------------- recurrences
def _zeros_state(b, gates, size, dtype):
    """Zeros (B, size), B the batch of the (T, B, k) ``gates``: the default initial
    state, symbolic in the batch."""
    bdim = b.slice(b.node("Shape", [gates]), [1], [2], [0])
    shp = b.node("Concat", [bdim, b.ints([size])], axis=0)
    value = b.helper.make_tensor("zero", b.onnx_type(dtype), [1], [0])
    return b.node("ConstantOfShape", [shp], value=value)


def _state(b, st, j, gates, size):
    v = b.literal(st, j)
    if isinstance(v, np.ndarray) and not v.any():
        return _zeros_state(b, gates, size, b.dtype(st, j))
    return b.input(st, j)


def _scan(b, st, body_nodes, states, scan_outs, dtype, reverse):
    """A Scan over the time axis of input 0: ``states`` (names of the initial
    states), body inputs ``s_k`` (states) and ``x_t``; ``scan_outs`` the number of
    per-step outputs after the new states."""
    h = b.helper
    t = b.onnx_type(dtype)
    ins = [h.make_tensor_value_info(f"s{k}_in", t, None) for k in range(len(states))]
    ins.append(h.make_tensor_value_info("x_t", t, None))
    outs = [h.make_tensor_value_info(f"s{k}_out", t, None) for k in range(len(states))]
    outs += [h.make_tensor_value_info(f"y{k}_out", t, None) for k in range(scan_outs)]
    body = h.make_graph(body_nodes, b.fresh("scan_body"), ins, outs)
    n = len(states) + scan_outs
    res = b.node("Scan", states + [b.input(st, 0)], n, body=body, num_scan_inputs=1,
                 scan_input_directions=[int(reverse)],
                 scan_output_directions=[int(reverse)] * scan_outs)
    return res[len(states):]


class _Body:
    """Nodes of a scan body (names local to it; outer names may be read)."""

    def __init__(self, b):
        self.b, self.nodes, self.k = b, [], 0

    def __call__(self, op_type, inputs, out=None, **attrs):
        if out is None:
            self.k += 1
            out = f"b{self.k}"
        outs = [out] if isinstance(out, str) else list(out)
        self.nodes.append(self.b.helper.make_node(op_type, inputs, outs, **attrs))
        return out


def _lstm_layer(b, st):
    T, B, G = b.shape(st, 0)
    H = G // 4
    dt = b.dtype(st, 0)
    h0 = _state(b, st, 1, b.input(st, 0), H)
    c0 = _state(b, st, 2, b.input(st, 0), H)
    wT = b.node("Transpose", [b.input(st, 3)], perm=[1, 0])
    n = _Body(b)
    z = n("Add", ["x_t", n("MatMul", ["s0_in", wT])])
    i, f, g, o = n("Split", [z, b.ints([H] * 4)], ["gi", "gf", "gg", "go"], axis=1)
    i, f, g, o = n("Sigmoid", [i]), n("Sigmoid", [f]), n("Tanh", [g]), n("Sigmoid", [o])
    c = n("Add", [n("Mul", [f, "s1_in"]), n("Mul", [i, g])], "s1_out")
    n("Mul", [o, n("Tanh", [c])], "s0_out")
    n("Identity", ["s0_out"], "y0_out")
    n("Identity", ["s1_out"], "y1_out")
    n("Concat", [i, f, g, o], "y2_out", axis=1)
    ys = _scan(b, st, n.nodes, [h0, c0], 3, dt, st.attrs.get("reverse", False))
    for k in range(3):
        b.node("Identity", [ys[k]], [b.output(st, k)])


def _gru_layer(b, st):
    T, B, G = b.shape(st, 0)
    H = G // 3
    dt = b.dtype(st, 0)
    h0 = _state(b, st, 1, b.input(st, 0), H)
    wT = b.node("Transpose", [b.input(st, 2)], perm=[1, 0])
    n = _Body(b)
    hw = n("MatMul", ["s0_in", wT])
    if b.is_tensor(st, 3):
        hw = n("Add", [hw, b.input(st, 3)])
    xr, xz, xn = n("Split", ["x_t", b.ints([H] * 3)], ["xr", "xz", "xn"], axis=1)
    hr, hz, hn = n("Split", [hw, b.ints([H] * 3)], ["hr", "hz", "hn"], axis=1)
    r = n("Sigmoid", [n("Add", [xr, hr])])
    z = n("Sigmoid", [n("Add", [xz, hz])])
    nn_ = n("Tanh", [n("Add", [xn, n("Mul", [r, hn])])])
    n("Add", [nn_, n("Mul", [z, n("Sub", ["s0_in", nn_])])], "s0_out")
    n("Identity", ["s0_out"], "y0_out")
    n("Concat", [r, z, nn_, hn], "y1_out", axis=1)
    ys = _scan(b, st, n.nodes, [h0], 2, dt, st.attrs.get("reverse", False))
    for k in range(2):
        b.node("Identity", [ys[k]], [b.output(st, k)])


def _rnn_layer(b, st):
    T, B, H = b.shape(st, 0)
    dt = b.dtype(st, 0)
    h0 = _state(b, st, 1, b.input(st, 0), H)
    wT = b.node("Transpose", [b.input(st, 2)], perm=[1, 0])
    n = _Body(b)
    z = n("Add", ["x_t", n("MatMul", ["s0_in", wT])])
    act = "Relu" if st.attrs.get("nonlinearity", "tanh") == "relu" else "Tanh"
    n(act, [z], "s0_out")
    n("Identity", ["s0_out"], "y0_out")
    (y,) = _scan(b, st, n.nodes, [h0], 1, dt, st.attrs.get("reverse", False))
    b.node("Identity", [y], [b.output(st)])


def _searchsorted(seq_j, x_j):
    def lower(b, st):
        right = st.attrs.get("right", False) or st.attrs.get("side") == "right"
        dt = np.result_type(b.dtype(st, seq_j), b.dtype(st, x_j))
        seq, x = b.input(st, seq_j, dt), b.input(st, x_j, dt)
        if len(b.shape(st, seq_j)) > 1:
            seq = b.unsqueeze(seq, [-2])
        cmp = b.node("LessOrEqual" if right else "Less", [seq, b.unsqueeze(x, [-1])])
        cnt = b.reduce("ReduceSum", b.cast(cmp, np.int64), [-1], False)
        b.cast(cnt, b.out_dtype(st), [b.output(st)])
    return lower


LOWERINGS = {
    # elementwise
    "add": _simple("Add"), "sub": _simple("Sub"), "mul": _simple("Mul"),
    "div": _float_simple("Div"), "pow": _float_simple("Pow"), "neg": _simple("Neg"),
    "exp": _float_simple("Exp"), "log": _float_simple("Log"), "sqrt": _float_simple("Sqrt"),
    "abs": _simple("Abs"), "tanh": _float_simple("Tanh"), "sigmoid": _float_simple("Sigmoid"),
    "relu": _simple("Relu"), "erf": _float_simple("Erf"), "sin": _float_simple("Sin"),
    "cos": _float_simple("Cos"), "maximum": _simple("Max"), "minimum": _simple("Min"),
    "reciprocal": _float_simple("Reciprocal"), "sign": _simple("Sign"),
    "floor": _int_identity("Floor"), "ceil": _int_identity("Ceil"),
    "round": _int_identity("Round"), "trunc": _trunc,
    "floor_divide": _floor_divide, "remainder": _remainder, "fmod": _fmod,
    "eq": _compare("Equal"), "ne": _compare("Equal", negate=True), "lt": _compare("Less"),
    "gt": _compare("Greater"), "le": _compare("LessOrEqual"),
    "ge": _compare("GreaterOrEqual"),
    "logical_not": _logical("Not"), "logical_and": _logical("And"),
    "logical_or": _logical("Or"), "logical_xor": _logical("Xor"),
    "bitwise_not": _bitwise("BitwiseNot", "Not"), "bitwise_and": _bitwise("BitwiseAnd", "And"),
    "bitwise_or": _bitwise("BitwiseOr", "Or"), "bitwise_xor": _bitwise("BitwiseXor", "Xor"),
    "isnan": _isnan, "isinf": _isinf, "isfinite": _isfinite, "signbit": _signbit,
    "arcsin": _float_simple("Asin"), "arccos": _float_simple("Acos"),
    "arctan": _float_simple("Atan"), "arctan2": _atan2, "sinh": _float_simple("Sinh"),
    "cosh": _float_simple("Cosh"), "tan": _float_simple("Tan"),
    "where": _where, "clamp": _clamp, "clamp_tensor": _clamp_tensor,
    "relu_backward": _relu_backward, "isin": _isin,
    # shapes and movement
    "cast": _cast, "clone": _identity, "to_device": _identity, "reshape": _reshape,
    "permute": _permute, "broadcast_to": _broadcast_to, "squeeze": _squeeze,
    "unsqueeze": _unsqueeze, "flip": _flip, "roll": _roll, "repeat": _repeat, "cat": _cat,
    "stack": _stack, "pad": _pad, "tril": _trilu(False), "triu": _trilu(True),
    "diagonal": _diag_like, "diagonal_into": _diag_like, "diag": _diag_like,
    "repeat_interleave": _diag_like, "getitem": _getitem, "index": _index,
    "masked_index": _index, "index_put": _index_put, "index_put_zero": _diag_like,
    "index_add_into": _index_add_into, "gather": _gather, "scatter": _scatter(None),
    "scatter_add": _scatter("add"), "scatter_reduce": _scatter_reduce,
    "index_select": _index_select, "take_along_dim": _take_along_dim,
    "masked_fill": _masked_fill, "nonzero": _nonzero, "masked_select": _masked_select,
    "unique": _unique, "sort": _sort, "argsort": _argsort, "topk": _topk,
    "unfold": _unfold, "fold": _fold,
    # reductions and scans
    "sum": _reduce("ReduceSum"), "mean": _reduce("ReduceMean"),
    "amax": _reduce_bool("ReduceMax"), "amin": _reduce_bool("ReduceMin"),
    "prod": _reduce("ReduceProd"), "sum_to": _sum_to,
    "max": _max_min("ReduceMax", "ArgMax"), "min": _max_min("ReduceMin", "ArgMin"),
    "argmax": _arg("ArgMax"), "argmin": _arg("ArgMin"), "var": _var(False),
    "std": _var(True), "logsumexp": _logsumexp, "norm": _norm("p"),
    "linalg_vector_norm": _norm("ord"), "cumsum": _cumsum(False),
    "reverse_cumsum": _cumsum(True), "cumprod": _cumprod, "all": _all_any(True),
    "any": _all_any(False), "searchsorted": _searchsorted(0, 1),
    "bucketize": _searchsorted(1, 0),
    # linear algebra
    "matmul": _matmul, "einsum1": _einsum, "einsum": _einsum, "einsum3": _einsum,
    "dot": _matmul, "outer": _outer, "trace": _trace, "tensordot": _tensordot,
    "linalg_det": _det, "linalg_slogdet": _slogdet,
    # nn
    "softmax": _softmax("Softmax"), "log_softmax": _softmax("LogSoftmax"),
    "linear": _linear, "conv2d": _conv2d, "conv_transpose2d": _conv_transpose2d,
    "conv2d_input_grad": _conv2d_input_grad, "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d, "max_pool2d_gather": _max_pool2d_gather,
    "max_pool2d_input_grad": _max_pool2d_input_grad, "embedding": _embedding,
    "embedding_backward": _embedding_backward, "one_hot": _one_hot,
    "group_norm": _group_norm, "interpolate": _interpolate,
    "lstm_layer": _lstm_layer, "gru_layer": _gru_layer, "rnn_layer": _rnn_layer,
}
