"""The activations of ``nn.functional``: softmax and log_softmax (registered ops,
max-shifted, so large inputs do not overflow), and composites of elementwise ops (so
every order differentiates, forward mode and vmap come with them): celu, selu,
hardshrink, hardsigmoid, hardswish, hardtanh, relu6, softshrink, softsign, tanhshrink,
threshold, glu, softmin, prelu, rrelu (its training slopes from tapegrad's generator)
and gumbel_softmax (its noise from the generator, checked against its next draw).

Each composite computes with the registry's functions only (no dtype internals), so
the PyTorch export runs it on torch.Tensors too. A function of PyTorch's with an
``inplace=`` flag takes it in ``tg.nn.functional``, over these.
"""
import numpy as np

from ..._util import NoKernelError, normalize_dim, op_error
from ...devices import cuda as _cuda, cuda_kernels as _cuda_kernels, xp_of
from ...dispatch import bind
from ...dtypes import is_float as _isf
from .. import _vmap
from .._checks import whole as _whole
from .._decl import Sample, TensorSpec, away_from, composite, rand, rand as _rand, register
from ..creation import _next_draw, draw_step, generator
from ..elementwise import abs as _abs, clamp, expm1, log, mul, sigmoid, tanh, where
from ..shape import reshape
from . import softmax_rows as _fused_rows
from ._common import (
    need_floating as _need_floating,
    np_dtype as _np_dtype,
    same_infer as _same_infer,
)


def _softmax_infer(name):
    def infer(x, dim):
        normalize_dim(name, dim, len(x.shape))
        if not _isf(np.dtype(x.dtype)):
            raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}",
                           NoKernelError)  # NotImplementedError as PyTorch's, TypeError
        return TensorSpec(tuple(x.shape), x.dtype)
    return infer


def _numpy_into(x, out):
    """Whether NumPy's passes can write into ``out`` directly (the arithmetic of the
    kernel without ``out``, the row sums as a GEMV: rounded in another order)."""
    return (type(x) is np.ndarray and type(out) is np.ndarray and x.size
            and x.dtype == out.dtype and _isf(x.dtype) and x.shape == out.shape
            and not np.may_share_memory(x, out))


def _sum_rows(e, dim):
    """``e.sum(dim, keepdims=True)``: over the last axis of a contiguous array one GEMV
    with a ones vector (NumPy's reduction over short rows is ~4x slower)."""
    if dim % e.ndim == e.ndim - 1 and e.flags.c_contiguous and e.ndim > 1:
        n = e.shape[-1]
        return np.matmul(e.reshape(-1, n), np.ones(n, e.dtype)).reshape(e.shape[:-1] + (1,))
    return np.sum(e, axis=dim, keepdims=True)


def _log_sum_exp_rows(z):
    """``z -= log(exp(z).sum(1))`` row by row, in place, the exponentials of at most
    an eighth of the rows at a time in a scratch buffer (nothing of ``z``'s size)."""
    rows, n = z.shape
    step = max(1, min(rows // 8, (1 << 16) // n))
    scratch = np.empty((min(step, rows), n), z.dtype)
    ones = np.ones(n, z.dtype)
    lse = np.empty(rows, z.dtype)
    for r in range(0, rows, step):
        blk = z[r:r + step]
        e = scratch[:len(blk)]
        np.exp(blk, out=e)
        np.matmul(e, ones, out=lse[r:r + step])
    np.log(lse, out=lse)
    np.subtract(z, lse[:, None], out=z)


def _rows_fused(x, dim, out, log):
    """The fused row kernels (``softmax_rows.py``) into ``out`` (a
    fresh array where it is None or does not fit); None where they do not apply."""
    if not _fused_rows.applies(x, dim):
        return None
    ks = _fused_rows.kernels(x.dtype)
    if ks is None:
        return None
    if not (type(out) is np.ndarray and out.dtype == x.dtype and out.shape == x.shape
            and out.flags.c_contiguous and out.flags.writeable
            and (out is x or not np.may_share_memory(out, x))):
        if out is not None:
            out[...] = _rows_fused(x, dim, None, log)
            return out
        out = np.empty_like(x)
    _fused_rows.run(ks[0], x, out, log=log)  # (in place when out is x: row by row)
    return out


def _c_order(y):
    """``y`` row-major (PyTorch's softmax and log_softmax write their results so,
    whatever the input's layout)."""
    return y if y.flags.c_contiguous else xp_of(y).ascontiguousarray(y)


def _log_softmax_kernel(x, dim, out=None):
    if out is None:
        return _c_order(_log_softmax_into(x, dim))
    return _log_softmax_into(x, dim, out)


def _log_softmax_into(x, dim, out=None):
    y = _rows_fused(x, dim, out, True)
    if y is not None:
        return y
    if out is not None:
        if _numpy_into(x, out) and dim % x.ndim == x.ndim - 1 and out.flags.c_contiguous:
            np.subtract(x, np.max(x, axis=dim, keepdims=True), out=out)
            _log_sum_exp_rows(out.reshape(-1, x.shape[-1]))
        else:
            out[...] = _log_softmax_kernel(x, dim)
        return out
    if _cuda.is_cupy(x):  # one CUDA row kernel over the last dim (None: the array code)
        y = _cuda_kernels.softmax(x, dim, log=True)
        if y is not None:
            return y
    mx = np.max(x, axis=dim, keepdims=True) if x.size else 0
    shifted = x - mx
    return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


def _rows_vjp(y, g, dim, log):
    """The fused backward row pass on raw arrays, or None where it does not apply."""
    if type(g) is not np.ndarray or g.dtype != y.dtype or g.shape != y.shape or \
            not g.flags.c_contiguous or not _fused_rows.applies(y, dim):
        return None
    ks = _fused_rows.kernels(y.dtype)
    if ks is None:
        return None
    out = np.empty_like(y)
    _fused_rows.run(ks[1], y, g, out, log=log)
    return (out,)


def _log_softmax_vjp(ctx, g):
    m = ctx.m
    dim = ctx.attrs["dim"]
    fused = _rows_vjp(ctx.out, g, dim, True)
    if fused is not None:
        return fused
    return (g - m.exp(ctx.out) * m.sum(g, dim=dim, keepdim=True),)


def _softmax_samples(dtype=np.float64):
    return [Sample((_rand((3, 5), dtype, seed=1),), {"dim": 1}),
            Sample((_rand((2, 3, 4), dtype, seed=2),), {"dim": 0}),
            Sample((_rand((4,), dtype, seed=3) * 40,), {"dim": 0})]


def _log_softmax_jvp(ctx, t):
    m = ctx.m
    return (t - m.sum(m.exp(ctx.out) * t, dim=ctx.attrs["dim"], keepdim=True),)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_softmax(op_type):
    def lower(b, st):
        shape = b.shape(st, 0)
        x = b.input(st, 0, b.out_dtype(st))
        if not shape:
            x = b.unsqueeze(x, [0])
            y = b.node(op_type, [x], axis=0)
            b.squeeze(y, [0], [b.output(st)])
            return
        b.node(op_type, [x], [b.output(st)], axis=int(st.attrs.get("dim", -1)) % len(shape))
    return lower


LOG_SOFTMAX = register(name="log_softmax", autocast={"cuda": "fp32_unless_dtype"},
                       vmap=_vmap.dim_attrs(), jvp=_log_softmax_jvp, kernel=_log_softmax_kernel,
                       infer=_softmax_infer("log_softmax"), vjp=_log_softmax_vjp, saves=("out",),
                       samples=_softmax_samples,
                       error_samples=lambda: [((_rand((3, 4)),), {"dim": 2}, IndexError)],
                       torch=lambda torch, x, dim: torch.log_softmax(x, dim),
                       onnx=_onnx_softmax("LogSoftmax"))


def _softmax_kernel(x, dim, out=None):
    if out is None:
        return _c_order(_softmax_into(x, dim))
    return _softmax_into(x, dim, out)


def _softmax_into(x, dim, out=None):
    y = _rows_fused(x, dim, out, False)
    if y is not None:
        return y
    if out is not None:
        if _numpy_into(x, out):
            np.subtract(x, np.max(x, axis=dim, keepdims=True), out=out)
            np.exp(out, out=out)
            np.divide(out, _sum_rows(out, dim), out=out)
        else:
            out[...] = _softmax_kernel(x, dim)
        return out
    if _cuda.is_cupy(x):
        y = _cuda_kernels.softmax(x, dim, log=False)
        if y is not None:
            return y
    mx = np.max(x, axis=dim, keepdims=True) if x.size else 0
    e = np.exp(x - mx)
    return e / np.sum(e, axis=dim, keepdims=True)


def _softmax_vjp(ctx, g):
    out = ctx.out
    fused = _rows_vjp(out, g, ctx.attrs["dim"], False)
    if fused is not None:
        return fused
    gy = g * out
    return (gy - out * ctx.m.sum(gy, dim=ctx.attrs["dim"], keepdim=True),)


def _softmax_jvp(ctx, t):
    m = ctx.m
    out = ctx.out
    return (out * (t - m.sum(out * t, dim=ctx.attrs["dim"], keepdim=True)),)


SOFTMAX = register(name="softmax", autocast={"cuda": "fp32_unless_dtype"}, vmap=_vmap.dim_attrs(),
                   jvp=_softmax_jvp, kernel=_softmax_kernel, infer=_softmax_infer("softmax"),
                   vjp=_softmax_vjp, saves=("out",), samples=_softmax_samples,
                   error_samples=lambda: [((_rand((3, 4)),), {"dim": -3}, IndexError)],
                   torch=lambda torch, x, dim: torch.softmax(x, dim), onnx=_onnx_softmax("Softmax"))


def _dim_of(name, input, dim):
    if dim is None:
        nd = len(input.shape)
        dim = 0 if nd in (0, 1, 3) else 1  # PyTorch's legacy implicit choice
    return normalize_dim(name, dim, len(input.shape))


def log_softmax(input, dim=None, dtype=None):
    """``log(softmax(input))`` computed stably (max-shifted)."""
    if dtype is not None:
        input = input.to(dtype)
    return bind(LOG_SOFTMAX, input, dim=_dim_of("log_softmax", input, dim))


def softmax(input, dim=None, dtype=None):
    """``exp(input)`` normalised to sum 1 along ``dim``, computed max-shifted."""
    if dtype is not None:
        input = input.to(dtype)
    return bind(SOFTMAX, input, dim=_dim_of("softmax", input, dim))


def _floating(name, x):
    """PyTorch's refusal of an integer or bool input (works on torch.Tensors too)."""
    if hasattr(x, "is_floating_point") and not x.is_floating_point():
        raise op_error(name, f"not implemented for {x.dtype} input (a floating point input "
                             f"is expected)", NotImplementedError)


def _not_bool(name, x):
    """PyTorch's refusal of a bool input where integers compute."""
    if hasattr(x, "dtype") and "bool" in str(x.dtype):
        raise op_error(name, f"not implemented for {x.dtype} input", NotImplementedError)


def celu(input, alpha=1.0):
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``."""
    _floating("celu", input)
    if alpha == 0:
        raise op_error("celu", "ZeroDivisionError: alpha cannot be 0 for CELU", RuntimeError)
    return where(input > 0, input, alpha * expm1(clamp(input, max=0.0) / alpha))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input):
    """``scale (max(0, x) + min(0, alpha (exp(x) - 1)))`` with PyTorch's constants."""
    _floating("selu", input)
    return _SELU_SCALE * where(input > 0, input, _SELU_ALPHA * expm1(clamp(input, max=0.0)))


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0."""
    _floating("hardshrink", input)
    return where(_abs(input) <= lambd, 0.0, input)  # NaN stays NaN, as PyTorch


def hardsigmoid(input):
    """``clamp(x / 6 + 1/2, 0, 1)``."""
    _floating("hardsigmoid", input)
    return clamp(input / 6.0 + 0.5, 0.0, 1.0)


def hardswish(input):
    """``x * clamp(x + 3, 0, 6) / 6``."""
    _floating("hardswish", input)
    return input * clamp(input + 3.0, 0.0, 6.0) / 6.0


def hardtanh(input, min_val=-1.0, max_val=1.0):
    """``clamp(x, min_val, max_val)`` (integer inputs too, as PyTorch; not bool)."""
    _not_bool("hardtanh", input)
    if min_val > max_val:
        raise op_error("hardtanh", f"min_val cannot be greater than max_val, got "
                                   f"{min_val} > {max_val}", ValueError)
    if hasattr(input, "is_floating_point") and not input.is_floating_point():
        # an integer input keeps its dtype: the bounds truncate, as PyTorch's
        return clamp(input, int(min_val), int(max_val))
    return clamp(input, float(min_val), float(max_val))


def relu6(input):
    """``min(max(0, x), 6)``."""
    return hardtanh(input, 0.0, 6.0)


def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    _floating("softshrink", input)
    if lambd < 0:
        raise op_error("softshrink", f"lambda must be greater or equal to 0, but found to be "
                                     f"{lambd}.", RuntimeError)
    return input - clamp(input, -float(lambd), float(lambd))


def softsign(input):
    """``x / (1 + |x|)``."""
    return input / (1 + _abs(input))


def tanhshrink(input):
    """``x - tanh(x)``."""
    return input - tanh(input)


def threshold(input, threshold, value):
    """``x`` where ``x > threshold``, else ``value`` (NaN stays NaN, as PyTorch)."""
    _not_bool("threshold", input)
    return where(input <= threshold, float(value), input)


def glu(input, dim=-1):
    """``a * sigmoid(b)`` for the halves ``a, b`` of ``input`` along ``dim``."""
    _floating("glu", input)
    if input.ndim == 0:
        raise op_error("glu", "glu does not support scalars because halving size must be "
                              "even", RuntimeError)
    d = normalize_dim("glu", dim, input.ndim)
    n = input.shape[d]
    if n % 2:
        raise op_error("glu", f"Halving dimension must be even, but dimension {d} is size {n}",
                       RuntimeError)
    a = input.narrow(d, 0, n // 2)
    b = input.narrow(d, n // 2, n // 2)
    return a * sigmoid(b)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-x, dim)``."""
    if dtype is not None:
        input = input.to(dtype)
    return softmax(-input, dim)


def _channel_view(name, input, weight):
    """``weight`` shaped to broadcast over ``input``'s channel dim (dim 1)."""
    n = int(np.prod(tuple(weight.shape))) if len(weight.shape) else 1
    if weight.ndim > 1:
        raise op_error(name, f"weight must be a 1-D tensor (or a scalar), got shape "
                             f"{tuple(weight.shape)}", RuntimeError)
    if n == 1:
        return weight
    c = input.shape[1] if input.ndim >= 2 else 1
    if n != c:
        raise op_error(name, f"Mismatch of parameter numbers and input channel size. Found "
                             f"parameter numbers = {n} and channel size = {c}.", RuntimeError)
    return reshape(weight, (c,) + (1,) * (input.ndim - 2))


def prelu(input, weight):
    """``max(0, x) + weight * min(0, x)``, ``weight`` one slope or one per channel (dim 1)."""
    _floating("prelu", input)
    _floating("prelu", weight)
    w = _channel_view("prelu", input, weight)
    return where(input > 0, input, w * input)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """Randomized leaky ReLU: in training each negative element's slope drawn from
    U(lower, upper) (tapegrad's generator), otherwise the slope ``(lower + upper) / 2``."""
    _floating("rrelu", input)
    if lower > upper:
        raise op_error("rrelu", f"lower bound should be less than or equal to the upper "
                                f"bound, got lower={lower} > upper={upper}", RuntimeError)
    if not training:
        return where(input >= 0, input, input * ((lower + upper) / 2.0))
    a = draw_step(dist="between", shape=tuple(input.shape), dtype=_np_dtype(input),
                  device=input.device, low=float(lower), high=float(upper))
    if a is None:
        xp = xp_of(_whole(input))
        slopes = lower + (upper - lower) * generator().random(tuple(input.shape))
        a = xp.asarray(slopes.astype(_np_dtype(input)))
    return where(input >= 0, input, mul(input, a))


# ------------------------------------------------------------------ the registry
def _int_error():
    return [((np.arange(6).reshape(2, 3),), {}, NotImplementedError)]


def _bool_error():
    return [((np.array([[True, False, True]]),), {}, NotImplementedError)]


def _unary(fn, avoid=(0.0,), scale=2.0, attrs=({},), errors=_int_error, torch_fn=None,
           widen=False):
    name = fn.__name__

    def samples(dtype=np.float64):
        out = []
        for k, a in enumerate(attrs):
            x = away_from(rand((3, 4), np.float64, -scale, scale, seed=k), avoid)
            out.append(Sample((x.astype(dtype),), dict(a)))
        return out

    def oracle(torch, x, **kw):
        return getattr(torch.nn.functional, name)(x, **kw)
    composite(fn, infer=_same_infer, samples=samples, torch=torch_fn or oracle,
              error_samples=errors, widen=widen)


_unary(celu, attrs=({}, {"alpha": 0.7}), widen=True,
       errors=lambda: [((rand((2, 3)),), {"alpha": 0.0}, RuntimeError)] + _int_error())
_unary(selu, widen=True)
_unary(hardshrink, avoid=(-0.5, 0.5), attrs=({}, {"lambd": 0.3}))


def _torch_hardsigmoid(torch, x):
    """PyTorch's formula (its hardsigmoid_backward has no forward mode), checked
    against its function."""
    y = torch.clamp(x / 6.0 + 0.5, 0.0, 1.0)
    assert torch.allclose(y.detach(), torch.nn.functional.hardsigmoid(x.detach()))
    return y


_unary(hardsigmoid, avoid=(-3.0, 3.0), scale=4.0, torch_fn=_torch_hardsigmoid)
_unary(hardswish, avoid=(-3.0, 3.0), scale=4.0)
_unary(hardtanh, avoid=(-1.0, 1.0), attrs=({}, {"min_val": -0.5, "max_val": 1.5}),
       errors=lambda: [((rand((2, 3)),), {"min_val": 2.0, "max_val": 1.0}, ValueError)]
       + _bool_error())
_unary(relu6, avoid=(0.0, 6.0), scale=8.0, errors=_bool_error)
_unary(softshrink, avoid=(-0.5, 0.5), attrs=({}, {"lambd": 0.3}),
       errors=lambda: [((rand((2, 3)),), {"lambd": -1.0}, RuntimeError)] + _int_error())
_unary(softsign, errors=lambda: [((rand((2, 3)), 1), {}, TypeError)])
_unary(tanhshrink, errors=lambda: [((rand((2, 3)), 1), {}, TypeError)])
_unary(threshold, avoid=(0.1,), attrs=({"threshold": 0.1, "value": 20.0},),
       errors=lambda: [((rand((2, 3)),), {"threshold": 0.1}, TypeError),
                       ((np.array([[True, False]]),), {"threshold": 0.1, "value": 2.0},
                        NotImplementedError)])


def _glu_infer(x, dim=-1):
    d = normalize_dim("glu", dim, len(x.shape))
    shape = list(x.shape)
    shape[d] //= 2
    return TensorSpec(tuple(shape), x.dtype)


composite(glu, infer=_glu_infer,
          samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype),), {}),
                                            Sample((rand((4, 2, 3), dtype),), {"dim": 0})],
          error_samples=lambda: [((rand((3, 5)),), {}, RuntimeError),
                                 ((rand((3, 4)),), {"dim": 2}, IndexError)],
          torch=lambda torch, x, dim=-1: torch.nn.functional.glu(x, dim))
composite(softmin, infer=_same_infer,
          samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype),), {"dim": 1})],
          error_samples=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError)],
          torch=lambda torch, x, dim=None: torch.nn.functional.softmin(x, dim))
composite(prelu, autocast="lower", infer=_same_infer, args=("input", "weight"),
          samples=lambda dtype=np.float64: [
              Sample((away_from(rand((2, 3, 4)), (0.0,)).astype(dtype),
                      rand((3,), dtype, 0.1, 0.5, seed=3))),
              Sample((away_from(rand((3, 4), seed=1), (0.0,)).astype(dtype),
                      rand((1,), dtype, 0.1, 0.5, seed=4)))],
          error_samples=lambda: [((rand((2, 3, 4)), rand((4,))), {}, RuntimeError)],
          torch=lambda torch, x, w: torch.nn.functional.prelu(x, w))


def _rrelu_draw(g, x, lower=1.0 / 8, upper=1.0 / 3, training=False):
    if not training:
        return np.where(x >= 0, x, x * ((lower + upper) / 2.0))
    a = (lower + (upper - lower) * g.random(x.shape)).astype(x.dtype)
    return np.where(x >= 0, x, x * a)


# training=True draws (checked against the generator's next draw, forward only)
composite(rrelu, infer=_same_infer,
          samples=lambda dtype=np.float64: [
              Sample((away_from(rand((3, 4)), (0.0,)).astype(dtype),), {}),
              Sample((rand((3, 4), dtype, seed=1),), {"training": True}, False)],
          error_samples=_int_error, reference=_next_draw(_rrelu_draw))


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """``softmax((logits + g) / tau)`` with Gumbel noise ``g = -log(E)``, ``E`` exponential
    draws; ``hard``: the one-hot of the argmax, with the soft sample's gradient
    (straight-through)."""
    _need_floating("gumbel_softmax", "logits", logits)
    xp = xp_of(_whole(logits))
    e = generator().exponential(size=tuple(logits.shape))
    g = -log(logits.new_tensor(xp.asarray(e.astype(_np_dtype(logits)))))
    y = softmax((logits + g) / tau, dim)
    if not hard:
        return y
    index = y.argmax(dim, keepdim=True)
    y_hard = y.detach() * 0.0
    y_hard = y_hard.scatter(dim, index, 1.0)
    return y_hard - y.detach() + y
