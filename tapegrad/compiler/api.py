"""``tg.compile`` and ``Compiled``: the guards that pick a captured program for a
call, capturing (``capture.Recorder``) when none fits, and replaying
(``program.Program``) when one does."""
import builtins
import collections
import functools
import inspect
import os
import sys
import threading
import types
import warnings
import weakref

import numpy as np

from .. import devices as _devices, dtypes as _dtypes, tape as _tape
from .._util import loud_numpy, quiet_numpy
from ..dispatch import observe
from ..grad_mode import is_grad_enabled
from ..ops.creation import raw_rng_state
from ..tensor import DATA_SWAPS, LEAF_HOOKS, Tensor, wrap
from . import capture as _capture
from .capture import Recorder, Unsupported, capturing
from .program import GuardFailed, Program
from .pyguards import Watch, _is_module, checker, optimizer_guards

__all__ = ["compile", "Compiled"]

MAX_CAPTURES = 8
PROGRAMS_PER_SIGNATURE = 4
# a signature whose outputs are differentiated outside: its calls go to the function as a
# compiled module (``module.FnModule``): the forward replayed, one node recorded
_NODE = "the outputs are differentiated outside: a compiled forward and backward"
_OUTSIDE = "the function returns a tensor whose graph is still to be differentiated"


MODES = (None, "default", "lite", "reduce-overhead", "max-autotune",
         "max-autotune-no-cudagraphs")
BACKENDS = ("inductor", "aot_eager", "eager")
_ALL = weakref.WeakSet()  # every Compiled alive, for ``reset``


def compile(fn=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, disable=False, fuse=True, max_captures=MAX_CAPTURES):
    """``tg.compile(fn, *, fuse=True)``: a callable with ``fn``'s signature that
    captures ``fn``'s program on the first call for each guard and replays it after.

    ``torch.compile``'s keywords are taken as they apply here: ``fullgraph=True``
    raises a ``RuntimeError`` where the program could not be captured whole (instead
    of running ``fn`` eagerly with a warning); ``backend="eager"`` replays without
    fusing (as ``fuse=False``), ``"inductor"`` (the default) and ``"aot_eager"`` with
    it; ``mode`` and ``options`` are accepted and checked as PyTorch checks them (one
    of them, a known mode); ``dynamic`` is accepted: shapes are always specialized, a
    new shape captures again; ``disable=True`` returns ``fn`` itself.

    The guard of a call: the tensor arguments' shapes, dtypes, devices and
    ``requires_grad`` and which of them share memory, the other arguments' values
    (their identity when unhashable), grad mode and autocast (its devices and
    dtypes); then, checked on replay, the ``.grad`` of the leaves the program
    reached (``None`` or the buffer it accumulated into, unless the program cleared
    it) and every value Python read inside ``fn`` (``bool(t)``, ``t.item()``,
    ``float(t)``, ``t.tolist()``, ``t.numpy()``): a different value captures again.
    Guards on Python state, checked first: each plain value (bool, int, float, str,
    None, tuples of them) that ``fn`` or what it calls read from a global, a closure
    cell or an attribute of a module or object, every other object read that way (a
    function, a config object: the same one), and every module's ``training`` flag
    (``pyguards``); a number from ``item()``/``bool()`` that only feeds comparisons
    is guarded on their outcomes. ``TAPEGRAD_LOGS=recompiles`` prints each recapture.
    After ``max_captures`` captures, or for a program that cannot be replayed (it
    computes outside the ops, uses the random generator, differentiates twice,
    keeps a tensor it computed
    in a list, a dict or an attribute, assigns a plain value it read, has Python
    side effects: ``print``, appending to a list that outlives the call), ``fn``
    runs eagerly, with a warning saying why: every call has the eager call's
    effects.

    A call whose result is differentiated outside (``loss = cf(x); loss.backward()``)
    runs eagerly, recorded; the later calls of that signature go to the function as a
    compiled module (``module.FnModule``: its parameters the leaves and modules it
    names): the forward replays and records one node whose adjoint replays the
    backward program, as ``tg.compile(model)`` does.

    ``compiled.stats()``: ``captures``, ``replays``, ``kernels`` (kernel calls per
    replay), ``fused_groups``, ``peak_bytes`` (planned before the first replay),
    ``steps_captured``, ``eager_calls``, ``eager_reason``, ``allocating`` (the steps
    whose results a replay still allocates, with why: every other result is written
    into the planned arena, or for a result that escapes into a ring of buffers
    reused once nothing outside holds them), ``guards`` (the last program's, in
    words), ``recaptures`` (the guard that failed, for each capture after the first).

    >>> import tapegrad as tg
    >>> f = tg.compile(lambda x: (x * 2 + 1).relu())
    >>> f(tg.ones(3)).tolist(), f(tg.ones(3)).tolist()
    ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0])
    """
    if mode is not None and options is not None:
        raise RuntimeError("tg.compile: either mode or options can be specified, but both "
                           "can't be specified at the same time.")
    if mode not in MODES:
        raise RuntimeError(f"tg.compile: unrecognized mode={mode!r}, should be one of: "
                           f"{', '.join(m for m in MODES if m)}")
    if options is not None and not isinstance(options, dict):
        raise RuntimeError(f"tg.compile: options must be a dict, got "
                           f"{type(options).__name__}")
    if callable(backend) or backend not in BACKENDS:
        raise RuntimeError(f"tg.compile: backend={backend!r} is not supported: tapegrad "
                           f"captures and replays its own programs; backend is one of "
                           f"{', '.join(map(repr, BACKENDS))}")
    fuse = fuse and backend != "eager"
    if fn is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic,
                                 backend=backend, mode=mode, options=options,
                                 disable=disable, fuse=fuse, max_captures=max_captures)
    if disable:
        return fn
    from ..nn.module import Module
    if isinstance(fn, Module):
        from .module import CompiledModule
        return CompiledModule(fn, fuse=fuse, max_captures=max_captures, fullgraph=fullgraph)
    c = Compiled(fn, fuse=fuse, max_captures=max_captures, fullgraph=fullgraph)
    c.node_outside = True
    return c


def reset():
    """Forget every captured program (as ``torch.compiler.reset``): the next call of
    each compiled function or module captures again, from a fresh count of captures."""
    for c in list(_ALL):
        c._reset()


def is_compiling():
    """Whether a ``tg.compile`` capture is running (as ``torch.compiler.is_compiling``)."""
    return capturing() is not None


class Compiled:
    """The callable ``tg.compile`` returns (see there)."""
    node_outside = False  # (tg.compile(fn): outputs differentiated outside go through
    #                       the function as a compiled module)
    _ITEM_OUTPUTS = True  # (a returned loss.item(): an output; a module's joint: not)
    _LEAF_OUTPUTS = True  # (a returned argument that requires grad: the argument itself)
    _UNDO_WRITES = False  # (keep what the capture writes in place: a module's joint)

    def __init__(self, fn, fuse=True, max_captures=MAX_CAPTURES, fullgraph=False):
        self.fn = fn
        self.fuse = fuse
        self.max_captures = max_captures
        self.fullgraph = fullgraph
        self._lock = threading.Lock()
        self._reset()
        _ALL.add(self)
        try:
            functools.update_wrapper(self, fn)
        except AttributeError:
            pass

    def _reset(self):
        self._programs = {}
        self._captures = 0
        self._replays = 0
        self._eager = 0
        self._eager_reason = None
        self._unguarded_told = False  # (the warning about unguarded contents: once)
        self._given_up = False
        self._last = None
        self._recaptures = []
        self._last_guards = []
        self._as_module = None  # (the function as a CompiledModule: _NODE signatures)
        self._via_module = False

    # ------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        # (anomaly mode checks every op's values as it runs: eager, as PyTorch's; and
        # where a transform records what a program's replay would not: see transforming)
        if self._given_up or capturing() is not None or transforming():
            self._eager += 1
            return self._eager_call(args, kwargs)
        # one call at a time replays or captures: a program's buffers (its arena, the
        # rings of what it returns and saves) serve one call; a call that finds another
        # thread in them runs eagerly (no wait: a capture runs the function's Python,
        # which may wait on that thread)
        if not self._lock.acquire(blocking=False):
            self._eager += 1
            return self._eager_call(args, kwargs)
        try:
            return self._call(args, kwargs)
        finally:
            self._lock.release()

    def _call(self, args, kwargs):
        key = _key(args, kwargs)
        if key is None:
            return self._give_up("an argument is neither a tensor nor hashable", args, kwargs)
        entry = self._programs.get(key)
        fails = []  # why each program of this signature does not fit (most recent first)
        for prog, leaves, pyg in entry or ():
            failed = pyg()
            if failed is not None:
                fails.append(failed)
                continue
            if isinstance(prog, str):  # this program cannot be replayed: eager
                if prog is _NODE:
                    return self._module_call(args, kwargs)
                self._eager += 1
                return self._eager_call(args, kwargs)
            if not _rg_ok(prog.graph.owners):
                fails.append("requires_grad of a tensor the function reads from outside "
                             "changed (requires_grad_)")
                continue
            if prog.swaps != DATA_SWAPS[0] or not prog.refs.ok() \
                    or not _owners_ok(prog.graph.owners) or (prog.paths and
                                                             not _paths_ok(prog.paths)):
                fails.append("a tensor the function reads from outside (through a global, a "
                             "closure, a module, a container or an attribute) was rebound or "
                             "dropped, or a tensor's .data replaced; pass tensors that change "
                             "between calls as arguments")
                continue
            if prog.ext_roots and _shares(args, kwargs, prog.ext_roots):
                fails.append("an argument shares memory with a tensor the function reads "
                             "from outside")
                continue
            if not (prog.entry_ok(lambda t: _leaf(t, leaves, args, kwargs)) if leaves
                    else _entry_ok(prog)):
                fails.append("a leaf's .grad or buffer is not as at the capture")
                continue
            token = quiet_numpy()  # (floating-point exceptions silent, as eager ops)
            try:
                res = prog.fn({0: args[0]._data} if not kwargs and len(args) == 1
                              and isinstance(args[0], Tensor) else _arrays(args, kwargs),
                              args, kwargs)  # (Program.run)
            except GuardFailed as e:  # (checked before any state change) the next one
                fails.append(prog.guard_words(e))
                continue
            finally:
                loud_numpy(token)
            self._replays += 1
            self._last = prog
            self._last_guards = prog.guard_list
            self._via_module = False
            return self._result(prog, res, args, kwargs)
        why = fails[0] if fails else \
            "a new signature: " + _describe_key(self.fn, key, args, kwargs)
        if self._captures >= self.max_captures:
            return self._give_up(f"{self._captures} captures ({why}, last)", args, kwargs)
        if self._captures:
            self._recaptures.append(why)
            if "recompiles" in {w.strip().lstrip("+")
                                for w in os.environ.get("TAPEGRAD_LOGS", "").split(",")}:
                print(f"[recompiles] tg.compile: recapturing {self._name()} (capture "
                      f"{self._captures + 1}): {why}", file=sys.stderr)
        return self._capture(key, args, kwargs, why)

    def runs_eagerly(self, args, kwargs, grad_mode):
        """Whether a call with these arguments under ``grad_mode`` would run ``fn``
        eagerly (given up, or the program its guards pick cannot be replayed)."""
        if self._given_up:
            return True
        key = _key(args, kwargs)
        if key is None:
            return True
        key = (grad_mode,) + key[1:]
        for prog, _, pyg in self._programs.get(key) or ():
            if pyg() is None:
                return isinstance(prog, str)
        return False

    # (what a subclass changes: ``module._Joint`` partitions the program it captures)
    def _eager_call(self, args, kwargs):
        return self.fn(*args, **kwargs)

    def _program(self, graph):
        return Program(graph, fuse=self.fuse)

    def _result(self, prog, res, args, kwargs):
        return _rebuild(prog.graph.output, res, (args, kwargs))

    def _name(self):
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__name__

    def _give_up(self, why, args, kwargs):
        """Run eagerly from now on, saying why; and this call (``args`` None: it ran)."""
        if self.fullgraph:
            raise RuntimeError(f"tg.compile(fullgraph=True): {self._name()} cannot be "
                               f"captured as one program: {why}")
        self._eager_reason = why
        self._given_up = True
        warnings.warn(f"tg.compile: {getattr(self.fn, '__qualname__', self.fn)} runs "
                      f"eagerly from now on: {why}", RuntimeWarning, stacklevel=3)
        if args is None:
            return None
        self._eager += 1
        return self._eager_call(args, kwargs)

    def _capture(self, key, args, kwargs, why):
        rec = Recorder()
        rec.factory_constants = True
        rec.item_outputs = self._ITEM_OUTPUTS
        rec.leaf_outputs = self._LEAF_OUTPUTS
        if self._UNDO_WRITES:  # (what the capture overwrites outside: _Joint puts it back)
            rec.undo = self._undo = []
        argpos = {}
        for pos, a in _tensor_args(args, kwargs):
            vid = rec.ids.get(id(a._data))
            if vid is None:
                vid = rec.new(a._data, "arg")
                rec.g.args[vid] = (pos, None)
            argpos[id(a)] = pos
        rec.arg_tensors = argpos
        rng = raw_rng_state()
        swaps = DATA_SWAPS[0]
        hooks = LEAF_HOOKS[0]
        try:
            refs = _references(self.fn)
        except Exception as e:  # noqa: BLE001  (a user object whose __getattr__ raises)
            return self._give_up(_inspection_failed(e), args, kwargs)
        if _shares(args, kwargs, _outside_roots(refs)):  # (a capture would take the
            self._eager += 1  # tensor read from outside for the argument, or apart)
            self._eager_reason = "an argument shares memory with a tensor the function " \
                "reads from outside: this call runs eagerly"
            return self._eager_call(args, kwargs)
        watch = Watch(self.fn)
        _capture.begin(rec)
        try:
            with observe(rec):
                names = _arg_names(self.fn, args, kwargs)
                values = list(args) + [kwargs[k] for k in sorted(kwargs)]
                watch.start(zip(names, values), batches={
                    n for n, v in zip(names, values)
                    if type(v) in _BATCHES and _batch_key(v) is not None})
                try:
                    result = self.fn(*args, **kwargs)
                finally:
                    watch.stop()
        finally:
            _capture.end()
        self._captures += 1
        try:
            pyg = watch.guards()
        except Exception as e:  # noqa: BLE001  (as above: this call's result stands)
            self._give_up(_inspection_failed(e), None, None)
            return _plain_numbers(result)
        words = [w[3] for w in pyg]
        changed = watch.changed()
        if changed:
            rec.fail(f"it assigns {', '.join(changed)} (a Python value it reads), "
                     f"which a replay would not")
        effects = watch.side_effects()
        if effects:
            rec.fail(f"it has Python side effects a replay would not repeat: "
                     f"{', '.join(effects)}")
        if not _capture.draws_explain(rec, rng, raw_rng_state()):
            rec.fail("it draws from the random generator (dropout, rand...), whose values "
                     "a replay would repeat")
        try:
            graph = rec.finish(result)
            kept = watch.escapes(rec.produced)
            rec.produced = None
            if kept:
                raise Unsupported(f"it keeps a tensor it computed in {kept}, which a replay "
                                  f"would not update")
            opts = {id(st.target[0]): st.target[0] for st in graph.steps
                    if st.kind == "update"}
            if opts:
                pyg = pyg + optimizer_guards(opts.values())
                words = [w[3] for w in pyg]
            for st in graph.steps:  # .grad effects on an argument follow the argument
                if st.kind == "setgrad" and id(st.target) in argpos:
                    st.target = ("arg", argpos[id(st.target)])
            for v, leaf in graph.ext_grad.items():
                if id(leaf) in argpos:
                    graph.ext_grad[v] = ("arg", argpos[id(leaf)])
            prog = self._program(graph)
            prog.swaps, prog.refs, prog.leaf_hooks = swaps, refs, hooks
            prog.ext_roots = frozenset(id(_devices.owner(arr)) for _, arr, _ in graph.owners)
            prog.paths = _paths(self.fn, [ref() for ref, *_ in graph.owners])
        except Unsupported as e:
            node = self.node_outside and str(e).startswith(_OUTSIDE)
            if self.fullgraph and not node:
                raise RuntimeError(f"tg.compile(fullgraph=True): {self._name()} cannot be "
                                   f"captured as one program: {e}") from None
            if not node:
                self._eager_reason = str(e)
            progs = self._programs.setdefault(key, [])
            progs.insert(0, (_NODE if node else str(e), None,
                             checker(watch.unassigned(pyg))))
            del progs[PROGRAMS_PER_SIGNATURE:]
            self._last_guards = _describe_key(self.fn, key, args, kwargs, True) + words
            if node:  # (this call's eager result, recorded, is its own)
                return _plain_numbers(result)
            warnings.warn(f"tg.compile: {getattr(self.fn, '__qualname__', self.fn)} runs "
                          f"eagerly for this signature: {e}", RuntimeWarning, stacklevel=3)
            return _plain_numbers(result)
        leaves = {id(gd[1]): argpos[id(gd[1])] for gd in graph.entry_guards
                  if id(gd[1]) in argpos}
        prog.py_guards = pyg
        if watch.unguarded and not self._unguarded_told:
            self._unguarded_told = True
            warnings.warn(f"tg.compile: {getattr(self.fn, '__qualname__', self.fn)} reads "
                          f"containers it does not guard on their contents ("
                          f"{'; '.join(watch.unguarded)}): a replay does not see them "
                          f"changed in place, only rebound", RuntimeWarning, stacklevel=3)
        prog.guard_list = _describe_key(self.fn, key, args, kwargs, True) + words + \
            prog.value_guard_words()
        progs = self._programs.setdefault(key, [])
        progs.insert(0, (prog, leaves, checker(pyg)))
        del progs[PROGRAMS_PER_SIGNATURE:]  # (the branches taken most recently)
        self._last = prog
        self._last_guards = prog.guard_list
        return _plain_numbers(result)

    def _module_call(self, args, kwargs):
        """A call whose outputs are differentiated outside: the function as a compiled
        module (its forward replayed, one node recorded, the backward replayed)."""
        m = self._as_module
        if m is None:
            from .module import CompiledModule, FnModule
            m = self._as_module = CompiledModule(FnModule(self.fn), fuse=self.fuse,
                                                 max_captures=self.max_captures,
                                                 fullgraph=self.fullgraph)
        self._via_module = True
        return m(*args, **kwargs)

    # ------------------------------------------------------------ reporting
    def stats(self):
        s = self._stats()
        m = self._as_module
        if m is not None:  # (the calls differentiated outside, through the module)
            ms = m.stats()
            if self._via_module:
                s.update(ms)
                s["guards"] = list(self._last_guards)
            for k in ("captures", "replays", "eager_calls"):
                s[k] = self._stats()[k] + ms[k]
            s["recaptures"] = self._recaptures + ms["recaptures"]
            s["eager_reason"] = self._eager_reason or ms["eager_reason"]
        return s

    def _stats(self):
        p = self._last
        return {"captures": self._captures, "replays": self._replays,
                "kernels": p.kernels if p else 0,
                "fused_groups": p.fused_groups if p else 0,
                "embedding_projections": p.projections_folded if p else 0,
                "peak_bytes": p.peak_bytes if p else 0,
                "arena_bytes": p.plan.arena_bytes if p else 0,
                "ring_bytes": sum(b.nbytes for r in p.plan.rings.values() for b in r.bufs)
                if p else 0,
                "steps_captured": p.n_captured if p else 0,
                "opaque_vjps": p.graph.stats_opaque if p else 0,
                "allocating": list(p.plan.allocating) if p else [],
                "eager_calls": self._eager, "eager_reason": self._eager_reason,
                "recaptures": list(self._recaptures),
                "guards": list(self._last_guards)}

    def program_source(self):
        """The generated replay function of the latest program (for inspection)."""
        return self._last.source if self._last else None


def _references(fn, depth=3):
    """What the guard checks of how ``fn`` reaches the tensors it reads by name:
    ``(dict or cell, key, object, its tensors)`` for each Tensor or Module held by a
    closure cell of ``fn`` or a global its code names (following the functions and
    methods it names, ``depth`` deep), with a Module's parameters and buffers. A replay
    needs every one to be the same object still (a rebound name, or a module given a
    new parameter, captures again). A tensor reached deeper (an attribute of another
    object, a container's item) is not covered."""
    out, seen = [], set()

    def note(holder, key, obj, d):
        if isinstance(obj, Tensor):
            out.append((holder, key, obj, None))
        elif _is_module(obj):
            out.append((holder, key, obj, _module_tensors(obj)))
        elif d > 0 and (callable(obj) or hasattr(obj, "__func__")):
            visit(obj, d - 1)

    def visit(f, d):
        if id(f) in seen:
            return
        seen.add(id(f))
        if _is_module(f):
            out.append((None, None, f, _module_tensors(f)))
            f = type(f).forward.__get__(f)
        owner = getattr(f, "__self__", None)
        if _is_module(owner):
            out.append((None, None, owner, _module_tensors(owner)))
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None)
        if code is None:
            return
        for i, cell in enumerate(f.__closure__ or ()):
            try:
                obj = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            note(cell, "cell_contents", obj, d)
        g = f.__globals__
        for name in code.co_names:
            if name in g:
                note(g, name, g[name], d)
    visit(fn, depth)
    return _Refs(out)


class _Refs(tuple):
    """``_references``' entries, with ``ok()``: one generated function that tests each
    binding (a lookup and an identity test) and, for each module, the dicts that hold
    its parameters, buffers and submodules, their sizes and entries, down the tree: the
    check reads what can change (the bindings), not the tensor lists made from them."""

    def __new__(cls, entries):
        self = super().__new__(cls, entries)
        self.ok = _refs_checker(self)
        return self


_STORES = ("_parameters", "_buffers", "_modules")
_DICTS = (dict, collections.OrderedDict)


def store_guards(d, stores, const):
    """``(name of d, lines)``: the lines of a generated check (``def ok():`` with a
    ``try:`` body) that return False unless a module's ``__dict__`` ``d`` still holds
    the same dicts under ``stores`` (``"_parameters"``, ``"_buffers"``, ``"_modules"``),
    each with the same objects under the same names. ``const(obj)`` names an object
    as a global of the check."""
    dn = const(d)
    lines = []
    for k in stores:
        store = d[k]
        sn = const(store)
        lines.append(f"        if {dn}[{k!r}] is not {sn} or len({sn}) != {len(store)}:"
                     f" return False")
        lines += [f"        if {sn}[{const(name)}] is not {const(v)}: return False"
                  for name, v in store.items()]
    return dn, lines


def _refs_checker(refs):
    glb = {}
    lines = ["def ok():", "    try:", "        pass"]
    seen = set()

    def const(obj):
        name = f"O{len(glb)}"
        glb[name] = obj
        return name

    def module(m):
        if id(m) in seen:
            return
        seen.add(id(m))
        d = getattr(m, "__dict__", None)
        if type(d) is not dict or not all(type(d.get(k)) in _DICTS for k in _STORES):
            lines.append(f"        if not _same_tensors({const(m)}, {const(_module_tensors(m))}):"
                         f" return False")
            return
        lines.extend(store_guards(d, _STORES, const)[1])
        for v in d["_modules"].values():
            if v is not None:
                module(v)

    for holder, key, obj, tensors in refs:
        if holder is not None:
            h, o = const(holder), const(obj)
            if key == "cell_contents":
                lines.append(f"        if {h}.cell_contents is not {o}: return False")
            else:
                lines.append(f"        if {h}.get({const(key)}) is not {o}: return False")
        if tensors is not None:
            module(obj)
    lines += ["    except (KeyError, ValueError, AttributeError):", "        return False",
              "    return True"]
    glb["_same_tensors"] = _same_tensors
    exec(builtins.compile("\n".join(lines) + "\n", "<tg.compile references>", "exec"), glb)
    return glb["ok"]


def _same_tensors(m, tensors):
    cur = _module_tensors(m)
    return len(cur) == len(tensors) and all(a is b for a, b in zip(cur, tensors))


def _inspection_failed(e):
    return (f"finding the Python values it reads raised {type(e).__name__}: {e} (an object "
            f"whose __getattr__ raises something other than AttributeError?)")


def _module_tensors(m):
    """``m``'s parameters then its buffers, as ``named_parameters()`` and
    ``named_buffers()`` list them (a tree of ``nn.Module``s walked directly: this runs
    on every replay)."""
    d = getattr(m, "__dict__", None)
    if not (type(d) is dict and "_modules" in d and "_parameters" in d and "_buffers" in d):
        return tuple(t for _, t in m.named_parameters()) + \
            tuple(t for _, t in m.named_buffers())
    params, bufs, seen, stack = [], [], set(), [m]
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        d = sub.__dict__
        params += d["_parameters"].values()
        bufs += d["_buffers"].values()
        stack.extend(c for c in reversed(d["_modules"].values()) if c is not None)
    return _unique(params) + _unique(bufs)


def _unique(ts):
    seen = set()
    out = []
    for t in ts:
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return tuple(out)


_SCAN_ITEMS = 256  # a container longer than this is not searched (a dataset, a cache)


def _paths(fn, tensors, depth=3):
    """How ``fn`` reaches each tensor in ``tensors`` (those whose buffers the capture
    read from outside) through containers and plain objects: ``(holder, key, steps,
    weakref)`` with ``holder[key]`` (or a cell's contents) a root as ``_references``
    finds them (closure cells, named globals, the functions they name) and ``steps``
    the items (``("i", key)``) and attributes (``("a", name)``) from there to the
    tensor, two deep. A replay needs each path to lead to the same tensor still: a
    container item or an attribute rebound while the old tensor lives on elsewhere
    (where ``_owners_ok`` cannot see it) captures again."""
    want = {id(t): t for t in tensors if t is not None}
    out = []
    if not want:
        return ()

    def search(obj, steps, root, d):
        if id(obj) in want and obj is want[id(obj)]:
            out.append(root + (steps, weakref.ref(obj)))
            return
        if d == 0 or isinstance(obj, (Tensor, str, bytes, type, types.ModuleType,
                                      np.ndarray)) or callable(obj) or _is_module(obj):
            return
        if type(obj) is dict:
            if len(obj) <= _SCAN_ITEMS:
                for k, v in list(obj.items()):
                    if isinstance(k, (str, int, tuple)):
                        search(v, steps + (("i", k),), root, d - 1)
        elif type(obj) in (list, tuple):
            if len(obj) <= _SCAN_ITEMS:
                for i, v in enumerate(obj):
                    search(v, steps + (("i", i),), root, d - 1)
        else:
            attrs = getattr(obj, "__dict__", None)
            if type(attrs) is dict and len(attrs) <= _SCAN_ITEMS:
                for k, v in list(attrs.items()):
                    search(v, steps + (("a", k),), root, d - 1)

    seen = set()

    def visit(f, d):
        if id(f) in seen:
            return
        seen.add(id(f))
        if _is_module(f):
            f = type(f).forward.__get__(f)
        owner = getattr(f, "__self__", None)
        if owner is not None and not _is_module(owner) and not isinstance(owner, types.ModuleType):
            search(owner, (), (f, "__self__"), 2)
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None)
        if code is None:
            return
        roots = []
        for cell in f.__closure__ or ():
            try:
                roots.append((cell, "cell_contents", cell.cell_contents))
            except ValueError:  # an empty cell
                continue
        g = f.__globals__
        roots += [(g, name, g[name]) for name in code.co_names if name in g]
        for holder, key, obj in roots:
            if isinstance(obj, Tensor):
                continue  # a name: _references checks it
            if callable(obj) or hasattr(obj, "__func__"):
                if d > 0 and not isinstance(obj, type):
                    visit(obj, d - 1)
                continue
            search(obj, (), (holder, key), 2)
    try:
        visit(fn, depth)
    finally:  # (search and visit are recursive closures, a cycle: it must not keep
        want.clear()  # the tensors alive, or _owners_ok could not see them die)
    return tuple(out)


def _paths_ok(paths):
    for holder, key, steps, ref in paths:
        try:
            obj = holder.cell_contents if key == "cell_contents" else \
                getattr(holder, key) if key == "__self__" else holder[key]
            for kind, k in steps:
                obj = obj[k] if kind == "i" else getattr(obj, k)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            return False
        if obj is not ref():
            return False
    return True


def _owners_ok(owners):
    """Every tensor whose buffer the program reads from outside is alive still, over
    that buffer: one that died was dropped by whoever held it, most likely because a
    name, item or attribute the function reads it through now holds another."""
    for ref, arr, _ in owners:
        t = ref()
        if t is None or t._data is not arr:
            return False
    return True


def _rg_ok(owners):
    """Every tensor whose buffer the program reads from outside requires grad as it
    did at the capture (``requires_grad_`` on a parameter changes what the backward
    computes and what the optimizer updates)."""
    for ref, _, rg in owners:
        t = ref()
        if t is not None and t.requires_grad is not rg:
            return False
    return True


def _outside_roots(refs):
    """The buffers (their roots) of the tensors ``_references`` found."""
    out = set()
    for _, _, obj, tensors in refs:
        for t in (obj,) if tensors is None else tensors:
            if isinstance(t, Tensor) and t._data is not None:
                out.add(id(_devices.owner(t._data)))
    return out


def _shares(args, kwargs, roots):
    """Whether a tensor argument's buffer (its root) is one of ``roots``."""
    for _, a in _tensor_args(args, kwargs):
        if a._data is not None and id(_devices.owner(a._data)) in roots:
            return True
    return False


def _tensor_args(args, kwargs):
    """(position, tensor) of each tensor argument, and (path, tensor) of each tensor in
    a batch argument (``_batch_key``): ``(position, key, ...)``."""
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            yield i, a
        elif type(a) in _BATCHES and _batch_key(a) is not None:
            yield from _batch_tensors(a, (i,))
    for k in sorted(kwargs):
        a = kwargs[k]
        if isinstance(a, Tensor):
            yield k, a
        elif type(a) in _BATCHES and _batch_key(a) is not None:
            yield from _batch_tensors(a, (k,))


# A batch argument: a tuple, list or dict (nested up to _BATCH_DEPTH, up to _BATCH_ITEMS
# items in all) holding tensors that do not require grad, beside plain values (what a
# DataLoader yields: (x, y), {"input_ids": ..., "labels": ...}). Its tensors are inputs
# of the program, as tensor arguments are, each found by its path; the key holds the
# structure, each tensor's spec and each plain value. (Any other container holding a
# tensor is keyed by identity: a new one each call is a new signature.)
_BATCHES = (tuple, list, dict)
_BATCH_DEPTH = 3
_BATCH_ITEMS = 64


def _batch_key(a):
    """The key entry of batch argument ``a``, or None where ``a`` is not one."""
    count = [0]
    sig = _batch_sig(a, _BATCH_DEPTH, count)
    if sig is None or not count[0]:
        return None
    return ("B", sig)


def _batch_sig(a, depth, count):
    tp = type(a)
    if tp is Tensor or isinstance(a, Tensor):
        if a.requires_grad or a._data is None:
            return None
        d = a._data
        nd = type(d) is np.ndarray
        count[0] += 1
        return ("T", d.shape, d.dtype, "cpu" if nd else str(a.device), nd, d.strides)
    if tp in _PLAIN:
        return (tp, a, str(a)) if tp is float else (tp, a)  # (-0.0 == 0.0)
    if tp not in _BATCHES or depth == 0 or len(a) > _BATCH_ITEMS:
        return None
    if tp is dict:
        items = list(a.items())
        if not all(type(k) in _PLAIN for k, _ in items):
            return None
    else:
        items = list(enumerate(a))
    out = [tp, len(items)]
    for k, v in items:
        sub = _batch_sig(v, depth - 1, count)
        if sub is None:
            return None
        out.append((k, sub) if tp is dict else sub)
    return tuple(out)


def _batch_tensors(a, path):
    """(path, tensor) of each tensor in batch argument ``a``, in order."""
    if isinstance(a, Tensor):
        yield path, a
    elif type(a) is dict:
        for k, v in a.items():
            yield from _batch_tensors(v, path + (k,))
    elif type(a) in (tuple, list):
        for k, v in enumerate(a):
            yield from _batch_tensors(v, path + (k,))


def _arrays(args, kwargs):
    out = {}
    for pos, a in _tensor_args(args, kwargs):
        out[pos] = a._data
    return out


def _entry_ok(prog):
    """``prog.entry_ok`` for a program none of whose leaves is an argument: one
    generated function over its entry guards, made once (``prog.entry_check``)."""
    fn = prog.__dict__.get("entry_check")
    if fn is None:
        fn = prog.entry_check = _entry_checker(prog)
    return fn()


def _entry_checker(prog):
    glb = {"_prog": prog, "_same": lambda t: t}
    lines = ["def ok():"]
    hooked = []  # (one test for the gradient hooks of every leaf)
    for k, gd in enumerate(prog.graph.entry_guards):
        glb[f"L{k}"] = gd[1]
        if gd[0] == "grad_none":
            lines.append(f"    if L{k}.grad is not None: return False")
        elif gd[0] == "buffer_is":
            glb[f"B{k}"] = gd[2]
            lines.append(f"    if L{k}._data is not B{k}: return False")
        elif gd[0] == "no_hooks":
            hooked.append(f"L{k}._hooks or L{k}._post_hooks")
        else:  # (an accumulating .grad: the program's own test)
            lines.append("    return _prog.entry_ok(_same)")
            break
    else:
        if hooked:  # (tested only once a hook was registered on a leaf since)
            glb["H"], glb["N"] = LEAF_HOOKS, prog.leaf_hooks
            lines.append(f"    if H[0] != N and ({' or '.join(hooked)}): return False")
        lines.append("    return True")
    exec(builtins.compile("\n".join(lines) + "\n", "<tg.compile entry guards>", "exec"), glb)
    return glb["ok"]


def _leaf(t, leaves, args, kwargs):
    pos = leaves.get(id(t))
    if pos is None:
        return t
    return args[pos] if type(pos) is int else kwargs[pos]


def transforming():
    """Whether this thread's calls must run eagerly: anomaly mode (it checks every op's
    values as it runs, as PyTorch's), an open ``tg.Tape`` (it records each op), a
    forward-mode level (each op carries its inputs' tangents: ``jvp``, ``jacfwd``,
    dual tensors) or a running ``vmap`` (each op runs its batching rule). A replay runs
    none of that, so under them a compiled function or module runs as written."""
    st = _tape.state
    return st._anomaly or bool(st._tapes) or bool(st._dual) or bool(st._vmap)


def _key(args, kwargs):
    key = [is_grad_enabled()]
    roots, aliases = {}, []
    for i, a in enumerate(list(args) + [kwargs[k] for k in sorted(kwargs)]):
        if isinstance(a, Tensor):
            d = a._data
            nd = type(d) is np.ndarray  # (a NumPy array is on the CPU)
            # (the strides: a function may read them, is_contiguous() or view(), and a
            # program's steps are planned for them)
            key.append(("T", d.shape, d.dtype, "cpu" if nd else str(a.device),
                        a.requires_grad, nd, d.strides))
            base = getattr(d, "base", None)  # (arguments sharing memory: a program
            j = roots.setdefault(id(d if base is None else base), (i, d))  # captured
            if j[0] != i:  # apart would not see one's writes through the other)
                aliases.append(_alias(i, d, j))
        else:
            b = _batch_key(a)
            if b is not None:  # (a tuple, list or dict of tensors: a batch)
                for path, t in _batch_tensors(a, (i,)):
                    d = t._data
                    base = getattr(d, "base", None)
                    j = roots.setdefault(id(d if base is None else base), (i, d))
                    if j[0] != i:  # (memory shared with another argument: captured apart)
                        aliases.append(_alias(i, d, j))
                key.append(b)
                continue
            try:
                hash(a)
                key.append(("V", type(a), a) if type(a) is not float or a else
                           ("V", float, a, str(a)))  # (-0.0 == 0.0)
            except TypeError:  # (the plain values inside: a replay must not take a
                # container whose numbers changed, or a new one at a freed one's id, for
                # the one captured, whose values its program holds)
                key.append(("id", id(a), _contents(a, 3)))
    key.append(tuple(sorted(kwargs)))
    if aliases:
        key.append(("aliases",) + tuple(aliases))
    dd = _dtypes.get_default_dtype()  # (the dtype factories and Python floats take)
    if dd is not _dtypes.float32:
        key.append(("default dtype", dd.name))
    ac = _tape.state.autocast  # (autocast on: ops compute in its dtypes)
    if ac:
        key.append(("autocast",) + tuple(sorted((str(k), str(v)) for k, v in ac.items())))
    try:
        return tuple(key)
    except TypeError:
        return None


def _alias(i, d, first):
    """Argument ``i`` (array ``d``) sharing memory with argument ``first[0]`` (array
    ``first[1]``): the pair and where ``d`` starts from the other's first element, in
    bytes (shapes and strides are in the key), so that a program captured for one tensor
    passed twice is not replayed for two views of one buffer that overlap otherwise,
    or not at all."""
    return (i, first[0], _address(d) - _address(first[1]))


def _address(a):
    try:
        return a.__array_interface__["data"][0]
    except AttributeError:  # (CuPy)
        return a.data.ptr


_PLAIN = (int, float, bool, str, bytes, complex, type(None))


def _contents(a, depth):
    """The plain values inside an unhashable argument, ``depth`` steps in (a dict's or
    a list's items, a user object's attributes), with the types of what holds them."""
    tp = type(a)
    if tp in _PLAIN:
        return (tp, a, str(a)) if tp is float else (tp, a)  # (-0.0 == 0.0)
    if depth == 0 or isinstance(a, Tensor):
        return (tp,)
    if isinstance(a, dict):
        return (tp,) + tuple((k if type(k) in _PLAIN else (type(k),), _contents(v, depth - 1))
                             for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return (tp,) + tuple(_contents(v, depth - 1) for v in a)
    d = getattr(a, "__dict__", None)
    if type(d) is dict:
        return (tp,) + tuple((k, _contents(v, depth - 1)) for k, v in d.items()
                             if type(k) is str and not k.startswith("__"))
    return (tp,)


def _describe_key(fn, key, args, kwargs, full=False):
    """The argument guards of a call, in words (``"x: float32[128, 784]"``)."""
    names = _arg_names(fn, args, kwargs)
    out = [] if not full else [f"grad mode == {key[0]}"]
    if key[-1][:1] == ("autocast",):
        out.append("autocast == {" + ", ".join(f"{d!r}: {t}" for d, t in key[-1][1:]) + "}")
    for k in key[len(names) + 2:]:
        if k[0] == "aliases":
            out += [f"{names[i]} shares memory with {names[j]}" +
                    ("" if off == 0 else f" (starting {off:+d} bytes from it)")
                    for i, j, off in k[1:]]
        elif k[0] == "default dtype":
            out.append(f"default dtype == {k[1]}")
    for name, k in zip(names, key[1:]):
        if k[0] == "T":
            rg = ", requires_grad" if k[4] else ""
            dev = "" if k[3] == "cpu" else f", {k[3]}"
            out.append(f"{name}: {np.dtype(k[2]).name}{list(k[1])}{dev}{rg}"
                       f"{_layout_words(k[1], k[2], k[6])}")
        elif k[0] == "V":
            out.append(f"{name} == {k[2]!r}")
        elif k[0] == "B":
            out.append(f"{name}: {_describe_batch(k[1])}")
        else:
            out.append(f"{name} is the same object")
    return out if full else ", ".join(out)


def _plain_numbers(r):
    """The capture call's result with each number read from a tensor (a
    ``capture.ReadNumber``: ``return loss.item()``) as the plain number it is."""
    if type(r) is _capture.ReadNumber:
        return r._v
    if isinstance(r, (tuple, list)):
        items = [_plain_numbers(x) for x in r]
        return type(r)(*items) if hasattr(r, "_fields") else type(r)(items)
    if type(r) is dict:
        return {k: _plain_numbers(v) for k, v in r.items()}
    return r


def _layout_words(shape, dtype, strides):
    """``""`` for a C-contiguous layout, else ``", strides (8, 4)"`` (in elements)."""
    size = np.dtype(dtype).itemsize
    c, step = [], size
    for n in reversed(shape):
        c.append(step)
        step *= n
    if all(n <= 1 or s == cs for n, s, cs in zip(shape, strides, reversed(c))):
        return ""
    return f", strides {tuple(s // size for s in strides)}"


def _describe_batch(sig):
    """A batch argument's key entry in words (``{'x': float32[32, 10], 'n': 3}``)."""
    if sig[0] == "T":
        dev = "" if sig[3] == "cpu" else f", {sig[3]}"
        return f"{np.dtype(sig[2]).name}{list(sig[1])}{dev}{_layout_words(*sig[1:3], sig[5])}"
    tp = sig[0]
    if tp in _BATCHES:
        if tp is dict:
            inner = ", ".join(f"{k!r}: {_describe_batch(v)}" for k, v in sig[2:])
            return "{" + inner + "}"
        inner = ", ".join(_describe_batch(v) for v in sig[2:])
        return f"[{inner}]" if tp is list else f"({inner}{',' if len(sig) == 3 else ''})"
    return repr(sig[1])


def _arg_names(fn, args, kwargs):
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i].name if i < len(params) else f"args[{i}]" for i in range(len(args))] \
        + sorted(kwargs)


def _rebuild(o, res, call_args):
    """The function's output structure with the replay's arrays as Tensors (and the
    call's own argument where the function returned one that requires grad)."""
    return _walk(o, iter(res), call_args)


def _walk(o, it, call_args):  # (module-level: a recursive closure is a reference cycle)
    tag, v = o
    if tag == "arg":
        args, kwargs = call_args
        return args[v] if type(v) is int else kwargs[v]
    if tag == "tensor":
        t = wrap(next(it))
        if _tape.state._inference:  # (as dispatch marks an op's outputs)
            t._inference = True
        return t
    if tag == "lit":
        return v
    if tag == "item":  # (a number the function returned: read from its tensor again)
        return next(it).item()
    if tag is dict:
        return {k: _walk(x, it, call_args) for k, x in v}
    items = [_walk(x, it, call_args) for x in v]
    return tag(*items) if hasattr(tag, "_fields") else tag(items)  # (a named tuple)
