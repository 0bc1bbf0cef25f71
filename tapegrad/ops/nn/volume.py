"""conv3d and conv_transpose3d, and grid_sample: composites.

conv3d folds the depth taps into the channels and runs conv2d once: the kD
depth-shifted (strided) slices of the input stacked as ``(N * D_out, C * kD, H, W)``
against the weight ``(O, C/groups * kD, kH, kW)`` (channel ``c * kD + a`` stays in
channel ``c``'s group), so the 3-D convolution costs one conv2d of the same FLOPs and
its gradients (every order) are conv2d's. conv_transpose3d is the adjoint the same
way: one conv_transpose2d of ``(N * D, C_in, H, W)`` with the weight as ``(C_in,
C_out/groups * kD, kH, kW)``, then each depth tap's plane placed at its depth offset
(the input's depth zero-dilated by the stride) and summed.

grid_sample (4-D bilinear / nearest / bicubic, 5-D bilinear / nearest; padding
'zeros', 'border', 'reflection'): the sampled coordinates are computed with ops (the
reflection by floor and where), the corner values gathered and weighted, so the
gradient reaches both the input and the grid.
"""
import warnings

import numpy as np

from ..._util import op_error
from ..elementwise import floor, clamp, where, abs as _abs
from ..shape import reshape, stack, pad as _pad, unsqueeze, permute, expand
from ..indexing import gather
from .._decl import composite, Sample, TensorSpec, rand, one_dtype
from .conv import conv2d, conv_transpose2d
from ._common import np_dtype

__all__ = ["conv3d", "conv_transpose3d", "grid_sample"]


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
    O, Cg = w_shape[:2]
    k = tuple(w_shape[2:])
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise op_error(name, f"groups must be a positive int, got {groups!r}", RuntimeError)
    if C != Cg * groups or O % groups:
        raise op_error(name, f"expected input {tuple(x_shape)} to have {Cg * groups} channels "
                             f"(weight {tuple(w_shape)}, groups={groups}), but got {C} "
                             f"channels", RuntimeError)
    if b_shape is not None and tuple(b_shape) != (O,):
        raise op_error(name, f"bias of shape {tuple(b_shape)} does not match the {O} output "
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
    shape = (N, O) + out
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
    O = weight.shape[0]
    kD, kH, kW = weight.shape[2:]
    Do = (Dp - d[0] * (kD - 1) - 1) // s[0] + 1
    span = s[0] * (Do - 1) + 1
    taps = [x[:, :, a * d[0]:a * d[0] + span:s[0]] for a in range(kD)]
    # (N, C, kD, Do, H, W) -> (N, Do, C, kD, H, W): channel c * kD + a
    xs = permute(stack(taps, 2), (0, 3, 1, 2, 4, 5))
    xs = reshape(xs, (N * Do, C * kD) + tuple(x.shape[3:]))
    w2 = reshape(weight, (O, weight.shape[1] * kD, kH, kW))
    if p[1][0] == p[1][1] and p[2][0] == p[2][1]:
        y = conv2d(xs, w2, None, s[1:], (p[1][0], p[2][0]), d[1:], groups)
    else:  # 'same' with an even kernel: the odd element at the end
        y = conv2d(_pad(xs, p[2] + p[1]), w2, None, s[1:], 0, d[1:], groups)
    y = permute(reshape(y, (N, Do) + tuple(y.shape[1:])), (0, 2, 1, 3, 4))
    if bias is not None:
        y = y + reshape(bias, (1, O, 1, 1, 1))
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
    O = w_shape[1] * groups
    if b_shape is not None and tuple(b_shape) != (O,):
        raise op_error(name, f"bias of shape {tuple(b_shape)} does not match the {O} output "
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
    shape = (N, O) + out
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
    O = Og * groups
    xs = reshape(permute(x, (0, 2, 1, 3, 4)), (N * D, Cin, H, W))
    w2 = reshape(weight, (Cin, Og * kD, kH, kW))
    y = conv_transpose2d(xs, w2, None, s[1:], p[1:], op_[1:], groups, d[1:])
    Ho, Wo = y.shape[2:]
    y = reshape(y, (N, D, O, kD, Ho, Wo))
    full = (D - 1) * s[0] + d[0] * (kD - 1) + op_[0] + 1
    out = None
    for a in range(kD):
        t = _dilate_pad(y[:, :, :, a], 1, s[0], a * d[0], full)
        out = t if out is None else out + t
    out = permute(out[:, p[0]:full - p[0]], (0, 2, 1, 3, 4))
    if bias is not None:
        out = out + reshape(bias, (1, O, 1, 1, 1))
    return out[0] if one else out


def _ct3d_infer(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    dt = one_dtype("conv_transpose3d", (x, w, b), ("input", "weight", "bias"), floating=True)
    shape = _ct3d_geom(x.shape, w.shape, None if b is None else b.shape, stride, padding,
                       output_padding, groups, dilation)[4]
    return TensorSpec(shape, dt)


# ------------------------------------------------------------------ grid_sample
_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


def _grid_check(x, g, mode, padding_mode):
    """grid_sample's checks on shapes and dtypes (specs or tensors); its output shape."""
    name = "grid_sample"
    if mode not in _MODES:
        raise op_error(name, f"expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                             f"got: {mode!r}", ValueError)
    if padding_mode not in _PADDINGS:
        raise op_error(name, f"expected padding_mode to be 'zeros', 'border', or "
                             f"'reflection', but got: {padding_mode!r}", ValueError)
    xs, gs = tuple(x.shape), tuple(g.shape)
    if len(xs) not in (4, 5) or len(gs) != len(xs):
        raise op_error(name, f"expected 4D or 5D input and grid with the same number of "
                             f"dimensions, but got input of shape {xs} and grid of shape {gs}",
                       RuntimeError)
    nd = len(xs) - 2
    if gs[0] != xs[0]:
        raise op_error(name, f"expected grid and input to have the same batch size, but got "
                             f"input of shape {xs} and grid of shape {gs}", RuntimeError)
    if gs[-1] != nd:
        raise op_error(name, f"expected grid to have size {nd} in its last dimension, but got "
                             f"grid of shape {gs}", RuntimeError)
    if any(n == 0 for n in xs[2:]):
        raise op_error(name, f"expected input to have non-empty spatial dimensions, but got "
                             f"input of shape {xs}", RuntimeError)
    if mode == "bicubic" and nd == 3:
        raise op_error(name, "bicubic interpolation only supports 4D input", RuntimeError)
    xd, gd = np_dtype(x), np_dtype(g)
    if xd.kind != "f" or gd.kind != "f" or xd != gd:
        raise op_error(name, f"expected input and grid to be floating point of the same "
                             f"dtype, but got {xd} and {gd}", RuntimeError)
    return (xs[0], xs[1]) + gs[1:-1], xd


def _reflect(c, twice_low, twice_high):
    """PyTorch's reflect_coordinates: ``c`` reflected into [low, high]."""
    if twice_low == twice_high:
        return c * 0.0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    c = _abs(c - low)
    flips = floor(c.detach() / span)
    extra = c - flips * span
    odd = (flips - 2 * floor(flips / 2)) > 0.5
    return where(odd, span - extra + low, extra + low)


def _pad_coord(c, n, padding_mode, align_corners):
    """An unnormalised coordinate mapped by the padding mode (zeros: unchanged)."""
    if padding_mode == "zeros":
        return c
    if padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (n - 1)) if align_corners else _reflect(c, -1, 2 * n - 1)
    return clamp(c, 0.0, float(n - 1))


def _fetch(flat, coords, sizes, out_shape):
    """Values of ``flat`` (N, C, prod(sizes)) at the integer-valued coordinates (one
    float tensor (N, *out) per spatial dim) and the in-bounds mask (N, 1, *out)."""
    N, C = out_shape[:2]
    P = int(np.prod(out_shape[2:]))
    valid = lin = None
    for c, n in zip(coords, sizes):
        v = (c >= 0) & (c <= n - 1)
        valid = v if valid is None else valid & v
        ci = where(v, c, 0.0).long()  # NaN and out-of-range coordinates read index 0
        lin = ci if lin is None else lin * n + ci
    idx = expand(reshape(lin, (N, 1, P)), (N, C, P))
    return reshape(gather(flat, 2, idx), out_shape), unsqueeze(valid, 1)


def _cubic_weights(t):
    """The 4 cubic-convolution weights (A = -0.75) at fractional offset ``t``."""
    A = -0.75

    def near(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def far(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` (N, C, H, W) at ``grid`` (N, Ho, Wo, 2) of (x, y) in [-1, 1]
    (5-D: (N, C, D, H, W) at (N, Do, Ho, Wo, 3) of (x, y, z)); ``mode`` 'bilinear',
    'nearest' or 'bicubic' (4-D), ``padding_mode`` 'zeros', 'border' or 'reflection',
    as ``torch.nn.functional.grid_sample``. The gradient reaches the input and the grid
    (nearest: the input only)."""
    out_shape, _ = _grid_check(input, grid, mode, padding_mode)
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to "
                      "align_corners=False since 1.3.0. Please specify align_corners=True "
                      "if the old behavior is desired.", UserWarning, stacklevel=2)
    ac = bool(align_corners)
    nd = input.ndim - 2
    sizes = tuple(input.shape[2:])
    N, C = input.shape[:2]
    flat = reshape(input, (N, C, int(np.prod(sizes))))
    # the grid's last axis is (x, y[, z]): the spatial dims in reverse
    raw = []
    for i, n in enumerate(sizes):
        g = grid[..., nd - 1 - i]
        raw.append((g + 1) / 2 * (n - 1) if ac else ((g + 1) * n - 1) / 2)
    if mode == "bicubic":
        base = [floor(c.detach()) for c in raw]
        ws = [_cubic_weights(c - b) for c, b in zip(raw, base)]
        out = None
        for j in range(4):  # rows (H)
            cy = _pad_coord(base[0] + (j - 1), sizes[0], padding_mode, ac)
            for i in range(4):  # columns (W)
                cx = _pad_coord(base[1] + (i - 1), sizes[1], padding_mode, ac)
                v, valid = _fetch(flat, (cy, cx), sizes, out_shape)
                term = where(valid, v, 0.0) * unsqueeze(ws[0][j] * ws[1][i], 1)
                out = term if out is None else out + term
        return out
    coords = [_pad_coord(c, n, padding_mode, ac) for c, n in zip(raw, sizes)]
    # a value outside the input is 0 (masked before the weights: an inf elsewhere in the
    # input stays out); a NaN or infinite coordinate gives NaN weights, so NaN, as PyTorch's
    # (zeros padding; border clamps an infinite one to the edge)
    if mode == "nearest":  # round half to even, as PyTorch's nearbyint
        v, valid = _fetch(flat, [c.detach().round() for c in coords], sizes, out_shape)
        return where(valid, v, 0.0)
    base = [floor(c.detach()) for c in coords]
    frac = [c - b for c, b in zip(coords, base)]
    out = None
    for corner in np.ndindex(*(2,) * nd):
        w = None
        for f, hi in zip(frac, corner):
            wi = f if hi else 1 - f
            w = wi if w is None else w * wi
        v, valid = _fetch(flat, [b + hi for b, hi in zip(base, corner)], sizes, out_shape)
        term = where(valid, v, 0.0) * unsqueeze(w, 1)
        out = term if out is None else out + term
    return out


# ------------------------------------------------------------------ the registry
def _torch(name):
    def oracle(torch, *a, **kw):
        return getattr(torch.nn.functional, name)(*a, **kw)
    return oracle


composite(conv3d, infer=_conv3d_infer, args=("input", "weight", "bias"), optional=("bias",),
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

composite(conv_transpose3d, infer=_ct3d_infer, args=("input", "weight", "bias"),
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


def _grid_infer(x, g, mode="bilinear", padding_mode="zeros", align_corners=None):
    shape, dt = _grid_check(x, g, mode, padding_mode)
    return TensorSpec(shape, dt)


def _grid(batch, out, sizes, align_corners, seed, dtype=np.float64):
    """A grid whose unnormalised coordinates run past the borders (padding) and stay off
    the kinks: a fractional part in (0.15, 0.4) or (0.6, 0.85), away from the pixel
    centres (interpolation, clamps, reflection about a centre) and from the halves
    (nearest's rounding, reflection about an edge)."""
    r = np.random.default_rng(seed)
    comps = []
    for n in reversed(sizes):  # (x, y[, z]): the last spatial dim first
        whole = r.integers(-2, n + 1, (batch,) + out)
        f = r.uniform(0.15, 0.4, whole.shape) + 0.45 * (r.uniform(size=whole.shape) < 0.5)
        c = whole + f
        comps.append(2 * c / (n - 1) - 1 if align_corners else (2 * c + 1) / n - 1)
    return np.stack(comps, -1).astype(dtype)


def _grid_samples(dtype=np.float64):
    out = []
    cases = [((1, 2, 4, 5), "bilinear", "zeros", False), ((2, 1, 3, 4), "bilinear", "border", True),
             ((1, 2, 4, 3), "bilinear", "reflection", False),
             ((1, 1, 3, 5), "bilinear", "reflection", True),
             ((1, 2, 4, 5), "nearest", "zeros", False), ((1, 1, 3, 4), "nearest", "reflection", True),
             ((1, 2, 4, 5), "bicubic", "zeros", False), ((1, 1, 4, 4), "bicubic", "border", True),
             ((1, 1, 3, 5), "bicubic", "reflection", False),
             ((1, 2, 3, 4, 3), "bilinear", "zeros", True),
             ((1, 1, 3, 3, 4), "bilinear", "reflection", False),
             ((2, 1, 2, 3, 3), "nearest", "border", False)]
    for i, (xs, mode, pm, ac) in enumerate(cases):
        grid_out = (2, 3) if len(xs) == 4 else (2, 2, 2)
        out.append(Sample((rand(xs, dtype, seed=i), _grid(xs[0], grid_out, xs[2:], ac, 10 + i,
                                                           dtype)),
                          {"mode": mode, "padding_mode": pm, "align_corners": ac}))
    return out


def _torch_grid(torch, x, g, mode="bilinear", padding_mode="zeros", align_corners=None):
    """grid_sample as a formula of PyTorch's ops (its grid_sampler has no forward mode),
    checked against torch.nn.functional.grid_sample's values (tests/surface/
    test_volume_ctc.py compares the gradients with PyTorch's own, every mode)."""
    ref = torch.nn.functional.grid_sample(x.detach(), g.detach(), mode, padding_mode,
                                          align_corners)
    ac = bool(align_corners)
    sizes, nd = tuple(x.shape[2:]), x.ndim - 2
    N, C = x.shape[:2]
    flat = x.reshape(N, C, -1)

    def padc(c, n):
        if padding_mode == "zeros":
            return c
        if padding_mode == "reflection":
            lo2, hi2 = (0, 2 * (n - 1)) if ac else (-1, 2 * n - 1)
            if lo2 == hi2:
                c = c * 0
            else:
                lo, span = lo2 / 2, (hi2 - lo2) / 2
                c = (c - lo).abs()
                flips = torch.floor(c.detach() / span)
                extra = c - flips * span
                c = torch.where(flips % 2 == 1, span - extra + lo, extra + lo)
        return c.clamp(0, n - 1)

    def fetch(cs):
        valid, lin = True, 0
        for c, n in zip(cs, sizes):
            v = (c >= 0) & (c <= n - 1)
            valid = valid & v
            lin = lin * n + torch.where(v, c, 0).long()
        val = flat.gather(2, lin.reshape(N, 1, -1).expand(N, C, -1))
        return torch.where(valid[:, None], val.reshape((N, C) + tuple(cs[0].shape[1:])), 0)

    raw = [(g[..., nd - 1 - i] + 1) / 2 * (n - 1) if ac else
           ((g[..., nd - 1 - i] + 1) * n - 1) / 2 for i, n in enumerate(sizes)]
    if mode == "bicubic":
        base = [torch.floor(c.detach()) for c in raw]
        A = -0.75

        def cw(t):
            def near(v):
                return ((A + 2) * v - (A + 3)) * v * v + 1

            def far(v):
                return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A
            return [far(t + 1), near(t), near(1 - t), far(2 - t)]
        wy, wx = cw(raw[0] - base[0]), cw(raw[1] - base[1])
        out = 0
        for j in range(4):
            for i in range(4):
                v = fetch([padc(base[0] + j - 1, sizes[0]), padc(base[1] + i - 1, sizes[1])])
                out = out + v * (wy[j] * wx[i])[:, None]
    else:
        cs = [padc(c, n) for c, n in zip(raw, sizes)]
        if mode == "nearest":
            out = fetch([torch.round(c.detach()) for c in cs])
        else:
            base = [torch.floor(c.detach()) for c in cs]
            out = 0
            for corner in np.ndindex(*(2,) * nd):
                w = 1
                for c, b, hi in zip(cs, base, corner):
                    w = w * ((c - b) if hi else 1 - (c - b))
                out = out + fetch([b + hi for b, hi in zip(base, corner)]) * w[:, None]
    assert torch.allclose(out.detach(), ref), (out, ref)
    return out


composite(grid_sample, infer=_grid_infer, args=("input", "grid"), samples=_grid_samples,
          error_samples=lambda: [
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 3))), {}, RuntimeError),
              ((rand((1, 2, 4, 5)), rand((2, 3, 2, 2))), {}, RuntimeError),
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 2))), {"mode": "cubic"}, ValueError),
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 2))), {"padding_mode": "wrap"}, ValueError),
              ((rand((1, 2, 3, 4, 5)), rand((1, 3, 2, 2, 3))), {"mode": "bicubic"},
               RuntimeError),
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 2), np.float32)), {}, RuntimeError)],
          torch=_torch_grid)
