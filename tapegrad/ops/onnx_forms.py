"""ONNX forms of ops: the helpers op declarations build their ``onnx=`` lowerings
with, and the lowerings of the ops whose declarations do not carry one yet, by op
name (``LOWERINGS``: the ``nn`` families, the elementwise tables, einsum), which
``tapegrad.onnx`` attaches to their ``OpDef.onnx`` when it is imported.

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
by running the op's kernel on the element positions.
"""
import numpy as np

from ..fusion import expr as E

__all__ = ["LOWERINGS"]

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
            b.refuse(st, "divisor_override with ceil_mode")
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
        b.refuse(st, f"interpolate mode {mode!r}")
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


LOWERINGS = {
    "unfold": _unfold,
    "fold": _fold,
    "softmax": _softmax("Softmax"),
    "log_softmax": _softmax("LogSoftmax"),
    "linear": _linear,
    "conv2d": _conv2d,
    "conv_transpose2d": _conv_transpose2d,
    "conv2d_input_grad": _conv2d_input_grad,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "max_pool2d_gather": _max_pool2d_gather,
    "max_pool2d_input_grad": _max_pool2d_input_grad,
    "embedding": _embedding,
    "embedding_backward": _embedding_backward,
    "one_hot": _one_hot,
    "group_norm": _group_norm,
    "interpolate": _interpolate,
    "lstm_layer": _lstm_layer,
    "gru_layer": _gru_layer,
    "rnn_layer": _rnn_layer,
}
