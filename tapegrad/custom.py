"""``tg.custom_op``: users declare their own ops the way built-in ops are declared.

>>> import numpy as np, tapegrad as tg
>>> def cube_kernel(x):
...     return x ** 3
>>> def cube_adjoint(g, x):
...     return g * 3 * x * x          # tapegrad ops: differentiates again
>>> cube = tg.custom_op("my_cube", cube_kernel, cube_adjoint)
>>> x = tg.tensor([2.0], requires_grad=True)
>>> cube(x).sum().backward()
>>> x.grad
tensor([12.])
"""
import inspect

import numpy as np

from .dispatch import bind
from .grad_mode import no_grad
from .ops_registry import OpDef, TensorSpec, get, register, unregister
from .ops_registry.opdef import validate
from .tensor import Tensor, buffer, wrap

__all__ = ["custom_op"]


def custom_op(name, kernel, adjoint, *, infer=None, kind="basic", workspace=None, jvp=None,
              vmap=None, nout=1, samples=None, error_samples=None):
    """Declare an op from a raw-array ``kernel`` and an ``adjoint``; returns ``f``.

    ``kernel(*arrays, **attrs)`` computes on raw NumPy/CuPy arrays. Its positional
    parameters without defaults name the tensor inputs; everything passed to ``f`` by
    keyword is an attribute. ``adjoint(g, *inputs, **attrs)`` returns one gradient
    (or ``None``) per input; write it with tapegrad functions and operators: it is
    run on raw arrays when nothing records and on Tensors when a higher-order
    gradient is wanted, so it is itself differentiated. ``adjoint=None`` declares a
    non-differentiable op. ``infer(*specs, **attrs)`` gives the output
    ``TensorSpec``; without it the kernel is run on zeros of the input specs.
    ``jvp(tangents, *inputs, **attrs)`` is an optional forward-mode rule (without one,
    forward mode through the op raises). ``vmap(ctx, *values)`` is an optional batching
    rule, as ``OpDef.vmap`` (values with the batch at dim 0 where ``ctx.batched[i]``;
    returns the outputs' values, batch at dim 0; without one, ``tg.vmap`` runs the op
    once per example, with a warning). For
    ``kind="workspace"`` give ``workspace(*specs, **attrs) -> bytes``; the kernel then
    receives ``workspace=``; ``kind="dynamic"`` kernels receive ``alloc=``.

    ``f(*tensors, **attrs)`` then behaves like a built-in op: it records, supports
    ``backward``/``grad`` of any order, and its OpDef is ``f.op`` (also in
    ``tg.ops_registry.get(name)``). Declaring the same name again replaces an
    earlier custom op; a built-in op's name is refused.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"custom_op: name must be a non-empty string, got {name!r}")
    if not callable(kernel):
        raise TypeError(f"custom_op {name}: kernel must be callable")
    if adjoint is not None and not callable(adjoint):
        raise TypeError(f"custom_op {name}: adjoint must be callable or None")
    args, variadic = _input_names(name, kernel)
    try:
        old = get(name)
    except KeyError:
        old = None
    if old is not None:
        if not getattr(old, "_custom", False):
            raise ValueError(f"custom_op: {name!r} is the name of a built-in op; choose "
                             f"another name")
        unregister(name)

    def make(args):
        return _make_op(name, kernel, adjoint, infer, kind, workspace, jvp, nout, samples,
                        error_samples, args, vmap)

    op = make(args)
    register(op)
    arities = {}  # a variadic kernel: one OpDef per number of inputs, made on first use

    def f(*tensors, **attrs):
        if variadic:
            n = len(tensors)
            if n not in arities:
                arities[n] = make(tuple(f"{args[0]}{i}" for i in range(n)))
            return bind(arities[n], *tensors, **attrs)
        if len(tensors) != len(args):
            raise TypeError(f"{name}: expected {len(args)} tensor inputs "
                            f"({', '.join(args)}), got {len(tensors)}")
        return bind(op, *tensors, **attrs)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = kernel.__doc__
    f.op = op
    return f


def _make_op(name, kernel, adjoint, infer, kind, workspace, jvp, nout, samples, error_samples,
             args, vmap=None):
    vjp = None
    if adjoint is not None:
        def vjp(ctx, g):
            gs = g if isinstance(g, tuple) else (g,)
            if all(x is None or _native(x) for x in gs + tuple(ctx.inputs)) and \
                    any(x is not None for x in gs):
                # the walk on raw arrays: the adjoint gets (non-recording) Tensors, so
                # Tensor methods (a.cos(), g.sum(0)) work as the functions do
                with no_grad():
                    grads = adjoint(_tensors(g), *_tensors(tuple(ctx.inputs)), **ctx.attrs)
                grads = _arrays(grads)
            else:
                grads = adjoint(g, *ctx.inputs, **ctx.attrs)
            if not isinstance(grads, (tuple, list)):
                grads = (grads,)
            if len(grads) != len(args):
                raise RuntimeError(f"{name}: the adjoint returned {len(grads)} gradients "
                                   f"for {len(args)} inputs ({', '.join(args)})")
            return tuple(grads)

    op_jvp = None
    if jvp is not None:
        def op_jvp(ctx, *tangents):
            return jvp(tangents, *ctx.inputs, **ctx.attrs)

    op = OpDef(name=name, kernel=kernel, infer=infer or _infer_by_running(name, kernel, kind),
               args=args, kind=kind, vjp=vjp, saves=args if adjoint is not None else (),
               jvp=op_jvp, vmap=vmap, workspace=workspace,
               differentiable=adjoint is not None,
               nout=nout, samples=samples or (lambda dtype=np.float64: []),
               error_samples=error_samples, doc=(kernel.__doc__ or ""))
    op._custom = True
    validate(op)
    return op


def _native(a):
    """Whether ``a`` is a NumPy or CuPy array (not a Tensor, not another library's
    array met through DLPack by ``tapegrad.interop``'s calls, which stay as they are)."""
    return isinstance(a, np.ndarray) or type(a).__module__.startswith("cupy")


def _tensors(v):
    """Raw arrays (alone or in a tuple) as Tensors that do not record."""
    if isinstance(v, tuple):
        return tuple(_tensors(x) for x in v)
    return v if v is None or isinstance(v, Tensor) else wrap(v)


def _arrays(v):
    """The adjoint's results on the raw walk: each Tensor's array."""
    if isinstance(v, (tuple, list)):
        return tuple(_arrays(x) for x in v)
    return buffer(v) if isinstance(v, Tensor) else v


def _input_names(name, kernel):
    """The kernel's tensor inputs, and whether it takes ``*arrays`` (then the number of
    inputs is that of each call)."""
    try:
        params = inspect.signature(kernel).parameters.values()
    except (TypeError, ValueError):  # builtins such as np.exp
        return ("x",), False
    names = []
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            if names:
                raise TypeError(f"custom_op {name}: a kernel takes named inputs or *{p.name}, "
                                f"not both")
            return (p.name,), True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            names.append(p.name)
    if not names:
        raise TypeError(f"custom_op {name}: the kernel takes no tensor inputs")
    return tuple(names), False


def _infer_by_running(name, kernel, kind):
    """Shape rule by running the kernel on zeros (no rule given)."""
    def infer(*specs, **attrs):
        if kind == "dynamic":
            return TensorSpec(None, None)
        arrays = [np.zeros(s.shape, dtype=np.dtype(getattr(s.dtype, "np", s.dtype)))
                  if isinstance(s, TensorSpec) else s for s in specs]
        with np.errstate(all="ignore"):
            out = kernel(*arrays, **attrs)
        if isinstance(out, tuple):
            return tuple(TensorSpec(tuple(np.shape(o)), np.asarray(o).dtype) for o in out)
        return TensorSpec(tuple(np.shape(out)), np.asarray(out).dtype)
    return infer
