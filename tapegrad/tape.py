"""The record: thread-local recording state, nodes, and the reverse walker.

A recorded op call makes a ``Node``: the op, its attrs, one edge per input (the
producer node and output index, or the leaf Tensor, or None), the saved values with
their versions, and a sequence number. Outputs own their node; nodes own their
inputs' nodes; nothing points back at outputs, so a record dies by reference
counting alone. The walker visits nodes reachable from the roots in decreasing
sequence order (a heap), which is a topological order. It knows no op by name.
"""
import heapq
from heapq import heappush, heappop
import itertools
import threading
import weakref

import numpy as _np

from . import devices as _devices

__all__ = ["Node", "is_grad_enabled", "set_grad_enabled_flag", "state", "backward_pass"]

_seq = itertools.count()
next_seq = _seq.__next__


class _State(threading.local):
    def __init__(self):
        self.grad_enabled = True
        self.tapes = []          # active explicit Tapes, innermost last
        self.anomaly = False


state = _State()

# set by tensor.py at import (the tape may not import tensor):
# wrap(array, node=None, idx=0, version=None) -> Tensor
_hooks = {"wrap": None, "tensor_type": None}


def install_tensor(tensor_type, wrap):
    _hooks["tensor_type"] = tensor_type
    _hooks["wrap"] = wrap


def is_grad_enabled():
    return state.grad_enabled


class Node:
    """One recorded op call (the ``grad_fn`` of its outputs)."""
    __slots__ = ("op", "attrs", "edges", "shapes", "dtypes", "needs", "seq", "__dict__",
                 "__weakref__")
    # set only when used (the lazily created __dict__ holds them); these are defaults
    saved = None        # list: the saved inputs (Tensors), None where not saved
    versions = None     # list: (version holder, version at save) per saved input
    out = None          # the saved output array(s)
    out_version = None  # (holder, version) of the saved output
    hooks = None        # {output index: [hook, ...]} of non-leaf tensors
    retain = None       # {output index: weakref to tensor} for retain_grad
    tapes = None        # frozenset of ids of the Tapes this was recorded on
    freed = False       # saved values released by a backward without retain_graph
    where = None        # user call site (anomaly mode)

    def __init__(self, op, attrs, edges, shapes, dtypes, needs):
        self.op = op
        self.attrs = attrs
        self.edges = edges
        self.shapes = shapes
        self.dtypes = dtypes
        self.needs = needs
        self.seq = next_seq()

    def name(self):
        return self.op.name

    def __repr__(self):
        return f"<{_backward_name(self.op.name)}0 object at {id(self):#x}>"

    @property
    def next_functions(self):
        out = []
        for e in self.edges:
            if e is None:
                out.append((None, 0))
            elif type(e) is tuple:
                out.append(e)
            else:
                out.append(("AccumulateGrad", 0))
        return tuple(out)

    def release(self):
        """Free the saved values (backward without retain_graph); a later backward
        through this node raises."""
        self.freed = True
        if self.saved is not None:
            self.saved = None
        if self.out is not None:
            self.out = None

    def register_hook(self, idx, fn):
        if self.hooks is None:
            self.hooks = {}
        self.hooks.setdefault(idx, []).append(fn)

    def retain_output(self, idx, tensor):
        if self.retain is None:
            self.retain = {}
        self.retain[idx] = weakref.ref(tensor)


def _backward_name(name):
    return "".join(p.capitalize() for p in name.split("_")) + "Backward"


class Ctx:
    """What a vjp sees: inputs, out, attrs, shapes, needs_input_grad, m."""
    __slots__ = ("inputs", "out", "attrs", "shapes", "dtypes", "needs_input_grad", "m", "node")


_namespace = {"m": None}


def install_namespace(m):
    _namespace["m"] = m


_FREED_MSG = ("Trying to backward through the graph a second time (or to use saved values "
              "after they were freed). Saved values of a recording are freed after "
              "backward()/grad(); pass retain_graph=True to the first call if you need to "
              "differentiate through the same recording again")


def _make_ctx(node, traced, needs, ctx=None):
    if node.freed:
        raise RuntimeError(f"{node.op.name}: {_FREED_MSG}")
    if ctx is None:
        ctx = Ctx()
        ctx.m = _namespace["m"]
    ctx.attrs = node.attrs
    ctx.shapes = node.shapes
    ctx.dtypes = node.dtypes
    ctx.needs_input_grad = needs
    ctx.node = node
    saved = node.saved
    if saved is not None:
        versions = node.versions
        vals = []
        for i, s in enumerate(saved):
            vr = versions[i]
            if vr is None:
                if traced and s is not None and hasattr(s, "shape") and not isinstance(s, _hooks["tensor_type"]):
                    s = _hooks["wrap"](s)
                vals.append(s)
                continue
            holder, v = vr
            if holder[0] != v:
                raise RuntimeError(
                    f"{node.op.name}: one of the variables needed for gradient computation "
                    f"has been modified by an inplace operation: input "
                    f"'{node.op.args[i]}' of {node.op.name} (shape {node.shapes[i]}) is at "
                    f"version {holder[0]}; expected version {v}. Hint: avoid modifying it "
                    f"in place, or clone() it before the in-place change")
            vals.append(s if traced else s._data)
        ctx.inputs = vals
    else:
        ctx.inputs = None
    if node.out is not None:
        holder, v = node.out_version
        if holder[0] != v:
            raise RuntimeError(
                f"{node.op.name}: one of the variables needed for gradient computation has "
                f"been modified by an inplace operation: the output of {node.op.name} is at "
                f"version {holder[0]}; expected version {v}")
        if traced:
            wrap = _hooks["wrap"]
            if node.op.nout == 1:
                ctx.out = wrap(node.out, node, 0, holder)
            else:
                ctx.out = tuple(wrap(o, node, k, holder) for k, o in enumerate(node.out))
        else:
            ctx.out = node.out
    else:
        ctx.out = None
    return ctx


def _raw_inputs(node):
    """The saved inputs as raw arrays, after checking their versions."""
    vals = []
    for i, (s, vr) in enumerate(zip(node.saved, node.versions)):
        if vr is not None:
            if vr[0][0] != vr[1]:
                _make_ctx(node, False, ())  # raises the in-place modification error
            s = s._data
        vals.append(s)
    return vals


def _needed_nodes(roots, input_keys, tape_id):
    """Nodes from which a requested input is reachable (pruning for grad(inputs=))."""
    memo = {}
    stack = [n for n in roots]
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        pending = False
        if tape_id is None or (node.tapes and tape_id in node.tapes):
            for e in node.edges:
                if type(e) is tuple and e[0] not in memo:
                    stack.append(e[0])
                    pending = True
        if pending:
            continue
        stack.pop()
        hit = False
        if tape_id is None or (node.tapes and tape_id in node.tapes):
            for e in node.edges:
                if e is None:
                    continue
                if type(e) is tuple:
                    if memo.get(e[0]) or (id(e[0]), e[1]) in input_keys:
                        hit = True
                elif id(e) in input_keys:
                    hit = True
        memo[node] = hit
    return memo


def _check_finite(op_name, where, arr, phase):
    data = getattr(arr, "_data", arr)
    if hasattr(data, "dtype") and data.dtype.kind == "f":
        ok, bad = _devices.all_finite(data)
        if not ok:
            raise RuntimeError(f"detect_anomaly: the {phase} of '{op_name}' produced {bad}"
                               + (f"; the op was called at {where}" if where else ""))


def backward_pass(roots, seeds, *, inputs=None, retain_graph=False, traced=False,
                  accumulate=True, tape_id=None):
    """Reverse mode from ``roots`` (Tensors) with cotangents ``seeds``.

    ``inputs``: Tensors whose gradients are returned (a list, None where unused);
    without it gradients accumulate into the ``.grad`` of leaves that require grad.
    ``traced``: run adjoints on Tensors with recording on (create_graph / outer tape).
    ``tape_id``: only walk nodes recorded on that Tape.
    """
    Tensor = _hooks["tensor_type"]
    wrap = _hooks["wrap"]
    prev = state.grad_enabled
    state.grad_enabled = traced
    try:
        return _walk(roots, seeds, inputs, retain_graph, traced, accumulate, tape_id,
                     Tensor, wrap)
    finally:
        state.grad_enabled = prev


def _walk(roots, seeds, inputs, retain_graph, traced, accumulate, tape_id, Tensor, wrap):
    grads = {}
    heap = []
    results = None
    input_keys = None
    if inputs is not None:
        input_keys = {}
        for k, t in enumerate(inputs):
            key = (id(t._node), t._idx) if t._node is not None else id(t)
            input_keys.setdefault(key, []).append(k)
        results = [None] * len(inputs)
    delivered = set()
    anomaly = state.anomaly
    ctx0 = Ctx()  # reused for every node on the raw path
    ctx0.m = _namespace["m"]

    pending = {}  # id(leaf) -> [leaf, summed gradient]; hooks see the total

    def deliver(t, g):
        p = pending.get(id(t))
        if p is None:
            pending[id(t)] = [t, g]
        else:
            p[1] = p[1] + g

    for t, s in zip(roots, seeds):
        if traced and not isinstance(s, Tensor):
            s = wrap(s)
        elif not traced and isinstance(s, Tensor):
            s = s._data
        delivered.add(id(s))
        node = t._node
        if node is None:
            deliver(t, s)
            continue
        slot = grads.get(node)
        if slot is None:
            slot = grads[node] = [None] * node.op.nout
            heapq.heappush(heap, (-node.seq, node))
        i = t._idx
        slot[i] = s if slot[i] is None else slot[i] + s

    needed = None
    if input_keys is not None:
        needed = _needed_nodes([n for _, n in heap], input_keys, tape_id)

    while heap:
        _, node = heappop(heap)
        gs = grads.pop(node)
        if node.hooks:
            for idx, fns in node.hooks.items():
                if gs[idx] is not None:
                    gs[idx] = _run_hooks(fns, gs[idx], traced, wrap)
        if node.retain:
            for idx, ref in node.retain.items():
                t = ref()
                if t is not None and gs[idx] is not None:
                    _accumulate(t, gs[idx], traced, delivered, wrap)
        if input_keys is not None:
            for idx in range(len(gs)):
                ks = input_keys.get((id(node), idx))
                if ks and gs[idx] is not None:
                    for k in ks:
                        results[k] = gs[idx] if results[k] is None else results[k] + gs[idx]
            if not needed.get(node):
                continue
        if tape_id is not None and not (node.tapes and tape_id in node.tapes):
            continue
        edges = node.edges
        op = node.op
        if needed is not None:
            needs = tuple(e is not None and (
                (type(e) is tuple and (needed.get(e[0]) or (id(e[0]), e[1]) in input_keys))
                or (type(e) is not tuple and id(e) in input_keys)) for e in edges)
        else:
            needs = node.needs
        if traced or node.freed or node.out is not None:
            ctx = _make_ctx(node, traced, needs, None if traced else ctx0)
        else:  # the raw path, inlined: most nodes of a training step come here
            ctx = ctx0
            ctx.attrs = node.attrs
            ctx.shapes = node.shapes
            ctx.dtypes = node.dtypes
            ctx.needs_input_grad = needs
            ctx.node = node
            ctx.out = None
            ctx.inputs = None if node.saved is None else _raw_inputs(node)
        in_grads = op.vjp(ctx, gs[0] if op.nout == 1 else tuple(gs))
        if not retain_graph:
            node.release()
        if len(in_grads) != len(edges):
            raise RuntimeError(f"{op.name}: vjp returned {len(in_grads)} gradients "
                               f"for {len(edges)} inputs")
        shapes = node.shapes
        dtypes = node.dtypes
        for i, e in enumerate(edges):
            gi = in_grads[i]
            if gi is None or not needs[i]:
                continue
            shape = shapes[i]
            if gi.shape != shape:
                if op.broadcasting:
                    gi = ctx.m.sum_to(gi, shape)
                else:
                    raise RuntimeError(f"{op.name}: gradient of input '{op.args[i]}' has "
                                       f"shape {tuple(gi.shape)}, expected {shape}")
            dt = dtypes[i]
            if traced:
                if gi._data.dtype != dt:
                    gi = gi.to(dt)
            elif gi.dtype is not dt and gi.dtype != dt:
                gi = gi.astype(dt)
            if anomaly:
                _check_finite(op.name, node.where, gi, "backward")
            if type(e) is tuple:
                pn, idx = e
                slot = grads.get(pn)
                if slot is None:
                    slot = grads[pn] = [None] * pn.op.nout
                    heappush(heap, (-pn.seq, pn))
                slot[idx] = gi if slot[idx] is None else slot[idx] + gi
            else:
                deliver(e, gi)
    for t, g in pending.values():
        if t._hooks:
            g = _run_hooks(t._hooks, g, traced, wrap)
        if input_keys is not None:
            for k in input_keys.get(id(t), ()):
                results[k] = g if results[k] is None else results[k] + g
        elif t.requires_grad:
            _accumulate(t, g, traced, delivered, wrap)
    return results


def _run_hooks(fns, g, traced, wrap):
    for fn in fns:
        gt = g if traced else wrap(g)
        r = fn(gt)
        if r is not None:
            g = r if traced else getattr(r, "_data", r)
    return g


def _accumulate(t, g, traced, delivered, wrap):
    if traced:
        if not isinstance(g, _hooks["tensor_type"]):
            g = wrap(g)
        t.grad = g if t.grad is None else t.grad + g
        return
    if isinstance(g, _hooks["tensor_type"]):
        g = g._data
    elif isinstance(g, _np.generic):
        g = _np.asarray(g)
    cur = t.grad
    if cur is None:
        if id(g) in delivered or not g.flags.owndata or not g.flags.writeable:
            g = g.copy()
        delivered.add(id(g))
        t.grad = wrap(g)
    elif cur._node is None and cur._data.shape == g.shape and cur._data.flags.writeable:
        cur._data += g
        cur._version[0] += 1
    else:
        t.grad = wrap(cur._data + g)
