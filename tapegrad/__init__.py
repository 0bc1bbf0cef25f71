"""tapegrad: a tape-based autograd array library on NumPy (CPU) and CuPy (CUDA).

>>> import tapegrad as tg
>>> x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = (x * x).sum()
>>> y.backward()
>>> x.grad
tensor([2., 4., 6.])
"""
# Import order matters here: later imports win (the ops' names, then the ones shadowing
# builtins, then the utilities), and the steps between imports install the methods and
# wrap the public functions.
# isort: skip_file
from .dtypes import (DType, bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8,
                     bool, get_default_dtype, set_default_dtype)
from .dtypes import float16 as half, float32 as float, float64 as double  # noqa: A001
from .dtypes import int64 as long, int32 as int  # noqa: A001
from .dtypes import DType as dtype  # noqa: F401  (torch.dtype: the class of tg.float32)
from .devices import Device, device
from .tensor import Tensor
from . import ops_registry
from .ops import *  # noqa: F401,F403  (ops.__all__: the public op functions)
from .ops import abs, round, pow, sum, max, min, all, any  # noqa: F401,A001
from .ops.creation import Generator, default_generator  # noqa: F401
from .fusion import elementwise
from .tracing import fuse
from .compiler import compile  # noqa: A001
from .autodiff import (backward, grad, no_grad, enable_grad, set_grad_enabled,
                       is_grad_enabled, Tape, checkpoint, detect_anomaly, set_detect_anomaly)
from . import ops as _ops
from . import autodiff as _autodiff
from .ops import methods as _methods
from . import tape as _tape
from . import cuda  # noqa: F401
from . import testing  # noqa: F401
from . import functional  # noqa: F401
from . import functional as func  # noqa: F401  (torch.func: the same module)
from . import forward_ad  # noqa: F401
from . import interop  # noqa: F401  (PyTorch and JAX are imported on first use)
from .vmap import vmap  # noqa: F401
from .ops import sparse  # noqa: F401  (torch.sparse)
from .ops.sparse import sparse_coo_tensor, sparse_coo, spmm, strided  # noqa: F401
from .utilities import *  # noqa: F401,F403  (torch.* utilities that are not ops)

_tape.install_namespace(_ops)
from . import utilities as _utilities  # noqa: E402
_methods.install(methods=dict({"backward": _autodiff.tensor_backward},
                              **{n: getattr(_utilities, n) for n in (
                                  "is_floating_point", "is_nonzero", "allclose", "equal")}))
from .ops.guard import checked as _checked  # noqa: E402
for _name in _ops.__all__:  # the public functions check their input first
    globals()[_name] = _checked(globals()[_name])
del _name
from .devices import cpu as _cpu  # noqa: E402
_cpu.tune_malloc()  # training-step temporaries reuse freed memory (see its docstring)
_cpu.tune_blas()  # OpenBLAS's idle workers sleep instead of spinning for ~0.1 s

from .tensor import Size  # noqa: E402
from . import legacy as _legacy  # noqa: E402,F401  (installs tg.Tensor(3, 4)'s legacy forms)
import sys as _sys  # noqa: E402
_sys.modules[__name__ + ".func"] = func  # ``from tapegrad.func import jacrev``
__version__ = "0.1.0"


def is_tensor(obj):
    """Whether ``obj`` is a tapegrad Tensor, as ``torch.is_tensor``."""
    return isinstance(obj, Tensor)


def numel(input):
    """The number of elements of ``input``, as ``torch.numel``."""
    return input.numel()


_LEGACY = ("FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor",
           "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor")


def _lazy(name):
    import importlib
    return importlib.import_module(f"tapegrad.{name}")


def __getattr__(name):
    # subpackages that import the public API themselves load on first use
    if name in ("nn", "optim", "amp", "linalg", "fusion", "viz", "data", "examples", "profiler",
                "distributed", "onnx", "autograd", "accelerator", "backends", "distributions",
                "utils"):
        return _lazy(name)
    if name in ("autocast", "is_autocast_enabled", "get_autocast_dtype",
                "clear_autocast_cache", "is_autocast_cache_enabled"):
        return getattr(_lazy("amp"), name)
    if name in ("save", "load"):
        return getattr(_lazy("serialization"), name)
    if name == "profile":
        return getattr(_lazy("profiler"), "profile")
    if name in _LEGACY:
        return getattr(_lazy("legacy"), name)
    if name == "custom_op":
        return getattr(_lazy("custom"), "custom_op")
    raise AttributeError(f"module 'tapegrad' has no attribute {name!r}")
