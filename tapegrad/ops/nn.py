"""Neural-network ops (``tg.nn.functional``): softmax family, losses, conv, ..."""
import numpy as np

from ..devices.cpu_kernels import conv as cpu_conv, pool as cpu_pool
from ..dispatch import bind
from .._util import normalize_dim, op_error
from ._decl import register, Sample, TensorSpec, rand as _rand

__all__ = ["log_softmax", "softmax", "linear", "conv1d", "conv2d", "max_pool2d", "avg_pool2d",
           "adaptive_avg_pool2d", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "layer_norm",
           "batch_norm", "dropout", "embedding", "scaled_dot_product_attention", "one_hot"]


def _softmax_infer(name):
    def infer(x, dim):
        normalize_dim(name, dim, len(x.shape))
        if np.dtype(x.dtype).kind != "f":
            raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}",
                           TypeError)
        return TensorSpec(tuple(x.shape), x.dtype)
    return infer


def _log_softmax_kernel(x, dim):
    if x.dtype.kind != "f":
        raise TypeError("log_softmax: float input expected")
    mx = np.max(x, axis=dim, keepdims=True) if x.size else 0
    shifted = x - mx
    return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


def _log_softmax_vjp(ctx, g):
    m = ctx.m
    dim = ctx.attrs["dim"]
    return (g - m.exp(ctx.out) * m.sum(g, dim=dim, keepdim=True),)


def _softmax_samples(dtype=np.float64):
    return [Sample((_rand((3, 5), dtype, seed=1),), {"dim": 1}),
            Sample((_rand((2, 3, 4), dtype, seed=2),), {"dim": 0}),
            Sample((_rand((4,), dtype, seed=3) * 40,), {"dim": 0})]


LOG_SOFTMAX = register(name="log_softmax", kernel=_log_softmax_kernel,
                       infer=_softmax_infer("log_softmax"), vjp=_log_softmax_vjp, saves=("out",),
                       samples=_softmax_samples,
                       error_samples=lambda: [((_rand((3, 4)),), {"dim": 2}, IndexError)],
                       torch=lambda torch, x, dim: torch.log_softmax(x, dim))


def _softmax_kernel(x, dim):
    if x.dtype.kind != "f":
        raise TypeError("softmax: float input expected")
    mx = np.max(x, axis=dim, keepdims=True) if x.size else 0
    e = np.exp(x - mx)
    return e / np.sum(e, axis=dim, keepdims=True)


def _softmax_vjp(ctx, g):
    out = ctx.out
    gy = g * out
    return (gy - out * ctx.m.sum(gy, dim=ctx.attrs["dim"], keepdim=True),)


SOFTMAX = register(name="softmax", kernel=_softmax_kernel, infer=_softmax_infer("softmax"),
                   vjp=_softmax_vjp, saves=("out",), samples=_softmax_samples,
                   error_samples=lambda: [((_rand((3, 4)),), {"dim": -3}, IndexError)],
                   torch=lambda torch, x, dim: torch.softmax(x, dim))


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
    if dtype is not None:
        input = input.to(dtype)
    return bind(SOFTMAX, input, dim=_dim_of("softmax", input, dim))


# ================================================================ convolution
# conv2d is the one convolution primitive (conv1d runs it with H = 1). Its two
# adjoints are ops of their own so every order differentiates: the input gradient
# is a transposed convolution (col2im), the weight gradient a correlation of the
# input with g, and each one's adjoint is again one of the three.
def _xp(a):
    from .. import devices
    return devices.xp_of(a)


def _as_strided(a, shape, strides):
    return _xp(a).lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def _pair(name, v, what):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v), int(v))
    if isinstance(v, (tuple, list)) and len(v) == 1:
        return (int(v[0]), int(v[0]))
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, (int, np.integer)) for i in v):
        return (int(v[0]), int(v[1]))
    raise op_error(name, f"{what} must be an int or a pair of ints, got {v!r}", TypeError)


def _conv_out(size, k, s, p, d):
    return (size + p[0] + p[1] - d * (k - 1) - 1) // s + 1


def _geom(x_shape, w_shape, stride, padding, dilation):
    """Output (Ho, Wo) and padded (Hp, Wp) for an NCHW input and OIhw weight."""
    (_, _, H, W), (_, _, kh, kw) = x_shape, w_shape
    Ho = _conv_out(H, kh, stride[0], padding[0], dilation[0])
    Wo = _conv_out(W, kw, stride[1], padding[1], dilation[1])
    return Ho, Wo, H + sum(padding[0]), W + sum(padding[1])


def _align(n):
    return (int(n) + 63) // 64 * 64


def _is_padded(padding):
    return any(padding[0]) or any(padding[1])


def _conv_ws(x_shape, w_shape, itemsize, stride, padding, dilation, g_copy=False):
    """Scratch layout: [padded input | im2col columns | (weight grad) per-sample
    weight gradients, summed into the output]."""
    N, C, _, _ = x_shape
    O, Cg, kh, kw = w_shape
    Ho, Wo, Hp, Wp = _geom(x_shape, w_shape, stride, padding, dilation)
    pad = _align(N * C * Hp * Wp * itemsize) if _is_padded(padding) else 0
    cols = _align(N * C * kh * kw * Ho * Wo * itemsize)
    per_sample = _align(N * O * Cg * kh * kw * itemsize) if g_copy else 0
    return pad, cols, per_sample


def _ws_view(ws, start, shape, dtype):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return ws[start:start + n].view(dtype).reshape(shape)


def _pad_into(x, padding, buf):
    """``x`` zero-padded into ``buf`` (no copy when there is no padding)."""
    if buf is None:
        return x
    (pt, pb), (pl, pr) = padding
    buf[...] = 0
    buf[:, :, pt:buf.shape[2] - pb, pl:buf.shape[3] - pr] = x
    return buf


def _windows(xp_, kh, kw, Ho, Wo, stride, dilation):
    """(N, C, kh, kw, Ho, Wo) strided view of the receptive fields (no copy)."""
    sN, sC, sH, sW = xp_.strides
    return _as_strided(xp_, (xp_.shape[0], xp_.shape[1], kh, kw, Ho, Wo),
                       (sN, sC, sH * dilation[0], sW * dilation[1], sH * stride[0], sW * stride[1]))


def _im2col(x, w_shape, workspace, stride, padding, dilation):
    """Columns of x in the workspace, (N, C, kh, kw, Ho, Wo)."""
    N, C = x.shape[:2]
    kh, kw = w_shape[2:]
    Ho, Wo, Hp, Wp = _geom(x.shape, w_shape, stride, padding, dilation)
    npad, _, _ = _conv_ws(x.shape, w_shape, x.dtype.itemsize, stride, padding, dilation)
    buf = _ws_view(workspace, 0, (N, C, Hp, Wp), x.dtype) if npad else None
    win = _windows(_pad_into(x, padding, buf), kh, kw, Ho, Wo, stride, dilation)
    cols = _ws_view(workspace, npad, (N, C, kh, kw, Ho, Wo), x.dtype)
    cols[...] = win
    return cols


def _bmm(a, b, out):
    """``matmul(a, b, out=out)`` batched over the leading dim of ``out`` (threaded on
    the CPU)."""
    if isinstance(out, np.ndarray):
        return cpu_conv.bmm(a, b, out)
    return _xp(out).matmul(a, b, out=out)


def _conv2d_kernel(input, weight, bias=None, *, stride, padding, dilation, groups,
                   workspace, out=None):
    if input.dtype.kind != "f" or input.dtype != weight.dtype:
        raise TypeError("conv2d: float inputs of one dtype expected")
    N, C, H, W = input.shape
    O, Cg, kh, kw = weight.shape
    if C != Cg * groups or O % groups:
        _check_conv("conv2d", input, weight, stride, padding, dilation, groups)
    Ho, Wo, _, _ = _geom(input.shape, weight.shape, stride, padding, dilation)
    if Ho < 1 or Wo < 1:
        raise RuntimeError("conv2d: kernel larger than input")
    if out is None:
        out = _xp(input).empty((N, O, Ho, Wo), dtype=input.dtype)
    K, L = Cg * kh * kw, Ho * Wo
    if kh == kw == 1 and stride == (1, 1) and not _is_padded(padding):
        cols = input.reshape(N, groups, K, L)
    else:
        cols = _im2col(input, weight.shape, workspace, stride, padding, dilation)
        cols = cols.reshape(N, groups, K, L)
    _bmm(weight.reshape(groups, O // groups, K), cols,
         out=out.reshape(N, groups, O // groups, L))
    if bias is not None:
        out += bias.reshape(1, O, 1, 1)
    return out


def _conv_attrs(ctx):
    a = ctx.attrs
    return dict(stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                groups=a["groups"])


def _conv2d_vjp(ctx, g):
    x, w, _ = ctx.inputs
    n = ctx.needs_input_grad
    attrs = _conv_attrs(ctx)
    gx = bind(CONV2D_INPUT_GRAD, g, w, input_shape=ctx.shapes[0], **attrs) if n[0] else None
    gw = bind(CONV2D_WEIGHT_GRAD, x, g, weight_shape=ctx.shapes[1], **attrs) if n[1] else None
    gb = ctx.m.sum(g, dim=(0, 2, 3)) if len(n) > 2 and n[2] else None
    return gx, gw, gb


def _check_conv(name, x, w, stride, padding, dilation, groups, b=None):
    xs, ws = tuple(x.shape), tuple(w.shape)
    if len(xs) != 4 or len(ws) != 4:
        raise op_error(name, f"expected a 4-D input (N, C, H, W) and a 4-D weight (O, C/groups, "
                             f"kH, kW), got input {xs} and weight {ws}", RuntimeError)
    if np.dtype(x.dtype).kind != "f" or np.dtype(w.dtype).kind != "f":
        raise op_error(name, f"expected floating point input and weight, got "
                             f"{np.dtype(x.dtype)} and {np.dtype(w.dtype)}", TypeError)
    if groups < 1 or xs[1] != ws[1] * groups or ws[0] % groups:
        raise op_error(name, f"input {xs} with groups={groups} expects weight of shape "
                             f"(O, {xs[1] // max(groups, 1)}, kH, kW) with O divisible by "
                             f"groups, got weight {ws}", RuntimeError)
    if min(stride) < 1 or min(dilation) < 1 or min(padding[0] + padding[1]) < 0:
        raise op_error(name, f"stride {stride} and dilation {dilation} must be positive and "
                             f"padding {padding} non-negative", RuntimeError)
    if b is not None and tuple(b.shape) != (ws[0],):
        raise op_error(name, f"bias of shape {tuple(b.shape)} does not match the {ws[0]} "
                             f"output channels", RuntimeError)
    Ho, Wo, _, _ = _geom(xs, ws, stride, padding, dilation)
    if Ho < 1 or Wo < 1:
        raise op_error(name, f"input {xs} (padded by {padding}) is smaller than the dilated "
                             f"kernel {ws[2:]} (dilation {dilation})", RuntimeError)
    return Ho, Wo


def _conv2d_infer(input, weight, bias=None, *, stride, padding, dilation, groups):
    Ho, Wo = _check_conv("conv2d", input, weight, stride, padding, dilation, groups, bias)
    from .. import dtypes
    dt = dtypes.result_type(np.dtype(input.dtype), np.dtype(weight.dtype))
    return TensorSpec((input.shape[0], weight.shape[0], Ho, Wo), dt)


def _conv2d_workspace(input, weight, bias=None, *, stride, padding, dilation, groups):
    if len(input.shape) != 4 or len(weight.shape) != 4:
        _check_conv("conv2d", input, weight, stride, padding, dilation, groups)
    kh, kw = weight.shape[2:]
    if kh == kw == 1 and tuple(stride) == (1, 1) and not _is_padded(padding):
        return 0
    return sum(_conv_ws(input.shape, weight.shape, np.dtype(input.dtype).itemsize, stride,
                        padding, dilation))


def _cattrs(stride=1, padding=0, dilation=1, groups=1):
    p = _pair("conv2d", padding, "padding")
    return dict(stride=_pair("conv2d", stride, "stride"), padding=((p[0], p[0]), (p[1], p[1])),
                dilation=_pair("conv2d", dilation, "dilation"), groups=groups)


def _conv_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((2, 2, 5, 4), 1), r((3, 2, 3, 2), 2), r((3,), 3)), _cattrs()),
            Sample((r((1, 2, 5, 5), 4), r((2, 2, 3, 3), 5), None), _cattrs(2, 1)),
            Sample((r((1, 4, 5, 6), 6), r((4, 2, 2, 3), 7), r((4,), 8)),
                   _cattrs((1, 2), (2, 1), (2, 1), 2)),
            Sample((r((2, 3, 3, 3), 9), r((2, 3, 1, 1), 10), None), _cattrs()),
            Sample((r((1, 1, 4, 5), 11), r((1, 1, 2, 2), 12), None),
                   dict(_cattrs(), padding=((0, 1), (1, 0)))),
            Sample((r((2, 2, 4, 4), 13).transpose(0, 1, 3, 2), r((2, 2, 3, 3), 14), None),
                   _cattrs(1, 1))]


def _torch_conv(torch, x, w, b=None, *, stride, padding, dilation, groups):
    (pt, pb), (pl, pr) = padding
    x = torch.nn.functional.pad(x, (pl, pr, pt, pb))
    return torch.nn.functional.conv2d(x, w, b, stride, 0, dilation, groups)


def _conv_errors():
    return [((_rand((1, 3, 5, 5)), _rand((2, 2, 3, 3)), None), _cattrs(), RuntimeError),
            ((_rand((1, 1, 2, 2)), _rand((1, 1, 3, 3)), None), _cattrs(), RuntimeError),
            ((_rand((3, 5, 5)), _rand((1, 3, 3, 3)), None), _cattrs(), RuntimeError)]


def _conv_canon(weight_shape, stride=1, padding=0, dilation=1, groups=1):
    """Conv attrs as the public function takes them (ints, pairs, 'same') or already
    canonical (pairs, ((top, bottom), (left, right))) to the canonical form."""
    stride = _pair("conv2d", stride, "stride")
    dilation = _pair("conv2d", dilation, "dilation")
    if not (isinstance(padding, (tuple, list)) and len(padding) == 2
            and all(isinstance(p, (tuple, list)) for p in padding)):
        ks = tuple(weight_shape[2:]) if len(weight_shape) == 4 else (1, 1)
        padding = _conv_padding("conv2d", padding, ks, stride, dilation)
    else:
        padding = tuple(tuple(int(v) for v in p) for p in padding)
    return dict(stride=stride, padding=padding, dilation=dilation, groups=int(groups))


def _public_conv_attrs(fn):
    """Let registry users pass conv2d's public keywords (defaults, ints, 'same')."""
    def wrapped(input, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, **kw):
        return fn(input, weight, bias, **_conv_canon(tuple(weight.shape), stride, padding,
                                                     dilation, groups), **kw)
    wrapped.__wrapped__ = fn
    return wrapped


CONV2D = register(name="conv2d", kind="workspace", kernel=_public_conv_attrs(_conv2d_kernel),
                  args=("input", "weight", "bias"), infer=_public_conv_attrs(_conv2d_infer),
                  workspace=_public_conv_attrs(_conv2d_workspace), vjp=_conv2d_vjp, saves=("input", "weight"),
                  promote="same", samples=_conv_samples, error_samples=_conv_errors,
                  torch=_torch_conv)


def _col2im_add(cols, dst, Ho, Wo, stride, dilation):
    """dst[n, c, i*dh + ho*sh, j*dw + wo*sw] += cols[n, c, i, j, ho, wo]."""
    if isinstance(dst, np.ndarray):
        cpu_conv.col2im_add(cols, dst, stride, dilation)
        return
    kh, kw = cols.shape[2:4]
    (sh, sw), (dh, dw) = stride, dilation
    for i in range(kh):
        for j in range(kw):
            h0, w0 = i * dh, j * dw
            dst[:, :, h0:h0 + sh * (Ho - 1) + 1:sh, w0:w0 + sw * (Wo - 1) + 1:sw] += cols[:, :, i, j]


def _conv2d_input_grad_kernel(g, weight, *, input_shape, stride, padding, dilation, groups,
                              workspace, out=None):
    N, C, H, W = input_shape
    O, Cg, kh, kw = weight.shape
    xp = _xp(g)
    Ho, Wo, Hp, Wp = _geom(input_shape, weight.shape, stride, padding, dilation)
    if tuple(g.shape) != (N, O, Ho, Wo):
        raise RuntimeError("conv2d_input_grad: g shape")
    if out is None:
        out = xp.empty(input_shape, dtype=g.dtype)
    K, L = Cg * kh * kw, Ho * Wo
    wT = weight.reshape(groups, O // groups, K).transpose(0, 2, 1)
    if kh == kw == 1 and stride == (1, 1) and not _is_padded(padding):
        _bmm(wT, g.reshape(N, groups, O // groups, L), out=out.reshape(N, groups, K, L))
        return out
    npad, _, _ = _conv_ws(input_shape, weight.shape, g.dtype.itemsize, stride, padding, dilation)
    cols = _ws_view(workspace, npad, (N, groups, K, L), g.dtype)
    _bmm(wT, g.reshape(N, groups, O // groups, L), out=cols)
    dst = _ws_view(workspace, 0, (N, C, Hp, Wp), g.dtype) if npad else out
    dst[...] = 0
    _col2im_add(cols.reshape(N, C, kh, kw, Ho, Wo), dst, Ho, Wo, stride, dilation)
    if npad:
        (pt, pb), (pl, pr) = padding
        out[...] = dst[:, :, pt:Hp - pb, pl:Wp - pr]
    return out


def _conv2d_input_grad_vjp(ctx, gg):
    # the input gradient is linear in g (transposed conv) and in weight
    g, w = ctx.inputs
    n = ctx.needs_input_grad
    attrs = _conv_attrs(ctx)
    d_g = bind(CONV2D, gg, w, None, **attrs) if n[0] else None
    d_w = bind(CONV2D_WEIGHT_GRAD, gg, g, weight_shape=ctx.shapes[1], **attrs) if n[1] else None
    return d_g, d_w


def _conv2d_input_grad_infer(g, weight, *, input_shape, stride, padding, dilation, groups):
    Ho, Wo = _check_conv("conv2d_input_grad", TensorSpec(input_shape, g.dtype), weight, stride,
                         padding, dilation, groups)
    want = (input_shape[0], weight.shape[0], Ho, Wo)
    if tuple(g.shape) != want:
        raise op_error("conv2d_input_grad", f"g has shape {tuple(g.shape)}, expected {want}",
                       RuntimeError)
    return TensorSpec(tuple(input_shape), g.dtype)


def _conv2d_input_grad_ws(g, weight, *, input_shape, stride, padding, dilation, groups):
    return _conv2d_workspace(TensorSpec(input_shape, g.dtype), weight, stride=stride,
                             padding=padding, dilation=dilation, groups=groups)


def _grad_samples(kind):
    def samples(dtype=np.float64):
        out = []
        for s in _conv_samples(dtype):
            x, w = s.args[:2]
            spec = _conv2d_infer(TensorSpec(x.shape, x.dtype), TensorSpec(w.shape, w.dtype),
                                 **s.attrs)
            g = _rand(spec.shape, dtype, seed=x.size)
            if kind == "input":
                out.append(Sample((g, w), dict(s.attrs, input_shape=tuple(x.shape))))
            else:
                out.append(Sample((x, g), dict(s.attrs, weight_shape=tuple(w.shape))))
        return out
    return samples


def _torch_input_grad(torch, g, w, *, input_shape, **attrs):
    x = torch.zeros(input_shape, dtype=g.dtype, requires_grad=True)
    return torch.autograd.grad(_torch_conv(torch, x, w, None, **attrs), x, g)[0]


def _torch_weight_grad(torch, x, g, *, weight_shape, **attrs):
    w = torch.zeros(weight_shape, dtype=g.dtype, requires_grad=True)
    return torch.autograd.grad(_torch_conv(torch, x, w, None, **attrs), w, g)[0]


CONV2D_INPUT_GRAD = register(
    name="conv2d_input_grad", kind="workspace", kernel=_conv2d_input_grad_kernel,
    args=("g", "weight"), infer=_conv2d_input_grad_infer, workspace=_conv2d_input_grad_ws,
    vjp=_conv2d_input_grad_vjp, saves=("g", "weight"), promote="same",
    samples=_grad_samples("input"), torch=_torch_input_grad,
    error_samples=lambda: [((_rand((1, 2, 3, 3)), _rand((2, 1, 3, 3))),
                            dict(_cattrs(), input_shape=(1, 1, 4, 4)), RuntimeError)])


def _conv2d_weight_grad_kernel(input, g, *, weight_shape, stride, padding, dilation, groups,
                               workspace, out=None):
    N, C, H, W = input.shape
    O, Cg, kh, kw = weight_shape
    xp = _xp(g)
    Ho, Wo, _, _ = _geom(input.shape, weight_shape, stride, padding, dilation)
    if tuple(g.shape) != (N, O, Ho, Wo):
        raise RuntimeError("conv2d_weight_grad: g shape")
    if out is None:
        out = xp.empty(weight_shape, dtype=g.dtype)
    K, L, Og = Cg * kh * kw, Ho * Wo, O // groups
    npad, ncols, _ = _conv_ws(input.shape, weight_shape, g.dtype.itemsize, stride, padding,
                              dilation, g_copy=True)
    cols = _im2col(input, weight_shape, workspace, stride, padding, dilation)
    # per sample and group dW_n[o, k] = sum_l g[n, o, l] cols[n, k, l] (a GEMM with a
    # transposed operand: no copy of g or cols), then the sum over n
    per = _ws_view(workspace, npad + ncols, (N, groups, Og, K), g.dtype)
    _bmm(g.reshape(N, groups, Og, L), cols.reshape(N, groups, K, L).transpose(0, 1, 3, 2),
         out=per)
    xp.sum(per, axis=0, out=out.reshape(groups, Og, K))
    return out


def _conv2d_weight_grad_vjp(ctx, gw):
    # bilinear in (input, g): each partial is a conv2d or a conv2d input gradient
    x, g = ctx.inputs
    n = ctx.needs_input_grad
    attrs = _conv_attrs(ctx)
    d_x = bind(CONV2D_INPUT_GRAD, g, gw, input_shape=ctx.shapes[0], **attrs) if n[0] else None
    d_g = bind(CONV2D, x, gw, None, **attrs) if n[1] else None
    return d_x, d_g


def _conv2d_weight_grad_infer(input, g, *, weight_shape, stride, padding, dilation, groups):
    Ho, Wo = _check_conv("conv2d_weight_grad", input, TensorSpec(weight_shape, g.dtype), stride,
                         padding, dilation, groups)
    want = (input.shape[0], weight_shape[0], Ho, Wo)
    if tuple(g.shape) != want:
        raise op_error("conv2d_weight_grad", f"g has shape {tuple(g.shape)}, expected {want}",
                       RuntimeError)
    return TensorSpec(tuple(weight_shape), g.dtype)


def _conv2d_weight_grad_ws(input, g, *, weight_shape, stride, padding, dilation, groups):
    if len(input.shape) != 4 or len(weight_shape) != 4:
        _conv2d_weight_grad_infer(input, g, weight_shape=weight_shape, stride=stride,
                                  padding=padding, dilation=dilation, groups=groups)
    return sum(_conv_ws(input.shape, weight_shape, np.dtype(g.dtype).itemsize, stride, padding,
                        dilation, g_copy=True))


CONV2D_WEIGHT_GRAD = register(
    name="conv2d_weight_grad", kind="workspace", kernel=_conv2d_weight_grad_kernel,
    args=("input", "g"), infer=_conv2d_weight_grad_infer, workspace=_conv2d_weight_grad_ws,
    vjp=_conv2d_weight_grad_vjp, saves=("input", "g"), promote="same",
    samples=_grad_samples("weight"), torch=_torch_weight_grad,
    error_samples=lambda: [((_rand((1, 2, 4, 4)), _rand((1, 3, 2, 2))),
                            dict(_cattrs(), weight_shape=(2, 2, 3, 3)), RuntimeError)])


def _conv_padding(name, padding, kshape, stride, dilation):
    """int / pair / 'valid' / 'same' to ((top, bottom), (left, right))."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding != "same":
            raise op_error(name, f"padding must be an int, a pair, 'valid' or 'same', got "
                                 f"{padding!r}")
        if stride != (1, 1):
            raise op_error(name, "padding='same' is not supported for strided convolutions")
        out = []
        for k, d in zip(kshape, dilation):
            total = d * (k - 1)  # PyTorch puts the odd extra element at the end
            out.append((total // 2, total - total // 2))
        return tuple(out)
    p = _pair(name, padding, "padding")
    return ((p[0], p[0]), (p[1], p[1]))


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, as PyTorch) of an (N, C, H, W) input with an
    (O, C/groups, kH, kW) weight; ``padding`` is an int, a pair, 'valid' or 'same'.

    >>> tg.conv2d(tg.ones(1, 1, 3, 3), tg.ones(1, 1, 2, 2)).shape
    (1, 1, 2, 2)
    """
    stride = _pair("conv2d", stride, "stride")
    dilation = _pair("conv2d", dilation, "dilation")
    ks = tuple(weight.shape[2:]) if len(weight.shape) == 4 else (1, 1)
    padding = _conv_padding("conv2d", padding, ks, stride, dilation)
    return bind(CONV2D, input, weight, bias, stride=stride, padding=padding, dilation=dilation,
                groups=int(groups))


def _single(name, v, what):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise op_error(name, f"{what} must be an int or a 1-tuple, got {v!r}", TypeError)
        v = v[0]
    return (1, int(v))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution of an (N, C, L) input with an (O, C/groups, k) weight (conv2d
    over a height-1 image)."""
    from .shape import unsqueeze, squeeze
    if len(input.shape) != 3 or len(weight.shape) != 3:
        raise op_error("conv1d", f"expected a 3-D input (N, C, L) and a 3-D weight "
                                 f"(O, C/groups, k), got {tuple(input.shape)} and "
                                 f"{tuple(weight.shape)}", RuntimeError)
    if not isinstance(padding, str):
        padding = (0, _single("conv1d", padding, "padding")[1])
    out = conv2d(unsqueeze(input, 2), unsqueeze(weight, 2), bias,
                 _single("conv1d", stride, "stride"), padding,
                 _single("conv1d", dilation, "dilation"), groups)
    return squeeze(out, 2)


# ================================================================ pooling
# max_pool2d returns (out, indices) as PyTorch's return_indices: indices are flat
# positions in each (H, W) plane. Its adjoint scatters g to those positions
# (max_pool2d_input_grad), whose adjoint gathers from them (max_pool2d_gather),
# whose adjoint scatters again: every order is exact for the chosen maxima.
def _pool_out(L, k, s, p, d, ceil):
    """PyTorch's pooled length (floor division, so a window longer than the padded
    input gives 0, or 1 with ceil_mode); with ceil_mode the last window must start
    inside the input or its left padding."""
    span = L + 2 * p - d * (k - 1) - 1
    o = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= L + p:
        o -= 1
    return o


def _pool_geom(shape, kernel_size, stride, padding, dilation, ceil_mode=False):
    """(Ho, Wo, Hp, Wp): output size and the padded extent the windows cover (with
    ceil_mode the last windows may hang over the padding; they see nothing there)."""
    _, _, H, W = shape
    out, ext = [], []
    for L, k, s_, p, d in zip((H, W), kernel_size, stride, padding, dilation):
        o = _pool_out(L, k, s_, p, d, ceil_mode)
        out.append(o)
        ext.append(max(L + 2 * p, (o - 1) * s_ + d * (k - 1) + 1))
    return out[0], out[1], ext[0], ext[1]


def _check_pool(name, x, kernel_size, stride, padding, dilation=(1, 1), ceil_mode=False):
    xs = tuple(x.shape)
    if len(xs) != 4:
        raise op_error(name, f"expected a 4-D input (N, C, H, W), got shape {xs}", RuntimeError)
    if min(kernel_size) < 1 or min(stride) < 1 or min(dilation) < 1:
        raise op_error(name, f"kernel_size {kernel_size}, stride {stride} and dilation "
                             f"{dilation} must be positive", RuntimeError)
    if any(2 * p > k for p, k in zip(padding, kernel_size)) or min(padding) < 0:
        raise op_error(name, f"padding {padding} must be non-negative and at most half of "
                             f"kernel_size {kernel_size}", RuntimeError)
    Ho, Wo, _, _ = _pool_geom(xs, kernel_size, stride, padding, dilation, ceil_mode)
    if Ho < 1 or Wo < 1:
        raise op_error(name, f"input {xs} is too small for kernel_size {kernel_size} "
                             f"(padding {padding}, dilation {dilation})", RuntimeError)
    if np.dtype(x.dtype).kind != "f":
        raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}",
                       TypeError)
    return Ho, Wo


def _offset_slice(i, j, Ho, Wo, stride, dilation):
    h0, w0 = i * dilation[0], j * dilation[1]
    return (slice(None), slice(None), slice(h0, h0 + stride[0] * (Ho - 1) + 1, stride[0]),
            slice(w0, w0 + stride[1] * (Wo - 1) + 1, stride[1]))


def _max_pool2d_numpy(input, Ho, Wo, Hp, Wp, kernel_size, stride, padding, dilation):
    """max_pool2d in whole-array code, for arrays of other devices (CuPy)."""
    N, C, H, W = input.shape
    xp = _xp(input)
    ph, pw = padding
    src = input
    if (Hp, Wp) != (H, W):
        src = xp.full((N, C, Hp, Wp), -xp.inf, dtype=input.dtype)
        src[:, :, ph:ph + H, pw:pw + W] = input
    out = idx = None
    for i in range(kernel_size[0]):
        for j in range(kernel_size[1]):
            s = src[_offset_slice(i, j, Ho, Wo, stride, dilation)]
            off = i * dilation[0] * W + j * dilation[1]
            if out is None:
                out = s.copy()
                idx = xp.full((N, C, Ho, Wo), off, dtype=np.int64)
                continue
            # strict '>' keeps the first maximum, as PyTorch; NaN wins as in PyTorch
            better = (s > out) | xp.isnan(s)
            xp.copyto(out, s, where=better)
            xp.copyto(idx, off, where=better)
    base = (xp.arange(Ho) * stride[0] - ph)[:, None] * W + (xp.arange(Wo) * stride[1] - pw)
    idx += base
    return out, idx


def _max_pool2d_kernel(input, *, kernel_size, stride, padding, dilation, ceil_mode=False):
    N, C, H, W = input.shape
    Ho, Wo, Hp, Wp = _pool_geom(input.shape, kernel_size, stride, padding, dilation, ceil_mode)
    if Ho < 1 or Wo < 1:
        _check_pool("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode)
    if not isinstance(input, np.ndarray):
        return _max_pool2d_numpy(input, Ho, Wo, Hp, Wp, kernel_size, stride, padding, dilation)
    out = np.empty((N, C, Ho, Wo), dtype=input.dtype)
    idx = np.empty((N, C, Ho, Wo), dtype=np.int64)
    cpu_pool.max_pool2d(input, out, idx, kernel_size, stride, padding, dilation)
    return out, idx


def _max_pool2d_vjp(ctx, g):
    _, idx = ctx.out
    gx = bind(MAX_POOL2D_INPUT_GRAD, g[0], idx, input_shape=ctx.shapes[0], overlap=_overlaps(ctx.attrs))
    return (gx,)


def _overlaps(attrs):
    k, s, d = attrs["kernel_size"], attrs["stride"], attrs["dilation"]
    return any(d_ * (k_ - 1) + 1 > s_ for k_, s_, d_ in zip(k, s, d))


def _max_pool2d_infer(input, *, kernel_size, stride, padding, dilation, ceil_mode=False):
    Ho, Wo = _check_pool("max_pool2d", input, kernel_size, stride, padding, dilation,
                         ceil_mode)
    shape = (input.shape[0], input.shape[1], Ho, Wo)
    return TensorSpec(shape, input.dtype), TensorSpec(shape, np.dtype(np.int64))


def _pattrs(k, s=None, p=0, d=1, ceil=False):
    k = _pair("pool", k, "kernel_size")
    return dict(kernel_size=k, stride=k if s is None else _pair("pool", s, "stride"),
                padding=_pair("pool", p, "padding"), dilation=_pair("pool", d, "dilation"),
                ceil_mode=ceil)


def _distinct(shape, dtype, seed):
    """Values with well separated entries so the max is unique (smooth for checks)."""
    r = np.random.default_rng(seed)
    n = int(np.prod(shape))
    return (r.permutation(n).reshape(shape) * 0.37 - n * 0.15).astype(dtype)


def _max_pool_samples(dtype=np.float64):
    return [Sample((_distinct((2, 2, 4, 4), dtype, 1),), _pattrs(2)),
            Sample((_distinct((1, 2, 5, 5), dtype, 2),), _pattrs(3, 2, 1)),
            Sample((_distinct((1, 1, 5, 6), dtype, 3),), _pattrs((2, 3), 1)),
            Sample((_distinct((1, 1, 6, 5), dtype, 4),), _pattrs(2, (2, 1), 0, 2)),
            Sample((_distinct((1, 2, 4, 4), dtype, 5).transpose(0, 1, 3, 2),), _pattrs(2)),
            Sample((_distinct((1, 2, 5, 6), dtype, 6),), _pattrs(2, 2, 0, 1, True)),
            Sample((_distinct((1, 1, 7, 5), dtype, 7),), _pattrs(3, 2, 1, 1, True))]


def _torch_max_pool(torch, x, *, kernel_size, stride, padding, dilation, ceil_mode=False):
    return torch.nn.functional.max_pool2d(x, kernel_size, stride, padding, dilation,
                                          ceil_mode=ceil_mode, return_indices=True)


MAX_POOL2D = register(name="max_pool2d", kernel=_max_pool2d_kernel, args=("input",), nout=2,
                      infer=_max_pool2d_infer, vjp=_max_pool2d_vjp, saves=("out",),
                      samples=_max_pool_samples, torch=_torch_max_pool,
                      error_samples=lambda: [((_rand((1, 1, 2, 2)),), _pattrs(3), RuntimeError),
                                             ((_rand((2, 2)),), _pattrs(2), RuntimeError)])


def _max_pool2d_input_grad_kernel(g, indices, *, input_shape, overlap):
    N, C, H, W = input_shape
    if tuple(g.shape) != tuple(indices.shape) or tuple(g.shape[:2]) != (N, C):
        raise RuntimeError("max_pool2d_input_grad: g and indices do not match")
    xp = _xp(g)
    out = xp.zeros((N * C, H * W), dtype=g.dtype)
    g2, i2 = g.reshape(N * C, -1), indices.reshape(N * C, -1)
    if xp is np:
        cpu_pool.max_pool2d_scatter(out, i2, g2)
    elif overlap:  # windows share elements: repeated positions must accumulate
        rows = (xp.arange(N * C) * (H * W))[:, None]
        xp.add.at(out.reshape(-1), (i2 + rows).reshape(-1), g2.reshape(-1))
    else:
        xp.put_along_axis(out, i2, g2, axis=1)
    return out.reshape(input_shape)


def _max_pool2d_input_grad_infer(g, indices, *, input_shape, overlap):
    if tuple(g.shape) != tuple(indices.shape) or len(input_shape) != 4 or \
            tuple(g.shape[:2]) != tuple(input_shape[:2]):
        raise op_error("max_pool2d_input_grad", f"g {tuple(g.shape)} and indices "
                       f"{tuple(indices.shape)} do not match the input shape {input_shape}",
                       RuntimeError)
    return TensorSpec(tuple(input_shape), g.dtype)


def _pool_grad_samples(dtype=np.float64):
    out = []
    for s in _max_pool_samples(dtype):
        x = np.ascontiguousarray(s.args[0])
        o, idx = _max_pool2d_kernel(x, **s.attrs)
        out.append(Sample((_rand(o.shape, dtype, seed=o.size), idx),
                          dict(input_shape=x.shape, overlap=_overlaps(s.attrs))))
    return out


def _gather_samples(dtype=np.float64):
    return [Sample((_rand(s.attrs["input_shape"], dtype, seed=3), s.args[1]), {})
            for s in _pool_grad_samples(dtype)]


MAX_POOL2D_INPUT_GRAD = register(
    name="max_pool2d_input_grad", kernel=_max_pool2d_input_grad_kernel, args=("g", "indices"),
    infer=_max_pool2d_input_grad_infer,
    vjp=lambda ctx, gg: (bind(MAX_POOL2D_GATHER, gg, ctx.inputs[1]), None), saves=("indices",),
    samples=_pool_grad_samples,
    error_samples=lambda: [((_rand((1, 1, 2, 2)), np.zeros((1, 1, 2, 3), np.int64)),
                            dict(input_shape=(1, 1, 4, 4), overlap=False), RuntimeError)])


def _max_pool2d_gather_kernel(x, indices):
    N, C = x.shape[:2]
    if tuple(indices.shape[:2]) != (N, C):
        raise RuntimeError("max_pool2d_gather: shape mismatch")
    i2 = indices.reshape(N * C, -1)
    got = _xp(x).take_along_axis(x.reshape(N * C, -1), _xp(x).maximum(i2, 0), axis=1)
    if (i2 < 0).any():  # a window wholly in the padding: -inf forward, no gradient
        got = _xp(x).where(i2 < 0, 0, got)
    return got.reshape(indices.shape)


def _max_pool2d_gather_vjp(ctx, g):
    idx = ctx.inputs[1]
    return bind(MAX_POOL2D_INPUT_GRAD, g, idx, input_shape=ctx.shapes[0], overlap=True), None


def _max_pool2d_gather_infer(x, indices):
    if len(x.shape) != 4 or len(indices.shape) != 4 or tuple(x.shape[:2]) != tuple(indices.shape[:2]):
        raise op_error("max_pool2d_gather", f"input {tuple(x.shape)} and indices "
                       f"{tuple(indices.shape)} must be (N, C, ...) alike", RuntimeError)
    return TensorSpec(tuple(indices.shape), x.dtype)


MAX_POOL2D_GATHER = register(
    name="max_pool2d_gather", kernel=_max_pool2d_gather_kernel, args=("input", "indices"),
    infer=_max_pool2d_gather_infer, vjp=_max_pool2d_gather_vjp, saves=("indices",),
    samples=_gather_samples,
    error_samples=lambda: [((_rand((1, 2, 2, 2)), np.zeros((1, 1, 2, 3), np.int64)), {},
                            RuntimeError)])


def _pool_args(name, kernel_size, stride, padding, dilation=1):
    k = _pair(name, kernel_size, "kernel_size")
    s = k if stride is None or stride == () or stride == [] else _pair(name, stride, "stride")
    return dict(kernel_size=k, stride=s, padding=_pair(name, padding, "padding"),
                dilation=_pair(name, dilation, "dilation"))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D max pooling over (N, C, H, W); ``stride`` defaults to ``kernel_size``.
    With ``return_indices`` also gives the flat (H*W) position of each maximum."""
    squeeze = len(input.shape) == 3  # an unbatched (C, H, W) input, as PyTorch
    if squeeze:
        from .shape import unsqueeze
        input = unsqueeze(input, 0)
    out, idx = bind(MAX_POOL2D, input, ceil_mode=bool(ceil_mode),
                    **_pool_args("max_pool2d", kernel_size, stride, padding, dilation))
    if squeeze:
        out, idx = out[0], idx[0]
    return (out, idx) if return_indices else out


def _avg_divisor(xp, H, W, attrs):
    """Per-output divisor: the kernel area, else the count of elements each window
    covers: with count_include_pad the padding counts but a ceil_mode overhang does
    not (PyTorch's rule); without it only input elements count."""
    kh, kw = attrs["kernel_size"]
    if attrs["divisor_override"]:
        return float(attrs["divisor_override"])
    ph, pw = attrs["padding"]
    ceil = attrs.get("ceil_mode", False)
    Ho, Wo, Hp, Wp = _pool_geom((1, 1, H, W), (kh, kw), attrs["stride"], (ph, pw), (1, 1), ceil)
    cip = attrs["count_include_pad"]
    if (Hp, Wp) == (H + 2 * ph, W + 2 * pw) and (cip or (ph, pw) == (0, 0)):
        return float(kh * kw)
    ones = xp.zeros((1, 1, Hp, Wp))
    if cip:
        ones[:, :, :H + 2 * ph, :W + 2 * pw] = 1
    else:
        ones[:, :, ph:ph + H, pw:pw + W] = 1
    cnt = sum(ones[_offset_slice(i, j, Ho, Wo, attrs["stride"], (1, 1))]
              for i in range(kh) for j in range(kw))
    return cnt


def _avg_pool2d_kernel(input, **attrs):
    N, C, H, W = input.shape
    xp = _xp(input)
    kh, kw = attrs["kernel_size"]
    ph, pw = attrs["padding"]
    Ho, Wo, Hp, Wp = _pool_geom(input.shape, (kh, kw), attrs["stride"], (ph, pw), (1, 1),
                                attrs.get("ceil_mode", False))
    if Ho < 1 or Wo < 1:
        raise RuntimeError("avg_pool2d: input too small")
    src = input
    if (Hp, Wp) != (H, W):
        src = xp.zeros((N, C, Hp, Wp), dtype=input.dtype)
        src[:, :, ph:ph + H, pw:pw + W] = input
    out = None
    for i in range(kh):
        for j in range(kw):
            s = src[_offset_slice(i, j, Ho, Wo, attrs["stride"], (1, 1))]
            if out is None:
                out = s.copy()
            else:
                out += s
    out /= xp.asarray(_avg_divisor(xp, H, W, attrs), dtype=out.dtype)
    return out


def _avg_pool2d_infer(input, **attrs):
    Ho, Wo = _check_pool("avg_pool2d", input, attrs["kernel_size"], attrs["stride"],
                         attrs["padding"], (1, 1), attrs.get("ceil_mode", False))
    return TensorSpec((input.shape[0], input.shape[1], Ho, Wo), input.dtype)


def _avg_attrs(k, s=None, p=0, cip=True, dov=None, ceil=False):
    a = _pattrs(k, s, p, 1, ceil)
    del a["dilation"]
    return dict(a, count_include_pad=cip, divisor_override=dov)


def _avg_samples(dtype=np.float64):
    return [Sample((_rand((2, 2, 4, 4), dtype, seed=1),), _avg_attrs(2)),
            Sample((_rand((1, 2, 5, 5), dtype, seed=2),), _avg_attrs(3, 2, 1)),
            Sample((_rand((1, 2, 5, 5), dtype, seed=3),), _avg_attrs(3, 2, 1, False)),
            Sample((_rand((1, 1, 5, 6), dtype, seed=4),), _avg_attrs((2, 3), 1, 0, True, 5)),
            Sample((_rand((1, 2, 4, 4), dtype, seed=5).transpose(0, 1, 3, 2),), _avg_attrs(2)),
            Sample((_rand((1, 2, 5, 6), dtype, seed=6),), _avg_attrs(2, 2, 0, True, None, True)),
            Sample((_rand((1, 1, 7, 5), dtype, seed=7),), _avg_attrs(3, 2, 1, True, None, True)),
            Sample((_rand((1, 1, 7, 5), dtype, seed=8),), _avg_attrs(3, 2, 1, False, None, True))]


AVG_POOL2D = register(
    name="avg_pool2d", kernel=_avg_pool2d_kernel, args=("input",), infer=_avg_pool2d_infer,
    vjp=lambda ctx, g: (bind(AVG_POOL2D_INPUT_GRAD, g, input_shape=ctx.shapes[0], **ctx.attrs),),
    samples=_avg_samples,
    torch=lambda torch, x, **a: torch.nn.functional.avg_pool2d(x, **a),
    error_samples=lambda: [((_rand((1, 1, 2, 2)),), _avg_attrs(3), RuntimeError)])


def _avg_pool2d_input_grad_kernel(g, *, input_shape, **attrs):
    N, C, H, W = input_shape
    xp = _xp(g)
    kh, kw = attrs["kernel_size"]
    ph, pw = attrs["padding"]
    Ho, Wo, Hp, Wp = _pool_geom(input_shape, (kh, kw), attrs["stride"], (ph, pw), (1, 1),
                                attrs.get("ceil_mode", False))
    if tuple(g.shape) != (N, C, Ho, Wo):
        raise RuntimeError("avg_pool2d_input_grad: g shape")
    gd = g / xp.asarray(_avg_divisor(xp, H, W, attrs), dtype=g.dtype)
    dst = xp.zeros((N, C, Hp, Wp), dtype=g.dtype)
    for i in range(kh):
        for j in range(kw):
            dst[_offset_slice(i, j, Ho, Wo, attrs["stride"], (1, 1))] += gd
    return dst[:, :, ph:ph + H, pw:pw + W] if (Hp, Wp) != (H, W) else dst


def _avg_pool2d_input_grad_infer(g, *, input_shape, **attrs):
    Ho, Wo = _check_pool("avg_pool2d_input_grad", TensorSpec(input_shape, g.dtype),
                         attrs["kernel_size"], attrs["stride"], attrs["padding"], (1, 1),
                         attrs.get("ceil_mode", False))
    if tuple(g.shape) != (input_shape[0], input_shape[1], Ho, Wo):
        raise op_error("avg_pool2d_input_grad", f"g has shape {tuple(g.shape)}, expected "
                       f"{(input_shape[0], input_shape[1], Ho, Wo)}", RuntimeError)
    return TensorSpec(tuple(input_shape), g.dtype)


def _avg_grad_samples(dtype=np.float64):
    out = []
    for s in _avg_samples(dtype):
        spec = _avg_pool2d_infer(TensorSpec(s.args[0].shape, dtype), **s.attrs)
        out.append(Sample((_rand(spec.shape, dtype, seed=7),),
                          dict(s.attrs, input_shape=s.args[0].shape)))
    return out


def _torch_avg_grad(torch, g, *, input_shape, **a):
    x = torch.zeros(input_shape, dtype=g.dtype, requires_grad=True)
    return torch.autograd.grad(torch.nn.functional.avg_pool2d(x, **a), x, g)[0]


def _avg_grad_vjp(ctx, gg):
    attrs = {k: v for k, v in ctx.attrs.items() if k != "input_shape"}
    return (bind(AVG_POOL2D, gg, **attrs),)


AVG_POOL2D_INPUT_GRAD = register(
    name="avg_pool2d_input_grad", kernel=_avg_pool2d_input_grad_kernel, args=("g",),
    infer=_avg_pool2d_input_grad_infer, vjp=_avg_grad_vjp, samples=_avg_grad_samples,
    torch=_torch_avg_grad,
    error_samples=lambda: [((_rand((1, 1, 3, 3)),), dict(_avg_attrs(2), input_shape=(1, 1, 4, 4)),
                            RuntimeError)])


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-D average pooling over (N, C, H, W); ``stride`` defaults to ``kernel_size``."""
    a = _pool_args("avg_pool2d", kernel_size, stride, padding)
    del a["dilation"]
    squeeze = len(input.shape) == 3  # an unbatched (C, H, W) input, as PyTorch
    if squeeze:
        from .shape import unsqueeze
        input = unsqueeze(input, 0)
    out = bind(AVG_POOL2D, input, count_include_pad=bool(count_include_pad),
               divisor_override=divisor_override, ceil_mode=bool(ceil_mode), **a)
    return out[0] if squeeze else out


def _adaptive_matrix(xp, n_in, n_out, dtype):
    """(n_out, n_in) matrix averaging PyTorch's adaptive bins [floor(i*n/o), ceil((i+1)*n/o))."""
    a = np.zeros((n_out, n_in), dtype=dtype)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        a[i, lo:hi] = 1.0 / (hi - lo)
    return xp.asarray(a)


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed ``output_size`` (int or pair; None keeps that size):
    two small matmuls with PyTorch's bin matrices, so every order differentiates."""
    from .linalg import matmul
    from .shape import mT
    if len(input.shape) not in (3, 4):
        raise op_error("adaptive_avg_pool2d", f"expected a 3-D or 4-D input, got shape "
                                              f"{tuple(input.shape)}", RuntimeError)
    H, W = input.shape[-2:]
    if not isinstance(output_size, (tuple, list)):
        output_size = (output_size, output_size)
    oh, ow = (H if output_size[0] is None else int(output_size[0]),
              W if output_size[1] is None else int(output_size[1]))
    if oh < 1 or ow < 1:
        raise op_error("adaptive_avg_pool2d", f"output_size {tuple(output_size)} must be "
                                              f"positive", RuntimeError)
    raw = getattr(input, "_data", input)
    xp, dt = _xp(raw), raw.dtype
    out = input
    if oh != H:
        out = matmul(_adaptive_matrix(xp, H, oh, dt), out)
    if ow != W:
        out = matmul(out, mT(_adaptive_matrix(xp, W, ow, dt)))
    return out


# ================================================================ linear
# One op, not the composite matmul(x, mT(w)): the weight gradient is then a fresh
# contiguous (out, in) array the tape hands to the leaf as is (through mT it arrived
# as a transposed view, which the tape must copy), and a 3-D input is one GEMM.
def _linear_kernel(input, weight, bias=None):
    n_in = weight.shape[-1]
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != n_in or (
            bias is not None and bias.ndim > 1):
        raise ValueError("linear: shapes")  # infer explains
    if input.ndim == 2:
        out = input @ weight.T
    else:
        rows = int(np.prod(input.shape[:-1]))  # not -1: NumPy can't infer it when n_in == 0
        out = (input.reshape(rows, n_in) @ weight.T).reshape(input.shape[:-1] + weight.shape[:1])
    if bias is not None:
        out += bias
    return out


def _linear_vjp(ctx, g):
    x, w, _ = ctx.inputs
    xs, ws, bs = ctx.shapes
    m, n = ctx.m, ctx.needs_input_grad
    n_out, n_in = ws
    rows = 1
    for d in xs[:-1]:
        rows *= d
    if type(g) is np.ndarray and type(w) is np.ndarray:
        # plain NumPy arrays (nothing records): the same formulas without a bind per
        # transpose and reduction, ~10-20 us each, on every step of every layer
        g2 = g.reshape(rows, n_out)
        gx = (g2 @ w).reshape(xs) if n[0] else None
        gw = g2.T @ x.reshape(rows, n_in) if n[1] else None
        gb = None
        if len(n) > 2 and n[2]:
            gb = g2.sum(0) if tuple(bs) == (n_out,) else g2.sum().reshape(bs)
        return gx, gw, gb
    g2 = g if len(xs) == 2 else m.reshape(g, (rows, n_out))
    gx = gw = gb = None
    if n[0]:
        gx = m.matmul(g2, w)
        if len(xs) != 2:
            gx = m.reshape(gx, xs)
    if n[1]:
        x2 = x if len(xs) == 2 else m.reshape(x, (rows, n_in))
        gw = m.matmul(m.mT(g2), x2)   # (out, in), a fresh C-contiguous array
    if len(n) > 2 and n[2]:
        gb = m.sum(g2, dim=0)
        if tuple(bs) != (n_out,):
            gb = m.sum_to(gb, tuple(bs))
    return gx, gw, gb


def _linear_infer(input, weight, bias=None):
    xs, ws = tuple(input.shape), tuple(weight.shape)
    if len(ws) != 2 or not xs or xs[-1] != ws[1]:
        raise op_error("linear", f"input {xs} and weight {ws}: expected a 2-D weight "
                                 f"(out_features, in_features) with in_features equal to the "
                                 f"input's last dim", RuntimeError)
    if bias is not None and tuple(bias.shape) not in ((), (1,), (ws[0],)):
        raise op_error("linear", f"bias of shape {tuple(bias.shape)} does not match "
                                 f"out_features={ws[0]}", RuntimeError)
    from .. import dtypes
    specs = [input, weight] + ([bias] if bias is not None else [])
    return TensorSpec(xs[:-1] + ws[:1],
                      dtypes.result_type(*[np.dtype(s.dtype) for s in specs]))


def _linear_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((3, 4), 1), r((5, 4), 2), r((5,), 3)), {}),
            Sample((r((3, 4), 4), r((2, 4), 5), None), {}),
            Sample((r((4,), 6), r((3, 4), 7), r((3,), 8)), {}),
            Sample((r((2, 3, 4), 9), r((2, 4), 10), r((2,), 11)), {}),
            Sample((r((3, 4), 12).T, r((3, 2), 13).T, r((), 14)), {}),
            Sample((r((0, 3), 15), r((2, 3), 16), r((2,), 17)), {}),
            Sample((r((2, 1, 3), 18), r((4, 3, 2), 19)[:, :, 0], None), {})]


LINEAR = register(name="linear", kernel=_linear_kernel, args=("input", "weight", "bias"),
                  infer=_linear_infer, vjp=_linear_vjp, saves=("input", "weight"),
                  promote="same", samples=_linear_samples,
                  error_samples=lambda: [
                      ((_rand((3, 4)), _rand((5, 3)), None), {}, RuntimeError),
                      ((_rand((3, 4)), _rand((5, 4)), _rand((4,))), {}, RuntimeError),
                      ((_rand((3, 4)), _rand((2, 5, 4)), None), {}, RuntimeError)],
                  torch=lambda torch, x, w, b=None: torch.nn.functional.linear(x, w, b))


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (weight is (out_features, in_features)); a 1-D
    weight gives ``input @ weight + bias`` as PyTorch.

    >>> tg.linear(tg.ones(2, 3), tg.ones(4, 3), tg.zeros(4)).shape
    (2, 4)
    """
    if len(weight.shape) == 1:
        from .linalg import matmul
        if input.shape[-1:] != weight.shape:
            raise op_error("linear", f"input {tuple(input.shape)} and weight "
                                     f"{tuple(weight.shape)}: in_features must match the "
                                     f"input's last dim", RuntimeError)
        out = matmul(input, weight)
        return out if bias is None else out + bias
    return bind(LINEAR, input, weight, bias)


# ================================================================ losses
# Class-index losses are composites: the targets become a constant coefficient
# array M (one-hot times class weight, label smoothing folded in), and the loss is
# -sum(log_probs * M) / denominator; so every order differentiates through mul/sum.
def _reduce(name, loss, reduction):
    from .reduce import mean, sum as _sum
    if reduction == "none":
        return loss
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    raise op_error(name, f"{reduction!r} is not a valid value for reduction "
                         f"(expected 'none', 'mean' or 'sum')")


def _raw(t):
    return getattr(t, "_data", t)


def _class_coef(name, input, target, weight, ignore_index, label_smoothing):
    """(M, denominator) for class-index targets; M has input's shape."""
    x, t = _raw(input), _raw(target)
    xp = _xp(x)
    if t.dtype.kind not in "iu":
        raise op_error(name, f"expected class indices of an integer dtype (or class "
                             f"probabilities of input's shape), got {t.dtype} target of shape "
                             f"{tuple(t.shape)}", RuntimeError)
    C = x.shape[1] if x.ndim > 1 else x.shape[0]
    squeeze = x.ndim == 1
    if squeeze:
        x, t = x[None], t[None]
    if t.shape != (x.shape[0],) + x.shape[2:]:
        raise op_error(name, f"expected target of shape {(x.shape[0],) + x.shape[2:]} for input "
                             f"of shape {tuple(_raw(input).shape)}, got {tuple(t.shape)}",
                       ValueError)
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= C))
    if bad.any():
        raise op_error(name, f"target {int(t[bad].reshape(-1)[0])} is out of bounds for "
                             f"{C} classes", IndexError)
    classes = xp.arange(C).reshape((1, C) + (1,) * (x.ndim - 2))
    onehot = (xp.expand_dims(t, 1) == classes) & xp.expand_dims(valid, 1)
    w = xp.ones(C, dtype=x.dtype) if weight is None else _raw(weight).astype(x.dtype)
    if w.shape != (C,):
        raise op_error(name, f"weight of shape {tuple(w.shape)} does not match {C} classes",
                       RuntimeError)
    wb = w.reshape(classes.shape)
    M = onehot * wb
    denom = M.sum()
    if label_smoothing:
        M = (1 - label_smoothing) * M + (label_smoothing / C) * (wb * xp.expand_dims(valid, 1))
    M = M.astype(x.dtype)
    return (M[0] if squeeze else M), denom


def _weighted_nll(name, logp, target, weight, ignore_index, reduction, label_smoothing):
    from .reduce import sum as _sum
    M, denom = _class_coef(name, logp, target, weight, ignore_index, label_smoothing)
    if reduction == "none":
        return -_sum(logp * M, dim=1 if len(logp.shape) > 1 else 0)
    total = -_sum(logp * M)
    if reduction == "sum":
        return total
    if reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):
            return total / float(denom)  # all targets ignored: nan, as PyTorch
    return _reduce(name, total, reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class indices ``target`` under log-probabilities
    ``input`` (N, C, ...); ``weight`` rescales classes (a constant, as PyTorch)."""
    return _weighted_nll("nll_loss", input, target, weight, ignore_index, reduction, 0.0)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """``nll_loss(log_softmax(input, 1), target)`` for class indices, or
    ``-sum(target * log_softmax(input, 1), 1)`` for class probabilities (target of
    input's shape); ``label_smoothing`` mixes in the uniform distribution.

    >>> tg.cross_entropy(tg.zeros(2, 4), tg.tensor([0, 3])).item()  # log(4)
    1.3862943611198906
    """
    from .reduce import sum as _sum, mean
    if not 0.0 <= label_smoothing <= 1.0:
        raise op_error("cross_entropy", f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if len(input.shape) == 0:
        raise op_error("cross_entropy", "input must have at least 1 dim (the classes)",
                       RuntimeError)
    cdim = 1 if len(input.shape) > 1 else 0
    logp = log_softmax(input, dim=cdim)
    if _raw(target).dtype.kind == "f":
        if tuple(target.shape) != tuple(input.shape):
            raise op_error("cross_entropy", f"probability target of shape {tuple(target.shape)}"
                                            f" must match input {tuple(input.shape)}", RuntimeError)
        C = input.shape[cdim]
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / C
        if weight is not None:
            target = target * _raw(weight).astype(_raw(logp).dtype).reshape(
                (C,) + (1,) * (len(input.shape) - cdim - 1))
        loss = -_sum(logp * target, dim=cdim)
        if reduction == "mean" and len(input.shape) > 1:
            return _sum(loss) / float(loss.shape[0] * int(np.prod(loss.shape[1:])))
        return _reduce("cross_entropy", loss, reduction) if reduction != "mean" else mean(loss)
    return _weighted_nll("cross_entropy", logp, target, weight, ignore_index, reduction,
                         label_smoothing)


def _same_shape(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        from .._util import broadcast_shapes
        broadcast_shapes(name, tuple(input.shape), tuple(target.shape))


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean squared error (``reduction`` 'mean', 'sum' or 'none')."""
    _same_shape("mse_loss", input, target)
    d = input - target
    return _reduce("mse_loss", d * d, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean absolute error (subgradient 0 where input == target, as PyTorch)."""
    from .elementwise import abs as _abs
    _same_shape("l1_loss", input, target)
    return _reduce("l1_loss", _abs(input - target), reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-(t log x + (1 - t) log(1 - x))`` with each log clamped at -100, as PyTorch."""
    from .elementwise import log, maximum
    if tuple(input.shape) != tuple(target.shape):
        raise op_error("binary_cross_entropy", f"target of shape {tuple(target.shape)} must "
                                               f"match input {tuple(input.shape)}")
    x = _raw(input)
    if x.size and bool(((x < 0) | (x > 1)).any()):
        raise op_error("binary_cross_entropy", "all elements of input should be between 0 "
                                               "and 1", RuntimeError)
    loss = -(target * maximum(log(input), -100.0) + (1 - target) * maximum(log(1 - input), -100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce("binary_cross_entropy", loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross-entropy in one stable formula:
    ``(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)``."""
    from .elementwise import where, log1p, exp
    if tuple(input.shape) != tuple(target.shape):
        raise op_error("binary_cross_entropy_with_logits",
                       f"target of shape {tuple(target.shape)} must match input "
                       f"{tuple(input.shape)}")
    # softplus(-x) = -min(x, 0) + log1p(exp(-|x|)); both pieces pick the x >= 0 branch
    # at 0 through where, so the derivative there is the true -1/2 (abs/relu give 0)
    pos = _raw(input) >= 0
    softplus_neg = log1p(exp(-where(pos, input, -input))) - where(pos, 0.0, input)
    loss = (1 - target) * input
    if pos_weight is not None:
        loss = loss + (1 + (pos_weight - 1) * target) * softplus_neg
    else:
        loss = loss + softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce("binary_cross_entropy_with_logits", loss, reduction)


# ================================================================ normalization
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance)."""
    from .reduce import mean
    from .elementwise import rsqrt
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    ns = tuple(int(s) for s in normalized_shape)
    if not ns or tuple(input.shape[len(input.shape) - len(ns):]) != ns:
        raise op_error("layer_norm", f"normalized_shape {ns} does not match the trailing dims "
                                     f"of input {tuple(input.shape)}", RuntimeError)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise op_error("layer_norm", f"{name} of shape {tuple(p.shape)} must be {ns}",
                           RuntimeError)
    dims = tuple(range(len(input.shape) - len(ns), len(input.shape)))
    xc = input - mean(input, dim=dims, keepdim=True)
    out = xc * rsqrt(mean(xc * xc, dim=dims, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalization over dim 1 of (N, C, ...). In training, batch statistics
    normalize and the running ones are updated in place (unbiased variance), as
    PyTorch; otherwise the running statistics normalize."""
    from .reduce import mean
    from .elementwise import rsqrt
    from .shape import reshape
    from ..autodiff import no_grad
    if len(input.shape) < 2:
        raise op_error("batch_norm", f"expected an input of at least 2 dims (N, C, ...), got "
                                     f"{tuple(input.shape)}", ValueError)
    C = input.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (C,):
            raise op_error("batch_norm", f"{name} of shape {tuple(p.shape)} must be ({C},)",
                           RuntimeError)
    bshape = (1, C) + (1,) * (len(input.shape) - 2)
    dims = (0,) + tuple(range(2, len(input.shape)))
    if training:
        n = int(np.prod([input.shape[d] for d in dims]))
        if n <= 1:
            raise op_error("batch_norm", f"expected more than 1 value per channel when "
                                         f"training, got input {tuple(input.shape)}", ValueError)
        mu = mean(input, dim=dims, keepdim=True)
        xc = input - mu
        var = mean(xc * xc, dim=dims, keepdim=True)
        out = xc * rsqrt(var + eps)
        with no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(_raw(mu).reshape(C) * momentum)
            if running_var is not None:
                running_var.mul_(1 - momentum).add_(_raw(var).reshape(C) * (momentum * n / (n - 1)))
    else:
        if running_mean is None or running_var is None:
            raise op_error("batch_norm", "running_mean and running_var are needed when not "
                                         "training", RuntimeError)
        out = (input - reshape(running_mean, bshape)) * rsqrt(reshape(running_var, bshape) + eps)
    if weight is not None:
        out = out * reshape(weight, bshape)
    return out if bias is None else out + reshape(bias, bshape)


# ================================================================ dropout, embedding
def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``,
    drawing from tapegrad's seeded generator (``tg.manual_seed``)."""
    from .creation import generator
    if not 0.0 <= p <= 1.0:
        raise op_error("dropout", f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    x = _raw(input)
    if p == 1.0:
        return input * _xp(x).zeros((), dtype=x.dtype)
    keep = generator().random(tuple(x.shape)) >= p
    mask = _xp(x).asarray((keep / (1.0 - p)).astype(x.dtype))
    return input * mask


def _embedding_kernel(input, weight, *, padding_idx, mask_padding):
    if input.dtype.kind not in "iu":
        raise TypeError("embedding: integer indices expected")
    out = _xp(weight).take(weight, input, axis=0)
    if mask_padding and padding_idx is not None:
        out[input == padding_idx] = 0
    return out


def _embedding_infer(input, weight, *, padding_idx, mask_padding):
    if np.dtype(input.dtype).kind not in "iu":
        raise op_error("embedding", f"expected integer indices, got {np.dtype(input.dtype)}",
                       TypeError)
    if len(weight.shape) != 2:
        raise op_error("embedding", f"weight must be 2-D (num_embeddings, embedding_dim), got "
                                    f"{tuple(weight.shape)}", RuntimeError)
    return TensorSpec(tuple(input.shape) + (weight.shape[1],), weight.dtype)


def _embedding_vjp(ctx, g):
    idx = ctx.inputs[0]
    return None, bind(EMBEDDING_BACKWARD, g, idx, num_weights=ctx.shapes[1][0],
                      padding_idx=ctx.attrs["padding_idx"])


def _embedding_samples(dtype=np.float64):
    w = _rand((5, 3), dtype, seed=1)
    return [Sample((np.array([[0, 2, 2], [4, 1, 0]]), w), dict(padding_idx=None, mask_padding=False)),
            # PyTorch's padding row gets no gradient although it is read: forward only
            Sample((np.array([3, 2, 3]), w), dict(padding_idx=2, mask_padding=False), grad=False),
            Sample((np.array(1), w), dict(padding_idx=None, mask_padding=False)),
            Sample((np.array([[1, 2]]), w), dict(padding_idx=2, mask_padding=True))]


def _torch_embedding(torch, input, weight, *, padding_idx, mask_padding):
    out = torch.nn.functional.embedding(input, weight, padding_idx)
    if mask_padding and padding_idx is not None:
        out = out * (input != padding_idx).unsqueeze(-1)
    return out


EMBEDDING = register(name="embedding", kernel=_embedding_kernel, args=("input", "weight"),
                     infer=_embedding_infer, vjp=_embedding_vjp, saves=("input",),
                     samples=_embedding_samples, torch=_torch_embedding,
                     error_samples=lambda: [((np.array([0.5]), _rand((3, 2))),
                                             dict(padding_idx=None, mask_padding=False), TypeError)])


def _embedding_backward_kernel(g, input, *, num_weights, padding_idx):
    D = g.shape[-1]
    out = _xp(g).zeros((num_weights, D), dtype=g.dtype)
    _xp(g).add.at(out, input.reshape(-1), g.reshape(input.size, D))
    if padding_idx is not None:
        out[padding_idx] = 0
    return out


def _embedding_backward_infer(g, input, *, num_weights, padding_idx):
    if tuple(g.shape[:-1]) != tuple(input.shape):
        raise op_error("embedding_backward", f"g of shape {tuple(g.shape)} does not match "
                                             f"indices {tuple(input.shape)}", RuntimeError)
    return TensorSpec((num_weights, g.shape[-1]), g.dtype)


EMBEDDING_BACKWARD = register(
    name="embedding_backward", kernel=_embedding_backward_kernel, args=("g", "input"),
    infer=_embedding_backward_infer, saves=("input",),
    # the scatter-add's adjoint gathers, with the padding rows' reads masked to zero
    vjp=lambda ctx, gg: (bind(EMBEDDING, ctx.inputs[1], gg, padding_idx=ctx.attrs["padding_idx"],
                              mask_padding=True), None),
    samples=lambda dtype=np.float64: [
        Sample((_rand((2, 3, 4), dtype, seed=2), np.array([[0, 2, 2], [4, 1, 0]])),
               dict(num_weights=5, padding_idx=None)),
        Sample((_rand((3, 2), dtype, seed=3), np.array([1, 2, 1])),
               dict(num_weights=4, padding_idx=1))],
    error_samples=lambda: [((_rand((2, 3)), np.array([0, 1, 2])),
                            dict(num_weights=4, padding_idx=None), RuntimeError)])


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` picked by integer ``input``; the gradient scatter-adds into
    the rows (the ``padding_idx`` row gets none)."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise op_error("embedding", "max_norm, scale_grad_by_freq and sparse are not "
                                    "supported", NotImplementedError)
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:
            raise op_error("embedding", f"padding_idx {padding_idx} out of range for {n} "
                                        f"embeddings", ValueError)
        padding_idx = int(padding_idx) % n
    idx = _raw(input)
    if idx.size and idx.dtype.kind in "iu" and (idx.min() < 0 or idx.max() >= weight.shape[0]):
        raise op_error("embedding", f"index out of range: indices span [{int(idx.min())}, "
                                    f"{int(idx.max())}] for {weight.shape[0]} embeddings",
                       IndexError)
    return bind(EMBEDDING, input, weight, padding_idx=padding_idx, mask_padding=False)


# ================================================================ attention, one_hot
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(q k^T * scale + mask) v`` with PyTorch's mask rules: a bool mask
    keeps True positions, a float mask is added, ``is_causal`` keeps j <= i."""
    from .linalg import matmul
    from .shape import mT
    from .elementwise import where
    q = _raw(query)
    if len(query.shape) < 2 or query.shape[-1] != key.shape[-1] or \
            key.shape[-2] != value.shape[-2]:
        raise op_error("scaled_dot_product_attention",
                       f"query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                       f"{tuple(value.shape)} need matching embedding dims (q, k) and "
                       f"sequence lengths (k, v)", RuntimeError)
    if is_causal and attn_mask is not None:
        raise op_error("scaled_dot_product_attention", "pass either attn_mask or is_causal",
                       RuntimeError)
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / float(np.sqrt(query.shape[-1])) if scale is None else float(scale)
    attn = matmul(query, mT(key)) * scale
    if is_causal:
        attn_mask = _xp(q).tril(_xp(q).ones((L, S), dtype=bool))
    if attn_mask is not None:
        if _raw(attn_mask).dtype == np.bool_:
            attn = where(attn_mask, attn, -np.inf)
        else:
            attn = attn + attn_mask
    attn = softmax(attn, dim=-1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return matmul(attn, value)


def _one_hot_kernel(input, *, num_classes):
    if input.dtype.kind not in "iu":
        raise RuntimeError("one_hot: is only applicable to index tensors")
    if input.size and (input.min() < 0 or input.max() >= num_classes):
        raise RuntimeError(f"one_hot: class values must be in [0, {num_classes}), got "
                           f"[{int(input.min())}, {int(input.max())}]")
    xp = _xp(input)
    return (input[..., None] == xp.arange(num_classes)).astype(np.int64)


def _one_hot_infer(input, *, num_classes):
    if np.dtype(input.dtype).kind not in "iu":
        raise op_error("one_hot", f"is only applicable to index tensors, got "
                                  f"{np.dtype(input.dtype)}", RuntimeError)
    return TensorSpec(tuple(input.shape) + (num_classes,), np.dtype(np.int64))


ONE_HOT = register(name="one_hot", kernel=_one_hot_kernel, infer=_one_hot_infer, args=("input",),
                   differentiable=False,
                   samples=lambda dtype=np.float64: [
                       Sample((np.array([0, 2, 1]),), dict(num_classes=3), grad=False),
                       Sample((np.array([[1], [4]]),), dict(num_classes=6), grad=False),
                       Sample((np.zeros((0,), np.int64),), dict(num_classes=2), grad=False)],
                   torch=lambda torch, x, num_classes: torch.nn.functional.one_hot(x, num_classes),
                   error_samples=lambda: [((np.array([0.5]),), dict(num_classes=2), RuntimeError),
                                          ((np.array([3]),), dict(num_classes=2), RuntimeError)])


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding with a new last dim of ``num_classes`` (-1: max + 1)."""
    if num_classes == -1:
        raw = _raw(tensor)
        if raw.dtype.kind not in "iu":
            raise op_error("one_hot", f"is only applicable to index tensors, got {raw.dtype}",
                           RuntimeError)
        num_classes = int(raw.max()) + 1 if raw.size else 0
    return bind(ONE_HOT, tensor, num_classes=int(num_classes))
