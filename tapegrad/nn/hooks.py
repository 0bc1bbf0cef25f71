"""Module backward hooks (``register_full_backward_hook`` and
``register_full_backward_pre_hook``), as PyTorch's ``BackwardHook``.

A module with backward hooks runs its forward on identity copies of its tensor inputs
and returns identity copies of its tensor outputs. Each identity is one recorded op
over all the tensors (one node): the walker reaches the outputs' node first, with
every ``grad_output`` at once (the backward pre-hooks may replace them), then the
inputs' node with every ``grad_input``: the hooks run there, as
``hook(module, grad_input, grad_output)``, and what they return replaces
``grad_input``. When no input requires grad the hooks run at the outputs' node with
``grad_input`` all ``None``, as PyTorch.

The identity ops are OpDefs that are not registered (they carry per-call state): they
belong to no public function and need no samples.
"""
from ..dispatch import bind
from ..ops import zeros
from ..ops_registry import OpDef, TensorSpec
from ..ops_registry.opdef import validate
from ..tensor import Tensor, buffer, wrap

__all__ = ["BackwardHook"]


class _State:
    """Per-call state, carried as the identity ops' attribute (unhashable on purpose:
    dispatch's shape-rule memo never keeps it)."""
    __hash__ = None

    def __init__(self, module, hooks, pre_hooks, n_inputs):
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.n_inputs = n_inputs
        self.input_idx = ()
        self.grad_output = None
        self.n_outputs = 0
        self.output_idx = ()


_OPS = {}


def _identity_op(n, side):
    op = _OPS.get((n, side))
    if op is not None:
        return op

    def kernel(*arrays, state):
        return arrays[0].copy() if n == 1 else tuple(a.copy() for a in arrays)

    def infer(*specs, state):
        out = tuple(TensorSpec(tuple(s.shape), s.dtype) for s in specs)
        return out[0] if n == 1 else out

    def vjp(ctx, g):
        g = (g,) if n == 1 else tuple(g)
        st = ctx.attrs["state"]
        return _on_outputs(st, g) if side == "out" else _on_inputs(st, g)

    op = OpDef(name=f"backward_hook_{side}", kernel=kernel, infer=infer,
               args=tuple(f"x{i}" for i in range(n)), vjp=vjp, nout=n,
               samples=lambda dtype=None: [], torch=lambda *a, **k: None)
    validate(op)
    _OPS[(n, side)] = op
    return op


def _as_tensors(grads):
    """The walker's gradients as Tensors (raw arrays when nothing records), and
    whether they were raw."""
    raw = any(g is not None and not isinstance(g, Tensor) for g in grads)
    return tuple(wrap(g) if g is not None and not isinstance(g, Tensor) else g
                 for g in grads), raw


def _back(grads, raw):
    if not raw:
        return tuple(grads)
    return tuple(buffer(g) if isinstance(g, Tensor) else g for g in grads)


def _check(name, new, old):
    if not isinstance(new, (tuple, list)):
        new = (new,)
    if len(new) != len(old):
        raise RuntimeError(f"Backward hook returned an invalid number of grad_{name}, got "
                           f"{len(new)}, but expected {len(old)}")
    return tuple(new)


def _on_outputs(st, g):
    grads, raw = _as_tensors(g)
    full = [None] * st.n_outputs
    for i, k in enumerate(st.output_idx):
        full[k] = grads[i]
    full = tuple(full)
    for hook in list(st.pre_hooks.values()):
        res = hook(st.module, full)
        if res is not None:
            full = _check("output", res, full)
    st.grad_output = full
    if not st.input_idx:   # no input requires grad: the hooks run now
        grad_input = (None,) * st.n_inputs
        for hook in list(st.hooks.values()):
            if hook(st.module, grad_input, full) is not None:
                raise RuntimeError("Backward hook for Modules where no input requires "
                                   "gradient should always return None or None for all "
                                   "gradients.")
    return _back(tuple(full[k] for k in st.output_idx), raw)


def _on_inputs(st, g):
    grads, raw = _as_tensors(g)
    # a tensor input that does not require grad gets zeros, as PyTorch (its identity
    # marks it non-differentiable, and the engine materializes its gradient)
    full = [None if z is None else zeros(z.shape, dtype=z.dtype, device=z.device)
            for z in st.constants]
    for i, k in enumerate(st.input_idx):
        full[k] = grads[i]
    full = tuple(full)
    grad_output = st.grad_output if st.grad_output is not None else (None,) * st.n_outputs
    for hook in list(st.hooks.values()):
        res = hook(st.module, full, grad_output)
        if res is not None:
            full = _check("input", res, full)
    return _back(tuple(full[k] for k in st.input_idx), raw)


class BackwardHook:
    """One module call's backward hooks: ``setup_input_hook(args)`` before the
    forward, ``setup_output_hook(result)`` after it."""

    def __init__(self, module, hooks, pre_hooks):
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.state = None

    def setup_input_hook(self, args):
        st = self.state = _State(self.module, self.hooks, self.pre_hooks, len(args))
        idx = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad)
        st.input_idx = idx
        st.constants = [a if isinstance(a, Tensor) and not a.requires_grad else None
                        for a in args]
        if not idx:
            return args
        new = bind(_identity_op(len(idx), "in"), *(args[i] for i in idx), state=st)
        new = (new,) if len(idx) == 1 else new
        args = list(args)
        for k, t in zip(idx, new):
            args[k] = t
        return tuple(args)

    def setup_output_hook(self, result):
        st = self.state
        single = isinstance(result, Tensor)
        outs = (result,) if single else (tuple(result) if isinstance(result, (tuple, list))
                                          else None)
        if outs is None:
            return result
        st.n_outputs = len(outs)
        idx = tuple(i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad)
        st.output_idx = idx
        if not idx:
            return result
        new = bind(_identity_op(len(idx), "out"), *(outs[i] for i in idx), state=st)
        new = (new,) if len(idx) == 1 else new
        outs = list(outs)
        for k, t in zip(idx, new):
            outs[k] = t
        if single:
            return outs[0]
        return type(result)(outs)
