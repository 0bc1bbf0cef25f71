"""``jax_ops()``: every registered op as a function of JAX arrays.

Each call is a ``jax.custom_vjp`` around ``jax.pure_callback`` on the host (CPU):
the shape rule gives the callback's result shapes at trace time (its errors are the
op's), the callback runs ``op.compute`` on the NumPy arrays JAX hands it, and
``vmap_method="sequential"`` maps it over a batch. The backward runs the registry's
adjoint on JAX arrays (tracers included), with ``ctx.m`` the adjoints' namespace over
this export (``_bridge``), so ``jax.grad`` nests to any order; ``jax.jit`` traces
through both. A differentiable composite runs as its ops (``_bridge.run_composite``),
so it differentiates through them, unless it reads traced values on the host or draws
random numbers (then one callback, without a gradient). Dynamic ops (output sizes from
the data) are refused: a JAX function needs static shapes.
"""
import types

import numpy as np

from ..dispatch import register_foreign
from ..ops.creation import raw_rng_state, set_raw_rng_state
from ..ops_registry import TensorSpec, list_ops
from . import _bridge

__all__ = ["jax_ops", "jax_module", "call", "from_jax"]

_jax = None
_SCALARS = (bool, int, float)


def jax_module():
    """JAX, imported on first use (the ``interop`` extra)."""
    global _jax
    if _jax is None:
        try:
            import jax
            import jax.numpy  # noqa: F401
        except ImportError as e:  # pragma: no cover
            raise ImportError("tapegrad.interop.jax_ops needs JAX "
                              "(pip install tapegrad[interop])") from e
        _jax = jax
        register_foreign(jax.Array, lambda op, args, attrs: call(op, args, attrs),
                         constant=lambda ref, make: _jax.numpy.asarray(
                             make(np, np.dtype(ref.dtype))))
    return _jax


def _is_array(x):
    return isinstance(x, _jax.Array)


def _check_args(op, args):
    jnp = _jax.numpy
    out = []
    for i, a in enumerate(args):
        name = op.args[min(i, len(op.args) - 1)]
        if _is_array(a) or type(a) in _SCALARS or a is None:
            out.append(a)
        elif isinstance(a, np.generic):
            out.append(a.item())
        elif isinstance(a, np.ndarray) and not np.issubdtype(a.dtype, np.inexact):
            out.append(a)  # an index or mask: a constant of the call (jnp.asarray would
            # make it a tracer under jax.jit, its values unknown to the host)
        elif isinstance(a, np.ndarray) or hasattr(a, "__dlpack__"):
            if not isinstance(a, np.ndarray):
                _bridge.check_host_device(op, name, a)
            out.append(jnp.asarray(a))
        else:
            raise TypeError(f"{op.name}: argument {name!r} must be a JAX array (or a "
                            f"Python number), got {type(a).__name__}")
        if _is_array(out[-1]):
            dev = getattr(out[-1], "devices", None)
            if dev is not None and not isinstance(out[-1], _jax.core.Tracer):
                kinds = {d.platform for d in out[-1].devices()}
                if kinds != {"cpu"}:
                    raise RuntimeError(f"{op.name}: input {name!r} is on {sorted(kinds)}; this "
                                       f"export computes on the CPU (a host callback)")
    return out


def _promote(op, args):
    jnp = _jax.numpy
    if op.promote == "none":
        return args
    arrs = [a for a in args if _is_array(a) or isinstance(a, np.ndarray)]
    if not arrs:
        return args
    target = jnp.result_type(*[a.dtype for a in arrs])
    if op.promote == "float" and not jnp.issubdtype(target, jnp.floating):
        target = jnp.result_type(float)
    if all(a.dtype == target for a in arrs):
        return args
    return [a.astype(target) if (_is_array(a) or isinstance(a, np.ndarray)) and a.dtype != target
            else a for a in args]


def _attr(v):
    if isinstance(v, _jax.Array):
        return np.asarray(v)  # an index array: concrete (a JAX index must be, too)
    return None


def _traced(v):
    if isinstance(v, _jax.core.Tracer):
        return True
    return (type(v) is tuple or type(v) is list) and any(_traced(x) for x in v)


# the indexing ops an adjoint binds with an index attribute (a gradient scattered back
# to where sort, topk, argmax... took its values): under jax.jit that index may be
# traced (computed from traced data), so no host callback can take it as a constant;
# JAX's own indexing computes them then (NumPy's semantics; JAX differentiates them)
_TRACED_INDEX = {
    "index": lambda g, a: g[a["index"]],
    "index_add_into": lambda g, a: _jax.numpy.zeros(a["shape"], g.dtype).at[a["index"]].add(g),
    "index_put_zero": lambda g, a: g.at[a["index"]].set(0),
}


def call(op, args, attrs):
    """Run registry op ``op`` on JAX arrays (and Python numbers): the export."""
    jax_module()
    args = _promote(op, _check_args(op, list(args)))
    if op.name in _TRACED_INDEX and _traced(attrs.get("index")) and _is_array(args[0]):
        return _TRACED_INDEX[op.name](args[0], attrs)
    attrs = {k: _bridge.canonical_attr(v, _attr) for k, v in attrs.items()}
    if op.kind == "dynamic":
        raise RuntimeError(f"{op.name}: its output size depends on the data; a JAX function "
                           f"needs static shapes (call tapegrad's {op.name} outside jit)")
    # concrete integer/bool arrays (indices, masks) are constants of the call, so their
    # values stay known to the host and to the adjoint under jax.jit
    args = [np.asarray(a) if _is_array(a) and not isinstance(a, _jax.core.Tracer)
            and not np.issubdtype(np.dtype(a.dtype), np.inexact) else a for a in args]
    pos = [i for i, a in enumerate(args) if _is_array(a)]
    static = [None if _is_array(a) else a for a in args]
    in_specs = [TensorSpec(tuple(a.shape), np.dtype(a.dtype)) if _is_array(a) else a
                for a in args]
    specs = _bridge.out_specs(op, in_specs, attrs)  # the op's own error, at trace time
    fn = _make(op, attrs, pos, static, in_specs, specs)
    return fn(*[args[i] for i in pos])


def _full(pos, static, arrays):
    full = list(static)
    for i, a in zip(pos, arrays):
        full[i] = a
    return full


def _make(op, attrs, pos, static, in_specs, specs):
    jax = _jax
    shapes = [jax.ShapeDtypeStruct(s.shape, np.dtype(getattr(s.dtype, "np", s.dtype)))
              for s in specs]

    def host(*arrays):
        res = op.compute(*_full(pos, static, arrays), **attrs)
        outs = res if op.nout > 1 else (res,)
        outs = tuple(np.asarray(o, dtype=s.dtype).reshape(s.shape) for o, s in zip(outs, shapes))
        return outs if op.nout > 1 else outs[0]

    def forward(*arrays):
        if not op.differentiable:  # a constant: no tangent reaches the callback
            arrays = [jax.lax.stop_gradient(a) for a in arrays]
        return jax.pure_callback(host, tuple(shapes) if op.nout > 1 else shapes[0], *arrays,
                                 vmap_method="sequential")

    if not op.differentiable:
        return forward

    def bwd(res, g):
        arrays, out = res
        # a primal JAX did not trace (a NumPy array given to jax.vjp) comes back as is
        arrays = [_jax.numpy.asarray(a) for a in arrays]
        full = _full(pos, static, arrays)
        gs = g if op.nout > 1 else (g,)
        gs = tuple(None if x is None or x.dtype == jax.dtypes.float0 or not np.issubdtype(
            np.dtype(x.dtype), np.floating) else jax.numpy.asarray(x) for x in gs)
        if all(x is None for x in gs):
            return tuple(None for _ in arrays)
        if op.vjp is None:  # a composite run as one callback (see _export)
            raise NotImplementedError(
                f"{op.name}: no gradient through the JAX export here: this composite "
                f"reads its inputs' values on the host, which tracing (jax.grad, jax.jit) "
                f"does not give (tapegrad's own {op.name} and torch_ops() differentiate it)")
        needs = tuple(i in pos and np.issubdtype(np.dtype(full[i].dtype), np.floating)
                      for i in range(len(full)))
        inputs = [a if i in op.save_idx else None for i, a in enumerate(full)]
        actx = _bridge.AdjointCtx(inputs, out if op.save_out else None, attrs,
                                  [tuple(s.shape) if isinstance(s, TensorSpec) else ()
                                   for s in in_specs],
                                  [np.dtype(s.dtype) if isinstance(s, TensorSpec) else None
                                   for s in in_specs], needs, M)
        grads = op.vjp(actx, gs if op.nout > 1 else gs[0])
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        outg = []
        for i in pos:
            gi = grads[i] if i < len(grads) else None
            outg.append(_fit(op, i, gi, in_specs[i]) if needs[i] and gi is not None else None)
        return tuple(outg)

    def jvp(primals, tangents):
        """The registry's forward-mode rule on JAX arrays (tangents None for constant
        or integer inputs), computed with the exported ops."""
        jnp = jax.numpy
        primals = [jnp.asarray(p) for p in primals]  # jax.jvp hands NumPy values on as is
        out = prim(*primals) if prim is not None else forward(*primals)
        full = _full(pos, static, primals)
        tfull = [None] * len(full)
        for i, t in zip(pos, tangents):
            if t is not None and np.issubdtype(np.dtype(full[i].dtype), np.floating):
                tfull[i] = jnp.asarray(t)
        outs = out if op.nout > 1 else (out,)
        actx = _bridge.AdjointCtx(full, out, attrs,
                                  [tuple(s.shape) if isinstance(s, TensorSpec) else ()
                                   for s in in_specs],
                                  [np.dtype(s.dtype) if isinstance(s, TensorSpec) else None
                                   for s in in_specs],
                                  tuple(t is not None for t in tfull), M, op)
        res = op.jvp(actx, *tfull)
        res = res if isinstance(res, tuple) else (res,)
        fitted = []
        for r, o in zip(res, outs):
            dt = np.dtype(o.dtype)
            if r is None or not np.issubdtype(dt, np.floating):
                r = jnp.zeros(o.shape, dt)
            r = jnp.asarray(r)
            if tuple(r.shape) != tuple(o.shape):
                r = jnp.broadcast_to(r, o.shape) if r.ndim <= o.ndim else r.reshape(o.shape)
            fitted.append(r.astype(dt) if r.dtype != dt else r)
        return out, (tuple(fitted) if op.nout > 1 else fitted[0])

    Prim = _hi_primitive()
    if Prim is None:  # a JAX without hijax: reverse mode only (custom_vjp)
        prim = None
        f = jax.custom_vjp(forward)
        f.defvjp(lambda *arrays: (lambda out: (out, (arrays, out)))(f(*arrays)), bwd)
        return f
    prim = Prim(op.name, [in_specs[i] for i in pos], shapes, forward, bwd,
                jvp if op.jvp is not None else None)
    return prim


_HI = []


def _hi_primitive():
    """The class of an exported op as a JAX primitive (``jax.experimental.hijax``, a
    primitive with a Python implementation and a rule per transformation): its
    implementation is the host callback; its reverse mode the registry's adjoint
    (``vjp_fwd``/``vjp_bwd_retval``), its forward mode the registry's jvp rule, both
    computed with the exported ops so every order nests; ``jax.vmap`` maps the
    callback and the rules over the batch (``_Batched``). JAX allows ``custom_vjp``
    or ``custom_jvp`` on a function, not both; a primitive carries both. None when
    this JAX lacks hijax (reverse mode only then)."""
    if _HI:
        return _HI[0]
    try:
        from jax.experimental.hijax import VJPHiPrimitive, instantiate_zeros
    except ImportError:  # pragma: no cover - older JAX
        _HI.append(None)
        return None
    jax = _jax
    count = iter(range(1 << 62))

    def zeros_in(ts):
        return [instantiate_zeros(t) for t in ts]

    class _Batching:
        """vmap: batched inputs to dim 0 (unbatched ones broadcast: JAX sums their
        cotangents back), then the batched primitive (all outputs at dim 0)."""

        def batch_dim_rule(self, axis_data, dims):
            return jax.tree_util.tree_map(lambda _: 0, self.out_aval)

        def batch(self, axis_data, args, dims):
            if all(d is None for d in dims):
                return self(*args), jax.tree_util.tree_map(lambda _: None, self.out_aval)
            n = axis_data.size
            jnp = jax.numpy
            args = [jnp.broadcast_to(a, (n,) + tuple(a.shape)) if d is None else
                    jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
            return _Batched(self, n)(*args), self.batch_dim_rule(axis_data, dims)

    class Prim(_Batching, VJPHiPrimitive):
        def __init__(self, name, specs, shapes, forward, bwd, jvp):
            SA = jax.core.ShapedArray
            self.in_avals = tuple(SA(tuple(s.shape), np.dtype(getattr(s.dtype, "np", s.dtype)))
                                  for s in specs)
            outs = tuple(SA(tuple(s.shape), s.dtype) for s in shapes)
            self.out_aval = outs if len(outs) > 1 else outs[0]
            self.params = dict(op=name, call=next(count))  # one call's attrs and constants
            self._forward, self._bwd, self._jvp = forward, bwd, jvp
            super().__init__()

        def expand(self, *args):
            return self._forward(*args)

        def vjp_fwd(self, nzs, *args):
            out = self(*args)
            return out, (args, out)

        def vjp_bwd_retval(self, res, g):
            gs = tuple(zeros_in(g)) if isinstance(g, tuple) else instantiate_zeros(g)
            grads = self._bwd(res, gs)
            return tuple(jax.numpy.zeros(a.shape, a.dtype) if gi is None else gi
                         for gi, a in zip(grads, self.in_avals))

        def jvp(self, primals, tangents):
            if self._jvp is None:
                raise NotImplementedError(f"{self.op}: tapegrad has no forward-mode rule for "
                                          f"this op (reverse mode works: jax.grad, jax.vjp)")
            ts = [None if type(t).__name__ == "Zero" else t for t in tangents]
            return self._jvp(primals, ts)

    class _Batched(_Batching, VJPHiPrimitive):
        def __init__(self, base, n):
            SA = jax.core.ShapedArray
            self.base_prim = base
            self.in_avals = tuple(SA((n,) + tuple(a.shape), a.dtype) for a in base.in_avals)
            self.out_aval = jax.tree_util.tree_map(lambda a: SA((n,) + tuple(a.shape), a.dtype),
                                                   base.out_aval)
            self.params = dict(base=base, n=n)
            super().__init__()

        def expand(self, *args):
            return jax.vmap(self.base_prim.expand)(*args)

        def vjp_fwd(self, nzs, *args):
            return self(*args), args

        def vjp_bwd_retval(self, res, g):
            g = tuple(zeros_in(g)) if isinstance(g, tuple) else instantiate_zeros(g)
            return jax.vmap(self.base_prim.vjp_bwd_retval)(res, g)

        def jvp(self, primals, tangents):
            return jax.vmap(self.base_prim.jvp)(tuple(primals), tuple(zeros_in(tangents)))

    _HI.append(Prim)
    return Prim


def _fit(op, i, gi, spec):
    jnp = _jax.numpy
    shape = tuple(spec.shape)
    gi = jnp.asarray(gi)
    if tuple(gi.shape) != shape:
        if op.broadcasting or gi.ndim > len(shape):
            lead = gi.ndim - len(shape)
            if lead > 0:
                gi = gi.sum(axis=tuple(range(lead)))
            axes = tuple(d for d, (a, b) in enumerate(zip(gi.shape, shape)) if b == 1 and a != 1)
            if axes:
                gi = gi.sum(axis=axes, keepdims=True)
        if tuple(gi.shape) != shape:
            raise RuntimeError(f"{op.name}: its adjoint gave a gradient of shape "
                               f"{tuple(gi.shape)} for input {i} of shape {shape}")
    dt = np.dtype(spec.dtype)
    return gi.astype(dt) if gi.dtype != dt else gi


class _Unknown(RuntimeError):
    """A traced array's values were read on the host (they are unknown while tracing)."""


_UNKNOWN = ("interop (JAX): the adjoint computed a value from a traced array outside "
            "tapegrad's ops (its values are unknown while tracing); call it without "
            "jax.jit, or on concrete arrays")


class _Symbolic(np.ndarray):
    """The stand-in of a tracer: zeros of its shape and dtype. NumPy keeps the type
    through arithmetic, ``astype``, reductions and views, so a value computed from one
    outside the observed ops is caught (``_JaxFramework.constant``), and so is a value
    read as a Python number or truth value, instead of being used as zeros."""

    def _unknown(self, *a, **k):
        raise _Unknown(_UNKNOWN)

    __bool__ = __int__ = __float__ = __index__ = item = tolist = _unknown

    def __array_ufunc__(self, *a, **k):  # any arithmetic on it: its values are unknown
        raise _Unknown(_UNKNOWN)

    def __array_function__(self, func, types, args, kwargs):
        if func in _SHAPE_ONLY:  # what reads only shapes and dtypes
            return super().__array_function__(func, types, args, kwargs)
        raise _Unknown(_UNKNOWN)


_SHAPE_ONLY = {np.shape, np.ndim, np.size, np.result_type, np.may_share_memory,
               np.shares_memory, np.reshape, np.broadcast_to, np.expand_dims, np.squeeze,
               np.transpose, np.moveaxis, np.swapaxes, np.ravel, np.atleast_1d,
               np.atleast_2d, np.empty_like, np.zeros_like, np.ones_like, np.copyto,
               np.can_cast, np.min_scalar_type}


class _JaxFramework:
    """The adjoints' namespace adapter for JAX: a concrete array stands in as its own
    values (an index the adjoint reads, such as sort's permutation); a tracer as
    ``_Symbolic`` zeros. No kernel runs on a stand-in: the observer calls the export."""

    @staticmethod
    def is_array(x):
        return isinstance(x, _jax.Array)

    @staticmethod
    def stand_in(x):
        if isinstance(x, _jax.core.Tracer):
            return np.zeros(tuple(x.shape), np.dtype(x.dtype)).view(_Symbolic)
        return np.asarray(x).view()

    @staticmethod
    def plain(v):
        return v

    @staticmethod
    def constant(a):
        if isinstance(a, _Symbolic):
            raise _Unknown(_UNKNOWN)
        if not np.issubdtype(a.dtype, np.inexact):
            return np.asarray(a)  # an index or mask stays concrete (see _check_args)
        return _jax.numpy.asarray(a)

    @staticmethod
    def call(op, args, attrs):
        if all(not _is_array(a) or not isinstance(a, _jax.core.Tracer) and not np.issubdtype(
                np.dtype(a.dtype), np.inexact) for a in args) and op.kind != "dynamic":
            # index arithmetic on concrete arrays (a composite spreading its index):
            # computed here, so the index stays concrete under jax.jit (a callback's
            # result would be a tracer)
            res = op.compute(*[np.asarray(a) if _is_array(a) else a for a in args],
                             **{k: _bridge.canonical_attr(v, _attr) for k, v in attrs.items()})
            if all(not np.issubdtype(np.dtype(r.dtype), np.inexact)
                   for r in (res if isinstance(res, tuple) else (res,))):
                return res
        return call(op, args, attrs)


M = _bridge.AdjointNamespace(_JaxFramework)


class _DryRun:
    """A composite traced on the host alone, its traced inputs standing in as random
    values drawn from ``seed`` (zeros for None, as in the traced run): each exported op it reaches
    on them is recorded (name,
    attributes, constant inputs) and returns random values of its result's shape (an
    op on constants alone computes them). Dry runs with different values that
    record different calls mean the composite's structure depends on its inputs'
    values (a count of squarings from a norm, a constant made from a value): it
    cannot be traced through its ops."""

    def __init__(self, seed):
        self.rng = None if seed is None else np.random.default_rng(seed)
        self.calls = []
        self.symbolic = {}  # id -> the arrays standing for traced values (kept alive)

    def _values(self, shape, dtype):
        dt = np.dtype(dtype)
        if self.rng is None:  # zeros, as the traced run's stand-ins (_Symbolic)
            v = np.zeros(shape, dt)
        elif dt.kind == "f":
            v = self.rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            v = self.rng.random(shape) < 0.5
        else:
            v = self.rng.integers(0, 3, shape).astype(dt)
        self.symbolic[id(v)] = v
        return v

    def is_array(self, x):
        return isinstance(x, _jax.Array)

    def stand_in(self, x):
        if isinstance(x, _jax.core.Tracer):
            return self._values(tuple(x.shape), x.dtype)
        if isinstance(x, np.ndarray):  # an output of ours: itself
            return x
        return np.asarray(x).view()

    def plain(self, v):
        return v

    def constant(self, a):
        return a

    def _sym(self, v):
        return isinstance(v, _jax.core.Tracer) or isinstance(v, np.ndarray) and \
            self.symbolic.get(id(v)) is v

    def _sig(self, v):
        if self._sym(v):
            return ("traced", tuple(v.shape), str(v.dtype))
        if isinstance(v, (np.ndarray, _jax.Array)):
            a = np.asarray(v)
            return ("array", a.shape, a.dtype.str, a.tobytes())
        if isinstance(v, dict):
            return tuple(sorted((k, self._sig(x)) for k, x in v.items()))
        if type(v) is tuple or type(v) is list:
            return tuple(self._sig(x) for x in v)
        return repr(v)

    def _mentions(self, v):
        if type(v) is tuple or type(v) is list:
            return any(self._mentions(x) for x in v)
        return self._sym(v)

    def call(self, op, args, attrs):
        if not any(self._mentions(a) for a in args) and not any(
                self._mentions(v) for v in attrs.values()):
            return op.compute(*[np.asarray(a) if isinstance(a, _jax.Array) else a
                                for a in args], **attrs)
        self.calls.append((op.name, self._sig(attrs), self._sig(list(args))))
        specs = [TensorSpec(tuple(a.shape), np.dtype(a.dtype)) if hasattr(a, "shape") else a
                 for a in args]
        outs = tuple(self._values(tuple(o.shape), getattr(o.dtype, "np", o.dtype))
                     for o in _bridge.out_specs(op, specs, attrs))
        return outs if op.nout > 1 else outs[0]


def _traceable(op, args, attrs):
    """Whether a composite called on traced arrays runs the same ops whatever their
    values (dry runs on zeros and on two random draws agree), drawing no random
    numbers."""
    state = raw_rng_state()
    try:
        runs = []
        for seed in (None, 1, 2):
            fw = _DryRun(seed)
            _bridge.run_composite(fw, op, args, attrs)
            runs.append(fw.calls)
        return runs[0] == runs[1] and raw_rng_state() == state
    except Exception:  # a check refused the stand-in values: they matter
        return False
    finally:
        set_raw_rng_state(state)


def _export(op):
    bind = _bridge.bind_inputs
    composite = op.composite is not None and op.differentiable

    def f(*args, **attrs):
        for k in ("out", "workspace"):
            if attrs.get(k) is not None:
                raise TypeError(f"{op.name}: {k}= has no meaning on JAX arrays (immutable; "
                                f"JAX allocates them): use the result (torch_ops and "
                                f"op.compute take the caller's memory)")
        if composite:  # made of other ops: each runs as the exported op, so it has
            # their gradients and forward-mode rules. Unless, on traced inputs, what it
            # runs depends on their values (``_traceable``; or it reads them on the host),
            # or it draws random numbers (a draw made while tracing would repeat on every
            # call of a jitted function): then one host callback (the right values, a
            # fresh draw per call; no gradient)
            state = raw_rng_state()
            if not any(_traced(a) for a in args) and not any(
                    _traced(v) for v in attrs.values()) or _traceable(op, args, attrs):
                try:
                    r = _bridge.run_composite(_JaxFramework, op, args, attrs)
                    if raw_rng_state() == state:
                        return r
                except _Unknown:
                    pass
                set_raw_rng_state(state)
        args, attrs = bind(op, args, attrs)
        return call(op, args, attrs)
    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = f"tapegrad's {op.name!r} on JAX arrays ({op.kind} op).\n\n{op.doc}"
    f.op = op
    return f


def jax_ops():
    """A namespace with every registered op (as registered now) as a function of JAX
    arrays: ``jax.grad`` (any order), ``jax.jit`` and ``jax.vmap`` work on each."""
    jax_module()
    ns = types.SimpleNamespace()
    for op in list_ops():
        setattr(ns, op.name, _export(op))
    return ns


# ------------------------------------------------------------------ from_jax
_JIT_MAX = 256
_jit_cache = {}


def _jitted(fn, attrs):
    """``fn`` with these attrs, compiled by ``jax.jit`` once per (fn, attrs) and input
    shapes (its vjp, and the vjp's vjp, are jitted as well): the op then costs one
    compiled call, not a trace, per use. Unhashable attrs: called as is."""
    try:
        key = (fn, tuple(sorted(attrs.items())))
        hit = _jit_cache.get(key)
    except TypeError:
        return lambda *xs: fn(*xs, **attrs)
    if hit is None:
        if len(_jit_cache) >= _JIT_MAX:
            _jit_cache.clear()
        hit = _jit_cache[key] = _jax.jit(lambda *xs: fn(*xs, **attrs))
    return hit


class _FromJax:
    """``_foreign``'s adapter: a function of JAX arrays as a registry op."""
    name = "jax"

    @staticmethod
    def run(fn, arrays, attrs):
        jnp = _jax.numpy
        xs = []
        for a in arrays:
            if isinstance(a, np.ndarray):
                try:
                    a = jnp.from_dlpack(a) if a.flags.writeable else jnp.asarray(a)
                except (BufferError, TypeError, RuntimeError, ValueError):
                    a = jnp.asarray(a)
            xs.append(a)
        return _jitted(fn, attrs)(*xs)

    @staticmethod
    def to_numpy(o):
        try:
            a = np.from_dlpack(o)
        except (BufferError, TypeError, RuntimeError, AttributeError):
            a = np.asarray(o)
        return a if a.flags.writeable else a.copy()  # tapegrad writes into its outputs

    @staticmethod
    def abstract(fn, specs, attrs):
        jax = _jax
        outs = jax.eval_shape(lambda *a: fn(*a, **attrs),
                              *[jax.ShapeDtypeStruct(s.shape, np.dtype(getattr(
                                  s.dtype, "np", s.dtype))) for s in specs])
        single = not isinstance(outs, (tuple, list))
        res = tuple(TensorSpec(tuple(o.shape), np.dtype(o.dtype))
                    for o in ((outs,) if single else outs))
        return res[0] if single else res

    @staticmethod
    def vjp_fn(fn, nin, nout):
        jax = _jax
        jnp = jax.numpy

        def vjp(*a, **attrs):
            xs, gs = a[:nin], a[nin:]
            keep = [k for k in range(nout) if jnp.issubdtype(gs[k].dtype, jnp.floating)]
            fl = [i for i, x in enumerate(xs) if jnp.issubdtype(x.dtype, jnp.floating)]

            def f(*fx):
                full = list(xs)
                for i, v in zip(fl, fx):
                    full[i] = v
                outs = fn(*full, **attrs)
                outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
                return tuple(outs[k] for k in keep)  # integer outputs: no gradient
            _, pull = jax.vjp(f, *[xs[i] for i in fl])
            grads = pull(tuple(gs[k] for k in keep))
            res = [jnp.zeros_like(x) for x in xs]
            for i, gr in zip(fl, grads):
                res[i] = gr
            return tuple(res) if nin > 1 else res[0]
        return vjp

    @staticmethod
    def jvp_fn(fn, nin, nout):
        """The jvp of ``fn`` as a function of (inputs, tangents): ``jax.jvp`` over the
        floating inputs; integer outputs get zero tangents."""
        jax = _jax
        jnp = jax.numpy

        def jvp(*a, **attrs):
            xs, ts = a[:nin], a[nin:]
            fl = [i for i, x in enumerate(xs) if jnp.issubdtype(x.dtype, jnp.floating)]

            def f(*fx):
                full = list(xs)
                for i, v in zip(fl, fx):
                    full[i] = v
                outs = fn(*full, **attrs)
                return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            outs, touts = jax.jvp(f, tuple(xs[i] for i in fl),
                                  tuple(ts[i].astype(xs[i].dtype) for i in fl))
            res = tuple(t if jnp.issubdtype(o.dtype, jnp.floating) else jnp.zeros_like(o)
                        for o, t in zip(outs, touts))
            return res if nout > 1 else res[0]
        return jvp


def from_jax(fn, *, name, nout=1):
    """A function of JAX arrays as a registered tapegrad op ``name`` (see
    ``tapegrad.interop.from_jax``)."""
    from ._foreign import foreign_op
    jax_module()
    return foreign_op(_FromJax, fn, name, nout)
