"""DLPack in and out (DLPack 1.x Python spec), zero-copy where the producer allows."""
import numpy as np

from . import cuda


def import_array(obj, copy=None):
    """A NumPy or CuPy array sharing memory with any ``__dlpack__`` producer."""
    dev_type, _ = obj.__dlpack_device__()
    if int(dev_type) == 1:  # kDLCPU
        kw = {} if copy is None else {"copy": copy}
        try:
            return np.from_dlpack(obj, **kw)
        except BufferError as e:
            if "read" in str(e).lower() and hasattr(obj, "__dlpack__"):
                raise
            raise
    if int(dev_type) in (2, 13):  # kDLCUDA, kDLCUDAManaged
        cp = cuda.cupy()
        out = cp.from_dlpack(obj)
        return out.copy() if copy else out
    raise BufferError(f"from_dlpack: unsupported DLPack device type {int(dev_type)}")


def export(array, *, read_only, stream=None, max_version=None, dl_device=None, copy=None):
    """Call the buffer's own ``__dlpack__``; a read-only view when ``read_only``."""
    if read_only and isinstance(array, np.ndarray) and array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    kw = {}
    if stream is not None:
        kw["stream"] = stream
    if max_version is not None:
        kw["max_version"] = max_version
    if dl_device is not None:
        kw["dl_device"] = dl_device
    if copy is not None:
        kw["copy"] = copy
    try:
        return array.__dlpack__(**kw)
    except TypeError:
        # older producers take only ``stream``
        return array.__dlpack__(stream=stream) if stream is not None else array.__dlpack__()
