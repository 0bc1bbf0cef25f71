"""The Tensor, and ``bind``: the one funnel every op call goes through."""
import traceback
from types import MappingProxyType

import numpy as np

from . import dtypes as _dt
from . import devices as _devices
from . import tape as _tape
from .tape import Node, make_node as _make_node, state as _state, next_seq as _next_seq
from .tape import FAST_RECORD as _FAST_RECORD
from ._util import fmt_spec

__all__ = ["Tensor", "bind", "wrap", "apply_inplace", "buffer", "mark_written"]

_SCALARS = (int, float, bool)
_NDARRAY = np.ndarray


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
    __slots__ = ("_data", "requires_grad", "grad", "_node", "_idx", "_version",
                 "__dict__", "__weakref__")
    # rarely set fields live in the lazily created __dict__; these are the defaults
    _base = None     # the tensor whose buffer a view shares
    _hooks = None    # gradient hooks of a leaf
    _tapes = None    # ids of explicit Tapes watching this tensor
    __array_priority__ = 1000  # NumPy defers to our reflected operators

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        _register_subclass(cls)

    def __init__(self, data, requires_grad=False):
        self._data = data
        self.requires_grad = requires_grad
        self.grad = None
        self._node = None
        self._idx = 0
        self._version = [0]
        if requires_grad and data.dtype.kind != "f":
            raise RuntimeError(f"only Tensors of floating point dtype can require "
                               f"gradients, got {_dt.from_np(data.dtype)}")

    # ---- metadata
    @property
    def shape(self):
        return self._data.shape

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

    @property
    def _version_number(self):
        return self._version[0]

    def dim(self):
        return self._data.ndim

    def size(self, dim=None):
        if dim is None:
            return self._data.shape
        from ._util import normalize_dim
        return self._data.shape[normalize_dim("size", dim, self._data.ndim)]

    def numel(self):
        return int(self._data.size)

    def element_size(self):
        return self._data.dtype.itemsize

    def is_floating_point(self):
        return self._data.dtype.kind == "f"

    # ---- conversion to Python / NumPy
    def item(self):
        if self._data.size != 1:
            raise RuntimeError(f"item: a Tensor with {self._data.size} elements cannot be "
                               f"converted to a Python scalar (shape {self.shape})")
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
        return self._data

    def _host(self):
        return self._data if isinstance(self._data, np.ndarray) else self._data.get()

    def __array__(self, dtype=None, copy=None):
        if self.device.type != "cpu":
            raise TypeError(f"__array__: the tensor is on {self.device}; call .cpu() first")
        a = self._data
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        if copy:
            return a.copy()
        return a

    # ---- DLPack
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from .devices import dlpack
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
        return bool(self.item())

    def __float__(self):
        return float(self._one("float"))

    def __int__(self):
        return int(self._one("int"))

    def __index__(self):
        if self._data.dtype.kind not in "iub":
            raise TypeError(f"only integer tensors of a single element can be converted "
                            f"to an index, got {self.dtype}")
        return int(self._one("index"))

    def _one(self, what):
        if self._data.size != 1:
            raise RuntimeError(f"{what}: only one-element tensors can be converted to Python "
                               f"scalars, got shape {self.shape}")
        return self.item()

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return _format(self)

    # ---- autograd fields
    def requires_grad_(self, requires_grad=True):
        if requires_grad and self._data.dtype.kind != "f":
            raise RuntimeError(f"requires_grad_: only Tensors of floating point dtype can "
                               f"require gradients, got {self.dtype}")
        if not requires_grad and self._node is not None:
            raise RuntimeError("requires_grad_: you can only change requires_grad flags of "
                               "leaf variables; use detach() for a non-leaf")
        self.requires_grad = requires_grad
        return self

    def detach(self):
        t = Tensor(self._data)
        t._version = self._version
        t._base = self._base if self._base is not None else self
        return t

    def detach_(self):
        self._node = None
        self.requires_grad = False
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
            self._node.register_hook(self._idx, hook)
            fns = self._node.hooks[self._idx]
        else:
            if self._hooks is None:
                self._hooks = []
            self._hooks.append(hook)
            fns = self._hooks
        return _HookHandle(fns, hook)

    @property
    def _is_view(self):
        return self._base is not None

    def _check_writable(self, op):
        if isinstance(self._data, np.ndarray) and not self._data.flags.writeable:
            raise RuntimeError(f"{op}: this tensor is read-only (it shares memory with a "
                               f"read-only buffer, e.g. an import through DLPack or an "
                               f"expanded view); clone() it before writing")


class _HookHandle:
    __slots__ = ("fns", "fn")

    def __init__(self, fns, fn):
        self.fns, self.fn = fns, fn

    def remove(self):
        if self.fn in self.fns:
            self.fns.remove(self.fn)


def wrap(array, node=None, idx=0, version=None):
    """A Tensor around a raw array; with ``node`` it is that node's output ``idx``."""
    t = Tensor.__new__(Tensor)
    if type(array) is not np.ndarray and isinstance(array, np.generic):
        array = np.asarray(array)
    t._data = array
    t.grad = None
    t._idx = idx
    t._version = version if version is not None else [0]
    if node is not None:
        t._node = node
        t.requires_grad = True
    else:
        t._node = None
        t.requires_grad = False
    return t


_tape.install_tensor(Tensor, wrap)


# ------------------------------------------------------------------ buffer access
# For the library's layers above dispatch that work on buffers directly (optimizer
# updates, initialisers, loading state): the one sanctioned way to reach a Tensor's
# array, instead of reading ``._data``/``._version`` (tests/test_layering.py checks).
def buffer(t):
    """The array (NumPy or CuPy) behind ``t``, shared, not copied."""
    return t._data


def mark_written(t):
    """Record that ``t``'s buffer was written in place outside an op: bumps the version
    counter (shared with its views), so a recording that saved ``t`` refuses to
    run its adjoint on the new values."""
    t._version[0] += 1

# Tensor and its subclasses (nn.Parameter): bind checks ``type(a) in _TT`` (fast)
_TT = {Tensor}


def _register_subclass(cls):
    _TT.add(cls)


# ------------------------------------------------------------------ the funnel
def _promote(op, arrays):
    target = None
    same = True
    scalars = False
    for a in arrays:
        if a is None:
            continue
        if type(a) in _SCALARS:
            scalars = True
            continue
        dt = a.dtype
        if target is None:
            target = dt
        elif dt is not target and dt != target:
            same = False
    if same and not scalars and (op.promote != "float" or target.kind == "f"):
        return arrays
    if same and scalars and target.kind == "f":
        return arrays
    return _promote_slow(op, arrays)


def _promote_slow(op, arrays):
    dts = []
    scalars = []
    for a in arrays:
        if a is None:
            continue
        if type(a) in _SCALARS:
            scalars.append(a)
        else:
            dts.append(a.dtype)
    target = _dt.result_type(*dts)
    if scalars:
        target = _dt.promote_with_scalars(target, scalars)
    if op.promote == "float" and target.kind != "f":
        target = _dt.default_float_np()
    out = []
    for a in arrays:
        if a is not None and type(a) not in _SCALARS and a.dtype != target:
            a = a.astype(target)
        out.append(a)
    return out


def _coerce(op, i, a):
    """A non-Tensor argument: a weak scalar, None, or a raw array constant."""
    if a is None or type(a) in _SCALARS:
        return a
    if isinstance(a, np.generic):
        return a.item()
    if isinstance(a, np.ndarray) or type(a).__module__.startswith("cupy"):
        return a
    name = op.args[i] if i < len(op.args) else f"#{i}"
    raise TypeError(f"{op.name}: argument '{name}' must be a Tensor or a number, "
                    f"not {type(a).__name__}")


def _explain(op, arrays, attrs, err):
    """Turn a kernel failure into the op's own error.

    The shape rule speaks first (shapes, dtypes, dims); when it finds nothing wrong,
    a kernel error that already names the op (data-dependent: index values, a
    singular matrix) is kept; anything else becomes a RuntimeError naming the op.
    """
    from .ops_registry.opdef import TensorSpec
    specs = [a if a is None or type(a) in _SCALARS else TensorSpec(tuple(a.shape), a.dtype)
             for a in arrays]
    try:
        op.infer(*specs, **attrs)
    except (ValueError, TypeError, IndexError, RuntimeError) as e:
        e.__cause__ = None
        e.__suppress_context__ = True
        return e
    msg = str(err)
    if msg.startswith(op.name + ":") or msg.startswith(op.name + "_"):
        err.__cause__ = None
        err.__suppress_context__ = True
        return err
    shown = ", ".join(fmt_spec(a) for a in arrays if a is not None and type(a) not in _SCALARS)
    return RuntimeError(f"{op.name}: failed on inputs [{shown}]: {type(err).__name__}: {err}")


def _run_kernel(op, arrays, attrs):
    kw = attrs
    if op.kind == "workspace":
        from .ops_registry.opdef import TensorSpec
        specs = [a if a is None or type(a) in _SCALARS else TensorSpec(tuple(a.shape), a.dtype)
                 for a in arrays]
        nbytes = op.workspace(*specs, **attrs)
        kw = dict(attrs, workspace=_workspace(arrays, nbytes))
    elif op.kind == "dynamic":
        xp = _devices.xp_of(next((a for a in arrays if a is not None and type(a) not in _SCALARS), 0))
        kw = dict(attrs, alloc=lambda shape, dtype: xp.empty(shape, dtype=dtype))
    try:
        return op.kernel(*arrays, **kw)
    except (ValueError, TypeError, IndexError, RuntimeError, ZeroDivisionError,
            OverflowError, np.linalg.LinAlgError, AttributeError) as e:
        raise _explain(op, arrays, attrs, e) from None


_ws_cache = {}


def _workspace(arrays, nbytes):
    """Scratch for workspace ops: one growing buffer per device, reused."""
    first = next(a for a in arrays if a is not None and type(a) not in _SCALARS)
    xp = _devices.xp_of(first)
    key = (_devices.device_of(first), id(_state))
    buf = _ws_cache.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = _ws_cache[key] = xp.empty(max(int(nbytes), 1), dtype=np.uint8)
    return buf[:int(nbytes)]


def bind(op, *args, **attrs):
    """Run ``op`` on Tensors (or raw arrays, or scalars) and record it when needed.

    Unwraps Tensors, checks devices, promotes dtypes per ``op.promote``, runs the
    kernel (its shape rule explains any failure), wraps the outputs, and, when grad
    mode is on and an input requires grad (or is watched by an active Tape), records
    a Node that saves exactly ``op.saves``. With no Tensor among the arguments the
    kernel's raw result is returned, which is how vjps run fast on plain arrays.

    The first branch is the common case of one or two CPU tensors (or a tensor and
    a weak scalar) of one dtype, unrolled: it is most of the time of a training
    step on small tensors. Everything else takes the general path.
    """
    mode = _state.mode
    if mode and op.fast and len(args) <= 2:
        x = args[0]
        if type(x) in _TT:
            xd = x._data
            if type(xd) is _NDARRAY:
                if len(args) == 1:
                    if op.promote != "float" or xd.dtype.kind == "f":
                        return _fast(op, attrs, x, xd, None, None, xd.dtype, mode)
                else:
                    y = args[1]
                    ty = type(y)
                    if ty in _TT:
                        yd = y._data
                        if type(yd) is _NDARRAY and yd.dtype is xd.dtype and (
                                op.promote != "float" or xd.dtype.kind == "f"):
                            return _fast(op, attrs, x, xd, y, yd, xd.dtype, mode)
                    elif (ty is float or ty is int) and xd.dtype.kind == "f":
                        return _fast(op, attrs, x, xd, None, y, xd.dtype, mode)
        elif type(x) is _NDARRAY and x.dtype.kind == "f":
            # raw float arrays (a vjp on the fast path): the kernel and nothing else
            if len(args) == 1:
                out = _raw_kernel(op, attrs, args)
            else:
                y = args[1]
                ty = type(y)
                if (ty is _NDARRAY and y.dtype is x.dtype) or ty is float or ty is int:
                    out = _raw_kernel(op, attrs, args)
                else:
                    return _bind(op, args, attrs)
            return out if type(out) is _NDARRAY else _asarray(out)
    return _bind(op, args, attrs)


def _raw_kernel(op, attrs, args):
    try:
        return op.kernel(*args, **attrs)
    except _KERNEL_ERRORS as e:
        raise _explain(op, list(args), attrs, e) from None


def _fast(op, attrs, x, xd, y, yd, dt, mode):
    try:
        out = op.kernel(xd, **attrs) if yd is None else op.kernel(xd, yd, **attrs)
    except _KERNEL_ERRORS as e:
        raise _explain(op, [xd] if yd is None else [xd, yd], attrs, e) from None
    if type(out) is not _NDARRAY:
        out = _asarray(out)
    rx = x.requires_grad
    ry = y is not None and y.requires_grad
    if not (rx or ry) or mode != _FAST_RECORD or out.dtype.kind != "f" or \
            not op.differentiable:
        res = wrap(out)
        if op.kind == "view":
            _make_view(res, x)
        return res
    ex = ((x._node, x._idx) if x._node is not None else x) if rx else None
    si = op.save_idx
    saved = versions = None
    if yd is None:
        edges, shapes, dtypes, needs = (ex,), (xd.shape,), (dt,), (rx,)
        if si:
            saved, versions = (x,), (x._version[0],)
    elif y is None:  # a weak scalar
        edges, shapes, dtypes, needs = (ex, None), (xd.shape, None), (dt, None), (rx, False)
        if si:
            sx = 0 in si
            saved = (x if sx else None, yd if 1 in si else None)
            versions = (x._version[0] if sx else None, None)
    else:
        ey = ((y._node, y._idx) if y._node is not None else y) if ry else None
        edges, shapes, dtypes, needs = (ex, ey), (xd.shape, yd.shape), (dt, dt), (rx, ry)
        if si:
            sx = 0 in si
            sy = 1 in si
            saved = (x if sx else None, y if sy else None)
            versions = (x._version[0] if sx else None, y._version[0] if sy else None)
    ver = [0]
    if op.save_out:
        node = _make_node(op, attrs, edges, shapes, dtypes, needs, saved, versions, out, (ver, 0))
    else:
        node = _make_node(op, attrs, edges, shapes, dtypes, needs, saved, versions)
    res = wrap(out, node, 0, ver)
    if op.kind == "view":
        _make_view(res, x)
    return res


# ------------------------------------------------------------------ operator fast paths
_new = object.__new__
_NO_ATTRS = MappingProxyType({})  # the attrs of every operator-method node (read-only)


def binary_method(op):
    """The operator method (``__mul__``...) of a binary elementwise op without attrs
    whose kernel is a NumPy ufunc, and whose vjp, given a gradient of the output's
    shape and dtype and inputs of that shape and dtype, returns gradients of that
    shape and dtype (the walker then skips its checks: ``Node.same``).

    Why it exists: on small tensors an op's cost is Python overhead, not arithmetic,
    and ``x * y`` through ``bind`` -> ``_fast`` -> ``wrap`` -> ``Node`` spends most of
    its time in frames and argument packing. This is the same fast path in one frame:
    two CPU tensors of one dtype (or a float tensor and a Python float/int), the
    kernel called directly (``op.kernel`` is read per call: ``tg.profile`` swaps it),
    the output Tensor and its Node built in place. Everything else (another dtype or
    device, another argument type, an active Tape, anomaly mode, a kernel error) goes
    to ``bind``, which handles it and words the error, so the behaviour is bind's.
    """
    float_only = op.promote == "float"
    save_x = 0 in op.save_idx
    save_y = 1 in op.save_idx
    saves = save_x or save_y
    save_out = op.save_out
    if not op.fast or op.kind != "basic" or op.nout != 1 or not op.differentiable:
        raise ValueError(f"binary_method: {op.name} is not a plain elementwise op")

    def method(self, other):
        mode = _state.mode
        if not mode:  # an active Tape or anomaly mode
            return bind(op, self, other)
        xd = self._data
        dt = xd.dtype
        ty = type(other)
        if ty in _TT:
            yd = other._data
            if type(xd) is not _NDARRAY or type(yd) is not _NDARRAY or yd.dtype is not dt \
                    or (float_only and dt.kind != "f"):
                return bind(op, self, other)
            ry = other.requires_grad
        elif (ty is float or ty is int) and type(xd) is _NDARRAY and dt.kind == "f":
            yd = other  # a weak scalar
            ry = False
        else:
            return bind(op, self, other)
        try:
            out = op.kernel(xd, yd)
        except _KERNEL_ERRORS:
            return bind(op, self, other)
        if type(out) is not _NDARRAY:
            out = _asarray(out)
        res = _new(Tensor)
        res._data = out
        res.grad = None
        res._idx = 0
        ver = res._version = [0]
        rx = self.requires_grad
        # float inputs give a float output here, so dt.kind is _fast's out.dtype.kind
        if not (rx or ry) or mode != _FAST_RECORD or dt.kind != "f":
            res._node = None
            res.requires_grad = False
            return res
        node = Node()  # every slot is set below (tape.make_node, inline)
        node.op = op
        node.attrs = _NO_ATTRS
        if rx:
            xn = self._node
            ex = (xn, self._idx) if xn is not None else self
        else:
            ex = None
        if ry:
            yn = other._node
            node.edges = (ex, (yn, other._idx) if yn is not None else other)
        else:
            node.edges = (ex, None)
        if yd is other:  # a weak scalar
            node.shapes = (xd.shape, None)
            node.dtypes = (dt, None)
            node.same = True
            if saves:
                node.saved = (self if save_x else None, other if save_y else None)
                node.versions = (self._version[0] if save_x else None, None)
            else:
                node.saved = node.versions = None
        else:
            xs = xd.shape
            ys = yd.shape
            node.shapes = (xs, ys)
            node.dtypes = (dt, dt)
            node.same = xs == ys
            if saves:
                node.saved = (self if save_x else None, other if save_y else None)
                node.versions = (self._version[0] if save_x else None,
                                 other._version[0] if save_y else None)
            else:
                node.saved = node.versions = None
        node.needs = (rx, ry)
        node.seq = _next_seq()
        if save_out:
            node.out = out
            node.out_version = (ver, 0)
        else:
            node.out = node.out_version = None
        node.hooks = node.retain = None
        node.freed = False
        res._node = node
        res.requires_grad = True
        return res
    method.__name__ = op.name
    return method


def unary_method(op):
    """The method (``__neg__``...) of a unary elementwise op without attrs whose
    kernel is a NumPy ufunc (and whose vjp keeps the output's shape and dtype): bind's
    fast path in one frame, as ``binary_method``; everything else goes to ``bind``."""
    float_only = op.promote == "float"
    save_x = 0 in op.save_idx
    save_out = op.save_out
    if not op.fast or op.kind != "basic" or op.nout != 1 or not op.differentiable:
        raise ValueError(f"unary_method: {op.name} is not a plain elementwise op")

    def method(self):
        mode = _state.mode
        if not mode or type(self) not in _TT:
            return bind(op, self)
        xd = self._data
        dt = xd.dtype
        if type(xd) is not _NDARRAY or (float_only and dt.kind != "f"):
            return bind(op, self)
        try:
            out = op.kernel(xd)
        except _KERNEL_ERRORS:
            return bind(op, self)
        if type(out) is not _NDARRAY:
            out = _asarray(out)
        res = _new(Tensor)
        res._data = out
        res.grad = None
        res._idx = 0
        ver = res._version = [0]
        if not self.requires_grad or mode != _FAST_RECORD or dt.kind != "f":
            res._node = None
            res.requires_grad = False
            return res
        node = _make_node(op, _NO_ATTRS,
                          ((self._node, self._idx) if self._node is not None else self,),
                          (xd.shape,), (dt,), (True,),
                          (self,) if save_x else None, (self._version[0],) if save_x else None,
                          out if save_out else None, (ver, 0) if save_out else None)
        node.same = True
        res._node = node
        res.requires_grad = True
        return res
    method.__name__ = op.name
    return method


def _bind(op, args, attrs):
    """The general path of ``bind``."""
    arrays = []
    push = arrays.append
    tensor_seen = False
    rg = False
    first_type = None
    mixed = False
    generics = []
    for a in args:
        tp = type(a)
        if tp in _TT:
            d = a._data
            tensor_seen = True
            if a.requires_grad:
                rg = True
        elif tp is _NDARRAY:
            d = a
        elif a is None or tp in _SCALARS:
            push(a)
            continue
        elif isinstance(a, np.generic):
            # a NumPy scalar (e.g. from 0-d array arithmetic in a raw vjp): a 0-d
            # array on the raw path, a weak Python scalar next to Tensors
            generics.append(len(arrays))
            d = np.asarray(a)
        else:
            d = _coerce(op, len(arrays), a)
            if d is None or type(d) in _SCALARS:
                push(d)
                continue
        push(d)
        tp = type(d)
        if first_type is None:
            first_type = tp
        elif tp is not first_type:
            mixed = True
    if generics and tensor_seen:
        for i in generics:
            arrays[i] = arrays[i].item()
        if all(a is None or type(a) in _SCALARS or type(a) is first_type for a in arrays):
            mixed = False
    if mixed:
        _devices.check_same(op.name, [_devices.device_of(a) for a in arrays
                                      if a is not None and type(a) not in _SCALARS])
    if op.promote != "none" and first_type is not None:
        arrays = _promote(op, arrays)
    if op.kind in _PLAIN_KINDS:
        try:
            out = op.kernel(*arrays, **attrs)
        except _KERNEL_ERRORS as e:
            raise _explain(op, arrays, attrs, e) from None
    else:
        out = _run_kernel(op, arrays, attrs)
    if not tensor_seen:
        if type(out) is np.ndarray:
            return out
        if type(out) is tuple:
            return tuple(_asarray(o) for o in out)
        return _asarray(out)
    st = _state
    grad_on = st._grad
    record = rg and grad_on and op.differentiable
    tapes = st._tapes
    if tapes and not record and op.differentiable and grad_on:
        record = any(type(a) in _TT and a._tapes for a in args)
    if op.nout == 1:
        if type(out) is not np.ndarray:
            out = _asarray(out)
        res = wrap(out)
        if op.kind == "view":
            _make_view(res, args[0])
        if record and out.dtype.kind == "f":
            _record(op, args, attrs, out, (res,), rg, tapes)
        elif st._anomaly:
            _check_forward(op, (res,))
        return res
    res = tuple(wrap(o if type(o) is np.ndarray else _asarray(o)) for o in out)
    if record and any(o._data.dtype.kind == "f" for o in res):
        _record(op, args, attrs, tuple(o._data for o in res), res, rg, tapes)
    return res


_PLAIN_KINDS = frozenset(("basic", "view"))
_KERNEL_ERRORS = (ValueError, TypeError, IndexError, RuntimeError, ZeroDivisionError,
                  OverflowError, np.linalg.LinAlgError, AttributeError)


def _asarray(o):
    if isinstance(o, np.generic) or isinstance(o, (int, float, bool)):
        return np.asarray(o)
    return o


def _make_view(res, base):
    if type(base) in _TT and (res._data.base is not None or res._data is base._data):
        res._version = base._version
        res._base = base._base if base._base is not None else base


def _record(op, args, attrs, out_arrays, outs, rg, tapes):
    edges = []
    shapes = []
    dtypes = []
    needs = []
    for a in args:
        if type(a) in _TT:
            d = a._data
            shapes.append(d.shape)
            dtypes.append(d.dtype)
            if a.requires_grad or (tapes and a._tapes):
                node = a._node
                edges.append((node, a._idx) if node is not None else a)
                needs.append(True)
                continue
        else:
            has = a is not None and type(a) not in _SCALARS
            shapes.append(a.shape if has else None)
            dtypes.append(a.dtype if has else None)
        edges.append(None)
        needs.append(False)
    node = _make_node(op, attrs, tuple(edges), tuple(shapes), tuple(dtypes), tuple(needs))
    if op.save_idx:
        saved = [None] * len(args)
        versions = [None] * len(args)
        for i in op.save_idx:
            a = args[i]
            saved[i] = a
            if type(a) in _TT:
                versions[i] = a._version[0]
        node.saved = saved
        node.versions = versions
    if op.save_out:
        node.out = out_arrays
        v = outs[0]._version
        node.out_version = (v, v[0])
    if tapes:
        node.tapes = _tapes_of(args, rg, tapes)
    for k, o in enumerate(outs):
        if o._data.dtype.kind == "f":
            o._node = node
            o._idx = k
            o.requires_grad = rg
            if tapes:
                o._tapes = node.tapes
    if _state._anomaly:
        node.where = _user_frame()
        _check_forward(op, outs, node.where)


def _tapes_of(args, rg, tapes):
    active = {id(t) for t in tapes}
    found = set()
    for a in args:
        if type(a) in _TT and a._tapes:
            found |= a._tapes & active
    if rg:
        found |= active
    return frozenset(found) if found else None


def _user_frame():
    import os
    pkg = os.path.dirname(os.path.abspath(__file__))
    for fr in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(fr.filename).startswith(pkg):
            return f"{fr.filename}:{fr.lineno} ({fr.line})"
    return None


def _check_forward(op, outs, where=None):
    for o in outs:
        _tape._check_finite(op.name, where or _user_frame(), o._data, "forward")


# ------------------------------------------------------------------ in place
def apply_inplace(op, t, *args, **attrs):
    """``t <- op(t, *args)`` in t's own buffer, PyTorch rules.

    A leaf that requires grad refuses (in grad mode); read-only buffers refuse; the
    version counter (shared with views) is bumped so stale saved values are caught.
    When recorded, the op sees a snapshot of t's old value, and t takes the new node.
    """
    if type(t) not in _TT:
        raise TypeError(f"{op.name}_: expected a Tensor, got {type(t).__name__}")
    t._check_writable(op.name + "_")
    grad_on = _state._grad
    if grad_on and t.requires_grad and t._node is None:
        raise RuntimeError(f"{op.name}_: a leaf Variable that requires grad is being used "
                           f"in an in-place operation")
    record = grad_on and (t.requires_grad or any(type(a) in _TT and a.requires_grad
                                                 for a in args))
    if record:
        if 0 in op.save_idx:
            old = wrap(t._data.copy(), t._node, t._idx) if t._node is not None else Tensor(t._data.copy())
        else:
            old = wrap(t._data, t._node, t._idx) if t._node is not None else Tensor(t._data)
        old.requires_grad = t.requires_grad
        res = bind(op, old, *args, **attrs)
    else:
        prev = _state.grad_enabled
        _state.grad_enabled = False
        try:
            res = bind(op, t, *args, **attrs)
        finally:
            _state.grad_enabled = prev
    new = res._data
    if new.dtype != t._data.dtype and not np.can_cast(new.dtype, t._data.dtype, "same_kind"):
        raise RuntimeError(f"{op.name}_: result type {_dt.from_np(new.dtype)} can't be cast "
                           f"to the desired output type {t.dtype}")
    if new.shape != t._data.shape:
        raise RuntimeError(f"{op.name}_: output with shape {t.shape} doesn't match the "
                           f"broadcast shape {tuple(new.shape)}")
    t._data[...] = new
    t._version[0] += 1
    if record:
        t._node = res._node
        t._idx = res._idx
        t.requires_grad = True
    return t


# ------------------------------------------------------------------ repr
def _format(t):
    data = t._host()
    dt = t.dtype
    kind = data.dtype.kind
    if kind == "f":
        finite = data[np.isfinite(data)]
        ints = finite.size == 0 or bool(np.all(finite == np.round(finite)))
        nz = np.abs(finite[finite != 0])
        big = nz.size and (nz.max() >= 1e8 or nz.min() < 1e-4)
        if big:
            one = lambda v: f"{v:.4e}" if np.isfinite(v) else str(v)  # noqa: E731
        elif ints:
            one = lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)  # noqa: E731
        else:
            one = lambda v: f"{v:.4f}" if np.isfinite(v) else str(v)  # noqa: E731
        key = "float_kind"
    elif kind == "b":
        one, key = (lambda v: "True" if v else "False"), "bool"
    else:
        one, key = (lambda v: str(int(v))), "int"
    # every element right-aligned to the widest, as PyTorch prints
    shown = data if data.size <= 1000 else np.concatenate(
        [data.reshape(-1)[:500], data.reshape(-1)[-500:]])
    if kind == "f":  # nan and inf don't widen the columns (PyTorch's rule)
        shown = shown[np.isfinite(shown)]
    width = max((len(one(v)) for v in shown.reshape(-1)), default=0)
    body = np.array2string(data, separator=", ", prefix="tensor(", threshold=1000,
                           edgeitems=3, formatter={key: lambda v: one(v).rjust(width)})
    extras = []
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    if dt not in (_dt.get_default_dtype(), _dt.int64, _dt.bool) or (data.size == 0 and dt != _dt.get_default_dtype()):
        extras.append(f"dtype={dt}")
    if t._node is not None:
        extras.append(f"grad_fn=<{_tape._backward_name(t._node.op.name)}0>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
