"""Capture: run a function eagerly once and record the program it executed.

``Recorder`` is a ``dispatch.observe`` observer. It sees every op kernel the thread
runs (forward ops, the adjoint ops the walker runs, the ops of ``_fit``), every
adjoint (``vjp``), in-place writes (``dispatch._write``), the walker's seeds,
optimizer updates and ``zero_grad`` (``Optimizer.step`` and ``nn.module.zero_grads``
report them through ``dispatch.notify``: the ``on_*`` methods), and Python reading a
tensor's values (``item``, ``bool``, ``float``, ``tolist``, ``numpy``: ``tensor._read``),
which become guards.

Values are identified by the array objects the kernels see (every array seen is kept
alive while capturing, so ids stay unique). An array no step produced is an
*external*: an argument's buffer, or a buffer living outside the function
(parameters, optimizer state, a gradient being accumulated into), held by reference
and read live on replay. An external that dies when the function returns was computed
outside the ops (NumPy on a tensor's buffer, a factory, the random generator): its
value cannot be replayed, so the capture is refused and the function runs eagerly,
with a warning naming the op that read it. Never a silent replay of a stale value.

The walker does a little arithmetic of its own on the raw path (summing the
gradients that meet at a node or a leaf, ``astype``, ``copy``); the adjoints'
results are handed to it as ``_Traced`` arrays (an ndarray subclass whose NumPy
arithmetic is recorded), so those steps are captured too.
"""
import dis
import gc
import numbers
import operator
import os
import sys
import threading
import weakref

import numpy as np

from .. import devices as _devices, tape as _tape
from ..ops.creation import generator_given, raw_rng_state
from ..tensor import Tensor, last_write
from .graph import Graph, Step

_NONE = {}

__all__ = ["capturing", "Recorder", "Unsupported"]

_tls = threading.local()
_SCALARS = (int, float, bool)


def draws_explain(rec, before, after):
    """Whether the random steps ``rec`` recorded account for every draw from the
    global generator between states ``before`` and ``after`` (nothing else drew)."""
    state = before
    for b, a in rec.draws:
        if not _same_state(state, b):
            return False
        state = a
    return _same_state(state, after)


def _same_state(a, b):
    try:
        return a == b
    except ValueError:
        return str(a) == str(b)


class ArrayInput:
    """In a recorded step's attrs: the array at position ``j`` of the step's extra
    inputs (``with_array_inputs``)."""
    __slots__ = ("j",)

    def __init__(self, j):
        self.j = j

    def __repr__(self):
        return f"<input {self.j}>"


def _filled(attrs, arrays):
    out = {}
    for k, v in attrs.items():
        if type(v) is tuple:
            v = tuple(arrays[a.j] if type(a) is ArrayInput else a for a in v)
        elif type(v) is ArrayInput:
            v = arrays[v.j]
        out[k] = v
    return out


_WITH_ARRAYS = {}


def with_array_inputs(op, n):
    """``op`` taking ``n`` more array inputs that fill the ``ArrayInput`` places of its
    attrs (an index array read afresh by each replay; the step's other passes see
    plain inputs). Not differentiable and writes into no ``out=`` (the capture records
    the adjoint's ops as they run). Its ONNX form: ``index``, ``masked_index`` and
    ``index_put``'s in ``indexing.onnx_index_from_input``; any other, the reason it is
    not."""
    key = (op, n)
    w = _WITH_ARRAYS.get(key)
    if w is None:
        from ..ops_registry.opdef import OpDef
        m = len(op.args)

        def kernel(*arrays, **attrs):
            return op.kernel(*arrays[:m], **_filled(attrs, arrays[m:]))

        def infer(*specs, **attrs):
            return op.infer(*specs[:m], **_filled(attrs, specs[m:]))
        from ..ops.indexing import onnx_index_from_input
        w = OpDef(name=op.name, kernel=kernel, infer=infer,
                  args=tuple(op.args) + tuple(f"index{j}" for j in range(n)), kind=op.kind,
                  differentiable=False, nout=op.nout, draws=getattr(op, "draws", False),
                  onnx=onnx_index_from_input if op.name in ("index", "masked_index",
                                                             "index_put") else
                  f"{op.name} with an index tensor computed from the inputs: ONNX export "
                  f"takes x[...] and its assignment (Gather, Scatter), no other op")
        _WITH_ARRAYS[key] = w
    return w


def capturing():
    """The Recorder capturing on this thread, or None."""
    return getattr(_tls, "rec", None)


class Unsupported(Exception):
    """The captured program cannot be replayed (the message says why)."""


class _Traced(np.ndarray):
    """A gradient on its way through the walker: its NumPy arithmetic is recorded."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kw):
        rec = capturing()
        if rec is None or rec.in_kernel:
            inputs = [_plain_view(x) for x in inputs]
            if out is not None:
                kw["out"] = tuple(_plain_view(o) for o in out)
            return getattr(ufunc, method)(*inputs, **kw)
        return rec.ufunc(ufunc, method, inputs, out, kw)

    def astype(self, dtype, *args, **kw):
        rec = capturing()
        res = _plain_view(self).astype(dtype, *args, **kw)
        return res if rec is None else rec.method("astype", self, res, dtype=np.dtype(dtype))

    def copy(self, *args, **kw):
        rec = capturing()
        res = _plain_view(self).copy(*args, **kw)
        return res if rec is None else rec.method("copy", self, res)

    def __setitem__(self, key, value):
        rec = capturing()
        if rec is not None and not rec.in_kernel and not (
                key is Ellipsis and sys._getframe(1).f_code is _write_code()):
            # (an in-place op's result written into a gradient, ``p.grad.mul_(c)``:
            # dispatch._write tells the observers next, and ``write`` records it)
            rec.opaque_event("an indexed assignment")
        _plain_view(self)[key] = _plain_view(value)

    def __array_function__(self, func, types, args, kwargs):
        rec = capturing()
        if rec is not None and not rec.in_kernel:
            rec.opaque_event(f"np.{func.__name__}")
        return super().__array_function__(func, types, args, kwargs)

    # A Python value read from a traced array (``if (x == 0).any():`` in an adjoint)
    # decides what the adjoint computes: the adjoint is replayed whole, its branch
    # taken afresh on each replay's values.
    def _python_read(self, what):
        rec = capturing()
        if rec is not None and not rec.in_kernel:
            rec.opaque_event(f"a Python {what} read from an array")
        return _plain_view(self)

    def __bool__(self):
        return bool(self._python_read("bool"))

    def __int__(self):
        return int(self._python_read("int"))

    def __float__(self):
        return float(self._python_read("float"))

    def __index__(self):
        return operator.index(self._python_read("index"))

    def item(self, *args):
        return self._python_read("number").item(*args)

    def tolist(self):
        return self._python_read("list").tolist()


def _write_code():
    from ..dispatch import _write
    return _write.__code__


def _plain_view(a):
    return a.view(np.ndarray) if isinstance(a, _Traced) else a


def _root(a):
    """The object that owns ``a``'s memory: its ``.base`` chain followed to the end,
    through the non-array holders (``as_strided``'s, which ``diagonal`` returns: a
    view whose base is not an ndarray is still a view of its input)."""
    if not isinstance(a, np.ndarray):
        return a
    return _devices.owner(a)


class Recorder:
    """The observer that records one call of the function (see the module docstring)."""

    def __init__(self):
        self.ids = {}        # id(array) -> value id
        self.keep = []       # every array seen (ids stay unique while capturing)
        self.plain = {}      # id(_Traced) -> its plain view
        self.roots = {}      # id(root array) -> value id (to find aliases)
        self.g = Graph()
        self.in_kernel = 0
        self.in_vjp = 0
        self.opaque = False
        self.why = None      # why the program can't be replayed (first reason)
        self.leaves = {}     # id(leaf) -> leaf Tensor reached by a backward
        self.leaf_state = {}  # id(leaf) -> its .grad when first reached: "cleared" | "none" | array
        self.cleared = set()  # ids of params whose grad the program set to None
        self.seed_ids = set()
        self.first_read = {}  # value id of an external -> the op that first read it
        self.owners = {}      # value id of an external -> weakref to the Tensor read
        self.arg_owners = _NONE  # id(array) -> the Tensor argument that holds it, of
                                 # the op being recorded
        self.lw = last_write[0]  # the in-place write id last accounted for
        self.expected = 0        # writes a known event announced (see _writes)
        self.numbers = []        # (guard step, ReadNumber) of the numbers Python read
        self.factory_consts = {}  # value a factory made during the call -> its copy step
        self.factory_constants = False  # take them as constants (tg.compile sets it)
        # a number read from a tensor that the function returns: an output of the
        # program, its tensor's value read again each replay (tg.compile's function
        # path sets it; a module's forward keeps the exact value guarded)
        self.item_outputs = False
        self.leaf_outputs = False
        self.arg_tensors = {}  # id of each tensor argument -> its position
        self.returned = set()    # ids of the ReadNumbers returned as outputs
        # (array, its values before the capture's first in-place write into it) of each
        # array from outside the call written in place: a compiled module's capture,
        # which a replay follows, puts them back (``before_write``)
        self.undo = None  # (a list where kept: tg.compile's module path sets it)
        self._undone = set()
        self.draws = []          # (generator state before, after) of each random step

    # ------------------------------------------------------------ in-place writes
    def _writes(self):
        """Every in-place write is announced (``tensor.mark_written``); those this
        recorder knows (an in-place op's write, an optimizer step, ``zero_grad``, the
        walker accumulating into a ``.grad``) say how many they make. Any other write
        (NumPy on a buffer, then ``mark_written``: a module's running statistics) was
        not captured and cannot be replayed: the program is refused."""
        lw = last_write[0]
        if lw != self.lw:
            if lw - self.lw != self.expected:
                self.fail("a tensor was written in place outside the ops (NumPy on its "
                          "buffer, announced with mark_written: a module's running "
                          "statistics, say); the write cannot be replayed")
            self.lw = lw
        self.expected = 0

    # ------------------------------------------------------------ values
    def fail(self, why):
        if self.why is None:
            self.why = why

    def new(self, arr, src, producer=None):
        """A new value for ``arr`` (an ndarray), from ``src``."""
        vid = self.g.add_value(tuple(arr.shape), arr.dtype, src, producer)
        self.ids[id(arr)] = vid
        self.keep.append(arr)
        r = _root(arr)
        if r is not arr:
            base = self.roots.get(id(r))
            if base is not None:
                self.g.alias[vid] = base
            else:  # a view of memory no value owns (a kernel's temporary): this value
                # stands for it, so a later view of the same memory is its alias
                self.roots[id(r)] = vid
        else:
            self.roots.setdefault(id(arr), vid)
        return vid

    def val(self, a, reader="?"):
        """The input spec of ``a`` for a step: a value id, or ``("lit", a)``."""
        if a is None or type(a) in _SCALARS or isinstance(a, (str, tuple, np.dtype)):
            return ("lit", a)
        if isinstance(a, np.generic):
            return ("lit", a)
        owner = None
        if isinstance(a, Tensor):
            owner, a = a, a._data
        elif self.arg_owners:
            owner = self.arg_owners.get(id(a))
        vid = self.ids.get(id(a))
        if vid is not None:
            if owner is not None and vid in self.g.externals and vid not in self.owners:
                self.owners[vid] = weakref.ref(owner)
            return vid
        if not isinstance(a, np.ndarray):
            self.fail(f"{reader} read a {type(a).__name__}, not a NumPy array")
            return ("lit", a)
        if self.in_vjp:
            self.opaque = True  # an adjoint computed something outside the ops
        else:
            base = self.roots.get(id(_root(a)))
            if base is not None and self.g.source[base] in ("arg", "node"):
                # a NumPy view of a tensor the call has (an argument, a result), made
                # outside the ops: a replay would read the captured call's buffer
                self.fail(f"{reader} read a view of a tensor of the call made outside "
                          f"tapegrad's ops (NumPy on its buffer); it cannot be replayed")
        vid = self.new(a, "ext")
        self.g.externals[vid] = a
        if owner is not None:
            self.owners[vid] = weakref.ref(owner)
        self.first_read[vid] = reader
        for leaf in self.leaves.values():
            if leaf.grad is not None and leaf.grad._data is a:
                self.g.ext_grad[vid] = leaf  # a gradient being accumulated into
        return vid

    def traced(self, arr, vid):
        """``arr`` (plain) handed to the walker as a _Traced array of value ``vid``."""
        if not isinstance(arr, np.ndarray) or isinstance(arr, _Traced):
            return arr
        t = arr.view(_Traced)
        self.ids[id(t)] = vid
        self.plain[id(t)] = arr
        self.keep.append(t)
        return t

    def plain_of(self, a):
        if isinstance(a, _Traced):
            p = self.plain.get(id(a))
            if p is None:
                p = a.view(np.ndarray)
                vid = self.ids.get(id(a))
                if vid is not None:
                    self.ids[id(p)] = vid
                self.plain[id(a)] = p
                self.keep.append(p)
            return p
        return a

    # ------------------------------------------------------------ the observer
    def __call__(self, op, kernel, *arrays, **kw):
        if self.in_kernel:
            return kernel(*arrays, **kw)
        self._writes()
        st = _tape.state
        self.arg_owners = {id(t._data): t for t in st.observed_args if isinstance(t, Tensor)}
        st.observed_args = ()
        ins = [self.val(a, op.name) for a in arrays]
        self.arg_owners = _NONE
        plain = [self.plain_of(a) for a in arrays]
        attrs = {k: v for k, v in kw.items() if k not in ("workspace", "alloc")}
        if "out" in attrs:
            self.fail(f"{op.name} was called with out=")
        draw = getattr(op, "draws", False)
        if draw:  # it draws from the global generator: the states around the draw
            if generator_given():
                self.fail(f"{op.name} draws from a generator it was given")
            before = raw_rng_state()
        self.in_kernel += 1
        try:
            out = kernel(*plain, **kw)
        finally:
            self.in_kernel -= 1
        if draw:
            self.draws.append((before, raw_rng_state()))
        single = not isinstance(out, tuple)
        outs = [np.asarray(o) if not isinstance(o, np.ndarray) else o
                for o in ((out,) if single else out)]
        refs = self._array_attrs(attrs)
        if refs:  # an index array the program made or was given: an input of the step
            op, ins, attrs = with_array_inputs(op, len(refs[0])), ins + refs[0], refs[1]
        step = Step("op", op, ins, attrs)
        if op.kind == "workspace":
            step.workspace = int(kw["workspace"].nbytes)
        k = len(self.g.steps)
        step.outs = [self.new(o, "node", k) for o in outs]
        self.g.steps.append(step)
        if _tape.state.raw and not _tape.state._grad:  # the walker's raw path
            outs = [self.traced(o, v) for o, v in zip(outs, step.outs)]
        return outs[0] if single else tuple(outs)

    def _array_attrs(self, attrs):
        """None, or (the value ids, the attrs with ``ArrayInput`` in their places) of
        the arrays inside ``attrs`` (an index's arrays: ``x[i]``, ``x[x > 0]``) that
        are values of the program (an argument, a step's result): a replay reads them
        afresh instead of the captured arrays."""
        vids, new = [], None
        for k, v in attrs.items():
            items = v if type(v) is tuple else (v,) if isinstance(v, np.ndarray) else ()
            found = False
            out = []
            for a in items:
                vid = self.ids.get(id(a)) if isinstance(a, np.ndarray) else None
                if vid is None or self.g.source[vid] not in ("arg", "node"):
                    out.append(a)  # (the attrs hold it: read live, as an external)
                    continue
                found = True
                out.append(ArrayInput(len(vids)))
                vids.append(vid)
            if found:
                new = dict(attrs) if new is None else new
                new[k] = tuple(out) if type(v) is tuple else out[0]
        return None if new is None else (vids, new)

    def vjp(self, node, vjp, ctx, g):
        self._writes()
        gs = g if isinstance(g, tuple) else (g,)
        if _tape.state._grad:
            self.fail(f"a gradient of a gradient (create_graph) through {node.op.name}")
            return vjp(ctx, g)
        if any(isinstance(x, Tensor) for x in gs):
            # a walk on Tensors that records nothing (forward over reverse: tangents
            # flow through the adjoints): its ops are dispatched, so captured, as any
            return vjp(ctx, g)
        if node.hooks or node.retain:
            self.fail(f"a hook or retain_grad on the output of {node.op.name}")
        for e in node.edges:
            if isinstance(e, Tensor):
                if e._hooks or e._post_hooks:
                    self.fail("a gradient hook on a leaf tensor")
                if id(e) not in self.leaves:
                    self.leaves[id(e)] = e
                    self.leaf_state[id(e)] = ("cleared" if id(e) in self.cleared else
                                              "none" if e.grad is None else e.grad._data)
        if self.in_vjp:
            return vjp(ctx, g)
        g_ins = []
        for x in gs:
            if x is None:
                g_ins.append(("lit", None))
            elif id(x) in self.ids:
                g_ins.append(self.ids[id(x)])
            else:
                self.fail(f"a gradient computed outside the ops reached the adjoint of "
                          f"{node.op.name}")
                g_ins.append(self.val(x, node.op.name))
        mark = len(self.g.steps)
        self.vmark = len(self.g.shapes)
        self.opaque = False
        traced_g = tuple(None if x is None else self.traced(self.plain_of(x), v)
                         for x, v in zip(gs, g_ins))
        # the saved values, as _Traced arrays: a vjp's own NumPy arithmetic is recorded
        old_in, old_out = ctx.inputs, ctx.out
        if old_in is not None:
            ctx.inputs = [self._traced_input(x, node.op.name) for x in old_in]
        if old_out is not None:
            ctx.out = (tuple(self._traced_input(x, node.op.name) for x in old_out)
                       if isinstance(old_out, tuple) else
                       self._traced_input(old_out, node.op.name))
        self.in_vjp += 1
        try:
            res = vjp(ctx, traced_g if isinstance(g, tuple) else traced_g[0])
        finally:
            self.in_vjp -= 1
            ctx.inputs, ctx.out = old_in, old_out
        # (a raw adjoint that mixed in a factory's Tensor, ``m.eye``, returns Tensors:
        # their arrays are the values its recorded ops made)
        res = [np.asarray(r) if isinstance(r, (np.generic, float)) else
               r._data if isinstance(r, Tensor) else r for r in res]
        if not self.opaque and any(r is not None and id(r) not in self.ids for r in res):
            self.opaque = True
        if self.opaque:  # replay the adjoint as a whole, on its saved values
            ctx.inputs, ctx.out = old_in, old_out
            self._opaque_vjp(node, ctx, g_ins, [self.plain_of(r) for r in res], mark)
            res = [None if r is None else self.plain_of(r) for r in res]
        out = []
        for r in res:
            out.append(None if r is None else self.traced(self.plain_of(r),
                                                          self.ids[id(r)]))
        self.opaque = False
        return out

    def _traced_input(self, x, reader):
        if not isinstance(x, np.ndarray):
            return x
        vid = self.val(x, reader)
        return self.traced(self.plain_of(x), vid) if type(vid) is int else x

    def _opaque_vjp(self, node, ctx, g_ins, res, mark):
        for st in self.g.steps[mark:]:
            for o in st.outs:
                self.g.orphan(o)
        del self.g.steps[mark:]
        for v in [v for v in self.g.externals if v >= self.vmark]:
            # read inside the adjoint that now replays whole: not an input of the program
            del self.g.externals[v]
            self.g.ext_grad.pop(v, None)
            self.g.orphan(v)
        inputs = [None if x is None else self.val(x, node.op.name) for x in ctx.inputs] \
            if ctx.inputs is not None else None
        out = ctx.out
        if out is not None:
            out = tuple(self.val(o, node.op.name) for o in out) if isinstance(out, tuple) \
                else self.val(out, node.op.name)
        if self._array_attrs(ctx.attrs):
            self.fail(f"the adjoint of {node.op.name}, replayed whole, reads an index "
                      f"array the program computes")
        step = Step("vjp", node.op, g_ins, dict(ctx.attrs))
        step.ctx = (inputs, out, tuple(ctx.shapes), tuple(ctx.dtypes),
                    tuple(ctx.needs_input_grad), ctx.m)
        k = len(self.g.steps)
        step.outs = [None if r is None else self.new(r, "node", k) for r in res]
        self.g.steps.append(step)
        self.g.stats_opaque += 1

    # ------------------------------------------------------------ the walker's arithmetic
    def ufunc(self, ufunc, method, inputs, out, kw):
        self._writes()
        name = getattr(ufunc, "__name__", str(ufunc))
        ins = [self.val(x, f"np.{name}") for x in inputs]
        plain = [self.plain_of(x) for x in inputs]
        if any(isinstance(v, np.ndarray) for v in kw.values()):
            self.opaque_event(f"np.{name} with array keywords")
        attrs = dict(kw, method=method) if method != "__call__" else dict(kw)
        fn = getattr(ufunc, method)
        if out is not None:
            if len(out) != 1:
                self.opaque_event(f"np.{name} with several outputs")
            o_obj = out[0]
            o_vid = self.val(o_obj, f"np.{name}")
            o_plain = self.plain_of(o_obj)
            fn(*plain, out=(o_plain,), **kw)
            step = Step("ufunc", ufunc, ins, attrs)
            step.into = o_vid
            k = len(self.g.steps)
            vid = self.g.add_value(tuple(o_plain.shape), o_plain.dtype, "node", k)
            self.g.alias[vid] = o_vid
            self.ids[id(o_obj)] = self.ids[id(o_plain)] = vid
            step.outs = [vid]
            self.g.steps.append(step)
            self.expected = 1  # the walker announces its accumulation into a .grad
            return o_obj
        res = fn(*plain, **kw)
        if isinstance(res, tuple):
            self.opaque_event(f"np.{name} with several outputs")
            return res
        res = np.asarray(res)
        step = Step("ufunc", ufunc, ins, attrs)
        k = len(self.g.steps)
        step.outs = [self.new(res, "node", k)]
        self.g.steps.append(step)
        return self.traced(res, step.outs[0])

    def opaque_event(self, what):
        """Something the capture cannot record step by step: inside an adjoint, the
        adjoint is replayed whole; elsewhere the program cannot be replayed."""
        if self.in_vjp:
            self.opaque = True
        else:
            self.fail(f"{what} on a gradient outside an adjoint")

    def method(self, name, src, res, **attrs):
        if self.in_kernel:
            return res
        step = Step(name, None, [self.val(src, name)], attrs)
        k = len(self.g.steps)
        step.outs = [self.new(res, "node", k)]
        self.g.steps.append(step)
        return self.traced(res, step.outs[0])

    # ------------------------------------------------------------ other events
    def seeds(self, seeds):
        self._writes()
        for s in seeds:
            if id(s) not in self.ids:
                vid = self.new(s, "const")
                self.g.consts[vid] = np.array(s, copy=True)
            self.seed_ids.add(id(s))

    def read(self, array, number=None):
        """Python read ``array``'s values: a guard on them. For ``number`` (``"item"``,
        ``"bool"``) the number comes back as a ``ReadNumber``: if it is only compared,
        the guard is on the comparisons' outcomes (see ``finish``)."""
        if self.in_kernel:
            return None
        self._writes()
        vid = self.val(array, "a read of a tensor's values")
        p = self.g.producer[vid]
        what = (f"{self.g.steps[p].name}(...)" if p is not None and p < len(self.g.steps)
                else "a tensor")
        what = f"{what}.item()" if number == "item" else f"{what} (as a bool)" \
            if number == "bool" else f"{number}({what})"
        step = Step("guard", None, [vid], {"what": what})
        step.expected = np.array(self.plain_of(array), copy=True)
        self.g.steps.append(step)
        if number is None or step.expected.dtype.kind not in "biuf":
            return None
        v = step.expected.item()
        if number in ("float", "int"):  # float(t) > 1.0: Python makes it a plain number,
            n = ReadNumber(v)           # so the comparison is read from the bytecode
            self.numbers.append((step, n))
            cmp = _compared_after(number, v)
            if cmp is None:
                n._exact()
            else:
                getattr(n, cmp[0])(cmp[1])
            return float(v) if number == "float" else int(v)
        if not _from_user():
            return None
        n = ReadNumber(v)
        self.numbers.append((step, n))
        return n

    def before_write(self, dst):
        """``dst`` is about to be written in place: its values kept (once) where it is
        not an array the call computed."""
        if self.undo is None:
            return
        base = dst if getattr(dst, "base", None) is None else dst.base
        if id(base) in self._undone or not isinstance(base, np.ndarray):
            return
        vid = self.ids.get(id(base))
        if vid is not None and self.g.source[self.g.root(vid)] == "node":
            return
        self._undone.add(id(base))
        self.undo.append((base, base.copy()))

    def write(self, dst, src):
        """``dst[...] = src`` (an in-place op's result written into its tensor)."""
        self._writes()
        self.expected = 1
        step = Step("write", None, [self.val(src, "an in-place write")], {})
        step.into = self.val(dst, "an in-place write")
        step.outs = []
        self.g.steps.append(step)

    def update(self, opt, group, p):
        """``opt`` is about to update ``p`` from ``p.grad`` (``Optimizer.step``)."""
        self._writes()
        self.detrace(p)
        g = p.grad._data
        step = Step("update", None, [self.val(g, type(opt).__name__ + ".step")], {})
        step.target = (opt, group, p)
        step.into = self.val(p._data, type(opt).__name__ + ".step")
        step.outs = []
        self.g.steps.append(step)
        self.expected = 1  # Optimizer.step announces the parameter's write

    def zero_grads(self, params, set_to_none):
        self._writes()
        if not set_to_none:
            self.expected = sum(1 for p in params if p.grad is not None)
        for p in params:
            step = Step("cleargrad" if set_to_none else "zerograd", None, [], {})
            step.target = p
            step.outs = []
            self.g.steps.append(step)
            if set_to_none:
                self.cleared.add(id(p))

    def detrace(self, t):
        """A leaf's .grad holding a _Traced array gets its plain view instead."""
        if t.grad is not None and isinstance(t.grad._data, _Traced):
            t.grad._data = self.plain_of(t.grad._data)

    # ------------------------------------------------------------ events from above the core
    # (``dispatch.notify``: the optimizers, ``zero_grads``, DDP and L-BFGS report so)
    def on_update(self, opt, group, p):
        self.update(opt, group, p)

    def on_zero_grads(self, params, set_to_none):
        self.zero_grads(params, set_to_none)

    def on_fail(self, why):
        self.fail(why)

    def on_refuse(self, why):
        raise RuntimeError(why)

    def on_random_step(self):
        """A random op asks whether its draw may be a step of the program (dropout's
        mask: yes, an op of kind ``random`` the replay runs again)."""

    def on_copy(self, src, dst):
        """An in-place op recorded with grad copied its input's old values (``dst``, a
        copy of ``src``) for the op to read: a step of the program, a fresh copy on
        every replay. (A copy of an array the capture does not know is left to the
        externals' check.)"""
        if self.in_kernel:
            return
        vid = self.ids.get(id(src))
        if vid is None:
            return
        step = Step("copy", None, [vid], {})
        step.outs = [self.new(dst, "node", len(self.g.steps))]
        self.g.steps.append(step)

    def on_constant(self, array):
        """A factory made ``array`` from Python values alone (zeros, ones, full, arange,
        linspace, eye; each Python value it came from is guarded): a constant of the
        program, copied afresh by each replay where the program writes into it or
        returns it (see ``finish``)."""
        if not self.factory_constants or self.in_kernel or id(array) in self.ids:
            return
        # a copy of the constant, made where the factory ran: kept for a value the
        # program writes into or returns (a fresh buffer each replay), dropped for one
        # it only reads (``finish``)
        g = self.g
        c = g.add_value(tuple(array.shape), array.dtype, "const")
        g.consts[c] = np.array(array, copy=True)
        step = Step("copy", None, [c], {})
        step.outs = [self.new(array, "node", len(g.steps))]
        g.steps.append(step)
        self.factory_consts[step.outs[0]] = step

    # ------------------------------------------------------------ the end
    def finish(self, result):
        """The Graph of the call that returned ``result`` (raises Unsupported)."""
        self._writes()
        for leaf in self.leaves.values():
            self.detrace(leaf)
        g = self.g
        g.output = self._outputs(result)
        for step, n in self.numbers:  # compared only: guard the outcomes, not the value
            uses, n._uses = n._uses, None
            if uses:
                step.attrs["preds"] = uses
            elif uses is not None and id(n) in self.returned:  # returned, no other use:
                step.attrs["preds"] = [("any", None, True)]    # no condition
        for leaf in self.leaves.values():
            st = self.leaf_state[id(leaf)]
            if leaf.grad is not None:
                vid = self.ids.get(id(leaf.grad._data))
                if vid is None:
                    continue  # untouched
                if g.source[vid] != "ext":
                    step = Step("setgrad", None, [vid], {})
                    step.target = leaf
                    step.outs = []
                    g.steps.append(step)
            if isinstance(st, str):
                if st == "none":
                    g.entry_guards.append(("grad_none", leaf))
            else:  # accumulated into: read live on replay, of the same spec
                g.entry_guards.append(("grad_spec", leaf, st.shape, st.dtype))
            # (a gradient hook registered on it later: the program runs none)
            g.entry_guards.append(("no_hooks", leaf))
        owners = list(self.leaves.values()) + [st.target[2] for st in g.steps
                                               if st.kind == "update"]
        seen = set()
        for t in owners:  # a parameter's buffer replaced (p.data = ...) captures again
            vid = self.ids.get(id(t._data))
            if vid is not None and g.source[vid] == "ext" and id(t) not in seen:
                seen.add(id(t))
                g.entry_guards.append(("buffer_is", t, t._data))
        if self.factory_consts:
            self._check_factory_consts()
        self.produced = {}  # id -> weakref of each array an op computed during the call
        for a in self.keep:
            vid = self.ids.get(id(a))
            if vid is not None and g.source[vid] == "node":
                try:
                    self.produced[id(a)] = weakref.ref(a)
                except TypeError:
                    pass
        if self.why is None:
            self._check_layouts()
        if self.why is None:
            self._check_externals()
        if self.why is not None:
            raise Unsupported(self.why)
        g.check()
        return g

    def _check_layouts(self):
        """A replay writes the values it computes into row-major buffers, where the
        call's own arrays kept their inputs' layout (an elementwise result of a
        transposed input is transposed). A ``reshape`` is a view or a copy by that
        layout: one that copied when captured is copied again on replay (program.py's
        ``_fresh``); one that was a view of such a value might copy on replay, so a
        write into either would no longer reach the other: refused where the program
        writes into that memory."""
        g = self.g
        loose = set()
        for a in self.keep:
            vid = self.ids.get(id(a))
            if vid is not None and g.source[vid] == "node" and vid not in g.alias and \
                    type(a) is np.ndarray and a.ndim > 1 and not a.flags.c_contiguous:
                loose.add(vid)
        if not loose:
            return
        written = {g.root(st.into) for st in g.steps
                   if type(getattr(st, "into", None)) is int}
        for st in g.steps:
            if st.kind == "op" and getattr(st.op, "name", None) == "reshape" and st.outs \
                    and st.outs[0] in g.alias:
                r = g.root(st.outs[0])
                if r in loose and r in written:
                    self.fail("a reshape viewed a result whose layout followed a transposed "
                              "input, and the function writes into that memory in place: a "
                              "replay's row-major buffer might make the reshape a copy")
                    return

    def _outputs(self, r):
        if isinstance(r, Tensor):
            if isinstance(r._data, _Traced):  # (tg.grad's results come from the walker)
                r._data = self.plain_of(r._data)
            if r._data is not None and id(r._data) not in self.ids:
                self.fail("the function returns a tensor computed outside the ops")
                return ("lit", r)
            node = r._node
            if node is not None and node.write >= 0 and r.requires_grad:
                self.fail("the function returns a tensor whose graph is still to be "
                          "differentiated (call backward() inside the compiled function, "
                          "or run it under no_grad)")
            vid = self.ids[id(r._data)]
            if node is None and self.leaf_outputs:  # a tensor returned as it came: the
                # replay returns that tensor, as eager (a new one over its array would
                # not reach a leaf's .grad)
                pos = self.arg_tensors.get(id(r))
                if type(pos) in (int, str):
                    return ("arg", pos)
                if r.requires_grad and self.g.source[vid] == "ext":
                    return ("lit", r)
            return ("tensor", vid)
        if isinstance(r, ReadNumber):
            if self.item_outputs and r._uses is not None:  # (only compared so far)
                for step, n in self.numbers:
                    if n is r and self._unwritten(step):
                        self.returned.add(id(r))
                        return ("item", step.ins[0])
            return ("lit", r._exact())
        if isinstance(r, (tuple, list)):
            return (type(r), [self._outputs(x) for x in r])
        if isinstance(r, dict):
            return (dict, [(k, self._outputs(v)) for k, v in r.items()])
        if r is None or isinstance(r, (int, float, bool, str)):
            return ("lit", r)
        self.fail(f"the function returns a {type(r).__name__}")
        return ("lit", r)

    def _unwritten(self, guard):
        """Whether the value ``guard`` read keeps, to the end of the program, the
        values it had when read: computed by the program (not a view of a parameter,
        an argument or other outside memory, which a later step or the optimizer may
        write) and written by no later step (``s.add_(1)`` after ``s.item()``)."""
        g = self.g
        r = g.root(guard.ins[0])
        if g.source[r] != "node":
            return False
        k = g.steps.index(guard)
        return not any(st.into is not None and g.root(st.into) == r for st in g.steps[k:])

    def _check_factory_consts(self):
        """A factory's value the program only reads is the constant itself (its copy
        step's output goes to an unread value, which the program drops); one it writes
        into or returns keeps the copy: the program writes into, or returns, a fresh
        buffer each replay."""
        g = self.g

        def base(v):
            while v in g.alias:
                v = g.alias[v]
            return v
        touched = {base(st.into) for st in g.steps if type(st.into) is int}
        touched |= {base(v) for v in g.output_values()}
        for v, step in self.factory_consts.items():
            if v in touched:
                continue
            k = g.producer[v]
            g.source[v], g.consts[v], g.producer[v] = "const", g.consts[step.ins[0]], None
            step.outs = [g.add_value(g.shapes[v], g.dtypes[v], "node", k)]

    def _check_externals(self):
        """Externals must outlive the call (parameters, state); one that dies was
        computed outside the ops during it and cannot be replayed."""
        g = self.g
        refs = {}
        for vid, a in g.externals.items():
            if g.source[vid] == "ext":
                try:
                    refs[vid] = weakref.ref(a)
                except TypeError:
                    refs[vid] = lambda a=a: a
        a = None  # (the loop variable held the last one)
        held = {}
        g.externals.clear()
        self.ids.clear()
        self.keep.clear()
        self.plain.clear()
        self.roots.clear()
        gc.collect(0)  # young objects: what the call made (a full collection costs ~70 ms)
        for vid, ref in refs.items():
            a = ref()
            if a is None:
                self.fail(f"{self.first_read.get(vid, 'an op')} read a tensor computed "
                          f"outside tapegrad's ops during the call (shape "
                          f"{g.shapes[vid]}, {g.dtypes[vid]}): NumPy on a buffer, a factory "
                          f"or the random generator; it cannot be replayed")
            else:
                held[vid] = a
        g.externals.update(held)
        # the tensors the externals were read through, alive after the call (not a
        # wrapper made during it, not a .grad the entry guards follow): a replay needs
        # each alive still, over the same buffer
        g.owners = []
        for vid, ref in self.owners.items():
            t = ref()
            if t is not None and vid in held and vid not in g.ext_grad \
                    and t._data is held[vid]:
                g.owners.append((ref, held[vid], t.requires_grad))


_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INNER = (os.path.join(_PKG, "tensor.py"), os.path.join(_PKG, "compiler") + os.sep)
_EXAMPLES = os.path.join(_PKG, "examples") + os.sep


def _from_user():
    """Whether the tensor read now was asked for by the user's code (not the library's:
    a library function reading a value gets the plain number, its value guarded)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_INNER):
        f = f.f_back
    if f is None:
        return False
    name = f.f_code.co_filename
    return not name.startswith(_PKG) or name.startswith(_EXAMPLES)


_CMP = {"__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=", "__eq__": "==",
        "__ne__": "!="}
_SYM = {v: k for k, v in _CMP.items()}
_CODES = weakref.WeakKeyDictionary()  # code -> {offset: index}, its instructions


def _compared_after(kind, v):
    """``(method, operand)`` when the user's code calls ``float(t)`` / ``int(t)`` only to
    compare the number right away with a constant or a local (``float(loss) > 1.0``:
    the call, a ``LOAD_CONST``/``LOAD_FAST``, a ``COMPARE_OP``), else None. ``int()``
    of a non-integer value is not: the comparison would see the truncated number."""
    if kind == "int" and type(v) is not int:
        return None
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_INNER):
        f = f.f_back
    if f is None or f.f_code.co_filename.startswith(_PKG):
        return None
    code = f.f_code
    found = _CODES.get(code)
    if found is None:
        ins = list(dis.get_instructions(code))
        found = _CODES[code] = (ins, {x.offset: i for i, x in enumerate(ins)})
    ins, at = found
    i = at.get(f.f_lasti)
    if i is None or not ins[i].opname.startswith("CALL") or i + 2 >= len(ins):
        return None
    load, cmp = ins[i + 1], ins[i + 2]
    if cmp.opname != "COMPARE_OP" or cmp.argval not in _SYM:
        return None
    if load.opname == "LOAD_CONST":
        other = load.argval
    elif load.opname == "LOAD_FAST":
        other = f.f_locals.get(load.argval)
    else:
        return None
    if type(other) not in (int, float, bool):
        return None
    return _SYM[cmp.argval], other


class ReadNumber:
    """A number Python read from a tensor during a capture (``item()``, ``bool()``):
    it behaves as the number and records how it is used. While it is only compared
    with plain numbers (``<``, ``>``, ``==``, truth value), the capture guards each
    comparison's outcome; any other use (arithmetic, conversion, formatting, NumPy)
    makes the exact value the guard. After the capture it is the plain number."""
    __slots__ = ("_v", "_uses")

    def __init__(self, v):
        self._v = v
        self._uses = []    # (op, other, outcome); None: the exact value is guarded

    def _exact(self):
        self._uses = None
        return self._v

    def __bool__(self):
        r = bool(self._v)
        if self._uses is not None:
            self._uses.append(("bool", None, r))
        return r

    def __hash__(self):
        return hash(self._exact())

    def __repr__(self):
        return repr(self._exact())

    def __str__(self):
        return str(self._exact())

    def __format__(self, spec):
        return format(self._exact(), spec)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._exact(), dtype=dtype)

    def __tg_scalar__(self):
        """The plain number, for an op taking it as a scalar (its value is guarded)."""
        return self._exact()

    def __getattr__(self, name):  # real, imag, is_integer, conjugate, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._exact(), name)


def _compare(name, sym):
    op = getattr(operator, name)

    def cmp(self, other):
        if type(other) is ReadNumber:
            other = other._exact()
        if type(other) not in (int, float, bool):
            return getattr(self._exact(), name)(other)
        r = op(self._v, other)
        if self._uses is not None:
            self._uses.append((sym, other, r))
        return r
    cmp.__name__ = name
    return cmp


def _exact(name):
    def op(self, *args):
        args = [a._exact() if type(a) is ReadNumber else a for a in args]
        f = getattr(self._exact(), name, None)
        if f is None:
            if not args:
                raise TypeError(f"{type(self._v).__name__} has no {name}")
            return NotImplemented
        return f(*args)
    op.__name__ = name
    return op


for _n, _s in _CMP.items():
    setattr(ReadNumber, _n, _compare(_n, _s))
for _n in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv",
           "rfloordiv", "mod", "rmod", "divmod", "rdivmod", "pow", "rpow", "neg", "pos",
           "abs", "invert", "and", "rand", "or", "ror", "xor", "rxor", "lshift", "rlshift",
           "rshift", "rrshift", "float", "int", "index", "round", "trunc", "floor",
           "ceil", "complex"):
    if hasattr(int, f"__{_n}__") or hasattr(float, f"__{_n}__"):
        setattr(ReadNumber, f"__{_n}__", _exact(f"__{_n}__"))
numbers.Real.register(ReadNumber)


def begin(rec):
    rec.lw = last_write[0]
    _tls.rec = rec


def end():
    _tls.rec = None
