"""Run registry ops on raw arrays from any DLPack producer, no Tensor involved."""
import numpy as np

from .. import devices
from .opdef import TensorSpec


def _as_raw(a):
    if isinstance(a, np.ndarray) or np.isscalar(a) or a is None:
        return a
    if type(a).__module__.startswith("cupy"):
        return a
    if hasattr(a, "_data") and hasattr(a, "requires_grad"):  # a tapegrad Tensor
        return a._data
    if hasattr(a, "__dlpack__"):
        from ..devices import dlpack
        return dlpack.import_array(a)
    return np.asarray(a)


def spec_of(a):
    a = _as_raw(a)
    if np.isscalar(a) or a is None:
        return a
    return TensorSpec(tuple(a.shape), a.dtype)


def infer(op, *specs, **attrs):
    """The output ``TensorSpec`` (or tuple of them) of ``op`` on inputs ``specs``: its shape
    and dtype rule, no data; raises the op's error for bad inputs."""
    return op.infer(*specs, **attrs)


def workspace_bytes(op, *specs, **attrs):
    """Scratch bytes the op needs for these input specs (0 unless kind workspace),
    after the shape rule has validated them (workspace rules may trust it)."""
    if op.workspace is None:
        return 0
    op.infer(*specs, **attrs)
    return int(op.workspace(*specs, **attrs))


def compute(op, *arrays, out=None, workspace=None, alloc=None, **attrs):
    """Run ``op``'s kernel on raw arrays; write into ``out`` when given.

    Workspace ops get a caller-provided ``workspace`` buffer (allocated here when
    absent). Dynamic ops compute their output sizes first, then call ``alloc(spec)``
    (a ``TensorSpec``; the caller's allocator, else ``empty``) once per output and
    write there; the caller's allocator may return any DLPack producer of that spec,
    and what it returned is what comes back. Inputs may be any DLPack producer; the
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
    given = {}  # id(raw view) -> (raw view, what the caller's allocator returned)
    if op.kind == "dynamic":
        if alloc is None:
            kw["alloc"] = lambda shape, dtype: xp.empty(shape, dtype=dtype)
        else:
            kw["alloc"] = _caller_alloc(op, alloc, given)
    elif alloc is not None:
        raise TypeError(f"{op.name}: alloc= is for dynamic ops (their sizes depend on the "
                        f"data); a {op.kind} op writes into out= (shape from infer)")
    if out is not None and op.takes_out:
        # the kernel writes straight into the caller's buffer (several outputs: a
        # tuple of them, one per output)
        if not isinstance(out, tuple):
            kw["out"] = _as_raw(out)
        elif len(out) == op.nout:
            kw["out"] = tuple(_as_raw(o) for o in out)
    try:
        result = op.kernel(*raw, **kw)
    except AllocatorError:
        raise
    except Exception as e:
        raise RuntimeError(f"{op.name}: kernel failed: {e}") from e
    if out is None:
        if given:
            if isinstance(result, tuple):
                return tuple(_given(r, given) for r in result)
            return _given(result, given)
        return result
    if "out" in kw and (result is kw["out"] or isinstance(kw["out"], tuple) and isinstance(
            result, tuple) and all(r is o for r, o in zip(result, kw["out"]))):
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


class AllocatorError(ValueError):
    """The caller's allocator returned memory that does not fit the output's spec."""


def _caller_alloc(op, alloc, given):
    """The kernel's ``alloc(shape, dtype)`` over the caller's ``alloc(spec)``."""
    def kernel_alloc(shape, dtype):
        spec = TensorSpec(tuple(int(n) for n in shape), np.dtype(dtype))
        obj = alloc(spec)
        raw = _as_raw(obj)
        if tuple(raw.shape) != spec.shape or raw.dtype != spec.dtype:
            raise AllocatorError(f"{op.name}: the allocator returned shape {tuple(raw.shape)}, "
                             f"dtype {raw.dtype} for {spec.shape}, {spec.dtype}")
        if not getattr(getattr(raw, "flags", None), "writeable", True):
            raise AllocatorError(f"{op.name}: the allocator returned read-only memory")
        given[id(raw)] = (raw, obj)
        return raw
    return kernel_alloc


def _given(r, given):
    hit = given.get(id(r))
    return hit[1] if hit is not None and hit[0] is r else r
