"""``torch_ops()``: every registered op as a function of ``torch.Tensor``s.

Forward: the op's shape rule, then its kernel on zero-copy DLPack views of the
tensors, writing into memory PyTorch allocated: the output (``out=``, for kernels
that take it), the workspace (``torch.empty(nbytes, uint8)``), the outputs of a
dynamic op (its allocator hands out ``torch.empty`` tensors). A view op's result is
a ``Tensor.as_strided`` view of its input; any other kernel result is handed to
PyTorch without a copy. Backward: a ``torch.autograd.Function`` whose backward runs
the registry's adjoint on the saved tensors, with ``ctx.m`` the adjoints' namespace
over this export (``_bridge``), so PyTorch differentiates the adjoint again.
"""
import threading
import types

import numpy as np

from ..devices import dlpack as _dlpack
from ..dispatch import register_foreign
from ..ops_registry import TensorSpec, list_ops
from . import _bridge

__all__ = ["torch_ops", "torch_module", "call", "from_torch"]

_torch = None
_NP2T = {}
_T2NP = {}
_SCALARS = (bool, int, float)


def _transforms_active():
    return _torch._C._are_functorch_transforms_active()


def torch_module():
    """PyTorch, imported on first use (an extra: ``pip install tapegrad[oracle]``)."""
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is a test dependency here
            raise ImportError("tapegrad.interop.torch_ops needs PyTorch "
                              "(pip install torch)") from e
        _torch = torch
        _Parameter[0] = torch.nn.Parameter
        for dt in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                   np.int64, np.uint8, np.bool_, np.complex64, np.complex128):
            t = torch.from_numpy(np.empty(0, dt)).dtype
            _NP2T[np.dtype(dt)] = t
            _T2NP[t] = np.dtype(dt)
    return _torch


def torch_dtype(dtype):
    return _NP2T[np.dtype(getattr(dtype, "np", dtype))]


def numpy_dtype(tdtype):
    return _T2NP[tdtype]


# ------------------------------------------------------------------ arrays both ways
def to_numpy(t, op_name="interop", what="input"):
    """A zero-copy NumPy view of a torch tensor (a CPU one: its own memory; others
    through DLPack)."""
    if t.is_cpu and t.dtype in _T2NP and not _transforms_active():
        try:  # a CPU tensor's own memory: what DLPack gives, at a tenth of its cost
            return (t.detach() if t.requires_grad else t).numpy()
        except (RuntimeError, TypeError):  # conj/neg bits: the general way
            pass
    if t.device.type != "cpu":
        raise RuntimeError(f"{op_name}: {what} is on {t.device}; this export computes on the "
                           f"CPU (tapegrad's NumPy arrays): move it with .cpu()")
    ft = _torch._C._functorch
    if ft.maybe_current_level() is not None:  # inside a torch.func transform
        while ft.is_functorch_wrapped_tensor(t):
            t = ft.get_unwrapped(t)
        with _torch._C._DisableFuncTorch():  # the plain tensor's own memory
            t = t.detach()
            return t.numpy() if t.dtype in _T2NP else _dlpack.import_array(t)
    if t.requires_grad:
        t = t.detach()
    if t.dtype in _T2NP:
        try:  # a CPU tensor's own memory: what DLPack gives, at a tenth of its cost
            return t.numpy()
        except (RuntimeError, TypeError):
            t = t.resolve_conj().resolve_neg()
    return _dlpack.import_array(t)


def from_numpy(a):
    """A torch tensor on ``a``'s memory (DLPack), or on a copy when PyTorch cannot
    take that memory (read-only, negative strides)."""
    torch = _torch
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if a.flags.writeable and all(s >= 0 for s in a.strides):
        try:
            return torch.from_numpy(a)  # zero-copy, as torch.from_dlpack(a), faster
        except (BufferError, RuntimeError, TypeError, ValueError):
            pass
    return torch.from_numpy(np.array(a, copy=True))


def _view_of(t, base, r):
    """``r`` (a NumPy view of ``base``, which views ``t``) as a torch view of ``t``."""
    item = base.itemsize
    off = r.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if r.dtype != base.dtype or off % item or any(s % item or s < 0 for s in r.strides):
        return None
    off = off // item + t.storage_offset()
    if off < 0:
        return None
    return t.as_strided(tuple(r.shape), tuple(s // item for s in r.strides), off)


# ------------------------------------------------------------------ calls
class _Call:
    """One call's op and non-tensor arguments, carried through autograd.Function."""
    __slots__ = ("op", "attrs", "raw", "ws", "plan")

    def __init__(self, op, attrs, raw=None, ws=None, plan=None):
        self.op = op
        self.attrs = attrs
        self.raw = raw  # the inputs' NumPy views, when the export's lane made them
        self.ws = ws  # the caller's workspace (workspace=), if any
        self.plan = plan  # the fast path's _FastPlan, when it made ``raw``


def _attr(v):
    torch = _torch
    if isinstance(v, torch.Tensor):
        return to_numpy(v, what="an attribute")
    if isinstance(v, torch.dtype):
        return _T2NP[v]
    return None


def _check_args(op, args):
    torch = _torch
    out = []
    for i, a in enumerate(args):
        name = op.args[i] if i < len(op.args) else op.args[-1]
        if isinstance(a, torch.Tensor) or type(a) in _SCALARS or isinstance(a, np.ndarray):
            out.append(a)
        elif isinstance(a, np.generic):
            out.append(a.item())
        elif a is None:
            out.append(a)  # the shape rule refuses a None the op does not take
        elif hasattr(a, "__dlpack__"):
            _bridge.check_host_device(op, name, a)
            out.append(from_numpy(_dlpack.import_array(a)))
        else:
            raise TypeError(f"{op.name}: argument {name!r} must be a torch.Tensor (or a "
                            f"Python number), got {type(a).__name__}")
    return out


def _promote(op, args):
    """Cast tensor inputs to the op's common dtype (PyTorch's promotion, which is
    tapegrad's), with ``.to`` so that the cast is differentiated too."""
    torch = _torch
    if op.promote == "none":
        return args
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    if not ts:
        return args
    first = ts[0].dtype
    if all(t.dtype == first for t in ts) and (op.promote != "float" or first.is_floating_point) \
            and all(type(a) is not float for a in args) or (first.is_floating_point and all(
                t.dtype == first for t in ts)):
        return args
    dimmed = [t.dtype for t in ts if t.dim()]
    zero = [t.dtype for t in ts if not t.dim()]
    target = None
    for d in dimmed:
        target = d if target is None else torch.promote_types(target, d)
    if zero:
        z = zero[0]
        for d in zero[1:]:
            z = torch.promote_types(z, d)
        target = z if target is None else torch.result_type(
            torch.empty(1, dtype=target), torch.empty((), dtype=z))
    for a in args:
        if type(a) in _SCALARS:
            target = torch.result_type(torch.empty(1, dtype=target), a)
    if op.promote == "float" and not target.is_floating_point:
        target = torch.get_default_dtype()
    return [a.to(target) if isinstance(a, torch.Tensor) and a.dtype != target else a
            for a in args]


def call(op, args, attrs):
    """Run registry op ``op`` on torch tensors (and Python numbers): the export.
    ``out=`` (a tensor, or a tuple of them for several outputs) and ``workspace=``
    (a workspace op's scratch) are memory the caller allocated, written in place."""
    torch_module()
    if "out" in attrs or "workspace" in attrs:
        attrs = dict(attrs)
        out, ws = attrs.pop("out", None), attrs.pop("workspace", None)
        if out is not None or ws is not None:
            return _call_into(op, args, attrs, out, ws)
    if op.kind in _FAST_KINDS and op.nout == 1:
        r = _fast_call(op, args, attrs)
        if r is not None:
            return r
    args = _check_args(op, args)
    attrs = {k: _bridge.canonical_attr(v, _attr) for k, v in attrs.items()}
    args = _promote(op, args)
    return _record(op, args, attrs)


def _record(op, args, attrs, ws=None):
    torch = _torch
    if op.differentiable:
        if _forward_mode(args):  # a tangent may ride on the inputs: the jvp-capable Function
            return _Apply.apply(_Call(op, attrs, None, ws), *args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            return _Lean.apply(_Call(op, attrs, None, ws), *args)
    return _forward(op, args, attrs, None, ws)[0]


# ------------------------------------------------------------------ the fast path
_FAST_KINDS = frozenset(("basic", "workspace"))
_FAST_MAX = 1024
_fast_plans = {}  # (op, dtype, input shapes, attrs) -> _FastPlan, or False: not this path


class _FastPlan:
    """What a call of ``op`` with these shapes, dtype and attributes needs, worked out
    once (the shape rule, which validated them; the workspace size; what the backward
    keeps): the checks, promotion and attribute canonicalization of ``call`` have
    nothing to do for such a call."""
    __slots__ = ("shape", "tdtype", "nbytes", "shapes", "dtypes", "others")

    def __init__(self, spec, nbytes, shapes, dtype):
        self.shape = tuple(spec.shape)
        self.tdtype = torch_dtype(spec.dtype)
        self.nbytes = nbytes
        self.shapes = tuple(() if s is None else s for s in shapes)  # as _setup's
        self.dtypes = tuple(None if s is None else dtype for s in shapes)
        self.others = [None] * len(shapes)


def _plain_attr(v):
    tv = type(v)
    if tv in _bridge._PLAIN:
        return True
    return (tv is tuple or tv is list) and all(_plain_attr(x) for x in v)


def _fast_call(op, args, attrs):
    """``call``'s common case, the one a backward and a training step make: a
    one-output basic or workspace op on plain CPU tensors of one floating dtype (or
    None), plain attributes, outside torch.func transforms and forward-mode AD. The
    shape rule, workspace size and backward bookkeeping are memoized by (op, dtype,
    shapes, attributes); the kernel runs on ``Tensor.numpy()`` views into
    ``torch.empty`` memory, as ``_forward``. None: not this case (``call`` takes it,
    and gives any error)."""
    torch = _torch
    Tensor = torch.Tensor
    if not args or _transforms_active() or torch.autograd.forward_ad._current_level >= 0:
        return None
    dt = None
    rg = False
    shapes = []
    for a in args:
        if a is None:
            shapes.append(None)
            continue
        tp = type(a)
        if tp is not Tensor and tp is not _Parameter[0]:
            return None
        if dt is None:
            dt = a.dtype
        elif a.dtype is not dt:
            return None
        if a.requires_grad:
            rg = True
        shapes.append(a.shape)
    if dt is None or not dt.is_floating_point:
        return None
    try:
        key = (op, dt, tuple(shapes), tuple(attrs.items()) if attrs else ())
        plan = _fast_plans.get(key)
    except (TypeError, RuntimeError):  # an unhashable or array attribute
        return None
    if plan is False:
        return None
    raw = []
    try:
        for a in args:
            raw.append(None if a is None else (a.detach() if a.requires_grad else a).numpy())
    except (RuntimeError, TypeError):  # not a CPU tensor's own memory (device, conj/neg bits)
        return None
    if plan is None:
        plan = _fast_plan(op, key, raw, attrs)
        if plan is None:
            return None
    if rg and op.differentiable and torch.is_grad_enabled():
        # (PyTorch's C-level apply: Function.apply's Python layer only binds defaults
        # for setup_context and unwraps functorch's wrappers, none here)
        return _lean_apply[0](_Call(op, attrs, raw, None, plan), *args)
    return _fast_run(op, plan, raw, args, attrs)


def _fast_plan(op, key, raw, attrs):
    """The call's _FastPlan (the shape rule raises the op's error), kept by ``key``;
    None (kept as False) where the general path must run (a non-float or dynamic
    output, attributes that are not plain values)."""
    if _T2NP.get(key[1]) is None or not all(_plain_attr(v) for v in attrs.values()):
        return None
    in_specs = [None if a is None else TensorSpec(tuple(a.shape), a.dtype) for a in raw]
    specs, nbytes = _plan(op, in_specs, attrs)  # validates: the op's own error
    spec = specs[0]
    plan = False
    if None not in spec.shape and np.dtype(spec.dtype).kind == "f":
        plan = _FastPlan(spec, nbytes, tuple(None if a is None else tuple(a.shape) for a in raw),
                         raw[next(i for i, a in enumerate(raw) if a is not None)].dtype)
    if len(_fast_plans) >= _FAST_MAX:
        _fast_plans.clear()
    _fast_plans[key] = plan
    return plan or None


def _fast_run(op, plan, raw, args, attrs):
    """The kernel on the inputs' views, writing into ``torch.empty`` memory (``out=``,
    for a kernel that takes it; the per-thread workspace)."""
    kw = dict(attrs)
    if op.kind == "workspace":
        kw["workspace"] = _workspace(plan.nbytes)
    t = v = None
    if op.takes_out:
        t = _torch.empty(plan.shape, dtype=plan.tdtype)
        kw["out"] = v = t.numpy()
    try:
        res = op.kernel(*raw, **kw)
    except (ValueError, TypeError, IndexError, RuntimeError, ZeroDivisionError,
            ArithmeticError, MemoryError, np.linalg.LinAlgError) as e:
        raise RuntimeError(f"{op.name}: {e}") from e
    if res is v and v is not None:
        return t
    return _wrap(op, res, {} if v is None else {id(v): (v, t)}, args, raw)


def _fast_setup(ctx, c, plan, args, out):
    """``_setup`` for a fast-path call (one floating output, tensor or None inputs):
    its shapes and dtypes come from the plan."""
    op = c.op
    ctx.set_materialize_grads(False)
    ctx.c = c
    ctx.shapes = plan.shapes
    ctx.dtypes = plan.dtypes
    ctx.others = plan.others
    save_idx = op.save_idx
    keep = [a if i in save_idx else None for i, a in enumerate(args)]
    if op.save_out:
        keep.append(out)
    ctx.save_for_backward(*keep)


_Parameter = [None]  # torch.nn.Parameter, once PyTorch is imported


def _forward_mode(args):
    """Whether a tangent may ride on the inputs: torch.func's transforms (wrapped
    tensors) or an open ``torch.autograd.forward_ad`` dual level."""
    torch = _torch
    if torch.autograd.forward_ad._current_level >= 0:
        return True
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    return any(isinstance(a, torch.Tensor) and wrapped(a) for a in args)


def _forward(op, args, attrs, user_out=None, user_ws=None):
    """(result, the NumPy views of the inputs): the kernel on zero-copy views.
    ``user_out``: the caller's output tensors (checked by ``_call_into``), written by
    the kernel where it takes ``out=`` (or its allocator's, for a dynamic op), else
    copied into; ``user_ws``: the caller's scratch for a workspace op."""
    torch = _torch
    raw = [to_numpy(a, op.name, f"input {op.args[min(i, len(op.args) - 1)]!r}")
           if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
    in_specs = [TensorSpec(tuple(a.shape), a.dtype) if isinstance(a, np.ndarray) else a
                for a in raw]
    specs, nbytes = _plan(op, in_specs, attrs)  # validates: the op's own error
    kw = dict(attrs)
    mine = {}  # id(numpy view) -> the torch tensor PyTorch allocated for it
    if op.kind == "workspace":
        kw["workspace"] = _workspace(nbytes) if user_ws is None else \
            _user_workspace(op, user_ws, nbytes)
    elif user_ws is not None:
        raise TypeError(f"{op.name}: workspace= is for workspace ops (their scratch is "
                        f"declared by op.workspace); this is a {op.kind} op")
    if user_out is not None:
        _fit_out(op, user_out, specs)
    if op.kind == "dynamic":
        count = [0]

        def alloc(shape, dtype):
            k = count[0]
            count[0] += 1
            t = user_out[k] if user_out is not None else None
            if t is None or t.dtype != torch_dtype(dtype) or not t.is_contiguous():
                t = torch.empty(tuple(shape), dtype=torch_dtype(dtype))
            elif tuple(t.shape) != tuple(shape):
                _resize(op, t, tuple(shape))
            v = to_numpy(t)
            mine[id(v)] = (v, t)
            return v
        kw["alloc"] = alloc
    if op.takes_out and op.kind != "view" and all(None not in s.shape for s in specs):
        vs = []  # (several outputs: a tuple of outs, one per output)
        for k, s in enumerate(specs):
            t = user_out[k] if user_out is not None else None
            if t is None or t.dtype != torch_dtype(s.dtype) or not t.is_contiguous():
                t = torch.empty(s.shape, dtype=torch_dtype(s.dtype))
            v = to_numpy(t)
            mine[id(v)] = (v, t)
            vs.append(v)
        kw["out"] = vs[0] if op.nout == 1 else tuple(vs)
    try:
        res = op.kernel(*raw, **kw)
    except (ValueError, TypeError, IndexError, RuntimeError, ZeroDivisionError,
            ArithmeticError, MemoryError, np.linalg.LinAlgError) as e:
        raise RuntimeError(f"{op.name}: {e}") from e
    outs = res if op.nout > 1 else (res,)
    wrapped = tuple(_wrap(op, r, mine, args, raw) for r in outs)
    return (wrapped if op.nout > 1 else wrapped[0]), raw


def _call_into(op, args, attrs, out, ws):
    """``op(*args, out=out, workspace=ws)``: as PyTorch's ``out=`` functions, the
    result is written into ``out`` (resized, with PyTorch's warning, when it has
    another shape; cast when its dtype is one the result casts to) and ``out`` is
    returned; autograd does not record through ``out=``."""
    torch = _torch
    many = isinstance(out, (tuple, list))
    outs = None if out is None else (tuple(out) if many else (out,))
    if outs is not None:
        if len(outs) != op.nout or not all(isinstance(o, torch.Tensor) for o in outs):
            what = f"a tuple of {op.nout}" if op.nout > 1 else "a"
            raise TypeError(f"{op.name}: out= must be {what} "
                            f"torch.Tensor{'s' if op.nout > 1 else ''}, got {out!r:.80}")
        if many != (op.nout > 1):
            raise TypeError(f"{op.name}: out= must be "
                            f"{'a tuple of tensors' if op.nout > 1 else 'one tensor'} "
                            f"({op.nout} output{'s' if op.nout > 1 else ''})")
    if op.composite is not None:
        if ws is not None:
            raise TypeError(f"{op.name}: workspace= is for workspace ops; this is a "
                            f"composite of other ops")
        r = _bridge.run_composite(_TorchFramework, op, args, attrs)
        return r if outs is None else _result_into(op, r, args, out)
    args = _check_args(op, args)
    attrs = {k: _bridge.canonical_attr(v, _attr) for k, v in attrs.items()}
    args = _promote(op, args)
    if outs is None:  # only the workspace is the caller's: recorded as any call
        return _record(op, args, attrs, ws)
    _no_grad_out(op, list(args) + list(outs))
    res = _forward(op, args, attrs, outs, ws)[0]
    for o, r in zip(outs, res if op.nout > 1 else (res,)):
        if r is not o:
            _copy_into(op, o, r)
    return out


def _result_into(op, r, args, out):
    """``r`` (a call's result, computed) written into the caller's ``out`` (a tensor,
    or a tuple of them as many as ``r`` has), as PyTorch's ``out=``: resized with
    PyTorch's warning, cast where the result casts, refused under autograd."""
    torch = _torch
    rs = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    many = isinstance(out, (tuple, list))
    outs = tuple(out) if many else (out,)
    if len(outs) != len(rs) or many != isinstance(r, (tuple, list)) or \
            not all(isinstance(o, torch.Tensor) for o in outs):
        what = f"a tuple of {len(rs)} torch.Tensors" if isinstance(r, (tuple, list)) else \
            "a torch.Tensor"
        raise TypeError(f"{op.name}: out= must be {what}, got {out!r:.80}")
    specs = [TensorSpec(tuple(x.shape), numpy_dtype(x.dtype)) for x in rs]
    _no_grad_out(op, list(args) + list(outs))
    _fit_out(op, outs, specs)
    for o, x in zip(outs, rs):
        _copy_into(op, o, x)
    return out


def _no_grad_out(op, tensors):
    torch = _torch
    if _forward_mode(tensors) or torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        raise RuntimeError(f"{op.name}(): functions with out=... arguments don't support "
                           f"automatic differentiation, but one of the arguments requires grad.")


def _fit_out(op, outs, specs):
    """Check (and resize) the caller's outputs for these result specs, as PyTorch."""
    torch = _torch
    for k, (o, spec) in enumerate(zip(outs, specs)):
        if o.device.type != "cpu":
            raise RuntimeError(f"{op.name}: out is on {o.device}; this export computes on "
                               f"the CPU")
        want = torch_dtype(spec.dtype)
        if o.dtype != want and not torch.can_cast(want, o.dtype):
            raise RuntimeError(f"{op.name}: result type {want} can't be cast to the desired "
                               f"output type {o.dtype}")
        if None not in spec.shape and tuple(o.shape) != tuple(spec.shape):
            _resize(op, o, tuple(spec.shape))


def _resize(op, o, shape):
    import warnings
    if o.numel():
        warnings.warn(f"{op.name}: an output with one or more elements was resized since it "
                      f"had shape {list(o.shape)}, which does not match the required output "
                      f"shape {list(shape)}. This behavior is deprecated, and in a future "
                      f"PyTorch release outputs will not be resized unless they have zero "
                      f"elements. You can explicitly reuse an out tensor t by resizing it, "
                      f"inplace, to zero elements with t.resize_(0).", UserWarning, stacklevel=5)
    o.resize_(shape)


def _copy_into(op, o, r):
    torch = _torch
    if tuple(o.shape) != tuple(r.shape):
        _resize(op, o, tuple(r.shape))
    with torch.no_grad():
        o.copy_(r)


def _user_workspace(op, ws, nbytes):
    """The caller's scratch (a contiguous CPU tensor or DLPack producer of at least
    ``nbytes`` bytes) as the kernel's uint8 view."""
    torch = _torch
    if isinstance(ws, torch.Tensor):
        if not ws.is_contiguous():
            raise RuntimeError(f"{op.name}: workspace must be a contiguous tensor")
        a = to_numpy(ws, op.name, "workspace")
    elif isinstance(ws, np.ndarray) or hasattr(ws, "__dlpack__"):
        if not isinstance(ws, np.ndarray):
            _bridge.check_host_device(op, "workspace", ws)
        a = np.from_dlpack(ws) if not isinstance(ws, np.ndarray) else ws
    else:
        raise TypeError(f"{op.name}: workspace must be a torch.Tensor (bytes the caller "
                        f"allocated), got {type(ws).__name__}")
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise RuntimeError(f"{op.name}: workspace must be contiguous, writable memory")
    a = a.reshape(-1).view(np.uint8)
    if a.nbytes < nbytes:
        raise RuntimeError(f"{op.name}: workspace of {a.nbytes} bytes is smaller than the "
                           f"{nbytes} bytes this call needs (op.workspace(*specs, **attrs))")
    return a[:nbytes]


_ws = threading.local()


def _workspace(nbytes):
    """Scratch for a workspace op: memory PyTorch allocated (``torch.empty``), one
    growing buffer per thread, reused by every call (as tapegrad's dispatch keeps
    its own): a big scratch allocated per call costs its page faults every time."""
    buf = getattr(_ws, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        t = _torch.empty(max(nbytes, 1), dtype=_torch.uint8)
        buf = _ws.buf = to_numpy(t)
    return buf[:nbytes]


_SPECS_MAX = 4096
_plans = {}  # (op, input specs, attrs) -> (output specs, workspace bytes): both pure


def _plan(op, in_specs, attrs):
    """The op's output specs (its shape rule, which raises the op's error) and, for a
    workspace op, its scratch bytes; memoized by the call's specs and attributes."""
    try:
        key = (op, tuple((type(x), x) for x in in_specs), tuple(attrs.items()))  # True != 1
        hit = _plans.get(key)
    except TypeError:  # an unhashable attr (an index array)
        key = hit = None
    if hit is None:
        specs = _bridge.out_specs(op, in_specs, attrs)
        nbytes = int(op.workspace(*in_specs, **attrs)) if op.kind == "workspace" else 0
        hit = (specs, nbytes)
        if key is not None:
            if len(_plans) >= _SPECS_MAX:
                _plans.clear()
            _plans[key] = hit
    return hit


def _wrap(op, r, mine, args, raw):
    torch = _torch
    hit = mine.get(id(r))
    if hit is not None and hit[0] is r:
        return hit[1]
    if not isinstance(r, np.ndarray):
        r = np.asarray(r)
    for a, t in zip(raw, args):
        if isinstance(a, np.ndarray) and np.may_share_memory(r, a):
            if op.kind == "view" and isinstance(t, torch.Tensor):
                v = _view_of(t, a, r)
                if v is not None:
                    return v
            return torch.from_numpy(np.array(r, copy=True))  # never alias a non-view
    return from_numpy(r)


class _Apply:
    pass


_Lean = _Apply
_lean_apply = [None]  # Lean's C-level apply (torch._C._FunctionBase.apply bound to it)


def _setup(ctx, c, args, output, forward_mode):
    """What the backward (and, in forward mode, the jvp) reads, kept on ``ctx``."""
    torch = _torch
    op = c.op
    ctx.set_materialize_grads(False)
    outs = output if op.nout > 1 else (output,)
    ctx.c = c
    ctx.shapes = tuple(tuple(a.shape) if isinstance(a, (torch.Tensor, np.ndarray))
                       else () for a in args)
    ctx.dtypes = tuple(_T2NP[a.dtype] if isinstance(a, torch.Tensor) else
                       (a.dtype if isinstance(a, np.ndarray) else None) for a in args)
    ctx.others = [None if isinstance(a, torch.Tensor) else a for a in args]
    save_idx = op.save_idx
    keep = [a if (i in save_idx and isinstance(a, torch.Tensor)) else None
            for i, a in enumerate(args)]
    if op.save_out:
        keep += list(outs)
    ctx.save_for_backward(*keep)
    if forward_mode and op.jvp is not None:  # forward mode: every input and the output
        ctx.save_for_forward(*[a if isinstance(a, torch.Tensor) else None
                               for a in args], *outs)
    if op.nout > 1 or not output.is_floating_point():
        nd = [o for o in outs if not o.is_floating_point()]
        if nd:
            ctx.mark_non_differentiable(*nd)


def _make_apply():
    torch = _torch

    class Lean(torch.autograd.Function):
        """Reverse mode only, in PyTorch's classic form (no ``setup_context``, whose
        ``Function.apply`` binds the arguments with ``inspect`` on every call)."""

        @staticmethod
        def forward(ctx, c, *args):
            raw = c.raw
            plan = c.plan
            if plan is not None:  # the fast path validated and viewed the inputs already
                out = _fast_run(c.op, plan, raw, args, c.attrs)
                _fast_setup(ctx, c, plan, args, out)
                return out
            if raw is None:
                out = _forward(c.op, list(args), c.attrs, None, c.ws)[0]
            else:  # the export's lane validated and viewed the inputs already
                out = _run(c.op, raw, args)
            _setup(ctx, c, args, out, False)
            return out

        @staticmethod
        def backward(ctx, *gs):
            return _backward(ctx, gs)

    class Apply(torch.autograd.Function):
        """Reverse and forward mode (``torch.func`` transforms, ``forward_ad``)."""

        @staticmethod
        def forward(c, *args):
            return _forward(c.op, list(args), c.attrs, None, c.ws)[0]

        @staticmethod
        def setup_context(ctx, inputs, output):
            _setup(ctx, inputs[0], inputs[1:], output, True)

        @staticmethod
        def jvp(ctx, c_t, *tangents):
            """Forward mode: the registry's jvp rule, computed with the exported ops."""
            c = ctx.c
            op = c.op
            if op.jvp is None:  # as tapegrad's own forward mode says it
                raise RuntimeError(f"{op.name}: no forward-mode rule (jvp) is declared for "
                                   f"this op, so its forward-mode derivative is unavailable "
                                   f"(reverse mode works: backward, torch.func.vjp/grad)")
            saved = ctx.saved_tensors
            n = len(ctx.others)
            inputs = [saved[i] if saved[i] is not None else ctx.others[i] for i in range(n)]
            outs = saved[n:]
            tangents = [t if isinstance(t, torch.Tensor) and i < n and
                        isinstance(inputs[i], torch.Tensor) and inputs[i].is_floating_point()
                        else None for i, t in enumerate(tangents)]
            actx = _bridge.AdjointCtx(inputs, outs if op.nout > 1 else outs[0], c.attrs,
                                      ctx.shapes, ctx.dtypes,
                                      tuple(t is not None for t in tangents), M, op)
            res = op.jvp(actx, *tangents)
            res = res if isinstance(res, tuple) else (res,)
            fitted = []
            for r, o in zip(res, outs):
                if not o.is_floating_point():
                    fitted.append(None)
                    continue
                if r is None:
                    r = torch.zeros_like(o)
                elif not isinstance(r, torch.Tensor):
                    r = torch.as_tensor(np.asarray(r), dtype=o.dtype)
                if tuple(r.shape) != tuple(o.shape):
                    r = r.expand(o.shape) if r.dim() <= o.dim() else r.reshape(o.shape)
                fitted.append(r.to(o.dtype) if r.dtype != o.dtype else r)
            return tuple(fitted) if op.nout > 1 else fitted[0]

        @staticmethod
        def backward(ctx, *gs):
            return _backward(ctx, gs)

        @staticmethod
        def vmap(info, in_dims, c, *args):
            """torch.func.vmap (and jacrev, jacfwd, hessian, made of it): the export once
            per example, the results stacked along dim 0 (tapegrad's own loop
            fallback); each call is recorded as usual, so transforms below compose."""
            dims = in_dims[1:]
            res = []
            for b in range(info.batch_size):
                one = [a.select(d, b) if d is not None and isinstance(a, torch.Tensor) else a
                       for a, d in zip(args, dims)]
                res.append(call(c.op, one, dict(c.attrs, **({} if c.ws is None else
                                                             {"workspace": c.ws}))))
            if c.op.nout > 1:
                return (tuple(torch.stack([r[k] for r in res]) for k in range(c.op.nout)),
                        (0,) * c.op.nout)
            return torch.stack(res), 0

    return Apply, Lean




def _backward(ctx, gs):
    """The registry's adjoint on the saved tensors, its ctx.m the export."""
    c = ctx.c
    op = c.op
    saved = ctx.saved_tensors
    n = len(ctx.others)
    inputs = [saved[i] if saved[i] is not None else
              (ctx.others[i] if i in op.save_idx else None) for i in range(n)]
    out = None
    if op.save_out:
        out = saved[n:] if op.nout > 1 else saved[n]
    needs = tuple(ctx.needs_input_grad[1:])
    if op.nout == 1:
        g = gs[0]
        if g is None:
            return (None,) * (n + 1)
    else:
        g = tuple(gs)
        if all(x is None for x in g):
            return (None,) * (n + 1)
    actx = _bridge.AdjointCtx(inputs, out, c.attrs, ctx.shapes, ctx.dtypes, needs, M)
    grads = op.vjp(actx, g)
    if not isinstance(grads, (tuple, list)):
        grads = (grads,)
    res = [None]
    for i in range(n):
        gi = grads[i] if i < len(grads) else None
        res.append(_fit(op, i, gi, ctx, needs) if needs[i] and gi is not None else None)
    return tuple(res)


def _fit(op, i, gi, ctx, needs):
    """The adjoint's gradient for input ``i`` as PyTorch wants it: a tensor of the
    input's shape (summed over broadcast dims for a broadcasting op) and dtype."""
    torch = _torch
    shape = ctx.shapes[i]
    dtype = torch_dtype(ctx.dtypes[i])
    if not isinstance(gi, torch.Tensor):
        gi = from_numpy(np.asarray(gi)) if isinstance(gi, np.ndarray) else \
            torch.as_tensor(gi, dtype=dtype)
    if tuple(gi.shape) != shape:
        if op.broadcasting:
            gi = gi.sum_to_size(shape) if len(shape) else gi.sum()
        elif gi.numel() == int(np.prod(shape)) and not len(shape):
            gi = gi.reshape(shape)
        if tuple(gi.shape) != shape:
            raise RuntimeError(f"{op.name}: its adjoint gave a gradient of shape "
                               f"{tuple(gi.shape)} for input {i} of shape {shape}")
    if gi.dtype != dtype:
        gi = gi.to(dtype)
    return gi


class _TorchFramework:
    """The adjoints' namespace adapter for PyTorch."""

    @staticmethod
    def is_array(x):
        return isinstance(x, _torch.Tensor)

    @staticmethod
    def stand_in(t):
        return to_numpy(t)

    @staticmethod
    def constant(a):
        return from_numpy(a)

    @staticmethod
    def plain(v):
        return _T2NP.get(v, v) if isinstance(v, _torch.dtype) else v

    @staticmethod
    def call(op, args, attrs):
        return call(op, args, attrs)


M = _bridge.AdjointNamespace(_TorchFramework)


# PyTorch's namespaces an op's name is looked up in (its functional first), with the
# prefix the registry gives that namespace's ops and tapegrad's module of the same
# functions
_NAMESPACES = (("", "torch.nn.functional", "tapegrad.nn.functional"),
               ("", "torch", "tapegrad"),
               ("linalg_", "torch.linalg", "tapegrad.linalg"))


def torch_counterpart(name):
    """``(PyTorch's qualified name, its function, tapegrad's)`` of ``name`` (PyTorch's
    ``torch.nn.functional.X``, else ``torch.X``, else ``torch.linalg.X`` for a
    ``linalg_X``); None where PyTorch or tapegrad has no public function of it."""
    import importlib
    torch_module()
    for prefix, tmod, gmod in _NAMESPACES:
        if not name.startswith(prefix):
            continue
        short = name[len(prefix):]
        t = getattr(importlib.import_module(tmod), short, None)
        if callable(t):
            g = getattr(importlib.import_module(gmod), short, None)
            return (f"{tmod}.{short}", t, g) if callable(g) else None
    return None


def _dlpack_in(op, args):
    """``args`` with each DLPack producer other than a torch.Tensor or a NumPy array
    (which PyTorch's factories take) as a torch view of its memory (host memory only:
    else the op's device error)."""
    out = []
    for i, a in enumerate(args):
        if not isinstance(a, (_torch.Tensor, np.ndarray)) and hasattr(a, "__dlpack__"):
            _bridge.check_host_device(op, op.args[i] if i < len(op.args) else f"#{i}", a)
            a = from_numpy(_dlpack.import_array(a))
        out.append(a)
    return tuple(out)


def _direct(op, public):
    """Whether a call of ``public`` with only the op's tensor inputs, positionally, is
    the registry op's call with its default attributes (one output, no attribute
    without a default): such a call takes the op's own export, skipping the public
    function's stand-ins."""
    import inspect
    if op.nout != 1 or op.composite is not None:
        return False
    try:
        params = list(inspect.signature(public).parameters.values())
        rule = list(inspect.signature(op.infer).parameters.values())
    except (TypeError, ValueError):
        return False
    n = len(op.args)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) < n or any(p.kind not in positional for p in params[:n]):
        return False
    if any(p.default is inspect.Parameter.empty and p.kind in positional + (
            inspect.Parameter.KEYWORD_ONLY,) for p in params[n:]):
        return False
    return not any(p.default is inspect.Parameter.empty and p.kind in positional + (
        inspect.Parameter.KEYWORD_ONLY,) for p in rule[n:])


def _export(op):
    """The op's exported function: called as PyTorch's function of its name is
    (``torch.nn.functional.X``, ``torch.X``, ``torch.linalg.X``: tapegrad's public
    function of that signature, run on stand-ins for the torch tensors, each
    registry kernel it reaches the op's export); an op no PyTorch function names
    takes the registry's own call (``f.raw``: inputs, then keyword attributes, its
    outputs as a tuple)."""
    raw = _raw_export(op)
    pair = torch_counterpart(op.name)
    if pair is None:
        f = raw
    else:
        public = pair[2]
        direct = _direct(op, public)
        nargs = len(op.args)
        Tensor = _torch.Tensor
        fw = _TorchFramework
        plans = {}  # _call_key -> _Replay, or False: the public function runs

        def f(*args, **kw):
            if "workspace" in kw or direct and len(args) == nargs and all(
                    isinstance(a, Tensor) for a in args) and all(k == "out" for k in kw):
                return raw(*args, **kw)  # (workspace=: the registry call's, a workspace op's)
            if any(not isinstance(a, (Tensor, np.ndarray)) and hasattr(a, "__dlpack__")
                   for a in args):
                args = _dlpack_in(op, args)  # another framework's arrays: torch views
                if direct and len(args) == nargs and not kw:
                    return raw(*args)
            out = kw.pop("out", None) if "out" in kw else None
            key = _call_key(args, kw)
            plan = plans.get(key) if key is not None else False
            if plan:
                r = plan.run(args, kw)
            elif plan is None:  # a call of this kind, first seen: learn its registry call
                log = []
                r = _bridge.run_function(fw, public, args, kw, log)
                if len(plans) >= _REPLAYS_MAX:
                    plans.clear()
                plans[key] = _Replay.of(log, r, args, kw)
            else:
                r = _bridge.run_function(fw, public, args, kw)
            return r if out is None else _result_into(op, r, args, out)
        f.__name__ = f.__qualname__ = op.name
        f.__doc__ = (f"tapegrad's {op.name!r} on torch.Tensors, called as "
                     f"{pair[0]} is.\n\n{op.doc}")
        f.op = op
    f.raw = raw
    return f


# ------------------------------------------------------------------ replays
_REPLAYS_MAX = 256  # kinds of call remembered per export


def _call_key(args, kw):
    """What an op's public function can see of a call, hashable: each tensor's
    type, shape, strides and dtype, every other argument's type and value, the
    keywords' names. None: a call not to remember (another argument kind, a tensor
    that is not a plain CPU one, inside a torch.func transform)."""
    if _transforms_active():
        return None
    key = [len(args)]
    for a in args:
        k = _arg_key(a)
        if k is None:
            return None
        key.append(k)
    for name, a in kw.items():
        k = _arg_key(a)
        if k is None:
            return None
        key.append(name)
        key.append(k)
    return tuple(key)


_KEY_PLAIN = frozenset((int, float, bool, str, type(None)))


def _arg_key(a):
    tp = type(a)
    if tp in _KEY_PLAIN:
        return (tp, a)
    torch = _torch
    if isinstance(a, torch.Tensor):
        if tp is not torch.Tensor and tp is not _Parameter[0] or not a.is_cpu or (
                a.dtype not in _T2NP or a.layout is not torch.strided or a.is_neg()
                or a.is_conj()):
            return None
        return (tp, a.shape, a.stride(), a.dtype)
    if tp is torch.dtype or isinstance(a, np.dtype):
        return (tp, a)
    if isinstance(a, (tuple, list)):  # (torch.Size too) of plain values
        ks = []
        for x in a:
            if type(x) not in _KEY_PLAIN:
                return None
            ks.append((type(x), x))
        return (tp, tuple(ks))
    return None


def _replay_attr(v):
    """Whether attribute ``v`` is a value a replay may pass again as it is."""
    if type(v) in _KEY_PLAIN or isinstance(v, np.dtype) or (
            isinstance(v, type) and issubclass(v, np.generic)):
        return True
    return type(v) is tuple and all(_replay_attr(x) for x in v)


class _Replay:
    """A call of an op's public function (PyTorch's signature) that reached exactly
    one exported op whose result it returned as it is, on the call's tensors
    themselves, with attributes of plain values: what that public function does for
    every call with the same ``_call_key`` (its arguments' checks passed, its
    defaults filled and canonicalized). Such a call runs that exported op directly,
    as ``f.raw`` would, without the public function's stand-ins and observer."""
    __slots__ = ("op", "template", "attrs")

    def __init__(self, op, template, attrs):
        self.op, self.template, self.attrs = op, template, attrs

    @staticmethod
    def of(log, r, args, kw):
        """The replay of the call just made (``log``: the exported ops it called, ``r``:
        its result), or False where the public function must run each time."""
        if len(log) != 1:
            return False
        op, inputs, attrs, outs = log[0]
        if r is not outs or not all(_replay_attr(v) for v in attrs.values()):
            return False
        tensors = [a for a in args if isinstance(a, _torch.Tensor)] + \
                  [a for a in kw.values() if isinstance(a, _torch.Tensor)]
        template = []
        used = set()
        for x in inputs:
            if isinstance(x, _torch.Tensor):
                k = next((k for k, t in enumerate(tensors) if t is x), None)
                if k is None:  # a constant the function made
                    return False
                used.add(k)
                template.append(k)
            elif type(x) in _KEY_PLAIN:
                template.append((x,))
            else:
                return False
        if len(used) != len(tensors):  # a tensor read some other way (its values)
            return False
        return _Replay(op, tuple(template), attrs)

    def run(self, args, kw):
        tensors = [a for a in args if isinstance(a, _torch.Tensor)]
        if kw:
            tensors += [a for a in kw.values() if isinstance(a, _torch.Tensor)]
        return call(self.op, [tensors[k] if type(k) is int else k[0] for k in self.template],
                    dict(self.attrs))


def _raw_export(op):
    """The op's export in the registry's calling convention (tensor inputs, then
    keyword attributes; several outputs as a tuple)."""
    if op.composite is not None:
        def f(*args, **attrs):  # made of other ops: each runs as the exported op
            if "out" in attrs or "workspace" in attrs:
                attrs = dict(attrs)
                out, ws = attrs.pop("out", None), attrs.pop("workspace", None)
                if out is not None or ws is not None:
                    return _call_into(op, args, attrs, out, ws)
            return _bridge.run_composite(_TorchFramework, op, args, attrs)
    elif op.kind == "basic" and op.nout == 1:
        lane = _lane(op)
        nargs = len(op.args)
        bind = _bridge.bind_inputs

        def f(*args, **attrs):
            if not attrs and len(args) >= nargs:
                r = lane(args)
                if r is not None:
                    return r
            args, attrs = bind(op, args, attrs)
            return call(op, args, attrs)
    else:
        bind = _bridge.bind_inputs

        def f(*args, **attrs):
            args, attrs = bind(op, args, attrs)
            return call(op, args, attrs)
    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = f"tapegrad's {op.name!r} on torch.Tensors ({op.kind} op).\n\n{op.doc}"
    f.op = op
    return f


def _lane(op):
    """The export's common case, made once per op (a basic op with one output, called
    with CPU float tensors of one dtype and no attributes, outside torch.func and
    forward-AD): the shape rule memoized by shapes (an elementwise op's kernel checks
    broadcasting itself: its rule runs only to explain a failure, as in tapegrad's own
    lane), the kernel on ``Tensor.numpy()`` views, its fresh result handed to PyTorch
    without a copy. Anything else: None, and ``call`` takes it."""
    torch = _torch
    Tensor = torch.Tensor
    fwd = torch.autograd.forward_ad
    transforms = torch._C._are_functorch_transforms_active
    grad_on = torch.is_grad_enabled
    check = not op.elementwise
    recorded = op.differentiable
    memo = {}

    def lane(args):
        if not args or transforms() or fwd._current_level >= 0:
            return None
        dt = None
        rg = False
        for a in args:
            if type(a) is not Tensor:
                return None
            if dt is None:
                dt = a.dtype
                if not dt.is_floating_point or dt not in _T2NP:
                    return None
            elif a.dtype is not dt:
                return None
            if a.requires_grad:
                rg = True
        raw = []
        for a in args:
            v = _views.get((a.data_ptr(), a.shape, a.stride(), dt))
            if v is None:
                v = _small_view(a)
                if v is None:
                    return None
            raw.append(v)
        if check:
            key = tuple(a.shape for a in raw)
            if key not in memo:
                if len(memo) >= _SPECS_MAX:
                    memo.clear()
                memo[key] = _bridge.out_specs(op, [TensorSpec(a.shape, a.dtype) for a in raw],
                                              {})  # the op's own error
        if rg and recorded and grad_on():
            return _Lean.apply(_Call(op, {}, raw), *args)
        return _run(op, raw, args)

    return lane


_VIEWS_MAX = 512
_VIEW_BYTES = 4096
_views = {}  # (data_ptr, shape, strides, dtype) -> a NumPy view of those bytes


def _small_view(t):
    """A NumPy view of CPU float tensor ``t`` (None: not one ``Tensor.numpy`` views,
    such as a tensor on another device: ``call`` gives the error). A small tensor's
    view is kept, keyed by its address, shape, strides and dtype: a later tensor
    with the same key is the same bytes read the same way (the kept view holds its
    memory, so no other tensor is given that address meanwhile), and its view costs
    a dict lookup instead of ``Tensor.numpy`` (a microsecond, a small op's whole
    budget). At most ``_VIEWS_MAX`` small views are kept."""
    if not t.is_cpu or t.is_neg() or t.layout is not _torch.strided:
        return None
    try:
        v = (t.detach() if t.requires_grad else t).numpy()
    except (RuntimeError, TypeError):
        return None
    if v.nbytes <= _VIEW_BYTES and v.size:
        if len(_views) >= _VIEWS_MAX:
            _views.clear()
        _views[(t.data_ptr(), t.shape, t.stride(), t.dtype)] = v
    return v


def _run(op, raw, args):
    """The kernel of a basic one-output op on the inputs' views; a failure gets the
    op's error (its shape rule's, or the kernel's under the op's name)."""
    try:
        out = op.kernel(*raw)
    except (ValueError, TypeError, IndexError, RuntimeError, ZeroDivisionError,
            ArithmeticError, MemoryError) as e:
        _bridge.out_specs(op, [TensorSpec(a.shape, a.dtype) for a in raw], {})
        raise RuntimeError(f"{op.name}: {e}") from e
    if type(out) is np.ndarray and out.base is None and out.flags.writeable:
        return _torch.from_numpy(out)  # the kernel's fresh memory, zero-copy
    return _wrap(op, out, {}, args, raw)


def torch_ops():
    """A namespace with every registered op (built-in and custom, as registered now)
    as a function of ``torch.Tensor``s, differentiable to any order in PyTorch."""
    global _Apply
    torch_module()
    if not isinstance(_Apply, type) or not issubclass(_Apply, _torch.autograd.Function):
        global _Lean
        _Apply, _Lean = _make_apply()
        _lean_apply[0] = _torch._C._FunctionBase.__dict__["apply"].__get__(None, _Lean)
        # an adjoint run on torch.Tensors that binds an op directly reaches the export
        for tp in (_torch.Tensor, _torch.nn.Parameter):
            register_foreign(tp, lambda op, args, attrs: call(op, args, attrs),
                             constant=lambda ref, make: from_numpy(
                                 make(np, numpy_dtype(ref.dtype))))
    ns = types.SimpleNamespace()
    for op in list_ops():
        setattr(ns, op.name, _export(op))
    return ns


# ------------------------------------------------------------------ from_torch
class _FromTorch:
    """``_foreign``'s adapter: a function of torch.Tensors as a registry op."""
    name = "torch"

    @staticmethod
    def run(fn, arrays, attrs):
        torch = _torch
        ts = [from_numpy(a) if isinstance(a, np.ndarray) else a for a in arrays]
        with torch.no_grad():
            return fn(*ts, **attrs)

    @staticmethod
    def to_numpy(o):
        if isinstance(o, _torch.Tensor):
            a = to_numpy(o)
            return a if a.flags.writeable else a.copy()
        return np.asarray(o)

    @staticmethod
    def abstract(fn, specs, attrs):
        """Output specs from meta tensors (no data, no compute); an op without a meta
        kernel runs on zeros instead."""
        torch = _torch

        def run(device):
            xs = [torch.zeros(s.shape, dtype=torch_dtype(s.dtype), device=device)
                  if device == "cpu" else
                  torch.empty(s.shape, dtype=torch_dtype(s.dtype), device=device)
                  for s in specs]
            with torch.no_grad():
                return fn(*xs, **attrs)
        try:
            outs = run("meta")
        except NotImplementedError:
            outs = run("cpu")
        single = not isinstance(outs, (tuple, list))
        res = tuple(TensorSpec(tuple(o.shape), numpy_dtype(o.dtype))
                    for o in ((outs,) if single else outs))
        return res[0] if single else res

    @staticmethod
    def vjp_fn(fn, nin, nout):
        """The vjp of ``fn`` as a function of (inputs, cotangents): PyTorch's autograd
        (``torch.autograd.grad``, with ``create_graph`` when an enclosing vjp of this
        one records, so each order differentiates the one below); ``torch.func.vjp``
        inside torch.func transforms. The plain path skips torch.func's per-call
        wrapping (most of a small op's cost in a training step)."""
        torch = _torch

        def vjp(*a, **attrs):
            if not _transforms_active():
                return _autograd_vjp(fn, nin, nout, a, attrs)
            xs, gs = a[:nin], a[nin:]
            keep = [k for k in range(nout) if gs[k].is_floating_point()]
            fl = [i for i, x in enumerate(xs) if x.is_floating_point()]

            def f(*fx):
                full = list(xs)
                for i, v in zip(fl, fx):
                    full[i] = v
                outs = fn(*full, **attrs)
                outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
                return tuple(outs[k] for k in keep)  # integer outputs: no gradient
            _, pull = torch.func.vjp(f, *[xs[i] for i in fl])
            grads = pull(tuple(gs[k] for k in keep))
            res = [torch.zeros_like(x) for x in xs]
            for i, gr in zip(fl, grads):
                if gr is not None:
                    res[i] = gr
            return tuple(res) if nin > 1 else res[0]
        return vjp


    @staticmethod
    def jvp_fn(fn, nin, nout):
        """The jvp of ``fn`` as a function of (inputs, tangents): ``torch.func.jvp``
        over the floating inputs (which PyTorch's autograd differentiates again, for
        this op's own vjp); integer outputs get zero tangents."""
        torch = _torch

        def jvp(*a, **attrs):
            xs, ts = a[:nin], a[nin:]
            fl = [i for i, x in enumerate(xs) if x.is_floating_point()]

            def f(*fx):
                full = list(xs)
                for i, v in zip(fl, fx):
                    full[i] = v
                outs = fn(*full, **attrs)
                return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            outs, touts = torch.func.jvp(f, tuple(xs[i] for i in fl),
                                         tuple(ts[i].to(xs[i].dtype) for i in fl))
            res = tuple(t if o.is_floating_point() else torch.zeros_like(o)
                        for o, t in zip(outs, touts))
            return res if nout > 1 else res[0]
        return jvp


def _autograd_vjp(fn, nin, nout, a, attrs):
    torch = _torch
    xs, gs = list(a[:nin]), a[nin:]
    outer = torch.is_grad_enabled()  # an enclosing vjp differentiates this one
    fl = [i for i, x in enumerate(xs) if x.is_floating_point()]
    with torch.enable_grad():
        for i in fl:
            if not (outer and xs[i].requires_grad):
                xs[i] = xs[i].detach().requires_grad_(True)
        outs = fn(*xs, **attrs)
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, gs)
                 if g.is_floating_point() and o.is_floating_point() and o.requires_grad]
        grads = [None] * len(fl)
        if pairs and fl:
            grads = torch.autograd.grad([o for o, _ in pairs], [xs[i] for i in fl],
                                        [g for _, g in pairs], create_graph=outer,
                                        allow_unused=True)
    res = [torch.zeros_like(x) for x in xs]
    for i, gr in zip(fl, grads):
        if gr is not None:
            res[i] = gr
    return tuple(res) if nin > 1 else res[0]


def from_torch(fn, *, name, nout=1):
    """A function of torch.Tensors as a registered tapegrad op ``name`` (see
    ``tapegrad.interop.from_torch``)."""
    from ._foreign import foreign_op
    torch_module()
    return foreign_op(_FromTorch, fn, name, nout)
