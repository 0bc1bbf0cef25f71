"""The record: thread-local recording state, nodes, and the reverse walker.

A recorded op call makes a ``Node``: the op, its attrs, one edge per input (the
producer node and output index, or the leaf Tensor, or None), the saved values with
their versions, and a sequence number. Outputs own their node; nodes own their
inputs' nodes; nothing points back at outputs, so a record dies by reference
counting alone. The walker visits nodes reachable from the roots in decreasing
sequence order (a heap), which is a topological order. It knows no op by name.
"""
from heapq import heappush, heappop
import itertools
import threading
import weakref

import numpy as _np

from . import devices as _devices

__all__ = ["Node", "make_node", "is_grad_enabled", "state", "backward_pass"]

_seq = itertools.count()
next_seq = _seq.__next__


# what bind's fast paths may do in this thread, kept in ``state.mode`` so that an op
# reads one thread-local attribute instead of three (grad mode, tapes, anomaly)
GENERAL = 0        # an explicit Tape is active or anomaly mode is on: the general path
FAST_NO_GRAD = 1   # neither, and grad mode is off: fast path, nothing is recorded
FAST_RECORD = 2    # neither, and grad mode is on: fast path, record when an input needs


class _TapeStack(list):
    """The active explicit Tapes of one thread, innermost last; every change
    refreshes ``state.mode`` (code mutates this list in place)."""
    __slots__ = ()

    def _changed(self, result=None):
        state._refresh()
        return result

    def append(self, tape):
        return self._changed(list.append(self, tape))

    def extend(self, tapes):
        return self._changed(list.extend(self, tapes))

    def insert(self, i, tape):
        return self._changed(list.insert(self, i, tape))

    def remove(self, tape):
        return self._changed(list.remove(self, tape))

    def pop(self, i=-1):
        return self._changed(list.pop(self, i))

    def clear(self):
        return self._changed(list.clear(self))

    def __setitem__(self, i, v):
        return self._changed(list.__setitem__(self, i, v))

    def __delitem__(self, i):
        return self._changed(list.__delitem__(self, i))

    def __iadd__(self, tapes):
        list.extend(self, tapes)
        return self._changed(self)

    def __imul__(self, n):
        list.__imul__(self, n)
        return self._changed(self)


class _State(threading.local):
    """Per-thread recording state: grad mode, active Tapes, anomaly mode, and
    ``mode`` (one of GENERAL, FAST_NO_GRAD, FAST_RECORD) derived from the three.

    The three are properties so that every way of changing them (context managers,
    tests assigning ``state.grad_enabled``, in-place edits of ``state.tapes``) keeps
    ``mode`` right; code on hot paths reads ``_grad``/``_tapes``/``_anomaly``."""

    def __init__(self):
        self._grad = True
        self._tapes = _TapeStack()
        self._anomaly = False
        self.mode = FAST_RECORD

    def _refresh(self):
        self.mode = (GENERAL if self._tapes or self._anomaly else
                     FAST_RECORD if self._grad else FAST_NO_GRAD)

    @property
    def grad_enabled(self):
        return self._grad

    @grad_enabled.setter
    def grad_enabled(self, flag):
        self._grad = flag
        self._refresh()

    @property
    def anomaly(self):
        return self._anomaly

    @anomaly.setter
    def anomaly(self, flag):
        self._anomaly = flag
        self._refresh()

    @property
    def tapes(self):
        return self._tapes

    @tapes.setter
    def tapes(self, tapes):
        self._tapes = _TapeStack(tapes)
        self._refresh()


state = _State()

# set by tensor.py at import (the tape may not import tensor):
# wrap(array, node=None, idx=0, version=None) -> Tensor
_hooks = {"wrap": None, "tensor_type": None}


def install_tensor(tensor_type, wrap):
    _hooks["tensor_type"] = tensor_type
    _hooks["wrap"] = wrap


def is_grad_enabled():
    return state._grad


class Node:
    """One recorded op call (the ``grad_fn`` of its outputs).

    The fields every node has, or that the walker reads for every node, are slots
    (a slot read is cheaper than a class default behind an instance dict, and the
    lazily created dict would cost an allocation per node). There is no ``__init__``:
    a class without one is quicker to instantiate, and one op call makes one node.
    ``make_node`` fills every slot; the operator fast paths in tensor.py do the same
    inline.
    """
    __slots__ = ("op", "attrs", "edges", "shapes", "dtypes", "needs", "seq",
                 "saved",        # the saved inputs (Tensors, or raw values), None where not saved
                 "versions",     # the version of each saved Tensor when saved, None for others
                 "out",          # the saved output array(s)
                 "out_version",  # (holder, version) of the saved output
                 "hooks",        # {output index: [hook, ...]} of non-leaf tensors
                 "retain",       # {output index: weakref to tensor} for retain_grad
                 "freed",        # saved values released by a backward without retain_graph
                 "same",         # an elementwise op whose tensor inputs all have the output's
                                 # shape and dtype: so do the gradients its vjp returns
                 "__dict__", "__weakref__")
    # rarely set, so in the lazily created __dict__; these are the defaults
    tapes = None        # frozenset of ids of the Tapes this was recorded on
    where = None        # user call site (anomaly mode)

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


def make_node(op, attrs, edges, shapes, dtypes, needs, saved=None, versions=None,
              out=None, out_version=None):
    """A new Node with every slot set (the next sequence number, nothing freed)."""
    node = Node()
    node.op = op
    node.attrs = attrs
    node.edges = edges
    node.shapes = shapes
    node.dtypes = dtypes
    node.needs = needs
    node.seq = next_seq()
    node.saved = saved
    node.versions = versions
    node.out = out
    node.out_version = out_version
    node.hooks = None
    node.retain = None
    node.freed = False
    node.same = False
    return node


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
            # a Tensor's version counter (a one-element list) is fixed at creation
            now = s._version[0]
            if now != vr:
                raise RuntimeError(
                    f"{node.op.name}: one of the variables needed for gradient computation "
                    f"has been modified by an inplace operation: input "
                    f"'{node.op.args[i]}' of {node.op.name} (shape {node.shapes[i]}) is at "
                    f"version {now}; expected version {vr}. Hint: avoid modifying it "
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
    prev = state._grad
    state._grad = traced  # the property's work, inline (tapes and anomaly stay as they are)
    if state.mode:
        state.mode = FAST_RECORD if traced else FAST_NO_GRAD
    try:
        return _walk(roots, seeds, inputs, retain_graph, traced, accumulate, tape_id,
                     Tensor, wrap)
    finally:
        state._grad = prev
        state._refresh()


def _walk(roots, seeds, inputs, retain_graph, traced, accumulate, tape_id, Tensor, wrap):
    # grads: node -> the gradient of its output (nout == 1; never None once set),
    # or a list of them, None where none arrived yet (nout > 1)
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
    anomaly = state._anomaly
    ctx0 = Ctx()  # reused for every node on the raw path
    ctx0.m = _namespace["m"]
    # id(leaf) -> [leaf, summed gradient, whether that sum is an array made here (then
    # later terms are added in place)]; summed first, so that the leaf's hooks see the total
    pending = {}
    # a "same" node skips the shape and dtype checks of its input gradients when its
    # own gradient has its output's shape and dtype: true of every gradient the walker
    # passes on; not necessarily of a seed (listed here when it differs) or a hook's
    off_spec = set()

    for t, s in zip(roots, seeds):
        if traced and not isinstance(s, Tensor):
            s = wrap(s)
        elif not traced and isinstance(s, Tensor):
            s = s._data
        delivered.add(id(s))
        node = t._node
        if node is None:
            p = pending.get(id(t))
            if p is None:
                pending[id(t)] = [t, s, False]
            else:
                p[1] = p[1] + s
            continue
        if node.same and not traced and not (
                s.shape == node.shapes[0] and s.dtype == node.dtypes[0]):
            off_spec.add(node)
        _add_grad(grads, heap, node, t._idx, s)

    needed = None
    if input_keys is not None:
        needed = _needed_nodes([n for _, n in heap], input_keys, tape_id)

    # The loop body is the cost of backward on small tensors, so the common case
    # (a raw-array vjp of a one-output node, no hooks) is written out inline:
    # no frame per node for the ctx, the saved inputs, release() or accumulation.
    # nxt: the one node queued while the heap is empty (a chain), with its gradient
    # nxt_g, kept out of the heap and of grads
    nxt = nxt_g = None
    selective = input_keys is not None or tape_id is not None
    while heap or nxt is not None:
        if nxt is not None:
            node = nxt
            g = nxt_g
            nxt = None
        else:
            node = heappop(heap)[1]
            g = grads.pop(node)
        op = node.op
        single = op.nout == 1
        check = traced or not node.same or (off_spec and node in off_spec)
        if node.hooks is not None or node.retain is not None:
            g = _node_hooks(node, g, single, traced, wrap, delivered)
            check = True
        edges = node.edges
        if selective:  # grad(inputs=...) or a Tape's gradient
            if input_keys is not None:
                _collect(node, g, single, input_keys, results)
                if not needed.get(node):
                    continue
            if tape_id is not None and not (node.tapes and tape_id in node.tapes):
                continue
            if needed is not None:
                needs = tuple(e is not None and (
                    (type(e) is tuple and (needed.get(e[0]) or (id(e[0]), e[1]) in input_keys))
                    or (type(e) is not tuple and id(e) in input_keys)) for e in edges)
            else:
                needs = node.needs
        else:
            needs = node.needs
        if traced or node.freed or node.out is not None:
            ctx = _make_ctx(node, traced, needs, None if traced else ctx0)
        else:  # the raw path: most nodes of a training step come here
            ctx = ctx0
            ctx.attrs = node.attrs
            ctx.shapes = node.shapes
            ctx.dtypes = node.dtypes
            ctx.needs_input_grad = needs
            ctx.node = node
            ctx.out = None
            saved = node.saved
            if saved is None:
                ctx.inputs = None
            else:  # the saved inputs as raw arrays, after checking their versions
                vals = list(saved)
                i = 0
                for v in node.versions:
                    if v is not None:
                        s = vals[i]
                        if s._version[0] != v:
                            _make_ctx(node, False, ())  # raises the in-place error
                        vals[i] = s._data
                    i += 1
                ctx.inputs = vals
        in_grads = op.vjp(ctx, g if single else tuple(g))
        if not retain_graph:  # Node.release, inline
            node.freed = True
            node.saved = None
            node.out = None
        if len(in_grads) != len(edges):
            raise RuntimeError(f"{op.name}: vjp returned {len(in_grads)} gradients "
                               f"for {len(edges)} inputs")
        for i, e in enumerate(edges):
            gi = in_grads[i]
            if gi is None or not needs[i]:
                continue
            if check:
                shape = node.shapes[i]
                if gi.shape != shape:
                    if op.broadcasting:
                        gi = ctx.m.sum_to(gi, shape)
                    else:
                        raise RuntimeError(f"{op.name}: gradient of input '{op.args[i]}' has "
                                           f"shape {tuple(gi.shape)}, expected {shape}")
                dt = node.dtypes[i]
                if traced:
                    if gi._data.dtype != dt:
                        gi = gi.to(dt)
                elif gi.dtype is not dt and gi.dtype != dt:
                    gi = gi.astype(dt)
            if anomaly:
                _check_finite(op.name, node.where, gi, "backward")
            if type(e) is tuple:
                pn = e[0]
                if pn is nxt:
                    nxt_g = nxt_g + gi
                elif pn.op.nout == 1:
                    cur = grads.get(pn)
                    if cur is not None:
                        grads[pn] = cur + gi
                    elif nxt is None and not heap:
                        nxt = pn
                        nxt_g = gi
                    else:
                        grads[pn] = gi
                        heappush(heap, (-pn.seq, pn))
                        if nxt is not None:
                            grads[nxt] = nxt_g
                            heappush(heap, (-nxt.seq, nxt))
                            nxt = None
                else:
                    if nxt is not None:
                        grads[nxt] = nxt_g
                        heappush(heap, (-nxt.seq, nxt))
                        nxt = None
                    _add_grad(grads, heap, pn, e[1], gi)
            else:  # a leaf
                p = pending.get(id(e))
                if p is None:
                    pending[id(e)] = [e, gi, False]
                elif p[2]:
                    p[1] += gi
                else:
                    p[1] = p[1] + gi
                    p[2] = not traced and type(p[1]) is _np.ndarray
    for t, g, _ in pending.values():
        if t._hooks:
            g = _run_hooks(t._hooks, g, traced, wrap)
        if input_keys is not None:
            for k in input_keys.get(id(t), ()):
                results[k] = g if results[k] is None else results[k] + g
        elif t.requires_grad:
            _accumulate(t, g, traced, delivered, wrap)
    return results


def _add_grad(grads, heap, node, idx, g):
    """Add ``g`` to the gradient of output ``idx`` of ``node``, queueing the node."""
    if node.op.nout == 1:
        cur = grads.get(node)
        if cur is None:
            grads[node] = g
            heappush(heap, (-node.seq, node))
        else:
            grads[node] = cur + g
        return
    slot = grads.get(node)
    if slot is None:
        slot = grads[node] = [None] * node.op.nout
        heappush(heap, (-node.seq, node))
    slot[idx] = g if slot[idx] is None else slot[idx] + g


def _node_hooks(node, g, single, traced, wrap, delivered):
    """Run the hooks of a node's outputs and fill retain_grad tensors; the gradient
    (or list of them) after the hooks."""
    gs = [g] if single else g
    if node.hooks:
        for idx, fns in node.hooks.items():
            if gs[idx] is not None:
                gs[idx] = _run_hooks(fns, gs[idx], traced, wrap)
    if node.retain:
        for idx, ref in node.retain.items():
            t = ref()
            if t is not None and gs[idx] is not None:
                _accumulate(t, gs[idx], traced, delivered, wrap)
    return gs[0] if single else gs


def _collect(node, g, single, input_keys, results):
    """grad(inputs=...): gradients that reach a requested non-leaf input."""
    gs = [g] if single else g
    for idx in range(len(gs)):
        ks = input_keys.get((id(node), idx))
        if ks and gs[idx] is not None:
            for k in ks:
                results[k] = gs[idx] if results[k] is None else results[k] + gs[idx]


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
