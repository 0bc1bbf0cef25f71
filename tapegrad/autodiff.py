"""Reverse mode for users: ``backward``, ``grad``, grad-mode contexts, ``Tape``,
``checkpoint`` and ``detect_anomaly``."""
import functools

from . import walker as _walker
from .devices import xp_of as _xp_of
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .ops.creation import raw_rng_state, set_raw_rng_state, zeros_like
from .ops.shape import stack as _stack
from .tape import state as _state
from .tensor import Tensor, wrap

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "Tape", "checkpoint", "detect_anomaly"]


# ---------------------------------------------------------------- backward / grad
def _as_list(x, name):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return list(x)
    raise TypeError(f"{name}: expected a Tensor or a sequence of Tensors, got {type(x).__name__}")


def _seeds(fn, outputs, grad_outputs, traced):
    seeds = []
    gos = grad_outputs if grad_outputs is not None else [None] * len(outputs)
    if len(gos) != len(outputs):
        raise RuntimeError(f"{fn}: got {len(gos)} gradients for {len(outputs)} outputs")
    for out, go in zip(outputs, gos):
        if not isinstance(out, Tensor):
            raise TypeError(f"{fn}: outputs must be Tensors, got {type(out).__name__}")
        if go is None:
            if out._data.size != 1:
                raise RuntimeError(f"{fn}: grad can be implicitly created only for scalar "
                                   f"outputs; got shape {tuple(out.shape)}. Pass a gradient "
                                   f"of that shape (grad_tensors/grad_outputs)")
            seed = _xp(out).empty(out._data.shape, dtype=out._data.dtype)
            seed.fill(1)  # as ones(), without its Python layer
        else:
            if not isinstance(go, Tensor):
                from .ops.creation import as_tensor
                go = as_tensor(go)
            if tuple(go.shape) != tuple(out.shape):
                raise RuntimeError(f"{fn}: mismatch in shape: grad_output has shape "
                                   f"{tuple(go.shape)} and output has shape {tuple(out.shape)}")
            seed = go if traced else go._data
        seeds.append(seed)
    for obs in _state.observers:  # tg.compile's capture: the seeds are its constants
        note = getattr(obs, "seeds", None)
        if note is not None:
            note([s._data if isinstance(s, Tensor) else s for s in seeds])
    return seeds


def _xp(t):
    return _xp_of(t._data)


def _check_outputs(fn, outputs):
    for o in outputs:
        if not o.requires_grad and o._node is None:
            raise RuntimeError(f"{fn}: element 0 of tensors does not require grad and does "
                               f"not have a grad_fn (shape {tuple(o.shape)}); did you compute "
                               f"it under no_grad, or forget requires_grad=True?")


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaf) into each leaf's ``.grad`` (PyTorch semantics)."""
    outputs = _as_list(tensors, "backward")
    gts = _as_list(grad_tensors, "backward")
    if retain_graph is None:
        retain_graph = create_graph
    _check_outputs("backward", outputs)
    traced = create_graph or bool(_state.vmap_levels)  # batched tensors: adjoints on Tensors
    seeds = _seeds("backward", outputs, gts, traced)
    ins = _as_list(inputs, "backward")
    if ins is not None:
        if not ins:
            raise RuntimeError("backward: 'inputs' argument to backward() cannot be empty")
        res = _walker.backward_pass(outputs, seeds, inputs=ins, retain_graph=retain_graph,
                                  traced=traced)
        for t, g in zip(ins, res):
            if g is None:
                continue
            if create_graph:
                t._grad = g if t._grad is None else t._grad + g
            else:
                gd = g._data if isinstance(g, Tensor) else g
                t._grad = wrap(gd.copy()) if t._grad is None else wrap(t._grad._data + gd)
            _walker.run_post_hooks(t)
        return None
    _walker.backward_pass(outputs, seeds, retain_graph=retain_graph, traced=traced)
    return None


def tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """``Tensor.backward``: ``tg.backward(self, gradient, ...)``."""
    backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=None, materialize_grads=False, is_grads_batched=False):
    """Gradients of ``outputs`` with respect to ``inputs``, as a tuple (no ``.grad``).

    ``is_grads_batched``: the first dim of each of ``grad_outputs`` is a batch of
    cotangents; each result gets that batch dim in front (as PyTorch's)."""
    if is_grads_batched:
        return _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)
    outs = _as_list(outputs, "grad")
    ins = _as_list(inputs, "grad")
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    if retain_graph is None:
        retain_graph = create_graph
    for t in ins:
        if not isinstance(t, Tensor):
            raise TypeError(f"grad: inputs must be Tensors, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError("grad: one of the differentiated Tensors does not require grad")
    _check_outputs("grad", outs)
    traced = create_graph or bool(_state.vmap_levels)  # batched tensors: adjoints on Tensors
    return _grad_walk(outs, ins, grad_outputs, retain_graph, traced, traced, allow_unused,
                      materialize_grads)


def _grad_walk(outs, ins, grad_outputs, retain_graph, traced, record, allow_unused,
               materialize_grads):
    """``grad``'s walk. ``traced``: the adjoints run on Tensors; ``record``: and are
    recorded (traced without recording: forward over reverse, where only the
    tangents flow through the adjoints, and nothing differentiates the walk again)."""
    seeds = _seeds("grad", outs, _as_list(grad_outputs, "grad"), traced)
    res = _walker.backward_pass(outs, seeds, inputs=ins, retain_graph=retain_graph,
                                traced=traced, record=record)
    result = []
    for i, (t, g) in enumerate(zip(ins, res)):
        if g is None:
            if materialize_grads:
                g = zeros_like(t)
            elif not allow_unused:
                raise RuntimeError(f"grad: The differentiated Tensor at index {i} appears to "
                                   f"not have been used in the graph. Set allow_unused=True "
                                   f"if this is the desired behavior.")
        elif not isinstance(g, Tensor):
            g = wrap(g)
        result.append(g)
    return tuple(result)


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    """One backward per cotangent of the batch (vmap's loop fallback), stacked."""
    gos = _as_list(grad_outputs, "grad")
    if gos is None or any(not isinstance(g, Tensor) or g.ndim == 0 for g in gos):
        raise RuntimeError("grad: is_grads_batched=True needs grad_outputs, each a Tensor "
                           "with the batch as its first dim")
    sizes = {g.shape[0] for g in gos}
    if len(sizes) != 1:
        raise RuntimeError(f"grad: is_grads_batched=True needs one batch size, got {sorted(sizes)}")
    n = sizes.pop()
    rows = [grad(outputs, inputs, [g[b] for g in gos], retain_graph=True if b < n - 1 else
                 retain_graph, create_graph=create_graph, allow_unused=True)
            for b in range(n)]
    result = []
    for k, t in enumerate(_as_list(inputs, "grad")):
        col = [r[k] for r in rows]
        if all(c is None for c in col):
            if materialize_grads:
                col = [zeros_like(t) for _ in col]
            elif not allow_unused:
                raise RuntimeError("grad: one of the differentiated Tensors appears to not "
                                   "have been used in the graph. Set allow_unused=True if "
                                   "this is the desired behavior")
            else:
                result.append(None)
                continue
        col = [zeros_like(t) if c is None else c for c in col]
        result.append(_stack(col))
    return tuple(result)


# ---------------------------------------------------------------- explicit tapes
class Tape:
    """An explicit tape, as TensorFlow's ``GradientTape``.

    >>> import tapegrad as tg
    >>> x = tg.tensor(3.0)
    >>> with tg.Tape() as tape:
    ...     tape.watch(x)
    ...     y = x * x
    >>> tape.gradient(y, x)
    tensor(6.)

    Tensors that require grad are watched automatically; others need ``watch``.
    Nothing after the ``with`` block is recorded on it. Tapes nest: a gradient
    taken on an inner tape while an outer one records is recorded on the outer one.
    """

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self.persistent = persistent
        self._used = False
        self._active = False
        self._paused = False

    def __enter__(self):
        _state.tapes.append(self)
        self._active = True
        return self

    def __exit__(self, *exc):
        if self in _state.tapes:
            _state.tapes.remove(self)
        self._active = False
        return False

    def watch(self, tensor):
        """Record operations on ``tensor`` (or each tensor of a nested structure)."""
        for t in _flatten(tensor):
            if not isinstance(t, Tensor):
                raise TypeError(f"Tape.watch: expected Tensors, got {type(t).__name__}")
            if not t.is_floating_point():
                raise TypeError(f"Tape.watch: only floating tensors can be watched, got {t.dtype}")
            t._tapes = (t._tapes or frozenset()) | {id(self)}

    def stop_recording(self):
        """Context manager: operations inside are not recorded on this tape."""
        tape = self

        class _Stop:
            def __enter__(self_):
                if tape in _state.tapes:
                    _state.tapes.remove(tape)
                    self_.removed = True
                else:
                    self_.removed = False

            def __exit__(self_, *exc):
                if self_.removed:
                    _state.tapes.append(tape)
                return False
        return _Stop()

    def reset(self):
        self._used = False

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients="none"):
        """d(sum of target)/d(sources), shaped like ``sources`` (None where unconnected)."""
        if self._used and not self.persistent:
            raise RuntimeError("Tape.gradient: a non-persistent Tape can only be used to "
                               "compute one set of gradients; use Tape(persistent=True)")
        self._used = True
        targets = list(_flatten(target))
        flat_sources = list(_flatten(sources))
        for s in flat_sources:
            if not isinstance(s, Tensor):
                raise TypeError(f"Tape.gradient: sources must be Tensors, got {type(s).__name__}")
        from . import ops
        seeds = []
        ogs = (list(_flatten(output_gradients)) if output_gradients is not None
               else [None] * len(targets))
        roots = []
        outer = [t for t in _state.tapes if t is not self]
        traced = bool(outer)
        for t, og in zip(targets, ogs):
            if og is None:
                og = ops.ones_like(t._data)
            else:
                og = og if isinstance(og, Tensor) else wrap(_xp(t).asarray(og))
                if not traced:
                    og = og._data if isinstance(og, Tensor) else og
            roots.append(t)
            seeds.append(og)
        live = [(r, s) for r, s in zip(roots, seeds) if r._node is not None or r._tapes]
        res = [None] * len(flat_sources)
        if live:
            prev = list(_state.tapes)
            _state.tapes[:] = outer
            try:
                res = _walker.backward_pass([r for r, _ in live], [s for _, s in live],
                                          inputs=flat_sources, retain_graph=True,
                                          traced=traced, tape_id=id(self))
            finally:
                _state.tapes[:] = prev
        out = []
        for s, g in zip(flat_sources, res):
            if g is None and unconnected_gradients == "zero":
                g = ops.zeros_like(s)
            elif g is not None and not isinstance(g, Tensor):
                g = wrap(g)
            out.append(g)
        return _unflatten(sources, iter(out))

    def jacobian(self, target, sources):
        raise NotImplementedError("Tape.jacobian: use tg.functional.jacobian")


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _flatten(v)
    elif isinstance(x, dict):
        for k in x:
            yield from _flatten(x[k])
    else:
        yield x


def _unflatten(struct, it):
    if isinstance(struct, (list, tuple)):
        return type(struct)(_unflatten(v, it) for v in struct)
    if isinstance(struct, dict):
        return {k: _unflatten(v, it) for k, v in struct.items()}
    return next(it)


# ---------------------------------------------------------------- checkpoint
def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """Run ``function(*args)`` once without keeping its intermediates, and once more
    in the backward pass to recompute them. Returns what ``function`` returns.

    With ``preserve_rng_state`` (the default) the recomputation sees the random
    numbers the forward saw (tapegrad's generator state is saved before the forward
    and restored around the recomputation), so a dropout mask is the same."""
    from .dispatch import bind
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not _state.grad_enabled or not any(t.requires_grad for t in tensors):
        return function(*args, **kwargs)
    rng = raw_rng_state() if preserve_rng_state else None
    with no_grad():
        out = function(*args, **kwargs)
    single = isinstance(out, Tensor)
    outs = (out,) if single else tuple(out)
    op = _checkpoint_op(function, args, kwargs, outs, rng)
    res = bind(op, *tensors)
    return res if single else tuple(res)


def _checkpoint_op(function, args, kwargs, outs, rng):
    from .ops_registry.opdef import OpDef, validate
    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    nout = len(outs)
    computed = [tuple(o._data for o in outs)]  # the forward's results, handed over once

    def run(*arrays):
        out = computed.pop()
        return out[0] if nout == 1 else out

    def vjp(ctx, g):
        if rng is None:
            return _recompute_vjp(ctx, g)
        now = raw_rng_state()
        set_raw_rng_state(rng)
        try:
            return _recompute_vjp(ctx, g)
        finally:
            set_raw_rng_state(now)

    def _recompute_vjp(ctx, g):
        # recompute the forward with recording on, then differentiate it
        detached = []
        full = list(args)
        traced = isinstance(g if nout == 1 else next(x for x in g if x is not None), Tensor)
        for p, t in zip(positions, ctx.inputs):
            if traced:
                # higher order: recompute on the real inputs so the graph connects
                d = t
            else:
                d = wrap(t._data if isinstance(t, Tensor) else t)
                d._requires_grad = args[p].requires_grad
            full[p] = d
            detached.append(d)
        with enable_grad():
            out = function(*full, **kwargs)
        outs = [out] if isinstance(out, Tensor) else list(out)
        gs = [g] if nout == 1 else list(g)
        pairs = [(o, gi) for o, gi in zip(outs, gs) if gi is not None and o.requires_grad]
        need = [d for d in detached if d.requires_grad]
        if not pairs or not need:
            return [None] * len(positions)
        grads = grad([o for o, _ in pairs], need, [gi for _, gi in pairs], allow_unused=True,
                      create_graph=traced)
        it = iter(grads)
        res = []
        for d, t in zip(detached, ctx.inputs):
            if not d.requires_grad:
                res.append(None)
                continue
            gd = next(it)
            if gd is None:
                res.append(None)
            elif traced:
                # connect to the real inputs: the recomputation used detached copies
                res.append(gd)
            else:
                res.append(gd._data)
        return res

    names = tuple(f"arg{i}" for i in positions)
    op = OpDef(name=f"checkpoint[{getattr(function, '__name__', 'fn')}]", kernel=run,
               infer=lambda *s: None, args=names, vjp=vjp, saves=names, nout=nout,
               samples=lambda dtype=None: [])
    validate(op)
    return op


# ---------------------------------------------------------------- anomaly detection
class detect_anomaly:
    """Raise RuntimeError at the first NaN/Inf an op produces, forward or backward,
    naming the op and the user's line that called it."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan
        self._prev = []

    def __enter__(self):
        self._prev.append(_state.anomaly)
        _state.anomaly = self.check_nan
        return self

    def __exit__(self, *exc):
        _state.anomaly = self._prev.pop()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            with detect_anomaly(self.check_nan):
                return fn(*a, **k)
        return wrapper


def set_detect_anomaly(mode):
    """Turns anomaly detection on or off (the first NaN/Inf an op produces raises, naming
    the op), as ``torch.autograd.set_detect_anomaly``."""
    _state.anomaly = bool(mode)
