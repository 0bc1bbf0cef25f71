"""``tg.compile(module)``: the module, its ``forward`` compiled, the backward outside.

``CompiledModule`` is an ``nn.Module`` (as PyTorch's ``OptimizedModule``, the wrapped
module in ``_orig_mod``) that behaves as the module it wraps: every attribute that is
not the wrapper's own (``parameters``, ``state_dict``, ``train``/``eval``, hooks, ``to``)
is the module's. A call under grad mode
whose inputs or parameters require grad runs ``_Joint``: on its first call for a
guard it captures the forward and then the backward of its outputs (the *joint*
graph, cotangents as arguments) and splits it (``partition``) into a forward program
that also returns the values the backward reads (the saved values) and a backward
program that takes them, as AOTAutograd does. A replay runs the forward program and
records ONE node on the tape, over the tensor arguments and the parameters; the node
keeps the saved values (in the forward program's rings: a second forward before the
first backward writes into other buffers) and its adjoint replays the backward
program on them and the output gradients, without recomputing the forward. A
backward without ``retain_graph`` lets the saved values go, as does the output dying.

The capture ran the forward once eagerly: the module's buffers (running statistics)
and the random generator are put back after it, so the replay that follows updates
them once (``stats()["replays"]`` counts the calls after the capture). When the
capture finds the forward cannot be replayed, nothing is put back: that eager
forward, recorded on the tape, is the call's result, so its side effects (buffers,
draws, Python state) happen once. A dropout in training mode is a step of the
forward program that draws its mask from the global generator on each replay, as the
eager call would (the same numbers for the same seed); the mask is a saved value of
the backward. A forward the capture cannot replay (another random draw outside
the ops, say) runs eagerly, recording as usual. A backward with ``create_graph=True``
recomputes the forward eagerly, recording, so higher derivatives are right (with a
warning); a forward that drew recomputes from the generator's state before its
draws. A module with hooks anywhere in its tree runs eagerly (the hooks are Python
the program would not run); so does a call inside another capture (that capture
records its ops). A call under ``no_grad`` or with nothing requiring grad replays
the forward alone.
"""
import builtins
import inspect
import threading
import warnings
from collections import OrderedDict

import numpy as np

from .. import dtypes as _dtypes
from .._util import loud_numpy, quiet_numpy
from ..dispatch import bind
from ..grad_mode import enable_grad, is_grad_enabled
from ..nn.module import GLOBAL_CALL_HOOKS, Module
from ..ops.creation import raw_rng_state, set_raw_rng_state
from ..ops_registry.opdef import OpDef, validate
from ..tensor import Tensor, buffer, mark_written, wrap
from ..walker import reached_leaves
from .api import Compiled, store_guards, transforming
from .capture import capturing
from .partition import partition
from .zero_cotangents import backward_for

__all__ = ["CompiledModule"]

_OWN = ("_orig_mod", "_fwd", "_joint", "_eager_calls", "_node_calls", "_bwd_replays",
        "_last_joint", "_warned", "_ops", "_draws", "_tree")
_dict_of = object.__getattribute__

_EAGER = object()     # the joint says: run this call eagerly
_CAPTURED = object()  # the joint captured (and put the state back): call it again


class _Replayed:
    """The joint's forward replayed: its program and its results (the outputs, then
    the saved values)."""
    __slots__ = ("prog", "arrays")

    def __init__(self, prog, arrays):
        self.prog, self.arrays = prog, arrays


class _Ran:
    """The joint's capture failed, and its forward, run eagerly and recording, is this
    call's: its output."""
    __slots__ = ("out",)

    def __init__(self, out):
        self.out = out


class _Call:
    """One call's state, handed to the node: the forward's outputs until the kernel
    takes them; the program (its backward); the arguments for a ``create_graph``
    backward, which recomputes, and the generator's state before the forward when it
    drew (dropout): the recomputation draws the same masks."""
    __slots__ = ("computed", "prog", "args", "kwargs", "tensors", "rng")

    def __init__(self, computed, prog, args, kwargs, tensors, rng):
        self.computed, self.prog = computed, prog
        self.args, self.kwargs, self.tensors = args, kwargs, tensors
        self.rng = rng


def _named_as_forward(f, module):
    """``f`` (a wrapper calling ``module.forward``) named and signed as that forward, so
    guards read ``x: float32[...]``, not ``args[0]``."""
    f.__qualname__ = (getattr(module.forward, "__qualname__", "forward")
                      if type(module) is FnModule else f"{type(module).__name__}.forward")
    try:
        f.__signature__ = inspect.signature(module.forward)
    except (TypeError, ValueError):
        pass


class _Joint(Compiled):
    """The module's forward and backward captured as one program, partitioned
    (``partition``); a replay returns a ``_Replayed``, never runs ``fn`` eagerly (the
    caller runs the module instead when it returns ``_EAGER``)."""

    def __init__(self, model, fuse, max_captures, fullgraph=False):
        self.module = model
        info = []  # (the capture's step count where the backward began, the output
        #             structure, the cotangents' values, the outputs they are of)

        def joint(*args, **kwargs):
            return _joint(model, info, args, kwargs)
        _named_as_forward(joint, model)
        self._info = info
        super().__init__(joint, fuse=fuse, max_captures=max_captures, fullgraph=fullgraph)

    def _eager_call(self, args, kwargs):
        return _EAGER

    def _program(self, graph):
        mark, spec, cots, which = self._info[:4]
        prog = partition(graph, mark, cots, fuse=self.fuse)
        prog.spec, prog.cot_values, prog.cot_outputs = spec, cots, which
        return prog

    def _result(self, prog, res, args, kwargs):
        return _Replayed(prog, res)

    _ITEM_OUTPUTS = False  # (its outputs are the forward's tensors and the gradients)
    _LEAF_OUTPUTS = False
    _UNDO_WRITES = True  # (a replay follows the capture: its in-place writes undone)

    def _capture(self, key, args, kwargs, why):
        rng = raw_rng_state()
        kept = [(b, buffer(b).copy()) for b in self.module.buffers()]
        info = self._info
        info[:] = []
        replayable = False
        try:
            super()._capture(key, args, kwargs, why)
            progs = self._programs.get(key)
            replayable = bool(progs) and not isinstance(progs[0][0], str)
        finally:
            if replayable or not info:  # (the replay that follows makes the forward's
                set_raw_rng_state(rng)  # state changes)
                for b, v in kept:
                    buffer(b)[...] = v
                    mark_written(b)
                # (and what it wrote in place outside: an argument, x.mul_(2), a global
                # tensor, a parameter; else the capture and the replay after it would
                # both write it)
                for a, v in reversed(self.__dict__.get("_undo") or ()):
                    a[...] = v
            self.__dict__.pop("_undo", None)
        if replayable:
            del info[4:]  # (the capture's outputs, and the graph behind them, let go)
            return _CAPTURED
        if len(info) < 5:  # the forward did not run (or returned no tensors)
            return _EAGER
        # The capture's forward was the eager call (its buffer updates, draws and
        # Python side effects happened once): its outputs are this call's result.
        out = info[4]
        info[4] = None
        return _Ran(out)


def _joint(model, info, args, kwargs):
    """The function ``_Joint`` captures: the forward, then the gradients of the
    parameters and arguments that require grad for cotangents that are arguments of
    the program (placeholders of ones here)."""
    from ..autodiff import grad
    rec = capturing()
    with enable_grad():
        out = model.forward(*args, **kwargs)
    outs, spec = _flatten(out)
    info[:] = [len(rec.g.steps), spec, [], [], out]
    if spec is None or not outs:
        rec.fail(f"{type(model).__name__} returns {type(out).__name__} outside tensors "
                 f"in tuples, lists and dicts")
        return None
    ys, cots = [], []
    for k, o in enumerate(outs):
        if o.requires_grad:
            c = np.ones(o.shape, buffer(o).dtype)
            info[2].append(rec.new(c, "arg"))
            info[3].append(k)
            ys.append(o)
            cots.append(wrap(c))
    params = [p for p in model.parameters() if p.requires_grad]
    wrt = params + [a for a in _tensors(args, kwargs) if a.requires_grad]
    grads = [None] * len(wrt)
    other = _other_leaves(ys, wrt)
    if other:
        rec.fail(f"its outputs depend on a tensor that requires grad and is neither an "
                 f"argument nor a parameter of the module (shape {tuple(other[0].shape)}: "
                 f"a global, a closure, an attribute), whose gradient the node would not "
                 f"give")
        return None
    if ys and wrt:
        try:
            # (the graph kept: should the capture fail, its outputs are the call's)
            grads = grad(ys, wrt, cots, retain_graph=True, allow_unused=True)
        except Exception as e:  # (eagerly, it raises at the user's backward, not here)
            rec.fail(f"its backward raised {type(e).__name__}: {e}")
    return tuple(wrap(buffer(o)) for o in outs), tuple(grads)


class FnModule(Module):
    """A function as a module, for ``tg.compile(fn)`` whose outputs are differentiated
    outside: its forward is the function; its parameters, the leaf tensors requiring
    grad and the modules the function names (closure cells, globals: ``_references``),
    so the compiled node gives them their gradients (a leaf reached otherwise makes the
    call run eagerly: ``_other_leaves``)."""

    def __init__(self, fn):
        super().__init__()
        from .api import _references
        self.__dict__["forward"] = fn  # (its signature names the guards' arguments)
        for k, (_, _, obj, tensors) in enumerate(_references(fn)):
            if tensors is not None:
                self._modules[f"module{k}"] = obj
            elif obj.requires_grad and obj._node is None:
                self._parameters[f"leaf{k}"] = obj


def _other_leaves(outs, known):
    """The leaf tensors requiring grad that ``outs`` were computed from (their recorded
    graph walked once) other than those in ``known``."""
    ids = {id(t) for t in known}
    return [e for e in reached_leaves(outs) if e.requires_grad and id(e) not in ids]


class CompiledModule(Module):
    """What ``tg.compile(module)`` returns (see the module docstring)."""

    def __init__(self, module, fuse=True, max_captures=8, fullgraph=False):
        d = self.__dict__
        d["_orig_mod"] = module
        model = module

        def forward(*args, **kwargs):
            return model.forward(*args, **kwargs)
        _named_as_forward(forward, module)
        d["_fwd"] = Compiled(forward, fuse=fuse, max_captures=max_captures,
                             fullgraph=fullgraph)
        d["_joint"] = _Joint(module, fuse, max_captures, fullgraph)
        d["_eager_calls"] = 0
        d["_node_calls"] = 0
        d["_bwd_replays"] = 0
        d["_last_joint"] = False
        d["_warned"] = False
        d["_ops"] = {}
        d["_draws"] = False  # a program of the joint draws: each call keeps the state
        d["_tree"] = None    # (a check that the module tree is as when walked, its
        #                      trainable parameters then): _refresh_tree

    # ------------------------------------------------------------ behaving as the module
    def __getattribute__(self, name):
        # the wrapper's own names and state here; Module's methods and everything
        # else are the wrapped module's (its parameters, hooks, training flag)
        if name in _LOCAL or name[:2] == "__" == name[-2:]:
            return object.__getattribute__(self, name)
        d = object.__getattribute__(self, "__dict__")
        if name in d:
            return d[name]
        return getattr(d["_orig_mod"], name)

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

    def __bool__(self):  # (not len(): a module without one is true, as any object)
        return True

    def __deepcopy__(self, memo):
        """A compiled copy of a copy of the module (its programs are captured again)."""
        import copy
        d = self.__dict__
        f = d["_fwd"]
        return CompiledModule(copy.deepcopy(d["_orig_mod"], memo), fuse=f.fuse,
                              max_captures=f.max_captures, fullgraph=f.fullgraph)

    def __iter__(self):
        return iter(self._orig_mod)

    def __repr__(self):
        return f"CompiledModule({self._orig_mod!r})"

    def train(self, mode=True):
        self._orig_mod.train(mode)
        return self

    def eval(self):
        return self.train(False)

    # the module's methods that return the module itself return this wrapper, as
    # PyTorch's OptimizedModule does (``model = model.to(dtype)`` stays compiled)
    def to(self, *args, **kwargs):
        self._orig_mod.to(*args, **kwargs)
        return self

    def float(self):
        return self.to(_dtypes.float32)

    def double(self):
        return self.to(_dtypes.float64)

    def half(self):
        return self.to(_dtypes.float16)

    def bfloat16(self):
        return self.to(_dtypes.bfloat16)

    def cpu(self):
        self._orig_mod.cpu()
        return self

    def cuda(self, device=None):
        self._orig_mod.cuda(device)
        return self

    def requires_grad_(self, requires_grad=True):
        self._orig_mod.requires_grad_(requires_grad)
        return self

    def apply(self, fn):
        self._orig_mod.apply(fn)
        return self

    def share_memory(self):
        self._orig_mod.share_memory()
        return self

    def forward(self, *args, **kwargs):
        return self(*args, **kwargs)

    # ------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        d = _dict_of(self, "__dict__")  # (not through __getattribute__: a Python frame)
        m = d["_orig_mod"]
        tree = d["_tree"]
        params = tree[1] if tree is not None and tree[0]() else _refresh_tree(d, m)
        if params is None or capturing() is not None or transforming():
            # (hooks in the tree; anomaly mode, a tg.Tape, forward mode, vmap: see
            # api.transforming)
            d["_eager_calls"] += 1
            return m(*args, **kwargs)
        tensors = _tensors(args, kwargs)
        if not is_grad_enabled() or not (params or any(t.requires_grad for t in tensors)):
            d["_last_joint"] = False
            return d["_fwd"](*args, **kwargs)
        joint = d["_joint"]
        rng = raw_rng_state() if d["_draws"] else None
        r = joint(*args, **kwargs)  # (_EAGER, never running the forward, if it cannot replay)
        if r is _CAPTURED:  # (the capture put the state back: now the replay)
            rng = raw_rng_state()
            r = joint(*args, **kwargs)
            if type(r) is _Replayed:  # (the capture call counts as a capture alone)
                joint._replays -= 1
        if type(r) is _Ran:  # the capture could not be replayed: its eager forward
            d["_eager_calls"] += 1
            return r.out
        if type(r) is not _Replayed:  # a forward that cannot be replayed runs eagerly,
            d["_eager_calls"] += 1    # recording as usual
            return m(*args, **kwargs)
        d["_node_calls"] += 1
        d["_last_joint"] = True
        prog, arrays = r.prog, r.arrays
        if prog.draws:
            d["_draws"] = True
        else:
            rng = None
        nout = prog.n_out
        saves = prog.__dict__.get("node_saves")
        if saves is None or len(saves[0]) != len(tensors) + len(params):
            saves = prog.node_saves = _node_saves(prog, args, kwargs, params)
        key = (len(tensors), len(params), nout, saves)
        op = d["_ops"].get(key)
        if op is None:
            op = self._node_op(*key)
        call = _Call(arrays[:nout] if nout > 1 else arrays[0], prog, args, kwargs, tensors,
                     rng)
        res = bind(op, *tensors, *params, call=call)
        node = (res if nout == 1 else res[0])._node
        if node is not None:  # the saved values, let go with the node's (see Node.inputs)
            node.inputs = arrays[nout:]
        if prog.spec == "T":
            return res
        return _unflatten(prog.spec, iter((res,) if nout == 1 else res))

    def _node_op(self, n_in, n_params, nout, saves):
        """The node's OpDef (one per arity and ``saves``, made once): the call's own
        state (the forward's results, the program) comes as the ``call`` attr; the
        saved values are the node's ``inputs``; ``saves`` names the inputs (and the
        output) the backward reads, whose versions the node checks."""
        key = (n_in, n_params, nout, saves)
        op = self._ops.get(key)
        if op is not None:
            return op
        me = self

        def run(*arrays, call):
            out = call.computed
            call.computed = None
            return out

        d = _dict_of(me, "__dict__")

        def vjp(ctx, g):
            call = ctx.attrs["call"]
            gs = [g] if nout == 1 else list(g)
            for x in gs:
                if isinstance(x, Tensor):
                    return me._eager_vjp(call, gs)
            d["_bwd_replays"] += 1
            return _replayed_vjp(call, ctx.inputs, gs)

        names = tuple(f"arg{i}" for i in range(n_in + n_params))
        op = OpDef(name=f"compiled[{type(self._orig_mod).__name__}]", kernel=run,
                   infer=lambda *s, **k: None, infer_first=False, args=names, vjp=vjp,
                   nout=nout,
                   saves=tuple(n for n, s in zip(names, saves[0]) if s) + saves[1],
                   samples=lambda dtype=None: [])
        validate(op)
        self._ops[key] = op
        return op

    def _eager_vjp(self, call, gs):
        if not self._warned:
            self.__dict__["_warned"] = True
            warnings.warn("tg.compile: a backward with create_graph=True through a compiled "
                          "module recomputes its forward eagerly", RuntimeWarning,
                          stacklevel=2)
        from ..autodiff import grad
        m = self._orig_mod
        kept = [(b, buffer(b).copy()) for b in m.buffers()]
        now = None
        if call.rng is not None:  # the forward's draws again (the same dropout masks)
            now = raw_rng_state()
            set_raw_rng_state(call.rng)
        try:
            with enable_grad():
                outs, _ = _flatten(m.forward(*call.args, **call.kwargs))
        finally:
            for b, v in kept:  # the recomputation's buffer writes, undone
                buffer(b)[...] = v
                mark_written(b)
            if now is not None:
                set_raw_rng_state(now)
        params = [p for p in m.parameters() if p.requires_grad]
        pairs = [(o, g) for o, g in zip(outs, gs) if g is not None and o.requires_grad]
        xs = call.tensors
        need = [x for x in xs if x.requires_grad] + params
        if not pairs or not need:
            return [None] * (len(xs) + len(params))
        grads = iter(grad([o for o, _ in pairs], need, [g for _, g in pairs],
                          allow_unused=True, create_graph=True))
        res = [next(grads) if x.requires_grad else None for x in xs]
        return res + [next(grads) for _ in params]

    # ------------------------------------------------------------ reporting
    def stats(self):
        """``Compiled.stats`` of the program last used (the joint's forward under grad
        mode), with ``captures``, ``replays``, ``eager_calls`` and ``recaptures`` over
        both paths; ``backward_replays``, and ``backward_kernels`` /
        ``backward_peak_bytes`` of the joint's backward program."""
        f, j = self._fwd.stats(), self._joint.stats()
        last = j if self._last_joint else f
        s = dict(last)
        s["captures"] = f["captures"] + j["captures"]
        s["replays"] = f["replays"] + j["replays"]
        s["backward_replays"] = self._bwd_replays
        p = self._joint._last
        s["backward_kernels"] = p.backward.kernels if p is not None else 0
        s["backward_peak_bytes"] = p.backward.peak_bytes if p is not None else 0
        s["saved_values"] = p.n_saved if p is not None else 0
        s["eager_calls"] = f["eager_calls"] + self._eager_calls
        s["eager_reason"] = j["eager_reason"] or f["eager_reason"]
        s["recaptures"] = f["recaptures"] + j["recaptures"]
        return s


_LOCAL = frozenset(vars(CompiledModule)) | frozenset(_OWN)


_BACKWARD = threading.Lock()


def _replayed_vjp(call, saved, gs):
    """The backward program on the saved values and the output gradients."""
    prog = call.prog
    outs = prog.backward.graph  # (the cotangents' specs: the joint's arguments)
    cots = []
    for v, k in zip(prog.cot_values, prog.cot_outputs):
        g = gs[k]
        shape, dtype = outs.shapes[v], outs.dtypes[v]
        if g is None:
            g = np.zeros(shape, dtype)
        elif g.dtype != dtype or g.shape != shape:
            g = np.broadcast_to(np.asarray(g, dtype), shape)
        cots.append(g)
    back = backward_for(prog, tuple(gs[k] is None for k in prog.cot_outputs))
    token = quiet_numpy()  # (floating-point exceptions silent, as eager adjoints)
    try:
        with _BACKWARD:  # (its arena serves one replay at a time: threads take turns)
            res = back.fn(tuple(saved) + tuple(cots), (), {})
    finally:
        loud_numpy(token)
    grads = [None if s is None else res[s] for s in prog.grad_slots]
    tensors = call.tensors
    n_params = len(grads) - sum(1 for t in tensors if t.requires_grad)
    if n_params == len(grads):
        return [None] * len(tensors) + grads
    gx = iter(grads[n_params:])
    out = [next(gx) if t.requires_grad else None for t in tensors]
    return out + grads[:n_params]


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
    return tp(*vals) if hasattr(tp, "_fields") else tp(vals)  # (a named tuple)


def _tensors(args, kwargs):
    """The tensor arguments, positional then keyword (sorted by name): the node's
    inputs before the parameters, in the order of the joint's gradients."""
    out = [a for a in args if isinstance(a, Tensor)]
    if kwargs:
        out += [kwargs[k] for k in sorted(kwargs) if isinstance(kwargs[k], Tensor)]
    return out


def _node_saves(prog, args, kwargs, params):
    """(for each input of the node, the tensor arguments then the parameters: whether
    the backward reads its buffer; ``("out",)`` if it reads an output, else ``()``)."""
    ext = prog.saved_ext
    flags = [i in prog.saved_args for i, a in enumerate(args) if isinstance(a, Tensor)]
    flags += [k in prog.saved_args for k in sorted(kwargs) if isinstance(kwargs[k], Tensor)]
    for p in params:
        d = p._data
        flags.append(any(e is d or e.base is d for e in ext))
    return tuple(flags), (("out",) if prog.saves_out else ())


def _trainable(m):
    """The parameters of module ``m`` that require grad, in ``parameters()`` order, or
    None when a module in its tree has hooks (one walk of the tree, per call)."""
    if any(GLOBAL_CALL_HOOKS):  # (hooks every module runs)
        return None
    out, seen, stack = [], set(), [m]
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        if sub._forward_hooks or sub._forward_pre_hooks or sub._backward_hooks \
                or sub._backward_pre_hooks:
            return None
        for p in sub._parameters.values():
            if p is not None and p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        stack.extend(c for c in reversed(sub._modules.values()) if c is not None)
    return out



_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_STORES = ("_parameters", "_modules")


def _refresh_tree(d, m):
    """``_trainable(m)``, and in ``d["_tree"]`` a generated check that the tree is
    as it was then (each module's parameter and submodule dicts, their entries, no
    hooks, none registered for every module, each parameter's ``requires_grad``) with
    that result: a call checks the
    tree in one function instead of walking it."""
    params = _trainable(m)
    d["_tree"] = None if params is None else (_tree_checker(m), params)
    return params


def _tree_checker(m):
    glb = {}

    def const(obj):
        name = f"O{len(glb)}"
        glb[name] = obj
        return name
    lines = ["def ok():", "    try:",
             "        if " + " or ".join(const(d) for d in GLOBAL_CALL_HOOKS) +
             ": return False"]
    seen, stack, ps = set(), [m], []
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        dd = getattr(sub, "__dict__", None)
        if type(dd) is not dict or not all(type(dd.get(k)) in (dict, OrderedDict)
                                           for k in _HOOKS + _STORES):
            return _never
        dn, checks = store_guards(dd, _STORES, const)
        lines += checks
        ps += [v for v in dd["_parameters"].values() if v is not None]
        lines.append("        if " + " or ".join(f"{dn}[{k!r}]" for k in _HOOKS) +
                     ": return False")
        stack.extend(c for c in reversed(dd["_modules"].values()) if c is not None)
    for p in {id(p): p for p in ps}.values():
        lines.append(f"        if {const(p)}.requires_grad is not {p.requires_grad}: "
                     f"return False")
    lines += ["    except (KeyError, AttributeError):", "        return False",
              "    return True"]
    exec(builtins.compile("\n".join(lines) + "\n", "<tg.compile module tree>", "exec"), glb)
    return glb["ok"]


def _never():
    return False
