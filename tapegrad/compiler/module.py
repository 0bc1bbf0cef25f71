"""``tg.compile(module)``: the module, its ``forward`` compiled, the backward outside.

``CompiledModule`` behaves as the module it wraps (attributes, ``parameters``,
``state_dict``, ``train``/``eval``, hooks are the module's). A call under grad mode
whose inputs or parameters require grad replays the forward program (captured under
``no_grad``) and records ONE node on the tape, over the tensor arguments and the
parameters. Its adjoint replays a second program, the forward recomputed and
differentiated by ``tg.autograd.grad`` with the output gradients as arguments (the
saved values are the node's inputs, so a second forward before the first backward
overwrites nothing the first needs). The random generator's state at the forward and
the module's buffers are put back around that recomputation, so a dropout mask is the
same and running statistics are updated once. A backward with ``create_graph=True``
recomputes eagerly, recording, so higher derivatives are right. A module with hooks
anywhere in its tree runs eagerly (the hooks are Python the program would not run).
"""
import warnings

import numpy as np

from ..dispatch import bind
from ..grad_mode import enable_grad, is_grad_enabled, no_grad
from ..ops.creation import get_rng_state, set_rng_state
from ..ops_registry.opdef import OpDef, validate
from ..tensor import Tensor, buffer, mark_written, wrap
from .api import Compiled

__all__ = ["CompiledModule"]

_OWN = ("_orig_mod", "_fwd", "_bwd", "_eager_calls", "_node_calls", "_warned", "_ops",
        "_warned_out")


class _Call:
    """One call's state, handed to the node (the forward's results until the kernel
    takes them; the output shapes, the random state and the arguments for the adjoint)."""
    __slots__ = ("computed", "outs", "rng", "args", "positions")

    def __init__(self, computed, outs, rng, args, positions):
        self.computed, self.outs, self.rng = computed, outs, rng
        self.args, self.positions = args, positions


class CompiledModule:
    """What ``tg.compile(module)`` returns (see the module docstring)."""

    def __init__(self, module, fuse=True, max_captures=8):
        d = self.__dict__
        d["_orig_mod"] = module
        model = module

        def forward(*args, **kwargs):
            return model.forward(*args, **kwargs)

        def joint(n_args, *tensors):
            args, cots = tensors[:n_args], tensors[n_args:]
            with enable_grad():
                outs, _ = _flatten(model.forward(*args))
                params = [p for p in model.parameters() if p.requires_grad]
                wrt = params + [a for a in args if isinstance(a, Tensor) and a.requires_grad]
                pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
                from ..autodiff import grad
                return grad([o for o, _ in pairs], wrt, [c for _, c in pairs],
                            allow_unused=True)
        forward.__qualname__ = f"{type(module).__name__}.forward"
        joint.__qualname__ = f"{type(module).__name__}.forward+backward"
        d["_fwd"] = Compiled(forward, fuse=fuse, max_captures=max_captures)
        d["_bwd"] = Compiled(joint, fuse=fuse, max_captures=max_captures)
        d["_eager_calls"] = 0
        d["_node_calls"] = 0
        d["_warned"] = False
        d["_warned_out"] = False
        d["_ops"] = {}

    # ------------------------------------------------------------ behaving as the module
    def __getattr__(self, name):
        return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def __delattr__(self, name):
        delattr(self._orig_mod, name)

    def __dir__(self):
        return sorted(set(dir(self._orig_mod)) | set(_OWN))

    def __getitem__(self, i):  # (Sequential, ModuleList, ModuleDict)
        return self._orig_mod[i]

    def __len__(self):
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"

    def train(self, mode=True):
        self._orig_mod.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def forward(self, *args, **kwargs):
        return self(*args, **kwargs)

    # ------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        m = self._orig_mod
        if _has_hooks(m):
            self.__dict__["_eager_calls"] += 1
            return m(*args, **kwargs)
        tensors = [a for a in args if isinstance(a, Tensor)]
        params = [p for p in m.parameters() if p.requires_grad]
        if not is_grad_enabled() or not (params or any(t.requires_grad for t in tensors)):
            return self._fwd(*args, **kwargs)
        if kwargs or self._fwd.runs_eagerly(args, kwargs, False):
            # (a forward that cannot be replayed runs eagerly, recording as usual)
            self.__dict__["_eager_calls"] += 1
            return m(*args, **kwargs)
        rng = get_rng_state()
        with no_grad():  # (replayed, or run eagerly when it cannot be: the node's
            out = self._fwd(*args)  # adjoint recomputes it either way)
        outs, spec = _flatten(out)
        if spec is None or not outs:  # outputs other than tensors in tuples, lists, dicts
            self.__dict__["_eager_calls"] += 1
            d = self.__dict__
            if not d["_warned_out"]:
                d["_warned_out"] = True
                warnings.warn(f"tg.compile: {type(m).__name__} returns "
                              f"{type(out).__name__} outside tensors in tuples, lists and "
                              f"dicts: it runs eagerly (this call ran its forward twice)",
                              RuntimeWarning, stacklevel=2)
            return m(*args)
        self.__dict__["_node_calls"] += 1
        op = self._node_op(len(tensors), len(params), len(outs))
        call = _Call(tuple(buffer(o) for o in outs),
                     [(tuple(o.shape), buffer(o).dtype) for o in outs], rng, args,
                     [i for i, a in enumerate(args) if isinstance(a, Tensor)])
        res = bind(op, *tensors, *params, call=call)
        return _unflatten(spec, iter((res,) if len(outs) == 1 else res))

    def _node_op(self, n_in, n_params, nout):
        """The node's OpDef (one per arity, made once): the call's own state (the
        forward's results, the arguments, the random state) comes as the ``call`` attr."""
        key = (n_in, n_params, nout)
        op = self._ops.get(key)
        if op is not None:
            return op
        me = self

        def run(*arrays, call):
            out = call.computed
            call.computed = None
            return out[0] if nout == 1 else out

        def vjp(ctx, g):
            call = ctx.attrs["call"]
            gs = [g] if nout == 1 else list(g)
            traced = any(isinstance(x, Tensor) for x in gs if x is not None)
            now = get_rng_state()
            kept = [(b, buffer(b).copy()) for b in me._orig_mod.buffers()]
            set_rng_state(call.rng)
            try:
                if traced:
                    return me._eager_vjp(call.args, call.positions, ctx, gs)
                return me._replayed_vjp(call.args, call.positions, ctx, gs, call.outs)
            finally:
                set_rng_state(now)
                for b, v in kept:  # the recomputation's buffer writes, undone
                    buffer(b)[...] = v
                    mark_written(b)

        names = tuple(f"arg{i}" for i in range(n_in + n_params))
        op = OpDef(name=f"compiled[{type(self._orig_mod).__name__}]", kernel=run,
                   infer=lambda *s, **k: None, args=names, vjp=vjp, saves=names, nout=nout,
                   samples=lambda dtype=None: [])
        validate(op)
        self._ops[key] = op
        return op

    def _replayed_vjp(self, args, positions, ctx, gs, outs):
        n_in = len(positions)
        full = list(args)
        for p, a in zip(positions, ctx.inputs[:n_in]):
            t = wrap(a)
            t.requires_grad = args[p].requires_grad
            full[p] = t
        cots = [wrap(g) if g is not None else wrap(np.zeros(shape, dtype))
                for g, (shape, dtype) in zip(gs, outs)]
        grads = self._bwd(len(full), *full, *cots)
        params = [p for p in self._orig_mod.parameters() if p.requires_grad]
        gx = iter(grads[len(params):])
        res = []
        for p in positions:
            v = next(gx) if full[p].requires_grad else None
            res.append(None if v is None else buffer(v))
        return res + [None if v is None else buffer(v) for v in grads[:len(params)]]

    def _eager_vjp(self, args, positions, ctx, gs):
        if not self._warned:
            self.__dict__["_warned"] = True
            warnings.warn("tg.compile: a backward with create_graph=True through a compiled "
                          "module recomputes its forward eagerly", RuntimeWarning,
                          stacklevel=2)
        from ..autodiff import grad
        n_in = len(positions)
        full = list(args)
        for p, t in zip(positions, ctx.inputs[:n_in]):
            full[p] = t if isinstance(t, Tensor) else args[p]
        params = [p for p in self._orig_mod.parameters() if p.requires_grad]
        with enable_grad():
            outs, _ = _flatten(self._orig_mod.forward(*full))
        pairs = [(o, g) for o, g in zip(outs, gs) if g is not None and o.requires_grad]
        xs = [full[p] for p in positions]
        need = [x for x in xs if x.requires_grad] + params
        if not pairs or not need:
            return [None] * (n_in + len(params))
        grads = iter(grad([o for o, _ in pairs], need, [g for _, g in pairs],
                          allow_unused=True, create_graph=True))
        res = [next(grads) if x.requires_grad else None for x in xs]
        return res + [next(grads) for _ in params]

    # ------------------------------------------------------------ reporting
    def stats(self):
        f, b = self._fwd.stats(), self._bwd.stats()
        s = dict(f)
        s["captures"] = f["captures"] + b["captures"]
        s["replays"] = f["replays"]
        s["backward_replays"] = b["replays"]
        s["backward_captures"] = b["captures"]
        s["eager_calls"] = f["eager_calls"] + self._eager_calls
        s["recaptures"] = f["recaptures"] + b["recaptures"]
        return s


def _flatten(out):
    """(the tensors in ``out``, a tensor or nested tuples/lists of them; the structure,
    or None when something else is in it)."""
    if isinstance(out, Tensor):
        return [out], "T"
    if out is None:
        return [], "N"
    if isinstance(out, (tuple, list, dict)):
        keys = list(out) if isinstance(out, dict) else None
        flat, specs = [], []
        for o in (out.values() if keys is not None else out):
            f, s = _flatten(o)
            if s is None:
                return [], None
            flat += f
            specs.append(s)
        return flat, (type(out), keys, specs)
    return [], None


def _unflatten(spec, it):
    if spec == "T":
        return next(it)
    if spec == "N":
        return None
    tp, keys, specs = spec
    vals = [_unflatten(s, it) for s in specs]
    if keys is not None:
        return tp(zip(keys, vals))
    return tp(vals)


def _has_hooks(m):
    for sub in m.modules():
        if sub._forward_hooks or sub._forward_pre_hooks or sub._backward_hooks \
                or sub._backward_pre_hooks:
            return True
    return False

