"""PyTorch-compatible extras that are spellings of other ops: the ``new_*``
constructors, ``Tensor.type``, the device flags PyTorch programs test (``is_xpu``...),
``format()`` of a 0-d tensor, and ``write_out``, PyTorch's ``out=`` rule for the ops
that take it; and ``smooth_l1_loss``, ``huber_loss``, ``dropout2d`` (composites,
reached through ``tg.nn.functional``).

Layering: compat sits on top of the op families (it imports them; none imports it at
import time)."""
import warnings

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import dtype_kind, op_error, require_floating
from ..devices import xp_of
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor
from . import creation as C, elementwise as E
from ._checks import whole as _whole
from ._decl import Sample, TensorSpec, composite, rand
from .joining import narrow, t
from .linalg import mm
from .nn import loss as _loss
from .nn._common import np_dtype as _np_dtype

__all__ = []


# ------------------------------------------------------------------ out=
def write_out(name, result, out):
    """PyTorch's ``out=``: ``result`` copied into ``out`` (resized if its shape differs,
    cast if the result's dtype can be cast to out's kind), ``out`` returned. Refused
    when recording (out= does not differentiate) or for a lossy cast."""
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           f"automatic differentiation, but one of the arguments requires grad.")
    rk, ok = result.dtype.np.kind, out.dtype.np.kind
    order = "biuf"
    if order.index(rk if rk in order else "f") > order.index(ok if ok in order else "f"):
        raise RuntimeError(f"{name}(): result type {result.dtype} can't be cast to the desired "
                           f"output type {out.dtype}")
    if tuple(out.shape) != tuple(result.shape):  # resized, its old data discarded
        if out.numel():  # (PyTorch's warning: resizing a non-empty out is deprecated)
            warnings.warn(f"An output with one or more elements was resized since it had "
                          f"shape {list(out.shape)}, which does not match the required "
                          f"output shape {list(result.shape)}. This behavior is deprecated, "
                          f"and in a future PyTorch release outputs will not be resized "
                          f"unless they have zero elements (pass an out of zero elements, "
                          f"tg.empty(0), to have it resized quietly).", UserWarning,
                          stacklevel=3)
        out.data = C.empty(tuple(result.shape), dtype=out.dtype, device=out.device)
    out.copy_(result)
    return out


def write_outs(name, results, outs):
    """``out=`` of a function returning several tensors (``max(x, dim)``'s values and
    indices, ``sort``'s): ``outs`` a tuple or list of as many tensors, each written as
    ``write_out``; the result's type (a named tuple) of the ``outs``."""
    if not isinstance(outs, (tuple, list)) or len(outs) != len(results):
        raise TypeError(f"{name}(): argument 'out' must be a tuple of {len(results)} Tensors, "
                        f"not {type(outs).__name__}" + (f" of {len(outs)}" if isinstance(
                            outs, (tuple, list)) else ""))
    written = [write_out(name, r, o) for r, o in zip(results, outs)]
    return type(results)(*written) if hasattr(results, "_fields") else tuple(written)


# ------------------------------------------------------------------ methods
def _new(fill):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kw):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        if fill == "full":
            size, value = size[0], size[1]
            size = tuple(size) if isinstance(size, (tuple, list)) else (size,)
            t = C.full(size, value, dtype=dtype or self.dtype, device=device or self.device)
        else:
            make = C.zeros if fill == 0 else C.ones if fill == 1 else C.empty
            t = make(size, dtype=dtype or self.dtype, device=device or self.device)
        if requires_grad:
            t.requires_grad_(True)
        return t
    method.__name__ = "new_" + {0: "zeros", 1: "ones", "e": "empty", "full": "full"}[fill]
    return method


def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    """A new tensor of ``data`` with this tensor's dtype and device by default."""
    if isinstance(data, Tensor):
        data = data.detach()
    return C.tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                    requires_grad=requires_grad)


_LEGACY = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
           "bfloat16": "BFloat16Tensor",
           "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
           "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}


def type_(self, dtype=None, non_blocking=False, **kwargs):
    """``t.type()``: PyTorch's type string (``'torch.FloatTensor'``); ``t.type(dtype)``
    (a dtype, a legacy class such as ``tg.FloatTensor``, or its string): a cast."""
    if dtype is None:
        name = _LEGACY.get(self.dtype.name, "Tensor")
        return f"torch.{'cuda.' if self.device.type == 'cuda' else ''}{name}"
    if isinstance(dtype, str):
        key = dtype.rsplit(".", 1)[-1]
        by_name = {v: k for k, v in _LEGACY.items()}
        if key not in by_name:
            raise ValueError(f"type: invalid type: {dtype!r}")
        dtype = getattr(_dt, by_name[key])
    else:
        dtype = getattr(dtype, "dtype", dtype)  # a legacy class: its dtype
    return C.to(self, dtype=dtype)


def _format(self, spec):
    """``format(t, '+.2f')``: a 0-d tensor formats as its number (PyTorch's rule)."""
    if self.ndim == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _false(self):
    return False


_FLAGS = ("is_xpu", "is_mps", "is_meta", "is_sparse", "is_sparse_csr", "is_quantized",
          "is_mkldnn", "is_vulkan", "is_ipu", "is_hpu", "is_mtia", "is_nested", "is_maia")


TABLE = dict({"t": t, "mm": mm, "narrow": narrow, "new_zeros": _new(0), "new_ones": _new(1),
              "new_empty": _new("e"), "new_full": _new("full"), "new_tensor": new_tensor,
              "type": type_, "__format__": _format},
             **{f: property(_false) for f in _FLAGS})


# ------------------------------------------------------------------ losses, dropout2d
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = input -
    target``); ``beta=0`` is ``l1_loss``, as PyTorch."""
    reduction = _loss._reduction("smooth_l1_loss", size_average, reduce, reduction)
    if beta < 0:
        raise op_error("smooth_l1_loss", "smooth_l1_loss does not support negative values "
                                         "for beta.", RuntimeError)
    if beta == 0:
        return _loss.l1_loss(input, target, reduction=reduction)
    _loss._same_shape("smooth_l1_loss", input, target)
    input, target = _bool_as_number(input, target)
    d = input - target
    z = E.abs(d)
    loss = E.where(z < beta, (0.5 / beta) * d * d, z - 0.5 * beta)
    return _loss._reduce("smooth_l1_loss", loss, reduction)


def _bool_as_number(input, target):
    """A bool operand computes as 0/1 in the other's dtype (as PyTorch's losses)."""
    if dtype_kind(input) == "b":
        input = input.to(target.dtype if dtype_kind(target) not in ("b", None)
                         else _dt.get_default_dtype())
    if dtype_kind(target) == "b":
        target = target.to(input.dtype)
    return input, target


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 d**2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, as PyTorch."""
    if delta <= 0:
        raise op_error("huber_loss", f"huber_loss does not support non-positive values for "
                                     f"delta, got {delta}", RuntimeError)
    _loss._same_shape("huber_loss", input, target)
    require_floating("huber_loss", input, cls=RuntimeError)
    input, target = _bool_as_number(input, target)
    d = input - target
    z = E.abs(d)
    loss = E.where(z < delta, 0.5 * d * d, delta * (z - 0.5 * delta))
    if weight is not None:
        loss = loss * weight
    return _loss._reduce("huber_loss", loss, reduction)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels (dim 1 of ``(N, C, H, W)``, or of ``(N, C, L)`` as PyTorch
    reads a 3-D input) with probability ``p``, scaling the rest by ``1/(1-p)``; drawn
    from tapegrad's seeded generator."""
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout2d", f"dropout probability has to be between 0 and 1, but "
                                    f"got {p}")
    if not training or p == 0.0:
        return input
    if input.ndim < 2:
        raise op_error("dropout2d", f"expects a 3-D (N, C, L) or 4-D (N, C, H, W) input, "
                                    f"got {input.ndim}-D", RuntimeError)
    require_floating("dropout2d", input, cls=RuntimeError)
    # an example's shape and dtype (inside vmap, randomness="same": one mask for all)
    xs, dt = tuple(input.shape), _np_dtype(input)
    xp = xp_of(_whole(input))
    _devices.check_alloc("dropout2d", xs, dt)  # the output, before drawing
    shape = xs[:2] + (1,) * (len(xs) - 2)
    if p == 1.0:
        mask = xp.zeros(shape, dtype=dt)
    else:
        mask = C.draw_step(dist="scaled_keep", shape=shape, dtype=np.dtype(dt),
                           device=input.device, low=float(p))
        if mask is None:
            keep = C.generator().random(shape) >= p
            mask = xp.asarray((keep / (1.0 - p)).astype(dt))
    if inplace:
        input.mul_(mask if isinstance(mask, Tensor) else Tensor(mask))
        return input
    return input * mask


# ------------------------------------------------------------------ in the registry
def _pointwise_loss_infer(name, check):
    def infer(x, target, *args, reduction="mean", **kw):
        check(kw)
        shape = tuple(x.shape) if tuple(x.shape) == tuple(target.shape) else \
            _loss.broadcast_shapes(name, tuple(x.shape), tuple(target.shape))
        return TensorSpec(_loss._reduced(name, shape, reduction),
                          np.result_type(np.dtype(x.dtype), np.dtype(target.dtype)))
    return infer


def _check_beta(kw):
    if kw.get("beta", 1.0) < 0:
        raise op_error("smooth_l1_loss", "smooth_l1_loss does not support negative values "
                                         "for beta.", RuntimeError)


def _check_delta(kw):
    if kw.get("delta", 1.0) <= 0:
        raise op_error("huber_loss", f"huber_loss does not support non-positive values for "
                                     f"delta, got {kw.get('delta')}", RuntimeError)


def _loss_samples(key):
    def samples(dtype=np.float64):
        x, y = rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2)
        return [Sample((x, y), {}), Sample((x, y), {"reduction": "none", key: 0.7})]
    return samples


def _torch_huber(torch, x, y, reduction="mean", delta=1.0):
    """PyTorch's formula for huber_loss (its huber_loss_backward has no forward mode,
    which the registry's forward-over-reverse test runs)."""
    d = x - y
    z = d.abs()
    loss = torch.where(z < delta, 0.5 * d * d, delta * (z - 0.5 * delta))
    return {"mean": loss.mean, "sum": loss.sum}.get(reduction, lambda: loss)()


for _fn, _key, _check, _autocast in ((smooth_l1_loss, "beta", _check_beta, "fp32"),
                                     (huber_loss, "delta", _check_delta, {"cuda": "fp32"})):
    composite(_fn, autocast=_autocast, infer=_pointwise_loss_infer(_fn.__name__, _check),
              args=("input", "target"), samples=_loss_samples(_key),
              error_samples=(lambda k: lambda: [((rand((3, 4)), rand((5,))), {}, ValueError),
                                                ((rand((3,)), rand((3,))), {k: -1.0},
                                                 RuntimeError)])(_key),
              torch=(lambda n: lambda torch, x, y, **kw: getattr(torch.nn.functional, n)(
                  x, y, **kw))(_fn.__name__) if _fn is smooth_l1_loss else _torch_huber)


def _dropout2d_infer(x, p=0.5, training=True, inplace=False):
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout2d", f"dropout probability has to be between 0 and 1, but "
                                    f"got {p}")
    if training and p > 0.0 and len(x.shape) < 2:
        raise op_error("dropout2d", f"expects a 3-D (N, C, L) or 4-D (N, C, H, W) input, "
                                    f"got {len(x.shape)}-D", RuntimeError)
    return TensorSpec(tuple(x.shape), x.dtype)


def _dropout2d_draw(g, x, p=0.5, training=True, inplace=False):
    """The channel mask the generator draws next, as ``dropout2d`` draws it."""
    if not training or p == 0.0:
        return x
    shape = x.shape[:2] + (1,) * (x.ndim - 2)
    if p == 1.0:
        return np.zeros_like(x)
    return x * ((g.random(shape) >= p) / (1.0 - p)).astype(x.dtype)


# a random mask: checked against the generator's next draw (forward-only sample)
composite(dropout2d, infer=_dropout2d_infer,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 4, 3, 3), dtype),), {"p": 0.5}, False),
              Sample((rand((2, 3, 4), dtype),), {"p": 0.3, "training": False})],
          error_samples=lambda: [((rand((2, 3, 4)),), {"p": 1.5}, ValueError),
                                 ((rand((3,)),), {"p": 0.5}, RuntimeError)],
          reference=C._next_draw(_dropout2d_draw))



del _fn, _key, _check
