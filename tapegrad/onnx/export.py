"""``tg.onnx.export``: capture the forward once and build the ONNX graph from its steps.

The forward runs once under ``no_grad`` inside the capture of ``tg.compile``
(``ExportRecorder``, a ``compiler.capture.Recorder``): the tensor arguments become the
graph's inputs, the parameters and buffers it read become initializers, and each op
step is lowered by its op's ``onnx`` field (``OpDef.onnx``) through a ``Builder``.
A tensor made during the call outside the ops (a factory: the zero initial state
of an LSTM, a mask built with ``tg.ones``) becomes a constant if it depends on
nothing but shapes: the forward runs a second time on other values of the same
shapes, and a value that changed (it was computed from the inputs' data, or drawn
at random) is refused, naming the op that read it.
"""
import contextlib
import enum
import warnings

import numpy as np

from ..compiler.capture import Recorder, Unsupported, begin, end
from ..compiler.program import dce, fold_constants
from ..dispatch import observe
from ..grad_mode import no_grad
from ..ops_registry import DECOMPOSED
from ..tensor import Tensor, buffer

__all__ = ["export", "TrainingMode", "UnsupportedOperatorError", "Builder", "OPSET",
           "MAX_OPSET", "MIN_OPSET"]

OPSET = 17        # the default opset_version
MIN_OPSET = 13    # the lowerings' oldest (Split/Squeeze/ReduceSum take their axes as inputs)
MAX_OPSET = 25    # the newest the registry-wide conformance was run at with onnxruntime here


class UnsupportedOperatorError(RuntimeError):
    """An op of the captured forward has no ONNX form (the message names it)."""


class TrainingMode(enum.IntEnum):
    """The mode a module is exported in (``training=`` of ``export``), as PyTorch's
    ``torch.onnx.TrainingMode``: ``EVAL`` (the default: ``eval()`` for the export,
    the modules' modes restored afterwards), ``PRESERVE`` (as they are), ``TRAINING``
    (``train()``: dropout then refuses, having no ONNX form that reproduces its draw)."""
    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


def export(model_or_fn, args, path, input_names=None, output_names=None, dynamic_axes=None,
           opset_version=None, *, kwargs=None, training=TrainingMode.EVAL, verbose=None,
           export_params=True, do_constant_folding=True, keep_initializers_as_inputs=False,
           dynamo=None):
    """Write ``model_or_fn(*args, **kwargs)``'s forward to ``path`` (a file name or a
    writable binary file) as an ONNX model.

    ``args``: a tensor or a tuple of them (non-tensor arguments are constants of the
    export); a dict as its last item gives keyword arguments, as PyTorch's
    ``torch.onnx.export``, as does ``kwargs`` (its tensors are graph inputs after the
    positional ones). ``input_names``/``output_names``: names of the graph's inputs
    (the tensor arguments, in order) and outputs (default ``input0...``,
    ``output0...``). ``dynamic_axes``: ``{name: {axis: "label"}}`` or ``{name: [axis,
    ...]}``: those dims are symbolic. ``opset_version``: the ONNX opset (default 17; 13
    to 25). ``training``: a module is exported in ``eval()`` mode unless
    ``TrainingMode.PRESERVE`` or ``TRAINING`` says otherwise, and its modes are
    restored after. ``verbose``: print the graph. ``keep_initializers_as_inputs=True``:
    every initializer (the parameters, the folded constants) is a graph input too, with
    its value as the default. PyTorch's ``export_params=True``, ``do_constant_folding``
    (constants are always folded) and ``dynamo`` (one exporter here) are accepted. The
    forward runs eagerly under ``no_grad``; Python control flow is recorded as it went
    (a value read is warned about). Returns the ``onnx.ModelProto`` it wrote.
    """
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise ImportError("tg.onnx.export needs the onnx package: pip install "
                          "'tapegrad[onnx]'") from e
    opset = OPSET if opset_version is None else opset_version
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"onnx.export: opset_version must be an int from {MIN_OPSET} to "
                         f"{MAX_OPSET}, got {opset_version!r}")
    if export_params is not True:
        raise NotImplementedError("onnx.export: the parameters are always written as "
                                  "initializers (export_params=True)")
    if training not in (TrainingMode.EVAL, TrainingMode.PRESERVE, TrainingMode.TRAINING):
        raise ValueError(f"onnx.export: training must be a TrainingMode, got {training!r}")
    if not isinstance(args, (tuple, list)):
        args = (args,)
    args = tuple(args)
    if args and type(args[-1]) is dict:  # PyTorch's trailing dict of keyword arguments
        kwargs = {**args[-1], **(kwargs or {})}
        args = args[:-1]
    fn = model_or_fn
    if kwargs:
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise TypeError(f"onnx.export: kwargs must be a dict of names to arguments, "
                            f"got {kwargs!r}")
        fn = _with_kwargs(model_or_fn, len(args), list(kwargs))
        args = args + tuple(kwargs.values())
    args = _distinct(args)
    with _mode(model_or_fn, training):
        g, arg_pos = capture(fn, args)
    steps = fold_constants(g, dce(g, g.steps))
    if any(st.kind == "guard" for st in steps):
        warnings.warn("tg.onnx.export: the forward read a tensor's value in Python "
                      "(item, bool, float); the exported graph follows the branch taken "
                      "for these arguments", RuntimeWarning, stacklevel=2)
    tensors = _flat_tensors(args)
    input_names = list(input_names or [f"input{i}" for i in range(len(tensors))])
    outs = g.output_values()
    output_names = list(output_names or [f"output{i}" for i in range(len(outs))])
    if len(input_names) != len(tensors):
        raise ValueError(f"onnx.export: {len(input_names)} input names for "
                         f"{len(tensors)} tensor arguments")
    if len(output_names) != len(outs):
        raise ValueError(f"onnx.export: {len(output_names)} output names for "
                         f"{len(outs)} outputs")
    dyn = _dynamic(dynamic_axes)
    b = Builder(g, opset, helper, numpy_helper)
    for v, (pos, _) in g.args.items():
        b.names[v] = input_names[arg_pos[pos]]
        for ax in dyn.get(input_names[arg_pos[pos]], {}):
            b.dynamic.add((v, ax))
    for k, st in enumerate(steps):
        if st.kind == "guard":
            continue
        if st.kind == "write":
            _write(b, g, st, steps[k + 1:])
            continue
        if st.kind != "op":
            raise UnsupportedOperatorError(f"onnx.export: a {st.name} step has no ONNX "
                                           f"lowering (the forward must be made of ops)")
        b.lower(st)
    out_infos = []
    for v, name in zip(outs, output_names):
        b.node("Identity", [b.name(v)], [name])
        # with symbolic input dims, an output's dims it does not name are left unknown
        # (a static size there would be wrong at another batch)
        out_infos.append(b.info(name, v, dyn.get(name, {}), unknown=bool(b.dynamic)))
    in_infos = [b.info(input_names[arg_pos[pos]], v, dyn.get(input_names[arg_pos[pos]], {}))
                for v, (pos, _) in sorted(g.args.items(), key=lambda kv: arg_pos[kv[1][0]])]
    nodes, inits = b.nodes, b.inits
    if keep_initializers_as_inputs:  # (each also a graph input: a caller may feed it)
        in_infos += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                     for t in inits]
    elif not in_infos:  # (onnxruntime wants a graph of constants alone as Constant nodes)
        nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in inits] + nodes
        inits = []
    graph = helper.make_graph(nodes, "tapegrad", in_infos, out_infos, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tapegrad")
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    if dyn:  # (with guards too: the inputs at other sizes repeat these values)
        with _mode(model_or_fn, training):
            _check_dynamic(model, fn, args, tensors, input_names, dyn)
    if verbose:
        print(helper.printable_graph(model.graph))
    if hasattr(path, "write"):
        path.write(model.SerializeToString())
    else:
        onnx.save(model, path)
    return model


def _check_dynamic(model, fn, args, tensors, input_names, dyn):
    """With ``dynamic_axes``, run the exported model in onnxruntime (if installed) at
    other sizes of the dynamic input dims (the inputs' values repeated along them) and
    compare with the forward: a size the forward read in Python (``x.shape[1]``,
    ``len(x)``) is a constant of the graph, which a model at another size would
    silently get wrong; refuse it, naming the dim. Sizes the forward itself refuses
    are not checked."""
    try:
        import onnxruntime as ort
    except ImportError:
        return
    from ..tensor import wrap
    names = dict(zip(map(id, tensors), input_names))
    axes = {names[id(t)]: dyn[names[id(t)]] for t in tensors if names[id(t)] in dyn}
    if not axes:
        return
    sess = None
    for grow in (1, 2):
        def resized(t):
            a = buffer(t)
            for ax in axes.get(names[id(t)], ()):
                n = a.shape[ax]
                if n:
                    a = np.take(a, np.arange(n + grow) % n, axis=ax)
            return wrap(np.ascontiguousarray(a))
        new = _map_tensors(args, resized)
        feeds = _flat_tensors(new)
        try:
            with no_grad():
                want = fn(*new)
        except Exception:  # noqa: BLE001  (a size the model refuses: try another)
            continue
        want = [buffer(w) for w in _flat_tensors(want if isinstance(want, (tuple, list))
                                                 else (want,))]
        if sess is None:
            sess = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])
        what = ", ".join(f"{n} dim {ax} ({lbl})" for n, d in axes.items()
                         for ax, lbl in d.items())
        try:
            got = sess.run(None, {n: buffer(f) for n, f in zip(input_names, feeds)})
            ok = len(got) == len(want) and all(
                np.shape(a) == np.shape(b) and np.allclose(
                    np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-3,
                    atol=1e-4, equal_nan=True) for a, b in zip(got, want))
        except Exception as e:  # noqa: BLE001  (onnxruntime refused the other size)
            ok, why = False, f" ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        else:
            why = ""
        if not ok:
            raise UnsupportedOperatorError(
                f"onnx.export: the exported model does not follow the dynamic axes "
                f"{what}: at another size it gives other results than the forward{why}. "
                f"A size the forward read in Python (x.shape[1], len(x), a range over it) "
                f"is a constant of the graph; compute it with ops, or export without that "
                f"dynamic axis")
        return


def _with_kwargs(fn, n, names):
    """``fn`` called with its last ``len(names)`` positional arguments by those names."""
    def call(*a):
        return fn(*a[:n], **dict(zip(names, a[n:])))
    return call


@contextlib.contextmanager
def _mode(model, training):
    """The module ``model`` (if one) in the mode ``training`` asks for, for the export;
    each submodule's mode restored after."""
    mods = list(model.modules()) if callable(getattr(model, "modules", None)) and \
        callable(getattr(model, "train", None)) else []
    before = [m.training for m in mods]
    if mods and training != TrainingMode.PRESERVE:
        model.train(training == TrainingMode.TRAINING)
    try:
        yield
    finally:
        for m, t in zip(mods, before):
            m.training = t


def _write(b, g, st, later):
    """An in-place op's result written into its tensor: later reads of the tensor
    read the result (ONNX values are immutable). A view of the same memory read later
    would see the old value: refused."""
    into = st.into
    root = g.root(into)
    shared = {v for v in range(len(g.shapes)) if v != into and g.root(v) == root}
    for s2 in later:
        if shared.intersection(s2.reads()):
            raise UnsupportedOperatorError(
                f"onnx.export: an in-place op wrote into a tensor whose view "
                f"{s2.name} reads afterwards; make the op out of place")
    b.names[into] = b.name(st.ins[0])


# ---------------------------------------------------------------- capture
class ExportRecorder(Recorder):
    """The capture of ``tg.compile``, where a tensor made during the call outside the
    ops becomes a constant of the graph (``made``: value id -> a copy of it)."""

    def __init__(self):
        super().__init__()
        self.made = {}
        self.first_values = {}  # value id -> a copy of an outside array as first read

    def new(self, arr, src, producer=None):
        vid = super().new(arr, src, producer)
        if src == "ext":  # (a tensor made in the call may be written in place later:
            self.first_values[vid] = np.array(arr)   # its constant is what was read)
        return vid

    def _check_externals(self):
        g = self.g
        copies = {vid: self.first_values.get(vid, a) for vid, a in g.externals.items()
                  if g.source[vid] == "ext"}
        super()._check_externals()
        if self.why is None:
            return
        # the externals that died were made in the call: constants of the export
        self.why = None
        for vid, arr in copies.items():
            if vid not in g.externals:
                g.source[vid] = "const"
                g.consts[vid] = arr
                self.made[vid] = arr

    def _outputs(self, r):
        if isinstance(r, tuple) and type(r) is not tuple:  # a named tuple (aminmax)
            return (tuple, [self._outputs(x) for x in r])
        if isinstance(r, Tensor) and id(buffer(r)) not in self.ids:
            vid = self.new(buffer(r), "const")
            self.g.consts[vid] = np.array(buffer(r))
            self.made[vid] = self.g.consts[vid]
        return super()._outputs(r)


def _map_tensors(a, f):
    """``a`` with each tensor in it (through tuples and lists) replaced by ``f(t)``."""
    if isinstance(a, Tensor):
        return f(a)
    if type(a) in (tuple, list):
        return type(a)(_map_tensors(x, f) for x in a)
    return a


def _flat_tensors(args):
    """The tensors in ``args``, through tuples and lists, in order: the graph's inputs
    (an LSTM's ``(input, (h0, c0))`` gives three, as ``torch.onnx.export``)."""
    out = []
    _map_tensors(args, out.append)
    return out


def _distinct(args):
    """``args`` with a tensor given more than once (``mha(x, x, x)``, ``f(q, q)``), or
    sharing memory with an earlier one, copied at each later place: each place is a
    graph input of its own, as in ``torch.onnx.export``."""
    from ..tensor import wrap
    seen = set()

    def one(t):
        data = buffer(t)
        root = id(getattr(data, "base", None) if getattr(data, "base", None) is not None
                  else data)
        if root in seen:
            t = wrap(data.copy())
            root = id(buffer(t))
        seen.add(root)
        return t
    return _map_tensors(tuple(args), one)


def _record(fn, args):
    rec = ExportRecorder()
    arg_pos = {}
    for k, a in enumerate(_flat_tensors(args)):
        vid = rec.ids.get(id(buffer(a)))
        if vid is None:
            vid = rec.new(buffer(a), "arg")
            rec.g.args[vid] = (k, None)
        arg_pos[k] = k
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
    for vid, first in rec.first_values.items():  # (the graph's constants: the values
        if vid in g.externals:                   # read, not what later writes left)
            g.externals[vid] = first
    return g, arg_pos, rec


def capture(fn, args):
    """The graph of ``fn(*args)`` and each argument position's index among the tensor
    arguments."""
    from ..tensor import wrap
    with no_grad():
        g, arg_pos, rec = _record(fn, args)
    if rec.made:
        # made in the call: constant only if the same on a second run (with other
        # values of the floating arguments: a random draw differs anyway)
        other = _map_tensors(args, lambda a: wrap(
            buffer(a) + buffer(a).dtype.type(0.5) * (1 + np.abs(buffer(a))))
            if _floating(a) else a)
        try:
            g2, _, rec2 = _record(fn, other)
        except UnsupportedOperatorError:
            rec2 = None
        ok = rec2 is not None and len(g2.steps) == len(g.steps) and \
            [st.name for st in g2.steps] == [st.name for st in g.steps]
        if ok:
            for vid, arr in rec.made.items():
                b = rec2.made.get(vid)
                if b is None or b.shape != arr.shape or not np.array_equal(
                        b, arr, equal_nan=arr.dtype.kind in "fc"):
                    ok = False
                    break
        if not ok:
            vid = next(iter(rec.made))
            raise UnsupportedOperatorError(
                f"onnx.export: {rec.first_read.get(vid, 'the forward')} read a tensor "
                f"made during the call outside tapegrad's ops (shape {g.shapes[vid]}, "
                f"{g.dtypes[vid]}) whose values depend on the inputs' values or on the "
                f"random generator: it cannot be an ONNX constant; compute it with ops")
    return g, arg_pos


def _floating(a):
    return isinstance(a, Tensor) and np.dtype(buffer(a).dtype).kind == "f"


def _dynamic(dynamic_axes):
    out = {}
    for name, axes in (dynamic_axes or {}).items():
        if isinstance(axes, dict):
            out[name] = {int(a): str(lbl) for a, lbl in axes.items()}
        else:
            out[name] = {int(a): f"{name}_dim{a}" for a in axes}
    return out


# ---------------------------------------------------------------- the graph builder
class Builder:
    """What a lowering ``lower(b, st)`` builds with: names of values, initializers,
    nodes. ``st`` is the op step: ``st.ins`` (value ids, or ``("lit", x)`` for a
    Python scalar or ``None``), ``st.outs``, ``st.attrs``. ``b.opset`` is the target
    opset; ``b.dynamic`` holds ``(value, axis)`` pairs of the graph inputs' symbolic
    dims."""

    def __init__(self, g, opset, helper, numpy_helper):
        self.g, self.opset, self.helper, self.nh = g, opset, helper, numpy_helper
        self.names = {}
        self.nodes = []
        self.inits = []
        self.dynamic = set()
        self.k = 0
        self._consts = {}

    # ------------------------------------------------------------ names and values
    def fresh(self, hint="t"):
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
        """An initializer holding ``arr`` (small ones are shared)."""
        arr = np.asarray(arr)
        arr = np.ascontiguousarray(arr).reshape(arr.shape)  # (ascontiguousarray: ndim >= 1)
        key = None
        if arr.size <= 16:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            n = self._consts.get(key)
            if n is not None:
                return n
        n = self.fresh(hint)
        self.inits.append(self.nh.from_array(arr, n))
        if key is not None:
            self._consts[key] = n
        return n

    def ints(self, values):
        return self.const(np.asarray(list(values), dtype=np.int64), "ints")

    def node(self, op_type, inputs, outputs=1, **attrs):
        """Add a node; ``outputs``: names, or a count of fresh ones. Returns the
        output names (one name when a count of 1 was asked)."""
        single = outputs == 1
        if isinstance(outputs, int):
            outputs = [self.fresh(op_type) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), list(outputs),
                                                name=self.fresh("n_" + op_type), **attrs))
        return outputs[0] if single else outputs

    def info(self, name, v, dyn, unknown=False):
        shape = [dyn.get(i, None if unknown else d) for i, d in enumerate(self.g.shapes[v])]
        return self.helper.make_tensor_value_info(name, self.onnx_type(self.g.dtypes[v]), shape)

    def onnx_type(self, dtype):
        return self.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    # ------------------------------------------------------------ a step's values
    def is_tensor(self, st, j):
        return j < len(st.ins) and type(st.ins[j]) is int

    def literal(self, st, j):
        """The Python value of input ``j`` (a scalar or None), or a constant tensor's
        value; None if it is computed."""
        if j >= len(st.ins):
            return None
        i = st.ins[j]
        if type(i) is not int:
            return i[1]
        if self.g.source[i] == "const":
            return self.g.consts[i]
        return None

    def shape(self, st, j):
        i = st.ins[j]
        return tuple(self.g.shapes[i]) if type(i) is int else np.shape(i[1])

    def dtype(self, st, j):
        i = st.ins[j]
        if type(i) is int:
            return np.dtype(self.g.dtypes[i])
        return self.out_dtype(st)

    def out_shape(self, st, k=0):
        return tuple(self.g.shapes[st.outs[k]])

    def out_dtype(self, st, k=0):
        return np.dtype(self.g.dtypes[st.outs[k]])

    def input(self, st, j, dtype=None):
        """Input ``j`` of step ``st`` as a graph name: a Python scalar becomes an
        initializer of ``dtype`` (default: the step's first tensor input's dtype, as a
        weak scalar), ``None`` the empty name."""
        i = st.ins[j] if j < len(st.ins) else ("lit", None)
        if type(i) is int:
            n = self.name(i)
            if dtype is not None and np.dtype(self.g.dtypes[i]) != np.dtype(dtype):
                n = self.cast(n, dtype)
            return n
        v = i[1]
        if v is None:
            return ""
        if dtype is None:
            ts = [k for k in st.ins if type(k) is int]
            dtype = self.g.dtypes[ts[0]] if ts else self.out_dtype(st)
        return self.const(np.asarray(v, dtype=dtype))

    def output(self, st, k=0):
        v = st.outs[k]
        n = self.names.get(v)
        if n is None:
            n = self.names[v] = self.fresh(st.op.name)
        return n

    def alias_output(self, st, name, k=0):
        """Output ``k`` of ``st`` is the value already named ``name``."""
        self.names[st.outs[k]] = name

    # ------------------------------------------------------------ common nodes
    def cast(self, x, dtype, out=1):
        return self.node("Cast", [x], out, to=self.onnx_type(dtype))

    def unsqueeze(self, x, axes, out=1):
        return self.node("Unsqueeze", [x, self.ints(axes)], out)

    def squeeze(self, x, axes, out=1):
        return self.node("Squeeze", [x, self.ints(axes)], out)

    def reshape(self, x, shape, out=1):
        return self.node("Reshape", [x, self.ints(shape)], out)

    def reduce(self, op_type, x, axes, keepdims, out=1):
        """A Reduce* node over ``axes`` (None: all), in the opset's form (the axes an
        input from opset 18, ReduceSum's from 13)."""
        kw = {"keepdims": int(bool(keepdims))}
        if axes is not None and len(axes) == 0:
            return self.node("Identity", [x], out)
        if axes is None:
            return self.node(op_type, [x], out, **kw)
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.node(op_type, [x, self.ints(axes)], out, **kw)
        return self.node(op_type, [x], out, axes=list(axes), **kw)

    def split(self, x, sizes, axis, out=None):
        out = len(sizes) if out is None else out
        return self.node("Split", [x, self.ints(sizes)], out, axis=axis)

    def slice(self, x, starts, ends, axes, steps=None, out=1):
        ins = [x, self.ints(starts), self.ints(ends), self.ints(axes)]
        if steps is not None:
            ins.append(self.ints(steps))
        return self.node("Slice", ins, out)

    def gather_static(self, x, src_shape, flat_index, out=1, fill=None):
        """The output whose elements are ``x``'s flattened elements at ``flat_index``
        (an int array of the output's shape; with ``fill``, index -1 takes ``fill``)."""
        flat = self.reshape(x, [-1])
        idx = np.asarray(flat_index, dtype=np.int64)
        if fill is not None:
            flat = self.node("Concat", [flat, fill], axis=0)
            idx = np.where(idx < 0, int(np.prod(src_shape)), idx)
        return self.node("Gather", [flat, self.const(idx, "index")], out, axis=0)

    def refuse(self, st, why):
        """A lowering's refusal: this call of the op cannot export (``why``)."""
        raise UnsupportedOperatorError(f"onnx.export: the op '{st.op.name}' cannot be "
                                       f"exported here: {why}")

    # ------------------------------------------------------------ lowering a step
    def lower(self, st):
        op = st.op
        fn = op.onnx
        if not callable(fn):
            shapes = ", ".join(str(self.g.shapes[i]) if type(i) is int else repr(i[1])
                               for i in st.ins)
            why = ("it is a composite whose ops the capture should have recorded"
                   if fn == DECOMPOSED else fn or "no ONNX form is declared")
            raise UnsupportedOperatorError(
                f"onnx.export: the op '{op.name}' has no ONNX lowering (called on "
                f"[{shapes}]): {why}")
        fn(self, st)

