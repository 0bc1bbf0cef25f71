"""``tg.onnx.export``: a model's (or a function's) forward, captured once, as ONNX.

The forward is captured as ``tg.compile`` captures a program (``compiler.capture``,
under ``no_grad``): the arguments become the graph's inputs, the parameters and
constants it read become initializers, and each registry op call is lowered to ONNX
nodes (opset 17) by its entry in ``LOWERINGS`` (keyed by the op's registry name; an
elementwise op with a scalar expression, ``tg.elementwise`` ones included, is lowered
from its expression). An op without a lowering raises ``UnsupportedOperatorError``
naming it. Needs the ``onnx`` extra (``pip install tapegrad[onnx]``).

>>> import tapegrad as tg, tapegrad.nn as nn
>>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
>>> tg.onnx.export(model, (tg.randn(2, 4),), "model.onnx",
...                input_names=["x"], output_names=["y"],
...                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})  # doctest: +SKIP
"""
import warnings

import numpy as np

from ..compiler.capture import Recorder, Unsupported, begin, end
from ..compiler.program import dce, fold_constants
from ..dispatch import observe
from ..fusion import expr as E
from ..grad_mode import no_grad
from ..tensor import Tensor, buffer

__all__ = ["export", "UnsupportedOperatorError", "LOWERINGS", "OPSET"]

OPSET = 17


class UnsupportedOperatorError(RuntimeError):
    """An op of the captured forward has no ONNX lowering."""


def export(model_or_fn, args, path, input_names=None, output_names=None, dynamic_axes=None):
    """Write ``model_or_fn(*args)``'s forward to ``path`` as an ONNX model (opset 17).

    ``args``: a tensor or a tuple of them (non-tensor arguments are constants of the
    export). ``input_names``/``output_names``: names of the graph's inputs (the tensor
    arguments, in order) and outputs (default ``input0...``, ``output0...``).
    ``dynamic_axes``: ``{name: {axis: "label"}}`` or ``{name: [axis, ...]}``: those
    dims are symbolic. The forward runs once, eagerly, under ``no_grad``; Python
    control flow is recorded as it went (a value read is warned about). Returns the
    ``onnx.ModelProto`` it wrote.
    """
    try:
        import onnx
        from onnx import helper, numpy_helper, TensorProto
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise ImportError("tg.onnx.export needs the onnx package: pip install "
                          "'tapegrad[onnx]'") from e
    if not isinstance(args, (tuple, list)):
        args = (args,)
    g, arg_pos = _capture(model_or_fn, args)
    steps = fold_constants(g, dce(g, g.steps))
    if any(st.kind == "guard" for st in steps):
        warnings.warn("tg.onnx.export: the forward read a tensor's value in Python "
                      "(item, bool, float); the exported graph follows the branch taken "
                      "for these arguments", RuntimeWarning, stacklevel=2)
    tensors = [a for a in args if isinstance(a, Tensor)]
    input_names = list(input_names or [f"input{i}" for i in range(len(tensors))])
    outs = g.output_values()
    output_names = list(output_names or [f"output{i}" for i in range(len(outs))])
    if len(input_names) != len(tensors):
        raise ValueError(f"onnx.export: {len(input_names)} input names for "
                         f"{len(tensors)} tensor arguments")
    if len(output_names) != len(outs):
        raise ValueError(f"onnx.export: {len(output_names)} output names for "
                         f"{len(outs)} outputs")
    L = _Lowering(g, helper, numpy_helper, TensorProto)
    for v, (pos, _) in g.args.items():
        L.names[v] = input_names[arg_pos[pos]]
    for st in steps:
        if st.kind == "guard":
            continue
        if st.kind != "op":
            raise UnsupportedOperatorError(f"onnx.export: a {st.name} step has no ONNX "
                                           f"lowering (the forward must be made of ops)")
        L.lower(st)
    dyn = _dynamic(dynamic_axes)
    # outputs: an output that is an input or initializer goes through Identity
    out_infos = []
    for v, name in zip(outs, output_names):
        src = L.name(v)
        L.node("Identity", [src], [name])
        out_infos.append(L.info(name, v, dyn.get(name, {})))
    in_infos = [L.info(input_names[arg_pos[pos]], v, dyn.get(input_names[arg_pos[pos]], {}))
                for v, (pos, _) in sorted(g.args.items(), key=lambda kv: arg_pos[kv[1][0]])]
    graph = helper.make_graph(L.nodes, "tapegrad", in_infos, out_infos, L.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tapegrad")
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return model


def _capture(fn, args):
    rec = Recorder()
    arg_pos = {}
    k = 0
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            vid = rec.ids.get(id(buffer(a)))
            if vid is None:
                vid = rec.new(buffer(a), "arg")
                rec.g.args[vid] = (i, None)
            arg_pos[i] = k
            k += 1
    begin(rec)
    try:
        with no_grad(), observe(rec):
            result = fn(*args)
    finally:
        end()
    try:
        g = rec.finish(result)
    except Unsupported as e:
        raise UnsupportedOperatorError(f"onnx.export: the forward cannot be captured: "
                                       f"{e}") from None
    return g, arg_pos


def _dynamic(dynamic_axes):
    out = {}
    for name, axes in (dynamic_axes or {}).items():
        if isinstance(axes, dict):
            out[name] = {int(a): str(lbl) for a, lbl in axes.items()}
        else:
            out[name] = {int(a): f"{name}_dim{a}" for a in axes}
    return out


class _Lowering:
    """Names, initializers and nodes of the graph being built."""

    def __init__(self, g, helper, numpy_helper, tp):
        self.g, self.helper, self.nh, self.tp = g, helper, numpy_helper, tp
        self.names = {}
        self.nodes = []
        self.inits = []
        self.k = 0

    def fresh(self, hint):
        self.k += 1
        return f"{hint}_{self.k}"

    def name(self, v):
        n = self.names.get(v)
        if n is not None:
            return n
        src = self.g.source[v]
        if src in ("ext", "const"):
            arr = self.g.externals[v] if src == "ext" else self.g.consts[v]
            n = self.names[v] = self.const(np.asarray(arr), "param" if src == "ext" else "const")
            return n
        raise UnsupportedOperatorError(f"onnx.export: value {v} is not produced by an op")

    def const(self, arr, hint="const"):
        n = self.fresh(hint)
        arr = np.ascontiguousarray(arr)
        self.inits.append(self.nh.from_array(arr, n))
        return n

    def node(self, op_type, inputs, outputs, **attrs):
        self.nodes.append(self.helper.make_node(op_type, inputs, outputs,
                                                name=self.fresh(op_type), **attrs))
        return outputs

    def info(self, name, v, dyn):
        shape = [dyn.get(i, d) for i, d in enumerate(self.g.shapes[v])]
        return self.helper.make_tensor_value_info(
            name, self.helper.np_dtype_to_tensor_dtype(np.dtype(self.g.dtypes[v])), shape)

    def dtype_of(self, st):
        for i in st.ins:
            if type(i) is int:
                return np.dtype(self.g.dtypes[i])
        return np.dtype(np.float32)

    def arg(self, st, j):
        """Input ``j`` of step ``st`` as a graph name (a scalar: an initializer of the
        step's dtype, as a weak scalar is)."""
        i = st.ins[j]
        if type(i) is int:
            return self.name(i)
        v = i[1]
        if v is None:
            return ""
        return self.const(np.asarray(v, dtype=self.dtype_of(st)))

    def out(self, st, k=0):
        v = st.outs[k]
        n = self.names.get(v)
        if n is None:
            n = self.names[v] = self.fresh(st.op.name)
        return n

    def lower(self, st):
        op = st.op
        fn = LOWERINGS.get(op.name)
        if fn is None and (op.expr or getattr(op, "fusion", None) is not None):
            fn = _lower_expression
        if fn is None:
            shapes = ", ".join(str(self.g.shapes[i]) if type(i) is int else repr(i[1])
                               for i in st.ins)
            raise UnsupportedOperatorError(
                f"onnx.export: the op '{op.name}' has no ONNX lowering (called on "
                f"[{shapes}]); add one to tapegrad.onnx.LOWERINGS")
        fn(self, st)


# ---------------------------------------------------------------- lowerings
def _simple(onnx_op, **fixed):
    def lower(L, st):
        L.node(onnx_op, [L.arg(st, j) for j in range(len(st.ins))], [L.out(st)], **fixed)
    return lower


def _linear(L, st):
    x, w = L.arg(st, 0), L.arg(st, 1)
    b = L.arg(st, 2) if len(st.ins) > 2 else ""
    if len(L.g.shapes[st.ins[0]]) == 2:
        L.node("Gemm", [x, w] + ([b] if b else []), [L.out(st)], transB=1)
        return
    wt = L.node("Transpose", [w], [L.fresh("wT")], perm=[1, 0])[0]
    if b:
        y = L.node("MatMul", [x, wt], [L.fresh("xw")])[0]
        L.node("Add", [y, b], [L.out(st)])
    else:
        L.node("MatMul", [x, wt], [L.out(st)])


def _reshape(L, st):
    src = L.g.shapes[st.ins[0]]
    target = list(L.g.shapes[st.outs[0]])
    # a leading dim kept as it is (the batch) is copied from the input (0), so the
    # graph works for any size of it
    for i, d in enumerate(target):
        if i < len(src) and src[i] == d and all(src[j] == target[j] for j in range(i)):
            target[i] = 0
        else:
            break
    if target.count(0) and any(d != 0 for d in target):
        # a later dim that absorbed the rest is inferred (-1)
        rest = [i for i, d in enumerate(target) if d != 0]
        if len(rest) == 1:
            target[rest[0]] = -1
    shape = L.const(np.array(target, dtype=np.int64), "shape")
    L.node("Reshape", [L.arg(st, 0), shape], [L.out(st)])


def _conv2d(L, st):
    a = st.attrs
    (pt, pb), (pl, pr) = a["padding"]
    ins = [L.arg(st, 0), L.arg(st, 1)]
    if len(st.ins) > 2 and not (type(st.ins[2]) is tuple and st.ins[2][1] is None):
        ins.append(L.arg(st, 2))
    kh, kw = L.g.shapes[st.ins[1]][2:]
    L.node("Conv", ins, [L.out(st)], kernel_shape=[kh, kw], strides=list(a["stride"]),
           pads=[pt, pl, pb, pr], dilations=list(a["dilation"]), group=a["groups"])


def _pool(onnx_op):
    def lower(L, st):
        a = st.attrs
        ph, pw = a.get("padding", (0, 0))
        kw = dict(kernel_shape=list(a["kernel_size"]), strides=list(a["stride"]),
                  pads=[ph, pw, ph, pw], ceil_mode=int(bool(a.get("ceil_mode", False))))
        if onnx_op == "MaxPool":
            kw["dilations"] = list(a.get("dilation", (1, 1)))
        elif "count_include_pad" in a:
            kw["count_include_pad"] = int(bool(a["count_include_pad"]))
        outs = [L.out(st)]
        if len(st.outs) > 1 and onnx_op == "MaxPool":
            L._unused_second(st)
        L.node(onnx_op, [L.arg(st, 0)], outs, **kw)
    return lower


def _unused_second(self, st):
    """max_pool2d's second output (tapegrad's argmax layout) is not ONNX's: refuse it
    if the forward used it."""
    self.names[st.outs[1]] = None


_Lowering._unused_second = _unused_second


def _axes(st, key="dim"):
    d = st.attrs.get(key)
    if d is None:
        return None
    return [int(x) for x in (d if isinstance(d, (tuple, list)) else (d,))]


def _softmax(onnx_op):
    def lower(L, st):
        L.node(onnx_op, [L.arg(st, 0)], [L.out(st)], axis=int(st.attrs.get("dim", -1)))
    return lower


def _reduce(onnx_op):
    def lower(L, st):
        axes = _axes(st)
        keep = int(bool(st.attrs.get("keepdim", False)))
        x = L.arg(st, 0)
        if axes is None:
            axes = list(range(len(L.g.shapes[st.ins[0]])))
        if onnx_op == "ReduceSum":
            ax = L.const(np.array(axes, dtype=np.int64), "axes")
            L.node("ReduceSum", [x, ax], [L.out(st)], keepdims=keep)
        else:
            L.node(onnx_op, [x], [L.out(st)], axes=axes, keepdims=keep)
    return lower


def _permute(L, st):
    dims = st.attrs.get("dims") or st.attrs.get("perm")
    L.node("Transpose", [L.arg(st, 0)], [L.out(st)], perm=[int(d) for d in dims])


def _cast(L, st):
    to = L.helper.np_dtype_to_tensor_dtype(np.dtype(st.attrs["dtype"]))
    L.node("Cast", [L.arg(st, 0)], [L.out(st)], to=to)


def _cat(L, st):
    L.node("Concat", [L.arg(st, j) for j in range(len(st.ins))], [L.out(st)],
           axis=int(st.attrs.get("dim", 0)))


def _broadcast_to(L, st):
    shape = L.const(np.array(L.g.shapes[st.outs[0]], dtype=np.int64), "shape")
    L.node("Expand", [L.arg(st, 0), shape], [L.out(st)])


def _embedding(L, st):
    L.node("Gather", [L.arg(st, 1), L.arg(st, 0)], [L.out(st)], axis=0)


def _identity(L, st):
    L.node("Identity", [L.arg(st, 0)], [L.out(st)])


def _squeeze_like(onnx_op):
    def lower(L, st):
        axes = _axes(st)
        if onnx_op == "Squeeze" and axes is None:
            L.node("Squeeze", [L.arg(st, 0)], [L.out(st)])
            return
        ax = L.const(np.array(axes, dtype=np.int64), "axes")
        L.node(onnx_op, [L.arg(st, 0), ax], [L.out(st)])
    return lower


LOWERINGS = {
    "add": _simple("Add"), "sub": _simple("Sub"), "mul": _simple("Mul"),
    "div": _simple("Div"), "pow": _simple("Pow"), "neg": _simple("Neg"),
    "exp": _simple("Exp"), "log": _simple("Log"), "sqrt": _simple("Sqrt"),
    "abs": _simple("Abs"), "tanh": _simple("Tanh"), "sigmoid": _simple("Sigmoid"),
    "relu": _simple("Relu"), "erf": _simple("Erf"), "sin": _simple("Sin"),
    "cos": _simple("Cos"), "maximum": _simple("Max"), "minimum": _simple("Min"),
    "matmul": _simple("MatMul"), "reciprocal": _simple("Reciprocal"),
    "where": _simple("Where"), "floor": _simple("Floor"), "ceil": _simple("Ceil"),
    "sign": _simple("Sign"), "eq": _simple("Equal"), "lt": _simple("Less"),
    "gt": _simple("Greater"), "le": _simple("LessOrEqual"), "ge": _simple("GreaterOrEqual"),
    "logical_not": _simple("Not"), "logical_and": _simple("And"),
    "logical_or": _simple("Or"), "softplus": _simple("Softplus"),
    "linear": _linear, "reshape": _reshape, "conv2d": _conv2d,
    "max_pool2d": _pool("MaxPool"), "avg_pool2d": _pool("AveragePool"),
    "softmax": _softmax("Softmax"), "log_softmax": _softmax("LogSoftmax"),
    "sum": _reduce("ReduceSum"), "mean": _reduce("ReduceMean"), "amax": _reduce("ReduceMax"),
    "amin": _reduce("ReduceMin"), "permute": _permute, "cast": _cast, "cat": _cat,
    "broadcast_to": _broadcast_to, "embedding": _embedding, "clone": _identity,
    "squeeze": _squeeze_like("Squeeze"), "unsqueeze": _squeeze_like("Unsqueeze"),
}


# ---------------------------------------------------------------- from an expression
_E_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
             "maximum": "Max", "minimum": "Min", "lt": "Less", "le": "LessOrEqual",
             "gt": "Greater", "ge": "GreaterOrEqual", "eq": "Equal", "and": "And",
             "or": "Or"}
_E_UNARY = {"neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh",
            "sigmoid": "Sigmoid", "erf": "Erf", "abs": "Abs", "sign": "Sign", "sin": "Sin",
            "cos": "Cos", "not": "Not", "softplus": "Softplus"}


def _lower_expression(L, st):
    op = st.op
    names = [L.arg(st, j) for j in range(len(st.ins))]
    dtype = L.dtype_of(st)
    fz = getattr(op, "fusion", None)
    if fz is not None and hasattr(fz, "graph") and getattr(fz, "nout", 0) == 1:
        ins, outs = fz.graph(st.attrs)
        out = outs[0]
    else:
        if st.attrs:
            raise UnsupportedOperatorError(f"onnx.export: the op '{op.name}' has no ONNX "
                                           f"lowering (attributes {sorted(st.attrs)})")
        ins = [E.var(f"__onnx{k}") for k in range(len(op.args))]
        out = E.parse(op.expr, dict(zip(op.args, ins)))
    vals = dict(zip(ins, names))
    for n in E.topo([out]):
        if n in vals:
            continue
        if n.op == "const":
            vals[n] = L.const(np.asarray(n.value, dtype=dtype))
            continue
        a = [vals[x] for x in n.args]
        res = L.out(st) if n is out else L.fresh(op.name)
        if n.op in _E_BINARY:
            L.node(_E_BINARY[n.op], a, [res])
        elif n.op in _E_UNARY:
            L.node(_E_UNARY[n.op], a, [res])
        elif n.op == "where":
            L.node("Where", a, [res])
        elif n.op == "log1p":
            one = L.const(np.asarray(1, dtype=dtype))
            t = L.node("Add", [a[0], one], [L.fresh("t")])[0]
            L.node("Log", [t], [res])
        elif n.op == "expm1":
            one = L.const(np.asarray(1, dtype=dtype))
            t = L.node("Exp", [a[0]], [L.fresh("t")])[0]
            L.node("Sub", [t, one], [res])
        elif n.op == "rsqrt":
            t = L.node("Sqrt", [a[0]], [L.fresh("t")])[0]
            L.node("Reciprocal", [t], [res])
        else:
            raise UnsupportedOperatorError(f"onnx.export: the op '{op.name}' has no ONNX "
                                           f"lowering ({n.op!r} in its expression)")
        if n.is_bool and n is out:
            pass
        vals[n] = res
    if out in vals and vals[out] != L.out(st):
        L.node("Identity", [vals[out]], [L.out(st)])
