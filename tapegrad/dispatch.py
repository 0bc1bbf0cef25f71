"""The funnel: every op call, however it is spelled, goes through here.

``x * y``, ``tg.mul(x, y)``, a call under a ``Tape``, on CuPy arrays, with mixed
dtypes, or an adjoint running on raw arrays: one way from the call to a result and,
when needed, a recorded ``Node``::

    bind(op, *args, **attrs)             the contract (docstring below)
      lane(op)(x[, y], attrs=attrs)      one or two operands, CPU, one dtype, fast mode
      _raw(op, args, attrs)              an adjoint on raw ndarrays: the kernel alone
      _general(op, args, attrs)          everything else: unwrap, devices, promotion
        _compute(op, arrays, attrs)      infer first, workspace / allocator, the kernel
        _record(...)                     the node for any call
    both nodes come from tape.make_node, the one node builder

An op's lane is also its Tensor operator method (``Tensor.__mul__ is lane(MUL)``,
installed by ``ops/methods.py``): the same function ``bind`` calls, one Python frame
less, which is most of what an op on a small tensor costs. A lane handles only the
common case and hands anything else to ``_general`` unchanged.

Kernel errors are explained by the op's shape rule (``_explain``). Tracing
(``@tg.fuse``) and ``tg.profile`` observe op calls through ``observe``: while an
observer is active this thread takes the general path, and the observer wraps each
kernel (and the walker each adjoint); nothing is swapped process-wide.
"""
import contextlib
import copy
import os
import traceback
import weakref

import numpy as np

from . import devices as _devices, dtypes as _dt, tape as _tape, walker as _walker
from ._util import fmt_spec, loud_numpy as _loud_numpy, quiet_numpy as _quiet_numpy
from .devices.cpu_kernels import halfwidth as _halfwidth
from .ops_registry.opdef import OpDef, TensorSpec, validate
from .tape import (
    FAST_RECORD as _FAST_RECORD,
    INFERENCE as _INFERENCE,
    INFERENCE_SEEN as _INFERENCE_SEEN,
    PACKED as _PACKED,
    RAW as _RAW,
    Node as _Node,
    Packed as _Packed,
    check_saved_inference as _check_saved_inference,
    make_node as _make_node,
    next_seq as _next_seq,
    state as _state,
)
from .tensor import (
    Tensor,
    last_write as _last_write,
    mark_written as _mark_written,
    subclasses as _TT,
    wrap,
)

__all__ = ["bind", "lane", "apply_inplace", "observe", "raw_arrays", "register_foreign",
           "foreign_constant", "autocast_call"]

_SCALARS = (int, float, bool)
_NDARRAY = np.ndarray
_F16, _F32 = _dt.F16, _dt.F32  # (bfloat16's is read as _dt.BF16: see dtypes)
_isf = _dt.is_float
_new = object.__new__
_NO = object()  # a lane's second operand when there is none
_NO_ATTRS = {}  # the attrs of an operator call (never mutated)
_KERNEL_ERRORS = (ValueError, TypeError, IndexError, RuntimeError, ZeroDivisionError,
                  OverflowError, np.linalg.LinAlgError, AttributeError, MemoryError)


def bind(op, *args, **attrs):
    """Run ``op`` on Tensors (or raw arrays, or scalars) and record it when needed.

    Unwraps Tensors, checks devices, promotes dtypes per ``op.promote``, validates
    the call with ``op.infer`` (every op but the elementwise ones, whose kernels
    check broadcasting themselves), runs the kernel with a workspace or allocator
    for those kinds, and wraps the outputs. When grad mode is on and an input
    requires grad (or is watched by an active ``Tape``) it records one ``Node`` that
    saves what ``op.saves`` says the gradients of those inputs read, stamped with
    their versions. With no Tensor among
    the arguments the kernel's raw result is returned: that is how adjoints run on
    plain arrays when nothing records. A failure raises the op's own error.
    """
    if op.fast and 0 < len(args) <= 2:
        tx = type(args[0])
        if tx in _TT:
            return lane(op)(*args, attrs=attrs)
        if tx is _NDARRAY:
            return _raw(op, args, attrs)
    if _foreign and args and op.composite is None and not _state._vmap:
        fn = _foreign.get(type(args[0]))
        if fn is not None:  # an exported adjoint's bind on another framework's arrays
            return fn(op, args, attrs)
    return _general(op, args, attrs)


def _raw(op, args, attrs):
    """An adjoint on raw arrays (the walker's, nothing records): float ndarrays of one
    dtype, or one and a Python number, go straight to the kernel (after the shape
    rule, for all but elementwise ops); anything else to _general."""
    x = args[0]
    y = args[1] if len(args) == 2 else None
    if _state.mode == _RAW and x.dtype.kind == "f" and x.dtype is not _F16 and (
            y is None or (type(y) is _NDARRAY and y.dtype is x.dtype)
            or type(y) is float or type(y) is int):
        if not op.elementwise:
            _infer(op, args, attrs)
        token = _quiet_numpy()
        try:
            out = op.kernel(*args, **attrs)
        except _KERNEL_ERRORS as e:
            raise _explain(op, args, attrs, e) from None
        finally:
            _loud_numpy(token)
        return out if type(out) is _NDARRAY else _asarray(out)
    return _general(op, args, attrs)


_lanes = {}


def lane(op):
    """The lane of ``op`` (one or two inputs, one output, no workspace): the function
    ``bind`` calls for it and the one installed as its Tensor operator method
    (``Tensor.__mul__`` is ``lane(MUL)``), so every spelling of a call takes one
    path. It handles the common case itself (CPU Tensors of one dtype, or a float
    Tensor and a Python number, in fast mode) and hands anything else to
    ``_general`` unchanged. Lanes are made once per op and kept (``_lanes``)."""
    fn = _lanes.get(op)
    if fn is None:
        if not op.fast:
            raise ValueError(f"lane: {op.name} takes more than two inputs or a workspace")
        fn = _lanes[op] = _make_lane(op)
    return fn


def _make_lane(op):
    float_only = op.promote == "float"
    # half-width inputs take the general path (_widened), but for a kernel that takes them
    widen = op.kind != "view" and not op.halfwidth
    elementwise = op.elementwise
    check = not elementwise
    view = op.kind == "view"
    # what the node keeps, by which inputs require grad: [rx + 2 * ry] ->
    # (save x, save y, save out); a one-input op that records needs its own gradient
    keep = []
    for ry_ in (False, True):
        for rx_ in (False, True):
            idx, o = op.saved_for((rx_ or len(op.args) == 1, ry_))
            keep.append((0 in idx, 1 in idx, o))
    save_x1, _, save_out1 = keep[1]
    # a per-input declaration's vjp unpacks its inputs even when none is kept
    none1, none2 = ((None,), (None, None)) if op.save_for is not None else (None, None)
    recorded = op.differentiable
    # an op that tg.autocast casts for on the CPU goes to the general path while a
    # region is open; any other op runs here whether one is open or not
    policy = op.autocast.get("cpu") if type(op.autocast) is dict else op.autocast
    casts = policy is not None

    def run(x, y=_NO, attrs=_NO_ATTRS):  # x: a Tensor (the method's self, or bind checked)
        mode = _state.mode
        xd = x._data
        dt = xd.dtype
        if not mode or type(xd) is not _NDARRAY or (float_only and dt.kind != "f") or (
                widen and (dt is _F16 or dt is _dt.BF16)) or (casts and _state._autocast):
            return _general(op, (x,) if y is _NO else (x, y), attrs)
        if y is _NO:
            yd = ry = None
        elif type(y) in _TT:
            yd = y._data
            if type(yd) is not _NDARRAY or yd.dtype is not dt:
                return _general(op, (x, y), attrs)
            ry = y._requires_grad
        elif (type(y) is float or type(y) is int) and dt.kind == "f":
            yd = y  # a weak scalar
            ry = None
        else:
            return _general(op, (x, y), attrs)
        if check:
            _infer(op, (xd,) if yd is None else (xd, yd), attrs)
        token = _quiet_numpy()
        try:
            if attrs:
                out = op.kernel(xd, **attrs) if yd is None else op.kernel(xd, yd, **attrs)
            else:
                out = op.kernel(xd) if yd is None else op.kernel(xd, yd)
        except _KERNEL_ERRORS as e:
            raise _explain(op, (xd,) if yd is None else (xd, yd), attrs, e) from None
        finally:
            _loud_numpy(token)
        if type(out) is not _NDARRAY:
            out = _asarray(out)
        res = _new(Tensor)  # wrap(out), inline
        res._data = out
        res._grad = None
        res._idx = 0
        res._vc = [0]
        if view:
            _make_view(res, x, op, attrs)
        rx = x._requires_grad
        # (an input that requires grad is a float; an elementwise op of floats gives one)
        if not (rx or ry) or mode != _FAST_RECORD or not recorded or (
                not elementwise and not _isf(out.dtype)):
            res._node = None
            res._requires_grad = False
            if mode == _INFERENCE:  # (inside inference_mode)
                res._inference = True
            return res
        # the Node: tape.make_node with _node_general's rules, unrolled for one or two
        # inputs (tests/core/test_dispatch.py compares the two)
        node = _Node()
        node.op = op
        node.attrs = attrs
        xn = x._node
        ex = (x if xn is None else (xn, x._idx)) if rx else None
        xs = xd.shape
        if yd is None:
            node.edges = (ex,)
            node.shapes = (xs,)
            node.dtypes = (dt,)
            node.needs_input_grad = (rx,)
            node.same = elementwise
            save_out = save_out1
            if save_x1:
                node.saved = (x,)
                node.versions = (x._vc[0],)
                node.inputs = (xd,)
            else:
                node.saved = node.versions = None
                node.inputs = none1
        else:
            if ry:
                yn = y._node
                node.edges = (ex, y if yn is None else (yn, y._idx))
                node.needs_input_grad = (rx, True)
                save_x, save_y, save_out = keep[3 if rx else 2]
            else:
                node.edges = (ex, None)
                node.needs_input_grad = (rx, False)
                save_x, save_y, save_out = keep[1]
            if yd is y:  # a weak scalar
                node.shapes = (xs, None)
                node.dtypes = (dt, None)
                node.same = elementwise
            else:
                ys = yd.shape
                node.shapes = (xs, ys)
                node.dtypes = (dt, dt)
                node.same = elementwise and xs == ys
            if save_x or save_y:
                node.saved = (x if save_x else None, y if save_y else None)
                node.versions = (x._vc[0] if save_x else None,
                                 y._vc[0] if save_y and yd is not y else None)
                node.inputs = (xd if save_x else None, yd if save_y else None)
            else:
                node.saved = node.versions = None
                node.inputs = none2
        if _INFERENCE_SEEN[0] and node.saved is not None:
            _check_saved_inference(op, node.saved)
        node.seq = _next_seq()
        if save_out:
            node.out = out
            node.out_version = (res._vc, 0)
        else:
            node.out = node.out_version = None
        node.write = _last_write[0]
        node.hooks = node.retain = None
        res._node = node
        res._requires_grad = True
        return res
    run.__name__ = op.name
    run.__qualname__ = f"lane({op.name})"
    return run


# ------------------------------------------------------------------ everything else
def _general(op, args, attrs):
    if op.autocast is not None and _state.autocast is not None:
        args = _autocast(op, args, attrs)
        if op.composite is not None:
            return _autocast_off(op.composite, args, attrs)
    if op.composite is not None:  # a public function made of other ops: it records them
        try:
            _unwrap(op, args)  # the arguments' checks (None, complex, types), in the op's terms
        except _Foreign:
            pass  # another framework's arrays: the composite's own ops hand them over
        return op.composite(*args, **attrs)
    if _state._vmap:
        for a in args:
            if type(a) in _TT and a._vlevel is not None:
                return _batched(op, args, attrs)
        if attrs and _batched_in(attrs.values()):  # x[batched_index]
            return _batched(op, args, attrs)
    try:
        tensor_seen, rg, arrays = _unwrap(op, args)
    except _Foreign as f:  # another framework's arrays (an exported adjoint's bind)
        return f.args[0](op, args, attrs)
    if op.promote != "none" and tensor_seen is not None:
        if op.elementwise and _mixed(arrays):  # the op's dtype rule sees what it was given
            _infer(op, arrays, attrs)
        arrays = _promote(op, arrays)
    if tensor_seen is False and not _state.raw:
        raise TypeError(f"{op.name}: expected Tensor arguments, got only raw arrays "
                        f"({', '.join(type(a).__name__ for a in arrays if a is not None)}); "
                        f"wrap them with tg.tensor() or tg.from_numpy(), or call "
                        f"tapegrad.ops_registry.get({op.name!r}).compute(...) on raw arrays")
    if op.kind != "view" and not op.halfwidth and _low_in(arrays):
        out = _widened(op, args, arrays, attrs)
    elif _state._observers:  # (tg.compile's capture asks which tensors held the arrays)
        out = _observed_compute(op, args, arrays, attrs)
    else:
        out = _compute(op, arrays, attrs)
    if not tensor_seen:
        if type(out) is tuple:
            return tuple(_asarray(o) for o in out)
        return out if type(out) is _NDARRAY else _asarray(out)
    if op.nout == 1:
        outs = (wrap(out if type(out) is _NDARRAY else _asarray(out)),)
        if op.kind == "view":
            _make_view(outs[0], args[0], op, attrs)
    else:
        outs = tuple(wrap(o if type(o) is _NDARRAY else _asarray(o)) for o in out)
    return _finish(op, attrs, args, outs, rg)


_AUTOCAST_OPS = {}


def _autocast(op, args, attrs):
    """Inside ``tg.autocast``: the op's floating Tensor arguments on an autocast
    device cast per its ``autocast`` policy for that device (PyTorch's rules: float64
    tensors stay as they are; ``"lower"`` casts of leaf tensors that require grad, the
    weights, are made once per region and reused). The casts are ``cast`` op calls,
    so they record (gradients reach each weight in its own dtype) and tg.compile
    captures them."""
    fn = _autocast_fn(op, args, attrs)
    return args if fn is None else tuple(fn(a) for a in args)


def _autocast_off(fn, args, kwargs):
    """``fn`` run with autocast off: the ops a composite is made of run in the dtypes
    its policy gave its inputs (PyTorch excludes autocast below an op it cast for)."""
    on = _state.autocast
    _state.autocast = None
    try:
        return fn(*args, **kwargs)
    finally:
        _state.autocast = on


def autocast_call(op, fn, args, kwargs):
    """A composite's public function ``fn`` (``cross_entropy``) called inside
    tg.autocast: its Tensors among ``args``, ``kwargs`` and lists of them cast per
    the op's policy, then ``fn`` run with autocast off (``_autocast_off``), as
    ``_general`` runs it: an op with a policy on another device only (``mv``, CUDA's
    list) runs its ops as given here, not cast one by one."""
    if op.autocast is None or _state.autocast is None:
        return fn(*args, **kwargs)
    flat = [a for a in args if type(a) in _TT]
    flat += [v for v in kwargs.values() if type(v) in _TT]
    for a in list(args) + list(kwargs.values()):
        if type(a) is list or type(a) is tuple:
            flat += [e for e in a if type(e) in _TT]
    cast = _autocast_fn(op, flat, kwargs)
    if cast is None:
        return _autocast_off(fn, args, kwargs)

    def each(a):
        if type(a) is list or type(a) is tuple:
            return type(a)(cast(e) for e in a)
        return cast(a)
    return _autocast_off(fn, tuple(each(a) for a in args), {k: each(v) for k, v in kwargs.items()})


def _autocast_unsafe(op, dev):
    from .ops_registry import list_ops
    safe = op.name + "_with_logits"
    names = {getattr(o, "name", o) for o in list_ops()}
    raise RuntimeError(
        f"{op.name} is unsafe to autocast on {dev!r}, as in PyTorch: call it outside the "
        f"autocast region (or in one with enabled=False) on float32 inputs"
        + (f"; {safe}, which takes the logits before the sigmoid, is safe to autocast"
           if safe in names else ""))


def _as_given(a):
    return a


def _autocast_fn(op, args, attrs):
    """The function casting one argument for this call, or None when nothing casts."""
    dev = None
    for a in args:
        if type(a) in _TT:
            dev = _devices.device_of(a._data).type
            break
    low = _state.autocast.get(dev) if dev is not None else None
    if low is None:
        return None
    policy = op.autocast
    if type(policy) is dict:
        policy = policy.get(dev)
    if policy is None:
        return None
    if policy == "unsafe":
        _autocast_unsafe(op, dev)
    if policy == "keep" or (op.autocast_when is not None and
                            not op.autocast_when(dev, args, attrs)):
        return _as_given  # the call does not reach the listed op: it runs as given

    def eligible(a):
        return (type(a) in _TT and _isf(a._data.dtype) and a._data.dtype != np.float64
                and _devices.device_of(a._data).type == dev)
    if policy == "lower":
        target = low
    elif policy == "promote":
        found = [a._data.dtype for a in args if eligible(a)]
        if not found:
            return None
        target = _dt.result_type(*found)
    elif policy == "fp32_unless_dtype" and attrs.get("dtype") is not None:
        return None
    else:
        target = _F32
    cast = _cast_op()
    cache = _state.autocast_cache if (policy == "lower" and _state.autocast_cache_enabled) \
        else None

    def fn(a):
        if not eligible(a) or a._data.dtype == target:
            # a Tensor of another layout (sparse COO) casts its own values
            own = getattr(a, "_autocast_to", None) if type(a) not in _TT else None
            return a if own is None else own(target, dev)
        if cache is not None and a._requires_grad and a._node is None:
            hit = cache.get(id(a))
            if hit is not None and hit[0] is a and hit[1]._data.dtype == target:
                return hit[1]
            out = bind(cast, a, dtype=target)
            if out._node is not None:  # (a cast made under no_grad has no history:
                cache[id(a)] = (a, out)  # a later use with grad on casts again)
            return out
        return bind(cast, a, dtype=target)
    return fn


def _finish(op, attrs, args, outs, rg):
    """The outputs of any call (computed, or batched by vmap): recorded when an input
    requires grad or a Tape watches one, checked in anomaly mode, given tangents in
    forward mode."""
    st = _state
    # inside inference_mode nothing records, grad mode on (enable_grad) or not
    grad = st._grad and not st._inference
    record = rg and grad and op.differentiable
    tapes = st._tapes
    if tapes and not record and op.differentiable and grad:
        record = any(type(a) in _TT and a._tapes for a in args)
    if record and any(_isf(o._data.dtype) for o in outs):
        _record(op, attrs, args, outs, rg, tapes)
    elif st._anomaly:
        _check_forward(op, outs)
    if st._dual and op.differentiable:
        _forward(op, attrs, args, outs)
    if st._inference:
        for o in outs:
            o._inference = True
    return outs[0] if op.nout == 1 else outs


_foreign = {}  # array type -> fn(op, args, attrs) (register_foreign)


class _Foreign(Exception):
    pass


_foreign_constants = {}  # array type -> fn(ref, make)


def register_foreign(array_type, fn, constant=None):
    """Hand ``bind`` calls on ``array_type`` (another framework's arrays) to
    ``fn(op, args, attrs)``: ``tapegrad.interop`` runs registry adjoints on
    torch.Tensors, and an adjoint that binds an op directly reaches the export so.
    ``constant(ref, make)`` gives ``make(numpy, dtype)`` as a constant array of the
    framework (``foreign_constant``)."""
    _foreign[array_type] = fn
    if constant is not None:
        _foreign_constants[array_type] = constant


def foreign_constant(ref, make):
    """``make(xp, dtype)`` (a constant array) in the framework of ``ref``, another
    framework's array (an adjoint run by ``tapegrad.interop``); None for anything else."""
    fn = _foreign_fn(ref, _foreign_constants) if _foreign_constants else None
    return None if fn is None else fn(ref, make)


def _batched(op, args, attrs):
    """A call with a batched tensor (inside ``vmap``): the batching hook computes the
    batch; the call is recorded and forward-differentiated as any call, in an
    example's terms (a gradient taken inside vmap runs its adjoints on batched
    tensors)."""
    outs = _state.batching(op, args, attrs)
    return _finish(op, attrs, args, outs, any(type(a) in _TT and a._requires_grad for a in args))


def _batched_in(values):
    """Whether a batched tensor hides in attribute values (an index tuple)."""
    for v in values:
        if type(v) in _TT:
            if v._vlevel is not None:
                return True
        elif type(v) is tuple or type(v) is list:
            if _batched_in(v):
                return True
    return False


def _saved_out(t):
    """An output as its node saves it: the array, or for a batched output (vmap) a
    copy without history (the batch, not the example's stand-in; no cycle)."""
    if t._vlevel is None:
        return t._data
    c = copy.copy(t)
    c._node, c._requires_grad, c._grad = None, False, None
    return c


def _foreign_fn(a, table):
    """The entry of ``table`` for ``a``'s type or a base of it (jax.Array: tracers)."""
    fn = table.get(type(a))
    if fn is None:
        for tp, f in table.items():
            if isinstance(a, tp):
                return f
    return fn


def _unwrap(op, args):
    """(whether a Tensor was seen (None: no array at all), whether one requires grad,
    the arrays and scalars), after the mixed-device check."""
    arrays = []
    tensor_seen = None
    rg = False
    devs = set()
    generics = []
    for a in args:
        tp = type(a)
        if tp in _TT:
            d = a._data
            tensor_seen = True
            rg = rg or a._requires_grad
        elif tp in _SCALARS:
            arrays.append(a)
            continue
        elif a is None:
            if _arg_name(op, len(arrays)) not in op.optional:
                raise TypeError(f"{op.name}: argument '{_arg_name(op, len(arrays))}' must be "
                                f"a Tensor, not None")
            arrays.append(a)
            continue
        elif isinstance(a, np.generic):
            # a NumPy scalar (0-d arithmetic in a raw adjoint): a 0-d array on the raw
            # path, a weak Python scalar next to Tensors
            generics.append(len(arrays))
            d = np.asarray(a)
        elif isinstance(a, _NDARRAY) or tp.__module__.startswith("cupy"):
            d = a  # a raw array (also the @fuse tracer's stand-ins, an ndarray subclass)
        elif hasattr(tp, "__tg_scalar__"):  # a number read from a tensor during a capture
            arrays.append(a.__tg_scalar__())
            continue
        else:
            fn = _foreign_fn(a, _foreign) or getattr(tp, "_layout_bind", None)
            if fn is not None:  # (a sparse tensor: its layout's own dispatch)
                raise _Foreign(fn)
            raise TypeError(f"{op.name}: argument '{_arg_name(op, len(arrays))}' must be a "
                            f"Tensor or a number, not {tp.__name__}")
        if d.dtype.kind == "c":
            raise TypeError(f"{op.name}: argument '{_arg_name(op, len(arrays))}' is complex "
                            f"({d.dtype}); tapegrad computes on real dtypes only")
        if tensor_seen is None:
            tensor_seen = False
        devs.add(type(d))
        arrays.append(d)
    if generics and tensor_seen:
        for i in generics:
            arrays[i] = arrays[i].item()
        devs = {type(a) for a in arrays if a is not None and type(a) not in _SCALARS}
    if len(devs) > 1:
        _devices.check_same(op.name, [_devices.device_of(a) for a in arrays
                                      if a is not None and type(a) not in _SCALARS])
    return tensor_seen, rg, arrays


def _arg_name(op, i):
    return op.args[i] if i < len(op.args) else op.args[-1] if op.args else f"#{i}"


def _mixed(arrays):
    """Whether promotion will cast: the array operands have more than one dtype, or a
    bool array meets another operand (a Python number too)."""
    first = None
    for a in arrays:
        if a is not None and type(a) not in _SCALARS:
            if first is None:
                first = a.dtype
            elif a.dtype != first:
                return True
    return first is not None and first.kind == "b" and len(arrays) > 1


def _promote(op, arrays):
    """The arrays cast to one dtype, PyTorch's rules: dimensioned arrays decide;
    a 0-d array only when its kind (bool < int < float) is higher, and then with its
    own dtype; Python scalars are weak. Ints become the default float for
    ``promote="float"`` ops."""
    dts = []
    zero_dim = []
    scalars = []
    for a in arrays:
        if a is None:
            continue
        if type(a) in _SCALARS:
            scalars.append(a)
        elif a.ndim == 0:
            zero_dim.append(a.dtype)
        else:
            dts.append(a.dtype)
    if not dts and not zero_dim:
        return arrays
    target = (dts or zero_dim)[0]
    if any(d != target for d in dts) or scalars or zero_dim:
        target = _dt.operands_type(dts, zero_dim, scalars)
    if op.promote == "float" and not _isf(target):
        target = _dt.default_float_np()
    cast = _observed_cast if _state._observers else _cast  # (tg.compile's capture: the
    if (target is _dt.BF16 or target is _F16) and zero_dim:  # casts are steps of it)
        return _promote_half(op, arrays, target, cast)
    return [cast(a, target) if a is not None and type(a) not in _SCALARS
            and a.dtype != target else a for a in arrays]


# A bfloat16 or float16 operand with a scalar (a Python number or a 0-d tensor), as
# PyTorch's CPU kernels: these ops round the scalar to the half-width dtype first
# (float16(0.1) == 0.1, float16(0.1) - 0.1 == 0); mul, div and floor_divide take it
# at float32 (float16 values times a float32 0-d tensor of 1e5: no inf from the
# factor alone), the product computed in float32 and rounded once
_SCALAR_ROUNDED = frozenset(("add", "sub", "eq", "ne", "lt", "le", "gt", "ge", "fmod",
                             "remainder", "pow"))
_SCALAR_WIDE = frozenset(("mul", "div", "floor_divide"))


def _promote_half(op, arrays, target, cast):
    wide = op.name in _SCALAR_WIDE
    out = []
    for a in arrays:
        if a is None or type(a) in _SCALARS or a.dtype == target:
            out.append(a)
        elif wide and a.ndim == 0 and _isf(a.dtype) and a.dtype.itemsize >= 4:
            out.append(cast(a, _F32))   # (a float32 or float64 0-d operand: at float32)
        else:
            out.append(cast(a, target))
    return out


def _round_scalars(op, arrays, low):
    """The Python numbers among ``arrays`` rounded to ``low`` for the ops that do so
    (``_SCALAR_ROUNDED``)."""
    if op.name not in _SCALAR_ROUNDED:
        return arrays
    out = list(arrays)
    for i, a in enumerate(arrays):
        if type(a) in (float, int) and type(a) is not bool:
            token = _quiet_numpy()
            try:
                out[i] = float(np.asarray(float(a), np.float32).astype(low))
            finally:
                _loud_numpy(token)
    return out


def _low_in(arrays):
    for a in arrays:
        if a is not None and type(a) not in _SCALARS and (a.dtype is _dt.BF16 or a.dtype is _F16):
            return True
    return False


def _observed_compute(op, args, arrays, attrs):
    _state.observed_args = args
    try:
        return _compute(op, arrays, attrs)
    finally:
        _state.observed_args = ()


# fusion's half-width run of an elementwise op's expression: fn(op, arrays) -> the
# result, or None where it does not apply (set by tapegrad.fusion, a layer above)
halfwidth_elementwise = [None]


def _widened(op, args, arrays, attrs):
    """A call with bfloat16 or float16 operands: the kernel runs on float32 copies of
    them and each float32 output is rounded once to the operands' half-width dtype
    (PyTorch's CPU kernels compute these dtypes in float32 the same way), so every
    kernel serves them and reductions accumulate in float32. An output the op was
    asked for in a dtype (``dtype=``) keeps it. Operands of two different float
    dtypes reach here only for ops that refuse mixed dtypes (``promote="none"``):
    their shape rule sees the original ones and speaks. An elementwise op whose
    expression fusion can run on the half-width elements directly, with the same
    float32 arithmetic and one rounding (``halfwidth_elementwise``), runs so: no
    float32 copies."""
    low = None
    for a in arrays:
        if a is not None and type(a) not in _SCALARS and _isf(a.dtype) and not (
                a.ndim == 0 and a.dtype is _F32 and op.name in _SCALAR_WIDE):
            if low is None:
                low = a.dtype
            elif a.dtype != low:
                return _compute(op, arrays, attrs)
    if low is None:
        return _compute(op, arrays, attrs)
    arrays = _round_scalars(op, arrays, low)
    if op.elementwise and not attrs and not _state._observers:
        run = halfwidth_elementwise[0]
        out = run(op, arrays) if run is not None else None
        if out is not None:
            return out
    if _state._observers:  # tg.compile's capture: the casts are steps of the program
        cast = _cast_op()
        wide = [_observed_compute(cast, (a,), (a,), {"dtype": _F32})
                if a is not None and type(a) not in _SCALARS and a.dtype is low else a
                for a in arrays]
        out = _observed_compute(op, args, wide, attrs)

        def round_(o):
            return _observed_compute(cast, (), (o,), {"dtype": low})
    else:
        wide = [_cast(a, _F32) if a is not None and type(a) not in _SCALARS and a.dtype is low
                else a for a in arrays]
        out = _compute(op, wide, attrs)

        def round_(o):  # (an overflow to inf is silent, as the ops are)
            token = _quiet_numpy()
            try:
                return _halfwidth.from_float32(o, low) if type(o) is _NDARRAY else \
                    o.astype(low)
            finally:
                _loud_numpy(token)
    if attrs.get("dtype") is not None:
        return out
    if type(out) is tuple:
        return tuple(round_(o) if getattr(o, "dtype", None) is _F32 else o for o in out)
    return round_(out) if getattr(out, "dtype", None) is _F32 else out


def _cast_op():
    if not _AUTOCAST_OPS:
        from .ops_registry import get
        _AUTOCAST_OPS["cast"] = get("cast")
    return _AUTOCAST_OPS["cast"]


def _observed_cast(a, dtype):
    return _observed_compute(_cast_op(), (a,), (a,), {"dtype": dtype})


_walker.observed_cast[0] = _observed_cast


def _cast(a, dtype):
    """``a`` as ``dtype``; a broadcast view (zero strides) casts only its distinct
    memory and is broadcast again, so a huge view stays free."""
    if 0 in a.strides and a.size > 1:
        compact = a[tuple(slice(0, 1) if s == 0 else slice(None) for s in a.strides)]
        return _devices.xp_of(a).broadcast_to(compact.astype(dtype), a.shape)
    if type(a) is _NDARRAY and dtype is _F32 and (a.dtype is _dt.BF16 or a.dtype is _F16):
        return _halfwidth.to_float32(a)  # (NumPy widens float16 one element at a time)
    return a.astype(dtype)


def _compute(op, arrays, attrs):
    """Run ``op``'s kernel: infer first (all but elementwise ops), then a workspace or
    an allocator for those kinds; a kernel failure becomes the op's own error."""
    if not op.elementwise:
        _infer(op, arrays, attrs)
    kw = attrs
    if op.kind == "workspace":
        nbytes = op.workspace(*_specs(arrays), **attrs)
        kw = dict(attrs, workspace=_workspace(arrays, nbytes))
    elif op.kind == "dynamic":
        xp = _devices.xp_of(next((a for a in arrays if a is not None and type(a) not in _SCALARS),
                                 0))
        kw = dict(attrs, alloc=lambda shape, dtype: xp.empty(shape, dtype=dtype))
    token = _quiet_numpy()
    try:
        if _state.observers:
            return _observed(op, arrays, kw)
        return op.kernel(*arrays, **kw)
    except _KERNEL_ERRORS as e:
        raise _explain(op, arrays, attrs, e) from None
    finally:
        _loud_numpy(token)


def _specs(arrays):
    return [a if a is None or type(a) in _SCALARS else TensorSpec(tuple(a.shape), a.dtype)
            for a in arrays]


def _frozen(attrs):
    """``attrs`` as a hashable key: slices and nested tuples spelled out (an array in
    them stays unhashable: such calls are checked every time)."""
    return tuple((k, _freeze(v)) for k, v in attrs.items())


def _freeze(v):
    if type(v) is slice:
        return (slice, v.start, v.stop, v.step)
    if type(v) is tuple or type(v) is list:
        return (type(v),) + tuple(_freeze(x) for x in v)
    return v


_VALID_MAX = 4096
_valid = {}  # (op, input specs and scalars, attrs) of calls whose shape rule passed


def _infer(op, arrays, attrs):
    """The op's shape rule on the actual arguments: its clear error, before the kernel.

    A shape rule is a pure function of the specs and attrs, and running one costs
    more than a small op's kernel, so the calls it accepted are remembered (a
    bounded memo; calls with unhashable attrs are checked every time)."""
    if not op.infer_first:
        return
    if attrs:
        key = tuple(attrs.items())  # hashable as they are (most calls), else spelled out
        try:
            hash(key)
        except TypeError:
            key = _frozen(attrs)
        key = [op, key]
    else:
        key = [op, ()]
    for a in arrays:
        key.append(a if a is None or type(a) in _SCALARS else a.shape)
        key.append(type(a) if a is None or type(a) in _SCALARS else a.dtype)  # True != 1
    key = tuple(key)
    try:
        if key in _valid:
            return
    except TypeError:  # an unhashable attr (a list)
        key = None
    try:
        spec = op.infer(*_specs(arrays), **attrs)
    except (ValueError, TypeError, IndexError, RuntimeError) as e:
        raise e.with_traceback(None) from None
    if op.kind != "view":  # a view allocates nothing (a huge broadcast is fine)
        for s in (spec if type(spec) is tuple else (spec,)):
            if isinstance(s, TensorSpec) and s.shape is not None and None not in s.shape \
                    and arrays and type(arrays[0]) is _NDARRAY:
                _devices.check_alloc(op.name, s.shape, s.dtype)  # before the kernel allocates
    if key is not None:
        if len(_valid) >= _VALID_MAX:
            _valid.clear()
        _valid[key] = True


def _explain(op, arrays, attrs, err):
    """Turn a kernel failure into the op's own error.

    The shape rule speaks first (shapes, dtypes, dims); when it finds nothing wrong,
    a kernel error that already names the op (data-dependent: index values, a
    singular matrix) is kept; anything else becomes a RuntimeError naming the op.
    """
    if isinstance(err, MemoryError):  # a result too large (huge broadcasts, indices)
        return RuntimeError(f"{op.name}: not enough memory for the result: {err}")
    try:
        op.infer(*_specs(arrays), **attrs)
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


_ws_cache = {}


def _workspace(arrays, nbytes):
    """Scratch for workspace ops: one growing buffer per device and thread, reused."""
    first = next(a for a in arrays if a is not None and type(a) not in _SCALARS)
    key = (_devices.device_of(first), id(_state))
    buf = _ws_cache.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = _ws_cache[key] = _devices.xp_of(first).empty(max(int(nbytes), 1), dtype=np.uint8)
    return buf[:int(nbytes)]


def _asarray(o):
    if isinstance(o, (np.generic, int, float, bool)):
        return np.asarray(o)
    return o


def _make_view(res, base, op, attrs):
    """A view op's output shares its base's buffer, version counter and base, and
    remembers the view ops that derive it from that base (for in-place ops on it)."""
    if type(base) in _TT and (res._data is base._data or res._data.base is not None and
                              _devices.owner(res._data) is _devices.owner(base._data)):
        res._vc = base._vc
        if base._inference:  # (a view of an inference tensor is one, as PyTorch's)
            res._inference = True
        if base._base is not None:
            root = res._base = base._base
            res._view_ops = base._view_ops + ((op, attrs),)
        else:
            root = res._base = base
            res._view_ops = ((op, attrs),)
        if root._requires_grad or _state._grad:  # live views: new history after in-place
            if root._views is None:
                root._views = weakref.WeakSet()
            root._views.add(res)


# ------------------------------------------------------------------ forward mode
class _JvpCtx:
    """A forward-mode rule's context: ``inputs`` (the call's arguments, Tensors and
    numbers, with their tangents of other levels), ``out`` (the output, or a tuple),
    ``attrs``, ``shapes``/``dtypes`` of the inputs, ``m`` (the ops namespace). It also
    serves a vjp (``needs_input_grad``), which is how elementwise rules derive."""
    __slots__ = ("op", "inputs", "out", "attrs", "shapes", "dtypes", "needs_input_grad", "m")


def _forward(op, attrs, args, outs):
    """Forward mode: for each open dual level an input has a tangent at, the outputs'
    tangents from ``op.jvp``, run with that level closed (its own ops then see plain
    primals there) and the others open (so tangents of tangents propagate: nested
    levels, and gradients of tangents record as any op does)."""
    st = _state
    levels = st._dual
    for level in levels:
        tangents = []
        seen = False
        for a in args:
            fw = a._fw if type(a) in _TT else None
            t = fw.get(level) if fw else None
            seen = seen or t is not None
            tangents.append(t)
        if not seen:
            continue
        if op.jvp is None:
            raise RuntimeError(f"{op.name}: no forward-mode rule (jvp) is declared for "
                               f"this op, so its forward-mode derivative is unavailable")
        ctx = _JvpCtx()
        ctx.op = op
        ctx.inputs = args
        ctx.out = outs[0] if op.nout == 1 else outs
        ctx.attrs = attrs
        ctx.shapes = tuple(a.shape if hasattr(a, "shape") else None for a in args)
        ctx.dtypes = tuple(a._data.dtype if type(a) in _TT else None for a in args)
        ctx.needs_input_grad = tuple(t is not None for t in tangents)
        ctx.m = _Node.m
        st.dual = tuple(lv for lv in levels if lv != level)
        try:
            res = op.jvp(ctx, *tangents)
            if type(res) is not tuple:
                res = (res,)
            res = [_fit_tangent(op, r, o) for r, o in zip(res, outs)]
        finally:
            st.dual = levels
        for r, o in zip(res, outs):
            if r is not None:
                if o._fw is None:
                    o._fw = {}
                o._fw[level] = r
    node = outs[0]._node
    if node is not None and node.out is not None and any(o._fw for o in outs):
        node.out_fw = tuple(o._fw for o in outs)


_FIT_OPS = {}


def _fit_tangent(op, t, o):
    """A rule's tangent as the output's: broadcast to its shape, cast to its dtype
    (None, a zero tangent, stays None; an output that is not a float has none)."""
    if t is None or not _isf(o._data.dtype):
        return None
    if type(t) not in _TT:
        t = wrap(_devices.xp_of(o._data).asarray(t, dtype=o._data.dtype))
    if not _FIT_OPS:
        from .ops_registry import get
        _FIT_OPS.update(broadcast_to=get("broadcast_to"), cast=get("cast"))
    if t._data.dtype != o._data.dtype:
        t = bind(_FIT_OPS["cast"], t, dtype=o._data.dtype)
    if t._data.shape != o._data.shape:
        try:
            t = bind(_FIT_OPS["broadcast_to"], t, shape=tuple(o._data.shape))
        except (ValueError, RuntimeError) as e:
            raise RuntimeError(f"{op.name}: its forward-mode rule gave a tangent of shape "
                               f"{tuple(t.shape)} for an output of shape {tuple(o.shape)}") from e
    return t


# ------------------------------------------------------------------ recording
def _record(op, attrs, args, outs, rg, tapes):
    """The general path's recording: one Node for ``op(*args)``, whose float outputs
    ``outs`` become its results. ``rg``: an input requires grad (a recording for a
    Tape alone leaves the outputs' flag False)."""
    node = _node_general(op, attrs, args, outs, rg, tapes)
    k = 0
    for o in outs:
        if _isf(o._data.dtype):
            o._node = node
            o._idx = k
            o._requires_grad = rg
            if tapes:
                o._tapes = node.tapes
        k += 1
    if _state._anomaly:
        node.where = _user_frame()
        _check_forward(op, outs, node.where)


def _node_general(op, attrs, args, outs, rg, tapes):
    """A Node for any call: an edge for each Tensor input that requires grad or that
    an active Tape watches; what ``op.saves`` says their gradients read saved with
    its versions."""
    edges = []
    needs = []
    shapes = []
    dtypes = []
    for a in args:
        if type(a) in _TT:
            d = a._data
            shapes.append(d.shape)
            dtypes.append(d.dtype)
            if a._requires_grad or (tapes and a._tapes):
                node = a._node
                edges.append(a if node is None else (node, a._idx))
                needs.append(True)
                continue
        elif a is None or type(a) in _SCALARS:
            shapes.append(None)
            dtypes.append(None)
        else:
            shapes.append(a.shape)
            dtypes.append(a.dtype)
        edges.append(None)
        needs.append(False)
    saved = versions = inputs = None
    save_idx, save_out = op.save_idx, op.save_out
    if op.save_for is not None:
        save_idx, save_out = op.saved_for(needs)
        inputs = (None,) * len(args)  # (its vjp unpacks them even when none is kept)
    if save_idx:
        saved = [None] * len(args)
        versions = [None] * len(args)
        inputs = [None] * len(args)
        for i in save_idx:
            a = saved[i] = inputs[i] = args[i]
            if type(a) in _TT:
                versions[i] = a._vc[0]
                inputs[i] = a._data
    out = out_version = None
    if save_out:
        v = outs[op.out_checked]._vc
        out = _saved_out(outs[0]) if op.nout == 1 else tuple(_saved_out(o) for o in outs)
        out_version = (v, v[0])
    o = outs[0]._data
    same = op.elementwise and all(s is None or (s == o.shape and d == o.dtype)
                                  for s, d in zip(shapes, dtypes))
    node = _make_node(op, attrs, edges, shapes, dtypes, needs, saved, versions, inputs, out,
                      out_version, same, _last_write[0])
    if tapes:
        node.tapes = _tapes_of(args, rg, tapes)
    if _state._saved_hooks and (saved is not None or out is not None):
        _pack_saved(node)
    return node


def _pack_saved(node):
    """Inside saved_tensors_hooks: each Tensor the node saves (inputs, outputs) goes
    through the innermost pack hook once, now, and the node keeps what it returns in
    its place (``tape.Packed``); the walker unpacks them when the adjoint reads them.
    An output is handed over as a new Tensor on its data, without history (the node
    keeping the output itself would be a reference cycle). As PyTorch's, packed values
    are not checked against in-place writes (a hook that copies makes them safe)."""
    pack, unpack = _state._saved_hooks[-1]
    if node.saved is not None:
        inputs = list(node.inputs)
        for i, s in enumerate(node.saved):
            if type(s) in _TT:
                inputs[i] = _Packed(pack(s))
        node.inputs = inputs
        node.saved = node.versions = None
    out = node.out
    if out is not None:
        def one(o):
            return _Packed(pack(wrap(o) if type(o) not in _TT else o))
        node.out = one(out) if node.op.nout == 1 else tuple(one(o) for o in out)
    node.unpack = unpack
    node.write = _PACKED


def _tapes_of(args, rg, tapes):
    active = {id(t) for t in tapes}
    found = set()
    for a in args:
        if type(a) in _TT and a._tapes:
            found |= a._tapes & active
    if rg:
        found |= active
    return frozenset(found) if found else None


@contextlib.contextmanager
def raw_arrays():
    """While open, this thread's op calls on raw arrays alone compute and return raw
    arrays (as the walker's adjoints do); outside, such a call is a TypeError, as
    PyTorch's ``torch.sum(ndarray)``. The @fuse tracer calls ops on stand-ins so."""
    prev = _state.raw
    _state.raw = True
    _state._refresh()
    try:
        yield
    finally:
        _state.raw = prev
        _state._refresh()


# ------------------------------------------------------------------ observers
@contextlib.contextmanager
def observe(observer):
    """While open, ``observer(op, kernel, *arrays, **attrs)`` runs in place of each op
    kernel of this thread (it calls ``kernel`` itself, or not) and, if it has a
    ``vjp(node, vjp, ctx, g)`` method, in place of each adjoint the walker runs. The
    thread takes the general path meanwhile; other threads see nothing."""
    _state.observers = _state.observers + (observer,)
    try:
        yield observer
    finally:
        _state.observers = tuple(o for o in _state.observers if o is not observer)


def observing():
    """Whether an observer (``observe``) is open on this thread."""
    return bool(_state.observers)


def notify(event, *args):
    """Tell this thread's observers of ``event``: each with an ``on_<event>`` method is
    called with ``args`` (tg.compile's capture hears ``update``, an optimizer about to
    update a parameter, ``zero_grads``, ``fail`` and ``refuse`` so: the layers above
    the core report to it without importing it). Returns whether one heard it."""
    heard = False
    for o in _state.observers:
        m = getattr(o, "on_" + event, None)
        if m is not None:
            m(*args)
            heard = True
    return heard


def _observed(op, arrays, kw):
    run = op.kernel
    for obs in _state.observers:
        run = _chain(obs, op, run)
    return run(*arrays, **kw)


def _chain(obs, op, inner):
    def run(*arrays, **kw):
        return obs(op, inner, *arrays, **kw)
    return run


# ------------------------------------------------------------------ anomaly mode
_PKG = os.path.dirname(os.path.abspath(__file__))


def _user_frame():
    for fr in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(fr.filename).startswith(_PKG):
            return f"{fr.filename}:{fr.lineno} ({fr.line})"
    return None


def _check_forward(op, outs, where=None):
    for o in outs:
        _tape.check_finite(op.name, where or _user_frame(), o._data, "forward")


# ------------------------------------------------------------------ in place
def apply_inplace(op, t, *args, **attrs):
    """``t <- op(t, *args)`` in t's own buffer, PyTorch rules.

    A leaf that requires grad refuses (in grad mode), and so does a view of one;
    read-only buffers refuse; the version counter (shared with views) is bumped so
    stale saved values are caught. When recorded, the op sees a snapshot of t's old
    value, and t takes the new node; on a view, the base's history is rewritten
    (``_inplace_on_view``) so gradients reach everything that went into it.
    """
    if type(t) not in _TT:
        raise TypeError(f"{op.name}_: expected a Tensor, got {type(t).__name__}")
    t._check_writable(op.name + "_")
    if _state._vmap and (_batched_in(args) or (attrs and _batched_in(attrs.values()))):
        # (a batched t refused above): the batch cannot be written into one tensor
        raise RuntimeError(f"vmap: {op.name}_: in-place arithmetic is not possible because "
                           f"an argument is vmapped over but the tensor written to is not "
                           f"(it has fewer elements than the result); use the out-of-place "
                           f"op instead")
    grad_on = _state._grad
    base = t._base
    if grad_on and t._requires_grad and t._node is None:
        raise RuntimeError(f"{op.name}_: a leaf Variable that requires grad is being used "
                           f"in an in-place operation")
    if grad_on and base is not None and base._requires_grad and base._node is None:
        raise RuntimeError(f"{op.name}_: a view of a leaf Variable that requires grad is "
                           f"being used in an in-place operation")
    record = grad_on and (t._requires_grad or any(type(a) in _TT and a._requires_grad
                                                 for a in args)
                          or (base is not None and base._requires_grad))
    if record and base is not None and t._view_ops:
        return _inplace_on_view(op, t, base, args, attrs)
    if record:
        old_data = _old_copy(t) if _keeps_first(op, t, args) else t._data
        old = wrap(old_data, t._node, t._idx) if t._node is not None else Tensor(old_data)
        old._requires_grad = t._requires_grad
        if t._fw:
            old._fw = dict(t._fw)
        res = bind(op, old, *args, **attrs)
    else:
        prev = _state.grad_enabled
        _state.grad_enabled = False
        try:
            res = bind(op, t, *args, **attrs)
        finally:
            _state.grad_enabled = prev
    _write(op, t, res._data)
    if _state._dual:
        _inplace_tangents(t, res)
    if record:
        t._node = res._node
        t._idx = res._idx
        t._requires_grad = True
        if t._views:
            _rederive_views(t, None)
    return t


def _old_copy(t):
    """A copy of ``t``'s values before an in-place op writes them (the recorded op
    reads it); an observer (tg.compile's capture) hears ``copy``: the copy is a step
    of the program, made afresh by each replay."""
    c = t._data.copy()
    if _state._observers:
        notify("copy", t._data, c)
    return c


def _keeps_first(op, t, args):
    """Whether ``op(t, *args)``, recorded, keeps ``t`` (which an in-place op then
    hands it as a copy of its old value)."""
    if op.save_for is None:
        return 0 in op.save_idx
    needs = (t._requires_grad,) + tuple(type(a) in _TT and a._requires_grad for a in args)
    return 0 in op.saved_for(needs)[0]


def _inplace_tangents(t, res):
    """Forward mode: ``t``, written in place with ``res``, takes ``res``'s tangents
    (a view of ``t`` then reads the base's: ``_view_tangents``)."""
    if res._fw or t._fw:
        t._fw = dict(res._fw) if res._fw else None
    if t._base is not None and t._view_ops:
        _view_tangents(t._base, t._view_ops, res)


def _view_tangents(base, vops, res):
    """Forward mode, an in-place op on a view of ``base``: the base's tangent at each
    level becomes its old one (zero if none) with the view's region replaced by the
    result's tangent. Computed on the tangents' buffers (not recorded: a gradient of
    such a tangent is not available)."""
    levels = set(base._fw or ()) | set(res._fw or ())
    new = {}
    for level in levels:
        tb = (base._fw or {}).get(level)
        tv = (res._fw or {}).get(level)
        data = (tb._data.copy() if tb is not None else
                _devices.xp_of(base._data).zeros(base._data.shape, base._data.dtype))
        with raw_arrays():
            region = _view_of(data, vops)
            region[...] = 0 if tv is None else tv._data
        new[level] = wrap(data)
    base._fw = new
    for v in list(base._views or ()):
        if v._view_ops:
            with raw_arrays():
                v._fw = {lv: wrap(_view_of(tg._data, v._view_ops)) for lv, tg in new.items()}


def _rederive_views(base, written):
    """After an in-place op on ``base`` (or on its view ``written``), every other live
    view of it takes a history derived from the base's new one, as PyTorch
    regenerates a view's grad_fn when its base's version changes: a view read later
    then differentiates to what went into the base."""
    for v in list(base._views):
        if v is not written:
            now = _view_of(base, v._view_ops)
            v._node, v._idx, v._requires_grad = now._node, now._idx, True


def _write(op, t, new):
    if new.dtype != t._data.dtype and not np.can_cast(new.dtype, t._data.dtype, "same_kind"):
        raise RuntimeError(f"{op.name}_: result type {_dt.from_np(new.dtype)} can't be cast "
                           f"to the desired output type {t.dtype}")
    if new.shape != t._data.shape:
        raise RuntimeError(f"{op.name}_: output with shape {t.shape} doesn't match the "
                           f"broadcast shape {tuple(new.shape)}")
    for obs in _state.observers:  # (tg.compile's capture keeps what it overwrites)
        bw = getattr(obs, "before_write", None)
        if bw is not None:
            bw(t._data)
    t._data[...] = new
    for obs in _state.observers:  # tg.compile's capture records the write
        w = getattr(obs, "write", None)
        if w is not None:
            w(t._data, new)
    _mark_written(t)


def _inplace_on_view(op, t, base, args, attrs):
    """``t <- op(t, *args)`` where ``t`` is a view of ``base``, recorded as PyTorch
    does: the op runs on the view's current value (derived from the base's history),
    the base's history becomes "the old base with the view's region replaced by the
    result" (``_COPY_SLICES``), and the view is derived afresh from the new base."""
    vops = t._view_ops
    cur = _view_of(base, vops)
    old_data = _old_copy(cur) if _keeps_first(op, cur, args) else cur._data
    old = wrap(old_data, cur._node, cur._idx) if cur._node is not None else Tensor(old_data)
    if cur._fw:
        old._fw = dict(cur._fw)
    res = bind(op, old, *args, **attrs)
    old_base = (wrap(base._data, base._node, base._idx) if base._node is not None
                else Tensor(base._data))
    _write(op, t, res._data)
    if _state._dual and (res._fw or base._fw):
        _view_tangents(base, vops, res)
    new_base = bind(_COPY_SLICES, old_base, res, view_ops=vops)
    base._node, base._idx, base._requires_grad = new_base._node, 0, True
    now = _view_of(base, vops)
    t._node, t._idx, t._requires_grad = now._node, now._idx, True
    if base._views:
        _rederive_views(base, t)
    return t


def _view_of(x, view_ops):
    """``x`` through the view ops that derived a view from its base (raw or Tensor)."""
    for vop, vattrs in view_ops:
        x = bind(vop, x, **vattrs)
    return x


def _copy_slices_vjp(ctx, g):
    """The base's gradient outside the view's region, and the view's region of it."""
    view_ops = ctx.attrs["view_ops"]
    xp = _devices.xp_of(g._data if type(g) in _TT else g)
    mask = xp.ones(ctx.shapes[0], dtype=ctx.dtypes[0])
    with raw_arrays():
        _view_of(mask, view_ops)[...] = 0
    return (g * mask if ctx.needs_input_grad[0] else None,
            _view_of(g, view_ops) if ctx.needs_input_grad[1] else None)


def _copy_slices_infer(base, value, *, view_ops):
    return TensorSpec(tuple(base.shape), base.dtype)


# the base's new history after an in-place op on one of its views; its kernel returns
# the base's buffer, which already holds the result in the view's region
_COPY_SLICES = OpDef(
    name="copy_slices", kernel=lambda base, value, *, view_ops: base,
    infer=_copy_slices_infer, args=("base", "value"), vjp=_copy_slices_vjp,
    samples=lambda dtype=None: [])
validate(_COPY_SLICES)
