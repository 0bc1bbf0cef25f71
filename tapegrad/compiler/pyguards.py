"""Guards on Python state: the plain Python values a captured call read.

While ``tg.compile`` captures a call (and only then), a ``sys.setprofile`` hook notes
every code object that starts running and the modules whose methods run. From them
``Watch.guards()`` makes the guards a replay checks first: each value of a plain
Python type (bool, int, float, str, None, an enum member, tuples of them) that the
code named and that lives in a global, a closure cell, or an attribute of a
global/closure object (a Python module, a ``tg.nn.Module``, a plain object), every
plain attribute of each module whose method ran, and every ``training`` flag of those
modules' trees. From such a root, and from the ``self`` of a method that ran, the
guards follow what the code can have read: attributes it names (on the instance, or
on its class), items of dicts and lists under the constant keys and indices it holds,
and the same again inside objects and containers found that way (``cfg.opt.lr``,
``CONFIG["scale"]``, ``self.sizes[0]``), a few levels deep. Every other object found
that way (a function, a ``functools.partial``, a config object, a dict: not a Python
module, not a ``tg.nn`` module, whose rebinding the tensor references catch) is
guarded to stay the same object, as are the defaults and the code object of each function
that ran (a rebound ``f.__code__``), and the
function-valued attributes (an activation) of each module whose method ran. Each
list or dict found that way (up to 256 items) is also guarded whole (``_Contents``:
code that iterates it, sums it, takes its ``len`` or indexes it with a computed key
reads every item), and the objects in it are followed as above; each NumPy array
found that way (up to 64 KiB) is guarded on its values (``_Array``: ``float(a[0])``
bakes them into the program). A larger list, dict or array, or one more steps in than
are followed, is guarded by identity alone: ``unguarded`` names it, for the capture's
warning. The names read inside an object are those of the code that reached it and of
the comprehensions and generator expressions in that code. The hooks of the modules
whose methods ran are guarded to stay the same ones, and their instances to get no
``forward`` of their own (``_ModuleCalls``), and each method of user code that ran to
be the one its object's attribute still finds. A guard is ``(holder, key, value, words)``: the
replay needs ``holder.get(key)`` to be ``value`` still (a plain value: the same object
or an equal value of the same type; anything else: the same object); the holder is a
dict, a cell, an ``_Items`` view of a list, an ``_Attrs`` view of a function, or one
of the views above (whose ``get`` is the test, the value ``True``).

The same hook notes what a replay could not repeat: the plain values user code can
read (as above, one step in) as they were when it started, which ``changed`` compares
with after the call (a counter it assigns), and the C functions user code called
that have Python side effects: ``print``, a file's ``write``, a method that changes a
list, dict, set or deque (``side_effects`` keeps those still reachable after the call,
not the call's own local lists, nor the state of an object it made and dropped),
the records its loggers emit, the draws it makes from a random generator that is not
tapegrad's (Python's and NumPy's global ones, one it names, a ``random`` method), and
the iterators it reaches from outside (``next(it)``, ``for b in it``: a replay would
not advance them).

The call's arguments that are not tensors, plain values or modules (a user object,
a list, a dict, a NumPy array: the key holds them by identity or by their plain
contents) are roots too: the guards follow what the code can read inside them, and
what the call changes inside them (an attribute, a container, an array's values) is
a side effect.

The library's own functions (under ``tapegrad/``: only its modules' attributes) and the
standard library are not searched: their globals are the library's constants.
"""
import builtins
import collections
import copy
import enum
import functools
import gc
import io
import logging
import os
import random
import sys
import sysconfig
import types
import weakref

import numpy as np

from ..tensor import Tensor as _Tensor

__all__ = ["Watch", "check", "optimizer_guards", "plain"]

_MISSING = object()
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NN = _PKG + "nn" + os.sep
_STD = tuple({os.path.abspath(p) + os.sep for p in
              (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
               sysconfig.get_paths()["platlib"])})
_PLAIN = (bool, int, float, str, type(None))


def plain(v):
    """Whether ``v`` is a plain Python value (bool, int, float, str, None, an enum
    member, a tuple of them)."""
    tp = type(v)
    if tp in _PLAIN or isinstance(v, enum.Enum):
        return True
    return tp is tuple and len(v) <= 16 and all(plain(x) for x in v)


class _Attrs:
    """An object seen as a holder of guards: ``get(name, default)`` is its attribute
    (a function's ``__defaults__``, a slot's value)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def get(self, name, default):
        return getattr(self.obj, name, default)


_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


class _ModuleCalls:
    """Modules seen as a holder of one guard on what calling them runs:
    ``get(key, default)`` is whether each one's forward pre-, forward, backward pre-
    and backward hook dicts have the keys they had when the view was made (a handle's
    key is never reused), and each one's own ``forward`` attribute (set on the
    instance, over the class's method) is the one it had (None: none)."""
    __slots__ = ("dicts", "keys", "mdicts", "fwd", "fwds")

    def __init__(self, dicts, mdicts):
        self.dicts, self.mdicts = dicts, mdicts
        self.keys = self._keys()
        self.fwd = ("forward",) * len(mdicts)  # (map over C methods: no Python loop)
        self.fwds = list(map(dict.get, mdicts, self.fwd)) \
            if any(map(dict.__contains__, mdicts, self.fwd)) else None

    def _keys(self):
        return tuple(tuple(d) for d in self.dicts) if any(self.dicts) else ()

    def get(self, key, default):
        if self.fwds is None:  # (none had one)
            if any(map(dict.__contains__, self.mdicts, self.fwd)):
                return False
        elif list(map(dict.get, self.mdicts, self.fwd)) != self.fwds:
            return False
        if not any(self.dicts):
            return not self.keys
        return self._keys() == self.keys


def _module_calls_guard(mods):
    """The guard that the modules ``mods`` (``(name, module)``) keep the hooks and the
    instance ``forward`` they have, and that the hooks registered for every module
    stay as they are: either changes what a call of one computes."""
    from ..nn.module import GLOBAL_CALL_HOOKS  # (the hooks every module runs)
    dicts, mdicts, names = [], [], []
    if mods:
        dicts += GLOBAL_CALL_HOOKS
    for name, m in mods:
        d = m.__dict__
        ds = [d.get(k) for k in _HOOKS]
        if all(isinstance(x, dict) for x in ds):
            dicts += ds
            mdicts.append(d)
            names.append(name)
    if not dicts:
        return None
    view = _ModuleCalls(tuple(dicts), tuple(mdicts))
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return view, "calls", True, \
        f"{'the same hooks' if view.keys else 'no hooks'} and forward on {shown}"


class _Contents:
    """A list or dict seen as a holder of one guard: ``get(key, default)`` is whether
    it holds what it held when the view was made: the same keys in the same order,
    plain values equal and of the same types, every other object the same one (code
    that iterates it, takes its ``len``, ``sum`` or ``max``, or indexes it with a
    computed key reads all of it)."""
    __slots__ = ("c", "keys", "vals", "types", "objs")

    def __init__(self, c):
        self.c = c
        self.keys = list(c) if isinstance(c, dict) else None
        self.vals = vals = list(c.values()) if isinstance(c, dict) else list(c)
        self.types = list(map(type, vals))
        self.objs = [(i, v) for i, v in enumerate(vals) if not plain(v)]

    def get(self, key, default):
        c = self.c
        if self.keys is not None:
            if len(c) != len(self.vals) or list(c) != self.keys:
                return False
            vals = list(c.values())
        else:
            vals = c if type(c) is list else list(c)  # (a deque, a set: in their order)
        if len(vals) != len(self.vals) or list(map(type, vals)) != self.types:
            return False
        for i, v in self.objs:
            if vals[i] is not v:
                return False
        return vals == self.vals  # (plain values only left to compare)


class _Array:
    """A NumPy array seen as a holder of one guard: ``get(key, default)`` is whether
    it holds the values, shape and dtype it held when the view was made (code that
    reads its items, ``float(a[0])``, ``a.sum()``, bakes them into the program)."""
    __slots__ = ("a", "shape", "dtype", "data")

    def __init__(self, a):
        self.a, self.shape, self.dtype, self.data = a, a.shape, a.dtype, a.tobytes()

    def get(self, key, default):
        a = self.a
        return a.shape == self.shape and a.dtype == self.dtype and a.tobytes() == self.data


class _Items:
    """A list seen as a holder of guards: ``get(i, default)`` is its item ``i``."""
    __slots__ = ("seq",)

    def __init__(self, seq):
        self.seq = seq

    def get(self, i, default):
        seq = self.seq
        return seq[i] if -len(seq) <= i < len(seq) else default


# Methods that change the container they are called on (a side effect when the
# container outlives the call: a list of losses kept by the script, a log)
_MUTATORS = frozenset("append extend insert pop remove clear update setdefault popitem add "
                      "discard appendleft extendleft rotate sort reverse difference_update "
                      "intersection_update symmetric_difference_update".split())
_MUTABLE = (list, dict, set, bytearray, collections.deque, collections.OrderedDict,
            collections.defaultdict, collections.Counter)
_WRITES = frozenset(("write", "writelines"))
# generators of random numbers whose draws (a C method called from user code:
# ``random.random()``, ``np.random.rand()``, ``rng.normal()``) a replay would repeat
_RANDOM = (random.Random, np.random.Generator, np.random.RandomState, np.random.BitGenerator)
_RANDOM_FILE = random.__file__  # (random.uniform, .choice, .shuffle: Python methods)
# a record a logger emits (Logger._log runs once its level is enabled: logger.info(),
# logging.warning(), a LoggerAdapter's), which a replay would not
_LOG_RECORD = logging.Logger._log.__code__
_LOGGING_FILE = _LOG_RECORD.co_filename

def _noted(v):
    """Whether the hook notes ``v``'s binding before the call: a plain value, or a
    list, dict, set or tuple (rebound by ``HIST = HIST + [loss]``: by identity)."""
    return plain(v) or type(v) in (list, dict, set, tuple)


def _same_items(now, before):
    """Whether container ``now`` holds the same objects as its copy ``before``."""
    if len(now) != len(before):
        return False
    if isinstance(now, (list, collections.deque)):
        return all(a is b for a, b in zip(now, before))
    if isinstance(now, dict):
        return all(k in before and before[k] is v for k, v in now.items())
    return now == before


def _underlying(holder):
    """The object a guard's holder stands for (a list for its ``_Items`` view)."""
    return holder.seq if type(holder) is _Items else holder


_STORES = ("_parameters", "_buffers", "_modules")  # (a module's tensors: guarded apart)
_DEEP = 3      # how many attribute / item steps a guard follows from a root
_ITEMS = 256   # a list or dict at most this long is guarded whole (larger: by identity)
# the containers whose items the guards follow (exact types: a user's subclass is a user
# object), by how an item is found: by key, by index, or only by iterating
_DICT_TYPES = frozenset((dict, collections.OrderedDict, collections.defaultdict,
                         collections.Counter))
_SEQ_TYPES = frozenset((list, tuple, collections.deque))
_CONTAINER_TYPES = _DICT_TYPES | _SEQ_TYPES | {set, frozenset}
_CHANGING = _CONTAINER_TYPES - {tuple, frozenset}  # (those guarded whole: in place)
_ARRAY_BYTES = 1 << 16  # a NumPy array at most this large is guarded on its values
#                          (larger: by identity)
_KEYS = 32     # at most this many constant keys of one code tried on one container


def _user_class(obj):
    """A class defined outside the library and the standard library (a namespace of
    settings, ``class Config: lr = 0.1``, or a user's class whose attributes the
    function reads)."""
    if not isinstance(obj, type):
        return False
    f = getattr(sys.modules.get(obj.__module__), "__file__", None)
    if f is None:
        return obj.__module__ in ("__main__", None)
    a = os.path.abspath(f)
    return not (a.startswith(_STD) or a.startswith(_PKG))


def _user_object(obj):
    """An instance of a user's class (``_user_class``) whose attributes are a plain
    dict (a config object, a dataclass, a user's model; not a function or a class)."""
    if isinstance(obj, (type, types.FunctionType, types.MethodType)) or \
            type(getattr(obj, "__dict__", None)) is not dict:
        return False
    return _user_class(type(obj))


def _slotted(obj):
    """An instance of a user's class whose attributes live in ``__slots__`` alone."""
    try:
        return not isinstance(obj, type) and not hasattr(obj, "__dict__") and \
            _user_class(type(obj))
    except Exception:  # noqa: BLE001  (a __getattr__ that raises something else)
        return False


def _namespace(obj):
    """An object of attributes in a plain dict that is not callable: a
    ``types.SimpleNamespace``, an ``argparse.Namespace``."""
    try:
        return not callable(obj) and not isinstance(obj, type) and \
            type(getattr(obj, "__dict__", None)) is dict
    except Exception:  # noqa: BLE001
        return False


def _codes_within(code):
    """``code`` and the code objects defined in it, as deep as they go: its
    comprehensions, generator expressions and lambdas, which read what it hands them
    (``sum(o.scale for o in items)`` reads ``scale`` of each item)."""
    out, todo = [], [code]
    while todo:
        c = todo.pop()
        out.append(c)
        todo += [k for k in c.co_consts if type(k) is types.CodeType]
    return out


def _names(code):
    """The attribute and global names ``code`` and the code within it can read."""
    return tuple(dict.fromkeys(n for c in _codes_within(code) for n in c.co_names))


def _const_keys(code):
    """The constants of ``code`` and of the code within it that can be dict keys or
    list indices."""
    out = []
    for c in (k for cc in _codes_within(code) for k in cc.co_consts):
        if type(c) in (str, int) and len(out) < _KEYS:
            out.append(c)
    return out


def _is_module(obj):
    """Whether ``obj`` is a Module (tg.nn sits above the compiler: one by what it has).
    An object whose ``__getattr__`` raises anything for the names is not one."""
    if isinstance(obj, type):
        return False
    try:
        return callable(getattr(obj, "named_parameters", None)) and \
            callable(getattr(obj, "named_buffers", None)) and \
            callable(getattr(obj, "named_modules", None))
    except Exception:  # noqa: BLE001  (a user's __getattr__: KeyError, say)
        return False


def _held(obj):
    """Whether a value a guard holds by identity: any object but a Python module and a
    ``tg.nn`` module (whose rebinding the compiler's tensor references catch, with
    their parameters), so that a rebound function, object, dict or array captures
    again instead of replaying what the old one computed."""
    return obj is not _MISSING and not isinstance(obj, types.ModuleType) and \
        not _is_module(obj)


def _user_code(code, g, cache={}):  # noqa: B006 (a per-process cache of file decisions)
    f = code.co_filename
    if f.startswith("<"):  # exec'd or frozen code: whose module it runs in decides
        name = g.get("__name__")  # (__main__: python -c, stdin, a notebook cell; none:
        # code a library generated into a bare namespace, a namedtuple's __new__ too)
        if f.startswith("<frozen") or type(name) is not str or (
                name != "__main__" and name.startswith(("tapegrad", "importlib", "_",
                                                        "namedtuple_"))):
            return False
        mf = g.get("__file__")  # (code a library generates: a dataclass's __init__)
        return not (type(mf) is str and os.path.abspath(mf).startswith(_STD + (_PKG,)))
    r = cache.get(f)
    if r is None:
        a = os.path.abspath(f)
        # (a kernel module tapegrad generates lives in its cache folder, not the package)
        r = cache[f] = not (a.startswith(_STD) or a.startswith(_PKG)
                            or str(g.get("__name__", "")).startswith("_tg_"))
    return r


def _in_nn(code, cache={}):  # noqa: B006
    f = code.co_filename
    r = cache.get(f)
    if r is None:
        r = cache[f] = os.path.abspath(f).startswith(_NN) if not f.startswith("<") else False
    return r


def _ref(obj):
    """A weak reference to ``obj``, or a strong one where it takes none."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class Watch:
    """What ran during one capture: ``start()`` before the call, ``stop()`` after."""

    def __init__(self, fn):
        self.fn = fn
        self.codes = {}      # code -> its globals (user code that ran)
        self.modules = {}    # id -> a Module one of whose methods ran
        self.selves = {}     # id -> (a reference to self, {codes}) for each method of user
        #                      code that ran (weak: an object the call made and dropped, a
        #                      helper whose method appends to its own list, is no state a
        #                      replay must keep: neither a side effect nor an escape)
        self.prev = None
        self.first = {}      # (id(holder), key) -> (holder, key, value, words) when first
        #                      seen
        self.effects = []    # the output user code wrote (print(), a file's write())
        self.mutated = {}    # id -> (container, method) user code called a mutator of
        self.owners = {}     # id of a self's __dict__ -> the reference to that self
        self.snaps = {}      # id -> (container, shallow copy, name, owner's __dict__ or
        #                      None) of those it names
        self.rngs = {}       # id -> (random generator, its state, name) of those it names
        self.arrays = []     # (NumPy array, its bytes, name) of the arguments
        self.unguarded = []  # what ``guards`` found too large or too deep to guard on
        #                      its contents

    def _hook(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code not in self.codes and _user_code(code, frame.f_globals):
                g = self.codes[code] = frame.f_globals
                for name in code.co_names:
                    v = g.get(name, _MISSING)
                    if v is _MISSING or name.startswith("__"):
                        continue
                    if _noted(v):
                        self.first.setdefault((id(g), name), (g, name, v, name))
                    if not plain(v):
                        self._snap(v, name)
                        self._first_inside(v, code, name)
                if code.co_freevars:
                    loc = frame.f_locals
                    for name in code.co_freevars:
                        v = loc.get(name, _MISSING)
                        if v is not _MISSING and not plain(v):
                            self._snap(v, name)
                            self._first_inside(v, code, name)
            if code.co_argcount and code.co_varnames[0] == "self" and (
                    code in self.codes or _in_nn(code)):
                s = frame.f_locals.get("self")
                if s is not None and code in self.codes and code.co_name != "__init__":
                    e = self.selves.get(id(s))
                    if e is None or e[0]() is not s:
                        e = self.selves[id(s)] = (_ref(s), set())
                    e[1].add(code)
                    if not _is_module(s):
                        self._first_inside(s, code, "self")
                        if hasattr(s, "__dict__"):  # (the dict held: its id stays its)
                            self.owners[id(s.__dict__)] = (s.__dict__, e[0])
                if s is not None and id(s) not in self.modules and _is_module(s):
                    self.modules[id(s)] = s
                    d = s.__dict__
                    for a, v in list(d.items()):
                        if _noted(v) and not a.startswith("__"):
                            self.first.setdefault((id(d), a), (d, a, v, a))
                            if a[0] != "_":
                                self._snap(v, f"self.{a}")
                        elif isinstance(v, _RANDOM):
                            self._snap(v, f"self.{a}")
            if code is _LOG_RECORD and self._from_user(frame):
                self.effects.append(f"logging to {frame.f_locals['self'].name!r}")
            elif code.co_filename == _RANDOM_FILE and frame.f_back is not None and \
                    frame.f_back.f_code in self.codes:
                self.effects.append(f"a draw from a random generator (random.{code.co_name}"
                                    f"())")
        elif event == "c_call" and frame.f_code in self.codes:
            self._c_call(arg)
        if self.prev is not None:
            self.prev(frame, event, arg)

    def _from_user(self, frame):
        """Whether user code called ``frame``'s logging function, directly or through
        the logging module's own (``logging.info`` -> ``Logger.info`` -> ``_log``)."""
        f = frame.f_back
        while f is not None and f.f_code.co_filename == _LOGGING_FILE:
            f = f.f_back
        return f is not None and f.f_code in self.codes

    def _c_call(self, fn):
        """Note a call user code made of a C function: ``print``, a file's ``write``,
        a method that changes a list, dict, set or deque (``calls.append(1)``)."""
        if fn is builtins.print:
            self.effects.append("print()")
            return
        s = getattr(fn, "__self__", None)
        if s is None:
            return
        name = getattr(fn, "__name__", "")
        if isinstance(s, _RANDOM):
            self.effects.append(f"a draw from a random generator ({type(s).__name__}"
                                f".{name}())")
        elif name in _MUTATORS and isinstance(s, _MUTABLE):
            self.mutated.setdefault(id(s), (s, name))
        elif name in _WRITES and isinstance(s, io.IOBase):
            self.effects.append(f"{name}() on {getattr(s, 'name', 'a file')}")

    def _snap(self, obj, name, holder=None):
        """Keep a shallow copy of a list, dict, set or deque user code names (at most
        256 items; a dict subclass of the standard library too), to see after the call
        whether it changed in place (``L += [x]``, ``d[k] = v``: no C call to note), and
        the state of a random generator it names (``rng.normal()``: a method of NumPy's
        is not a C call the hook sees)."""
        if type(obj) in _CHANGING and id(obj) not in self.snaps and len(obj) <= 256:
            self.snaps[id(obj)] = (obj, copy.copy(obj), name,
                                   None if holder is None else id(holder))
        elif isinstance(obj, _RANDOM) and id(obj) not in self.rngs:  # (its state, to see
            self.rngs[id(obj)] = (obj, _rng_state(obj), name)  # whether the call drew)

    def _first_inside(self, obj, code, oname):
        """Note the plain values ``code`` can read inside ``obj`` (a container's items
        under the code's constant keys, a user object's attributes it names) as they
        were before it ran, so that ``changed`` sees the call assign them."""
        tp = type(obj)
        if tp is dict or tp is list:
            holder = obj if tp is dict else _Items(obj)
            for k in _const_keys(code):
                if tp is list and (type(k) is not int or k >= 2 ** 31):
                    continue
                v = holder.get(k, _MISSING)
                if v is not _MISSING and _noted(v):
                    self.first.setdefault((id(obj), k), (holder, k, v, f"{oname}[{k!r}]"))
                    self._snap(v, f"{oname}[{k!r}]")
        elif _user_object(obj):
            d = obj.__dict__
            for a in code.co_names:
                v = d.get(a, _MISSING)
                if v is not _MISSING and _noted(v) and not a.startswith("__"):
                    self.first.setdefault((id(d), a), (d, a, v, f"{oname}.{a}"))
                    self._snap(v, f"{oname}.{a}", d)
                elif isinstance(v, _RANDOM):
                    self._snap(v, f"{oname}.{a}", d)

    def unassigned(self, guards):
        """``guards`` less those on the values the call assigned (``changed``): a
        program that cannot be replayed runs eagerly whatever they hold, and the next
        call would otherwise capture again for each new value."""
        gone = getattr(self, "assigned", None) or set()
        touched = getattr(self, "touched", None) or set()
        if not gone and not touched:
            return guards
        return tuple(g for g in guards if (id(_underlying(g[0])), g[1]) not in gone
                     and not (type(g[0]) is _Contents and id(g[0].c) in touched))

    def start(self, args=(), batches=()):
        """Start watching a call with ``args`` (``(name, value)`` for each argument:
        the plain values and containers inside a user object, a list, a dict or a
        NumPy array it is given are noted as those it names are). ``batches``: the
        names of batch arguments, which the key holds by structure and value, not by
        identity: no guard names them (a guard would test, and keep alive, the
        capturing call's container and tensors), though what the call assigns in them
        is still found."""
        self.args = []
        for name, v in args:
            if isinstance(v, _Tensor) or plain(v) or _is_module(v):
                continue
            if name not in batches:
                self.args.append((name, v))
            self._snap(v, name)
            if _user_object(v):
                d = v.__dict__
                for a, x in list(d.items()):
                    if _noted(x) and not a.startswith("__"):
                        self.first.setdefault((id(d), a), (d, a, x, f"{name}.{a}"))
                        self._snap(x, f"{name}.{a}", d)
            elif type(v) is np.ndarray and v.nbytes <= _ARRAY_BYTES:
                self.arrays.append((v, v.tobytes(), name))
        for code, f in _functions(self.fn).items():  # (a mutable default of user
            if not _user_code(code, getattr(f, "__globals__", {})):  # code, ``cache={}``)
                continue
            for i, v in enumerate(f.__defaults__ or ()):
                self._snap(v, f"{f.__qualname__}'s default {i}")
            for k, v in (f.__kwdefaults__ or {}).items():
                self._snap(v, f"{f.__qualname__}'s default {k}")
        self.random_states = _random_states()
        self.prev = sys.getprofile()
        sys.setprofile(self._hook)

    def side_effects(self):
        """The Python side effects of the call that a replay would not repeat, in
        words: output it wrote (``print()``), and each container that outlives the
        call (reached from the globals and closure cells its code names, or from the
        ``self`` of its methods) that it changed (``calls.append()``). Containers the
        call made and dropped (or returned) are its own business."""
        if _random_states() != self.random_states:
            self.effects.append("a draw from Python's or NumPy's global random generator")
        for g, st, name in self.rngs.values():
            if _rng_state(g) != st:
                self.effects.append(f"a draw from the random generator {name}")
        for a, data, name in self.arrays:
            if a.tobytes() != data:
                self.effects.append(f"{name} written in place")
        out = list(dict.fromkeys(self.effects))
        self.touched = set(self.mutated)  # (ids of the containers it changed)
        snaps, self.snaps = self.snaps, {}
        for obj, before, name, hid in snaps.values():
            owner = self.owners.get(hid)
            if owner is not None and owner[1]() is None:
                continue  # (an attribute of an object the call made and dropped)
            if not _same_items(obj, before):
                out.append(f"{name} changed in place")
                self.touched.add(id(obj))
        mutated, self.mutated = self.mutated, {}
        if mutated:
            def match(obj, name):
                hit = mutated.get(id(obj))
                return f"{name}.{hit[1]}()" if hit is not None and hit[0] is obj else None
            out += self._outside(match, list(mutated.values()))
        return out

    def stop(self):
        sys.setprofile(self.prev)
        self.prev = None

    def changed(self):
        """The names of the plain values (and containers: by identity) the call itself
        rebound (a replay would not)."""
        out = []
        self.assigned = set()
        for holder, key, v, name in self.first.values():
            owner = self.owners.get(id(holder))
            if owner is not None and owner[1]() is None:
                continue  # (an attribute of an object the call made and dropped)
            w = holder.get(key, _MISSING)
            if w is not v and (not plain(v) or type(w) is not type(v) or w != v):
                out.append(name)
                self.assigned.add((id(_underlying(holder)), key))
        return out

    # ------------------------------------------------------------ the guards
    def guards(self):
        """The guards on what the call read (see the module docstring)."""
        fn = self.fn
        out, seen = [], set()
        whole = set()  # ids of the containers and arrays guarded whole (or too large)
        deep = set()  # ids of those found past the last step followed
        self.unguarded = []  # the lists, dicts and arrays too large or too deep to guard
        funcs = _functions(fn)
        names = _root_names(fn, funcs)

        def add(holder, key, value, words):
            k = (id(holder), key)
            if k not in seen:
                seen.add(k)
                out.append((holder, key, value, words))

        def attrs_of(obj, oname, code, where, depth=_DEEP):
            d = getattr(obj, "__dict__", None)
            if type(d) is not dict:
                if _slotted(obj):
                    slots_of(obj, oname, code, where, depth)
                return
            cls = None if isinstance(obj, types.ModuleType) else type(obj)
            for a in _names(code):
                if a.startswith("__"):
                    continue
                v = d.get(a, _MISSING)
                if v is _MISSING:  # a class attribute, unless the instance gets one
                    if cls is None:
                        continue
                    for k in cls.__mro__:
                        if a in k.__dict__:
                            v = k.__dict__[a]
                            if plain(v) and k.__module__ != "builtins":
                                add(d, a, _MISSING, f"{oname}.{a} not set on the instance"
                                                    f"{where}")
                                add(k.__dict__, a, v, f"{k.__qualname__}.{a} == {v!r}{where}")
                            break
                    continue
                if plain(v):
                    add(d, a, v, f"{oname}.{a} == {v!r}{where}")
                elif v is os.environ:  # (os.environ[...]: a Python module's mapping)
                    environ_of(f"{oname}.{a}", code, where)
                elif depth > 1:
                    inside(v, f"{oname}.{a}", code, where, depth - 1, d, a)

        def environ_of(oname, code, where):
            """Guards on the environment variables ``code`` reads by constant names."""
            for k in _const_keys(code):
                if type(k) is str:
                    v = os.environ.get(k, _MISSING)
                    add(os.environ, k, v, f"{oname}[{k!r}] == {v!r}{where}"
                        if v is not _MISSING else f"{oname}[{k!r}] not set{where}")

        def slots_of(obj, oname, code, where, depth):
            holder = _Attrs(obj)
            for a in _names(code):
                if not isinstance(getattr(type(obj), a, None), types.MemberDescriptorType):
                    continue
                v = getattr(obj, a, _MISSING)
                if v is _MISSING:
                    continue
                if plain(v):
                    add(holder, a, v, f"{oname}.{a} == {v!r}{where}")
                elif depth > 1:
                    inside(v, f"{oname}.{a}", code, where, depth - 1, holder, a)

        def class_attrs_of(cls, oname, code, where):
            """Guards on the plain class attributes ``code`` reads from ``cls`` (found
            along its MRO, as Python finds them: none may appear on a class before)."""
            for a in _names(code):
                if a.startswith("__"):
                    continue
                for k in cls.__mro__:
                    if a in k.__dict__:
                        v = k.__dict__[a]
                        if plain(v) and k.__module__ != "builtins":
                            for kk in cls.__mro__:
                                if kk is k:
                                    break
                                add(kk.__dict__, a, _MISSING,
                                    f"{kk.__qualname__}.{a} not set{where}")
                            add(k.__dict__, a, v, f"{oname}.{a} == {v!r}{where}")
                        break

        def items_of(c, oname, code, where, depth):
            tp = type(c)
            keyed = tp in _DICT_TYPES
            # (what holds an item: the container, by key or index; a tuple's and a
            # set's cannot change, only what they hold; a set's are found by iterating)
            holder = c if keyed else _Items(c) if tp in _CHANGING and tp is not set \
                else None
            index = holder if holder is not None else _Items(c) if tp is tuple else None
            if len(c) <= _ITEMS:
                if tp in _CHANGING and id(c) not in whole:
                    whole.add(id(c))
                    out.append((_Contents(c), "items", True,
                                f"{oname} holds the same items{where}"))
                items = list(c.items()) if keyed else list(enumerate(c))
                if depth > 1:  # (what each item holds: read by iterating, or a key
                    consts = set(_const_keys(code))  # computed)
                    for k, v in items:
                        if not plain(v) and (k not in consts or index is None):
                            inside(v, f"{oname}[{k!r}]", code, where, depth - 1, holder, k)
                else:  # (a container or array in it: its contents are not followed)
                    for k, v in items:
                        if (type(v) in _CHANGING or type(v) is np.ndarray) and \
                                id(v) not in deep:
                            deep.add(id(v))
                            self.unguarded.append(f"{oname}[{k!r}]{where}: more than "
                                                  f"{_DEEP} steps in")
            elif tp in _CHANGING and id(c) not in whole:
                whole.add(id(c))
                self.unguarded.append(f"{oname}{where}: {len(c)} items")
            for k in _const_keys(code) if index is not None else ():
                if not keyed and (type(k) is not int or k >= 2 ** 31):
                    continue
                v = index.get(k, _MISSING)
                if v is _MISSING:
                    continue
                if plain(v):
                    if holder is not None:  # (a tuple's items cannot change)
                        add(holder, k, v, f"{oname}[{k!r}] == {v!r}{where}")
                elif depth > 1:
                    inside(v, f"{oname}[{k!r}]", code, where, depth - 1, holder, k)

        def inside(obj, oname, code, where, depth, holder=None, key=None):
            """Guards on what ``code`` can read inside ``obj``, a non-plain value held
            by ``holder[key]`` (which must keep holding it)."""
            container = type(obj) in _CONTAINER_TYPES
            if not (container or _user_object(obj) or _slotted(obj) or _is_module(obj)
                    or _namespace(obj)):
                if holder is not None and _held(obj):  # (a function, a tensor, an array)
                    add(holder, key, obj, f"{oname} is the same object{where}")
                values_of(obj, oname, where)
                advanced(obj, oname, where)
                return
            if holder is not None:
                add(holder, key, obj, f"{oname} is the same object{where}")
            if container:
                items_of(obj, oname, code, where, depth)
            else:
                attrs_of(obj, oname, code, where, depth)

        def method(obj, oname, code):
            """Guards that ``obj.<name>`` still finds the method whose ``code`` ran:
            the same function on its class, none set on the instance or on a class
            before it in the MRO (``Net.forward = ...``, ``model.forward = ...``)."""
            name = code.co_name
            d = getattr(obj, "__dict__", None)
            for k in type(obj).__mro__:
                f = k.__dict__.get(name)
                if f is None:
                    continue
                if getattr(getattr(f, "__func__", f), "__code__", None) is code:
                    if type(d) is dict:
                        add(d, name, _MISSING, f"{oname}.{name} not set on the instance")
                    for kk in type(obj).__mro__:
                        if kk is k:
                            break
                        add(kk.__dict__, name, _MISSING, f"{kk.__qualname__}.{name} not set")
                    add(k.__dict__, name, f, f"{k.__qualname__}.{name} is the same function")
                return

        def advanced(obj, oname, where):
            if _iterator(obj):
                self.effects.append(f"the iterator {oname}{where} read (next() or a for "
                                    f"loop advance it)")

        def values_of(obj, oname, where):
            if type(obj) is functools.partial and id(obj.keywords) not in whole:
                # (its keywords dict can change in place; its args cannot)
                whole.add(id(obj.keywords))
                if len(obj.keywords) <= _ITEMS:
                    out.append((_Contents(obj.keywords), "items", True,
                                f"{oname}.keywords holds the same items{where}"))
            if type(obj) is np.ndarray and id(obj) not in whole:
                whole.add(id(obj))
                if obj.nbytes <= _ARRAY_BYTES:
                    out.append((_Array(obj), "values", True,
                                f"{oname} holds the same values{where}"))
                else:
                    self.unguarded.append(f"{oname}{where}: {obj.nbytes} bytes")

        def roots(obj, oname, code, where):
            if plain(obj):
                return True
            if type(obj) in _CONTAINER_TYPES:
                items_of(obj, oname, code, where, _DEEP)
            elif isinstance(obj, types.ModuleType) or _is_module(obj) or _user_object(obj) \
                    or _slotted(obj) or _namespace(obj):
                attrs_of(obj, oname, code, where, 1 if isinstance(obj, types.ModuleType)
                         else _DEEP)
            elif _user_class(obj):
                class_attrs_of(obj, oname, code, where)
            elif obj is os.environ:
                environ_of(oname, code, where)
            else:
                values_of(obj, oname, where)
                advanced(obj, oname, where)
            return False

        fname = getattr(fn, "__qualname__", type(fn).__name__)
        for name, v in self.args:  # (an argument the key holds by identity: what the
            for code in self.codes:  # code can read inside it)
                roots(v, name, code, f" (argument of {fname})")
        unmapped = []
        for code, g in self.codes.items():
            where = f" (global of {code.co_qualname})"
            for name in code.co_names:
                v = g.get(name, _MISSING)
                if v is _MISSING or name.startswith("__"):
                    continue
                if not plain(v) and _held(v):
                    add(g, name, v, f"{name} is the same object{where}")
                if roots(v, name, code, where):
                    add(g, name, v, f"{name} == {v!r}{where}")
            f = funcs.get(code)
            if f is not None:  # (defaults rebound: ``f.__defaults__ = (...)``; the code
                #                 itself replaced: ``f.__code__ = g.__code__``)
                for attr in ("__defaults__", "__kwdefaults__"):
                    v = getattr(f, attr, None)
                    if v is not None:
                        add(_Attrs(f), attr, v, f"{code.co_qualname}.{attr} == {v!r}")
                        # (a mutable default's contents: ``def f(x, s=[1.0])``)
                        for i, dv in (v.items() if attr == "__kwdefaults__" else
                                      enumerate(v)):
                            if not plain(dv):
                                inside(dv, f"{code.co_qualname}'s default {i}", code, "",
                                       _DEEP - 1)
                add(_Attrs(f), "__code__", code,
                    f"{code.co_qualname}.__code__ is the same object")
            if code.co_freevars:
                if f is None:
                    unmapped.append(code)
                else:
                    self._cells(f, code, add, roots)
        if unmapped:  # closures not reached by name from fn: found by their code
            for f in gc.get_referrers(*unmapped):
                if isinstance(f, types.FunctionType) and f.__code__ in self.codes:
                    self._cells(f, f.__code__, add, roots)
        mods = dict(self.modules)
        for m in list(self.modules.values()):
            for _, sub in m.named_modules():
                mods.setdefault(id(sub), sub)
        mod_names = {}
        for name, m in names:
            for path, sub in m.named_modules():
                mod_names.setdefault(id(sub), f"{name}.{path}" if path else name)
        ran = []  # (name, module) for each module whose method ran
        for i, m in mods.items():
            mname = mod_names.get(i, type(m).__name__)
            if i in self.modules:
                for a, v in list(m.__dict__.items()):
                    if a.startswith("__"):
                        continue
                    if plain(v):
                        add(m.__dict__, a, v, f"{mname}.{a} == {v!r}")
                    elif callable(v) and _held(v):  # (an activation: F.relu, a partial)
                        add(m.__dict__, a, v, f"{mname}.{a} is the same object")
                ran.append((mname, m))
            elif "training" in m.__dict__:
                add(m.__dict__, "training", m.training, f"{mname}.training == {m.training!r}")
        mg = _module_calls_guard(ran)
        if mg is not None:
            out.append(mg)
        for i, (ref, codes) in self.selves.items():
            obj = ref()  # (a module's own plain attributes are guarded above)
            for code in codes if obj is not None else ():
                where = "" if i in mod_names else f" (self of {code.co_qualname})"
                attrs_of(obj, mod_names.get(i, "self"), code, where)
                method(obj, mod_names.get(i, "self"), code)
        return tuple(out)

    def escapes(self, produced):
        """Where the call left a tensor over an array an op computed during it (in
        ``produced``: id -> weakref) in Python state a replay does not rebuild: an item
        of a list or dict, or an attribute of an object or a module, reached from the
        globals and closure cells the call's code names and from the ``self`` of its
        methods, two steps deep (``"L[0]"``, ``"self.last"``). None if nowhere."""
        from ..tensor import Tensor

        def match(obj, name):
            if isinstance(obj, Tensor):
                arr = obj._data
                ref = produced.get(id(arr))
                return name if ref is not None and ref() is arr else None
            return None
        found = self._outside(match, ())
        return found[0] if found else None

    def _outside(self, match, wanted):
        """The names ``match(obj, name)`` gives (its first, or one for each of
        ``wanted``, a list of ``(object, ...)``: all of them) for the objects reached
        from the globals and closure cells the call's code names and from the
        ``self`` of its methods, through lists, dicts, modules and user objects, two
        steps deep."""
        from ..tensor import Tensor
        found = []
        need = len(wanted) or 1

        def search(obj, name, d, seen):
            if id(obj) in seen:
                return None
            seen.add(id(obj))
            hit = match(obj, name)
            if hit is not None:
                found.append(hit)
                return hit if len(found) >= need else None
            if isinstance(obj, Tensor):
                return None
            if d == 0:
                return None
            tp = type(obj)
            if tp is list or tp is tuple:
                items = enumerate(obj) if len(obj) <= 256 else ()
            elif tp is dict:
                items = list(obj.items()) if len(obj) <= 256 else ()
            elif _is_module(obj):
                dd = obj.__dict__
                items = [(k, v) for k, v in dd.items() if k not in _STORES]
                for k, sub in dd.get("_modules", {}).items():
                    if sub is not None:
                        r = search(sub, f"{name}.{k}", d, seen)
                        if r:
                            return r
                return next((f for k, v in items
                             if (f := search(v, f"{name}.{k}", d - 1, seen))), None)
            elif _user_object(obj):
                return next((f for k, v in list(obj.__dict__.items())
                             if (f := search(v, f"{name}.{k}", d - 1, seen))), None)
            else:
                return None
            return next((f for k, v in items if (f := search(v, f"{name}[{k!r}]", d - 1, seen))),
                        None)

        seen = set()
        funcs = _functions(self.fn)
        unmapped = [c for c in self.codes if c.co_freevars and c not in funcs]
        if unmapped:  # closures not reached by name from fn: found by their code
            for f in gc.get_referrers(*unmapped):
                if isinstance(f, types.FunctionType) and f.__code__ in self.codes:
                    funcs.setdefault(f.__code__, f)
        for code, g in self.codes.items():
            for name in code.co_names:
                v = g.get(name, _MISSING)
                if v is not _MISSING and not plain(v) and not callable(v):
                    if search(v, name, 2, seen):
                        return found
            f = funcs.get(code)
            for name, cell in zip(code.co_freevars, (f.__closure__ or ()) if f else ()):
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                if not plain(v) and (not callable(v) or _is_module(v)):
                    if search(v, name, 2, seen):
                        return found
        selves = [s for s in (r() for r, _ in self.selves.values()) if s is not None]
        for obj in selves + list(self.modules.values()):
            if search(obj, "self" if not _is_module(obj) else type(obj).__name__, 2, seen):
                return found
        return found

    @staticmethod
    def _cells(f, code, add, roots):
        where = f" (closure of {code.co_qualname})"
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if not plain(v) and _held(v):
                add(cell, "cell_contents", v, f"{name} is the same object{where}")
            if roots(v, name, code, where):
                add(cell, "cell_contents", v, f"{name} == {v!r}{where}")


def _random_states():
    """The states of Python's and NumPy's global random generators, comparable with
    ``==``."""
    return random.getstate(), _legacy_state(np.random.get_state())


def _legacy_state(st):
    """A ``RandomState.get_state()`` tuple made comparable with ``==``."""
    return (st[1].tobytes(),) + tuple(st[2:])


def _rng_state(g):
    """The state of a random generator (``random.Random``, NumPy's ``Generator``,
    ``RandomState`` or bit generator), comparable with ``==``."""
    if isinstance(g, random.Random):
        return g.getstate()
    if isinstance(g, np.random.RandomState):
        return _legacy_state(g.get_state())
    return _frozen((g.bit_generator if isinstance(g, np.random.Generator) else g).state)


def _frozen(v):
    if type(v) is dict:
        return tuple((k, _frozen(x)) for k, x in v.items())
    if isinstance(v, np.ndarray):
        return v.tobytes()
    return v


def _iterator(obj):
    """Whether ``obj`` is an iterator (a generator, ``iter(list)``, a data loader's
    iterator), which ``next()`` or a ``for`` loop advances: not a file (whose reads
    and writes are noted apart)."""
    return hasattr(type(obj), "__next__") and not isinstance(obj, io.IOBase)


def _functions(fn, depth=4):
    """code -> function for the functions reachable by name from ``fn`` (its closure
    cells, the globals its code names, bound methods' functions), ``depth`` deep."""
    out = {}

    def visit(f, d):
        if _is_module(f):
            f = type(f).forward.__get__(f)
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None)
        if code is None or code in out:
            return
        out[code] = f
        if d == 0:
            return
        cands = []
        for cell in f.__closure__ or ():
            try:
                cands.append(cell.cell_contents)
            except ValueError:
                continue
        g = f.__globals__
        cands += [g[n] for n in code.co_names if n in g]
        for c in cands:
            if isinstance(c, (types.FunctionType, types.MethodType)):
                visit(c, d - 1)
    visit(fn, depth)
    return out


def _root_names(fn, funcs):
    """(name, module) for the modules ``fn`` reaches by a name: itself, a bound method's
    object, a closure cell or a global of the functions it reaches."""
    out = []
    if _is_module(fn):
        out.append(("model", fn))
    s = getattr(fn, "__self__", None)
    if _is_module(s):
        out.append(("self", s))
    for code, f in funcs.items():
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if _is_module(v):
                out.append((name, v))
        g = f.__globals__
        for name in code.co_names:
            v = g.get(name)
            if v is not None and _is_module(v):
                out.append((name, v))
    return out


def optimizer_guards(optimizers):
    """Guards on how each optimizer whose ``step`` the program replays groups its
    parameters: the same ``param_groups`` list, with the same group dicts, each with
    the same ``params`` list of the same tensors (``add_param_group``, or a parameter
    given to a group, changes what ``zero_grad`` and ``step`` touch). The groups'
    hyperparameters are read live by the replay."""
    out = []
    for opt in optimizers:
        d = getattr(opt, "__dict__", None)
        if type(d) is not dict or type(d.get("param_groups")) is not list:
            continue
        name = f"{type(opt).__name__}.param_groups"
        groups = d["param_groups"]
        out.append((d, "param_groups", groups, f"{name} is the same list"))
        items = _Items(groups)
        out.append((items, len(groups), _MISSING, f"len({name}) == {len(groups)}"))
        for i, g in enumerate(groups):
            out.append((items, i, g, f"{name}[{i}] is the same dict"))
            ps = g.get("params") if type(g) is dict else None
            if type(ps) is list:
                out.append((g, "params", ps, f"{name}[{i}]['params'] is the same list"))
                pitems = _Items(ps)
                out.append((pitems, len(ps), _MISSING,
                            f"len({name}[{i}]['params']) == {len(ps)}"))
                out += [(pitems, j, p, f"{name}[{i}]['params'][{j}] is the same tensor")
                        for j, p in enumerate(ps)]
    return tuple(out)


def checker(guards):
    """``check()``: None when every guard holds, else the words of the first that fails;
    one generated function (a dict lookup and an identity test per guard)."""
    glb = {"M": _MISSING, "G": guards}
    lines = ["def check():"]
    for i, (holder, key, v, words) in enumerate(guards):
        glb[f"H{i}"], glb[f"K{i}"], glb[f"V{i}"] = holder, key, v
        if key == "cell_contents":
            lines += ["    try:", f"        w = H{i}.cell_contents",
                      "    except ValueError:", "        w = M"]
        else:
            lines.append(f"    w = H{i}.get(K{i}, M)")
        if plain(v):
            lines.append(f"    if w is not V{i} and (type(w) is not type(V{i}) or w != V{i}):")
        else:  # (an object: the same one; an equal one may be mutated apart later)
            lines.append(f"    if w is not V{i}:")
        lines.append(f"        return G[{i}][3]")
    lines.append("    return None")
    exec(compile("\n".join(lines) + "\n", "<tg.compile guards>", "exec"), glb)
    return glb["check"]


def check(guards):
    """None when every guard holds, else the words of the first that fails."""
    for holder, key, v, words in guards:
        if key == "cell_contents":
            try:
                w = holder.cell_contents
            except ValueError:
                return words
        else:
            w = holder.get(key, _MISSING)
        if w is not v and (not plain(v) or type(w) is not type(v) or w != v):
            return words
    return None
