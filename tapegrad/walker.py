"""The reverse walk: gradients from roots back to leaves, over the recorded Nodes.

It visits the nodes reachable from the roots in decreasing sequence order, which is
a topological order, and knows no op by name. One step per concern:

- ``_Queue``: the nodes waiting for their gradient, and the chain shortcut;
- ``_context``: what a node's vjp sees (saved values after their version check);
- ``_widened_vjp``: a node with bfloat16/float16 values runs its vjp in float32 and
  rounds each gradient once;
- ``_fit``: a gradient brought to its input's shape and dtype, the one place where
  broadcasting is undone (ops declared ``broadcasting=True``: ``m.sum_to``);
- ``_to_leaf`` / ``_finish``: leaf gradients summed, hooked, accumulated;
- ``_node_hooks``: hooks and ``retain_grad`` of non-leaf tensors;
- ``_Wanted``: ``grad(inputs=...)`` and ``Tape.gradient``: what to collect, what to prune.

``traced``: the adjoints run on Tensors with recording on (``create_graph``, an outer
Tape), so the gradient is itself recorded; otherwise on raw arrays, fast.
"""
from heapq import heappop, heappush

import numpy as np

from . import dtypes as _dt
from ._util import loud_numpy, quiet_numpy
from .devices.cpu_kernels import halfwidth as _halfwidth
from .tape import PACKED, Packed, check_finite, state
from .tensor import POST_HOOKED, Tensor, as_output, last_write, mark_written, wrap

__all__ = ["backward_pass", "Ctx", "reached_leaves"]

_F32 = np.dtype(np.float32)
_FREED_MSG = ("Trying to backward through the graph a second time (or to use saved values "
              "after they were freed). Saved values of a recording are freed after "
              "backward()/grad(); pass retain_graph=True to the first call if you need to "
              "differentiate through the same recording again")


def backward_pass(roots, seeds, *, inputs=None, retain_graph=False, traced=False,
                  tape_id=None, record=None):
    """Reverse mode from ``roots`` (Tensors) with cotangents ``seeds``.

    ``inputs``: Tensors whose gradients are returned (a list, None where unused);
    without it gradients accumulate into the ``.grad`` of leaves that require grad.
    ``traced``: run adjoints on Tensors with recording on (create_graph / outer tape).
    ``record=False`` with ``traced``: on Tensors, not recorded (forward over reverse:
    the adjoints carry tangents, and nothing differentiates the walk again).
    ``tape_id``: only walk nodes recorded on that Tape.
    """
    prev, prev_raw = state._grad, state.raw
    # grad mode for the adjoints (tapes and anomaly stay as they are)
    state._grad = traced if record is None else record
    state.raw = not traced  # raw arrays are what the adjoints compute on
    state._refresh()
    token = quiet_numpy()  # (raw adjoints use NumPy's operators: silent, as dispatch)
    try:
        return _walk(roots, seeds, inputs, retain_graph, traced, tape_id)
    finally:
        loud_numpy(token)
        state._grad, state.raw = prev, prev_raw
        state._refresh()


def reached_leaves(outs):
    """The leaf tensors the recording of ``outs`` reaches, each once: those of ``outs``
    that are leaves requiring grad, and each leaf on an edge of their graph (walked
    once). A generator: a caller looking for one stops at it."""
    seen, stack = set(), []
    for o in outs:
        if not isinstance(o, Tensor):
            continue
        if o._node is not None:
            stack.append(o._node)
        elif o.requires_grad and id(o) not in seen:
            seen.add(id(o))
            yield o
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        for e in n.edges:
            if e is None:
                continue
            if type(e) is tuple:
                stack.append(e[0])
            elif id(e) not in seen:
                seen.add(id(e))
                yield e


def _walk(roots, seeds, inputs, retain_graph, traced, tape_id):
    q = _Queue()
    leaves = {}        # id(leaf) -> [leaf, summed gradient, whether that sum is ours]
    delivered = set()  # ids of arrays handed in from outside: never accumulated into
    # a "same" node skips the spec checks of its input gradients when its own gradient
    # has its output's spec: true of every gradient the walker passes on, not
    # necessarily of a seed or a hook's result (those nodes are listed here)
    off_spec = set()
    for t, s in zip(roots, seeds):
        s = _as(s, traced)
        delivered.add(id(s))
        if t._node is None:
            _to_leaf(leaves, t, s, traced)
        else:
            if t._node.same and not _has_spec(s, t._node):
                off_spec.add(t._node)
            q.send(t._node, t._idx, s)
    wanted = None if inputs is None and tape_id is None else _Wanted(inputs, tape_id, q)
    # leaves with post-accumulate hooks: how many contributions each still awaits, so
    # its .grad is accumulated and its hooks run as soon as the last one is in
    pending = _pending(roots) if wanted is None and POST_HOOKED else None
    anomaly = state._anomaly
    observers = state.observers
    while q.nxt is not None or q.heap:
        node = q.nxt  # the chain shortcut (see _Queue), inline: most nodes come this way
        if node is not None:
            g = q.nxt_g
            q.nxt = None
        else:
            node, g = q.pop()
        if node.hooks is not None or node.retain is not None:
            g = _node_hooks(node, g, traced, delivered)
            if node.same and not _has_spec(g, node):
                off_spec.add(node)
        check = traced or not node.same or (off_spec and node in off_spec)
        needs = node.needs_input_grad
        if wanted is not None:
            needs = wanted.needs(node, g)
            if needs is None:
                continue
        if traced or needs is not node.needs_input_grad or node.write != last_write[0]:
            ctx = _context(node, traced, needs)  # (a released node's write is -1)
        else:  # _context's raw case, inline: the node is the context
            ctx = node
        op = node.op
        if op.nout != 1:
            g = tuple(g)
        if traced or _dt.LOW_SET.isdisjoint(node.dtypes) or getattr(op, "halfwidth", False):
            in_grads = op.vjp(ctx, g) if not observers else _observed_vjp(observers, node, ctx,
                                                                          g)
        else:
            in_grads = _widened_vjp(node, ctx, g, observers)
        if node.hooks is not None and node.post_hooks:
            in_grads = _post_hooks(node, in_grads, g, traced)
        if not retain_graph:
            if node.out is not None or _holds_values(node.inputs):
                # release: the saved values go; write -1 (never a write id) marks it,
                # and sends a later walk through this node to _context, which raises
                node.write = -1
                node.saved = node.out = node.inputs = None
            else:  # nothing saved, nothing to free: a later walk through it works (as
                node.write = -2  # through PyTorch's nodes without saved tensors)
        edges = node.edges
        if len(in_grads) != len(edges):
            raise RuntimeError(f"{op.name}: vjp returned {len(in_grads)} gradients "
                               f"for {len(edges)} inputs")
        i = 0
        for gi in in_grads:
            if gi is not None and needs[i]:
                if check:
                    gd = gi._data if traced else gi
                    if gd.shape != node.shapes[i] or gd.dtype is not node.dtypes[i]:
                        gi = _fit(node, i, gi, traced)
                if anomaly:
                    check_finite(op.name, node.where, gi, "backward")
                e = edges[i]
                if type(e) is not tuple:
                    p = leaves.get(id(e))
                    if p is not None and p[2]:  # _to_leaf's in-place case, inline
                        p[1] += gi
                    else:
                        _to_leaf(leaves, e, gi, traced)
                    if pending and id(e) in pending:
                        pending[id(e)] -= 1
                        if not pending[id(e)]:
                            del pending[id(e)]
                            _finish_leaf(leaves.pop(id(e)), traced, delivered)
                elif q.nxt is None and not q.heap and e[0].op.nout == 1:
                    q.nxt = e[0]  # q.send's chain case, inline
                    q.nxt_g = gi
                else:
                    q.send(e[0], e[1], gi)
            i += 1
    return _finish(leaves, wanted, traced, delivered)


def _has_spec(g, node):
    """Whether ``g`` has a "same" node's output spec (that of each of its tensor
    inputs; a weak scalar input has none)."""
    data = g._data if isinstance(g, Tensor) else g
    shape, dtype = next((s, d) for s, d in zip(node.shapes, node.dtypes) if s is not None)
    return tuple(data.shape) == tuple(shape) and data.dtype == dtype


def _as(s, traced):
    if traced:
        return s if isinstance(s, Tensor) else wrap(s)
    return s._data if isinstance(s, Tensor) else s


class _Queue:
    """Nodes waiting for their gradient, highest sequence number first (a heap).

    A chain, one node queued and the heap empty, is most of a backward: that node
    and its gradient wait in ``nxt``/``nxt_g`` instead, and go into the heap only
    when a second node is queued."""
    __slots__ = ("heap", "grads", "nxt", "nxt_g")

    def __init__(self):
        self.heap = []
        self.grads = {}  # node -> gradient of its output (a list for several outputs)
        self.nxt = self.nxt_g = None

    def pop(self):
        node = self.nxt
        if node is not None:
            self.nxt = None
            return node, self.nxt_g
        node = heappop(self.heap)[1]
        return node, self.grads.pop(node)

    def send(self, node, idx, g):
        """Add ``g`` to the gradient of output ``idx`` of ``node``, queueing the node."""
        if node is self.nxt:
            self.nxt_g = self.nxt_g + g
            return
        grads = self.grads
        if node.op.nout == 1:
            cur = grads.get(node)
            if cur is not None:
                grads[node] = cur + g
                return
            if self.nxt is None and not self.heap:
                self.nxt = node
                self.nxt_g = g
                return
            grads[node] = g
        else:
            slot = grads.get(node)
            if slot is not None:
                slot[idx] = g if slot[idx] is None else slot[idx] + g
                return
            slot = grads[node] = [None] * node.op.nout
            slot[idx] = g
        heappush(self.heap, (-node.seq, node))
        if self.nxt is not None:
            self._spill()

    def _spill(self):
        nxt, self.nxt = self.nxt, None
        if nxt.op.nout == 1:
            self.grads[nxt] = self.nxt_g
        heappush(self.heap, (-nxt.seq, nxt))

    def nodes(self):
        return ([self.nxt] if self.nxt is not None else []) + [n for _, n in self.heap]


# ------------------------------------------------------------------ a node's vjp
class Ctx:
    """What a vjp sees when it must record (or compute only some input gradients):
    the saved inputs and output as Tensors; see ``tape.Node`` for the fields."""
    __slots__ = ("inputs", "out", "attrs", "shapes", "dtypes", "needs_input_grad", "m", "node")


def _context(node, traced, needs):
    """The vjp's context: on the raw path the node itself (its ``inputs`` are the
    saved inputs as raw arrays), a ``Ctx`` of Tensors when the vjp records (or of
    raw arrays when only some input gradients are wanted); the saved values checked
    against the versions they had when saved, unless nothing was written in place
    since (``tensor.last_write``)."""
    if node.write == -1:
        raise RuntimeError(f"{node.op.name}: {_FREED_MSG}")
    if node.write == PACKED:
        return _unpacked_context(node, traced, needs)
    if node.write != last_write[0]:
        _check_versions(node)
    if not traced and needs is node.needs_input_grad:
        return node
    ctx = _node_ctx(node, needs)
    ctx.inputs = node.inputs if not traced or node.saved is None else _as_tensors(node.saved)
    ctx.out = None
    if node.out is not None:
        if not traced:
            ctx.out = node.out
        elif node.op.nout == 1:
            ctx.out = as_output(node.out, node, 0, node.out_version[0])
        else:
            ctx.out = tuple(as_output(o, node, k, node.out_version[0])
                            for k, o in enumerate(node.out))
        if traced and node.out_fw is not None:  # forward over reverse: the out's tangents
            for o, fw in zip(ctx.out if type(ctx.out) is tuple else (ctx.out,), node.out_fw):
                o._fw = fw
    return ctx


def _node_ctx(node, needs):
    """A fresh adjoint context with the node's attributes, shapes, dtypes and
    ``needs_input_grad``."""
    ctx = Ctx()
    ctx.m = node.m
    ctx.attrs = node.attrs
    ctx.shapes = node.shapes
    ctx.dtypes = node.dtypes
    ctx.needs_input_grad = needs
    ctx.node = node
    return ctx


def _unpacked_context(node, traced, needs):
    """The context of a node whose saved values went through saved-tensor hooks
    (``dispatch._pack_saved``): each one given to the node's unpack hook, once per
    walk, as the adjoint reads them. When the adjoint records (create_graph), an
    unpacked input carries the original's history, as PyTorch's unpacked tensors do."""
    ctx = _node_ctx(node, needs)
    inputs = node.inputs
    if inputs is not None:
        inputs = list(inputs)
        for i, p in enumerate(inputs):
            if type(p) is Packed:
                t = _unpack(node, p)
                inputs[i] = _attach(t, node.edges[i], node) if traced else t._data
            elif traced and p is not None and hasattr(p, "shape") and not isinstance(p, Tensor):
                inputs[i] = wrap(p)
    ctx.inputs = inputs
    out = node.out
    if out is not None:
        outs = out if node.op.nout != 1 else (out,)
        got = []
        for k, p in enumerate(outs):
            a = _unpack(node, p)._data if type(p) is Packed else p
            got.append(as_output(a, node, k, node.out_version[0]) if traced else a)
        out = tuple(got) if node.op.nout != 1 else got[0]
    ctx.out = out
    return ctx


def _unpack(node, p):
    t = node.unpack(p.value)
    if not isinstance(t, Tensor):
        raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but got "
                        f"result of type {type(t).__name__}")
    return t


def _attach(t, edge, node):
    """An unpacked input for a recording adjoint: the tensor itself when it is the
    saved one (or a constant); else its data as the original's output (its producer
    node and index, the edge), so higher-order gradients reach what made it."""
    if edge is None or t is edge:
        return t
    if type(edge) is tuple:
        if t._node is edge[0] and t._idx == edge[1]:
            return t
        return wrap(t._data, edge[0], edge[1], t._vc)
    if t._data is edge._data:
        return edge
    raise RuntimeError(
        f"{node.op.name}: a higher-order gradient (create_graph=True) through a saved leaf "
        f"tensor whose unpack_hook returned a new tensor is not supported; return the "
        f"packed tensor itself, or take this gradient outside saved_tensors_hooks")


def _holds_values(saved):
    """Whether a node's saved inputs hold a value (an array or a number kept for its
    adjoint), not only None."""
    if saved is not None:
        for a in saved:
            if a is not None:
                return True
    return False


# the cast a capture records as a step, fn(array, dtype) -> array (set by dispatch, a
# layer above): a half-width vjp observed by tg.compile widens and rounds through it
observed_cast = [None]


def _widened_vjp(node, ctx, g, observers):
    """A raw-path vjp of a node with half-width (bfloat16, float16) inputs: it runs on
    float32 copies of its saved values and cotangent, as the forward kernel did
    (dispatch widens those operands and rounds the result once), and each float32
    gradient is rounded once to its input's dtype. A vjp of several steps then rounds
    once, not after each step, as PyTorch's half-width backward kernels do."""
    cast = observed_cast[0] if observers else _astype

    def wide(a):
        return cast(a, _F32) if a is not None and getattr(a, "dtype", None) in _dt.LOW_SET else a
    w = Ctx()
    w.m, w.attrs, w.shapes = ctx.m, ctx.attrs, ctx.shapes
    w.dtypes = tuple(_F32 if d in _dt.LOW_SET else d for d in ctx.dtypes)  # what the vjp makes
    w.needs_input_grad, w.node = ctx.needs_input_grad, node
    w.inputs = None if ctx.inputs is None else [wide(a) for a in ctx.inputs]
    out = ctx.out
    w.out = tuple(wide(o) for o in out) if type(out) is tuple else wide(out)
    g = tuple(wide(x) for x in g) if type(g) is tuple else wide(g)
    in_grads = node.op.vjp(w, g) if not observers else _observed_vjp(observers, node, w, g)
    low = _dt.LOW_SET
    return [cast(gi, dt) if gi is not None and dt in low and getattr(gi, "dtype", dt) == _F32
            else gi for gi, dt in zip(in_grads, node.dtypes)]


def _astype(a, dtype):
    return _halfwidth.astype(a, dtype)


def _as_tensors(saved):
    """The saved inputs for a recording vjp: Tensors as they are, raw arrays wrapped."""
    return [wrap(s) if s is not None and hasattr(s, "shape") and not isinstance(s, Tensor)
            else s for s in saved]


def _check_versions(node):
    """Raise if a saved input or the saved output was written in place since saved."""
    if node.saved is not None:
        for i, (s, v) in enumerate(zip(node.saved, node.versions)):
            if v is not None and s._vc[0] != v:
                raise RuntimeError(
                    f"{node.op.name}: one of the variables needed for gradient computation "
                    f"has been modified by an inplace operation: input "
                    f"'{node.op.args[i]}' of {node.op.name} (shape {node.shapes[i]}) is at "
                    f"version {s._vc[0]}; expected version {v}. Hint: avoid modifying "
                    f"it in place, or clone() it before the in-place change")
    if node.out is not None:
        holder, v = node.out_version
        if holder[0] != v:
            raise RuntimeError(
                f"{node.op.name}: one of the variables needed for gradient computation has "
                f"been modified by an inplace operation: the output of {node.op.name} is at "
                f"version {holder[0]}; expected version {v}")


def _observed_vjp(observers, node, ctx, g):
    run = node.op.vjp
    for obs in observers:
        if hasattr(obs, "vjp"):
            run = _chain_vjp(obs, node, run)
    return run(ctx, g)


def _chain_vjp(obs, node, inner):
    def run(ctx, g):
        return obs.vjp(node, inner, ctx, g)
    return run


def _fit(node, i, gi, traced):
    """Input ``i``'s gradient at its shape and dtype: summed over broadcast dims for
    ops declared ``broadcasting=True`` (the one place this happens), cast back to
    the input's dtype; any other shape is the adjoint's bug, and raises."""
    op = node.op
    shape = node.shapes[i]
    if tuple(gi.shape) != tuple(shape):
        if not op.broadcasting:
            raise RuntimeError(f"{op.name}: gradient of input '{op.args[i]}' has "
                               f"shape {tuple(gi.shape)}, expected {shape}")
        gi = node.m.sum_to(gi, shape)
    dt = node.dtypes[i]
    if traced:
        return gi.to(dt) if gi._data.dtype != dt else gi
    return _halfwidth.astype(gi, dt) if gi.dtype != dt else gi


# ------------------------------------------------------------------ leaves and hooks
def _to_leaf(leaves, t, g, traced):
    """Sum the gradients reaching leaf ``t`` (in place once the sum is an array made
    here), so that its hooks see the total."""
    p = leaves.get(id(t))
    if p is None:
        leaves[id(t)] = [t, g, False]
    elif p[2]:
        p[1] += g
    else:
        p[1] = p[1] + g
        p[2] = not traced and type(p[1]) is np.ndarray


def _finish(leaves, wanted, traced, delivered):
    if wanted is not None:
        for t, g, _ in leaves.values():
            if t._hooks:
                g = _run_hooks(t._hooks, g, traced)
            wanted.collect_leaf(t, g)
        return wanted.results
    for p in leaves.values():
        t, g = p[0], p[1]
        if traced or t._hooks or t._post_hooks or t._grad is not None or \
                type(g) is not np.ndarray or not t.requires_grad:
            _finish_leaf(p, traced, delivered)
        else:  # (the common case of _finish_leaf, inline: a first gradient into .grad)
            if id(g) in delivered or not g.flags.owndata or not g.flags.writeable:
                g = g.copy()
            delivered.add(id(g))
            t._grad = wrap(g)
    return None


def _finish_leaf(p, traced, delivered):
    """A leaf's total: its hooks, then into ``.grad``, then its post-accumulate hooks."""
    t, g, _ = p
    if t._hooks:
        g = _run_hooks(t._hooks, g, traced)
    if t.requires_grad:
        _accumulate(t, g, traced, delivered)
        run_post_hooks(t)


def run_post_hooks(t):
    """A leaf's post-accumulate hooks, once its ``.grad`` holds this backward's sum."""
    if t._post_hooks and t._node is None:
        for fn in list(t._post_hooks):
            fn(t)


def _pending(roots):
    """For each leaf with post-accumulate hooks, how many gradients the walk from
    ``roots`` will deliver to it (a vjp that gives None for one leaves it waiting
    until the end of the walk, where every leaf is finished)."""
    counts = {}
    seen = set()
    stack = [t._node for t in roots if t._node is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for e, need in zip(node.edges, node.needs_input_grad):
            if not need:
                continue
            if type(e) is tuple:
                stack.append(e[0])
            elif e._post_hooks:
                counts[id(e)] = counts.get(id(e), 0) + 1
    return counts


def _node_hooks(node, g, traced, delivered):
    """Run the hooks of a node's outputs and fill retain_grad tensors; the gradient
    (or list of them) after the hooks."""
    single = node.op.nout == 1
    gs = [g] if single else g
    if node.hooks:
        for idx, fns in node.hooks.items():
            if gs[idx] is not None:
                gs[idx] = _run_hooks(fns, gs[idx], traced)
    if node.retain:
        for idx, ref in node.retain.items():
            t = ref()
            if t is not None and gs[idx] is not None:
                _accumulate(t, gs[idx], traced, delivered)
    if node.pre_hooks:
        gs = list(_run_node_hooks(node, node.pre_hooks, (tuple(gs),), len(gs), traced,
                                  tuple(gs)))
    return gs[0] if single else gs


def _post_hooks(node, in_grads, g, traced):
    gs = g if node.op.nout != 1 else (g,)
    return _run_node_hooks(node, node.post_hooks, (tuple(in_grads), tuple(gs)),
                           len(in_grads), traced, in_grads)


def _run_node_hooks(node, fns, args, n, traced, current):
    """``grad_fn.register_prehook``/``register_hook`` functions, called with tuples of
    Tensors (None where a gradient is absent); a tuple returned, of ``n`` entries,
    replaces the gradients the hooks are about."""
    def as_t(a):
        return a if a is None or traced or isinstance(a, Tensor) else wrap(a)
    for fn in list(fns):
        r = fn(*(tuple(as_t(a) for a in group) for group in args))
        if r is None:
            continue
        r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
        if len(r) != n:
            raise RuntimeError(f"hook '{getattr(fn, '__name__', fn)}' has returned an "
                               f"incorrect number of values (got {len(r)}, but expected {n})")
        current = [a if a is None or traced else getattr(a, "_data", a) for a in r]
        args = (tuple(current),) + args[1:]
    return current


def _run_hooks(fns, g, traced):
    for fn in fns:
        r = fn(g if traced else wrap(g))
        if r is not None:
            _check_hook_result(fn, g, r)
            g = r if traced else r._data
    return g


def _check_hook_result(fn, g, r):
    """PyTorch's checks of what a tensor hook returned: a Tensor of the gradient's
    shape and dtype."""
    name = getattr(fn, "__name__", repr(fn))
    if not isinstance(r, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(r).__name__}'")
    d = g._data if isinstance(g, Tensor) else g
    if tuple(r.shape) != tuple(d.shape):
        raise RuntimeError(f"hook '{name}' has changed the size of value (was "
                           f"{tuple(d.shape)}, got {tuple(r.shape)})")
    if r._data.dtype != d.dtype:
        raise RuntimeError(f"hook '{name}' has changed the type of value (was {d.dtype}, "
                           f"got {r._data.dtype})")


def _accumulate(t, g, traced, delivered):
    """``t._grad += g``, in place in a gradient buffer the walker owns."""
    if traced:
        g = g if isinstance(g, Tensor) else wrap(g)
        t._grad = g if t._grad is None else t._grad + g
        return
    if isinstance(g, Tensor):
        g = g._data
    elif isinstance(g, np.generic):
        g = np.asarray(g)
    cur = t._grad
    if cur is None:
        if id(g) in delivered or not g.flags.owndata or not g.flags.writeable:
            g = g.copy()
        delivered.add(id(g))
        t._grad = wrap(g)
    elif cur._node is None and cur._data.shape == g.shape and cur._data.flags.writeable:
        cur._data += g
        mark_written(cur)
    else:
        t._grad = wrap(cur._data + g)


# ------------------------------------------------------------------ grad(inputs=...)
class _Wanted:
    """``grad(inputs=...)`` / ``Tape.gradient``: collects the gradients of the
    requested inputs, walks only nodes from which one is reachable (and, for a
    Tape, only nodes recorded on it), and asks only for the gradients that lead
    somewhere."""

    def __init__(self, inputs, tape_id, q):
        self.tape_id = tape_id
        self.keys = {}
        self.results = None
        self.reach = None
        self.node_ids = ()  # ids of the nodes with a requested output (not a leaf)
        if inputs is not None:
            for k, t in enumerate(inputs):
                key = (id(t._node), t._idx) if t._node is not None else id(t)
                self.keys.setdefault(key, []).append(k)
            self.node_ids = {id(t._node) for t in inputs if t._node is not None}
            self.results = [None] * len(inputs)
            self.reach = _reaching(q.nodes(), self.keys, tape_id)

    def _on_tape(self, node):
        return self.tape_id is None or (node.tapes is not None and self.tape_id in node.tapes)

    def needs(self, node, g):
        """The needs_input_grad to run ``node``'s vjp with, or None to skip it (the
        node's own tuple when it asks for all of them)."""
        reach = self.reach
        if self.results is not None:
            if id(node) in self.node_ids:
                self._collect(node, g)
            if not reach.get(node):
                return None
        if self.tape_id is not None and not self._on_tape(node):
            return None
        if reach is None:
            return node.needs_input_grad
        keys = self.keys
        wanted = []
        for e in node.edges:  # (a loop, not a generator: this runs per node)
            if e is None:
                wanted.append(False)
            elif type(e) is tuple:
                wanted.append(bool(reach.get(e[0]) or (id(e[0]), e[1]) in keys))
            else:
                wanted.append(id(e) in keys)
        wanted = tuple(wanted)
        return node.needs_input_grad if wanted == node.needs_input_grad else wanted

    def _collect(self, node, g):
        gs = [g] if node.op.nout == 1 else g
        for idx, gi in enumerate(gs):
            for k in self.keys.get((id(node), idx), ()):
                if gi is not None:
                    self.results[k] = gi if self.results[k] is None else self.results[k] + gi

    def collect_leaf(self, t, g):
        if self.results is not None:
            for k in self.keys.get(id(t), ()):
                self.results[k] = g if self.results[k] is None else self.results[k] + g


def _reaching(roots, keys, tape_id):
    """node -> whether a requested input is reachable from it (iterative DFS)."""
    memo = {}
    stack = list(roots)
    while stack:
        node = stack[-1]
        if node in memo:
            stack.pop()
            continue
        hit = False
        if tape_id is None or (node.tapes and tape_id in node.tapes):
            pending = False
            for e in node.edges:  # (a loop, not any() over a generator: this runs per node)
                if type(e) is tuple:
                    seen = memo.get(e[0])
                    if seen is None:  # visit it first, then this node again
                        stack.append(e[0])
                        pending = True
                    elif seen or (id(e[0]), e[1]) in keys:
                        hit = True
                elif e is not None and id(e) in keys:
                    hit = True
            if pending:
                continue
        stack.pop()
        memo[node] = hit
    return memo
