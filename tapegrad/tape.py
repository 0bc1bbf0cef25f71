"""The record: thread-local recording state and nodes (the walker is walker.py).

A recorded op call makes a ``Node``: the op, its attrs, one edge per input (the
producer node and output index, or the leaf Tensor, or None), the saved values with
their versions, and a sequence number. Outputs own their node; nodes own their
inputs' nodes; nothing points back at outputs, so a record dies by reference
counting alone.
"""
import itertools
import threading
import weakref

from . import devices as _devices, dtypes as _dt

__all__ = ["Node", "make_node", "is_grad_enabled", "state", "check_finite", "backward_name",
           "name_call"]

_seq = itertools.count()
next_seq = _seq.__next__


# what dispatch's lane may do in this thread, kept in ``state.mode`` so that an op
# reads one thread-local attribute instead of four (grad mode, tapes, anomaly, observers)
GENERAL = 0        # a Tape, anomaly mode, an observer or a dual level is active: the general path
FAST_NO_GRAD = 1   # neither, and grad mode is off: fast path, nothing is recorded
FAST_RECORD = 2    # neither, and grad mode is on: fast path, record when an input needs
RAW = 3            # FAST_NO_GRAD where calls on raw arrays are expected (state.raw)
INFERENCE = 4      # FAST_NO_GRAD inside inference_mode: the lane marks its outputs
# (tg.autocast leaves the mode alone: the lane sends an op with an autocast policy to
# the general path while a region is open, and runs every other op itself)


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
    """Per-thread recording state: grad mode, active Tapes, anomaly mode, observers
    (``dispatch.observe``), and ``mode`` (one of GENERAL, FAST_NO_GRAD, FAST_RECORD)
    derived from them.

    They are properties so that every way of changing them (context managers,
    tests assigning ``state.grad_enabled``, in-place edits of ``state.tapes``) keeps
    ``mode`` right; code on hot paths reads ``_grad``/``_tapes``/``_anomaly``."""

    def __init__(self):
        # calls on raw arrays are expected: the walker's raw adjoints, the @fuse tracer
        self.raw = False
        self._grad = True
        self._tapes = _TapeStack()
        self._anomaly = False
        self._observers = ()
        # the open forward-mode levels of this thread (ids, innermost last) whose
        # tangents ops propagate; a level is left out while its own rule runs
        self._dual = ()
        # the running vmap levels of this thread (innermost last): a call with a
        # batched tensor among its arguments goes to ``batching`` (functional.vmap's)
        self._vmap = ()
        # inside inference_mode: calls take the general path, which marks their outputs
        # as inference tensors (Tensor.is_inference)
        self._inference = False
        self.mode = FAST_RECORD
        # tg.autocast: {device type: the NumPy dtype "lower" ops run in} of the devices
        # it is on for in this thread (None: off everywhere), the open regions' depth,
        # and the casts of leaf tensors that require grad made in them, {id: (t, cast)}
        self._autocast = None
        self.autocast_depth = 0
        self.autocast_cache = {}
        self.autocast_cache_enabled = True
        # tg.autograd.graph.saved_tensors_hooks: the open (pack, unpack) pairs, innermost
        # last (recording takes the general path while any is open, which packs what a
        # node saves), and disable_saved_tensors_hooks' message (None: allowed)
        self._saved_hooks = ()
        self.saved_hooks_disabled = None

    # while observers are active: the arguments (Tensors among them) of the op the
    # observers see now, so tg.compile's capture knows which tensor held an array it
    # reads from outside
    observed_args = ()
    # installed by tapegrad.vmap: (op, args, attrs) -> the op's outputs on batched tensors
    batching = None
    # the innermost vmap's randomness ("error", "same", "different") and a function
    # making a batched tensor of random draws (shape, draw) for "different"
    vmap_randomness = None
    vmap_random = None

    def _refresh(self):
        self.mode = (GENERAL if self._tapes or self._anomaly or self._observers or self._dual
                     or self._vmap or self._saved_hooks or (self._inference and self._grad) else
                     FAST_RECORD if self._grad else INFERENCE if self._inference else
                     RAW if self.raw else FAST_NO_GRAD)

    @property
    def autocast(self):
        """{device type: NumPy dtype} of tg.autocast in this thread, or None; while
        set, ops with an ``autocast`` policy take the general path, where it applies."""
        return self._autocast

    @autocast.setter
    def autocast(self, on):
        self._autocast = on
        self._refresh()

    @property
    def saved_hooks(self):
        """The open saved-tensor hooks, ((pack, unpack), ...), innermost last."""
        return self._saved_hooks

    @saved_hooks.setter
    def saved_hooks(self, hooks):
        self._saved_hooks = tuple(hooks)
        self._refresh()

    @property
    def observers(self):
        return self._observers

    @observers.setter
    def observers(self, observers):
        self._observers = tuple(observers)
        self._refresh()

    @property
    def inference(self):
        return self._inference

    @inference.setter
    def inference(self, flag):
        self._inference = flag
        if flag:
            INFERENCE_SEEN[0] = True
        self._refresh()

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
    def dual(self):
        return self._dual

    @dual.setter
    def dual(self, levels):
        self._dual = tuple(levels)
        self._refresh()

    @property
    def vmap_levels(self):
        return self._vmap

    @vmap_levels.setter
    def vmap_levels(self, levels):
        self._vmap = tuple(levels)
        self._refresh()

    @property
    def tapes(self):
        return self._tapes

    @tapes.setter
    def tapes(self, tapes):
        self._tapes = _TapeStack(tapes)
        self._refresh()


state = _State()


def is_grad_enabled():
    return state._grad


class Node:
    """One recorded op call (the ``grad_fn`` of its outputs), and on the walker's raw
    path also its adjoint's context: a vjp reads ``ctx.inputs`` (the saved inputs,
    ``None`` where not saved), ``ctx.out``, ``ctx.attrs``, ``ctx.shapes``,
    ``ctx.dtypes``, ``ctx.needs_input_grad`` and ``ctx.m`` (the op namespace to
    compute with), which are this node's own fields. When the adjoint must record
    (a higher-order gradient) the walker hands it a ``Ctx`` of Tensors instead.

    Fields every node has are slots, filled by ``make_node``, the one node builder
    (a class without ``__init__`` is quicker to instantiate, and one op call makes
    one node); rarely set ones are class defaults behind the lazily made ``__dict__``.
    """
    __slots__ = ("op", "attrs", "edges", "shapes", "dtypes", "needs_input_grad", "seq",
                 "saved",        # the saved inputs (Tensors, or raw values), None where not saved
                 "versions",     # the version of each saved Tensor when saved, None for others
                 "out",          # the saved output array (a tuple of them for several outputs)
                 "out_version",  # (holder, version) of the saved output
                 "inputs",       # the saved inputs as raw arrays (None where not saved)
                 "write",        # tensor.last_write when recorded; once walked by a
                                 # backward without retain_graph, -1 (its saved values
                                 # freed) or -2 (it saved nothing: walkable again)
                 "hooks",        # {output index: [hook, ...]} of non-leaf tensors, or None
                 "retain",       # {output index: weakref to tensor} for retain_grad, or None
                 "same",         # an elementwise op whose tensor inputs all have the output's
                                 # shape and dtype: so do the gradients its vjp returns
                 "__dict__", "__weakref__")
    m = None            # the op namespace vjps compute with (install_namespace)
    out_fw = None       # the outputs' forward-mode tangents ({level: tangent} each), when
                        # the output is saved and had some: the traced vjp's ctx.out has them
    tapes = None        # frozenset of ids of the Tapes this was recorded on
    where = None        # user call site (anomaly mode)
    unpack = None       # the unpack hook of its Packed saved values (write is PACKED)
    call_name = None    # PyTorch's node name set by the public function that made this
                        # call, where it differs from its op's (``transpose`` binds permute)

    def name(self):
        """PyTorch's name of this node (``MulBackward0``), as ``grad_fn.name()``."""
        if self.call_name is not None:
            return self.call_name
        g = self.op.grad_fn_name
        if g is None:
            return backward_name(self.op.name) + "0"
        return g if type(g) is str else g(self.attrs, self.shapes)

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    pre_hooks = None    # register_prehook's functions
    post_hooks = None   # register_hook's functions

    @property
    def next_functions(self):
        """One ``(node, output index)`` per input, as PyTorch's: the producer node, an
        ``AccumulateGrad`` for a leaf that requires grad, ``(None, 0)`` otherwise."""
        out = []
        for e in self.edges:
            if e is None:
                out.append((None, 0))
            elif type(e) is tuple:
                out.append(e)
            else:
                out.append((AccumulateGrad(e), 0))
        return tuple(out)

    @property
    def metadata(self):
        """A dict for the user's own notes about this node, as PyTorch's."""
        d = self.__dict__.get("_metadata")
        if d is None:
            d = self.__dict__["_metadata"] = {}
        return d

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` runs before this node's adjoint, with a tuple of the
        gradients of its outputs; a tuple it returns replaces them. Returns a handle
        with ``remove()``."""
        return self._node_hook("pre_hooks", fn)

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` runs after this node's adjoint, with a
        tuple of the gradients it gives its inputs (None where none) and those of its
        outputs; a tuple it returns replaces the former. Returns a handle with
        ``remove()``."""
        return self._node_hook("post_hooks", fn)

    def _node_hook(self, kind, fn):
        fns = self.__dict__.get(kind)
        if fns is None:
            fns = self.__dict__[kind] = []
        fns.append(fn)
        if self.hooks is None:
            self.hooks = {}  # (sends the walker to the node's hooks)
        return HookHandle(fns, fn)

    def add_tensor_hook(self, idx, fn):
        """A hook of this node's output ``idx`` (``Tensor.register_hook``)."""
        if self.hooks is None:
            self.hooks = {}
        self.hooks.setdefault(idx, []).append(fn)

    def retain_output(self, idx, tensor):
        if self.retain is None:
            self.retain = {}
        self.retain[idx] = weakref.ref(tensor)


class AccumulateGrad(Node):
    """``next_functions``' entry for a leaf that requires grad: ``variable`` is the
    leaf, as PyTorch's AccumulateGrad node."""
    __slots__ = ()

    def __init__(self, variable):
        self.__dict__["variable"] = variable
        self.edges = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"


class HookHandle:
    """``remove()`` takes ``fn`` out of the list it was added to."""
    __slots__ = ("fns", "fn")

    def __init__(self, fns, fn):
        self.fns, self.fn = fns, fn

    def remove(self):
        if self.fn in self.fns:
            self.fns.remove(self.fn)


# Node.write of a node whose saved values went through saved-tensor hooks: never a
# write id, so the walker builds its context (which unpacks them) each time
PACKED = -3


class Packed:
    """A saved value as a pack hook gave it (in a node's ``inputs``/``out``): the
    walker hands it to the node's ``unpack`` hook when the adjoint reads it."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def install_namespace(m):
    """Set the namespace vjps compute with (``tapegrad.ops``, from ``tapegrad/__init__``:
    the record layer may not import the ops)."""
    Node.m = m


# Whether inference_mode was ever entered in this process (so inference tensors may
# exist): until then, recording skips the check that none is saved for backward.
INFERENCE_SEEN = [False]


def check_saved_inference(op, saved):
    """PyTorch's rule: a tensor made inside ``inference_mode`` cannot be saved for
    backward (its version counter is not tracked, so a later in-place write could
    not be detected)."""
    for t in saved:
        if t is not None and getattr(t, "_inference", False):
            raise RuntimeError(
                "Inference tensors cannot be saved for backward. Please do not use Tensors "
                "created in inference mode in computation tracked by autograd. To work "
                "around this, you can make a clone to get a normal tensor and use it in "
                "autograd, or use `tg.no_grad()` instead of `tg.inference_mode()` "
                f"(an input of {op.name})")


def make_node(op, attrs, edges, shapes, dtypes, needs, saved, versions, inputs, out,
              out_version, same, write):
    """The one node builder: a new Node with every slot set, the next sequence number.

    ``same`` is True only for an elementwise op (``op.elementwise``) whose tensor
    inputs all have its output's shape and dtype: the walker then trusts its vjp's
    gradients to have them too (tests/ops checks that of every elementwise vjp)."""
    if saved is not None and INFERENCE_SEEN[0]:
        check_saved_inference(op, saved)
    node = Node()
    node.op = op
    node.attrs = attrs
    node.edges = edges
    node.shapes = shapes
    node.dtypes = dtypes
    node.needs_input_grad = needs
    node.seq = next_seq()
    node.saved = saved
    node.versions = versions
    node.out = out
    node.out_version = out_version
    node.inputs = inputs
    node.write = write
    node.hooks = node.retain = None
    node.same = same
    return node


def name_call(res, input, name):
    """Name the node of ``res`` (a public function's result) ``name`` when the call
    recorded one of its own (not when it gave back ``input`` or its node)."""
    node = getattr(res, "grad_fn", None)
    if node is not None and node is not getattr(input, "grad_fn", None):
        node.call_name = name
    return res


def backward_name(name):
    """PyTorch's name of an op's backward node (``MulBackward``)."""
    return "".join(p.title() for p in name.split("_")) + "Backward"


def check_finite(op_name, where, arr, phase):
    """Anomaly mode: raise at a NaN/Inf in an op's result (forward or backward)."""
    data = getattr(arr, "_data", arr)
    if hasattr(data, "dtype") and _dt.is_float(data.dtype):
        ok, bad = _devices.all_finite(data)
        if not ok:
            raise RuntimeError(f"detect_anomaly: the {phase} of '{op_name}' produced {bad}"
                               + (f"; the op was called at {where}" if where else ""))
