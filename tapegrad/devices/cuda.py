"""The CUDA device through CuPy, imported lazily and optional.

``available()`` says whether CuPy imports and sees a GPU; ``check_available()``
raises a RuntimeError that says why not and what to install.
"""
import functools

_state = {}


def _try_import():
    if "cupy" not in _state:
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
            _state["cupy"], _state["error"] = cupy, None
        except Exception as e:  # ImportError, CUDARuntimeError, ...
            _state["cupy"], _state["error"] = None, e
    return _state["cupy"]


def available():
    return _try_import() is not None


def device_count():
    cp = _try_import()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


def check_available():
    if _try_import() is None:
        raise RuntimeError(
            "CUDA is not available: CuPy could not be used "
            f"({type(_state['error']).__name__}: {_state['error']}). "
            "Install the GPU extra matching the CUDA driver (pip install 'tapegrad[cuda12]' "
            "or 'tapegrad[cuda13]', which bring cupy-cuda12x / cupy-cuda13x) "
            "on a machine with an NVIDIA GPU and driver.")


def cupy():
    check_available()
    return _state["cupy"]


def is_cupy(array):
    return type(array).__module__.startswith("cupy") and _try_import() is not None


# blocks of a one-pass reduction (grid-stride): 1024 x 256 threads fill an H200's
# 132 SMs at full occupancy, and the float64 partial sums stay a few KiB
REDUCE_MAX_BLOCKS = 1024


@functools.lru_cache(maxsize=None)
def elementwise_kernel(in_params, out_params, operation, name, preamble=""):
    """A memoized ``cupy.ElementwiseKernel``."""
    return cupy().ElementwiseKernel(in_params, out_params, operation, name, preamble=preamble)


@functools.lru_cache(maxsize=None)
def raw_kernel(source, name):
    """A memoized ``cupy.RawKernel``."""
    return cupy().RawKernel(source, name)


def synchronize():
    """Wait for the current device's work (nothing to do without CuPy)."""
    if available():
        cupy().cuda.Device().synchronize()
