"""``from_torch`` / ``from_jax``: another framework's function as a registered op.

The op's shape rule is the framework's abstract evaluation (PyTorch meta tensors,
``jax.eval_shape``), its kernel the function on DLPack views of the input arrays, and
its adjoint another such op: the framework's vjp of the function (``torch.func.vjp``,
``jax.vjp``), made on first use, whose own adjoint is the vjp of that, and so on, so
tapegrad's gradients of every order go through it. Forward mode likewise: the jvp
rule is an op made of the framework's jvp (``torch.func.jvp``, ``jax.jvp``).
"""
import inspect

import numpy as np

from ..dispatch import bind
from ..ops_registry import OpDef, TensorSpec, get, register, unregister
from ..ops_registry.opdef import validate

__all__ = ["foreign_op"]


def _np_dtype(d):
    return np.dtype(getattr(d, "np", d))


def _inputs(name, fn):
    """The number of tensor inputs: ``fn``'s positional parameters without defaults."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: cannot read the signature of {fn!r}; wrap it in a "
                        f"def with named tensor inputs") from e
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        raise TypeError(f"{name}: the function takes *args; give it named tensor inputs "
                        f"(the op's inputs are its positional parameters without defaults)")
    n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.default is p.empty)
    if n == 0:
        raise TypeError(f"{name}: the function takes no tensor inputs")
    return n


def foreign_op(fw, fn, name, nout=1, register_it=True):
    """Declare ``fn`` (a function of the framework's arrays; keyword arguments are
    attributes) as a tapegrad op called ``name``; returns the public function."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"from_{fw.name}: name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"from_{fw.name} {name}: fn must be callable")
    if not isinstance(nout, int) or nout < 1:
        raise TypeError(f"from_{fw.name} {name}: nout must be a positive int, got {nout!r}")
    nin = _inputs(name, fn)
    if register_it:
        try:
            old = get(name)
        except KeyError:
            old = None
        if old is not None:
            if not getattr(old, "_custom", False):
                raise ValueError(f"from_{fw.name}: {name!r} is the name of a built-in op; "
                                 f"choose another name")
            unregister(name)
    op = _make(fw, fn, name, nin, nout)
    if register_it:
        register(op)

    def f(*tensors, **attrs):
        if len(tensors) != nin:
            raise TypeError(f"{name}: expected {nin} tensor inputs, got {len(tensors)}")
        return bind(op, *tensors, **attrs)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = fn.__doc__
    f.op = op
    return f


def _make(fw, fn, name, nin, nout):
    def kernel(*arrays, **attrs):
        outs = fw.run(fn, arrays, attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if len(outs) != nout:
            raise RuntimeError(f"{name}: the function returned {len(outs)} outputs, "
                               f"declared nout={nout}")
        res = tuple(fw.to_numpy(o) for o in outs)
        return res if nout > 1 else res[0]

    memo = {}  # (specs, attrs) -> output specs: the abstract evaluation, once per shape

    def infer(*specs, **attrs):
        try:
            key = (specs, tuple(sorted(attrs.items())))
            hit = memo.get(key)
        except TypeError:  # an unhashable attribute
            key = hit = None
        if hit is None:
            hit = _infer(*specs, **attrs)
            if key is not None:
                if len(memo) >= 256:
                    memo.clear()
                memo[key] = hit
        return hit

    def _infer(*specs, **attrs):
        for i, s in enumerate(specs):
            if not isinstance(s, TensorSpec):
                raise TypeError(f"{name}: input {i} must be a tensor, got {type(s).__name__}")
        try:
            outs = fw.abstract(fn, specs, attrs)
        except (TypeError, ValueError, IndexError, RuntimeError) as e:
            raise type(e)(f"{name}: {e}") from None
        outs = (outs,) if isinstance(outs, TensorSpec) else tuple(outs)
        if len(outs) != nout:
            raise RuntimeError(f"{name}: the function returns {len(outs)} outputs, "
                               f"declared nout={nout}")
        return outs if nout > 1 else outs[0]

    holder = {}

    def vjp(ctx, g):
        gs = list(g) if nout > 1 else [g]
        if any(x is None for x in gs):
            specs = [TensorSpec(tuple(s), _np_dtype(d)) for s, d in zip(ctx.shapes, ctx.dtypes)]
            outs = infer(*specs, **ctx.attrs)
            outs = tuple(outs) if nout > 1 else (outs,)
            gs = [np.zeros(o.shape, o.dtype) if x is None else x for x, o in zip(gs, outs)]
        vop = holder.get("vjp")
        if vop is None:
            vop = holder["vjp"] = _make(fw, fw.vjp_fn(fn, nin, nout), name + "_vjp",
                                        nin + nout, nin)
        grads = bind(vop, *ctx.inputs, *gs, **ctx.attrs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        return tuple(gr if _np_dtype(d).kind == "f" else None
                     for gr, d in zip(grads, ctx.dtypes))

    def jvp(ctx, *tangents):
        """Forward mode: another such op, the framework's jvp of ``fn`` (its inputs the
        primals and the tangents, zeros for a constant input), so its own vjp and jvp
        come from the framework too."""
        jop = holder.get("jvp")
        if jop is None:
            jop = holder["jvp"] = _make(fw, fw.jvp_fn(fn, nin, nout), name + "_jvp",
                                        2 * nin, nout)
        ts = [ctx.m.zeros_like(x) if t is None else t for x, t in zip(ctx.inputs, tangents)]
        outs = bind(jop, *ctx.inputs, *ts, **ctx.attrs)
        return outs if isinstance(outs, tuple) else (outs,)

    args = tuple(f"x{i}" for i in range(nin))
    op = OpDef(name=name, kernel=kernel, infer=infer, args=args, kind="basic", vjp=vjp, jvp=jvp,
               saves=args, nout=nout, samples=lambda dtype=np.float64: [],
               error_samples=lambda: [], doc=(fn.__doc__ or ""))
    op._custom = True
    if fw.name == "torch":  # the function is PyTorch's version of the op: its oracle
        op.torch = lambda torch, *ts, **attrs: fn(*ts, **attrs)
    validate(op)
    return op
