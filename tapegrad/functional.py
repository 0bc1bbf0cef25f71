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
from .autodiff import _grad_walk, grad as _grad
from .dtypes import get_default_dtype
from .grad_mode import enable_grad, is_grad_enabled
from .ops import eye, movedim, reshape, tensor, zeros, zeros_like
from .tape import state as _record_state
from .tensor import Tensor, buffer
from .vmap import batched_leaf as _batched_leaf, flatten as _flatten, vmap
from .walker import reached_leaves

__all__ = ["grad", "value_and_grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev",
           "jacfwd", "jacobian", "hessian", "hvp", "vhp", "vmap", "functional_call",
           "stack_module_state", "functionalize", "replace_all_batch_norm_modules_"]


def _argnums(argnums):
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        return (argnums,)
    if not isinstance(argnums, tuple) or not argnums or \
            not all(isinstance(n, int) and not isinstance(n, bool) for n in argnums):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    return argnums


def _check_argnums(nums, args):
    for n in nums:
        if not -len(args) <= n < len(args):
            raise RuntimeError(f"Got argnum={n}, but only {len(args)} positional inputs")


_levels = threading.local()


def _depth():
    return getattr(_levels, "n", 0)


def _reverse_depth():
    return getattr(_levels, "rev", 0)


@contextlib.contextmanager
def _level(reverse=False):
    """One more running transform in this thread (``reverse``: one that
    differentiates what runs inside by reverse mode, so must see it recorded)."""
    _levels.n = _depth() + 1
    _levels.rev = _reverse_depth() + reverse
    try:
        yield
    finally:
        _levels.n -= 1
        _levels.rev -= reverse


def _nested():
    """Whether an outer transform (or an explicit Tape, or forward mode) will
    differentiate this one's result, which must then be recorded (a gradient taken
    inside a dual level records, so tangents flow through the backward: forward over
    reverse)."""
    return _depth() > 1 or bool(_record_state.tapes) or bool(_record_state.dual)


def _prep(args, nums):
    """The args with each differentiated one (a Tensor, a number, or a tuple/list/dict
    of them, as torch.func's pytrees) replaced by this transform's own variables."""
    out = list(args)
    for i in nums:
        leaves, rebuild = _flatten(out[i])
        out[i] = rebuild([_fresh(_as_float_tensor(a)) for a in leaves])
    return out


def _variables(ins, nums):
    """The flat list of this transform's variables, and a function giving the
    argnums structure back from a flat list of gradients."""
    flat, rebuilds, counts = [], [], []
    for i in nums:
        leaves, rebuild = _flatten(ins[i])
        flat += leaves
        rebuilds.append(rebuild)
        counts.append(len(leaves))

    def back(gs):
        res, k = [], 0
        for rebuild, n in zip(rebuilds, counts):
            res.append(rebuild(list(gs[k:k + n])))
            k += n
        return res
    return flat, back


def _fresh(a):
    """This transform's own variable for ``a``: an alias recorded on ``a`` when an
    outer transform differentiates ``a``, else a new leaf sharing its buffer."""
    if a.requires_grad:
        return reshape(a, tuple(a.shape))  # a recorded view: the outer graph sees through
    if a._vlevel is not None:  # inside vmap: a batched leaf (per-example gradients)
        leaf = _batched_leaf(a)
        if a._fw:
            leaf._fw = dict(a._fw)
        return leaf
    leaf = Tensor(buffer(a)).requires_grad_(True)
    if a._fw:  # forward over reverse: the variable keeps its tangents
        leaf._fw = dict(a._fw)
    return leaf


def value_and_grad(f, argnums=0, has_aux=False):
    """``f -> (args -> (f(args), df/dargs[argnums]))``; scalar-valued ``f``."""
    nums = _argnums(argnums)

    def wrapped(*args, **kwargs):
        _check_argnums(nums, args)
        with enable_grad(), _level(reverse=True):
            ins = _prep(args, nums)
            out = f(*ins, **kwargs)
            if has_aux and not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError("grad_and_value(f)(*args): output of function f should "
                                   "be a tuple: (output, aux) if has_aux is True")
            val, aux = (out if has_aux else (out, None))
            if not isinstance(val, Tensor) or val.numel() != 1:
                raise RuntimeError("grad: f must return a scalar tensor (one element); "
                                   "use jacobian or vjp for other outputs")
            # record the gradient when an outer transform or an explicit Tape will
            # differentiate it again (or a caller's recording: an input requires grad);
            # inside a dual level alone, the adjoints run on Tensors for their tangents
            # to flow (forward over reverse), unrecorded
            create = _reverse_depth() > 1 or bool(_record_state.tapes) or (
                is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                          for a in _flatten(list(args))[0]))
            tangents = bool(_record_state.dual)
            flat, back = _variables(ins, nums)
            if create or not tangents:
                gs = _grad(val, flat, create_graph=True if create else False,
                           allow_unused=True, materialize_grads=True)
            else:
                gs = _grad_walk([val], flat, None, False, True, False, True, True)
            if not create and not tangents:  # (inside vmap the walk records anyway)
                gs = [g.detach() for g in gs]
                if aux is not None:  # (as PyTorch's: the aux leaves the transform's level)
                    leaves, rebuild = _flatten(aux)
                    aux = rebuild([t.detach() if isinstance(t, Tensor) else t
                                   for t in leaves])
            gs = back(gs)
        g = gs[0] if isinstance(argnums, int) else tuple(gs)
        return ((val, aux), g) if has_aux else (val, g)
    return wrapped


def grad(func, argnums=0, has_aux=False):
    """``func -> (args -> dfunc/dargs[argnums])`` for scalar-valued ``func``; composes for
    higher derivatives: ``grad(grad(func))``."""
    vg = value_and_grad(func, argnums, has_aux)

    def wrapped(*args, **kwargs):
        (val_aux, g) = vg(*args, **kwargs)
        return (g, val_aux[1]) if has_aux else g
    return wrapped


def grad_and_value(func, argnums=0, has_aux=False):
    """``func -> (args -> (grad, value))`` as ``torch.func.grad_and_value``: the gradient
    first, then ``func``'s value (``(value, aux)`` with ``has_aux``)."""
    vg = value_and_grad(func, argnums, has_aux)

    def wrapped(*args, **kwargs):
        val, g = vg(*args, **kwargs)
        return g, val
    return wrapped


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)`` as ``torch.func.vjp``: ``vjp_fn(cotangents)`` (the
    structure of ``func``'s output) gives a tuple with one cotangent per primal, each in
    that primal's structure (primals and outputs may be pytrees). As PyTorch's, the
    output and the cotangents require grad only where something outside this transform
    tracks them, with grad mode on where each is made: an outer transform or Tape, a
    primal (or a tensor ``func`` closes over) that requires grad, or, for the
    cotangents, a cotangent given that requires grad."""
    tracking = is_grad_enabled()
    with enable_grad():
        ins = _prep(primals, range(len(primals)))
        res = func(*ins)
    out, aux = res if has_aux else (res, None)
    outs, out_rebuild = _flatten(out)
    flat, back = _variables(ins, range(len(ins)))
    tracked = _depth() > 0 or _nested() or _reaches_outside(outs, flat)
    if not (tracking and tracked):
        out = out_rebuild([o.detach() if isinstance(o, Tensor) else o for o in outs])

    def vjp_fn(*vs):
        vs = _flatten(vs[0] if len(vs) == 1 else vs)[0]
        if len(vs) != len(outs):
            raise RuntimeError(f"vjp: expected {len(outs)} cotangents (the structure of func's "
                               f"output), got {len(vs)}")
        create = is_grad_enabled() and (tracked or any(
            isinstance(v, Tensor) and v.requires_grad for v in vs))
        with enable_grad():
            gs = _grad(outs, flat, grad_outputs=list(vs), retain_graph=True,
                       create_graph=create, allow_unused=True, materialize_grads=True)
        if not create:
            gs = [g.detach() for g in gs]
        return tuple(back(gs))
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _reaches_outside(outs, own):
    """Whether the recording of ``outs`` reaches a leaf other than ``own`` (a primal's
    alias counts: it is recorded on a tensor that requires grad)."""
    own = {id(t) for t in own}
    return any(id(e) not in own for e in
               reached_leaves([o for o in outs if isinstance(o, Tensor) and o.requires_grad]))


def _tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _as_float_tensor(a):
    if isinstance(a, Tensor):
        return a
    return tensor(a, dtype=get_default_dtype() if isinstance(a, (int, float)) else None)


def jvp(func, primals, tangents, *, has_aux=False):
    """``(func(*primals), J @ tangents)`` by forward mode (``tg.forward_ad``): one pass of
    ``func`` whose every op also computes its output's tangent from the registry's
    forward-mode rule. ``primals``/``tangents`` are tuples of pytrees of the same
    structure (a single Tensor is taken as a 1-tuple); the results have the structure
    of ``func``'s output, and an output the tangents do not reach gets a zero tangent."""
    primals, tangents = _tuple(primals), _tuple(tangents)
    p_leaves, p_rebuild = _flatten(list(primals))
    t_leaves, _ = _flatten(list(tangents))
    if len(p_leaves) != len(t_leaves):
        raise ValueError(f"jvp: got {len(p_leaves)} primals and {len(t_leaves)} tangents "
                         f"(they must have the same structure)")
    p_leaves = [_as_float_tensor(p) for p in p_leaves]
    t_leaves = [_as_float_tensor(t) for t in t_leaves]
    for p, t in zip(p_leaves, t_leaves):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"jvp: tangent shape {tuple(t.shape)} differs from primal "
                               f"shape {tuple(p.shape)}")
    keep = _nested() or (is_grad_enabled() and any(
        a.requires_grad for a in p_leaves + t_leaves))
    with _level(), _fwad.dual_level():
        duals = [_fwad.make_dual(p, t.to(p.dtype) if t.dtype != p.dtype else t)
                 for p, t in zip(p_leaves, t_leaves)]
        res = func(*p_rebuild(duals))
        out, aux = res if has_aux else (res, None)
        outs, out_rebuild = _flatten(out)
        pairs = [_fwad.unpack_dual(o) for o in outs]
    prim = [p for p, _ in pairs]
    tan = [zeros_like(p) if t is None else t for p, t in pairs]
    if not keep:
        prim = [p.detach() for p in prim]
        tan = [t.detach() for t in tan]
    res = (out_rebuild(prim), out_rebuild(tan))
    return res + (aux,) if has_aux else res


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)`` as ``torch.func.linearize``: ``jvp_fn(*tangents)``
    gives the Jacobian-vector product at ``primals`` in the structure of ``func``'s
    output (each call runs ``func`` forward once with the tangents)."""
    leaves, rebuild = _flatten(list(primals))
    out, _ = jvp(func, primals, tuple(rebuild([zeros_like(_as_float_tensor(p))
                                               for p in leaves])))

    def jvp_fn(*tangents):
        if len(tangents) != len(primals):
            raise RuntimeError(f"linearize: jvp_fn expected {len(primals)} tangents (one per "
                               f"primal), got {len(tangents)}")
        return jvp(func, primals, tangents)[1]
    return out, jvp_fn


def _basis(n, like, shape):
    """The n unit vectors of a space of ``shape``, stacked: (n, *shape)."""
    return eye(n, dtype=like.dtype, device=like.device).reshape((n,) + tuple(shape))


def _pack(argnums, per_arg):
    """One result per argnum: the single one for an int ``argnums``, else a tuple."""
    return per_arg[0] if isinstance(argnums, int) else tuple(per_arg)


def jacfwd(func, argnums=0, *, has_aux=False, randomness="error"):
    """``func -> (args -> Jacobian)`` by forward mode, as ``torch.func.jacfwd``: for each
    input leaf, ``jvp`` vmapped over its unit tangents (one forward pass for all its
    columns). Each output leaf holds, in the structure of the ``argnums`` arguments
    (pytrees), blocks of shape ``out.shape + arg.shape``."""
    nums = _argnums(argnums)

    def wrapped(*args):
        args = list(args)
        for i in nums:
            leaves, rebuild = _flatten(args[i])
            args[i] = rebuild([_as_float_tensor(a) for a in leaves])
        flat, back = _variables(args, nums)

        def call(k, xk):
            leaves = list(flat)
            leaves[k] = xk
            a = list(args)
            for i, tree in zip(nums, back(leaves)):
                a[i] = tree
            return func(*a)

        spec = []
        aux = None
        blocks = []  # per input leaf: one block per output leaf
        for k, x in enumerate(flat):
            def column(t, k=k, x=x):
                res = jvp(lambda xk: call(k, xk), (x,), (t,), has_aux=has_aux)
                leaves, rebuild = _flatten(res[1])
                spec[:] = [rebuild]
                return (tuple(leaves), res[2]) if has_aux else tuple(leaves)
            n = x.numel()
            if n == 0:
                res = call(k, x)
                out = res[0] if has_aux else res
                leaves, rebuild = _flatten(out)
                spec[:] = [rebuild]
                blocks.append([zeros(tuple(o.shape) + tuple(x.shape), dtype=x.dtype)
                               for o in leaves])
                continue
            cols = vmap(column, randomness=randomness)(_basis(n, x, x.shape))
            if has_aux:
                cols, aux = cols
                aux = _flatten(aux)[1]([a[0] if isinstance(a, Tensor) else a
                                        for a in _flatten(aux)[0]])
            blocks.append([movedim(c, 0, -1).reshape(tuple(c.shape[1:]) + tuple(x.shape))
                           for c in cols])
        n_out = len(blocks[0]) if blocks else 0
        per_out = [_pack(argnums, back([b[j] for b in blocks])) for j in range(n_out)]
        res = spec[0](per_out) if spec else _pack(argnums, back([]))
        return (res, aux) if has_aux else res
    return wrapped


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """``func -> (args -> Jacobian)`` by reverse mode, as ``torch.func.jacrev``: one
    forward pass, then the vjp vmapped over the unit cotangents (one backward for all
    rows). Each output leaf holds, in the structure of the ``argnums`` arguments
    (pytrees), blocks of shape ``out.shape + arg.shape``."""
    nums = _argnums(argnums)

    def wrapped(*args):
        with enable_grad(), _level(reverse=True):
            nested = _nested()
            ins = _prep(args, nums)
            res = func(*ins)
            out, aux = res if has_aux else (res, None)
            outs, out_rebuild = _flatten(out)
            xs, back = _variables(ins, nums)
            per_out = []
            for o in outs:
                n = o.numel()
                if n == 0 or not o.requires_grad:
                    per_out.append([zeros(tuple(o.shape) + tuple(x.shape), dtype=x.dtype)
                                    for x in xs])
                    continue

                def row(v, o=o):
                    return tuple(_grad([o], xs, grad_outputs=[v], retain_graph=True,
                                       create_graph=True, allow_unused=True,
                                       materialize_grads=True))
                rows = vmap(row, chunk_size=chunk_size)(_basis(n, o, o.shape))
                per_out.append([r.reshape(tuple(o.shape) + tuple(x.shape))
                                for r, x in zip(rows, xs)])
        if not nested and not any(isinstance(a, Tensor) and a.requires_grad
                                  for a in _flatten(list(args))[0]):
            per_out = [[j.detach() for j in js] for js in per_out]
        jac = out_rebuild([_pack(argnums, back(js)) for js in per_out])
        return (jac, aux) if has_aux else jac
    return wrapped


jacobian = jacrev




def hessian(func, argnums=0):
    """``func -> (args -> Hessian)`` for scalar ``func``: forward over reverse,
    ``jacfwd(jacrev(func))`` as ``torch.func.hessian``."""
    return jacfwd(jacrev(func, argnums), argnums)


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


def functional_call(module, params_and_buffers, args=None, kwargs=None, *, tie_weights=True,
                    strict=False):
    """``module(*args, **kwargs)`` with its parameters and buffers replaced by the
    tensors of ``params_and_buffers`` (a dict by dotted name, or a tuple of dicts), as
    ``torch.func.functional_call``: the module is unchanged afterwards. With
    ``vmap(grad(...))`` over such a call, per-example gradients. ``tie_weights``: a
    tensor the module holds under several names (tied weights) is replaced under all
    of them when one is given; ``strict``: every parameter and buffer must be given,
    and nothing else (RuntimeError)."""
    if isinstance(params_and_buffers, (tuple, list)):
        merged = {}
        for d in params_and_buffers:
            dup = set(merged) & set(d)
            if dup:
                raise ValueError(f"functional_call: {sorted(dup)} appear in more than one "
                                 f"dict")
            merged.update(d)
        params_and_buffers = merged
    params_and_buffers = dict(params_and_buffers)
    if tie_weights or strict:
        named = list(module.named_parameters(remove_duplicate=False)) + \
            list(module.named_buffers(remove_duplicate=False))
        by_tensor = {}
        for name, t in named:
            by_tensor.setdefault(id(t), []).append(name)
        tied = {name: names for names in by_tensor.values() for name in names}
        if tie_weights:
            for name in list(params_and_buffers):
                for other in tied.get(name, ()):
                    params_and_buffers.setdefault(other, params_and_buffers[name])
        if strict:
            given = set(params_and_buffers)
            unexpected = [k for k in params_and_buffers if k not in tied]
            missing = [n for n, _ in named if n not in given]
            msgs = []
            if unexpected:
                msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
            if missing:
                msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
            if msgs:
                raise RuntimeError(f"Error(s) in reparametrizing for "
                                   f"{type(module).__name__}:\n\t" + "\n\t".join(msgs))
    args = () if args is None else args
    args = args if isinstance(args, tuple) else (args,)
    kwargs = kwargs or {}
    swapped = []
    try:
        for name, value in params_and_buffers.items():
            owner = module
            *path, key = name.split(".")
            for p in path:
                owner = getattr(owner, p)
            for store in ("_parameters", "_buffers"):
                table = getattr(owner, store, None)
                if table is not None and key in table:
                    swapped.append((table, key, table[key]))
                    table[key] = value
                    break
            else:
                if strict:
                    raise KeyError(f"functional_call: the module has no parameter or buffer "
                                   f"{name!r}")
                swapped.append((owner.__dict__, key, owner.__dict__.get(key, _MISSING)))
                owner.__dict__[key] = value
        return module(*args, **kwargs)
    finally:
        for table, key, old in reversed(swapped):
            if old is _MISSING:
                del table[key]
            else:
                table[key] = old


_MISSING = object()


def stack_module_state(models):
    """``(params, buffers)``: for modules of one structure, dicts from each parameter's
    and buffer's name to the stack of that tensor over ``models`` (leading dimension:
    the model), as ``torch.func.stack_module_state``; for ``vmap`` over
    ``functional_call``. A stacked parameter is a fresh leaf that requires grad when
    the originals do."""
    from .ops import stack
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: expected at least one model, got 0")
    first = type(models[0])
    if any(type(m) is not first for m in models):
        raise RuntimeError("stack_module_state: expected all models to be of the same "
                           "class, got " + ", ".join(sorted({type(m).__name__ for m in models})))

    def stacked(named, grads):
        names = [n for n, _ in named(models[0])]
        tables = [dict(named(m)) for m in models]
        out = {}
        for n in names:
            if any(n not in t for t in tables):
                raise RuntimeError(f"stack_module_state: {n!r} is missing from some models")
            s = stack([t[n].detach() for t in tables])
            if grads and all(t[n].requires_grad for t in tables):
                s.requires_grad_(True)
            out[n] = s
        return out
    return (stacked(lambda m: m.named_parameters(), True),
            stacked(lambda m: m.named_buffers(), False))


def functionalize(func, *, remove="mutations"):
    """``torch.func.functionalize``: ``func`` with the same results and the same
    writes into its inputs. tapegrad's transforms already differentiate and batch
    through in-place ops, so no rewriting is needed: the returned function calls
    ``func``."""
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(f"functionalize: remove must be 'mutations' or "
                           f"'mutations_and_views', got {remove!r}")

    def wrapped(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapped


def replace_all_batch_norm_modules_(root):
    """In place, every batch norm module under ``root`` stops tracking running
    statistics (``running_mean``/``running_var`` None, ``track_running_stats`` False),
    so it normalises with the batch's own statistics, under ``vmap`` too; returns
    ``root``, as ``torch.func.replace_all_batch_norm_modules_``."""
    for m in root.modules():
        if hasattr(m, "track_running_stats") and hasattr(m, "running_mean"):
            m.running_mean = None
            m.running_var = None
            m.num_batches_tracked = None
            m.track_running_stats = False
    return root
