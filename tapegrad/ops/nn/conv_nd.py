"""conv3d, conv_transpose3d, conv_transpose1d and conv_tbc: composites over the 2-d
convolutions.

conv3d folds the depth taps into the channels and runs conv2d once: the kD
depth-shifted (strided) slices of the input stacked as ``(N * D_out, C * kD, H, W)``
against the weight ``(O, C/groups * kD, kH, kW)`` (channel ``c * kD + a`` stays in
channel ``c``'s group), so the 3-D convolution costs one conv2d of the same FLOPs and
its gradients (every order) are conv2d's. conv_transpose3d is the adjoint the same
way: one conv_transpose2d of ``(N * D, C_in, H, W)`` with the weight as ``(C_in,
C_out/groups * kD, kH, kW)``, then each depth tap's plane placed at its depth offset
(the input's depth zero-dilated by the stride) and summed.

conv_transpose1d is conv_transpose2d on a height-1 image; conv_tbc is conv1d in
time-batch-channel layout.
"""
import numpy as np

from ..._util import op_error
from .._decl import Sample, TensorSpec, composite, one_dtype, rand
from ..shape import pad as _pad, permute, reshape, squeeze, stack, unsqueeze
from ._common import np_dtype, same_dtype, torch_functional as _torch
from .conv import conv1d, conv2d, conv_transpose2d


# ------------------------------------------------------------------ geometry
def _specs(*tensors):
    return tuple(None if t is None else TensorSpec(tuple(t.shape), np_dtype(t)) for t in tensors)


def _triple(name, v, what, low):
    """An int or 1 or 3 ints as 3 ints, each at least ``low``."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3 or any(isinstance(i, bool) or not isinstance(i, (int, np.integer))
                             for i in vals):
        raise op_error(name, f"{what} must be an int or a tuple of 3 ints, got {v!r}",
                       TypeError)
    if any(i < low for i in vals):
        raise op_error(name, f"{what} must be {'positive' if low else 'non-negative'}, got "
                             f"{tuple(int(i) for i in vals)}", RuntimeError)
    return tuple(int(i) for i in vals)


def _conv3d_geom(x_shape, w_shape, b_shape, stride, padding, dilation, groups):
    """conv3d's checks and canonical attributes: (stride, ((front, back) per spatial
    dim), dilation, output shape of the 5-D call)."""
    name = "conv3d"
    if len(x_shape) not in (4, 5) or len(w_shape) != 5:
        raise op_error(name, f"expected a 4-D or 5-D input and a 5-D weight, got input "
                             f"{tuple(x_shape)} and weight {tuple(w_shape)}", RuntimeError)
    xs = tuple(x_shape) if len(x_shape) == 5 else (1,) + tuple(x_shape)
    N, C = xs[:2]
    Cout, Cg = w_shape[:2]
    k = tuple(w_shape[2:])
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise op_error(name, f"groups must be a positive int, got {groups!r}", RuntimeError)
    if C != Cg * groups or Cout % groups:
        raise op_error(name, f"expected input {tuple(x_shape)} to have {Cg * groups} channels "
                             f"(weight {tuple(w_shape)}, groups={groups}), but got {C} "
                             f"channels", RuntimeError)
    if b_shape is not None and tuple(b_shape) != (Cout,):
        raise op_error(name, f"bias of shape {tuple(b_shape)} does not match the {Cout} output "
                             f"channels", RuntimeError)
    s = _triple(name, stride, "stride", 1)
    d = _triple(name, dilation, "dilation", 1)
    if isinstance(padding, str):
        if padding == "valid":
            p = ((0, 0),) * 3
        elif padding == "same":
            if s != (1, 1, 1):
                raise op_error(name, "padding='same' is not supported for strided "
                                     "convolutions", RuntimeError)
            # PyTorch puts the odd extra element at the end
            p = tuple((dd * (kk - 1) // 2, dd * (kk - 1) - dd * (kk - 1) // 2)
                      for dd, kk in zip(d, k))
        else:
            raise op_error(name, f"Invalid padding string {padding!r}, should be one of "
                                 f"'valid' or 'same'", RuntimeError)
    else:
        p = tuple((i, i) for i in _triple(name, padding, "padding", 0))
    sp = xs[2:]
    out = tuple((n + a + b - dd * (kk - 1) - 1) // ss + 1
                for n, (a, b), dd, kk, ss in zip(sp, p, d, k, s))
    if min(out) <= 0:
        raise op_error(name, f"Kernel size can't be greater than actual input size (input "
                             f"{tuple(x_shape)} padded by {p}, kernel {k} with dilation {d})",
                       RuntimeError)
    shape = (N, Cout) + out
    return s, p, d, shape if len(x_shape) == 5 else shape[1:]


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution (cross-correlation) of (N, C, D, H, W) (or unbatched (C, D, H, W))
    with an (O, C/groups, kD, kH, kW) weight; ``padding`` an int, 3 ints, 'valid' or
    'same'. One conv2d over the depth taps folded into the channels."""
    name = "conv3d"
    s, p, d, _ = _conv3d_geom(tuple(input.shape), tuple(weight.shape),
                              None if bias is None else tuple(bias.shape),
                              stride, padding, dilation, groups)
    one_dtype(name, _specs(input, weight, bias), ("input", "weight", "bias"), floating=True)
    one = input.ndim == 4
    x = unsqueeze(input, 0) if one else input
    if p[0] != (0, 0):
        x = _pad(x, (0, 0, 0, 0) + p[0])
    N, C, Dp = x.shape[:3]
    Cout = weight.shape[0]
    kD, kH, kW = weight.shape[2:]
    Do = (Dp - d[0] * (kD - 1) - 1) // s[0] + 1
    span = s[0] * (Do - 1) + 1
    taps = [x[:, :, a * d[0]:a * d[0] + span:s[0]] for a in range(kD)]
    # (N, C, kD, Do, H, W) -> (N, Do, C, kD, H, W): channel c * kD + a
    xs = permute(stack(taps, 2), (0, 3, 1, 2, 4, 5))
    xs = reshape(xs, (N * Do, C * kD) + tuple(x.shape[3:]))
    w2 = reshape(weight, (Cout, weight.shape[1] * kD, kH, kW))
    if p[1][0] == p[1][1] and p[2][0] == p[2][1]:
        y = conv2d(xs, w2, None, s[1:], (p[1][0], p[2][0]), d[1:], groups)
    else:  # 'same' with an even kernel: the odd element at the end
        y = conv2d(_pad(xs, p[2] + p[1]), w2, None, s[1:], 0, d[1:], groups)
    y = permute(reshape(y, (N, Do) + tuple(y.shape[1:])), (0, 2, 1, 3, 4))
    if bias is not None:
        y = y + reshape(bias, (1, Cout, 1, 1, 1))
    return y[0] if one else y


def _conv3d_infer(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    dt = one_dtype("conv3d", (x, w, b), ("input", "weight", "bias"), floating=True)
    shape = _conv3d_geom(x.shape, w.shape, None if b is None else b.shape, stride, padding,
                         dilation, groups)[3]
    return TensorSpec(shape, dt)


def _ct3d_geom(x_shape, w_shape, b_shape, stride, padding, output_padding, groups, dilation):
    """conv_transpose3d's checks and attributes: (stride, padding, output_padding,
    dilation, output shape of the call)."""
    name = "conv_transpose3d"
    if len(x_shape) not in (4, 5) or len(w_shape) != 5:
        raise op_error(name, f"expected a 4-D or 5-D input and a 5-D weight, got input "
                             f"{tuple(x_shape)} and weight {tuple(w_shape)}", RuntimeError)
    xs = tuple(x_shape) if len(x_shape) == 5 else (1,) + tuple(x_shape)
    N, Cin = xs[:2]
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise op_error(name, f"groups must be a positive int, got {groups!r}", RuntimeError)
    if w_shape[0] != Cin or Cin % groups:
        raise op_error(name, f"weight {tuple(w_shape)} does not fit an input {tuple(x_shape)} "
                             f"of {Cin} channels (groups={groups}): the weight's first size "
                             f"must equal the input's channels", RuntimeError)
    Cout = w_shape[1] * groups
    if b_shape is not None and tuple(b_shape) != (Cout,):
        raise op_error(name, f"bias of shape {tuple(b_shape)} does not match the {Cout} output "
                             f"channels", RuntimeError)
    s = _triple(name, stride, "stride", 1)
    p = _triple(name, padding, "padding", 0)
    op_ = _triple(name, output_padding, "output_padding", 0)
    d = _triple(name, dilation, "dilation", 1)
    if any(o >= max(ss, dd) for o, ss, dd in zip(op_, s, d)):
        raise op_error(name, f"output padding {op_} must be smaller than either stride {s} or "
                             f"dilation {d}", RuntimeError)
    out = tuple((n - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1
                for n, ss, pp, dd, kk, oo in zip(xs[2:], s, p, d, w_shape[2:], op_))
    if min(out) <= 0:
        raise op_error(name, f"the output size {out} of input {tuple(x_shape)} is not "
                             f"positive", RuntimeError)
    shape = (N, Cout) + out
    return s, p, op_, d, shape if len(x_shape) == 5 else shape[1:]


def _dilate_pad(t, axis, s, front, length):
    """``t`` with ``s - 1`` zeros between its entries along ``axis``, placed at offset
    ``front`` in a length-``length`` axis (zeros elsewhere; cropped if it overruns)."""
    n = t.shape[axis]
    if s > 1:  # a new axis after ``axis`` padded to s (constant zeros, whatever t holds)
        t = unsqueeze(t, axis + 1)
        t = _pad(t, (0, 0) * (t.ndim - 2 - axis) + (0, s - 1))
        t = reshape(t, tuple(t.shape[:axis]) + (n * s,) + tuple(t.shape[axis + 2:]))
        t = t[(slice(None),) * axis + (slice(0, (n - 1) * s + 1),)]
    back = length - front - t.shape[axis]
    if back < 0:
        t = t[(slice(None),) * axis + (slice(0, t.shape[axis] + back),)]
        back = 0
    widths = [0, 0] * (t.ndim - 1 - axis) + [front, back]
    return _pad(t, tuple(widths)) if front or back else t


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """3-D transposed convolution of (N, C_in, D, H, W) (or unbatched) with a (C_in,
    C_out/groups, kD, kH, kW) weight, the adjoint of conv3d: one conv_transpose2d over
    the depth planes, each depth tap's plane then placed at its depth offset."""
    name = "conv_transpose3d"
    s, p, op_, d, _ = _ct3d_geom(tuple(input.shape), tuple(weight.shape),
                                 None if bias is None else tuple(bias.shape), stride, padding,
                                 output_padding, groups, dilation)
    one_dtype(name, _specs(input, weight, bias), ("input", "weight", "bias"), floating=True)
    one = input.ndim == 4
    x = unsqueeze(input, 0) if one else input
    N, Cin, D, H, W = x.shape
    Og, kD, kH, kW = weight.shape[1:]
    Cout = Og * groups
    xs = reshape(permute(x, (0, 2, 1, 3, 4)), (N * D, Cin, H, W))
    w2 = reshape(weight, (Cin, Og * kD, kH, kW))
    y = conv_transpose2d(xs, w2, None, s[1:], p[1:], op_[1:], groups, d[1:])
    Ho, Wo = y.shape[2:]
    y = reshape(y, (N, D, Cout, kD, Ho, Wo))
    full = (D - 1) * s[0] + d[0] * (kD - 1) + op_[0] + 1
    out = None
    for a in range(kD):
        t = _dilate_pad(y[:, :, :, a], 1, s[0], a * d[0], full)
        out = t if out is None else out + t
    out = permute(out[:, p[0]:full - p[0]], (0, 2, 1, 3, 4))
    if bias is not None:
        out = out + reshape(bias, (1, Cout, 1, 1, 1))
    return out[0] if one else out


def _ct3d_infer(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    dt = one_dtype("conv_transpose3d", (x, w, b), ("input", "weight", "bias"), floating=True)
    shape = _ct3d_geom(x.shape, w.shape, None if b is None else b.shape, stride, padding,
                       output_padding, groups, dilation)[4]
    return TensorSpec(shape, dt)


# ------------------------------------------------------------------ the registry
composite(conv3d, widen=True, autocast="lower", infer=_conv3d_infer,
          args=("input", "weight", "bias"),
          optional=("bias",),
          samples=lambda dtype=np.float64: [
              Sample((rand((1, 2, 4, 4, 3), dtype), rand((3, 2, 2, 2, 2), dtype, seed=1),
                      rand((3,), dtype, seed=2)), {"padding": 1}),
              Sample((rand((2, 4, 5, 4, 3), dtype), rand((2, 2, 3, 2, 1), dtype, seed=1), None),
                     {"stride": (2, 1, 1), "dilation": (1, 2, 1), "groups": 2}),
              Sample((rand((2, 3, 3, 4), dtype), rand((2, 2, 2, 3, 2), dtype, seed=1), None),
                     {"padding": "same"}),
              Sample((rand((1, 1, 4, 5, 4), dtype), rand((1, 1, 1, 2, 2), dtype, seed=1),
                      rand((1,), dtype, seed=2)), {"stride": (1, 2, 2), "padding": (0, 1, 0)})],
          error_samples=lambda: [
              ((rand((1, 3, 4, 4, 4)), rand((3, 2, 2, 2, 2)), None), {}, RuntimeError),
              ((rand((1, 2, 2, 2, 2)), rand((3, 2, 3, 3, 3)), None), {}, RuntimeError),
              ((rand((1, 2, 4, 4, 4)), rand((3, 2, 2, 2, 2)), None), {"stride": 0},
               RuntimeError),
              ((rand((1, 2, 4, 4, 4)), rand((3, 2, 2, 2, 2)), None), {"padding": "full"},
               RuntimeError),
              ((rand((2, 4, 4, 4)), rand((3, 2, 2, 2)), None), {}, RuntimeError)],
          torch=_torch("conv3d"))
composite(conv_transpose3d, autocast="lower", infer=_ct3d_infer, args=("input", "weight", "bias"),
          optional=("bias",),
          samples=lambda dtype=np.float64: [
              Sample((rand((1, 2, 3, 3, 2), dtype), rand((2, 3, 2, 2, 2), dtype, seed=1),
                      rand((3,), dtype, seed=2)), {"stride": 2}),
              Sample((rand((1, 4, 2, 3, 2), dtype), rand((4, 1, 3, 2, 2), dtype, seed=1), None),
                     {"stride": (2, 1, 2), "padding": 1, "output_padding": (1, 0, 1),
                      "groups": 2, "dilation": (1, 2, 1)}),
              Sample((rand((2, 3, 2, 2), dtype), rand((2, 2, 2, 1, 3), dtype, seed=1), None),
                     {"padding": (1, 0, 1), "dilation": (2, 1, 1)})],
          error_samples=lambda: [
              ((rand((1, 2, 3, 3, 3)), rand((3, 3, 2, 2, 2)), None), {}, RuntimeError),
              ((rand((1, 2, 3, 3, 3)), rand((2, 3, 2, 2, 2)), None), {"output_padding": 1},
               RuntimeError),
              ((rand((1, 2, 3, 3, 3)), rand((2, 3, 2, 2, 2)), rand((2,))), {}, RuntimeError)],
          torch=_torch("conv_transpose3d"))


# ------------------------------------------------------------------ conv_transpose1d, conv_tbc
def _one(v, name, what):
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise op_error(name, f"{what} must be an int or one int, got {tuple(v)}",
                           RuntimeError)
        return int(v[0])
    return int(v)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """1-D transposed convolution of (N, C_in, L) with a (C_in, C_out/groups, k) weight."""
    name = "conv_transpose1d"
    if input.ndim not in (2, 3) or weight.ndim != 3:
        raise op_error(name, f"expected a 2-D or 3-D input and a 3-D weight, got "
                             f"{tuple(input.shape)} and {tuple(weight.shape)}", RuntimeError)
    same_dtype(name, input=input, weight=weight)
    one = input.ndim == 2
    x = unsqueeze(input, 0) if one else input
    out = conv_transpose2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias,
                           (1, _one(stride, name, "stride")), (0, _one(padding, name, "padding")),
                           (0, _one(output_padding, name, "output_padding")), groups,
                           (1, _one(dilation, name, "dilation")))
    out = squeeze(out, 2)
    return out[0] if one else out


def conv_tbc(input, weight, bias, pad=0):
    """Convolution of a (time, batch, channel) input with a (k, C_in, C_out) weight."""
    if input.ndim != 3 or weight.ndim != 3:
        raise op_error("conv_tbc", f"Input must have 3 dims: time, batch, in_channel; weight "
                                   f"3 dims: kernel, in, out; got {tuple(input.shape)} and "
                                   f"{tuple(weight.shape)}", RuntimeError)
    out = conv1d(permute(input, (1, 2, 0)), permute(weight, (2, 1, 0)), bias, padding=pad)
    return permute(out, (2, 0, 1))



def _ct1_infer(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    L = x.shape[-1]
    s, p, op_, d = (_one(v, "conv_transpose1d", "") for v in (stride, padding, output_padding,
                                                               dilation))
    out = (L - 1) * s - 2 * p + d * (w.shape[-1] - 1) + op_ + 1
    return TensorSpec(tuple(x.shape[:-2]) + (w.shape[1] * groups, out), x.dtype)


composite(conv_transpose1d, autocast="lower", infer=_ct1_infer, args=("input", "weight", "bias"),
          optional=("bias",),
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 3, 5), dtype), rand((3, 4, 3), dtype, seed=1), None),
                     {"stride": 2}),
              Sample((rand((4, 6), dtype), rand((4, 1, 2), dtype, seed=1),
                      rand((2,), dtype, seed=2)),
                     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2})],
          error_samples=lambda: [((rand((2, 3, 5)), rand((3, 4)), None), {}, RuntimeError)],
          torch=_torch("conv_transpose1d"))


def _tbc_infer(x, w, b, pad=0):
    T = x.shape[0] + 2 * pad - w.shape[0] + 1
    return TensorSpec((T, x.shape[1], w.shape[2]), x.dtype)


# (on CPU its conv1d is what autocast lowers, as PyTorch's CPU list has conv_tbc)
composite(conv_tbc, autocast={"cuda": "lower"}, infer=_tbc_infer, args=("input", "weight", "bias"),
          samples=lambda dtype=np.float64: [
              Sample((rand((5, 2, 3), dtype), rand((3, 3, 4), dtype, seed=1),
                      rand((4,), dtype, seed=2)), {"pad": 1})],
          error_samples=lambda: [((rand((5, 3)), rand((3, 3, 4)), rand((4,))), {},
                                  RuntimeError)],
          torch=lambda torch, x, w, b, pad=0: _torch_tbc(torch, x, w, b, pad))


def _torch_tbc(torch, x, w, b, pad=0):
    """conv_tbc as PyTorch's conv1d (its conv_tbc_backward has no forward mode),
    checked against torch.conv_tbc."""
    y = torch.nn.functional.conv1d(x.permute(1, 2, 0), w.permute(2, 1, 0), b,
                                   padding=pad).permute(2, 0, 1)
    # two algorithms summing in other orders: float32 rounding apart, not bit-equal
    tol = dict(rtol=1e-4, atol=1e-5) if y.dtype == torch.float32 else {}
    assert torch.allclose(y.detach(), torch.conv_tbc(x.detach(), w.detach(), b.detach(), pad),
                          **tol)
    return y
