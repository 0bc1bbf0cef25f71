"""Function transforms: grad, value_and_grad, vjp, jvp, jacobian, hessian, hvp.

Nesting: each running transform is a level (a thread-local count). A transform's
variables are its own: a fresh leaf, or, for a tensor that an outer transform is
differentiating, an alias recorded on top of it (``_fresh``), so the inner transform
differentiates with respect to the alias only (a closure over the outer variable is
a constant to it: no perturbation confusion) while the outer one sees through the
alias. A transform nested in another records its result (``create_graph``) so the
outer one can differentiate it; the outermost returns detached results.
"""
import contextlib
import threading

from .autodiff import grad as _grad
from .dtypes import get_default_dtype
from .grad_mode import enable_grad, is_grad_enabled
from .ops import reshape, stack, tensor, zeros, zeros_like
from .tape import state as _record_state
from .tensor import Tensor, buffer

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def _argnums(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


_levels = threading.local()


def _depth():
    return getattr(_levels, "n", 0)


@contextlib.contextmanager
def _level():
    """One more running transform in this thread."""
    _levels.n = _depth() + 1
    try:
        yield
    finally:
        _levels.n -= 1


def _nested():
    """Whether an outer transform (or an explicit Tape) will differentiate this one's
    result, which must then be recorded."""
    return _depth() > 1 or bool(_record_state.tapes)


def _prep(args, nums):
    out = list(args)
    for i in nums:
        a = out[i]
        if not isinstance(a, Tensor):
            a = tensor(a, dtype=get_default_dtype() if isinstance(a, (int, float)) else None)
        out[i] = _fresh(a)
    return out


def _fresh(a):
    """This transform's own variable for ``a``: an alias recorded on ``a`` when an
    outer transform differentiates ``a``, else a new leaf sharing its buffer."""
    if a.requires_grad:
        return reshape(a, tuple(a.shape))  # a recorded view: the outer graph sees through
    return Tensor(buffer(a)).requires_grad_(True)


def value_and_grad(f, argnums=0, has_aux=False):
    """``f -> (args -> (f(args), df/dargs[argnums]))``; scalar-valued ``f``."""
    nums = _argnums(argnums)

    def wrapped(*args, **kwargs):
        with enable_grad(), _level():
            ins = _prep(args, nums)
            out = f(*ins, **kwargs)
            val, aux = (out if has_aux else (out, None))
            if not isinstance(val, Tensor) or val.numel() != 1:
                raise RuntimeError("grad: f must return a scalar tensor (one element); "
                                   "use jacobian or vjp for other outputs")
            # record the gradient when an outer transform or an explicit Tape will
            # differentiate it again (or a caller's recording: an input requires grad)
            create = _nested() or (is_grad_enabled() and any(
                isinstance(a, Tensor) and a.requires_grad for a in args))
            gs = _grad(val, [ins[i] for i in nums], create_graph=True if create else False,
                       allow_unused=True, materialize_grads=True)
        g = gs[0] if isinstance(argnums, int) else tuple(gs)
        return ((val, aux), g) if has_aux else (val, g)
    return wrapped


def grad(f, argnums=0, has_aux=False):
    """``f -> (args -> df/dargs[argnums])`` for scalar-valued ``f``; composes for
    higher derivatives: ``grad(grad(f))``."""
    vg = value_and_grad(f, argnums, has_aux)

    def wrapped(*args, **kwargs):
        (val_aux, g) = vg(*args, **kwargs)
        return (g, val_aux[1]) if has_aux else g
    return wrapped


def vjp(f, *primals):
    """``(f(*primals), vjp_fn)`` with ``vjp_fn(v)`` giving a tuple of cotangents."""
    with enable_grad():
        ins = _prep(primals, range(len(primals)))
        out = f(*ins)
    outs = [out] if isinstance(out, Tensor) else list(out)

    def vjp_fn(*vs):
        if len(vs) == 1 and isinstance(vs[0], (list, tuple)):
            vs = tuple(vs[0])
        with enable_grad():
            return _grad(outs, ins, grad_outputs=list(vs), retain_graph=True,
                         create_graph=True, allow_unused=True, materialize_grads=True)
    return out, vjp_fn


def jvp(f, primals, tangents, create_graph=False):
    """Forward-mode product ``(f(primals), J @ tangents)`` (by the double-vjp trick:
    the vjp is linear in its cotangent, so differentiating it again gives J @ t)."""
    primals = tuple(primals) if isinstance(primals, (list, tuple)) else (primals,)
    tangents = tuple(tangents) if isinstance(tangents, (list, tuple)) else (tangents,)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: got {len(primals)} primals and {len(tangents)} tangents")
    for p, t in zip(primals, tangents):
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"jvp: tangent shape {tuple(t.shape)} differs from primal shape "
                             f"{tuple(p.shape)}")
    with enable_grad(), _level():
        create_graph = create_graph or _nested()
        ins = _prep(primals, range(len(primals)))
        out = f(*ins)
        outs = [out] if isinstance(out, Tensor) else list(out)
        us = [zeros_like(o).requires_grad_(True) for o in outs]
        gs = _grad(outs, ins, grad_outputs=us, create_graph=True, allow_unused=True,
                   materialize_grads=True)
        pairs = [(g, t) for g, t in zip(gs, tangents) if g.requires_grad]
        if pairs:
            jt = _grad([g for g, _ in pairs], us, grad_outputs=[t for _, t in pairs],
                       create_graph=create_graph, allow_unused=True, materialize_grads=True)
        else:
            jt = [zeros_like(o) for o in outs]
    det = (lambda v: v) if create_graph else (lambda v: v.detach())
    if isinstance(out, Tensor):
        return det(out), det(jt[0])
    return tuple(det(o) for o in outs), tuple(det(j) for j in jt)


def jacobian(f, argnums=0):
    """``f -> (args -> Jacobian)`` of shape ``out.shape + arg.shape``."""
    nums = _argnums(argnums)

    def wrapped(*args):
        with enable_grad(), _level():
            nested = _nested()
            ins = _prep(args, nums)
            out = f(*ins)
            flat = out.reshape(-1)
            rows = [[] for _ in nums]
            for k in range(flat.numel()):
                gs = _grad(flat[k], [ins[i] for i in nums], retain_graph=True,
                           create_graph=True, allow_unused=True, materialize_grads=True)
                for r, g in zip(rows, gs):
                    r.append(g)
        jacs = []
        for i, r in zip(nums, rows):
            shape = tuple(out.shape) + tuple(ins[i].shape)
            jacs.append(stack(r).reshape(shape) if r else zeros(shape, dtype=out.dtype))
        if not nested and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            jacs = [j.detach() for j in jacs]  # no outer transform differentiates them
        return jacs[0] if isinstance(argnums, int) else tuple(jacs)
    return wrapped


def hessian(f, argnums=0):
    """``f -> (args -> Hessian)`` for scalar ``f``: the jacobian of the gradient."""
    return jacobian(grad(f, argnums), argnums)


def hvp(f, primals, tangents):
    """``(f(primals), H @ tangents)`` as ``torch.autograd.functional.hvp``."""
    primals = tuple(primals) if isinstance(primals, (list, tuple)) else (primals,)
    tangents = tuple(tangents) if isinstance(tangents, (list, tuple)) else (tangents,)
    with enable_grad():
        ins = _prep(primals, range(len(primals)))
        val = f(*ins)
        gs = _grad(val, ins, create_graph=True, allow_unused=True, materialize_grads=True)
        pairs = [(g, t, x) for g, t, x in zip(gs, tangents, ins) if g.requires_grad]
        prods = _grad([g for g, _, _ in pairs], ins, grad_outputs=[t for _, t, _ in pairs],
                      allow_unused=True, materialize_grads=True) if pairs else \
            tuple(zeros_like(x) for x in ins)
    prods = tuple(p.detach() for p in prods)
    return val.detach(), (prods[0] if len(prods) == 1 else prods)


vhp = hvp
