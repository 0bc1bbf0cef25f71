"""Normalization: group_norm (a registered op); layer_norm and batch_norm, composites
(biased variance to normalize; batch_norm's running variance is updated unbiased, as PyTorch);
instance_norm, local_response_norm and rms_norm (composites, PyTorch's formulas). A
bfloat16/float16 input with float32 parameters normalizes in float32 and keeps its
dtype, as PyTorch's CPU mixed-type norms (``_mixed``)."""
import numpy as np

from ... import dtypes as _dt, tape as _tape
from ..._util import op_error, require_floating
from ...devices import cuda as _cuda, cuda_kernels as _cuda_kernels, xp_of
from ...dispatch import bind
from ...dtypes import is_float as _isf
from ...grad_mode import no_grad
from ...tensor import Tensor, buffer, wrap
from .. import _vmap
from .._decl import Sample, TensorSpec, composite, rand, register
from ..creation import _next_draw, generator  # noqa: F401
from ..elementwise import rsqrt
from ..reduce import mean
from ..shape import pad as _pad, reshape, squeeze
from ._common import (
    need_float,
    need_floating as _need_floating,
    np_dtype,
    raw,
    same_infer as _same_infer,
    torch_functional as _torch,
)
from .pool import avg_pool2d


def _mixed(input, *params):
    """PyTorch's mixed-type norms on the CPU: a bfloat16 or float16 ``input`` with
    float32 parameters (a float32 LayerNorm after a Linear under autocast) normalizes
    in float32 and returns the input's dtype; the parameters' gradients stay float32.
    The input's dtype when that applies, else None."""
    ps = [p for p in params if p is not None]
    if not ps or not isinstance(input, Tensor) or np_dtype(input) not in _dt.LOW:
        return None
    if all(isinstance(p, Tensor) and np_dtype(p) == np.float32 for p in ps):
        return input.dtype
    return None


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance)."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    ns = tuple(int(s) for s in normalized_shape)
    require_floating("layer_norm", input)  # PyTorch: no integer or bool kernel
    if not ns or tuple(input.shape[len(input.shape) - len(ns):]) != ns:
        raise op_error("layer_norm", f"normalized_shape {ns} does not match the trailing dims "
                                     f"of input {tuple(input.shape)}", RuntimeError)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise op_error("layer_norm", f"{name} of shape {tuple(p.shape)} must be {ns}",
                           RuntimeError)
    low = _mixed(input, weight, bias)
    if low is not None:
        return layer_norm(input.float(), ns, weight, bias, eps).to(low)
    fast = _gpu_layer_norm(input, len(ns), weight, bias, eps)
    if fast is not None:
        return fast
    dims = tuple(range(len(input.shape) - len(ns), len(input.shape)))
    xc = input - mean(input, dim=dims, keepdim=True)
    out = xc * rsqrt(mean(xc * xc, dim=dims, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    out = out if bias is None else out + bias
    return _tape.name_call(out, input, "NativeLayerNormBackward0")  # (PyTorch's one kernel)


def _gpu_layer_norm(input, ndims, weight, bias, eps):
    """layer_norm by one CUDA row kernel (``devices.cuda_kernels``) when nothing is to
    be recorded: CuPy buffers, plain Tensors, the fast dispatch mode (no Tape, dual
    level, vmap or observer) and no input that requires grad in grad mode. None
    otherwise (the composite runs, and differentiates)."""
    ts = [t for t in (input, weight, bias) if t is not None]
    if any(type(t) is not Tensor for t in ts) or not _cuda.is_cupy(buffer(input)):
        return None
    mode = _tape.state.mode
    if mode not in (_tape.FAST_NO_GRAD, _tape.FAST_RECORD):
        return None
    if mode == _tape.FAST_RECORD and any(t.requires_grad for t in ts):
        return None
    y = _cuda_kernels.layer_norm(buffer(input), ndims, None if weight is None else buffer(weight),
                                 None if bias is None else buffer(bias), float(eps))
    return None if y is None else wrap(y)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalization over dim 1 of (N, C, ...). In training, batch statistics
    normalize and the running ones are updated in place (unbiased variance), as
    PyTorch; otherwise the running statistics normalize."""
    if len(input.shape) < 2:
        raise op_error("batch_norm", f"expected an input of at least 2 dims (N, C, ...), got "
                                     f"{tuple(input.shape)}", RuntimeError)
    require_floating("batch_norm", input)  # PyTorch: no integer or bool kernel
    low = _mixed(input, running_mean, running_var, weight, bias)
    if low is not None:
        return batch_norm(input.float(), running_mean, running_var, weight, bias, training,
                          momentum, eps).to(low)
    C = input.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("batch_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
        if p is not None and np_dtype(p) != np_dtype(input):  # PyTorch: no mixed dtypes
            raise op_error("batch_norm", f"{name} of dtype {np_dtype(p)} must have input's "
                                         f"dtype {np_dtype(input)}", RuntimeError)
    bshape = (1, C) + (1,) * (len(input.shape) - 2)
    dims = (0,) + tuple(range(2, len(input.shape)))
    n = int(np.prod([input.shape[d] for d in dims]))
    if training and n == 0:
        out = input  # nothing to normalize, no statistics to update (PyTorch)
    elif training:
        if n == 1:
            raise op_error("batch_norm", f"expected more than 1 value per channel when "
                                         f"training, got input {tuple(input.shape)}", ValueError)
        mu = mean(input, dim=dims, keepdim=True)
        xc = input - mu
        var = mean(xc * xc, dim=dims, keepdim=True)
        out = xc * rsqrt(var + eps)
        if running_mean is not None or running_var is not None:
            if getattr(input, "_vlevel", None) is not None:  # as PyTorch's vmap refuses it
                raise op_error("batch_norm", "the running statistics cannot be updated inside "
                                             "vmap (every example would write into one "
                                             "tensor): pass None for them, or training=False",
                               RuntimeError)
            _update_running_stats(running_mean, running_var, raw(mu).reshape(C),
                                  raw(var).reshape(C), n, momentum)
    else:
        if running_mean is None or running_var is None:
            raise op_error("batch_norm", "running_mean and running_var are needed when not "
                                         "training", RuntimeError)
        out = (input - reshape(running_mean, bshape)) * rsqrt(reshape(running_var, bshape) + eps)
    if weight is not None:
        out = out * reshape(weight, bshape)
    return out if bias is None else out + reshape(bias, bshape)


def _update_running_stats(running_mean, running_var, mu, var, n, momentum):
    """Moving averages of the batch mean and the unbiased batch variance (of ``n``
    values per channel), in place and unrecorded."""
    with no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mu * momentum)
        if running_var is not None:
            running_var.mul_(1 - momentum).add_(var * (momentum * n / (n - 1)))


# ================================================================ group_norm
def _gn_check(input, weight, bias, num_groups):
    xs = tuple(input.shape)
    if len(xs) < 2:
        raise op_error("group_norm", f"expected an input of at least 2 dims (N, C, ...), got "
                                     f"{xs}", RuntimeError)
    if not _isf(np.dtype(input.dtype)):
        raise op_error("group_norm", f"expected a floating point input, got "
                                     f"{np.dtype(input.dtype)}", TypeError)
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)):
        raise op_error("group_norm", f"num_groups must be an int, got {num_groups!r}",
                       TypeError)
    C = xs[1]
    if num_groups < 1 or C % num_groups:
        raise op_error("group_norm", f"expected the {C} channels of input {xs} to be "
                                     f"divisible by num_groups={num_groups}", RuntimeError)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("group_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
    return C


def _gn_infer(input, weight=None, bias=None, *, num_groups, eps):
    _gn_check(input, weight, bias, num_groups)
    return TensorSpec(tuple(input.shape), np.dtype(input.dtype))


def _gn_kernel(input, weight=None, bias=None, *, num_groups, eps, out=None):
    """``x * scale + shift`` per (sample, channel), scale = rstd * weight and shift =
    bias - mean * scale, as PyTorch's kernel (its NaN/Inf patterns too). With ``out``
    (C-contiguous, apart from the inputs) the centred squares are made in out itself,
    then overwritten by the result."""
    N, C = input.shape[:2]
    xp = xp_of(input)
    if out is not None and (input.size == 0 or not out.flags.c_contiguous or any(
            a is not None and xp.may_share_memory(out, a) for a in (input, weight, bias))):
        out[...] = _gn_kernel(input, weight, bias, num_groups=num_groups, eps=eps)
        return out
    if input.size == 0:
        return input.copy()
    G = num_groups
    xr = input.reshape(N, G, -1)
    mu = xr.mean(axis=2, keepdims=True)
    if out is None:
        xc = xr - mu
        var = (xc * xc).mean(axis=2)
    else:
        sq = out.reshape(N, G, -1)
        xp.subtract(xr, mu, out=sq)
        xp.square(sq, out=sq)
        var = sq.mean(axis=2)
    rstd = 1 / xp.sqrt(var + eps)                       # (N, G)
    scale = xp.repeat(rstd, C // G, axis=1)             # (N, C)
    mean = xp.repeat(mu[:, :, 0], C // G, axis=1)
    if weight is not None:
        scale = scale * weight
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias
    tail = (1,) * (input.ndim - 2)
    if out is None:
        out = input * scale.reshape((N, C) + tail)
    else:
        xp.multiply(input, scale.reshape((N, C) + tail), out=out)
    out += shift.reshape((N, C) + tail)
    return out


def _gn_stats(m, x, G, eps):
    """(xhat, rstd) over (N, G, M), with ops (differentiable again)."""
    N = x.shape[0]
    xr = m.reshape(x, (N, G, -1))
    xc = xr - m.mean(xr, dim=2, keepdim=True)
    rstd = m.rsqrt(m.mean(xc * xc, dim=2, keepdim=True) + eps)
    return xc * rstd, rstd


def _gn_vjp(ctx, g):
    m = ctx.m
    x, w, _ = ctx.inputs
    n = ctx.needs_input_grad
    G, eps = ctx.attrs["num_groups"], ctx.attrs["eps"]
    shape = ctx.shapes[0]
    N, C = shape[:2]
    bshape = (1, C) + (1,) * (len(shape) - 2)
    dims = (0,) + tuple(range(2, len(shape)))
    gx = gw = gb = None
    if n[0] or (len(n) > 1 and n[1]):  # (the bias's gradient reads no saved value)
        xhat, rstd = _gn_stats(m, x, G, eps)
    if n[0]:
        gh = g if w is None else g * m.reshape(w, bshape)
        gh = m.reshape(gh, (N, G, -1))
        gx = rstd * (gh - m.mean(gh, dim=2, keepdim=True)
                     - xhat * m.mean(gh * xhat, dim=2, keepdim=True))
        gx = m.reshape(gx, shape)
    if len(n) > 1 and n[1]:
        gw = m.sum(g * m.reshape(xhat, shape), dim=dims)
    if len(n) > 2 and n[2]:
        gb = m.sum(g, dim=dims)
    return gx, gw, gb


def _gn_jvp(ctx, xt, wt=None, bt=None):
    m = ctx.m
    x, w, _ = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    G, eps = ctx.attrs["num_groups"], ctx.attrs["eps"]
    shape = tuple(x.shape)
    N, C = shape[:2]
    bshape = (1, C) + (1,) * (len(shape) - 2)
    xhat, rstd = _gn_stats(m, x, G, eps)
    out = None
    if xt is not None:
        tr = m.reshape(xt, (N, G, -1))
        tc = tr - m.mean(tr, dim=2, keepdim=True)
        ht = rstd * (tc - xhat * m.mean(xhat * tc, dim=2, keepdim=True))
        out = m.reshape(ht, shape)
        if w is not None:
            out = out * m.reshape(w, bshape)
    if wt is not None:
        term = m.reshape(xhat, shape) * m.reshape(wt, bshape)
        out = term if out is None else out + term
    if bt is not None:
        term = m.broadcast_to(m.reshape(bt, bshape), shape)
        out = term if out is None else out + term
    return (out,)


def _gn_samples(dtype=np.float64):
    r = lambda s, k: rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((2, 6, 3), 1), r((6,), 2), r((6,), 3)), dict(num_groups=3, eps=1e-5)),
            Sample((r((2, 4, 2, 3), 4), None, None), dict(num_groups=2, eps=1e-5)),
            Sample((r((3, 4), 5), r((4,), 6), None), dict(num_groups=1, eps=1e-3)),
            Sample((r((1, 4, 2, 2), 7), r((4,), 8), None), dict(num_groups=4, eps=1e-5))]


def _torch_gn(torch, x, w=None, b=None, *, num_groups, eps):
    return torch.nn.functional.group_norm(x, num_groups, w, b, eps)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_group_norm(b, st):
    a = st.attrs
    shape = b.shape(st, 0)
    dt = b.out_dtype(st)
    G = a["num_groups"]
    x = b.input(st, 0)
    xs = b.node("Shape", [x])
    g = b.reshape(x, [0, G, -1])
    m = b.reduce("ReduceMean", g, [2], True)
    d = b.node("Sub", [g, m])
    v = b.reduce("ReduceMean", b.node("Mul", [d, d]), [2], True)
    y = b.node("Div", [d, b.node("Sqrt", [b.node("Add", [v, b.const(np.asarray(a["eps"], dt))])])])
    y = b.node("Reshape", [y, xs])
    cshape = [shape[1]] + [1] * (len(shape) - 2)
    if b.is_tensor(st, 1):
        y = b.node("Mul", [y, b.reshape(b.input(st, 1), cshape)])
    if b.is_tensor(st, 2):
        y = b.node("Add", [y, b.reshape(b.input(st, 2), cshape)])
    b.node("Identity", [y], [b.output(st)])


class _FlagsCtx:
    """The context with other batched flags (x batched, parameters passed as None)."""
    def __init__(self, ctx, batched):
        self.op, self.attrs, self.m, self.size, self.shapes = (ctx.op, ctx.attrs, ctx.m,
                                                               ctx.size, ctx.shapes)
        self.batched = batched

    def ndim(self, i):
        return len(self.shapes[i])


def _group_norm_vmap(ctx, x, w, b):
    """The normalisation folds the batch into N; batched affine parameters apply after
    it, per example."""
    if not ctx.batched[1] and not (b is not None and ctx.batched[2]):
        return _vmap.nchw_rule(ctx, x, w, b)
    m = ctx.m
    y = _vmap.nchw_rule(_FlagsCtx(ctx, (True, False, False)), x, None, None) if ctx.batched[0] \
        else bind(ctx.op, x, None, None, **ctx.attrs)
    rank = ctx.ndim(0)  # (N, C, ...): the parameters line up with C
    def shaped(p, batched):
        if p is None:
            return None
        c = tuple(p.shape)[-1]
        shape = (1, c) + (1,) * (rank - 2)
        return m.reshape(p, ((ctx.size,) if batched else ()) + shape)
    if w is not None:
        y = y * shaped(w, ctx.batched[1])
    if b is not None:
        y = y + shaped(b, ctx.batched[2])
    return y


GROUP_NORM = register(
    name="group_norm", grad_fn_name="NativeGroupNormBackward0",
    autocast={"cuda": "fp32"}, vmap=_group_norm_vmap, kernel=_gn_kernel,
    infer=_gn_infer, args=("input", "weight", "bias"),
    optional=("weight", "bias"), vjp=_gn_vjp, jvp=_gn_jvp,
    saves={"input": ("input", "weight"), "weight": ("input",)},
    promote="same", samples=_gn_samples, torch=_torch_gn,
    error_samples=lambda: [((rand((2, 6, 3)), None, None), dict(num_groups=4, eps=1e-5),
                            RuntimeError),
                           ((rand((6,)), None, None), dict(num_groups=1, eps=1e-5),
                            RuntimeError),
                           ((rand((2, 6)), rand((5,)), None), dict(num_groups=2, eps=1e-5),
                            RuntimeError),
                           ((rand((2, 6)), None, None), dict(num_groups=2.0, eps=1e-5),
                            TypeError)], onnx=_onnx_group_norm)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Group normalization (Wu and He): the channels of an (N, C, ...) input split into
    ``num_groups`` groups, each normalized over its channels and positions (biased
    variance), then the per-channel affine ``weight``, ``bias``; as
    ``torch.nn.functional.group_norm``."""
    need_float("group_norm", input=input, weight=weight, bias=bias)
    low = _mixed(input, weight, bias)
    if low is not None:
        return group_norm(input.float(), num_groups, weight, bias, eps).to(low)
    return bind(GROUP_NORM, input, weight, bias, num_groups=num_groups, eps=float(eps))


# ---------------------------------------------------------------- in the registry
def _layer_norm_infer(x, weight=None, bias=None, *, normalized_shape, eps=1e-5):
    ns = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else \
        tuple(int(s) for s in normalized_shape)
    if not _isf(np.dtype(x.dtype)):
        raise op_error("layer_norm", f"expected a floating point input, got {np.dtype(x.dtype)}",
                       TypeError)
    if not ns or tuple(x.shape[len(x.shape) - len(ns):]) != ns:
        raise op_error("layer_norm", f"normalized_shape {ns} does not match the trailing dims "
                                     f"of input {tuple(x.shape)}", RuntimeError)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise op_error("layer_norm", f"{name} of shape {tuple(p.shape)} must be {ns}",
                           RuntimeError)
    return TensorSpec(tuple(x.shape), x.dtype)


# the op's inputs (input, weight, bias) by name, normalized_shape an attribute
composite(layer_norm, widen=True, autocast={"cuda": "fp32"}, infer=_layer_norm_infer,
          args=("input", "weight", "bias"),
          optional=("weight", "bias"), by_name=True,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 4), dtype, seed=1), rand((4,), dtype, seed=2),
                      rand((4,), dtype, seed=3)), {"normalized_shape": (4,)}),
              Sample((rand((2, 3, 4), dtype, seed=4),), {"normalized_shape": (3, 4), "eps": 1e-3})],
          error_samples=lambda: [((rand((2, 3)),), {"normalized_shape": (2,)}, RuntimeError),
                                 ((rand((2, 3)), rand((2,))), {"normalized_shape": (3,)},
                                  RuntimeError)],
          torch=lambda torch, x, weight=None, bias=None, *, normalized_shape, **kw:
              torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, **kw))


def _batch_norm_infer(x, running_mean, running_var, weight=None, bias=None, training=False,
                      momentum=0.1, eps=1e-5):
    if len(x.shape) < 2:
        raise op_error("batch_norm", f"expected an input of at least 2 dims (N, C, ...), got "
                                     f"{tuple(x.shape)}", RuntimeError)
    if not _isf(np.dtype(x.dtype)):
        raise op_error("batch_norm", f"expected a floating point input, got {np.dtype(x.dtype)}",
                       TypeError)
    C = x.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("batch_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
    if not training and (running_mean is None or running_var is None):
        raise op_error("batch_norm", "running_mean and running_var are needed when not "
                                     "training", RuntimeError)
    return TensorSpec(tuple(x.shape), x.dtype)


def _batch_norm_samples(dtype=np.float64):
    C = 3
    rm, rv = rand((C,), dtype, seed=1), rand((C,), dtype, 0.5, 2.0, seed=2)
    w, b = rand((C,), dtype, seed=3), rand((C,), dtype, seed=4)
    # PyTorch does not differentiate the running statistics: that sample is
    # forward-only. (Training with them updates them in place, which vmap refuses, as
    # PyTorch's: tests/training cover it.)
    return [Sample((rand((4, C), dtype, seed=5), None, None, w, b), {"training": True}),
            Sample((rand((2, C, 4), dtype, seed=6), rm, rv, w, b), {"eps": 1e-3}, False),
            Sample((rand((4, C, 2), dtype, seed=7), None, None), {"training": True})]


composite(batch_norm, widen=True, infer=_batch_norm_infer,
          args=("input", "running_mean", "running_var", "weight", "bias"),
          optional=("running_mean", "running_var", "weight", "bias"), by_name=True,
          samples=_batch_norm_samples,
          error_samples=lambda: [((rand((4, 3)), rand((2,)), rand((2,))), {}, RuntimeError),
                                 ((rand((4, 3)), None, None), {}, RuntimeError)],
          torch=lambda torch, x, rm, rv, weight=None, bias=None, **kw:
              torch.nn.functional.batch_norm(x, rm, rv, weight, bias, **kw))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Each (example, channel) normalised over its spatial dims (biased variance);
    with running statistics given, they are updated as PyTorch does (the batch's mean
    of the per-instance means and unbiased variances); ``use_input_stats=False``
    normalises with the running statistics instead."""
    for arg, t in (("weight", weight), ("bias", bias)):
        _need_floating("instance_norm", arg, t)
    low = _mixed(input, running_mean, running_var, weight, bias)
    if low is not None:
        return instance_norm(input.float(), running_mean, running_var, weight, bias,
                             use_input_stats, momentum, eps).to(low)
    if input.ndim < 3:
        raise op_error("instance_norm", f"expected an input of at least 3 dims (N, C, *), got "
                                        f"shape {tuple(input.shape)}", ValueError)
    C = input.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("instance_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
    bshape = (1, C) + (1,) * (input.ndim - 2)
    dims = tuple(range(2, input.ndim))
    if use_input_stats:
        n = int(np.prod(input.shape[2:]))
        if n <= 1:
            raise op_error("instance_norm", f"Expected more than 1 spatial element when "
                                            f"training, got input size {tuple(input.shape)}",
                           ValueError)
        mu = mean(input, dim=dims, keepdim=True)
        xc = input - mu
        var = mean(xc * xc, dim=dims, keepdim=True)
        out = xc * rsqrt(var + eps)
        if running_mean is not None or running_var is not None:
            with no_grad():
                m = mu.detach().reshape((input.shape[0], C))
                v = var.detach().reshape((input.shape[0], C)) * (n / (n - 1))
                if running_mean is not None:
                    running_mean.copy_(running_mean * (1 - momentum) + mean(m, 0) * momentum)
                if running_var is not None:
                    running_var.copy_(running_var * (1 - momentum) + mean(v, 0) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise op_error("instance_norm", "Expected running_mean and running_var to be "
                                            "defined when use_input_stats is false",
                           RuntimeError)
        out = (input - reshape(running_mean, bshape)) * rsqrt(reshape(running_var, bshape) + eps)
    if weight is not None:
        out = out * reshape(weight, bshape)
    if bias is not None:
        out = out + reshape(bias, bshape)
    return out


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``x / (k + alpha * mean of x^2 over size neighbouring channels)^beta`` (PyTorch's
    formula: the window padded with zeros, averaged over ``size``)."""
    if input.ndim < 3:
        raise op_error("local_response_norm", f"Expected 3D or higher dimensionality input "
                                              f"(got {input.ndim} dimensions)", ValueError)
    if input.numel() == 0:
        return input
    s = tuple(input.shape)
    div = reshape(input * input, (s[0], 1, s[1], -1))
    div = _pad(div, (0, 0, size // 2, (size - 1) // 2))
    div = squeeze(avg_pool2d(div, (size, 1), stride=1), 1)
    div = reshape(div, s)
    return input / (div * alpha + k) ** beta


def _eps_of(x):
    """``torch.finfo(x.dtype).eps`` for a tapegrad or torch tensor."""
    name = str(x.dtype)
    for bits, dt in (("16", np.float16), ("32", np.float32), ("64", np.float64)):
        if bits in name:
            return float(np.finfo(dt).eps)
    return float(np.finfo(np.float32).eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2 over the last dims) + eps) * weight``; ``eps`` None: the
    dtype's machine epsilon, as PyTorch."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(ns):]) != ns or len(ns) > input.ndim:
        raise op_error("rms_norm", f"Given normalized_shape={list(ns)}, expected input with "
                                   f"shape [*, {', '.join(map(str, ns))}], but got input of "
                                   f"size{list(input.shape)}", RuntimeError)
    if weight is not None and tuple(weight.shape) != ns:
        raise op_error("rms_norm", f"weight of shape {tuple(weight.shape)} must be {ns}",
                       RuntimeError)
    low = _mixed(input, weight)
    if low is not None:
        return rms_norm(input.float(), ns, weight, _eps_of(input) if eps is None else eps).to(low)
    e = _eps_of(input) if eps is None else eps
    dims = tuple(range(input.ndim - len(ns), input.ndim))
    out = input * rsqrt(mean(input * input, dim=dims, keepdim=True) + e)
    return out * weight if weight is not None else out


# ------------------------------------------------------------------ the registry
composite(instance_norm, widen=True, infer=_same_infer,
          args=("input", "running_mean", "running_var", "weight", "bias"),
          by_name=True, optional=("running_mean", "running_var", "weight", "bias"),
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 5), dtype), None, None, None, None), {}),
              Sample((rand((2, 3, 4, 4), dtype), None, None, rand((3,), dtype, seed=1),
                      rand((3,), dtype, seed=2)), {"eps": 1e-3}),
              Sample((rand((2, 3, 5), dtype), rand((3,), dtype, seed=3),
                      rand((3,), dtype, 0.5, 1.5, seed=4), None, None),
                     {"use_input_stats": False}, False)],
          error_samples=lambda: [((rand((2, 3)), None, None, None, None), {}, ValueError)],
          torch=_torch("instance_norm"))
composite(local_response_norm, infer=_same_infer,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 4, 3, 3), dtype),), {"size": 3}),
              Sample((rand((2, 5, 4), dtype),), {"size": 2, "alpha": 0.1, "beta": 0.5,
                                                 "k": 2.0})],
          error_samples=lambda: [((rand((2, 4)),), {"size": 3}, ValueError)],
          torch=_torch("local_response_norm"))
composite(rms_norm, widen=True, autocast={"cuda": "fp32"}, infer=_same_infer,
          args=("input", "weight"),
          optional=("weight",),
          by_name=True,
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 4), dtype), None), {"normalized_shape": (4,)}),
              Sample((rand((2, 3, 4), dtype), rand((3, 4), dtype, seed=1)),
                     {"normalized_shape": (3, 4), "eps": 1e-3})],
          error_samples=lambda: [((rand((2, 3, 4)), None), {"normalized_shape": (3,)},
                                  RuntimeError)],
          torch=lambda torch, x, w, **kw: torch.nn.functional.rms_norm(x, weight=w, **kw))
