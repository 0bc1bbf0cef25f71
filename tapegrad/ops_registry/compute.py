"""Run registry ops on raw arrays from any DLPack producer, no Tensor involved."""
import numpy as np

from .opdef import TensorSpec
from .. import devices


def _as_raw(a):
    if isinstance(a, np.ndarray) or np.isscalar(a) or a is None:
        return a
    if type(a).__module__.startswith("cupy"):
        return a
    if hasattr(a, "_data") and hasattr(a, "requires_grad"):  # a tapegrad Tensor
        return a._data
    if hasattr(a, "__dlpack__"):
        from .. devices import dlpack
        return dlpack.import_array(a)
    return np.asarray(a)


def spec_of(a):
    a = _as_raw(a)
    if np.isscalar(a) or a is None:
        return a
    return TensorSpec(tuple(a.shape), a.dtype)


def infer(op, *specs, **attrs):
    return op.infer(*specs, **attrs)


def workspace_bytes(op, *specs, **attrs):
    """Scratch bytes the op needs for these input specs (0 unless kind workspace),
    after the shape rule has validated them (workspace rules may trust it)."""
    if op.workspace is None:
        return 0
    op.infer(*specs, **attrs)
    return int(op.workspace(*specs, **attrs))


def compute(op, *arrays, out=None, workspace=None, **attrs):
    """Run ``op``'s kernel on raw arrays; write into ``out`` when given.

    Workspace ops get a caller-provided ``workspace`` buffer (allocated here when
    absent); dynamic ops get an allocator. Inputs may be any DLPack producer; the
    result is a NumPy (CPU) or CuPy (GPU) array, or ``out``.
    """
    raw = [_as_raw(a) for a in arrays]
    arrs = [a for a in raw if not np.isscalar(a) and a is not None]
    if arrs:
        devices.check_same(op.name, [devices.device_of(a) for a in arrs])
    xp = devices.xp_of(arrs[0]) if arrs else np
    # the shape rule validates the call first (as dispatch does), so kernels need not
    op.infer(*[spec_of(a) for a in raw], **attrs)
    kw = dict(attrs)
    if op.kind == "workspace":
        need = int(op.workspace(*[spec_of(a) for a in raw], **attrs))  # infer ran above
        if workspace is None:
            workspace = xp.empty(need, dtype=np.uint8)
        elif workspace.nbytes < need:
            raise ValueError(f"{op.name}: workspace of {workspace.nbytes} bytes is smaller "
                             f"than the {need} bytes the op declares")
        kw["workspace"] = workspace
    if op.kind == "dynamic":
        kw["alloc"] = lambda shape, dtype: xp.empty(shape, dtype=dtype)
    if out is not None and op.takes_out and not isinstance(out, tuple):
        kw["out"] = _as_raw(out)  # the kernel writes straight into the caller's buffer
    try:
        result = op.kernel(*raw, **kw)
    except Exception as e:
        raise RuntimeError(f"{op.name}: kernel failed: {e}") from e
    if out is None:
        return result
    if "out" in kw and result is kw["out"]:
        return out
    if isinstance(out, tuple):
        for o, r in zip(out, result):
            _write(op, o, r)
        return out
    _write(op, out, result)
    return out


def _write(op, out, result):
    out_raw = _as_raw(out)
    if tuple(out_raw.shape) != tuple(result.shape):
        raise ValueError(f"{op.name}: out has shape {tuple(out_raw.shape)}, "
                         f"the result has shape {tuple(result.shape)}")
    out_raw[...] = result
