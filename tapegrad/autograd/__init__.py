"""``tg.autograd``: PyTorch's ``torch.autograd`` namespace, with ``Function``.

>>> import tapegrad as tg
>>> class Cube(tg.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x ** 3
...     @staticmethod
...     def backward(ctx, g):
...         x, = ctx.saved_tensors
...         return g * 3 * x * x          # tapegrad ops: differentiates again
>>> x = tg.tensor([2.0], requires_grad=True)
>>> Cube.apply(x).sum().backward()
>>> x.grad
tensor([12.])

A ``Function`` call is one op of the registry's kind (an ``OpDef`` like those
``tg.custom_op`` builds, one per Function class and number of inputs/outputs):
``forward`` runs once, on Tensors, with recording off; the call then records one
node whose adjoint runs ``backward``. On a plain ``backward()`` the adjoint runs with
recording off; under ``create_graph=True`` (or an outer ``Tape``) it records, so a
``backward`` written with tapegrad ops differentiates again.
"""
import functools
import sys as _sys

from .. import forward_ad
from ..autodiff import (
    backward,
    detect_anomaly,
    enable_grad,
    grad,
    is_grad_enabled,
    no_grad,
    set_detect_anomaly,
    set_grad_enabled,
)
from ..dispatch import bind
from ..ops import zeros
from ..ops_registry import OpDef, TensorSpec
from ..ops_registry.opdef import validate
from ..tape import state as _state
from ..tensor import Tensor, buffer, wrap
from ..utilities import inference_mode
from . import (
    functional,  # noqa: F401  (torch.autograd.functional: values at a point)
    graph,  # noqa: F401  (torch.autograd.graph: saved-tensor hooks, Node)
)

__all__ = ["Function", "FunctionCtx", "once_differentiable", "grad", "backward",
           "forward_ad", "functional", "graph", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "detect_anomaly", "set_detect_anomaly", "inference_mode"]


class FunctionCtx:
    """The ``ctx`` that ``forward``/``setup_context`` and ``backward`` share."""

    def __init__(self):
        self.needs_input_grad = ()
        self.materialize_grads = True
        self._saved = None
        self._non_diff = set()
        self._dirty = ()
        self._outs = None  # the recorded outputs (to give saved outputs back)
        self._used = False
        self._saved_fwd = None

    def save_for_backward(self, *tensors):
        """Keep ``tensors`` (or ``None``) for ``backward``; read them as ``saved_tensors``.
        A saved tensor written in place before ``backward`` is refused then."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._saved = tuple((t, t._vc[0]) if t is not None else (None, None)
                            for t in tensors)

    @property
    def saved_tensors(self):
        if self._saved is None:
            return ()
        if self._used:
            raise RuntimeError("Trying to backward through the graph a second time (or "
                               "directly access saved tensors after they have already been "
                               "freed); specify retain_graph=True the first time")
        out = []
        for i, (t, v) in enumerate(self._saved):
            if t is None:
                out.append(None)
                continue
            if isinstance(t, _OutRef):
                t = t.get(self)
            elif isinstance(t, _Packed):
                t = t.get()
            elif t._vc[0] != v:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: saved tensor {i} (shape {tuple(t.shape)}) is at "
                    f"version {t._vc[0]}; expected version {v}. Hint: avoid modifying it "
                    f"in place, or clone() it before the in-place change")
            out.append(t)
        return tuple(out)

    def save_for_forward(self, *tensors):
        """Keep ``tensors`` for ``jvp`` (read there as ``saved_tensors``)."""
        saved = self._saved
        self.save_for_backward(*tensors)
        self._saved_fwd, self._saved = self._saved, saved

    def mark_non_differentiable(self, *tensors):
        """Outputs that get no gradient (they do not require grad; their gradient in
        ``backward`` is zeros, or ``None`` without materialized grads)."""
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        """Inputs ``forward`` wrote in place (and returns): accepted for PyTorch's
        programs; the returned tensor is recorded as the op's output."""
        self._dirty = tensors

    def set_materialize_grads(self, value):
        """``False``: ``backward`` receives ``None`` (not zeros) for outputs without a
        gradient."""
        self.materialize_grads = bool(value)


class _OutRef:
    """A saved tensor that is one of forward's outputs: given back as the recorded
    output (no reference cycle; under create_graph it is linked to the node)."""
    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k

    def get(self, ctx):
        return ctx._outs[self.k]


class _Packed:
    """A saved tensor as saved_tensors_hooks' pack hook gave it, and its unpack hook."""
    __slots__ = ("value", "unpack")

    def __init__(self, value, unpack):
        self.value, self.unpack = value, unpack

    def get(self):
        t = self.unpack(self.value)
        if not isinstance(t, Tensor):
            raise TypeError(f"Output of saved tensor unpack_hook expected to be a Tensor but "
                            f"got result of type {type(t).__name__}")
        return t


class _FunctionMeta(type):
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)
        cls._ops = {}


class Function(metaclass=_FunctionMeta):
    """Subclass with ``forward(ctx, *args)`` (or ``forward(*args)`` plus
    ``setup_context(ctx, inputs, output)``) and ``backward(ctx, *grad_outputs)`` static
    methods; call with ``apply``. ``backward`` returns one gradient (or ``None``) per
    argument of ``forward``."""

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method "
                                  "for your custom autograd.Function to use it with "
                                  "backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Call it as " + type(self).__name__ +
                           ".apply(...))")

    @classmethod
    def apply(cls, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply takes positional arguments only "
                            f"(got keywords {sorted(kwargs)}), as in PyTorch")
        return _apply(cls, args)


def _has_setup_context(cls):
    return cls.setup_context is not Function.setup_context


def _apply(cls, args):
    ctx = FunctionCtx()
    grad_on = _state.grad_enabled
    tpos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    ctx._arg_is_tensor = tuple(isinstance(a, Tensor) for a in args)
    ctx._args_meta = tuple((tuple(a.shape), a.dtype) if isinstance(a, Tensor) else None
                           for a in args)
    ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad
                                 for a in args)
    with no_grad():
        if _has_setup_context(cls):
            out = cls.forward(*args)
            cls.setup_context(ctx, args, out)
        else:
            out = cls.forward(ctx, *args)
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    opos = [k for k, o in enumerate(outs) if isinstance(o, Tensor)]
    if not opos:
        raise TypeError(f"{cls.__name__}.forward must return a Tensor or a tuple with at "
                        f"least one Tensor, got {type(out).__name__}")
    if not _state.dual and (not grad_on or (not any(ctx.needs_input_grad)
                                            and not _state.tapes)):
        return out  # nothing records: forward's outputs as they are
    # saved outputs are given back as the recorded ones (no cycle through the node)
    if ctx._saved is not None:
        ids = {id(outs[k]): j for j, k in enumerate(opos)}
        ctx._saved = tuple((_OutRef(ids[id(t)]), None) if t is not None and id(t) in ids
                           else (t, v) for t, v in ctx._saved)
        if _state.saved_hooks:  # saved_tensors_hooks: each saved input packed, now
            pack, unpack = _state.saved_hooks[-1]
            ctx._saved = tuple((_Packed(pack(t), unpack), None) if isinstance(t, Tensor)
                               else (t, v) for t, v in ctx._saved)
    non_diff = [id(outs[k]) in ctx._non_diff for k in opos]
    arrays = tuple(buffer(outs[k]) for k in opos)
    op = _op_for(cls, len(tpos), len(opos))
    res = bind(op, *[args[i] for i in tpos], fctx=_Call(ctx, arrays, non_diff,
                                                        [outs[k] for k in opos]))
    res = (res,) if len(opos) == 1 else tuple(res)
    res = tuple(r.detach() if nd else r for r, nd in zip(res, non_diff))
    ctx._outs = res
    final = list(outs)
    for k, r in zip(opos, res):
        final[k] = r
    return final[0] if single else tuple(final)


class _Call:
    """One call's attr: its ctx and forward's output arrays (hashed by identity)."""
    __slots__ = ("ctx", "arrays", "non_diff", "shapes", "dtypes", "cls")

    def __init__(self, ctx, arrays, non_diff, outs):
        self.ctx, self.arrays, self.non_diff = ctx, arrays, non_diff
        self.shapes = tuple(tuple(o.shape) for o in outs)
        self.dtypes = tuple(o.dtype for o in outs)


def _op_for(cls, nin, nout):
    key = (nin, nout)
    op = cls._ops.get(key)
    if op is None:
        op = cls._ops[key] = _make_op(cls, nin, nout)
    return op


def _make_op(cls, nin, nout):
    name = cls.__name__

    def kernel(*arrays, fctx):
        return fctx.arrays[0] if nout == 1 else fctx.arrays

    def infer(*specs, fctx):
        s = tuple(TensorSpec(tuple(a.shape), a.dtype) for a in fctx.arrays)
        return s[0] if nout == 1 else s

    def vjp(node_ctx, g):
        call = node_ctx.attrs["fctx"]
        return _run_backward(cls, call, g if nout > 1 else (g,), nin)

    op_jvp = None
    if cls.jvp is not Function.jvp:
        def op_jvp(jctx, *tangents):
            return _run_jvp(cls, jctx.attrs["fctx"], tangents, nout)

    op = OpDef(name=name, kernel=kernel, infer=infer, args=tuple(f"x{i}" for i in range(nin)),
               vjp=vjp, jvp=op_jvp, saves=(), nout=nout, infer_first=False,
               samples=lambda dtype=None: [], doc=cls.__doc__ or "")
    op._custom = True
    validate(op)
    return op


def _run_backward(cls, call, gs, nin):
    ctx = call.ctx
    traced = any(isinstance(g, Tensor) for g in gs)
    grads = []
    for k, g in enumerate(gs):
        if g is not None and call.non_diff[k]:
            g = None
        if g is None:
            if ctx.materialize_grads:
                grads.append(zeros(call.shapes[k], dtype=call.dtypes[k]))
            else:
                grads.append(None)
        else:
            grads.append(g if isinstance(g, Tensor) else wrap(g))
    if traced:
        with enable_grad():
            res = cls.backward(ctx, *grads)
    else:
        with no_grad():
            res = cls.backward(ctx, *grads)
    if not isinstance(res, tuple):
        res = (res,)
    nargs = len(ctx.needs_input_grad)
    if len(res) != nargs:
        if len(res) > nargs and all(r is None for r in res[nargs:]):
            res = res[:nargs]  # PyTorch allows extra trailing Nones
        else:
            raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number "
                               f"of gradients (expected {nargs}, got {len(res)})")
    out = []
    for i, r in enumerate(res):
        if not ctx._arg_is_tensor[i]:
            if r is not None:
                raise RuntimeError(f"function {cls.__name__}Backward returned a gradient "
                                   f"different than None at position {i + 1}, but the "
                                   f"corresponding forward input was not a Variable")
            continue
        if r is not None and not isinstance(r, Tensor):
            raise TypeError(f"function {cls.__name__}Backward returned a {type(r).__name__} "
                            f"at position {i + 1}; expected a Tensor or None")
        out.append(None if r is None else (r if traced else buffer(r)))
    return tuple(out)


def _run_jvp(cls, call, tangents, nout):
    """Forward mode: ``cls.jvp(ctx, *tangents)``, one tangent per forward argument (None
    for a non-tensor, zeros for a tensor without one), giving one per output."""
    ctx = call.ctx
    it = iter(tangents)
    full = []
    for is_t, shape_src in zip(ctx._arg_is_tensor, ctx._args_meta):
        if not is_t:
            full.append(None)
            continue
        t = next(it)
        full.append(t if t is not None else zeros(shape_src[0], dtype=shape_src[1]))
    saved = ctx._saved
    ctx._saved = ctx._saved_fwd if ctx._saved_fwd is not None else saved
    try:
        res = cls.jvp(ctx, *full)
    finally:
        ctx._saved = saved
    if not isinstance(res, tuple):
        res = (res,)
    if len(res) != nout:
        raise RuntimeError(f"function {cls.__name__}.jvp returned {len(res)} tangents for "
                           f"{nout} outputs")
    return tuple(None if nd else r for r, nd in zip(res, call.non_diff))


def once_differentiable(fn):
    """Decorate ``backward`` that is not itself differentiable: it runs with recording
    off, so a higher-order gradient through it is zero (PyTorch raises there)."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            res = fn(ctx, *[a.detach() if isinstance(a, Tensor) else a for a in args])
        return res
    return wrapper



# ``torch.autograd.function.Function`` / ``once_differentiable``: the same names here
function = _sys.modules[__name__]
_sys.modules[__name__ + ".function"] = function
# ``import torch.autograd.forward_ad as fwAD``: the same module as ``tg.forward_ad``
_sys.modules[__name__ + ".forward_ad"] = forward_ad

