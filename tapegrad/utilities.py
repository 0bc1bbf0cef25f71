"""PyTorch's ``torch.*`` utilities that are not ops on tensors:
predicates answering a Python value (``is_floating_point``, ``equal``, ``allclose``),
dtype promotion questions (``result_type``, ``can_cast``, ``promote_types``),
``broadcast_shapes``, ``typename``, thread counts, ``inference_mode`` and
``set_printoptions``.
"""

import numpy as np

from . import dtypes as _dt
from ._util import op_error
from .grad_mode import is_grad_enabled, set_grad_enabled
from .tape import state as _record_state
from .tensor import PRINT_OPTIONS as _PRINT_OPTIONS, Tensor

__all__ = ["is_floating_point", "is_nonzero", "allclose", "equal", "broadcast_shapes",
           "result_type", "can_cast", "promote_types", "typename", "get_num_threads",
           "set_num_threads", "get_num_interop_threads", "set_num_interop_threads",
           "inference_mode", "is_inference_mode_enabled", "set_printoptions", "get_printoptions",
           "finfo", "iinfo"]


def _tensor(name, x, what="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{what}' must be Tensor, not {type(x).__name__}")


def is_floating_point(input):
    """True when ``input``'s dtype is a floating point one."""
    _tensor("is_floating_point", input)
    return input.dtype.is_floating_point


def is_nonzero(input):
    """The truth of a one-element tensor (an error for any other size)."""
    _tensor("is_nonzero", input)
    if input.numel() == 0:
        raise RuntimeError("is_nonzero: Boolean value of Tensor with no values is ambiguous")
    if input.numel() > 1:
        raise RuntimeError("is_nonzero: Boolean value of Tensor with more than one value is "
                           "ambiguous")
    return bool(input.item() != 0)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when every element of ``input`` is close to ``other``'s (``isclose``)."""
    from .ops import ufuncs
    _tensor("allclose", input)
    _tensor("allclose", other, "other")
    return bool(ufuncs.isclose(input, other, rtol=rtol, atol=atol,
                               equal_nan=equal_nan).all().item())


def equal(input, other):
    """True when both have the same shape and elements."""
    _tensor("equal", input)
    _tensor("equal", other, "other")
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool((input == other).all().item())


def broadcast_shapes(*shapes):
    """The shape tensors of ``shapes`` broadcast to (PyTorch's rule)."""
    norm = []
    for s in shapes:
        norm.append((s,) if isinstance(s, (int, np.integer)) else tuple(s))
    try:
        return tuple(np.broadcast_shapes(*norm))
    except ValueError:
        raise op_error("broadcast_shapes", f"shapes {norm} cannot be broadcast together",
                       RuntimeError) from None


def _np_of(v):
    if isinstance(v, Tensor):
        return v.dtype.np, len(v.shape) > 0
    if isinstance(v, bool):
        return np.dtype(bool), None
    if isinstance(v, int):
        return np.dtype(np.int64), None
    if isinstance(v, float):
        return np.dtype(_dt.get_default_dtype().np), None
    raise TypeError(f"result_type(): expected Tensors or numbers, got {type(v).__name__}")


def result_type(tensor1, tensor2):
    """The dtype an arithmetic op on ``tensor1`` and ``tensor2`` (Tensors or numbers)
    gives, PyTorch's promotion."""
    dims, zero, scal = [], [], []
    for v in (tensor1, tensor2):
        d, has_dims = _np_of(v)
        if has_dims is None:
            scal.append(v)
        elif has_dims:
            dims.append(d)
        else:
            zero.append(d)
    if dims or zero:
        return _dt.from_np(_dt.operands_type(dims, zero, scal))
    return _dt.from_np(_dt.promote_with_scalars(_np_of(scal[0])[0], scal))


_KIND = {"b": 0, "u": 1, "i": 1, "f": 2}


def can_cast(from_, to):
    """Whether PyTorch's casting rule allows ``from_`` -> ``to`` (no lower kind:
    float to int and int to bool are refused)."""
    a, b = _dt.as_dtype(from_).np, _dt.as_dtype(to).np
    return _KIND[a.kind] <= _KIND[b.kind]


def promote_types(type1, type2):
    """The smallest dtype both promote to (PyTorch's table)."""
    a, b = _dt.as_dtype(type1).np, _dt.as_dtype(type2).np
    return _dt.from_np(_dt.result_type(a, b))


class finfo:
    """The numerical limits of a floating dtype (the default dtype when none is
    given), as ``torch.finfo``: ``bits, eps, max, min, tiny, smallest_normal,
    resolution`` (Python floats) and ``dtype`` (its name)."""

    def __init__(self, type=None):
        d = _dt.get_default_dtype() if type is None else _dt.as_dtype(type)
        if not d.is_floating_point:
            raise TypeError(f"finfo(): {d} is not a floating point dtype; use iinfo")
        import ml_dtypes
        info = ml_dtypes.finfo(d.np) if d.np is _dt.BF16 else np.finfo(d.np)
        self.bits = int(info.bits)
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)
        self.dtype = d.name

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """The limits of an integer dtype, as ``torch.iinfo``: ``bits, max, min``
    (Python ints) and ``dtype`` (its name)."""

    def __init__(self, type):
        d = _dt.as_dtype(type)
        if d.np.kind not in "iu":
            raise TypeError(f"iinfo(): {d} is not an integer dtype"
                            f"{'; use finfo' if d.is_floating_point else ''}")
        info = np.iinfo(d.np)
        self.bits = int(info.bits)
        self.max, self.min = int(info.max), int(info.min)
        self.dtype = d.name

    def __repr__(self):
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


_LEGACY = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
           "bfloat16": "BFloat16Tensor",
           "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
           "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}


def typename(obj):
    """PyTorch's type name: ``'torch.FloatTensor'`` for a float32 CPU tensor."""
    if isinstance(obj, Tensor):
        name = _LEGACY.get(obj.dtype.name, "Tensor")
        return f"torch.{'cuda.' if obj.device.type == 'cuda' else ''}{name}"
    module = type(obj).__module__
    qual = type(obj).__qualname__
    return qual if module in ("builtins", None) else f"{module}.{qual}"


_threads = {}


def _blas():
    try:
        import threadpoolctl
    except ImportError:
        return None
    return threadpoolctl


def get_num_threads():
    """Threads tapegrad's CPU work uses (BLAS's, as set by ``set_num_threads``)."""
    if "n" in _threads:
        return _threads["n"]
    from .devices import cpu
    return cpu.threads()


def set_num_threads(int):  # noqa: A002 (PyTorch's parameter name)
    """Limit BLAS (and tapegrad's own threaded loops' budget) to ``int`` threads."""
    n = int_(int)
    if n < 1:
        raise RuntimeError("set_num_threads: Number of threads must be positive")
    ctl = _blas()
    if ctl is not None:
        _threads["limit"] = ctl.threadpool_limits(limits=n)
    _threads["n"] = n


def int_(v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"set_num_threads(): argument 'int' must be int, not {type(v).__name__}")
    return int(v)


def get_num_interop_threads():
    """Threads for work between ops (tapegrad runs ops in the caller's thread: 1
    unless set)."""
    return _threads.get("interop", 1)


def set_num_interop_threads(int):  # noqa: A002
    """Record the inter-op thread count (tapegrad runs ops in the caller's thread)."""
    n = int_(int)
    if n < 1:
        raise RuntimeError("set_num_interop_threads: Number of threads must be positive")
    _threads["interop"] = n


def is_inference_mode_enabled():
    """True inside ``inference_mode()`` (in this thread), not inside an
    ``inference_mode(False)`` within it."""
    return bool(_record_state.inference)


class inference_mode:
    """``torch.inference_mode``: no recording inside (as ``no_grad``), and the tensors
    made inside are inference tensors (``Tensor.is_inference()``); a context manager
    and a decorator; ``inference_mode(False)`` makes normal tensors again, with
    autograd on (grad mode enabled inside, as PyTorch's)."""

    def __init__(self, mode=True):
        self.mode = bool(mode)

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        if callable(mode):  # @inference_mode without parentheses
            self.mode = True
            return self(mode)
        return self

    def __enter__(self):
        self._prev = is_grad_enabled()
        self._prev_inference = _record_state.inference
        if self.mode:
            set_grad_enabled(False)
        else:  # as PyTorch's InferenceMode(false): autograd on inside
            set_grad_enabled(True)
        _record_state.inference = self.mode  # tensors made inside are inference tensors
        return self

    def __exit__(self, *exc):
        _record_state.inference = self._prev_inference
        set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with inference_mode(self.mode):
                return fn(*a, **k)
        return wrapper

    def clone(self):
        return inference_mode(self.mode)


_PROFILES = {"default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
             "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
             "full": dict(precision=4, threshold=np.inf, edgeitems=3, linewidth=80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """How tensors print, as ``torch.set_printoptions``: ``profile`` (``default``,
    ``short``, ``full``) first, then the given options; ``sci_mode`` (``True``/``False``
    forces scientific notation on or off, ``None`` chooses) is set on every call, as
    PyTorch's. NumPy's own print options are not touched."""
    opts = _PRINT_OPTIONS
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}")
        opts.update(_PROFILES[profile])
    for k, v in (("precision", precision), ("threshold", threshold),
                 ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if v is not None:
            opts[k] = v
    opts["sci_mode"] = sci_mode


def get_printoptions():
    """The current tensor print options (a dict), as ``torch._tensor_str``'s."""
    return dict(_PRINT_OPTIONS)
