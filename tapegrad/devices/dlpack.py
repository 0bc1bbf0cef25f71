"""DLPack in and out (DLPack 1.x Python spec), zero-copy where the producer allows.

NumPy's DLPack knows no bfloat16 (ml_dtypes' dtype), so bfloat16 crosses as the
same capsule with its dtype code rewritten: an exported bfloat16 array is its
uint16 view's capsule marked ``kDLBfloat``, and an imported ``kDLBfloat`` capsule is
read as uint16 and viewed as bfloat16, zero-copy both ways.
"""
import ctypes

import numpy as np

from .. import dtypes as _dt
from . import cuda

_KDL_UINT, _KDL_BFLOAT = 1, 4
# the DLDataType code's byte offset in the capsule's struct: DLManagedTensor starts
# with its DLTensor (data, device, ndim, then dtype at 20); DLManagedTensorVersioned
# puts version, manager_ctx, deleter and flags (32 bytes) before it
_CODE_AT = {b"dltensor": 20, b"dltensor_versioned": 52}
_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _retype(capsule, old, new):
    """Rewrite a 16-bit DLPack capsule's dtype code from ``old`` to ``new`` in place;
    whether it held ``old``."""
    for name, at in _CODE_AT.items():
        if _api.PyCapsule_IsValid(capsule, name):
            base = _api.PyCapsule_GetPointer(capsule, name)
            code = ctypes.c_uint8.from_address(base + at)
            bits = ctypes.c_uint8.from_address(base + at + 1)
            if code.value == old and bits.value == 16:
                code.value = new
                return True
            return False
    return False


class _AsUint16:
    """A DLPack producer seen through: a bfloat16 capsule it gives is handed on as
    uint16 (``found`` says so), anything else unchanged."""

    def __init__(self, obj):
        self.obj = obj
        self.found = False

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()

    def __dlpack__(self, **kw):
        try:
            cap = self.obj.__dlpack__(**kw)
        except TypeError:  # an older producer: no max_version / copy keywords
            cap = self.obj.__dlpack__(**({"stream": kw["stream"]} if "stream" in kw else {}))
        self.found = _retype(cap, _KDL_BFLOAT, _KDL_UINT)
        return cap


def import_array(obj, copy=None):
    """A NumPy or CuPy array sharing memory with any ``__dlpack__`` producer."""
    dev_type, _ = obj.__dlpack_device__()
    if int(dev_type) == 1:  # kDLCPU
        kw = {} if copy is None else {"copy": copy}
        src = _AsUint16(obj) if hasattr(obj, "__dlpack__") else obj
        out = np.from_dlpack(src, **kw)
        return out.view(_dt.bfloat16.np) if getattr(src, "found", False) else out
    if int(dev_type) in (2, 13):  # kDLCUDA, kDLCUDAManaged
        cp = cuda.cupy()
        out = cp.from_dlpack(obj)
        return out.copy() if copy else out
    raise BufferError(f"from_dlpack: unsupported DLPack device type {int(dev_type)}")


def export(array, *, read_only, stream=None, max_version=None, dl_device=None, copy=None):
    """Call the buffer's own ``__dlpack__``; a read-only view when ``read_only``. A
    view with a negative stride (``x.flip``'s, ``[::-1]``) is exported as a contiguous
    copy, which the DLPack spec allows unless ``copy=False`` (PyTorch's importer aborts
    the process on a negative stride)."""
    if any(st < 0 for st in getattr(array, "strides", ())):
        if copy is False:
            raise BufferError("__dlpack__: a view with a negative stride cannot be shared "
                              "without a copy (copy=False); call .contiguous() first")
        array = array.copy()
        copy = None
    if read_only and isinstance(array, np.ndarray) and array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    if array.dtype is _dt.BF16:
        cap = export(array.view(np.uint16), read_only=False, stream=stream,
                     max_version=max_version, dl_device=dl_device, copy=copy)
        _retype(cap, _KDL_UINT, _KDL_BFLOAT)
        return cap
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
