"""Pooling: max_pool2d (with its gradient and the gradient's gradient), avg_pool2d,
adaptive_avg_pool2d.

max_pool2d returns (out, indices) as PyTorch's return_indices: indices are flat
positions in each (H, W) plane. Its adjoint scatters g to those positions
(max_pool2d_input_grad), whose adjoint gathers from them (max_pool2d_gather),
whose adjoint scatters again: every order is exact for the chosen maxima. On NumPy
arrays the work runs in compiled kernels of the CPU device layer; the whole-array
code here serves the other devices.
"""
import numpy as np

from ..._util import op_error, require_floating
from ...devices import xp_of
from ...devices.cpu_kernels import pool as cpu_pool, scatter as cpu_scatter
from ...dispatch import bind
from ...dtypes import is_float as _isf
from ...tensor import wrap
from .. import _jvp, _vmap
from .._checks import any_value, whole
from .._decl import Sample, TensorSpec, composite, rand as _rand, register
from ..creation import _constant
from ..linalg import matmul
from ..onnx_forms import _planes as _onnx_planes
from ..reduce import mean
from ..shape import cat, unsqueeze
from ._common import pair, tap_slices as _valid


# ================================================================ attributes and geometry
def _pool_args(name, kernel_size, stride, padding, dilation=1):
    """Pooling attributes as pairs; ``stride`` defaults to ``kernel_size``."""
    k = pair(name, kernel_size, "kernel_size")
    s = k if stride is None or stride == () or stride == [] else pair(name, stride, "stride")
    return dict(kernel_size=k, stride=s, padding=pair(name, padding, "padding"),
                dilation=pair(name, dilation, "dilation"))


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
    if len(xs) != 4 or 0 in xs[1:]:
        raise op_error(name, f"expected a 4-D input (N, C, H, W) with non-zero C, H and W (an "
                             f"empty batch is allowed), got shape {xs}", RuntimeError)
    for what, v in (("kernel_size", kernel_size), ("stride", stride), ("dilation", dilation)):
        if min(v) < 1:
            raise op_error(name, f"{what} must be positive, got {v}", RuntimeError)
    if any(2 * p > k for p, k in zip(padding, kernel_size)) or min(padding) < 0:
        raise op_error(name, f"padding {padding} must be non-negative and at most half of "
                             f"kernel_size {kernel_size}", RuntimeError)
    Ho, Wo, _, _ = _pool_geom(xs, kernel_size, stride, padding, dilation, ceil_mode)
    if Ho < 1 or Wo < 1:
        raise op_error(name, f"input {xs} is too small for kernel_size {kernel_size} "
                             f"(padding {padding}, dilation {dilation})", RuntimeError)
    if not _isf(np.dtype(x.dtype)):
        raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}",
                       TypeError)
    return Ho, Wo


def _offset_slice(i, j, Ho, Wo, stride, dilation):
    h0, w0 = i * dilation[0], j * dilation[1]
    return (slice(None), slice(None), slice(h0, h0 + stride[0] * (Ho - 1) + 1, stride[0]),
            slice(w0, w0 + stride[1] * (Wo - 1) + 1, stride[1]))


# ================================================================ max_pool2d
def _max_pool2d_numpy(input, Ho, Wo, Hp, Wp, kernel_size, stride, padding, dilation):
    """max_pool2d in whole-array code, for arrays of other devices (CuPy)."""
    N, C, H, W = input.shape
    xp = xp_of(input)
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


def _max_pool2d_kernel(input, *, kernel_size, stride, padding, dilation, ceil_mode=False,
                       out=None):
    # out: (values, indices) buffers of the results' specs (tg.compile's planned
    # memory), written in place
    N, C, H, W = input.shape
    Ho, Wo, Hp, Wp = _pool_geom(input.shape, kernel_size, stride, padding, dilation, ceil_mode)
    if not isinstance(input, np.ndarray) or (out is not None and not all(
            type(o) is np.ndarray and o.flags.c_contiguous for o in out)):
        res = _max_pool2d_numpy(input, Ho, Wo, Hp, Wp, kernel_size, stride, padding, dilation)
        if out is None:
            return res
        out[0][...], out[1][...] = res
        return out
    if out is not None:
        out, idx = out
        cpu_pool.max_pool2d(input, out, idx, kernel_size, stride, padding, dilation)
        return out, idx
    out = np.empty((N, C, Ho, Wo), dtype=input.dtype)
    idx = np.empty((N, C, Ho, Wo), dtype=np.int64)
    cpu_pool.max_pool2d(input, out, idx, kernel_size, stride, padding, dilation)
    return out, idx


def _max_pool2d_vjp(ctx, g):
    _, idx = ctx.out
    gx = bind(MAX_POOL2D_INPUT_GRAD, g[0], idx, input_shape=ctx.shapes[0],
              overlap=_overlaps(ctx.attrs))
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
    return dict(_pool_args("max_pool2d", k, s, p, d), ceil_mode=ceil)


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
            Sample((_distinct((1, 1, 7, 5), dtype, 7),), _pattrs(3, 2, 1, 1, True)),
            Sample((_distinct((0, 2, 4, 4), dtype, 8),), _pattrs(2))]  # an empty batch


def _torch_max_pool(torch, x, *, kernel_size, stride, padding, dilation, ceil_mode=False):
    return torch.nn.functional.max_pool2d(x, kernel_size, stride, padding, dilation,
                                          ceil_mode=ceil_mode, return_indices=True)


MAX_POOL2D_GATHER_OP = []  # declared below


def _max_pool2d_jvp(ctx, t):
    # each output is the input element its index names
    return (bind(MAX_POOL2D_GATHER_OP[0], t, ctx.out[1]), None)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_max_pool2d(b, st):
    a = st.attrs
    ph, pw = a.get("padding", (0, 0))
    x = b.input(st, 0)
    v, i = b.node("MaxPool", [x], 2, kernel_shape=list(a["kernel_size"]),
                  strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                  ceil_mode=int(bool(a.get("ceil_mode", False))),
                  dilations=list(a.get("dilation", (1, 1))))
    b.node("Identity", [v], [b.output(st, 0)])
    H, W = b.shape(st, 0)[2:]  # ONNX's indices run over the whole tensor, ours per plane
    b.node("Mod", [i, b.const(np.asarray(H * W, np.int64))], [b.output(st, 1)])


def _onnx_avg_pool2d(b, st):
    a = st.attrs
    ph, pw = a.get("padding", (0, 0))
    kh, kw = a["kernel_size"]
    div = a.get("divisor_override")
    kw_ = dict(kernel_shape=[kh, kw], strides=list(a["stride"]), pads=[ph, pw, ph, pw],
               ceil_mode=int(bool(a.get("ceil_mode", False))),
               count_include_pad=int(bool(a.get("count_include_pad", True))))
    if div:
        kw_["count_include_pad"] = 1
        if kw_["ceil_mode"]:
            b.refuse(st, "divisor_override with ceil_mode")
        y = b.node("AveragePool", [b.input(st, 0)], **kw_)
        b.node("Mul", [y, b.const(np.asarray(kh * kw / div, b.out_dtype(st)))],
               [b.output(st)])
        return
    b.node("AveragePool", [b.input(st, 0)], [b.output(st)], **kw_)


def _onnx_max_pool2d_gather(b, st):
    x, idx = b.input(st, 0), b.input(st, 1, np.int64)
    g = b.node("GatherElements", [_onnx_planes(b, x, b.shape(st, 0)),
                                  _onnx_planes(b, idx, b.shape(st, 1))], axis=2)
    b.node("Reshape", [g, b.node("Shape", [idx])], [b.output(st)])


def _onnx_max_pool2d_input_grad(b, st):
    N, C, H, W = st.attrs["input_shape"]
    g, idx = b.input(st, 0), b.input(st, 1, np.int64)
    zeros = b.const(np.zeros((N, C, H * W), b.out_dtype(st)))
    y = b.node("ScatterElements", [zeros, _onnx_planes(b, idx, b.shape(st, 1)),
                                   _onnx_planes(b, g, b.shape(st, 0))], axis=2, reduction="add")
    b.node("Reshape", [y, b.ints([N, C, H, W])], [b.output(st)])


MAX_POOL2D = register(name="max_pool2d", vmap=_vmap.nchw_rule, jvp=_max_pool2d_jvp,
                      kernel=_max_pool2d_kernel, args=("input",), nout=2,
                      infer=_max_pool2d_infer, vjp=_max_pool2d_vjp, saves=("out",),
                      samples=_max_pool_samples, torch=_torch_max_pool,
                      error_samples=lambda: [
                          ((_rand((1, 1, 2, 2)),), _pattrs(3), RuntimeError),
                          ((_rand((2, 2)),), _pattrs(2), RuntimeError),
                          ((_rand((1, 2, 4, 4)),), _pattrs(2, 0), RuntimeError),
                          ((_rand((1, 2, 4, 4)),), _pattrs(2, 1, 0, 0), RuntimeError),
                          ((_rand((1, 2, 4, 4)),), _pattrs(2, 1, 2), RuntimeError),
                          ((_rand((1, 2, 4, 4)),), _pattrs(2, 1, -1), RuntimeError),
                          ((_rand((1, 0, 4, 4)),), _pattrs(2), RuntimeError)],
                      onnx=_onnx_max_pool2d)


def _max_pool2d_input_grad_kernel(g, indices, *, input_shape, overlap, out=None):
    N, C, H, W = input_shape
    xp = xp_of(g)
    if out is not None:
        if xp is not np or type(out) is not np.ndarray or not out.flags.c_contiguous:
            out[...] = _max_pool2d_input_grad_kernel(g, indices, input_shape=input_shape,
                                                     overlap=overlap)
            return out
        given = out
        L = g.shape[2] * g.shape[3]
        cpu_pool.max_pool2d_scatter(out.reshape(N * C, H * W), indices.reshape(N * C, L),
                                    g.reshape(N * C, L), zero=True)
        return given
    L = g.shape[2] * g.shape[3]  # explicit: an empty batch can't infer a -1
    g2, i2 = g.reshape(N * C, L), indices.reshape(N * C, L)
    if xp is np:
        out = np.empty((N * C, H * W), dtype=g.dtype)
        cpu_pool.max_pool2d_scatter(out, i2, g2, zero=True)
        return out.reshape(input_shape)
    out = xp.zeros((N * C, H * W), dtype=g.dtype)
    if overlap:  # windows share elements: repeated positions must accumulate
        rows = (xp.arange(N * C) * (H * W))[:, None]
        xp.add.at(out.reshape(-1), (i2 + rows).reshape(-1), g2.reshape(-1))
    else:
        xp.put_along_axis(out, i2, g2, axis=1)
    return out.reshape(input_shape)


def max_pool2d_relu_input_grad(g, indices, y, *, input_shape, overlap, out, pooled=False):
    """``relu_backward(max_pool2d_input_grad(g, indices), y)`` into ``out``: the
    gradient through ``max_pool2d(relu(.))``, ``y`` the ReLU's output, in one pass per
    plane with the two eager kernels' arithmetic (their results, bitwise). Returns
    False, touching nothing, where this path does not apply (NumPy float32/float64,
    C-contiguous, one dtype). ``pooled``: ``y`` is the pooled values (as ``g``),
    whose value at each window's argmax is the ReLU output's there."""
    arrays = (g, y, out)
    if not all(type(a) is np.ndarray and a.flags.c_contiguous and a.dtype == out.dtype
               for a in arrays) or out.dtype not in (np.float32, np.float64) or \
            type(indices) is not np.ndarray or not indices.flags.c_contiguous or out.size == 0:
        return False
    N, C, H, W = input_shape
    L = g.shape[2] * g.shape[3]
    cpu_pool.max_pool2d_scatter_relu(out.reshape(N * C, H * W), indices.reshape(N * C, L),
                                     g.reshape(N * C, L),
                                     y.reshape(N * C, L if pooled else H * W), overlap, pooled)
    return True


def _max_pool2d_input_grad_infer(g, indices, *, input_shape, overlap):
    if tuple(g.shape) != tuple(indices.shape) or len(input_shape) != 4 or \
            tuple(g.shape[:2]) != tuple(input_shape[:2]):
        raise op_error("max_pool2d_input_grad", f"g {tuple(g.shape)} and indices "
                       f"{tuple(indices.shape)} do not match the input shape {input_shape}",
                       RuntimeError)
    return TensorSpec(tuple(input_shape), g.dtype)


def _pool_grad_samples(dtype=np.float64):
    # the indices from the whole-array code: drawing the samples (every registry test
    # module does, at collection) compiles no kernel
    out = []
    for s in _max_pool_samples(dtype):
        x = np.ascontiguousarray(s.args[0])
        a = s.attrs
        o, idx = _max_pool2d_numpy(x, *_pool_geom(x.shape, a["kernel_size"], a["stride"],
                                                  a["padding"], a["dilation"], a["ceil_mode"]),
                                   a["kernel_size"], a["stride"], a["padding"], a["dilation"])
        out.append(Sample((_rand(o.shape, dtype, seed=o.size), idx),
                          dict(input_shape=x.shape, overlap=_overlaps(s.attrs))))
    return out


def _gather_samples(dtype=np.float64):
    return [Sample((_rand(s.attrs["input_shape"], dtype, seed=3), s.args[1]), {})
            for s in _pool_grad_samples(dtype)]


def _max_pool2d_input_grad_reference(g, indices, *, input_shape, overlap):
    """Oracle: each element of g added at its window's maximum, one by one."""
    N, C, H, W = input_shape
    out = np.zeros((N, C, H * W), dtype=g.dtype)
    for (n, c, h, w), i in np.ndenumerate(indices):
        if i >= 0:  # -1: a window wholly in the padding
            out[n, c, i] += g[n, c, h, w]
    return out.reshape(input_shape)


MAX_POOL2D_INPUT_GRAD = register(
    name="max_pool2d_input_grad", vmap=_vmap.fold_rule((0, 1), "input_shape"), jvp=_jvp.linear,
    kernel=_max_pool2d_input_grad_kernel, args=("g", "indices"),
    infer=_max_pool2d_input_grad_infer,
    vjp=lambda ctx, gg: (bind(MAX_POOL2D_GATHER, gg, ctx.inputs[1]), None), saves=("indices",),
    samples=_pool_grad_samples, reference=_max_pool2d_input_grad_reference,
    error_samples=lambda: [((_rand((1, 1, 2, 2)), np.zeros((1, 1, 2, 3), np.int64)),
                            dict(input_shape=(1, 1, 4, 4), overlap=False), RuntimeError)],
                            onnx=_onnx_max_pool2d_input_grad)


def _max_pool2d_gather_kernel(x, indices, out=None):
    N, C, H, W = x.shape
    # per plane, out[k] = x[indices[k]] (0 for -1) by one compiled loop (~10x NumPy's
    # take_along_axis, maximum and where below)
    fresh = out is None and type(x) is np.ndarray
    into = np.empty(indices.shape, x.dtype) if fresh else out
    if type(into) is np.ndarray and not (np.may_share_memory(into, x)
                                         or np.may_share_memory(into, indices)):
        try:
            views = [np.reshape(a, (N * C, a.shape[2] * a.shape[3], 1), copy=False)
                     for a in (x, indices, into)]
        except (ValueError, TypeError):
            views = None
        if views is not None and cpu_scatter.gather_dim(*views, negative_zero=True):
            return into
    if out is not None:
        out[...] = _max_pool2d_gather_kernel(x, indices)
        return out
    i2 = indices.reshape(N * C, indices.shape[2] * indices.shape[3])
    got = xp_of(x).take_along_axis(x.reshape(N * C, H * W), xp_of(x).maximum(i2, 0), axis=1)
    if (i2 < 0).any():  # a window wholly in the padding: -inf forward, no gradient
        got = xp_of(x).where(i2 < 0, 0, got)
    return got.reshape(indices.shape)


def _max_pool2d_gather_vjp(ctx, g):
    idx = ctx.inputs[1]
    return bind(MAX_POOL2D_INPUT_GRAD, g, idx, input_shape=ctx.shapes[0], overlap=True), None


def _max_pool2d_gather_infer(x, indices):
    if len(x.shape) != 4 or len(indices.shape) != 4 or \
            tuple(x.shape[:2]) != tuple(indices.shape[:2]):
        raise op_error("max_pool2d_gather", f"input {tuple(x.shape)} and indices "
                       f"{tuple(indices.shape)} must be (N, C, ...) alike", RuntimeError)
    return TensorSpec(tuple(indices.shape), x.dtype)


def _max_pool2d_gather_reference(x, indices):
    """Oracle: the element of x each index names, one by one (0 for index -1)."""
    N, C, H, W = x.shape
    planes = x.reshape(N, C, H * W)
    out = np.zeros(indices.shape, dtype=x.dtype)
    for (n, c, h, w), i in np.ndenumerate(indices):
        if i >= 0:
            out[n, c, h, w] = planes[n, c, i]
    return out


MAX_POOL2D_GATHER = register(
    name="max_pool2d_gather", vmap=_vmap.fold_rule((0, 1)), jvp=_jvp.linear,
    kernel=_max_pool2d_gather_kernel, args=("input", "indices"),
    infer=_max_pool2d_gather_infer, vjp=_max_pool2d_gather_vjp, saves=("indices",),
    samples=_gather_samples, reference=_max_pool2d_gather_reference,
    error_samples=lambda: [((_rand((1, 2, 2, 2)), np.zeros((1, 1, 2, 3), np.int64)), {},
                            RuntimeError)], onnx=_onnx_max_pool2d_gather)
MAX_POOL2D_GATHER_OP.append(MAX_POOL2D_GATHER)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D max pooling over (N, C, H, W); ``stride`` defaults to ``kernel_size``.
    With ``return_indices`` also gives the flat (H*W) position of each maximum."""
    squeeze = len(input.shape) == 3  # an unbatched (C, H, W) input, as PyTorch
    if squeeze:
        input = unsqueeze(input, 0)
    out, idx = bind(MAX_POOL2D, input, ceil_mode=bool(ceil_mode),
                    **_pool_args("max_pool2d", kernel_size, stride, padding, dilation))
    if squeeze:
        out, idx = out[0], idx[0]
    return (out, idx) if return_indices else out


# ================================================================ avg_pool2d
def _avg_divisor(xp, H, W, attrs):
    """Per-output divisor: the kernel area, else the count of elements each window
    covers: with count_include_pad the padding counts but a ceil_mode overhang does
    not (PyTorch's rule); without it only input elements count."""
    kh, kw = attrs["kernel_size"]
    if attrs["divisor_override"] is not None:
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


def _avg_pool2d_kernel(input, out=None, **attrs):
    N, C, H, W = input.shape
    xp = xp_of(input)
    kh, kw = attrs["kernel_size"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    Ho, Wo, Hp, Wp = _pool_geom(input.shape, (kh, kw), attrs["stride"], (ph, pw), (1, 1),
                                attrs.get("ceil_mode", False))
    if out is None:  # a zero-padded copy, its window offsets added in order
        src = input
        if (Hp, Wp) != (H, W):
            src = xp.zeros((N, C, Hp, Wp), dtype=input.dtype)
            src[:, :, ph:ph + H, pw:pw + W] = input
        for i in range(kh):
            for j in range(kw):
                s = src[_offset_slice(i, j, Ho, Wo, attrs["stride"], (1, 1))]
                if out is None:
                    out = s.copy()
                else:
                    out += s
        out /= xp.asarray(_avg_divisor(xp, H, W, attrs), dtype=out.dtype)
        return out
    if xp.may_share_memory(out, input):
        out[...] = _avg_pool2d_kernel(input, **attrs)
        return out
    # into out: each window offset adds the input elements it sees (the padding's
    # zeros add nothing: the same sums), in window order, with no padded copy (the
    # first offset is copied in where it covers every output, else out starts from 0)
    started = False
    for i in range(kh):
        r = _valid(i, sh, ph, H, Ho)
        if r is None:
            continue
        for j in range(kw):
            c = _valid(j, sw, pw, W, Wo)
            if c is None:
                continue
            if not started and (r[0], c[0]) == (slice(0, Ho), slice(0, Wo)):
                out[...] = input[:, :, r[1], c[1]]
            else:
                if not started:
                    out[...] = 0
                out[:, :, r[0], c[0]] += input[:, :, r[1], c[1]]
            started = True
    if not started:
        out[...] = 0
    out /= xp.asarray(_avg_divisor(xp, H, W, attrs), dtype=out.dtype)
    return out


def _check_divisor(name, divisor_override):
    d = divisor_override
    if d is None:
        return
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise op_error(name, f"divisor_override must be an int, got {d!r}", TypeError)
    if d == 0:
        raise op_error(name, "divisor_override must be non-zero", RuntimeError)


def _avg_pool2d_infer(input, **attrs):
    _check_divisor("avg_pool2d", attrs["divisor_override"])
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
            Sample((_rand((1, 1, 7, 5), dtype, seed=8),), _avg_attrs(3, 2, 1, False, None, True)),
            Sample((_rand((0, 2, 4, 4), dtype, seed=9),), _avg_attrs(2, 1, 1))]


AVG_POOL2D = register(
    name="avg_pool2d", vmap=_vmap.nchw_rule, jvp=_jvp.linear, kernel=_avg_pool2d_kernel,
    args=("input",), infer=_avg_pool2d_infer,
    vjp=lambda ctx, g: (bind(AVG_POOL2D_INPUT_GRAD, g, input_shape=ctx.shapes[0], **ctx.attrs),),
    samples=_avg_samples,
    torch=lambda torch, x, **a: torch.nn.functional.avg_pool2d(x, **a),
    error_samples=lambda: [((_rand((1, 1, 2, 2)),), _avg_attrs(3), RuntimeError),
                           ((_rand((1, 1, 4, 4)),), _avg_attrs(2, dov=0), RuntimeError),
                           ((_rand((1, 1, 4, 4)),), _avg_attrs(2, dov=1.5), TypeError),
                           ((_rand((1, 1, 4, 4)),), _avg_attrs(2, 1, 2), RuntimeError),
                           ((_rand((1, 1, 4, 4)),), _avg_attrs(0), RuntimeError)],
                      onnx=_onnx_avg_pool2d)


def _avg_pool2d_input_grad_kernel(g, *, input_shape, out=None, **attrs):
    N, C, H, W = input_shape
    xp = xp_of(g)
    kh, kw = attrs["kernel_size"]
    ph, pw = attrs["padding"]
    sh, sw = attrs["stride"]
    Ho, Wo, Hp, Wp = _pool_geom(input_shape, (kh, kw), attrs["stride"], (ph, pw), (1, 1),
                                attrs.get("ceil_mode", False))
    div = xp.asarray(_avg_divisor(xp, H, W, attrs), dtype=g.dtype)
    planes = [(slice(None), slice(None))]
    if out is None:
        out = xp.empty(tuple(input_shape), dtype=g.dtype)
    elif xp.may_share_memory(out, g):
        out[...] = _avg_pool2d_input_grad_kernel(g, input_shape=input_shape, **attrs)
        return out
    else:  # g / divisor a block of planes at a time (a sixteenth of them at most)
        per = max(1, N * C // 16)
        planes = ([(slice(n, min(N, n + per // C)), slice(None)) for n in range(0, N, per // C)]
                  if per >= C else [(slice(n, n + 1), slice(c, min(C, c + per)))
                                    for n in range(N) for c in range(0, C, per)])
    # each window offset adds g / divisor into the input elements it saw, in window
    # order from zeros (the padding's share is dropped): no padded buffer
    out[...] = 0
    for pl in planes:
        gd = g[pl] / div
        o = out[pl]
        for i in range(kh):
            r = _valid(i, sh, ph, H, Ho)
            for j in range(kw):
                c = _valid(j, sw, pw, W, Wo)
                if r is not None and c is not None:
                    o[:, :, r[1], c[1]] += gd[:, :, r[0], c[0]]
        del gd  # (the next block's is made without this one alive)
    return out


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
    name="avg_pool2d_input_grad", vmap=_vmap.fold_rule((0,), "input_shape"), jvp=_jvp.linear,
    kernel=_avg_pool2d_input_grad_kernel, args=("g",),
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
        input = unsqueeze(input, 0)
    out = bind(AVG_POOL2D, input, count_include_pad=bool(count_include_pad),
               divisor_override=divisor_override, ceil_mode=bool(ceil_mode), **a)
    return out[0] if squeeze else out


# ================================================================ adaptive_avg_pool2d
def _bins(n_in, n_out):
    """PyTorch's adaptive bins [floor(i*n/o), ceil((i+1)*n/o)), as (lo, hi) pairs."""
    return [((i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)) for i in range(n_out)]


def _adaptive_matrix(xp, n_in, n_out, dtype):
    """(n_out, n_in) matrix averaging the adaptive bins (``_bins``)."""
    a = np.zeros((n_out, n_in), dtype=dtype)
    for i, (lo, hi) in enumerate(_bins(n_in, n_out)):
        a[i, lo:hi] = 1.0 / (hi - lo)
    return xp.asarray(a)


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed ``output_size`` (int or pair; None keeps that size):
    two small matmuls with PyTorch's bin matrices, so every order differentiates."""
    name = "adaptive_avg_pool2d"
    shape = tuple(input.shape)
    if len(shape) not in (3, 4) or 0 in shape[-3:]:
        raise op_error(name, f"expected a 3-D or 4-D input with non-zero sizes but the batch's, "
                             f"got shape {shape}", RuntimeError)
    H, W = shape[-2:]
    if not isinstance(output_size, (tuple, list)):
        output_size = (output_size, output_size)
    if len(output_size) != 2:
        raise op_error(name, f"output_size must be an int or a pair, got {tuple(output_size)}",
                       RuntimeError)
    for v in output_size:
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise op_error(name, f"output_size must be ints (or None), got {tuple(output_size)}",
                           TypeError)
    oh, ow = (H if output_size[0] is None else int(output_size[0]),
              W if output_size[1] is None else int(output_size[1]))
    if oh < 0 or ow < 0:  # 0 gives an empty output, as PyTorch
        raise op_error(name, f"output_size {tuple(output_size)} must be non-negative",
                       RuntimeError)
    require_floating(name, input)  # PyTorch: no integer or bool kernel
    data = whole(input)  # inside vmap the batch's: all finite iff each example's are
    xp, dt = xp_of(data), data.dtype
    out = input
    if any_value(input, lambda v: ~(abs(v) < np.inf)):  # (NaN, inf)
        # NaN and inf stay in their own bins (a matmul would spread them: 0 * inf)
        if oh != H:
            out = cat([mean(out[..., lo:hi, :], dim=-2, keepdim=True)
                       for lo, hi in _bins(H, oh)] or [out[..., :0, :]], dim=-2)
        if ow != W:
            out = cat([mean(out[..., lo:hi], dim=-1, keepdim=True)
                       for lo, hi in _bins(W, ow)] or [out[..., :0]], dim=-1)
        return out
    # the bin matrices are constants, as Tensors (vmap's matmul rule reads its
    # operands' shapes from Tensors); one bin is a mean, which holds no size (an ONNX
    # export with dynamic H and W: global pooling, AdaptiveAvgPool2d(1))
    if oh != H:
        out = mean(out, dim=-2, keepdim=True) if oh == 1 else \
            matmul(_constant(wrap(_adaptive_matrix(xp, H, oh, dt))), out)
    if ow != W:
        out = mean(out, dim=-1, keepdim=True) if ow == 1 else \
            matmul(out, _constant(wrap(_adaptive_matrix(xp, W, ow, dt).T)))
    return out


def _adaptive_infer(x, output_size):
    name = "adaptive_avg_pool2d"
    shape = tuple(x.shape)
    if len(shape) not in (3, 4) or 0 in shape[-3:]:
        raise op_error(name, f"expected a 3-D or 4-D input with non-zero sizes but the batch's, "
                             f"got shape {shape}", RuntimeError)
    if not isinstance(output_size, (tuple, list)):
        output_size = (output_size, output_size)
    if len(output_size) != 2:
        raise op_error(name, f"output_size must be an int or a pair, got {tuple(output_size)}",
                       RuntimeError)
    for v in output_size:
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise op_error(name, f"output_size must be ints (or None), got {tuple(output_size)}",
                           TypeError)
    oh, ow = (shape[-2] if output_size[0] is None else int(output_size[0]),
              shape[-1] if output_size[1] is None else int(output_size[1]))
    if oh < 0 or ow < 0:
        raise op_error(name, f"output_size {tuple(output_size)} must be non-negative",
                       RuntimeError)
    if not _isf(np.dtype(x.dtype)):
        raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}",
                       TypeError)
    return TensorSpec(shape[:-2] + (oh, ow), x.dtype)


composite(adaptive_avg_pool2d, widen=True, infer=_adaptive_infer, autocast={"cpu": "keep"},
          samples=lambda dtype=np.float64: [
              Sample((_rand((1, 2, 5, 7), dtype, seed=1),), {"output_size": (2, 3)}),
              Sample((_rand((2, 4, 4), dtype, seed=2),), {"output_size": 3}),
              Sample((_rand((1, 1, 3, 5), dtype, seed=3),), {"output_size": (None, 2)})],
          error_samples=lambda: [((_rand((4, 4)),), {"output_size": 2}, RuntimeError),
                                 ((_rand((1, 4, 4)),), {"output_size": (1, 2, 3)}, RuntimeError)],
          torch=lambda torch, x, output_size: torch.nn.functional.adaptive_avg_pool2d(
              x, output_size))
