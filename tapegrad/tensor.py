"""The Tensor type: an array with its recording fields. Ops reach it through
``dispatch.bind``; the operators and methods are installed by ``ops/methods.py``."""

import copy
import itertools
import sys
import warnings
import weakref

import numpy as np

from . import devices as _devices, dtypes as _dt, tape as _tape
from ._util import ArgumentError as _ArgumentError, Size
from .devices import shared_memory as _shared_memory

_new_tuple = tuple.__new__
_sizes = {}   # shape tuple -> its Size (immutable, so shared): half the cost of a new one


def _size(shape):
    r = _sizes.get(shape)
    if r is None:
        if len(_sizes) >= 4096:
            _sizes.clear()
        r = _sizes[shape] = _new_tuple(Size, shape)
    return r


# PyTorch's legacy constructor (tg.Tensor(3, 4), tg.Tensor([1, 2])): a function
# (data, sizes) -> array, installed by tapegrad.legacy (it needs the ops)
_legacy_new = [None]


def install_legacy_constructor(fn):
    _legacy_new[0] = fn

__all__ = ["Tensor", "Size", "wrap", "buffer", "mark_written"]



class Tensor:
    """An n-dimensional array (NumPy on CPU, CuPy on CUDA) that records its history.

    Create tensors with ``tg.tensor``, ``tg.zeros`` and friends. Operations on
    tensors that require grad are recorded, and ``backward()`` fills ``.grad``:

    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """
    __slots__ = ("_data", "_requires_grad", "_grad", "_node", "_idx", "_vc",
                 "__dict__", "__weakref__")
    # rarely set fields live in the lazily created __dict__; these are the defaults
    _base = None     # the tensor whose buffer a view shares
    _view_ops = ()   # a view's ((op, attrs), ...) from its base
    _views = None    # a base's live views (a WeakSet), when it requires grad
    _hooks = None    # gradient hooks of a leaf
    _post_hooks = None  # hooks run after a backward accumulated the leaf's .grad
    _tapes = None    # ids of explicit Tapes watching this tensor
    _fw = None       # forward-mode tangents, {dual level id: tangent Tensor}
    _vlevel = None   # the vmap level of a batched tensor (tapegrad.vmap.BatchedTensor)
    _inference = False  # made inside inference_mode (Tensor.is_inference)
    __array_priority__ = 1000  # NumPy defers to our reflected operators

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        _register_subclass(cls)

    def __init__(self, data=None, *sizes, requires_grad=False):
        if sizes or not hasattr(data, "dtype") or isinstance(data, Tensor):
            data = _legacy_new[0](data, sizes)
        self._data = data
        self._requires_grad = bool(requires_grad)
        self._grad = None
        self._node = None
        self._idx = 0
        self._vc = [0]
        if requires_grad and not _dt.is_float(data.dtype):
            raise RuntimeError(f"only Tensors of floating point dtype can require "
                               f"gradients, got {_dt.from_np(data.dtype)}")

    def __reduce_ex__(self, proto):
        """Pickled as its values, device and ``requires_grad``, and unpickled as a leaf
        (as PyTorch's): how a whole module saved by ``tg.save`` holds its tensors."""
        data = self._data
        host = data if isinstance(data, np.ndarray) else data.get()
        return (unpickle_tensor, (host, str(self.device), bool(self.requires_grad)))

    # copy.copy / copy.deepcopy copy every field (the default), not the pickled form
    def __copy__(self):
        return copy._reconstruct(self, None, *object.__reduce_ex__(self, 4))

    def __deepcopy__(self, memo):
        return copy._reconstruct(self, memo, *object.__reduce_ex__(self, 4))

    # ---- metadata
    @property
    def shape(self):
        return _size(self._data.shape)

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def dtype(self):
        return _dt.from_np(self._data.dtype)

    @property
    def device(self):
        return _devices.device_of(self._data)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def is_leaf(self):
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    @property
    def data(self):
        """The same buffer, detached from the record (as ``torch.Tensor.data``)."""
        return Tensor(self._data)

    @data.setter
    def data(self, value):
        self._data = value._data if isinstance(value, Tensor) else value
        DATA_SWAPS[0] += 1  # (tg.compile: a captured program may hold the old buffer)

    @property
    def _version(self):
        """The number of in-place writes into this tensor's memory (an int, as
        ``torch.Tensor._version``), counted on a counter it shares with its views and
        ``detach()``; ``_vc`` is that counter, a one-element list."""
        return self._vc[0]

    @property
    def _version_number(self):
        return self._vc[0]

    def dim(self):
        return self._data.ndim

    def size(self, dim=None):
        if dim is None:
            return _size(self._data.shape)
        from ._util import normalize_dim
        return self._data.shape[normalize_dim("size", dim, self._data.ndim)]

    def numel(self):
        return int(self._data.size)

    def element_size(self):
        return self._data.dtype.itemsize

    def data_ptr(self):
        """The address of the first element (as ``torch.Tensor.data_ptr``): equal for a
        tensor and a ``detach()`` or ``.data`` of it, which share its memory."""
        data = self._data
        if isinstance(data, np.ndarray):
            return data.__array_interface__["data"][0]
        return int(data.data.ptr)

    def is_complex(self):
        return self._data.dtype.kind == "c"

    def share_memory_(self):
        """Move the values into shared memory (``tapegrad.multiprocessing``), in place;
        processes this tensor is sent to, or forked after, see one copy of them."""
        self._data = _shared_memory.share(self._data)
        return self

    def is_shared(self):
        """Whether the values live in shared memory (``share_memory_``)."""
        return _shared_memory.is_shared(self._data)

    def is_floating_point(self):
        return _dt.is_float(self._data.dtype)

    # ---- conversion to Python / NumPy
    def item(self):
        if self._data.size != 1:
            raise RuntimeError(f"item: a Tensor with {self._data.size} elements cannot be "
                               f"converted to a Python scalar (shape {self.shape})")
        if _tape.state._observers:
            n = _read(self, "item")
            if n is not None:
                return n
        return self._data.item() if isinstance(self._data, np.ndarray) else self._data.get().item()

    def tolist(self):
        return self._host().tolist()

    def numpy(self, *, force=False):
        if self.device.type != "cpu":
            if force:
                return self._data.get()
            raise TypeError(f"numpy: the tensor is on {self.device}; call .cpu() first")
        if self.requires_grad and not force:
            raise RuntimeError("numpy: can't call numpy() on a Tensor that requires grad; "
                               "use tensor.detach().numpy() instead")
        if _tape.state._observers:
            _read(self)
        return self._data

    def _host(self):
        if _tape.state._observers:
            _read(self)
        return self._data if isinstance(self._data, np.ndarray) else self._data.get()

    def __array__(self, dtype=None, copy=None):
        if self.device.type != "cpu":
            raise TypeError(f"__array__: the tensor is on {self.device}; call .cpu() first")
        if _tape.state._observers:
            _read(self)
        a = self._data
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        if copy:
            return a.copy()
        return a

    # ---- DLPack
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from .devices import dlpack
        if _tape.state._observers:  # (its values read outside tapegrad's ops: a capture
            _read(self)             # takes them as it takes numpy()'s)
        return dlpack.export(self._data, read_only=self.requires_grad, stream=stream,
                             max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    # ---- Python protocols
    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self):
        if self._data.size != 1:
            raise RuntimeError(f"bool: the truth value of a Tensor with {self._data.size} "
                               f"elements is ambiguous")
        if _tape.state._observers:
            n = _read(self, "bool")
            if n is not None:
                return bool(n)
        return bool(self.item())

    def __float__(self):
        if _tape.state._observers and self._data.size == 1:
            n = _read(self, "float")  # (a capture: a number only compared after)
            if n is not None:
                return float(n)
        return float(self._one("float"))

    def __int__(self):
        if _tape.state._observers and self._data.size == 1:
            n = _read(self, "int")
            if n is not None:
                return int(n)
        return int(self._one("int"))

    def __index__(self):
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError(f"only integer tensors of a single element can be converted "
                            f"to an index, got {self.dtype} of shape {tuple(self.shape)}")
        if _tape.state._observers:  # (x[:n]: a capture guards the value)
            n = _read(self, "int")
            if n is not None:
                return int(n)
        return int(self._one("index"))

    def _one(self, what):
        if self._data.size != 1:
            raise _ArgumentError(f"{what}: only one-element tensors can be converted to "
                                 f"Python scalars, got shape {self.shape}")
        return self.item()

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return _format(self)

    # ---- autograd fields
    def requires_grad_(self, requires_grad=True):
        if requires_grad and not _dt.is_float(self._data.dtype):
            raise RuntimeError(f"requires_grad_: only Tensors of floating point dtype can "
                               f"require gradients, got {self.dtype}")
        if not requires_grad and self._node is not None:
            raise RuntimeError("requires_grad_: you can only change requires_grad flags of "
                               "leaf variables. If you want to use a computed variable in a "
                               "subgraph that doesn't require differentiation use "
                               "var_no_grad = var.detach().")
        if requires_grad:
            _inference_check(self)
        self._requires_grad = bool(requires_grad)
        return self

    def detach(self):
        """A fresh leaf that shares this tensor's memory and version counter (as
        PyTorch's): writes into it, in place of any kind, show here, and a value
        saved for a backward that they overwrite is caught."""
        t = Tensor(self._data)
        t._vc = self._vc
        if self._inference:
            t._inference = True
        return t

    def detach_(self):
        self._node = None
        self._requires_grad = False
        return self

    def retain_grad(self):
        if not self.requires_grad:
            raise RuntimeError("retain_grad: can't retain_grad on a Tensor that has "
                               "requires_grad=False")
        if self._node is not None:
            self._node.retain_output(self._idx, self)

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a non-None
        return value replaces the gradient. Returns a handle with ``remove()``."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that "
                               "doesn't require gradient")
        if self._node is not None:
            self._node.add_tensor_hook(self._idx, hook)
            fns = self._node.hooks[self._idx]
        else:
            if self._hooks is None:
                self._hooks = []
            self._hooks.append(hook)
            LEAF_HOOKS[0] += 1
            fns = self._hooks
        return _tape.HookHandle(fns, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` after a backward has accumulated this leaf's ``.grad``
        (as PyTorch: once per backward, as soon as the walk has delivered every
        contribution, so later parts of the backward still run; the return value is
        ignored). Returns a handle with ``remove()``."""
        if self._node is not None:
            raise RuntimeError("register_post_accumulate_grad_hook: post accumulate grad "
                               "hooks cannot be registered on non-leaf tensors")
        if not self.requires_grad:
            raise RuntimeError("register_post_accumulate_grad_hook: cannot register a hook "
                               "on a tensor that doesn't require gradient")
        if self._post_hooks is None:
            self._post_hooks = []
            POST_HOOKED.add(self)
        self._post_hooks.append(hook)
        LEAF_HOOKS[0] += 1
        return _tape.HookHandle(self._post_hooks, hook)

    @property
    def _is_view(self):
        return self._base is not None

    def _check_writable(self, op):
        if isinstance(self._data, np.ndarray) and not self._data.flags.writeable:
            raise RuntimeError(f"{op}: this tensor is read-only (it shares memory with a "
                               f"read-only buffer, e.g. an import through DLPack or an "
                               f"expanded view); clone() it before writing")


def _set_requires_grad(self, flag):
    if type(flag) is not bool:
        raise RuntimeError("requires_grad must be a bool")
    if self._node is not None:
        raise RuntimeError(
            "you can only change requires_grad flags of leaf variables." + ("" if flag else
            " If you want to use a computed variable in a subgraph that doesn't require "
            "differentiation use var_no_grad = var.detach()."))
    if flag and not _dt.is_float(self._data.dtype):
        raise RuntimeError(f"only Tensors of floating point dtype can require gradients, "
                           f"got {self.dtype}")
    if flag:
        _inference_check(self)
    self._requires_grad = flag


def _inference_check(t):
    """PyTorch's rule: an inference tensor may require grad only inside inference_mode."""
    if t._inference and not _tape.state.inference:
        raise RuntimeError("Setting requires_grad=True on inference tensor outside "
                           "InferenceMode is not allowed.")


def _set_grad(self, grad):
    if grad is not None:
        if not isinstance(grad, Tensor):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of "
                            f"type {type(grad).__name__}")
        if grad is self:
            raise RuntimeError("can't assign Variable as its own grad")
        if grad.dtype != self.dtype:
            raise RuntimeError(f"attempting to assign a gradient with dtype '{grad.dtype}' to "
                               f"a tensor with dtype '{self.dtype}' (assigned grad has data "
                               f"of a different type)")
        if grad.device != self.device:
            raise RuntimeError(f"attempting to assign a gradient on device '{grad.device}' to "
                               f"a tensor on device '{self.device}' (assigned grad has data "
                               f"located on a different device)")
        if grad.shape != self.shape:
            raise RuntimeError(f"attempting to assign a gradient of size "
                               f"'{list(grad.shape)}' to a tensor of size '{list(self.shape)}' "
                               f"(assigned grad has data of a different size)")
    self._grad = grad


# Public reads of requires_grad are the slot's own C getter (no Python frame); assignment
# runs Python, to check it as PyTorch does, and so does reading .grad (PyTorch warns on a
# non-leaf's). The library's hot paths use the slots themselves.
Tensor.requires_grad = property(
    Tensor._requires_grad.__get__, _set_requires_grad,
    doc="Whether operations on this tensor are recorded; settable on leaves only.")
def _get_grad(self):
    g = self._grad
    node = self._node
    if node is not None and (node.retain is None or self._idx not in node.retain):
        warnings.warn(
            "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
            ".grad attribute won't be populated during autograd.backward(). If you indeed "
            "want the .grad field to be populated for a non-leaf Tensor, use .retain_grad() "
            "on the non-leaf Tensor. If you access the non-leaf Tensor by mistake, make sure "
            "you access the leaf Tensor instead.", UserWarning, stacklevel=2)
    return g


Tensor.grad = property(
    _get_grad, _set_grad,
    doc="The gradient accumulated by backward (None until then); an assigned one must "
        "have this tensor's shape, dtype and device.")

# how many times a tensor's buffer was replaced (``t.data = ...``) in this process
DATA_SWAPS = [0]

# leaves with post-accumulate hooks (the walker counts their contributions only then)
POST_HOOKED = weakref.WeakSet()

# how many gradient and post-accumulate-grad hooks were registered on leaves in this
# process (tg.compile: a captured program runs none of a leaf's hooks)
LEAF_HOOKS = [0]


def _read(t, number=None):
    """Python is reading ``t``'s values (item, tolist, numpy, __array__): observers with
    a ``read(array, number)`` method hear of it (tg.compile makes such a read a guard).
    For ``number`` (``"item"``, ``"bool"``: a one-element read) an observer may give
    the number-like object to return instead (one that records how it is used); for
    ``"float"`` and ``"int"`` (``float(t)``, ``int(t)``) the number to return."""
    out = None
    for o in _tape.state._observers:
        r = getattr(o, "read", None)
        if r is not None:
            n = r(t._data, number)
            if n is not None:
                out = n
    return out


def wrap(array, node=None, idx=0, version=None):
    """A Tensor around a raw array; with ``node`` it is that node's output ``idx``."""
    t = Tensor.__new__(Tensor)
    if type(array) is not np.ndarray and isinstance(array, np.generic):
        array = np.asarray(array)
    t._data = array
    t._grad = None
    t._idx = idx
    t._vc = version if version is not None else [0]
    if node is not None:
        t._node = node
        t._requires_grad = True
    else:
        t._node = None
        t._requires_grad = False
    return t




def as_output(saved, node, idx, version):
    """A node's saved output as that node's output ``idx``: the array wrapped, or for a
    saved Tensor (a batched output, tapegrad.vmap) a copy of it taking the node."""
    if not isinstance(saved, Tensor):
        return wrap(saved, node, idx, version)
    t = copy.copy(saved)
    t._node, t._idx, t._grad, t._requires_grad, t._vc = node, idx, None, True, version
    return t


# ------------------------------------------------------------------ buffer access
# For the library's layers above dispatch that work on buffers directly (optimizer
# updates, initialisers, loading state): the one sanctioned way to reach a Tensor's
# array, instead of reading ``._data``/``._vc`` (tests/test_layering.py checks).
def buffer(t):
    """The array (NumPy or CuPy) behind ``t``, shared, not copied. A batched tensor
    (inside vmap) has no array of one example: refused, never a stand-in."""
    if t._vlevel is not None:
        raise RuntimeError("vmap: this function reads the data of a batched tensor "
                           "directly, which has no meaning for one example inside vmap "
                           "(the batch holds many); it is not supported under vmap yet")
    return t._data


def mark_written(t):
    """Record that ``t``'s buffer was written in place: bumps its version counter
    (shared with its views), so a recording that saved ``t`` refuses to run its
    adjoint on the new values. Every in-place write, in an op or outside, comes here."""
    t._vc[0] += 1
    last_write[0] = next(_write_ids)


# The id of the latest in-place write in any thread. A node saves it with its inputs:
# while it is unchanged, nothing the node saved can have been written, and the walker
# skips the version checks. Ids come from one counter, so a write after a node was
# recorded leaves an id the node never saw, whatever the threads' interleaving.
_write_ids = itertools.count(1)
last_write = [0]

# Tensor and its subclasses (nn.Parameter): the funnel checks ``type(a) in subclasses``
subclasses = {Tensor}


def _register_subclass(cls):
    subclasses.add(cls)


# ------------------------------------------------------------------ repr
def _summary(data, edge=3):
    """The elements a summarised print shows (``edge`` first and last along each
    axis), as PyTorch formats a large tensor from: never a copy of the whole (a huge
    broadcast view prints at no cost)."""
    for ax in range(data.ndim):
        if data.shape[ax] > 2 * edge:
            data = np.concatenate([data[(slice(None),) * ax + (slice(None, edge),)],
                                   data[(slice(None),) * ax + (slice(-edge, None),)]], axis=ax)
    return data


def _body(a, indent, summarised, fmt, element, edge, linewidth):
    """PyTorch's layout of a tensor's elements (``torch._tensor_str``): a row holds as
    many ``element``-wide entries as fit in ``linewidth`` after ``indent``; a summarised
    axis shows ``edge`` entries at each end around "..."; rows of a higher dimension are
    separated by as many newlines as it has dimensions below it."""
    if a.ndim == 0:
        return fmt(a.item())
    long = summarised and a.shape[0] > 2 * edge
    if a.ndim == 1:
        if summarised and not edge:
            items = ["..."]
        elif long:
            items = [fmt(v) for v in a[:edge].tolist()] + [" ..."] + \
                [fmt(v) for v in a[-edge:].tolist()]
        else:
            items = [fmt(v) for v in a.tolist()]
        per_line = max(1, (linewidth - indent) // element)
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = range(a.shape[0])
    if long:
        rows = list(range(edge)) + [None] + list(range(a.shape[0] - edge, a.shape[0]))
    parts = ["..." if i is None else
             _body(a[i], indent + 1, summarised, fmt, element, edge, linewidth) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


# how tensors print (``tg.set_printoptions``); NumPy's own options are never read or set
PRINT_OPTIONS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80,
                 "sci_mode": None}


def _format(t):
    data = t._host()
    dt = t.dtype
    kind = "f" if dt.is_floating_point else data.dtype.kind
    if data.dtype in _dt.LOW:  # printed from float32 (exact), as PyTorch shows them
        data = data.astype(np.float32)
    opts = PRINT_OPTIONS
    p, edge = opts["precision"], opts["edgeitems"]
    threshold = opts["threshold"] if opts["threshold"] < sys.maxsize else sys.maxsize
    summarised = data.size > threshold
    shown = _summary(data, edge) if summarised else data
    if kind == "f":
        finite = shown[np.isfinite(shown)]
        ints = finite.size == 0 or bool(np.all(finite == np.round(finite)))
        nz = np.abs(finite[finite != 0])
        # PyTorch's rule: scientific when the nonzero magnitudes span over 1000x, or
        # reach 1e8, or (not all integers) go below 1e-4
        big = nz.size and (nz.max() / nz.min() > 1000.0 or nz.max() > 1e8
                           or (not ints and nz.min() < 1e-4))
        if opts["sci_mode"] is not None:
            big = opts["sci_mode"]
        if big:
            one = lambda v: f"{v:.{p}e}" if np.isfinite(v) else str(v)  # noqa: E731
        elif ints:
            one = lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)  # noqa: E731
        else:
            one = lambda v: f"{v:.{p}f}" if np.isfinite(v) else str(v)  # noqa: E731
    elif kind == "b":
        one = lambda v: "True" if v else "False"  # noqa: E731
    else:
        one = lambda v: str(int(v))  # noqa: E731
    # every element right-aligned to the widest, as PyTorch prints
    if kind == "f":  # nan, inf and zeros (-0.) don't widen the columns (PyTorch's rule)
        shown = shown[np.isfinite(shown) & (shown != 0)]
    width = max((len(one(v)) for v in shown.reshape(-1)), default=0)
    if data.size == 0:
        body = "[]"
    else:
        body = _body(data, 7, summarised, lambda v: one(v).rjust(width), width + 2, edge,
                     opts["linewidth"])
    extras = []
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    default = _dt.get_default_dtype()
    if (data.size == 0 and data.ndim != 1) or (data.size and not edge):
        # PyTorch shows the shape of an empty tensor, and of any when edgeitems is 0
        extras.append(f"size={tuple(data.shape)}")
    if dt not in (default, _dt.int64, _dt.bool) or (data.size == 0 and dt != default):
        extras.append(f"dtype={dt}")
    if t._node is not None:
        extras.append(f"grad_fn=<{t._node.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    # PyTorch's layout of the suffixes: one that would pass the line width starts a
    # new line, indented under the first element. Lengths are measured as PyTorch spells
    # the dtype ("torch.float64"), so the lines break where PyTorch's break
    out = ["tensor(" + body]
    last = len(out[0]) - out[0].rfind("\n") + 1
    for e in extras:
        n = len(e.replace("tapegrad.", "torch.", 1))
        if last + n + 2 > opts["linewidth"]:
            out.append(",\n" + " " * 7 + e)
            last = 7 + n
        else:
            out.append(", " + e)
            last += n + 2
    return "".join(out) + ")"


def unpickle_tensor(array, device, requires_grad):
    """A pickled Tensor back (``Tensor.__reduce_ex__``), on ``device``."""
    dev = _devices.device(device)
    if dev.type != "cpu":
        array = _devices.xp(dev).asarray(array)
    return Tensor(array, requires_grad=requires_grad)
