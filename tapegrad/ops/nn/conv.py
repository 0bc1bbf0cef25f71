"""Convolution: conv2d and its two gradient ops; conv1d runs conv2d with H = 1.

conv2d is the one convolution primitive. Its two adjoints are ops of their own so
every order differentiates: the input gradient is a transposed convolution
(col2im), the weight gradient a correlation of the input with g, and each one's
adjoint is again one of the three.
"""
import functools
import math

import numpy as np

from ..._util import op_error
from ...devices import xp_of
from ...devices.cpu_kernels import conv as cpu_conv, pool as cpu_pool
from ...dispatch import bind
from ...dtypes import is_float as _isf
from .. import _jvp, _vmap
from .._decl import Sample, TensorSpec, composite, one_dtype, rand as _rand, register
from ..shape import squeeze, unsqueeze
from ._common import is_int_pair, need_float, pair, same_dtype


# ================================================================ attributes
def _conv_attrs(stride=1, padding=0, dilation=1, groups=1, *, kernel_size=(1, 1)):
    """conv2d's attributes in their canonical form: stride and dilation pairs,
    padding ((top, bottom), (left, right)), groups an int. Takes what the public
    function takes (ints, pairs, 'valid', or 'same', which needs ``kernel_size``)
    or the canonical form itself. The one place conv attributes are made canonical:
    the public function, kernel, shape rule, workspace rule and samples use it."""
    stride = pair("conv2d", stride, "stride")
    dilation = pair("conv2d", dilation, "dilation")
    padding = _conv_padding("conv2d", padding, kernel_size, stride, dilation)
    if type(groups) is not int and (isinstance(groups, bool) or
                                    not isinstance(groups, (int, np.integer))):
        raise op_error("conv2d", f"groups must be an int, got {groups!r}", TypeError)
    return dict(stride=stride, padding=padding, dilation=dilation, groups=int(groups))


def _conv_padding(name, padding, kernel_size, stride, dilation):
    """int / pair / 'valid' / 'same' / ((top, bottom), (left, right)) to the last."""
    if type(padding) is tuple and len(padding) == 2 and is_int_pair(padding[0]) and \
            is_int_pair(padding[1]):  # already canonical: the common case, kept cheap
        return padding
    if isinstance(padding, (tuple, list)) and len(padding) == 2 and \
            all(isinstance(p, (tuple, list)) for p in padding):
        return tuple(tuple(int(v) for v in p) for p in padding)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding != "same":
            raise op_error(name, f"padding must be an int, a pair, 'valid' or 'same', got "
                                 f"{padding!r}", RuntimeError)
        if stride != (1, 1):
            raise op_error(name, "padding='same' is not supported for strided convolutions",
                           RuntimeError)
        out = []
        for k, d in zip(kernel_size, dilation):
            total = d * (k - 1)  # PyTorch puts the odd extra element at the end
            out.append((total // 2, total - total // 2))
        return tuple(out)
    p = pair(name, padding, "padding")
    return ((p[0], p[0]), (p[1], p[1]))


def _kernel_size(weight_shape):
    return tuple(weight_shape[2:]) if len(weight_shape) == 4 else (1, 1)


def _public_conv_attrs(fn):
    """Let registry users pass conv2d's public keywords (defaults, ints, 'same')."""
    def wrapped(input, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, **kw):
        attrs = _conv_attrs(stride, padding, dilation, groups,
                            kernel_size=_kernel_size(weight.shape))
        return fn(input, weight, bias, **attrs, **kw)
    wrapped.__wrapped__ = fn
    return wrapped


def _ctx_attrs(ctx):
    """The call's attrs in canonical form (a registry call may give public keywords,
    or none: ``op.compute(x, w, None, padding=1)``)."""
    a = ctx.attrs
    return _conv_attrs(a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1),
                       a.get("groups", 1), kernel_size=_kernel_size(ctx.shapes[1]))


# ================================================================ geometry and checks
def _conv_out(size, k, s, p, d):
    return (size + p[0] + p[1] - d * (k - 1) - 1) // s + 1


def _memo(fn):
    """``fn`` (of hashable arguments, usually) remembered per arguments: the kernels ask
    for the same geometry and scratch layout on every call of a training loop (~1 us
    a lookup against ~5 us computing); unhashable arguments compute."""
    cached = functools.lru_cache(maxsize=512)(fn)

    @functools.wraps(fn)
    def call(*args, **kw):
        try:
            return cached(*args, **kw)
        except TypeError:  # (a list among the arguments)
            return fn(*args, **kw)
    return call


@_memo
def _geom(x_shape, w_shape, stride, padding, dilation):
    """Output (Ho, Wo) and padded (Hp, Wp) for an NCHW input and OIhw weight."""
    (_, _, H, W), (_, _, kh, kw) = x_shape, w_shape
    Ho = _conv_out(H, kh, stride[0], padding[0], dilation[0])
    Wo = _conv_out(W, kw, stride[1], padding[1], dilation[1])
    return Ho, Wo, H + sum(padding[0]), W + sum(padding[1])


def _check_conv(name, x, w, stride, padding, dilation, groups, b=None):
    xs, ws = tuple(x.shape), tuple(w.shape)
    if len(xs) != 4 or len(ws) != 4:
        raise op_error(name, f"expected a 4-D input (N, C, H, W) and a 4-D weight (O, C/groups, "
                             f"kH, kW), got input {xs} and weight {ws}", RuntimeError)
    if not _isf(np.dtype(x.dtype)) or not _isf(np.dtype(w.dtype)):
        raise op_error(name, f"expected floating point input and weight, got "
                             f"{np.dtype(x.dtype)} and {np.dtype(w.dtype)}", TypeError)
    for what, v, low in (("stride", stride, 1), ("dilation", dilation, 1),
                         ("padding", padding[0] + padding[1], 0)):
        if min(v) < low:
            raise op_error(name, f"{what} must be {'positive' if low else 'non-negative'}, "
                                 f"got {v}", RuntimeError)
    if groups < 1:
        raise op_error(name, f"groups must be positive, got {groups}", RuntimeError)
    if min(ws[0], ws[2], ws[3]) < 1:
        raise op_error(name, f"weight {ws} must have at least one output channel and a kernel "
                             f"of positive size", RuntimeError)
    if xs[1] != ws[1] * groups or ws[0] % groups:
        raise op_error(name, f"input {xs} with groups={groups} expects weight of shape "
                             f"(O, {xs[1] // groups}, kH, kW) with O divisible by groups, got "
                             f"weight {ws}", RuntimeError)
    if b is not None and tuple(b.shape) != (ws[0],):
        raise op_error(name, f"bias of shape {tuple(b.shape)} does not match the {ws[0]} "
                             f"output channels", RuntimeError)
    Ho, Wo, _, _ = _geom(xs, ws, stride, padding, dilation)
    if Ho < 1 or Wo < 1:
        raise op_error(name, f"input {xs} (padded by {padding}) is smaller than the dilated "
                             f"kernel {ws[2:]} (dilation {dilation})", RuntimeError)
    return Ho, Wo


# ================================================================ scratch and im2col
def _align(n):
    return (int(n) + 63) // 64 * 64


def _is_padded(padding):
    return any(padding[0]) or any(padding[1])


def _is_pointwise(kernel_size, stride, padding):
    """A 1x1, stride-1, unpadded convolution: the input is its own im2col."""
    return tuple(kernel_size) == (1, 1) and tuple(stride) == (1, 1) and not _is_padded(padding)


def _g_transposed(w_shape):
    """Whether the weight gradient copies g transposed, (N, L, O), to run its GEMMs
    untransposed: the copy costs 1/K of the GEMM's work, and OpenBLAS runs
    cols @ g^T ~1.4x slower than cols @ gT on the CNN shapes with K = C*kh*kw >= 32
    (below that the copy costs more than it saves)."""
    return w_shape[1] * w_shape[2] * w_shape[3] >= 32


@_memo
def _conv_ws(x_shape, w_shape, itemsize, stride, padding, dilation, g_copy=False):
    """Scratch layout: [padded input | im2col columns | (weight grad) per-sample
    weight gradients, summed into the output, and g transposed where
    ``_g_transposed``]."""
    N, C, _, _ = x_shape
    Cout, Cg, kh, kw = w_shape
    Ho, Wo, Hp, Wp = _geom(x_shape, w_shape, stride, padding, dilation)
    pad = _align(N * C * Hp * Wp * itemsize) if _is_padded(padding) else 0
    cols = _align(N * C * kh * kw * Ho * Wo * itemsize)
    per_sample = 0
    if g_copy:
        per_sample = _align(N * Cout * Cg * kh * kw * itemsize)
        if _g_transposed(w_shape):
            per_sample += _align(N * Cout * Ho * Wo * itemsize)
    return pad, cols, per_sample


def _nhwc_ws(x_shape, w_shape, dtype, stride, padding, dilation, groups):
    """Bytes the weight gradient's channels-last path (``cpu_conv.nhwc_ok``) adds after
    ``_conv_ws``'s layout: the zero-bordered channels-last image; 0 where that path is
    not taken."""
    dtype = np.dtype(dtype)
    if dtype not in _NUMBA_FLOATS or not cpu_conv.nhwc_ok(x_shape[1], groups, stride,
                                                          dilation):
        return 0
    N, C = x_shape[:2]
    _, _, Hp, Wp = _geom(x_shape, w_shape, stride, padding, dilation)
    return _align(N * Hp * Wp * C * dtype.itemsize)


_NUMBA_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _ws_view(ws, start, shape, dtype):
    n = math.prod(shape) * dtype.itemsize  # (math.prod: np.prod costs ~10 us a call)
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
    return xp_of(xp_).lib.stride_tricks.as_strided(
        xp_, shape=(xp_.shape[0], xp_.shape[1], kh, kw, Ho, Wo),
        strides=(sN, sC, sH * dilation[0], sW * dilation[1], sH * stride[0], sW * stride[1]))


def _im2col(x, w_shape, workspace, stride, padding, dilation):
    """Columns of x in the workspace, (N, C, kh, kw, Ho, Wo)."""
    N, C = x.shape[:2]
    kh, kw = w_shape[2:]
    Ho, Wo, Hp, Wp = _geom(x.shape, w_shape, stride, padding, dilation)
    npad, _, _ = _conv_ws(x.shape, w_shape, x.dtype.itemsize, stride, padding, dilation)
    if _numba_cpu(x):  # one pass, the padding taken in the loop
        cols = _ws_view(workspace, npad, (N, C, kh, kw, Ho, Wo), x.dtype)
        return cpu_conv.im2col(x, cols, stride, padding, dilation)
    buf = _ws_view(workspace, 0, (N, C, Hp, Wp), x.dtype) if npad else None
    win = _windows(_pad_into(x, padding, buf), kh, kw, Ho, Wo, stride, dilation)
    cols = _ws_view(workspace, npad, (N, C, kh, kw, Ho, Wo), x.dtype)
    cols[...] = win
    return cols


def _numba_cpu(a):
    """A NumPy array of a dtype the CPU's Numba loops take."""
    return isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64)


def _bmm(a, b, out):
    """``matmul(a, b, out=out)`` batched over the leading dim of ``out`` (threaded on
    the CPU)."""
    if isinstance(out, np.ndarray):
        return cpu_conv.bmm(a, b, out)
    return xp_of(out).matmul(a, b, out=out)


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
            rows = slice(h0, h0 + sh * (Ho - 1) + 1, sh)
            dst[:, :, rows, w0:w0 + sw * (Wo - 1) + 1:sw] += cols[:, :, i, j]


# ================================================================ conv2d
def _conv2d_kernel(input, weight, bias=None, *, stride, padding, dilation, groups,
                   workspace, out=None):
    N, C, H, W = input.shape
    Cout, Cg, kh, kw = weight.shape
    Ho, Wo, _, _ = _geom(input.shape, weight.shape, stride, padding, dilation)
    if out is None:
        out = xp_of(input).empty((N, Cout, Ho, Wo), dtype=input.dtype)
    if N == 0:  # an empty batch: an empty result, as PyTorch
        return out
    K, L = Cg * kh * kw, Ho * Wo
    pointwise = _is_pointwise((kh, kw), stride, padding)
    if not pointwise and _numba_cpu(input) and _numba_cpu(out) and out.flags.c_contiguous:
        # im2col, GEMMs and bias per chunk of the batch, in one parallel region
        npad, _, _ = _conv_ws(input.shape, weight.shape, input.dtype.itemsize, stride,
                              padding, dilation)
        cols = _ws_view(workspace, npad, (N, C, kh, kw, Ho, Wo), input.dtype)
        return cpu_conv.conv2d(input, weight.reshape(groups, Cout // groups, K), bias, out,
                               cols, stride, padding, dilation)
    if pointwise:
        cols = input.reshape(N, groups, K, L)
    else:
        cols = _im2col(input, weight.shape, workspace, stride, padding, dilation)
        cols = cols.reshape(N, groups, K, L)
    _bmm(weight.reshape(groups, Cout // groups, K), cols,
         out=out.reshape(N, groups, Cout // groups, L))
    if bias is not None:
        if _numba_cpu(out) and out.flags.c_contiguous and out.dtype == bias.dtype:
            cpu_conv.bias_add(out, bias)
        else:
            out += bias.reshape(1, Cout, 1, 1)
    return out


def conv2d_relu_pool(input, weight, bias, out, pool=None, *, stride, padding, dilation, groups,
                     workspace, pre=None):
    """``out = relu(conv2d(input, weight, bias))`` and, with ``pool`` = (kernel_size,
    stride, padding, dilation, values, indices), ``max_pool2d`` of it into those two
    (N, O, Hq, Wq) buffers: the ReLU and the pooling run on each chunk of the batch
    right after its GEMMs, while it is in cache, with the arithmetic of the three
    eager kernels (the results are theirs, bitwise). ``pre``: a layer before, as
    ``conv2d_relu_pool_plan`` gives it, whose result is ``input``: each chunk runs it
    first (one parallel region for both). Returns False, touching nothing, where this
    path does not apply (the caller runs the ops in turn)."""
    plan = conv2d_relu_pool_plan(input, weight, bias, out, pool, stride=stride,
                                 padding=padding, dilation=dilation, groups=groups,
                                 workspace=workspace)
    if plan is None or (pre is not None and not input.flags.c_contiguous):
        return False
    cpu_conv.run_work(plan, pre)
    return True


def conv2d_relu_pool_plan(input, weight, bias, out, pool=None, *, stride, padding, dilation,
                          groups, workspace):
    """``conv2d_relu_pool``'s work, not run: ``cpu_conv.conv2d_work``'s plan, or None
    where the fused path does not apply."""
    N = input.shape[0]
    Cout, Cg, kh, kw = weight.shape
    arrays = [out] + ([pool[4], pool[5]] if pool is not None else [])
    if N == 0 or out.size == 0 or _is_pointwise((kh, kw), stride, padding) or \
            not (_numba_cpu(input) and _numba_cpu(out)) or input.dtype != out.dtype or \
            not all(type(a) is np.ndarray and a.flags.c_contiguous and a.size for a in arrays):
        return None
    npad, _, _ = _conv_ws(input.shape, weight.shape, input.dtype.itemsize, stride, padding,
                          dilation)
    Ho, Wo = out.shape[2:]
    cols = _ws_view(workspace, npad, (N, input.shape[1], kh, kw, Ho, Wo), input.dtype)
    fused = None
    if pool is not None:
        ks, st, pad, dil, values, indices = pool
        k = cpu_pool.plane_kernel(ks, st, pad, dil, Ho, Wo, *values.shape[2:])
        fused = (k, values, indices)
    return cpu_conv.conv2d_work(input, weight.reshape(groups, Cout // groups, Cg * kh * kw),
                                bias, out, cols, stride, padding, dilation, relu=True,
                                pool=fused)


def _conv2d_vjp(ctx, g):
    x, w, _ = ctx.inputs
    n = ctx.needs_input_grad
    attrs = _ctx_attrs(ctx)
    gx = bind(CONV2D_INPUT_GRAD, g, w, input_shape=ctx.shapes[0], **attrs) if n[0] else None
    gw = bind(CONV2D_WEIGHT_GRAD, x, g, weight_shape=ctx.shapes[1], **attrs) if n[1] else None
    gb = ctx.m.sum(g, dim=(0, 2, 3)) if len(n) > 2 and n[2] else None
    return gx, gw, gb


def _conv2d_infer(input, weight, bias=None, *, stride, padding, dilation, groups):
    # no promotion (PyTorch's RuntimeError for mixed dtypes), floats only
    one_dtype("conv2d", (input, weight, bias), ("input", "weight", "bias"))
    Ho, Wo = _check_conv("conv2d", input, weight, stride, padding, dilation, groups, bias)
    return TensorSpec((input.shape[0], weight.shape[0], Ho, Wo), np.dtype(input.dtype))


def _conv2d_workspace(input, weight, bias=None, *, stride, padding, dilation, groups):
    if _is_pointwise(weight.shape[2:], stride, padding):
        return 0
    return sum(_conv_ws(input.shape, weight.shape, np.dtype(input.dtype).itemsize, stride,
                        padding, dilation))


def _conv_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((2, 2, 5, 4), 1), r((3, 2, 3, 2), 2), r((3,), 3)), _conv_attrs()),
            Sample((r((1, 2, 5, 5), 4), r((2, 2, 3, 3), 5), None), _conv_attrs(2, 1)),
            Sample((r((1, 4, 5, 6), 6), r((4, 2, 2, 3), 7), r((4,), 8)),
                   _conv_attrs((1, 2), (2, 1), (2, 1), 2)),
            Sample((r((2, 3, 3, 3), 9), r((2, 3, 1, 1), 10), None), _conv_attrs()),
            Sample((r((1, 1, 4, 5), 11), r((1, 1, 2, 2), 12), None),
                   _conv_attrs(padding=((0, 1), (1, 0)))),
            Sample((r((2, 2, 4, 4), 13).transpose(0, 1, 3, 2), r((2, 2, 3, 3), 14), None),
                   _conv_attrs(1, 1)),
            # an empty batch: an empty output, zero weight and bias gradients (PyTorch)
            Sample((r((0, 2, 5, 5), 15), r((3, 2, 3, 3), 16), r((3,), 17)), _conv_attrs(1, 1))]


def _torch_conv(torch, x, w, b=None, *, stride, padding, dilation, groups):
    (pt, pb), (pl, pr) = padding
    x = torch.nn.functional.pad(x, (pl, pr, pt, pb))
    return torch.nn.functional.conv2d(x, w, b, stride, 0, dilation, groups)


def _conv_errors():
    x, w = _rand((1, 2, 5, 5)), _rand((3, 2, 3, 3))
    return [((_rand((1, 3, 5, 5)), _rand((2, 2, 3, 3)), None), _conv_attrs(), RuntimeError),
            ((_rand((1, 1, 2, 2)), _rand((1, 1, 3, 3)), None), _conv_attrs(), RuntimeError),
            ((_rand((3, 5, 5)), _rand((1, 3, 3, 3)), None), _conv_attrs(), RuntimeError),
            ((x, w, None), _conv_attrs(stride=0), RuntimeError),
            ((x, w, None), _conv_attrs(dilation=(1, 0)), RuntimeError),
            ((x, w, None), _conv_attrs(padding=-1), RuntimeError),
            ((x, w, None), _conv_attrs(groups=0), RuntimeError),
            ((x, _rand((0, 2, 3, 3)), None), _conv_attrs(), RuntimeError),
            ((x, w, None), dict(padding="full"), RuntimeError),
            ((x, w, None), dict(padding="same", stride=2), RuntimeError),
            ((x, w, None), dict(stride=(1, 1, 1)), RuntimeError),
            ((x, w, None), dict(groups=1.5), TypeError)]


def _conv2d_jvp(ctx, tx, tw, tb):
    # bilinear in (input, weight), plus the bias on the channel dim
    x, w, _ = ctx.inputs
    out = None if tx is None else bind(ctx.op, tx, w, None, **ctx.attrs)
    if tw is not None:
        term = bind(ctx.op, x, tw, None, **ctx.attrs)
        out = term if out is None else out + term
    if tb is not None:
        bias = ctx.m.reshape(tb, (-1, 1, 1))
        out = bias if out is None else out + bias
    return (out,)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_conv2d(b, st):
    a = st.attrs
    (pt, pb), (pl, pr) = a["padding"]
    ins = [b.input(st, 0), b.input(st, 1)]
    if b.is_tensor(st, 2):
        ins.append(b.input(st, 2))
    kh, kw = b.shape(st, 1)[2:]
    b.node("Conv", ins, [b.output(st)], kernel_shape=[kh, kw], strides=list(a["stride"]),
           pads=[pt, pl, pb, pr], dilations=list(a["dilation"]), group=a["groups"])


def _onnx_conv_transpose2d(b, st):
    a = st.attrs
    ph, pw = a["padding"]
    ins = [b.input(st, 0), b.input(st, 1)]
    if b.is_tensor(st, 2):
        ins.append(b.input(st, 2))
    kh, kw = b.shape(st, 1)[2:]
    b.node("ConvTranspose", ins, [b.output(st)], kernel_shape=[kh, kw],
           strides=list(a["stride"]), pads=[ph, pw, ph, pw], dilations=list(a["dilation"]),
           group=a["groups"], output_padding=list(a["output_padding"]))


def _onnx_conv2d_input_grad(b, st):
    a = st.attrs
    (pt, pb), (pl, pr) = a["padding"]
    kh, kw = b.shape(st, 1)[2:]
    H, W = a["input_shape"][2:]
    oh, ow = b.shape(st, 0)[2:]
    (sh, sw), (dh, dw) = a["stride"], a["dilation"]
    eh = H - ((oh - 1) * sh + (kh - 1) * dh + 1 - pt - pb)
    ew = W - ((ow - 1) * sw + (kw - 1) * dw + 1 - pl - pr)
    b.node("ConvTranspose", [b.input(st, 0), b.input(st, 1)], [b.output(st)],
           kernel_shape=[kh, kw], strides=[sh, sw], pads=[pt, pl, pb, pr],
           dilations=[dh, dw], group=a["groups"], output_padding=[eh, ew])


def _grouped(ctx, x, w, b):
    """Batched weights of a convolution-like op as groups: x (B, N, C, ...) ->
    (N, B*C, ...), w (B, A, ...) -> (B*A, ...), bias (B*O,), groups times B."""
    m = ctx.m
    B = ctx.size
    sx, sw = tuple(x.shape), tuple(w.shape)
    xg = m.reshape(m.movedim(x, 0, 1), (sx[1], B * sx[2]) + sx[3:])
    wg = m.reshape(w, (B * sw[1],) + sw[2:])
    bg = None
    if b is not None:
        bb = b if ctx.batched[2] else m.broadcast_to(m.unsqueeze(b, 0), (B,) + tuple(b.shape))
        bg = m.reshape(bb, (-1,))
    attrs = dict(ctx.attrs)
    attrs["groups"] = attrs.get("groups", 1) * B
    return xg, wg, bg, attrs


def _ungroup(ctx, out):
    m = ctx.m
    so = tuple(out.shape)
    return m.movedim(m.reshape(out, (so[0], ctx.size, so[1] // ctx.size) + so[2:]), 1, 0)


def _conv2d_vmap(ctx, x, w, b):
    """Unbatched weights: the batch folds into N. Batched weights (or bias): a grouped
    convolution, the batch folded into the channels (groups times the batch)."""
    if not ctx.batched[1] and not (b is not None and ctx.batched[2]):
        return _vmap.nchw_rule(ctx, x, w, b)
    x, w = _vmap.batched_all(ctx, [x, w, b])[:2]     # (B, N, C, H, W), (B, O, Cg, kh, kw)
    xg, wg, bg, attrs = _grouped(ctx, x, w, b)
    return _ungroup(ctx, bind(ctx.op, xg, wg, bg, **attrs))     # from (N, B*O, H', W')


CONV2D = register(name="conv2d", autocast="lower", vmap=_conv2d_vmap, jvp=_conv2d_jvp,
                  kind="workspace", kernel=_public_conv_attrs(_conv2d_kernel),
                  args=("input", "weight", "bias"), optional=("bias",),
                  infer=_public_conv_attrs(_conv2d_infer),
                  workspace=_public_conv_attrs(_conv2d_workspace), vjp=_conv2d_vjp,
                  saves={"input": ("weight",), "weight": ("input",)}, promote="none",
                  samples=_conv_samples,
                  error_samples=_conv_errors, torch=_torch_conv, onnx=_onnx_conv2d)


# ================================================================ conv2d's gradients
def _conv2d_input_grad_kernel(g, weight, *, input_shape, stride, padding, dilation, groups,
                              workspace, out=None):
    N, C, H, W = input_shape
    Cout, Cg, kh, kw = weight.shape
    Ho, Wo, Hp, Wp = _geom(input_shape, weight.shape, stride, padding, dilation)
    if out is None:
        out = xp_of(g).empty(input_shape, dtype=g.dtype)
    if N == 0:
        return out
    K, L = Cg * kh * kw, Ho * Wo
    wT = weight.reshape(groups, Cout // groups, K).transpose(0, 2, 1)
    if _is_pointwise((kh, kw), stride, padding):
        _bmm(wT, g.reshape(N, groups, Cout // groups, L), out=out.reshape(N, groups, K, L))
        return out
    npad, _, _ = _conv_ws(input_shape, weight.shape, g.dtype.itemsize, stride, padding, dilation)
    cols = _ws_view(workspace, npad, (N, groups, K, L), g.dtype)
    if _numba_cpu(out) and _numba_cpu(g):
        # GEMMs and col2im (straight into out, the taps in the padding dropped) per
        # chunk of the batch, in one parallel region
        return cpu_conv.conv2d_input_grad(g.reshape(N, groups, Cout // groups, L), wT, out,
                                          cols.reshape(N, C, kh, kw, Ho, Wo), stride,
                                          padding, dilation)
    _bmm(wT, g.reshape(N, groups, Cout // groups, L), out=cols)
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
    attrs = _ctx_attrs(ctx)
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


def _conv2d_input_grad_vmap(ctx, g, w):
    if not ctx.batched[1]:
        return _vmap.fold_rule((0,), "input_shape")(ctx, g, w)
    g, w = _vmap.batched_all(ctx, [g, w])
    gg, wg, _, attrs = _grouped(ctx, g, w, None)
    n, c = tuple(attrs["input_shape"])[:2]
    attrs["input_shape"] = (n, c * ctx.size) + tuple(attrs["input_shape"])[2:]
    return _ungroup(ctx, bind(ctx.op, gg, wg, **attrs))


CONV2D_INPUT_GRAD = register(
    name="conv2d_input_grad", vmap=_conv2d_input_grad_vmap, jvp=_jvp.multilinear,
    kind="workspace", kernel=_conv2d_input_grad_kernel,
    args=("g", "weight"), infer=_conv2d_input_grad_infer, workspace=_conv2d_input_grad_ws,
    vjp=_conv2d_input_grad_vjp, saves={"g": ("weight",), "weight": ("g",)}, promote="same",
    samples=_grad_samples("input"), torch=_torch_input_grad,
    error_samples=lambda: [((_rand((1, 2, 3, 3)), _rand((2, 1, 3, 3))),
                            dict(_conv_attrs(), input_shape=(1, 1, 4, 4)), RuntimeError)],
                            onnx=_onnx_conv2d_input_grad)


def _nhwc_grad(input, g, groups, stride, dilation):
    """Whether the weight gradient takes the channels-last path (``cpu_conv.nhwc_ok``)."""
    return _numba_cpu(input) and _numba_cpu(g) and input.dtype == g.dtype and \
        cpu_conv.nhwc_ok(input.shape[1], groups, stride, dilation)


def _nhwc_views(x_shape, weight_shape, dtype, stride, padding, dilation, workspace):
    """The channels-last path's scratch in the weight gradient's workspace: the
    zero-bordered channels-last image, the (N, Ho, Wo, kh, kw*C) columns and the
    (N, O, K) per-sample gradients."""
    N, C, H, W = x_shape
    Cout, _, kh, kw = weight_shape
    Ho, Wo, Hp, Wp = _geom(x_shape, weight_shape, stride, padding, dilation)
    dtype = np.dtype(dtype)
    npad, ncols, rest = _conv_ws(x_shape, weight_shape, dtype.itemsize, stride, padding,
                                 dilation, g_copy=True)
    xh = _ws_view(workspace, npad + ncols + rest, (N, Hp, Wp, C), dtype)
    cols = _ws_view(workspace, npad, (N, Ho, Wo, kh, kw * C), dtype)
    per = _ws_view(workspace, npad + ncols, (N, Cout, C * kh * kw), dtype)
    return xh, cols, per


def _nhwc_sum(per, out, workspace, x_shape, weight_shape, stride, padding, dilation):
    """The channels-last path's sum over the batch of ``per`` into ``out`` (O, C, kh,
    kw), read in its own order, into the columns' scratch (done with) when it fits."""
    N, C = x_shape[:2]
    Cout, _, kh, kw = weight_shape
    Ho, Wo, _, _ = _geom(x_shape, weight_shape, stride, padding, dilation)
    npad = _conv_ws(x_shape, weight_shape, per.dtype.itemsize, stride, padding, dilation,
                    g_copy=True)[0]
    tot = _ws_view(workspace, npad, (Cout, kh, kw, C), per.dtype) if N * Ho * Wo >= Cout \
        else np.empty((Cout, kh, kw, C), dtype=per.dtype)
    np.sum(per, axis=0, out=tot.reshape(Cout, -1))
    out[...] = tot.transpose(0, 3, 1, 2)
    return out


def conv2d_input_weight_grad(g, weight, input, gx, gw, *, stride, padding, dilation, groups,
                             workspace, split, pre=None):
    """``conv2d_input_weight_grad_plan``'s work, run: ``conv2d_input_grad(g, weight)``
    into ``gx`` and ``conv2d_weight_grad(input, g)`` into ``gw`` in one parallel
    region; False, touching nothing, where that path does not apply."""
    plan = conv2d_input_weight_grad_plan(g, weight, input, gx, gw, stride=stride,
                                         padding=padding, dilation=dilation, groups=groups,
                                         workspace=workspace, split=split, pre=pre)
    if plan is None:
        return False
    cpu_conv.run_plans(plan[0])
    plan[1]()
    return True


def conv2d_input_weight_grad_plan(g, weight, input, gx, gw, *, stride, padding, dilation,
                                  groups, workspace, split, pre=None):
    """``conv2d_input_grad(g, weight)`` into ``gx`` and ``conv2d_weight_grad(input, g)``
    into ``gw`` (a conv's two gradients from one ``g``) in one parallel region: per
    chunk of the batch, the input gradient's GEMMs and col2im, then the weight
    gradient's channels-last columns and GEMMs while g's chunk is in cache; the two
    kernels' arithmetic (their results, bitwise). ``workspace``: the input gradient's
    scratch (``split`` bytes), then the weight gradient's. ``pre``: as
    ``conv2d_weight_grad_after``'s (``g`` then C-contiguous). Returns (the plan for
    ``cpu_conv.run_plans``, the call that finishes ``gw`` after it), or None where
    this path does not apply (the caller runs the two kernels)."""
    N = input.shape[0]
    Cout, Cg, kh, kw = weight.shape
    if N == 0 or _is_pointwise((kh, kw), stride, padding) or \
            not _nhwc_grad(input, g, groups, stride, dilation) or \
            not all(type(a) is np.ndarray and a.dtype == g.dtype and a.flags.c_contiguous
                    for a in (gx, gw)) or weight.dtype != g.dtype or \
            (pre is not None and not g.flags.c_contiguous):
        return None
    C = input.shape[1]
    Ho, Wo, _, _ = _geom(input.shape, weight.shape, stride, padding, dilation)
    L = Ho * Wo
    wi, ww = workspace[:split], workspace[split:]
    npad = _conv_ws(input.shape, weight.shape, g.dtype.itemsize, stride, padding, dilation)[0]
    cols_i = _ws_view(wi, npad, (N, C, kh, kw, Ho, Wo), g.dtype)
    wT = weight.reshape(1, Cout, Cg * kh * kw).transpose(0, 2, 1)
    xh, cols_w, per = _nhwc_views(input.shape, weight.shape, g.dtype, stride, padding,
                                  dilation, ww)
    plan = cpu_conv.conv2d_input_weight_grad_nhwc_work(
        g.reshape(N, 1, Cout, L), wT, gx, cols_i, input, per, xh, cols_w, stride, padding,
        dilation, pre, native=True)
    return plan, lambda: _nhwc_sum(per, gw, ww, input.shape, weight.shape, stride, padding,
                                   dilation)


def _conv2d_weight_grad_kernel(input, g, *, weight_shape, stride, padding, dilation, groups,
                               workspace, out=None):
    return _weight_grad(input, g, weight_shape, stride, padding, dilation, groups, workspace,
                        out)


def conv2d_weight_grad_after(pre, input, g, out, *, weight_shape, stride, padding, dilation,
                             groups, workspace):
    """``conv2d_weight_grad(input, g)`` into ``out``, each chunk of the batch first
    computing its rows of ``g`` (a C-contiguous buffer) with ``pre`` = ``(fn,
    *arrays)`` (``cpu_conv.conv2d_weight_grad``'s), in the same parallel region.
    Returns False, touching nothing, where the CPU path does not apply."""
    plan = conv2d_weight_grad_after_plan(pre, input, g, out, weight_shape=weight_shape,
                                         stride=stride, padding=padding, dilation=dilation,
                                         groups=groups, workspace=workspace)
    if plan is None:
        return False
    cpu_conv.run_plans(plan[0])
    plan[1]()
    return True


def conv2d_weight_grad_after_plan(pre, input, g, out, *, weight_shape, stride, padding,
                                  dilation, groups, workspace):
    """``conv2d_weight_grad_after``'s work, not run: (the plan for
    ``cpu_conv.run_plans``, the call that finishes ``out`` after it), or None."""
    if input.shape[0] == 0 or not (_numba_cpu(input) and _numba_cpu(g)) or \
            input.dtype != g.dtype or not g.flags.c_contiguous or \
            not (type(out) is np.ndarray and out.dtype == g.dtype):
        return None
    return _weight_grad(input, g, weight_shape, stride, padding, dilation, groups, workspace,
                        out, pre, plan_only=True)


def _weight_grad(input, g, weight_shape, stride, padding, dilation, groups, workspace, out,
                 pre=None, plan_only=False):
    """The weight gradient into ``out``; ``plan_only`` (the CPU paths, ``out`` given):
    (the plan, the call finishing ``out``), not run."""
    N, C, H, W = input.shape
    Cout, Cg, kh, kw = weight_shape
    Ho, Wo, _, _ = _geom(input.shape, weight_shape, stride, padding, dilation)
    xp = xp_of(g)
    if out is None:
        out = xp.empty(weight_shape, dtype=g.dtype)
    if N == 0:  # a sum over an empty batch
        out[...] = 0
        return out
    K, L, Og = Cg * kh * kw, Ho * Wo, Cout // groups
    npad, ncols, _ = _conv_ws(input.shape, weight_shape, g.dtype.itemsize, stride, padding,
                              dilation, g_copy=True)
    # per sample and group dW_n[k, o] = sum_l cols[n, k, l] g[n, o, l] (OpenBLAS runs
    # this orientation ~1.4x faster than g @ cols^T on the small-CNN shapes), then the
    # sum over n
    per = _ws_view(workspace, npad + ncols, (N, groups, K, Og), g.dtype)
    gT = g.reshape(N, groups, Og, L).transpose(0, 1, 3, 2)
    dst = None
    if _g_transposed(weight_shape):
        dst = _ws_view(workspace, npad + ncols + _align(per.nbytes), gT.shape, g.dtype)
    if _nhwc_grad(input, g, groups, stride, dilation):
        # channels-last columns, per sample g @ cols: dW with K ordered (i, j, c)
        xh, cols, per = _nhwc_views(input.shape, weight_shape, g.dtype, stride, padding,
                                    dilation, workspace)
        plan = cpu_conv.conv2d_weight_grad_nhwc_work(input, g.reshape(N, Cout, L), per, xh,
                                                     cols, padding, pre)

        def finish():
            return _nhwc_sum(per, out, workspace, input.shape, weight_shape, stride, padding,
                             dilation)
        if plan_only:
            return plan, finish
        cpu_conv.run_plans(plan)
        return finish()
    if _numba_cpu(input) and _numba_cpu(g) and input.dtype == g.dtype:
        # im2col, the transposed copy and GEMMs per chunk of the batch, in one region
        cols = _ws_view(workspace, npad, (N, C, kh, kw, Ho, Wo), g.dtype)
        plan = cpu_conv.conv2d_weight_grad_work(input, g.reshape(N, groups, Og, L), per, cols,
                                                dst, stride, padding, dilation, pre,
                                                native=plan_only)
        if plan_only:
            return plan, lambda: _sum_per(per, out, workspace, xp, N * C * kh * kw * L, npad)
        cpu_conv.run_plans(plan)
    else:
        cols = _im2col(input, weight_shape, workspace, stride, padding, dilation)
        if dst is not None:
            dst[...] = gT
            gT = dst
        _bmm(cols.reshape(N, groups, K, L), gT, out=per)
    return _sum_per(per, out, workspace, xp, N * C * kh * kw * L, npad)


def _sum_per(per, out, workspace, xp, room, npad):
    """``out`` (O, C/groups, kh, kw) = the sum over the batch of the per-sample (N,
    groups, K, O/groups) ``per``; ``room``: the elements of the im2col columns'
    scratch at ``npad``."""
    _, groups, K, Og = per.shape
    # the sum over n reads ``per`` in its own order (~3x faster than summing the
    # transposed view into ``out``), into the im2col columns' scratch, now free
    if room >= groups * K * Og:
        tot = _ws_view(workspace, npad, (groups, K, Og), per.dtype)
    else:
        tot = xp.empty((groups, K, Og), dtype=per.dtype)
    xp.sum(per, axis=0, out=tot)
    out.reshape(groups, Og, K)[...] = tot.transpose(0, 2, 1)
    return out


def _conv2d_weight_grad_vjp(ctx, gw):
    # bilinear in (input, g): each partial is a conv2d or a conv2d input gradient
    x, g = ctx.inputs
    n = ctx.needs_input_grad
    attrs = _ctx_attrs(ctx)
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
    return sum(_conv_ws(input.shape, weight_shape, np.dtype(g.dtype).itemsize, stride, padding,
                        dilation, g_copy=True)) + \
        _nhwc_ws(input.shape, weight_shape, g.dtype, stride, padding, dilation, groups)


CONV2D_WEIGHT_GRAD = register(
    name="conv2d_weight_grad", jvp=_jvp.multilinear, kind="workspace",
    kernel=_conv2d_weight_grad_kernel,
    args=("input", "g"), infer=_conv2d_weight_grad_infer, workspace=_conv2d_weight_grad_ws,
    vjp=_conv2d_weight_grad_vjp, saves={"input": ("g",), "g": ("input",)}, promote="same",
    samples=_grad_samples("weight"), torch=_torch_weight_grad,
    error_samples=lambda: [((_rand((1, 2, 4, 4)), _rand((1, 3, 2, 2))),
                            dict(_conv_attrs(), weight_shape=(2, 2, 3, 3)), RuntimeError)])


# ================================================================ public functions
def _unbatched_too(n):
    """A convolution of (N, C, *n spatial dims) inputs that also takes one unbatched
    (C, *spatial) input, as PyTorch's: run as a batch of one, the batch dim dropped."""
    def wrap(fn):
        @functools.wraps(fn)
        def conv(input, weight, *args, **kwargs):
            if getattr(input, "ndim", None) == n + 1:
                return squeeze(fn(unsqueeze(input, 0), weight, *args, **kwargs), 0)
            return fn(input, weight, *args, **kwargs)
        return conv
    return wrap


@_unbatched_too(2)
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, as PyTorch) of an (N, C, H, W) input (or one
    unbatched (C, H, W)) with an (O, C/groups, kH, kW) weight; ``padding`` is an int, a
    pair, 'valid' or 'same'.

    >>> tg.conv2d(tg.ones(1, 1, 3, 3), tg.ones(1, 1, 2, 2)).shape
    (1, 1, 2, 2)
    """
    if isinstance(padding, (tuple, list)) and any(isinstance(p, (tuple, list)) for p in padding):
        # ((top, bottom), (left, right)) is the op's canonical attribute, not a public
        # spelling (PyTorch refuses it too)
        raise op_error("conv2d", f"padding must be an int or a pair of ints, got {padding!r}",
                       TypeError)
    attrs = _conv_attrs(stride, padding, dilation, groups,
                        kernel_size=_kernel_size(weight.shape))
    return bind(CONV2D, input, weight, bias, **attrs)


def _single(name, v, what, low):
    """conv1d's ``what`` (an int or a 1-tuple, at least ``low``) as conv2d's pair,
    checked in conv1d's terms (conv2d would report the pair it was handed)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise op_error(name, f"{what} must be an int or a 1-tuple, got {v!r}", TypeError)
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise op_error(name, f"{what} must be an int, got {v!r}", TypeError)
    if v < low:
        raise op_error(name, f"{what} must be {'positive' if low else 'non-negative'}, got "
                             f"{int(v)}", RuntimeError)
    return (1, int(v))


@_unbatched_too(1)
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution of an (N, C, L) input with an (O, C/groups, k) weight (conv2d
    over a height-1 image)."""
    if len(input.shape) != 3 or len(weight.shape) != 3:
        raise op_error("conv1d", f"expected a 3-D input (N, C, L) and a 3-D weight "
                                 f"(O, C/groups, k), got {tuple(input.shape)} and "
                                 f"{tuple(weight.shape)}", RuntimeError)
    if not isinstance(padding, str):
        padding = (0, _single("conv1d", padding, "padding", 0)[1])
    if bias is not None and tuple(bias.shape) != tuple(weight.shape[:1]):
        raise op_error("conv1d", f"bias of shape {tuple(bias.shape)} does not match the "
                                 f"{weight.shape[0]} output channels", RuntimeError)
    out = conv2d(unsqueeze(input, 2), unsqueeze(weight, 2), bias,
                 _single("conv1d", stride, "stride", 1), padding,
                 _single("conv1d", dilation, "dilation", 1), groups)
    return squeeze(out, 2)


def _conv1d_infer(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    name = "conv1d"
    if len(x.shape) != 3 or len(w.shape) != 3:
        raise op_error(name, f"expected a 3-D input (N, C, L) and a 3-D weight (O, C/groups, k), "
                             f"got {tuple(x.shape)} and {tuple(w.shape)}", RuntimeError)
    if b is not None and tuple(b.shape) != tuple(w.shape[:1]):
        raise op_error(name, f"bias of shape {tuple(b.shape)} does not match the "
                             f"{w.shape[0]} output channels", RuntimeError)
    dt = one_dtype(name, (x, w, b), ("input", "weight", "bias"), floating=True)
    s = _single(name, stride, "stride", 1)[1]
    d = _single(name, dilation, "dilation", 1)[1]
    N, C, L = x.shape
    Cout, Cg, k = w.shape
    if C != Cg * groups or Cout % groups:
        raise op_error(name, f"input of {C} channels, weight {tuple(w.shape)} and groups={groups} "
                             f"do not match", RuntimeError)
    if isinstance(padding, str):
        if padding == "same":
            return TensorSpec((N, Cout, L), dt)
        p = 0
    else:
        p = _single(name, padding, "padding", 0)[1]
    out = (L + 2 * p - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise op_error(name, f"input length {L} (padded {L + 2 * p}) is smaller than the "
                             f"kernel's extent {d * (k - 1) + 1}", RuntimeError)
    return TensorSpec((N, Cout, out), dt)


composite(conv1d, autocast="lower", infer=_conv1d_infer, args=("input", "weight", "bias"),
          optional=("bias",),
          samples=lambda dtype=np.float64: [
              Sample((_rand((2, 2, 7), dtype, seed=1), _rand((3, 2, 3), dtype, seed=2),
                      _rand((3,), dtype, seed=3)), {"stride": 2, "padding": 1}),
              Sample((_rand((1, 4, 6), dtype, seed=4), _rand((2, 2, 2), dtype, seed=5)),
                     {"dilation": 2, "groups": 2}),
              Sample((_rand((1, 2, 5), dtype, seed=6), _rand((2, 2, 3), dtype, seed=7)),
                     {"padding": "same"})],
          error_samples=lambda: [((_rand((1, 2, 5)), _rand((3, 2, 3)), _rand((4,))), {},
                                  RuntimeError),
                                 ((_rand((1, 2, 5)), _rand((3, 3, 3))), {}, RuntimeError)],
          torch=lambda torch, x, w, b=None, **kw: torch.nn.functional.conv1d(x, w, b, **kw))


# ================================================================ conv_transpose2d
def _ct_attrs(stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """conv_transpose2d's attributes in canonical form: pairs of ints and an int."""
    name = "conv_transpose2d"
    if type(groups) is not int and (isinstance(groups, bool) or
                                    not isinstance(groups, (int, np.integer))):
        raise op_error(name, f"groups must be an int, got {groups!r}", TypeError)
    if isinstance(padding, str):
        raise op_error(name, f"padding must be an int or a pair of ints, got {padding!r}",
                       TypeError)
    return dict(stride=pair(name, stride, "stride"), padding=pair(name, padding, "padding"),
                output_padding=pair(name, output_padding, "output_padding"),
                groups=int(groups), dilation=pair(name, dilation, "dilation"))


def _ct_conv(attrs):
    """The conv2d whose input gradient this transposed convolution is."""
    (ph, pw) = attrs["padding"]
    return dict(stride=attrs["stride"], padding=((ph, ph), (pw, pw)),
                dilation=attrs["dilation"], groups=attrs["groups"])


def _ct_out_shape(x_shape, w_shape, stride, padding, output_padding, dilation, groups):
    N, _, H, W = x_shape
    _, Cg, kh, kw = w_shape
    size = tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
                 zip((H, W), stride, padding, dilation, (kh, kw), output_padding))
    return (N, Cg * groups) + size


def _ct_infer(input, weight, bias=None, *, stride, padding, output_padding, groups, dilation):
    name = "conv_transpose2d"
    xs, ws = tuple(input.shape), tuple(weight.shape)
    if len(xs) != 4 or len(ws) != 4:
        raise op_error(name, f"expected a 4-D input (N, C_in, H, W) and a 4-D weight (C_in, "
                             f"C_out/groups, kH, kW), got input {xs} and weight {ws}",
                       RuntimeError)
    if not _isf(np.dtype(input.dtype)) or not _isf(np.dtype(weight.dtype)):
        raise op_error(name, f"expected floating point input and weight, got "
                             f"{np.dtype(input.dtype)} and {np.dtype(weight.dtype)}", TypeError)
    if np.dtype(input.dtype) != np.dtype(weight.dtype):
        raise op_error(name, f"float inputs of one dtype expected, got input "
                             f"{np.dtype(input.dtype)} and weight {np.dtype(weight.dtype)}",
                       TypeError)
    if groups < 1:
        raise op_error(name, f"groups must be positive, got {groups}", RuntimeError)
    for what, v, low in (("stride", stride, 1), ("dilation", dilation, 1),
                         ("padding", padding, 0), ("output_padding", output_padding, 0)):
        if min(v) < low:
            raise op_error(name, f"{what} must be {'positive' if low else 'non-negative'}, "
                                 f"got {v}", RuntimeError)
    if any(op >= s for op, s in zip(output_padding, stride)):
        raise op_error(name, f"output_padding {output_padding} must be smaller than stride "
                             f"{stride}", RuntimeError)
    if xs[1] != ws[0] or ws[0] % groups or min(ws[1:]) < 1:
        raise op_error(name, f"input {xs} with groups={groups} expects a weight of shape "
                             f"({xs[1]}, C_out/groups, kH, kW) with {xs[1]} divisible by "
                             f"groups, got weight {ws}", RuntimeError)
    out = _ct_out_shape(xs, ws, stride, padding, output_padding, dilation, groups)
    if min(out[2:]) < 1:
        raise op_error(name, f"input {xs} with weight {ws}, stride {stride}, padding "
                             f"{padding} gives a non-positive output size {out[2:]}",
                       RuntimeError)
    if bias is not None and tuple(bias.shape) != (out[1],):
        raise op_error(name, f"bias of shape {tuple(bias.shape)} does not match the {out[1]} "
                             f"output channels", RuntimeError)
    return TensorSpec(out, np.dtype(input.dtype))


def _ct_kernel(input, weight, bias=None, *, stride, padding, output_padding, groups, dilation,
               workspace, out=None):
    attrs = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups,
                 dilation=dilation)
    shape = _ct_out_shape(input.shape, weight.shape, stride, padding, output_padding,
                          dilation, groups)
    out = _conv2d_input_grad_kernel(input, weight, input_shape=shape, workspace=workspace,
                                    out=out, **_ct_conv(attrs))
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def _ct_workspace(input, weight, bias=None, **attrs):
    shape = _ct_out_shape(input.shape, weight.shape, attrs["stride"], attrs["padding"],
                          attrs["output_padding"], attrs["dilation"], attrs["groups"])
    return _conv2d_workspace(TensorSpec(shape, input.dtype), weight, **_ct_conv(attrs))


def _ct_vjp(ctx, g):
    # y = conv2d_input_grad(x, w): the input gradient is a conv2d of g, the weight
    # gradient conv2d's weight gradient with g as the "input" and x as the "g"
    x, w, _ = ctx.inputs
    n = ctx.needs_input_grad
    attrs = _ct_conv(ctx.attrs)
    gx = bind(CONV2D, g, w, None, **attrs) if n[0] else None
    gw = bind(CONV2D_WEIGHT_GRAD, g, x, weight_shape=ctx.shapes[1], **attrs) if n[1] else None
    gb = ctx.m.sum(g, dim=(0, 2, 3)) if len(n) > 2 and n[2] else None
    return gx, gw, gb


def _ct_jvp(ctx, xt, wt, bt=None):
    x, w = ctx.inputs[0], ctx.inputs[1]
    parts = []
    if xt is not None:
        parts.append(bind(CONV_TRANSPOSE2D, xt, w, None, **ctx.attrs))
    if wt is not None:
        parts.append(bind(CONV_TRANSPOSE2D, x, wt, None, **ctx.attrs))
    if bt is not None:
        parts.append(ctx.m.reshape(bt, (1, -1, 1, 1)))
    if not parts:
        return (None,)
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return (ctx.m.broadcast_to(out, ctx.out.shape) if out.shape != ctx.out.shape else out,)


def _ct_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((2, 3, 4, 3), 1), r((3, 2, 3, 2), 2), r((2,), 3)), _ct_attrs()),
            Sample((r((1, 2, 3, 3), 4), r((2, 3, 3, 3), 5), None), _ct_attrs(2, 1, 1)),
            Sample((r((1, 4, 3, 4), 6), r((4, 1, 2, 3), 7), r((2,), 8)),
                   _ct_attrs((2, 1), (1, 0), (1, 0), 2, (1, 2))),
            Sample((r((2, 2, 2, 2), 9), r((2, 2, 1, 1), 10), None), _ct_attrs()),
            Sample((r((1, 2, 3, 2), 11), r((2, 2, 2, 2), 12), r((2,), 13)),
                   _ct_attrs(3, 0, 2, 1, 2)),
            Sample((r((0, 2, 3, 3), 14), r((2, 1, 2, 2), 15), r((1,), 16)), _ct_attrs(1, 1))]


def _torch_ct(torch, x, w, b=None, *, stride, padding, output_padding, groups, dilation):
    return torch.nn.functional.conv_transpose2d(x, w, b, stride, padding, output_padding,
                                                groups, dilation)


def _ct_errors():
    x, w = _rand((1, 2, 3, 3)), _rand((2, 3, 3, 3))
    return [((_rand((1, 3, 3, 3)), w, None), _ct_attrs(), RuntimeError),
            ((_rand((2, 3, 3)), w, None), _ct_attrs(), RuntimeError),
            ((x, w, None), _ct_attrs(stride=0), RuntimeError),
            ((x, w, None), _ct_attrs(padding=-1), RuntimeError),
            ((x, w, None), _ct_attrs(output_padding=1), RuntimeError),
            ((x, w, None), _ct_attrs(padding=5), RuntimeError),
            ((x, w, _rand((2,))), _ct_attrs(), RuntimeError),
            ((x, _rand((2, 3, 3, 3)), None), _ct_attrs(groups=3), RuntimeError),
            ((x, w, None), dict(groups=1.5), TypeError),
            ((x, w, None), dict(stride=(1, 1, 1)), RuntimeError)]


def _public_ct_attrs(fn):
    def wrapped(input, weight, bias=None, *, stride=1, padding=0, output_padding=0, groups=1,
                dilation=1, **kw):
        return fn(input, weight, bias, **_ct_attrs(stride, padding, output_padding, groups,
                                                   dilation), **kw)
    wrapped.__wrapped__ = fn
    return wrapped


def _conv_transpose2d_vmap(ctx, x, w, b):
    if not ctx.batched[1] and not (b is not None and ctx.batched[2]):
        return _vmap.nchw_rule(ctx, x, w, b)
    x, w = _vmap.batched_all(ctx, [x, w, b])[:2]
    xg, wg, bg, attrs = _grouped(ctx, x, w, b)
    return _ungroup(ctx, bind(ctx.op, xg, wg, bg, **attrs))


CONV_TRANSPOSE2D = register(
    name="conv_transpose2d", autocast="lower", vmap=_conv_transpose2d_vmap, kind="workspace",
    kernel=_public_ct_attrs(_ct_kernel),
    args=("input", "weight", "bias"), optional=("bias",), infer=_public_ct_attrs(_ct_infer),
    workspace=_public_ct_attrs(_ct_workspace), vjp=_ct_vjp, jvp=_ct_jvp,
    saves={"input": ("weight",), "weight": ("input",)}, promote="same", samples=_ct_samples,
    error_samples=_ct_errors,
    torch=_torch_ct, onnx=_onnx_conv_transpose2d)


@_unbatched_too(2)
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """2-D transposed convolution ("deconvolution") of an (N, C_in, H, W) input with a
    (C_in, C_out/groups, kH, kW) weight, as ``torch.nn.functional.conv_transpose2d``:
    the output is (N, C_out, (H - 1) * stride - 2 * padding + dilation * (kH - 1) +
    output_padding + 1, ...); ``output_padding`` must be smaller than ``stride``."""
    need_float("conv_transpose2d", input=input, weight=weight)
    same_dtype("conv_transpose2d", input=input, weight=weight)
    return bind(CONV_TRANSPOSE2D, input, weight, bias,
                **_ct_attrs(stride, padding, output_padding, groups, dilation))
