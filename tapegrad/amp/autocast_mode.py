"""``tg.autocast`` (also ``tg.amp.autocast``), as ``torch.autocast``.

Inside the region, each op's ``autocast`` field in the registry (PyTorch's op lists,
per device) says what happens to its floating inputs on that device: matmul,
linear, conv and friends run in the autocast dtype, the losses (and on CUDA also
softmax, norms, exp/log, sums) in float32, cat and stack at the widest input; the
funnel (``dispatch``) applies it to every spelling of a call. The state is
thread-local, as grad mode is; regions nest, and ``enabled=False`` inside one turns
autocast off for its device until it closes. Casts of weights (leaf tensors that
require grad) are made once per outermost region and reused.
"""
import functools
import warnings

from .. import dtypes as _dt
from ..tape import state as _state

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "clear_autocast_cache",
           "is_autocast_cache_enabled", "custom_fwd", "custom_bwd"]

_DEVICES = ("cpu", "cuda")
_DEFAULT = {"cpu": _dt.bfloat16, "cuda": _dt.float16}
_SUPPORTED = {"cpu": (_dt.bfloat16, _dt.float16), "cuda": (_dt.float16, _dt.bfloat16)}


class autocast:
    """``autocast(device_type, dtype=None, enabled=True, cache_enabled=True)``: a
    context manager and a decorator. ``dtype`` defaults to bfloat16 on CPU and
    float16 on CUDA; an unsupported one, or ``"cuda"`` where CUDA is not available,
    warns and leaves autocast off (PyTorch's behaviour)."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=True):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in _DEVICES:
            raise RuntimeError(f"User specified an unsupported autocast device_type "
                               f"'{device_type}'; tapegrad supports {', '.join(_DEVICES)}")
        self.device = device_type
        self.fast_dtype = _DEFAULT[device_type] if dtype is None else _dt.as_dtype(dtype)
        self._cache_enabled = (is_autocast_cache_enabled() if cache_enabled is None
                               else bool(cache_enabled))
        enabled = bool(enabled)
        if enabled and device_type == "cuda" and not _cuda_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. "
                          "Disabling autocast.", UserWarning, stacklevel=2)
            enabled = False
        if enabled and self.fast_dtype not in _SUPPORTED[device_type]:
            name = "CPU" if device_type == "cpu" else "CUDA"
            warnings.warn(f"In {name} autocast, but the target dtype is not supported. "
                          f"Disabling autocast.\n{name} Autocast only supports dtypes of "
                          + ", ".join(f"tapegrad.{d.name}" for d in _SUPPORTED[device_type])
                          + " currently.", UserWarning, stacklevel=2)
            enabled = False
        self._enabled = enabled
        self._prev = None

    def __enter__(self):
        self._prev = (_state.autocast, _state.autocast_cache_enabled)
        now = dict(_state.autocast or {})
        if self._enabled:
            now[self.device] = self.fast_dtype.np
        else:
            now.pop(self.device, None)
        _state.autocast = now or None
        _state.autocast_cache_enabled = self._cache_enabled
        _state.autocast_depth += 1
        return self

    def __exit__(self, *exc):
        _state.autocast_depth -= 1
        if _state.autocast_depth == 0:
            _state.autocast_cache.clear()
        _state.autocast, _state.autocast_cache_enabled = self._prev
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def run(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)
        return run


def _cuda_available():
    from .. import cuda
    return cuda.is_available()


def is_autocast_available(device_type):
    """Whether autocast can run on ``device_type`` ("cpu" and "cuda"), as
    ``torch.amp.is_autocast_available``; a device string naming no device type is a
    RuntimeError."""
    if not isinstance(device_type, str) or device_type.split(":")[0] not in _KNOWN_TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_KNOWN_TYPES)} device type at start "
                           f"of device string: {device_type}")
    return device_type.split(":")[0] in _DEFAULT


_KNOWN_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip",
                "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
                "privateuseone")


def is_autocast_enabled(device_type="cuda"):
    """Whether autocast is on for ``device_type`` in this thread."""
    return bool(_state.autocast) and device_type in _state.autocast


def get_autocast_dtype(device_type):
    """The dtype autocast lowers to on ``device_type`` (its default when it is off)."""
    on = _state.autocast or {}
    return _dt.from_np(on[device_type]) if device_type in on else _DEFAULT[device_type]


def is_autocast_cache_enabled():
    return _state.autocast_cache_enabled


def clear_autocast_cache():
    _state.autocast_cache.clear()


def _cast(value, device_type, dtype):
    """``value`` with each floating tensor of ``device_type`` (not float64) in ``dtype``,
    through lists, tuples and dicts (``torch.amp``'s rule for ``cast_inputs``)."""
    from ..tensor import Tensor
    if isinstance(value, Tensor):
        if value.is_floating_point() and value.device.type == device_type and \
                value.dtype != _dt.float64:
            return value.to(dtype)
        return value
    if isinstance(value, dict):
        return {k: _cast(v, device_type, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    return value


def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """Decorator of a custom ``autograd.Function``'s ``forward``, as
    ``torch.amp.custom_fwd``: with ``cast_inputs`` None, ``forward`` runs under the
    caller's autocast state and ``backward`` (decorated with ``custom_bwd``) under the
    same; with a dtype, inside an autocast region of ``device_type`` its floating
    tensor arguments are cast to it and it runs with autocast off."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = get_autocast_dtype(device_type)
        on = is_autocast_enabled(device_type)
        if cast_inputs is None:
            ctx._fwd_used_autocast = on
            return fwd(*args, **kwargs)
        ctx._fwd_used_autocast = False
        if not on:
            return fwd(*args, **kwargs)
        with autocast(device_type, enabled=False):
            return fwd(*_cast(args, device_type, cast_inputs),
                       **_cast(kwargs, device_type, cast_inputs))
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type):
    """Decorator of a custom ``autograd.Function``'s ``backward``, as
    ``torch.amp.custom_bwd``: it runs under the autocast state its ``forward``
    (decorated with ``custom_fwd``) ran under."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(device_type, dtype=ctx._dtype, enabled=ctx._fwd_used_autocast):
            return bwd(*args, **kwargs)
    return decorate_bwd
