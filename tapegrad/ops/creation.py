"""Creating tensors: ``tensor``, factories (``zeros``, ``arange``, ``linspace``,
``logspace``, ``range``, ``eye``...), the seeded generator and random numbers, casts
and copies."""
import builtins as _builtins
import contextlib
import copy
import functools
import math
import threading
from collections.abc import Sequence as _Sequence

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import NoKernelError, op_error, shape_arg
from ..devices.cpu_kernels import halfwidth as _cpu_halfwidth
from ..dispatch import bind, notify
from ..ops_registry.opdef import OpDef
from ..tape import state as _state
from ..tensor import Tensor, wrap
from . import _jvp, _vmap
from ._decl import S, Sample, TensorSpec, composite, decl, rand as _rand, register
from .onnx_forms import _identity as _onnx_identity

__all__ = ["tensor", "as_tensor", "asarray", "from_numpy", "from_dlpack", "zeros", "ones", "empty",
           "full", "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace",
           "eye", "manual_seed", "seed", "initial_seed", "generator", "get_rng_state",
           "set_rng_state", "rand", "randn", "randint", "rand_like", "randn_like", "randperm",
           "to_device", "cast", "clone", "detach", "contiguous", "to", "range", "logspace",
           "tril_indices", "triu_indices"]


def _np_dtype(dtype):
    return None if dtype is None else _dt.as_dtype(dtype).np


def _place(array, device):
    """Move a NumPy array to ``device`` (no copy for the CPU)."""
    dev = _devices.device(device) if device is not None else _devices.CPU
    if dev.type == "cpu":
        return array
    cp = _devices.xp(dev)
    with cp.cuda.Device(dev.index):
        return cp.asarray(array)


def _finish(array, requires_grad):
    t = wrap(array)
    if _state._inference:
        t._inference = True
    if requires_grad:
        t.requires_grad_(True)
    return t


def _const(array, requires_grad):
    """``_finish`` for a factory whose values follow from Python values alone (shape,
    fill, range): an observer (tg.compile's capture) may take them as a constant."""
    if _state._observers and not requires_grad:
        notify("constant", array)
    return _finish(array, requires_grad)


def _constant(t):
    """``t``, a tensor made from Python values alone (a range, indices), as ``_const``
    marks one: an observer may take its values as a constant."""
    if _state._observers and not t.requires_grad:
        notify("constant", t._data)
    return t


def _infer_py_dtype(data):
    """Default dtype for nested Python data: bool < int < float (torch rules)."""
    kinds = set()

    def walk(d):
        if isinstance(d, (list, tuple)):
            for v in d:
                walk(v)
        elif isinstance(d, _Sequence) and not isinstance(d, (str, bytes)):
            for v in d:   # a nested deque or range, as PyTorch (NumPy reads them too)
                walk(v)
        elif isinstance(d, (Tensor, np.generic)):  # (its own dtype, as PyTorch's)
            dt = np.dtype(d._data.dtype if isinstance(d, Tensor) else d.dtype)
            if dt not in _dt._BY_NP:
                raise TypeError(f"tensor: could not infer dtype of {type(d).__name__} "
                                f"({dt})")
            typed.append(dt)
        elif isinstance(d, bool):
            kinds.add("b")
        elif isinstance(d, int):
            kinds.add("i")
        elif isinstance(d, float):
            kinds.add("f")
        elif isinstance(d, complex):
            raise TypeError("tensor: complex numbers are not supported")
        elif hasattr(type(d), "__tg_scalar__"):  # a number read during a tg.compile capture
            walk(d.__tg_scalar__())
        else:
            raise TypeError(f"tensor: could not infer dtype of {type(d).__name__}")
    typed = []
    walk(data)
    if typed:  # tensors and NumPy scalars with the Python numbers' dtypes, promoted
        py = {"f": _dt.get_default_dtype().np, "i": np.dtype(np.int64),
              "b": np.dtype(np.bool_)}
        return _dt.result_type(*typed, *[py[k] for k in "fib" if k in kinds])
    if "f" in kinds:
        return _dt.get_default_dtype().np
    if "i" in kinds:
        return np.dtype(np.int64)
    if "b" in kinds:
        return np.dtype(np.bool_)
    return _dt.get_default_dtype().np


def _to_array(data, dtype, copy):
    if isinstance(data, Tensor):
        a = data._data
        if dtype is not None and a.dtype != dtype:
            return _cpu_halfwidth.astype(a, dtype)
        return a.copy() if copy else a
    if isinstance(data, np.ndarray):
        a = data
        if dtype is not None and a.dtype != dtype:
            return _cpu_halfwidth.astype(a, dtype)
        if a.dtype not in _dt._BY_NP:
            raise TypeError(f"tensor: unsupported NumPy dtype {a.dtype}")
        return a.copy() if copy else a
    if isinstance(data, np.generic):
        a = np.asarray(data)
        return _cpu_halfwidth.astype(a, dtype) if dtype is not None else a
    if type(data).__module__.startswith("cupy"):
        if dtype is not None:
            return _cpu_halfwidth.astype(data, dtype)
        return data.copy() if copy else data
    if hasattr(data, "__dlpack__") and not isinstance(data, (list, tuple)):
        from ..devices import dlpack
        a = dlpack.import_array(data)
        if dtype is not None and a.dtype != dtype:
            return _cpu_halfwidth.astype(a, dtype)
        return a.copy() if copy else a
    if isinstance(data, _Sequence) and not isinstance(data, (list, tuple, str, bytes)):
        data = list(data)  # a deque, a range: PyTorch takes any sequence
    inferred = _infer_py_dtype(data) if dtype is None else dtype
    if isinstance(data, (list, tuple)) and any(isinstance(v, Tensor) for v in _flat(data)):
        data = _untensor(data)
    try:
        if inferred in _cpu_halfwidth._NAMES:  # Python floats are doubles: through float32
            return _cpu_halfwidth.astype(np.array(data, dtype=np.float32), inferred)
        return np.array(data, dtype=inferred)
    except (ValueError, TypeError) as e:
        raise ValueError(f"tensor: could not build a tensor from the data: {e}") from None


def _flat(data):
    for v in data:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _untensor(data):
    if isinstance(data, (list, tuple)):
        return [_untensor(v) for v in data]
    if isinstance(data, Tensor):
        return data._host().tolist() if data.ndim else data.item()
    return data


_PY_SCALARS = (bool, int, float, complex)


def _python_values(data, depth=0):
    """Whether ``data`` is Python numbers alone (a bool, int, float or complex, or
    nested lists and tuples of them; not a subclass: a number tg.compile's capture
    tracks, read from a tensor, is one), up to 64K of them."""
    if type(data) in _PY_SCALARS:
        return True
    if type(data) not in (list, tuple) or depth > 32 or len(data) > 1 << 16:
        return False
    return all(_python_values(d, depth + 1) for d in data)


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of ``data`` (scalars, nested lists, arrays, DLPack)."""
    arr = _to_array(data, _np_dtype(dtype), copy=True)
    if device is not None:
        arr = _place(arr, device) if isinstance(arr, np.ndarray) else _move(arr, device)
    if _state._observers and _python_values(data):  # (tg.tensor(0.0) inside a compiled
        return _const(arr, requires_grad)            # step: a constant of its program)
    return _finish(arr, requires_grad)


def as_tensor(data, dtype=None, device=None):
    """A tensor sharing memory with ``data`` when dtype and device allow."""
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    arr = _to_array(data, _np_dtype(dtype), copy=False)
    if device is not None:
        arr = _move(arr, device)
    return wrap(arr)


def asarray(data, dtype=None, device=None):
    """``data`` as a Tensor, sharing memory with an array or Tensor where it can, as
    ``torch.asarray``."""
    return as_tensor(data, dtype, device)


def from_numpy(a):
    """A tensor sharing memory with the NumPy array ``a``."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(a).__name__}")
    if a.dtype not in _dt._BY_NP:
        raise TypeError(f"from_numpy: unsupported dtype {a.dtype}")
    return wrap(a)


def from_dlpack(x):
    """Zero-copy import from any DLPack producer (NumPy, PyTorch, JAX, CuPy)."""
    from ..devices import dlpack
    if isinstance(x, Tensor):
        return x
    if not hasattr(x, "__dlpack__"):
        raise op_error("from_dlpack", f"expected a DLPack producer (an object with "
                                      f"__dlpack__: a NumPy array, a PyTorch, JAX or CuPy "
                                      f"tensor), got {'None' if x is None else type(x).__name__}",
                       TypeError)
    return wrap(dlpack.import_array(x))


def _move(arr, device):
    dev = _devices.device(device)
    cur = _devices.device_of(arr)
    if cur == dev:
        return arr
    if dev.type == "cpu":
        return arr.get()
    cp = _devices.xp(dev)
    with cp.cuda.Device(dev.index):
        return cp.asarray(arr)


# ---------------------------------------------------------------- factories
def _new_shape(name, size):
    """A factory's size (``*ints`` or one sequence) as a tuple of ints, none negative
    (PyTorch's RuntimeError; NumPy's ValueError named no op)."""
    shape = shape_arg(name, size, "size")
    if any(s < 0 for s in shape):
        raise op_error(name, f"trying to create a tensor with a negative dimension: {shape}",
                       RuntimeError)
    return shape


def _count(name, v, what):
    """A non-negative int argument (a length, a number of steps)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise op_error(name, f"{what} must be an int, got {v!r}", TypeError)
    if v < 0:
        raise op_error(name, f"{what} must be non-negative, got {v}", RuntimeError)
    return int(v)


def _fill_value(name, v):
    if v is None or isinstance(v, (str, bytes)):
        raise op_error(name, f"fill_value must be a number, got {v!r}", TypeError)
    return v


def _size_keyword(name, size, kwargs):
    """``size=`` given by keyword (``torch.empty(size=(2, 3))``): the shape as a
    positional one, or PyTorch's TypeError for anything else."""
    if set(kwargs) != {"size"}:
        bad = sorted(set(kwargs) - {"size"})[0]
        raise TypeError(f"{name}() got an unexpected keyword argument '{bad}'")
    if size:
        raise TypeError(f"{name}() got multiple values for argument 'size'")
    return (kwargs["size"],)


def _factory(fill, name):
    def f(*size, dtype=None, device=None, requires_grad=False, out=None, **kwargs):
        if kwargs:
            size = _size_keyword(name, size, kwargs)
        shape = _new_shape(name, size)
        if out is not None:  # PyTorch's out=: its dtype and device unless given
            dtype = out.dtype if dtype is None else dtype
            device = out.device if device is None else device
        dt = _np_dtype(dtype) or _dt.get_default_dtype().np
        xp = _devices.xp(_devices.device(device)) if device is not None else np
        _devices.check_alloc(name, shape, dt)
        res = (_finish if name == "empty" else _const)(fill(xp, shape, dt), requires_grad)
        if out is None:
            return res
        from .compat import write_out
        return write_out(name, res, out)
    f.__name__ = name
    f.__doc__ = f"A tensor of the given shape filled by {name} (``*ints`` or a tuple)."
    return f


zeros = _factory(lambda xp, s, d: xp.zeros(s, d), "zeros")


ones = _factory(lambda xp, s, d: xp.ones(s, d), "ones")


empty = _factory(lambda xp, s, d: xp.empty(s, d), "empty")


def _takes_out(fn):
    """Factory ``fn`` with PyTorch's ``out=``: made in ``out``'s dtype and on its device
    unless ``dtype``/``device`` are given, then written into ``out`` (resized where its
    shape differs; ``compat.write_out``) and ``out`` returned."""
    name = fn.__name__

    @functools.wraps(fn)
    def f(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        if not isinstance(out, Tensor):
            raise TypeError(f"{name}(): argument 'out' must be Tensor, not "
                            f"{type(out).__name__}")
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = out.dtype
        if kwargs.get("device") is None:
            kwargs["device"] = out.device
        from .compat import write_out
        return write_out(name, fn(*args, **kwargs), out)
    return f


@_takes_out
def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """A tensor of shape ``size`` filled with ``fill_value``, as ``torch.full``."""
    shape = _new_shape("full", (size,) if not isinstance(size, (list, tuple)) else (tuple(size),))
    _fill_value("full", fill_value)
    if dtype is None:
        dtype = _infer_py_dtype(fill_value)
    xp = _devices.xp(_devices.device(device)) if device is not None else np
    dtype = _np_dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    _devices.check_alloc("full", shape, dtype)
    return _const(xp.full(shape, fill_value, dtype=dtype), requires_grad)


def _like(name, fill):
    def f(input, *args, dtype=None, device=None, requires_grad=False):
        """A tensor of ``input``'s shape, dtype and device (unless given) filled as the name
        says: ``zeros_like``, ``ones_like``, ``empty_like`` (unset), ``full_like(input,
        fill_value)``, as PyTorch's."""
        data = input._data if isinstance(input, Tensor) else input
        dt = _np_dtype(dtype) or data.dtype
        xp = _devices.xp_of(data) if device is None else _devices.xp(_devices.device(device))
        _devices.check_alloc(name, data.shape, dt)
        arr = fill(xp, data.shape, dt, *args)
        if not isinstance(input, Tensor):
            return arr
        # (its values follow from the input's shape and dtype and Python values: a
        # constant of a tg.compile program, as zeros' is)
        return (_finish if name == "empty_like" else _const)(arr, requires_grad)
    f.__name__ = name
    return f


zeros_like = _like("zeros_like", lambda xp, s, d: xp.zeros(s, d))


ones_like = _like("ones_like", lambda xp, s, d: xp.ones(s, d))


empty_like = _like("empty_like", lambda xp, s, d: xp.empty(s, d))


full_like = _like("full_like", lambda xp, s, d, v: xp.full(s, _fill_value("full_like", v),
                                                           dtype=d))


@_takes_out
def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """The values from ``start`` up to, not including, ``end`` in steps of ``step``, as
    ``torch.arange``."""
    if end is None:
        start, end = 0, start
    vals = (start, end, step)
    if dtype is None:
        dtype = _dt.get_default_dtype() if any(isinstance(v, float) for v in vals) else _dt.int64
    _arange_check(start, end, step)
    xp = _devices.xp(_devices.device(device)) if device is not None else np
    return _const(xp.arange(start, end, step, dtype=_np_dtype(dtype)), requires_grad)


def _arange_check(start, end, step):
    """PyTorch's rules: finite bounds, a non-zero step whose sign leads from start to
    end (NumPy would give an empty range)."""
    for v in (start, end, step):
        if isinstance(v, (str, bytes)) or v is None:
            raise op_error("arange", f"start, end and step must be numbers, got {v!r}",
                           TypeError)
    if not all(np.isfinite(v) for v in (start, end)):
        raise op_error("arange", f"unsupported range: {start} -> {end}", RuntimeError)
    if step == 0:
        raise op_error("arange", "step must be nonzero", RuntimeError)
    if (end > start and step < 0) or (end < start and step > 0):
        raise op_error("arange", f"upper bound and lower bound inconsistent with step sign "
                                 f"(start {start}, end {end}, step {step})", RuntimeError)


@_takes_out
def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    """``steps`` values evenly spaced from ``start`` to ``end`` inclusive, as
    ``torch.linspace``."""
    steps = _count("linspace", steps, "number of steps")
    xp = _devices.xp(_devices.device(device)) if device is not None else np
    dt = _np_dtype(dtype) or _dt.get_default_dtype().np
    return _const(xp.linspace(start, end, steps, dtype=dt), requires_grad)


@_takes_out
def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    """An ``n`` x ``m`` matrix with ones on the diagonal, as ``torch.eye``."""
    n = _count("eye", n, "n")
    m = None if m is None else _count("eye", m, "m")
    xp = _devices.xp(_devices.device(device)) if device is not None else np
    dt = _np_dtype(dtype) or _dt.get_default_dtype().np
    return _const(xp.eye(n, m, dtype=dt), requires_grad)


# ---------------------------------------------------------------- random
_gen = {"np": np.random.default_rng()}


_drawing_from = threading.local()   # a Generator given to a random op: its draws use it


def _check_seed(name, seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise op_error(name, f"seed must be an int, got {type(seed).__name__}", TypeError)
    seed = int(seed)
    if not -2 ** 63 <= seed < 2 ** 64:
        raise op_error(name, f"seed {seed} does not fit in 64 bits", ValueError)
    return seed % 2 ** 64


class Generator:
    """An independent stream of random numbers, as ``torch.Generator``: pass it as
    ``generator=`` to any random function (``rand``, ``randn``, ``randint``,
    ``randperm``, ``bernoulli``, ``multinomial``, ``poisson``, ``normal``, the in-place
    ``uniform_``/``normal_``/... methods, ``tg.nn.init``, data loading) to draw from it
    instead of the global generator. ``manual_seed(s)`` (returns the generator),
    ``seed()``, ``initial_seed()``, ``get_state()`` (a uint8 tensor) and
    ``set_state(state)``. Its draws are NumPy's ``Generator``'s (PCG64)."""

    def __init__(self, device="cpu"):
        self.device = _devices.device(device)
        self._seed = _fresh_seed()
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed):
        self._seed = _check_seed("Generator.manual_seed", seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self):
        s = _fresh_seed()
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        """The generator's state: a uint8 tensor, as ``torch.Generator.get_state``."""
        return _state_tensor(self._rng.bit_generator.state)

    def set_state(self, new_state):
        """Restore a state from ``get_state`` (a uint8 tensor); returns the generator."""
        self._rng.bit_generator.state = _state_dict("Generator.set_state", new_state)
        return self

    def __getattr__(self, name):
        # NumPy's draws (random, standard_normal, integers...), for the kernels
        if name.startswith("__") or "_rng" not in self.__dict__:
            raise AttributeError(f"'Generator' object has no attribute {name!r}")
        return getattr(self.__dict__["_rng"], name)

    def __repr__(self):
        return f"<tapegrad.Generator object (device='{self.device}')>"


class _DefaultGenerator(Generator):
    """``tg.default_generator``: the global generator as a ``Generator`` (what
    ``tg.manual_seed`` returns, as ``torch.default_generator``); seeding it seeds the
    global stream, and its state is that stream's."""

    def __init__(self):
        self.device = _devices.device("cpu")

    @property
    def _rng(self):
        return _gen["np"]

    @_rng.setter
    def _rng(self, value):
        _gen["np"] = value

    def manual_seed(self, seed):
        manual_seed(seed)
        return self

    def seed(self):
        return seed()

    def initial_seed(self):
        return initial_seed()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(f"'Generator' object has no attribute {name!r}")
        return getattr(_gen["np"], name)

    def __repr__(self):
        return "<tapegrad.default_generator (device='cpu')>"


def _fresh_seed():
    return int(np.random.SeedSequence().entropy % 2 ** 63)


def _rng(gen):
    """The NumPy generator to draw from: ``gen``'s (a tg.Generator or a NumPy
    Generator), or else the one a random op was given, or the global one."""
    if gen is None:
        gen = getattr(_drawing_from, "g", None)
        return _gen["np"] if gen is None else gen
    if isinstance(gen, Generator):
        return gen._rng
    if isinstance(gen, np.random.Generator):
        return gen
    raise TypeError(f"generator must be a tg.Generator, got {type(gen).__name__}")


def generator_given():
    """Whether a random op on this thread draws from a generator it was given
    (``drawing_from``) instead of the global one."""
    return getattr(_drawing_from, "g", None) is not None


@contextlib.contextmanager
def drawing_from(gen):
    """Within the block, random kernels draw from ``gen`` (None: no change)."""
    if gen is None:
        yield
        return
    prev = getattr(_drawing_from, "g", None)
    _drawing_from.g = _rng(gen)
    try:
        yield
    finally:
        _drawing_from.g = prev


def manual_seed(seed):
    """Seed tapegrad's random factories (and CuPy's when present). As PyTorch, any
    int in [-2**63, 2**64) is a seed (a negative one wraps to 64 bits)."""
    seed = _check_seed("manual_seed", seed)
    _gen["np"] = np.random.default_rng(seed)
    _gen["seed"] = seed
    from ..devices import cuda
    if cuda._state.get("cupy") is not None:
        cuda._state["cupy"].random.seed(int(seed))
    return default_generator


def seed():
    """Seed the generator with a non-deterministic number and return it (PyTorch's
    ``torch.seed()``)."""
    s = _fresh_seed()
    manual_seed(s)
    return s


def initial_seed():
    """The seed the generator was last seeded with (``manual_seed``/``seed``; a
    random one chosen at import otherwise)."""
    return _gen.get("seed", _INITIAL)


_INITIAL = int(np.random.SeedSequence().entropy % 2 ** 63)
default_generator = _DefaultGenerator()


def generator():
    if _state.vmap_levels and _vmap_randomness("a random draw") == "different":
        raise RuntimeError("vmap: randomness='different' is supported for rand/randn/"
                           "rand_like/randn_like; this function draws its own random "
                           "numbers (one draw for the batch): use randomness='same'")
    return _rng(None)


def _vmap_randomness(name):
    """The running vmap's randomness, refusing in "error" mode (PyTorch's message)."""
    mode = _state.vmap_randomness
    if mode == "error":
        raise RuntimeError(f"vmap: called random operation ({name}) while in randomness "
                           f"error mode. Please either use the 'same' or 'different' "
                           f"randomness flags on vmap or perform the randomness operation "
                           f"out of vmap")
    return mode


# A PCG64 state as bytes: state and increment (128 bits each, as two little-endian
# 64-bit words, low word first), then has_uint32 and uinteger (little-endian 32 bits)
_STATE_BYTES = 40
_LOW64 = 2 ** 64 - 1


def _state_tensor(state):
    """NumPy's PCG64 ``bit_generator.state`` as a uint8 tensor of ``_STATE_BYTES``."""
    st, inc = state["state"]["state"], state["state"]["inc"]
    words = np.array([st & _LOW64, st >> 64, inc & _LOW64, inc >> 64], dtype="<u8")
    tail = np.array([state["has_uint32"], state["uinteger"]], dtype="<u4")
    return wrap(np.concatenate([words.view(np.uint8), tail.view(np.uint8)]))


def _state_dict(name, new_state):
    """The PCG64 state dict a ``_state_tensor`` encodes; PyTorch's errors otherwise
    (TypeError for what is not a uint8 tensor, RuntimeError for a wrong size)."""
    if not isinstance(new_state, Tensor):
        raise op_error(name, f"expected a uint8 tensor (a ByteTensor from get_state()/"
                             f"get_rng_state()), got {type(new_state).__name__}", TypeError)
    if new_state.dtype != _dt.uint8:
        raise op_error(name, f"RNG state must be a uint8 tensor (ByteTensor), got "
                             f"dtype {new_state.dtype}", TypeError)
    raw = np.ascontiguousarray(new_state.detach().cpu().numpy()).reshape(-1)
    if raw.size != _STATE_BYTES:
        raise op_error(name, f"expected a state of {_STATE_BYTES} bytes (from get_state()/"
                             f"get_rng_state()), got {raw.size}", RuntimeError)
    w = raw[:32].view("<u8").tolist()
    has_uint32, uinteger = raw[32:].view("<u4").tolist()
    return {"bit_generator": "PCG64",
            "state": {"state": w[0] | w[1] << 64, "inc": w[2] | w[3] << 64},
            "has_uint32": has_uint32, "uinteger": uinteger}


def raw_rng_state():
    """The global generator's state as NumPy's dict (for the library's own save and
    restore around captures and recomputations: no tensor, compared with ``==``)."""
    return _gen["np"].bit_generator.state


def set_raw_rng_state(state):
    """Restore a state from ``raw_rng_state``."""
    _gen["np"].bit_generator.state = state


def get_rng_state():
    """The state of tapegrad's random generator, a uint8 tensor (as
    ``torch.get_rng_state``): pass it to ``set_rng_state`` to draw the same numbers
    again."""
    return _state_tensor(_gen["np"].bit_generator.state)


def set_rng_state(new_state):
    """Restore a state from ``get_rng_state`` (a uint8 tensor; TypeError otherwise, as
    PyTorch)."""
    _gen["np"].bit_generator.state = _state_dict("set_rng_state", new_state)


# A factory's draw as an op of kind "random", not registered: bound only while an
# observer that hears ``random_step`` watches (tg.compile's capture), which records it
# as a step that draws from the global generator on every replay (never folded,
# hoisted or recomputed), as dropout's mask. ``dist``: "uniform" (rand), "normal"
# (randn), "integers" in [low, high) (randint), "permutation" of ``shape[0]``
# (randperm), "keep" (uniform >= low: a dropout's keep mask; "scaled_keep" divided by
# 1 - low), "between" (uniform in [low, high): rrelu's slopes); the draw is made as
# the eager function makes it, then cast and placed.
_DRAWS = {"uniform": lambda g, s, lo, hi: g.random(s, dtype=np.float64),
          "normal": lambda g, s, lo, hi: g.standard_normal(s),
          "integers": lambda g, s, lo, hi: g.integers(lo, hi, size=s),
          "permutation": lambda g, s, lo, hi: g.permutation(s[0]),
          "keep": lambda g, s, lo, hi: g.random(s) >= lo,
          "scaled_keep": lambda g, s, lo, hi: (g.random(s) >= lo) / (1.0 - lo),
          "between": lambda g, s, lo, hi: lo + (hi - lo) * g.random(s)}


def _draw_kernel(*, dist, shape, dtype, device=None, low=0, high=0):
    arr = _DRAWS[dist](_gen["np"], shape, low, high).astype(dtype, copy=False)
    return _place(arr, device)


RANDOM_DRAW = OpDef(name="random_draw", kernel=_draw_kernel,
                    infer=lambda *, dist, shape, dtype, device=None, low=0, high=0:
                    TensorSpec(tuple(shape), np.dtype(dtype)),
                    args=(), kind="random", differentiable=False, draws=True,
                    onnx="a draw from tapegrad's random generator (rand, randn, randint, "
                         "randperm, a dropout's mask): no ONNX operator reproduces it")


def draw_step(gen=None, requires_grad=False, **attrs):
    """The tensor a ``random_draw`` step draws, where a capture watches (and the draw
    is the global generator's, outside vmap, of a tensor that needs no grad); else None
    (the caller draws itself)."""
    if not _state._observers or gen is not None or requires_grad or _state.vmap_levels \
            or generator_given() or not notify("random_step"):
        return None
    if attrs.get("device") is not None:
        attrs["device"] = str(_devices.device(attrs["device"]))
    return _finish(bind(RANDOM_DRAW, **attrs), False)


def _random(name, draw):
    def f(*size, dtype=None, device=None, requires_grad=False, generator=None, **kwargs):
        """A tensor of shape ``size`` drawn from the seeded generator: ``rand`` uniform in
        [0, 1), ``randn`` standard normal, as PyTorch's."""
        if kwargs:
            size = _size_keyword(name, size, kwargs)
        shape = _new_shape(name, size)
        dt = _np_dtype(dtype) or _dt.get_default_dtype().np
        if not _dt.is_float(dt):
            raise TypeError(f"{name}: expected a floating dtype, got {_dt.from_np(dt)}")
        _devices.check_alloc(name, shape, np.float64)  # drawn in float64
        g = _rng(generator)
        if _state.vmap_levels:  # inside vmap: its randomness flag decides
            mode = _vmap_randomness(name)
            if mode == "different":
                return _state.vmap_random(lambda n: _finish(_place(
                    draw(g, (n,) + shape).astype(dt, copy=False), device), requires_grad))
        arr = draw_step(generator, requires_grad, dist=_DIST[name], shape=shape,
                         dtype=np.dtype(dt), device=device)
        if arr is not None:
            return arr
        arr = draw(g, shape).astype(dt, copy=False)
        return _finish(_place(arr, device), requires_grad)
    f.__name__ = name
    return f


_DIST = {"rand": "uniform", "randn": "normal"}
rand = _takes_out(_random("rand", lambda g, s: g.random(s, dtype=np.float64)))


randn = _takes_out(_random("randn", lambda g, s: g.standard_normal(s)))


@_takes_out
def randint(low, high=None, size=None, *, dtype=None, device=None, generator=None):
    """Random integers in ``[low, high)``: ``randint(low, high, size)`` or, as PyTorch,
    ``randint(high, size)``."""
    if size is None and isinstance(high, (list, tuple)):  # randint(high, size)
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise op_error("randint", "size is required, e.g. tg.randint(0, 10, (3,))", TypeError)
    shape = _new_shape("randint", (size,) if not isinstance(size, (list, tuple)) else
                       (tuple(size),))
    for v in (low, high):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise op_error("randint", f"low and high must be ints, got {v!r}", TypeError)
    if low >= high:
        raise op_error("randint", f"expects low < high, got low={low} and high={high}",
                       RuntimeError)
    _devices.check_alloc("randint", shape, np.int64)
    dt = _np_dtype(dtype) or np.dtype(np.int64)
    arr = draw_step(generator, False, dist="integers", shape=shape, dtype=dt,
                     device=device, low=int(low), high=int(high))
    if arr is not None:
        return arr
    g = _rng(generator)
    arr = g.integers(low, high, size=shape)
    return wrap(_place(arr.astype(dt), device))


def rand_like(input, *, generator=None, dtype=None, requires_grad=False):
    """Uniform samples in [0, 1) of ``input``'s shape, as ``torch.rand_like``."""
    return rand(tuple(input.shape), dtype=dtype or input.dtype, device=input.device,
                requires_grad=requires_grad, generator=generator)


def randn_like(input, *, generator=None, dtype=None, requires_grad=False):
    """Standard normal samples of ``input``'s shape, as ``torch.randn_like``."""
    return randn(tuple(input.shape), dtype=dtype or input.dtype, device=input.device,
                 requires_grad=requires_grad, generator=generator)


def randperm(n, *, dtype=None, device=None, generator=None):
    """A random permutation of ``0 .. n - 1`` (int64 by default), as ``torch.randperm``."""
    n = _count("randperm", n, "n")
    dt = _np_dtype(dtype) or np.dtype(np.int64)
    arr = draw_step(generator, False, dist="permutation", shape=(n,), dtype=dt,
                     device=device)
    if arr is not None:
        return arr
    g = _rng(generator)
    return wrap(_place(g.permutation(n).astype(dt), device))


# ---------------------------------------------------------------- casts, copies, devices
def _cast_infer(x, dtype):
    return TensorSpec(tuple(x.shape), np.dtype(dtype))


def _cast_vjp(ctx, g):
    # the walker casts the gradient back to the input's dtype; nothing else to do
    return (g,)


def _cast_torch(torch, x, dtype):
    return x.to(torch.from_numpy(np.empty(0, np.dtype(dtype))).dtype)


def _cast_kernel(x, dtype, out=None):
    if np.dtype(dtype) not in _dt._BY_NP:
        raise TypeError(f"cast: unsupported dtype {dtype}")
    if out is None:
        # (NumPy converts float16 one element at a time, ml_dtypes on one thread)
        return _cpu_halfwidth.astype(x, dtype)
    if out.dtype in _cpu_halfwidth._NAMES and x.dtype != out.dtype:
        x = _cpu_halfwidth.astype(x, out.dtype)  # (through float32, as PyTorch)
    out[...] = x  # (a caller's buffer of the result's dtype: NumPy casts on assignment)
    return out


# float -> float32 and -> int32 are forward-only: rounding defeats finite differences
# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_cast(b, st):
    b.cast(b.input(st, 0), st.attrs["dtype"], [b.output(st)])


CAST = register(name="cast", onnx=_onnx_cast, vmap=_vmap.leading, jvp=_jvp.linear,
                kernel=_cast_kernel, infer=_cast_infer,
                vjp=_cast_vjp, grad_fn_name="ToCopyBackward0",  # (PyTorch's .to() is _to_copy)
                samples=lambda dtype=np.float64: [Sample((_rand((3, 4), dtype),),
                                                         {"dtype": np.dtype(np.float32)}, False),
                                                  Sample((_rand((3, 4), dtype),),
                                                         {"dtype": np.dtype(np.float64)}),
                                                  Sample((_rand((3, 4), dtype),),
                                                         {"dtype": np.dtype(np.int32)}, False)],
                error_samples=lambda: [((_rand((3,)),), {"dtype": np.dtype("complex64")},
                                        TypeError)],
                torch=_cast_torch)


def cast(x, dtype):
    """``x`` as ``dtype`` (differentiable between float dtypes)."""
    d = _dt.as_dtype(dtype).np
    data = getattr(x, "_data", x)
    if data.dtype == d:
        return x
    return bind(CAST, x, dtype=d)


def _cast_infer_checked(x, dtype):
    if np.dtype(dtype) not in _dt._BY_NP:
        raise TypeError(f"cast: unsupported dtype {np.dtype(dtype)}")
    return _cast_infer(x, dtype)


CAST.infer = _cast_infer_checked


def _clone_kernel(x, contiguous=False, out=None):
    # PyTorch's clone keeps the input's layout (preserve_format: a clone of a transposed
    # view is transposed, so a reshape of it copies), NumPy's order "K";
    # ``contiguous``: row-major (what ``contiguous()`` makes)
    if out is None:
        return x.copy(order="C" if contiguous else "K")
    out[...] = x
    return out


CLONE = register(name="clone", onnx=_onnx_identity, vmap=_vmap.leading, jvp=_jvp.linear,
                 kernel=_clone_kernel,
                 infer=lambda x, contiguous=False: TensorSpec(tuple(x.shape), x.dtype),
                 vjp=lambda ctx, g: (g,),
                 samples=lambda dtype=np.float64: [
                     Sample((_rand((3, 4), dtype),), {}),
                     Sample((_rand((4, 3), dtype).T,), {})],
                 error_samples=lambda: [(("x",), {}, TypeError)],
                 torch=lambda torch, x, contiguous=False:
                     x.contiguous().clone() if contiguous else x.clone())


def clone(input, *, memory_format=None):
    """A copy of ``input`` that gradients flow through, in its layout (PyTorch's
    ``preserve_format``: the clone of a transposed view is transposed), as
    ``torch.clone``."""
    return bind(CLONE, input)


def _check_device(device):
    try:
        return _devices.device(device)
    except ValueError as e:
        raise op_error("to_device", str(e)) from None


def _to_device_kernel(x, device, out=None):
    if out is None:
        return _move(x, device)
    # out is on the target device: one copy into it (a host out takes a CUDA
    # array's host copy; a CUDA out, CuPy's transfer)
    if isinstance(out, np.ndarray):
        out[...] = x if isinstance(x, np.ndarray) else x.get()
    else:
        out[...] = _move(x, device)
    return out


TO_DEVICE = register(name="to_device", onnx=_onnx_identity, vmap=_vmap.leading, jvp=_jvp.linear,
                     kernel=_to_device_kernel,
                     infer=lambda x, device: (_check_device(device),
                                              TensorSpec(tuple(x.shape), x.dtype))[1],
                     vjp=lambda ctx, g: (ctx.m.to_device(g, _devices.device_of(
                         ctx.inputs[0]._data if hasattr(ctx.inputs[0],
                                                        "_data") else ctx.inputs[0])),),
                     saves=("x",),
                     samples=lambda dtype=np.float64: [Sample((_rand((3,), dtype),),
                                                              {"device": "cpu"})],
                     error_samples=lambda: [((_rand((3,)),), {"device": "tpu"}, ValueError)],
                     torch=lambda torch, x, device: x.to(str(device)))


def to_device(x, device):
    dev = _devices.device(device)
    data = getattr(x, "_data", x)
    if _devices.device_of(data) == dev:
        return x
    return bind(TO_DEVICE, x, device=dev)


def detach(input):
    """A view of ``input``'s data cut from the autograd graph, as ``torch.detach``."""
    return input.detach()


def contiguous(input):
    """``input`` itself if row-major contiguous, else a contiguous copy, as
    ``torch.contiguous``."""
    if input._data.flags.c_contiguous:
        return input
    return bind(CLONE, input, contiguous=True)


def _to_args(args, dtype, device):
    """(dtype, device) from ``to``'s positional arguments."""
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, (_devices.Device, str)) and not (isinstance(a, str)
                                                            and a in _dt._BY_NAME):
            device = a
        elif isinstance(a, int) and not isinstance(a, bool):
            device = a
        elif a is not None:
            dtype = a
    return dtype, device


def to(input, *args, dtype=None, device=None, copy=False, non_blocking=False):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other_tensor)``."""
    dtype, device = _to_args(args, dtype, device)
    out = input
    if device is not None:
        out = to_device(out, device)
    if dtype is not None:
        out = cast(out, dtype)
    if copy and out is input:
        out = clone(input)
    return out


# ---------------------------------------------------------------- in the registry
# The functions above are composites in the registry (``_decl.composite``): the
# factories take no tensor input (their sizes and data are attributes), ``*_like``
# and the copies take ``input``. ``empty``'s values are whatever memory held (the
# registry test compares its shape and dtype only); the random ones are checked
# against the draw tapegrad's generator makes next (a copy of it: ``_next_draw``).
def _tdt(torch, d):
    """PyTorch's dtype of the same name."""
    return getattr(torch, np.dtype(d).name)


def _torch_kw(torch, kw):
    return {k: _tdt(torch, v) if k == "dtype" and v is not None else v for k, v in kw.items()}


def _dt_or(dtype, default):
    return _np_dtype(dtype) or np.dtype(default)


F32 = np.dtype(np.float32)


I32 = np.dtype(np.int32)


def _sized_infer(name, floating=False):
    def infer(*size, dtype=None, device=None, requires_grad=False, out=None, generator=None):
        dt = _dt_or(dtype, _dt.get_default_dtype().np)
        if floating and not _dt.is_float(dt):
            raise TypeError(f"{name}: expected a floating dtype, got {_dt.from_np(dt)}")
        return TensorSpec(_new_shape(name, size), dt)
    return infer


for _fn in (zeros, ones, empty):
    composite(_fn, infer=_sized_infer(_fn.__name__), args=(), differentiable=False,
              samples=lambda dtype=np.float64: [Sample((2, 3), {}), Sample((4,), {"dtype": I32}),
                                                Sample((0, 2), {"dtype": F32})],
              error_samples=(lambda n: lambda: [((2, -1), {}, RuntimeError),
                                                ((2.5,), {}, TypeError)])(_fn.__name__),
              torch=(lambda n: lambda torch, *size, **kw: getattr(torch, n)(
                  *size, **_torch_kw(torch, kw)))(_fn.__name__))


def _full_infer(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    shape = _new_shape("full", (size,) if not isinstance(size, (list, tuple)) else (tuple(size),))
    _fill_value("full", fill_value)
    return TensorSpec(shape, _dt_or(dtype, _infer_py_dtype(fill_value)))


composite(full, infer=_full_infer, args=(), differentiable=False,
          samples=lambda dtype=np.float64: [Sample((), {"size": (2, 3), "fill_value": 1.5}),
                                            Sample((), {"size": (3,), "fill_value": 7}),
                                            Sample((), {"size": (2,), "fill_value": True}),
                                            Sample((), {"size": (2, 2), "fill_value": 2,
                                                        "dtype": F32})],
          error_samples=lambda: [((), {"size": (2,), "fill_value": "a"}, TypeError),
                                 ((), {"size": (-2,), "fill_value": 1.0}, RuntimeError)],
          torch=lambda torch, **kw: torch.full(**_torch_kw(torch, kw)))


def _like_infer(name):
    def infer(x, *args, dtype=None, device=None, requires_grad=False):
        if name == "full_like":
            if len(args) != 1:
                raise op_error(name, f"takes one fill_value, got {len(args)}", TypeError)
            _fill_value(name, args[0])
        return TensorSpec(tuple(x.shape), _dt_or(dtype, x.dtype))
    return infer


def _like_samples(*extra):
    def samples(dtype=np.float64):
        return [Sample((_rand((2, 3), dtype),) + extra, {}),
                Sample((_rand((3,), dtype),) + extra, {"dtype": I32}),
                Sample((np.arange(4),) + extra, {"dtype": F32})]
    return samples


for _fn, _extra in ((zeros_like, ()), (ones_like, ()), (empty_like, ()), (full_like, (2.5,))):
    composite(_fn, infer=_like_infer(_fn.__name__), differentiable=False,
              samples=_like_samples(*_extra),
              error_samples=(lambda e: lambda: [(("a",) + e, {}, TypeError)])(_extra),
              torch=(lambda n: lambda torch, x, *a, **kw: getattr(torch, n)(
                  x, *a, **_torch_kw(torch, kw)))(_fn.__name__))


def _arange_infer(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    _arange_check(start, end, step)
    floats = any(isinstance(v, float) for v in (start, end, step))
    dt = _dt_or(dtype, _dt.get_default_dtype().np if floats else np.int64)
    return TensorSpec((max(int(np.ceil((end - start) / step)), 0),), dt)


composite(arange, infer=_arange_infer, args=(), differentiable=False,
          samples=lambda dtype=np.float64: [Sample((5,), {}), Sample((2, 11, 3), {}),
                                            Sample((1.0, -1.0, -0.25), {}),
                                            Sample((0, 4), {"dtype": F32})],
          error_samples=lambda: [((0, 5, 0), {}, RuntimeError), ((0, 5, -1), {}, RuntimeError)],
          torch=lambda torch, *a, **kw: torch.arange(*a, **_torch_kw(torch, kw)))


def _linspace_infer(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    return TensorSpec((_count("linspace", steps, "number of steps"),),
                      _dt_or(dtype, _dt.get_default_dtype().np))


composite(linspace, infer=_linspace_infer, args=(), differentiable=False,
          samples=lambda dtype=np.float64: [Sample((-1.0, 2.0, 7), {}), Sample((0, 1, 1), {}),
                                            Sample((3.0, -1.0, 5), {"dtype": F32})],
          error_samples=lambda: [((0.0, 1.0, -1), {}, RuntimeError)],
          torch=lambda torch, *a, **kw: torch.linspace(*a, **_torch_kw(torch, kw)))


def _eye_infer(n, m=None, *, dtype=None, device=None, requires_grad=False):
    n = _count("eye", n, "n")
    m = n if m is None else _count("eye", m, "m")
    return TensorSpec((n, m), _dt_or(dtype, _dt.get_default_dtype().np))


composite(eye, infer=_eye_infer, args=(), differentiable=False,
          samples=lambda dtype=np.float64: [Sample((3,), {}), Sample((2, 4), {"dtype": I32})],
          error_samples=lambda: [((-2,), {}, RuntimeError), ((2.5,), {}, TypeError)],
          torch=lambda torch, *a, **kw: torch.eye(*a, **_torch_kw(torch, kw)))


def _tensor_infer(data, dtype=None, device=None, requires_grad=False):
    if isinstance(data, np.ndarray) or hasattr(data, "__dlpack__"):
        arr = np.asarray(data) if isinstance(data, np.ndarray) else None
        shape = tuple(data.shape)
        dt = arr.dtype if arr is not None else np.dtype(getattr(data, "dtype", "float64"))
    else:
        shape = np.shape(data)
        dt = _infer_py_dtype(data)
    return TensorSpec(tuple(shape), _dt_or(dtype, dt))


def _data_samples(dtype=np.float64):
    return [Sample((), {"data": _rand((2, 3))}),
            Sample((), {"data": [[1, 2], [3, 4]]}),
            Sample((), {"data": [1.5, True], "dtype": F32}),
            Sample((), {"data": 3})]


for _fn in (tensor, as_tensor, asarray):
    composite(_fn, infer=_tensor_infer, args=(), differentiable=False, samples=_data_samples,
              error_samples=lambda: [((), {"data": [[1, 2], [3]]}, ValueError)],
              torch=(lambda n: lambda torch, data, **kw: getattr(torch, n)(
                  data, **_torch_kw(torch, kw)))(_fn.__name__))


def _from_numpy_infer(a):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(a).__name__}")
    if a.dtype not in _dt._BY_NP:
        raise TypeError(f"from_numpy: unsupported dtype {a.dtype}")
    return TensorSpec(tuple(a.shape), a.dtype)


def _from_dlpack_infer(x):
    if not hasattr(x, "__dlpack__"):
        raise op_error("from_dlpack", f"expected a DLPack producer, got {type(x).__name__}",
                       TypeError)
    return TensorSpec(tuple(x.shape), np.dtype(x.dtype))


def _array_samples(key):
    def samples(dtype=np.float64):
        return [Sample((), {key: _rand((2, 3))}), Sample((), {key: np.arange(5, dtype=np.int32)})]
    return samples


composite(from_numpy, infer=_from_numpy_infer, args=(), differentiable=False,
          samples=_array_samples("a"),
          error_samples=lambda: [((), {"a": [1.0, 2.0]}, TypeError)],
          torch=lambda torch, a: torch.from_numpy(a))


composite(from_dlpack, infer=_from_dlpack_infer, args=(), differentiable=False,
          samples=_array_samples("x"),
          error_samples=lambda: [((), {"x": [1.0, 2.0]}, TypeError)],
          torch=lambda torch, x: torch.from_dlpack(x))


def _draw_into(out, x, fill, block=8192):
    """Random draws written into ``out`` block by block: ``fill(x_block, out_block)``
    over flat blocks of C-contiguous host ``out`` and ``x`` (a draw of a block's size
    at a time: the generator's stream is the one a single draw of the whole makes, as
    the draws are element by element in order). False where it does not apply (other
    layouts or devices, out overlapping x): the caller draws whole and copies."""
    if not (type(out) is np.ndarray and type(x) is np.ndarray and out.flags.c_contiguous
            and x.flags.c_contiguous and x.shape == out.shape
            and not np.may_share_memory(out, x)):
        return False
    fo, fx = out.reshape(-1), x.reshape(-1)
    for a in _builtins.range(0, fo.size, block):
        fill(fx[a:a + block], fo[a:a + block])
    return True


def _draw_rate_into(out, x, method, whole):
    """``out`` filled with ``generator().<method>(x)`` drawn in float64 a block at a time
    (poisson's rates, _standard_gamma's concentrations); a negative or NaN parameter,
    an empty ``x`` or a layout ``_draw_into`` does not take goes ``whole(x)``'s way
    (its errors and NaN draws), copied into ``out``."""
    draw = getattr(generator(), method)

    def fill(xb, ob):
        ob[...] = draw(xb.astype(np.float64))
    if not (x.size and x.min() >= 0 and _draw_into(out, x, fill)):
        out[...] = whole(x)
    return out


def _next_draw(draw):
    """A reference for a random op: the numbers tapegrad's generator draws next (from
    a copy of it, so the op's own call draws the same)."""
    def reference(*a, **kw):
        return draw(copy.deepcopy(_gen["np"]), *a, **kw)
    return reference


def _rand_ref(fn):
    def draw(g, *size, dtype=None):
        shape = shape_arg("rand", size, "size")
        return fn(g, shape).astype(_dt_or(dtype, _dt.get_default_dtype().np))
    return draw


for _fn, _draw in ((rand, lambda g, s: g.random(s)), (randn, lambda g, s: g.standard_normal(s))):
    composite(_fn, infer=_sized_infer(_fn.__name__, floating=True), args=(),
              differentiable=False,
              samples=lambda dtype=np.float64: [Sample((2, 3), {}), Sample((4,), {"dtype": F32})],
              error_samples=lambda: [((2,), {"dtype": np.dtype(np.int64)}, TypeError),
                                     ((-1,), {}, RuntimeError)],
              reference=_next_draw(_rand_ref(_draw)))


def _randint_infer(low, high=None, size=None, *, dtype=None, device=None, generator=None):
    if size is None and isinstance(high, (list, tuple)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise op_error("randint", "size is required, e.g. tg.randint(0, 10, (3,))", TypeError)
    shape = _new_shape("randint", (size,) if not isinstance(size, (list, tuple)) else
                       (tuple(size),))
    if low >= high:
        raise op_error("randint", f"expects low < high, got low={low} and high={high}",
                       RuntimeError)
    return TensorSpec(shape, _dt_or(dtype, np.int64))


composite(randint, infer=_randint_infer, args=(), differentiable=False,
          samples=lambda dtype=np.float64: [Sample((), {"low": -3, "high": 5, "size": (2, 3)}),
                                            Sample((), {"low": 4, "high": (5,)}),
                                            Sample((), {"low": 0, "high": 2, "size": (3,),
                                                        "dtype": I32})],
          error_samples=lambda: [((), {"low": 5, "high": 2, "size": (3,)}, RuntimeError),
                                 ((), {"low": 0, "high": 5}, TypeError)],
          reference=_next_draw(lambda g, low, high=None, size=None, dtype=None: (
              g.integers(0, low, size=high) if size is None else
              g.integers(low, high, size=size)).astype(_dt_or(dtype, np.int64))))


def _like_rand_infer(name):
    def infer(x, *, generator=None, dtype=None, requires_grad=False):
        dt = _dt_or(dtype, x.dtype)
        if not _dt.is_float(dt):
            raise TypeError(f"{name}: expected a floating dtype, got {_dt.from_np(dt)}")
        return TensorSpec(tuple(x.shape), dt)
    return infer


for _fn, _draw in ((rand_like, lambda g, s: g.random(s)),
                   (randn_like, lambda g, s: g.standard_normal(s))):
    composite(_fn, infer=_like_rand_infer(_fn.__name__), differentiable=False,
              samples=lambda dtype=np.float64: [Sample((_rand((2, 3), dtype),), {}),
                                                Sample((np.arange(3),), {"dtype": F32})],
              error_samples=lambda: [((np.arange(3),), {}, TypeError)],
              reference=_next_draw((lambda d: lambda g, x, dtype=None: d(g, x.shape).astype(
                  _dt_or(dtype, x.dtype)))(_draw)))


composite(randperm, infer=lambda n, *, dtype=None, device=None, generator=None: TensorSpec(
              (_count("randperm", n, "n"),), _dt_or(dtype, np.int64)),
          args=(), differentiable=False,
          samples=lambda dtype=np.float64: [Sample((6,), {}), Sample((3,), {"dtype": I32})],
          error_samples=lambda: [((-1,), {}, RuntimeError)],
          reference=_next_draw(lambda g, n, dtype=None: g.permutation(n).astype(
              _dt_or(dtype, np.int64))))


def _same_infer(x):
    return TensorSpec(tuple(x.shape), x.dtype)


composite(detach, infer=_same_infer, differentiable=False,
          samples=lambda dtype=np.float64: [Sample((_rand((2, 3), dtype),), {})],
          error_samples=lambda: [(("a",), {}, TypeError)],
          torch=lambda torch, x: x.detach())


composite(contiguous, infer=_same_infer,
          samples=lambda dtype=np.float64: [Sample((_rand((3, 2), dtype).T,), {}),
                                            Sample((_rand((2, 3), dtype),), {})],
          error_samples=lambda: [(("a",), {}, TypeError)],
          torch=lambda torch, x: x.contiguous())


def _to_infer(x, *args, dtype=None, device=None, copy=False, non_blocking=False):
    dtype, device = _to_args(args, dtype, device)
    if device is not None:
        _check_device(device)
    return TensorSpec(tuple(x.shape), _dt_or(dtype, x.dtype))


def _to_torch(torch, x, *args, **kw):
    args = [_tdt(torch, a) if isinstance(a, np.dtype) else a for a in args]
    return x.to(*args, **_torch_kw(torch, kw))


# float64 -> float32 rounds (forward-only); a copy to the same dtype differentiates
composite(to, infer=_to_infer,
          samples=lambda dtype=np.float64: [
              Sample((_rand((2, 3), dtype),), {"dtype": F32}, False),
              Sample((_rand((2, 3), dtype),), {"dtype": np.dtype(dtype), "copy": True}),
              Sample((_rand((3,), dtype),), {"device": "cpu"}),
              Sample((np.arange(3),), {"dtype": np.dtype(dtype)}, False)],
          error_samples=lambda: [((_rand((3,)),), {"device": "tpu"}, ValueError)],
          torch=_to_torch)


# ------------------------------------------------------------------ ranges
def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):  # noqa: A001
    """``start`` to ``end`` inclusive by ``step`` (PyTorch's deprecated ``torch.range``),
    the default float dtype unless ``dtype``."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise op_error("range", "step must be nonzero", RuntimeError)
    n = int(math.floor((end - start) / step)) + 1
    if n < 0:
        raise op_error("range", "upper bound and larger bound inconsistent with step sign",
                       RuntimeError)
    dt = dtype or _dt.get_default_dtype()
    vals = start + step * np.arange(n, dtype=np.float64)
    return _constant(tensor(vals, dtype=dt, device=device, requires_grad=requires_grad))


@_takes_out
def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    """``steps`` points ``base ** linspace(start, end, steps)``."""
    if steps < 0:
        raise op_error("logspace", "number of steps must be non-negative", RuntimeError)
    dt = dtype or _dt.get_default_dtype()
    vals = np.power(float(base), np.linspace(float(start), float(end), int(steps)))
    return _constant(tensor(vals, dtype=dt, device=device, requires_grad=requires_grad))


def _tri_indices(name, np_fn, row, col, offset, dtype, device):
    for what, v in (("row", row), ("col", col)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise op_error(name, f"{what} must be an int, got {type(v).__name__}", TypeError)
        if v < 0:
            raise op_error(name, f"{what} must be non-negative, got {v}", RuntimeError)
    dt = _dt.int64 if dtype is None else _dt.as_dtype(dtype)
    if dt.np not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise op_error(name, f"not implemented for {dt.np.name} (int32 or int64 is expected)",
                       NoKernelError)
    idx = np.asarray(np_fn(int(row), int(offset), int(col)), dtype=dt.np).reshape(2, -1)
    return _constant(tensor(idx, dtype=dt, device=device))


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """The (2, N) row and column indices of the lower triangle of a ``row`` x ``col``
    matrix (``offset``: the diagonal, as ``tril``'s), row by row, as
    ``torch.tril_indices``; int64 unless ``dtype`` (int32 or int64)."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    """The (2, N) row and column indices of the upper triangle of a ``row`` x ``col``
    matrix (``offset``: the diagonal, as ``triu``'s), row by row, as
    ``torch.triu_indices``; int64 unless ``dtype`` (int32 or int64)."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype, device)


def _creation_infer(fn):
    def infer(*a, **k):
        out = fn(*a, **k)
        from ._decl import TensorSpec
        return TensorSpec(tuple(out.shape), out.dtype.np)
    return infer


decl(range, lambda dtype=np.float64: [S(0, 4), S(1.0, 2.0, 0.25)], args=(),
     infer=_creation_infer(range), differentiable=False,
     torch=lambda T, *a, **k: T.range(*a, **k, dtype=T.get_default_dtype()),
     errors=lambda: [((0, 4, 0), {}, RuntimeError)], fill="eye")


decl(logspace, lambda dtype=np.float64: [S(0, 2, 3), S(-1.0, 1.0, 5, 2.0)], args=(),
     infer=_creation_infer(logspace), differentiable=False,
     errors=lambda: [((0, 2, -1), {}, RuntimeError)], fill="eye")


for _fn in (tril_indices, triu_indices):
    decl(_fn, lambda dtype=np.float64: [S(3, 4), S(4, 3, -1), S(3, 3, 2), S(0, 2)], args=(),
         infer=_creation_infer(_fn), differentiable=False,
         errors=lambda: [((-1, 3), {}, RuntimeError), ((3, 3), {"dtype": _dt.float32},
                                                        NotImplementedError)], fill="eye")



del _fn, _extra, _draw
