"""``tg.nn.utils``: gradient clipping, parameters as one vector, and the
``parametrize``/``parametrizations`` submodules, as ``torch.nn.utils``.

>>> import tapegrad as tg
>>> w = tg.nn.Parameter(tg.zeros(2))
>>> w.grad = tg.tensor([3.0, 4.0])
>>> float(tg.nn.utils.clip_grad_norm_([w], max_norm=1.0))
5.0
>>> [round(v, 4) for v in w.grad.tolist()]
[0.6, 0.8]
"""
import math

import numpy as np

from ...dispatch import observing
from ...grad_mode import no_grad
from ...ops import abs as _abs, amax, cat, clamp, norm, stack, tensor
from ...ops_registry import get as _op
from ...tensor import Tensor, buffer, mark_written

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_",
           "parameters_to_vector", "vector_to_parameters", "parametrize", "parametrizations"]


def __getattr__(name):
    # loaded on first use: they build on tg.nn's modules, which import this package
    if name in ("parametrize", "parametrizations"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one vector (recorded: it
    differentiates to each), as ``torch.nn.utils.parameters_to_vector``."""
    params = list(parameters)
    if not params:
        raise RuntimeError("parameters_to_vector: expected a non-empty iterable of Tensors")
    dev = params[0].device
    for p in params:
        if p.device != dev:
            raise TypeError(f"Found two parameters on different devices, this is currently "
                            f"not supported. ({dev} and {p.device})")
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec, parameters):
    """Copy the slices of ``vec`` into the parameters' data, in order, as
    ``torch.nn.utils.vector_to_parameters`` (each parameter then holds its slice)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.numel() != total:
        raise RuntimeError(f"vector_to_parameters: vec has shape {tuple(vec.shape)}, the "
                           f"parameters hold {total} elements")
    start = 0
    for p in params:
        n = p.numel()
        p.data = vec[start:start + n].reshape(tuple(p.shape)).data
        start += n


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _plain_arrays(tensors):
    """The NumPy arrays of ``tensors`` where each is a float32 or float64 array of one
    dtype that nothing records or batches and no capture observes (the 2-norm and
    the scaling then run on the arrays, ~25 op calls fewer for a model's gradients,
    the same kernels and results); else None."""
    if observing():
        return None
    arrays = []
    for t in tensors:
        if t.grad_fn is not None or t.requires_grad:
            return None
        try:
            a = buffer(t)
        except RuntimeError:  # (batched, inside vmap)
            return None
        if type(a) is not np.ndarray:
            return None
        arrays.append(a)
    if not arrays or arrays[0].dtype not in (np.float32, np.float64) \
            or any(a.dtype != arrays[0].dtype for a in arrays):
        return None
    return arrays


@no_grad()
def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type`` norm of the norms of ``tensors`` (as if concatenated)."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    tensors = list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    arrays = _plain_arrays(tensors) if norm_type == 2.0 else None
    if arrays is not None:  # norm's kernel on each array and on the stacked norms
        kernel = _op("norm").kernel
        total = Tensor(kernel(np.stack([kernel(a) for a in arrays])))
    elif math.isinf(norm_type) and norm_type > 0:
        norms = [amax(_abs(t)) if t.numel() else tensor(0.0, dtype=t.dtype) for t in tensors]
        total = amax(stack([n.to(norms[0].dtype) for n in norms]))
    else:
        norms = [norm(t, norm_type) for t in tensors]
        total = norm(stack([n.to(norms[0].dtype) for n in norms]), norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            f"non-finite, so it cannot be clipped. To disable this error and scale the "
            f"gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


@no_grad()
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of ``parameters`` by ``min(1, max_norm / (total_norm +
    1e-6))``, in place (every gradient is multiplied, as PyTorch)."""
    grads = _grads(parameters)
    if not grads:
        return
    coef = clamp(float(max_norm) / (total_norm + 1e-6), max=1.0)
    arrays = _plain_arrays(grads)
    if arrays is not None and type(buffer(coef)) is np.ndarray:
        c = buffer(coef).astype(arrays[0].dtype)
        for g, a in zip(grads, arrays):
            if c != 1:  # (times 1 leaves every value as it is, NaN included)
                np.multiply(a, c, out=a)
            mark_written(g)
        return
    for g in grads:
        g.mul_(coef.to(g.dtype))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Clip the gradients of ``parameters`` so that their total ``norm_type`` norm
    (2, inf, any p) is at most ``max_norm``, in place; returns the total norm before
    clipping (a 0-dim Tensor), as ``torch.nn.utils.clip_grad_norm_``. A non-finite
    total norm raises ``RuntimeError`` with ``error_if_nonfinite=True``."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    parameters = list(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp each gradient of ``parameters`` into ``[-clip_value, clip_value]`` in
    place, as ``torch.nn.utils.clip_grad_value_``."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        g.copy_(clamp(g, -clip_value, clip_value))
