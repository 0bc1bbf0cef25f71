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

from . import forward_ad as _fwad
from .autodiff import grad as _grad
from .dtypes import get_default_dtype
from .grad_mode import enable_grad, is_grad_enabled
from .ops import reshape, stack, tensor, zeros, zeros_like
from .tape import state as _record_state
from .tensor import Tensor, buffer

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd", "jacobian", "hessian",
           "hvp", "vhp"]


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
    """Whether an outer transform (or an explicit Tape, or forward mode) will
    differentiate this one's result, which must then be recorded (a gradient taken
    inside a dual level records, so tangents flow through the backward: forward over
    reverse)."""
    return _depth() > 1 or bool(_record_state.tapes) or bool(_record_state.dual)


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
    leaf = Tensor(buffer(a)).requires_grad_(True)
    if a._fw:  # forward over reverse: the variable keeps its tangents
        leaf._fw = dict(a._fw)
    return leaf


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


def _tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _as_float_tensor(a):
    if isinstance(a, Tensor):
        return a
    return tensor(a, dtype=get_default_dtype() if isinstance(a, (int, float)) else None)


def jvp(f, primals, tangents, *, has_aux=False):
    """``(f(*primals), J @ tangents)`` by forward mode (``tg.forward_ad``): one pass of
    ``f`` whose every op also computes its output's tangent from the registry's
    forward-mode rule. ``primals``/``tangents`` are tuples (a single Tensor is taken as
    a 1-tuple); an output the tangents do not reach gets a zero tangent."""
    primals = tuple(_as_float_tensor(p) for p in _tuple(primals))
    tangents = tuple(_as_float_tensor(t) for t in _tuple(tangents))
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: got {len(primals)} primals and {len(tangents)} tangents")
    for p, t in zip(primals, tangents):
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"jvp: tangent shape {tuple(t.shape)} differs from primal shape "
                             f"{tuple(p.shape)}")
    keep = _nested() or (is_grad_enabled() and any(
        a.requires_grad for a in primals + tangents))
    with _level(), _fwad.dual_level():
        duals = [_fwad.make_dual(p, t.to(p.dtype) if t.dtype != p.dtype else t)
                 for p, t in zip(primals, tangents)]
        res = f(*duals)
        out, aux = res if has_aux else (res, None)
        outs = [out] if isinstance(out, Tensor) else list(out)
        pairs = [_fwad.unpack_dual(o) for o in outs]
    prim = [p for p, _ in pairs]
    tan = [zeros_like(p) if t is None else t for p, t in pairs]
    if not keep:
        prim = [p.detach() for p in prim]
        tan = [t.detach() for t in tan]
    if isinstance(out, Tensor):
        res = (prim[0], tan[0])
    else:
        res = (tuple(prim), tuple(tan))
    return res + (aux,) if has_aux else res


def jacfwd(f, argnums=0):
    """``f -> (args -> Jacobian)`` by forward mode: one ``jvp`` per input direction
    (the columns); shape ``out.shape + arg.shape``."""
    nums = _argnums(argnums)

    def wrapped(*args):
        args = [_as_float_tensor(a) if i in nums else a for i, a in enumerate(args)]
        jacs = []
        for i in nums:
            x = args[i]
            n = x.numel()
            eye = zeros((n, n), dtype=x.dtype)
            buffer(eye)[range(n), range(n)] = 1
            cols = []
            out = None
            for k in range(n):
                def fi(xi, i=i):
                    a = list(args)
                    a[i] = xi
                    return f(*a)
                out, col = jvp(fi, (x,), (eye[k].reshape(tuple(x.shape)),))
                cols.append(col)
            shape = tuple(out.shape) + tuple(x.shape)
            jacs.append(stack(cols, dim=-1).reshape(shape) if cols else
                        zeros(shape, dtype=x.dtype))
        return jacs[0] if isinstance(argnums, int) else tuple(jacs)
    return wrapped


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


jacrev = jacobian


def hessian(f, argnums=0):
    """``f -> (args -> Hessian)`` for scalar ``f``: forward over reverse,
    ``jacfwd(jacrev(f))`` as ``torch.func.hessian``."""
    return jacfwd(jacrev(f, argnums), argnums)


def hvp(f, primals, tangents):
    """``(f(primals), H @ tangents)`` as ``torch.autograd.functional.hvp``, by forward
    over reverse: the jvp of the gradient."""
    primals = tuple(_as_float_tensor(p) for p in _tuple(primals))
    tangents = tuple(_as_float_tensor(t) for t in _tuple(tangents))
    vg = value_and_grad(f, argnums=tuple(range(len(primals))))

    def grads(*xs):
        val, gs = vg(*xs)
        return tuple(gs) + (val,)
    out, tan = jvp(grads, primals, tangents)
    prods = tan[:-1]
    return out[-1], (prods[0] if len(prods) == 1 else prods)


vhp = hvp
