"""Resampling and patches: interpolate (nearest, nearest-exact, linear, bilinear,
trilinear, bicubic, area), unfold (im2col) and fold (col2im), as
``torch.nn.functional``; upsample / upsample_nearest / upsample_bilinear (over
interpolate), grid_sample and affine_grid.

interpolate is linear in its input and separable: along each resized dim the output
is ``A @ x`` for a small (out, in) matrix ``A`` that PyTorch's coordinate rule gives
(nearest: one 1 per row; (bi/tri)linear: two weights per row; bicubic: four, with
clamped indices; area: PyTorch's adaptive average pooling windows). The forward
gathers (nearest, linear) or applies the matrices (bicubic, area); the adjoint
applies their transposes with ``m.matmul`` on constants, so it differentiates again.
unfold and fold are each other's adjoints.

grid_sample (4-D bilinear / nearest / bicubic, 5-D bilinear / nearest; padding
'zeros', 'border', 'reflection'), a composite: the sampled coordinates are computed
with ops (the reflection by floor and where), the corner values gathered and
weighted, so the gradient reaches both the input and the grid. affine_grid is a
constant base grid times theta.
"""
import functools
import warnings

import numpy as np

from ..._util import op_error
from ...devices import xp_of
from ...devices.cpu_kernels import conv as cpu_conv
from ...dispatch import bind
from ...dtypes import is_float as _isf
from ...tensor import Tensor, buffer
from .. import _vmap
from .._decl import Sample, TensorSpec, composite, rand, rand as _rand, register
from ..creation import _constant
from ..elementwise import abs as _abs, clamp, floor, where
from ..indexing import gather
from ..linalg import matmul
from ..onnx_forms import _positions as _onnx_positions, _static_take as _onnx_static_take
from ..shape import expand, reshape, unsqueeze
from ._common import need_float, np_dtype, pair, tap_slices as _valid

# ================================================================ interpolate
_ANY = ("nearest", "nearest-exact", "area")
_MODES = {3: _ANY + ("linear",), 4: _ANY + ("bilinear", "bicubic"), 5: _ANY + ("trilinear",)}
_ALL_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
_LINEAR = ("linear", "bilinear", "trilinear", "bicubic")    # the ones with align_corners
_CUBIC_A = -0.75                                            # PyTorch's bicubic constant


@functools.lru_cache(maxsize=256)
def _coords(n_in, n_out, mode, align_corners, scale, dtype):
    """PyTorch's source coordinates of one dim: (i0, i1, lambda) with output
    ``(1 - lambda) * x[i0] + lambda * x[i1]`` (nearest: lambda is 0, i1 = i0)."""
    dt = np.dtype(dtype)
    rows = np.arange(n_out)
    if mode in ("nearest", "nearest-exact"):
        s = np.float32(1.0 / scale if scale else n_in / n_out)
        r = rows.astype(np.float32) + np.float32(0.5 if mode == "nearest-exact" else 0.0)
        src = np.minimum(np.floor(r * s).astype(np.int64), n_in - 1)
        return src, src, np.zeros(n_out, dt)
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        src = rows * dt.type(s)
    else:
        s = dt.type(1.0 / scale if scale else n_in / n_out)
        src = (rows + dt.type(0.5)) * s - dt.type(0.5)
        if mode != "bicubic":          # PyTorch clamps at 0, except for cubic
            src = np.maximum(src, 0)
    src = src.astype(dt)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (src - i0).astype(dt)


@functools.lru_cache(maxsize=256)
def _matrix(n_in, n_out, mode, align_corners, scale, dtype):
    """The (n_out, n_in) interpolation matrix of one dim (the adjoint's; bicubic's and
    area's forward)."""
    a = np.zeros((n_out, n_in), np.dtype(dtype))
    rows = np.arange(n_out)
    if mode == "area":     # adaptive average pooling: [floor(i n/o), ceil((i+1) n/o))
        for i in range(n_out):
            lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
            a[i, lo:hi] = 1.0 / (hi - lo)
        return a
    i0, i1, lam = _coords(n_in, n_out, mode, align_corners, scale, dtype)
    if mode == "bicubic":  # taps at i0 - 1 .. i0 + 2, clamped; PyTorch's coefficients
        A, t = _CUBIC_A, lam.astype(np.float64)
        w = [((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
             ((A + 2) * t - (A + 3)) * t * t + 1,
             ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
             ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A]
        for k in range(4):
            np.add.at(a, (rows, np.clip(i0 - 1 + k, 0, n_in - 1)), w[k])
        return a
    if mode in ("nearest", "nearest-exact"):
        np.add.at(a, (rows, i0), 1)
        return a
    np.add.at(a, (rows, i0), 1 - lam)
    np.add.at(a, (rows, i1), lam)
    return a


def _matrices(in_shape, size, mode, align_corners, scales, dtype):
    sp = tuple(in_shape[2:])
    scales = scales or (None,) * len(sp)
    return [_matrix(int(i), int(o), mode, bool(align_corners), s, np.dtype(dtype).str)
            for i, o, s in zip(sp, size, scales)]


def _interp_infer(input, *, size, mode, align_corners, scales):
    xs = tuple(input.shape)
    if len(xs) not in _MODES:
        raise op_error("interpolate", f"expected a 3-D (N, C, L), 4-D (N, C, H, W) or 5-D "
                                      f"(N, C, D, H, W) input, got {xs}", NotImplementedError)
    if mode not in _MODES[len(xs)]:
        need = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}
        raise op_error("interpolate", f"mode {mode!r} needs a {need[mode]}-D input, got "
                                      f"{len(xs)}-D input {xs}"
                       if mode in need else
                       f"mode {mode!r} is not supported ({', '.join(_ALL_MODES)})",
                       NotImplementedError)
    if not _isf(np.dtype(input.dtype)):
        raise op_error("interpolate", f"expected a floating point input, got "
                                      f"{np.dtype(input.dtype)}", TypeError)
    if len(size) != len(xs) - 2 or min(size, default=1) < 1:
        raise op_error("interpolate", f"output size {tuple(size)} must have {len(xs) - 2} "
                                      f"positive sizes for input {xs}", ValueError)
    if min(xs[2:]) < 1:
        raise op_error("interpolate", f"input {xs} has an empty spatial dim", ValueError)
    return TensorSpec(xs[:2] + tuple(size), np.dtype(input.dtype))


def _interp_kernel(input, *, size, mode, align_corners, scales):
    """Gathers along each resized dim, the last first (PyTorch's order of the sums)."""
    xp = xp_of(input)
    out = input
    sp = input.shape[2:]
    scales = scales or (None,) * len(sp)
    if mode in ("bicubic", "area"):   # dense matrices along each dim, the last first
        mats = _matrices(input.shape, size, mode, align_corners, scales, input.dtype)
        for k in reversed(range(len(sp))):
            a = xp.asarray(mats[k])
            out = xp.moveaxis(xp.matmul(a, xp.moveaxis(out, 2 + k, -2)), -2, 2 + k)
        return xp.ascontiguousarray(out)
    for k in reversed(range(len(sp))):
        i0, i1, lam = _coords(int(sp[k]), int(size[k]), mode, bool(align_corners), scales[k],
                              np.dtype(input.dtype).str)
        axis = 2 + k
        a = xp.take(out, xp.asarray(i0), axis=axis)
        if mode in ("nearest", "nearest-exact"):
            out = a
            continue
        b = xp.take(out, xp.asarray(i1), axis=axis)
        shape = (-1,) + (1,) * (len(sp) - 1 - k)
        lam = xp.asarray(lam).reshape(shape)
        out = a * (1 - lam) + b * lam
    return xp.ascontiguousarray(out)


def _interp_vjp(ctx, g):
    m = ctx.m
    shape = ctx.shapes[0]
    mats = _matrices(shape, ctx.attrs["size"], ctx.attrs["mode"], ctx.attrs["align_corners"],
                     ctx.attrs["scales"], _dtype_of(ctx.dtypes[0]))  # g's (an output's)
    gx = m.matmul(g, _const(mats[-1], g))              # the last dim: (..., out) @ A
    for k in range(len(mats) - 1):                      # the others: A^T @ (..., out, .)
        axis = 2 + k - len(shape)                       # counted from the end
        gx = m.movedim(m.matmul(_const(mats[k].T, g), m.movedim(gx, axis, -2)), -2, axis)
    return (gx,)


def _dtype_of(d):
    return d.np if hasattr(d, "np") else np.dtype(d)


def _const(a, like):
    """A constant matrix on ``like``'s device (raw: a NumPy or CuPy array)."""
    arr = buffer(like) if isinstance(like, Tensor) else like
    return xp_of(arr).asarray(np.ascontiguousarray(a))


def _interp_jvp(ctx, xt):
    return (None if xt is None else bind(INTERPOLATE, xt, **ctx.attrs),)


def _interp_attrs(size, mode="nearest", align_corners=None, scales=None):
    return dict(size=tuple(size), mode=mode, align_corners=align_corners,
                scales=None if scales is None else tuple(scales))


def _interp_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((2, 2, 3, 4), 1),), _interp_attrs((6, 8))),
            Sample((r((1, 2, 5, 4), 2),), _interp_attrs((3, 7))),
            Sample((r((1, 2, 3, 3), 3),), _interp_attrs((6, 6), scales=(2.0, 2.0))),
            Sample((r((2, 1, 3, 4), 4),), _interp_attrs((5, 7), "bilinear", False)),
            Sample((r((2, 1, 3, 4), 5),), _interp_attrs((5, 7), "bilinear", True)),
            Sample((r((1, 2, 6, 5), 6),), _interp_attrs((4, 2), "bilinear", False)),
            Sample((r((1, 1, 2, 3), 7),), _interp_attrs((4, 6), "bilinear", False,
                                                        (2.0, 2.0))),
            Sample((r((1, 1, 3, 2), 8),), _interp_attrs((1, 5), "bilinear", True)),
            Sample((r((2, 3, 5), 9),), _interp_attrs((9,), "linear", False)),
            Sample((r((2, 3, 5), 10),), _interp_attrs((8,), "linear", True)),
            Sample((r((2, 3, 5), 11),), _interp_attrs((12,))),
            Sample((r((1, 2, 5, 4), 12),), _interp_attrs((7, 3), "nearest-exact")),
            Sample((r((2, 3, 5), 13),), _interp_attrs((12,), "nearest-exact", None, (2.5,))),
            Sample((r((1, 2, 4, 5), 14),), _interp_attrs((7, 3), "bicubic", False)),
            Sample((r((1, 2, 4, 5), 15),), _interp_attrs((9, 8), "bicubic", True)),
            Sample((r((1, 1, 3, 4), 16),), _interp_attrs((6, 8), "bicubic", False,
                                                         (2.0, 2.0))),
            Sample((r((1, 2, 7, 5), 17),), _interp_attrs((3, 4), "area")),
            Sample((r((2, 3, 7), 18),), _interp_attrs((3,), "area")),
            Sample((r((1, 2, 2, 3, 4), 19),), _interp_attrs((3, 5, 3), "trilinear", False)),
            Sample((r((1, 1, 2, 3, 2), 20),), _interp_attrs((3, 2, 4), "trilinear", True)),
            Sample((r((1, 2, 2, 3, 4), 21),), _interp_attrs((4, 6, 8), "nearest", None,
                                                            (2.0, 2.0, 2.0)))]


def _torch_interp(torch, x, *, size, mode, align_corners, scales):
    F = torch.nn.functional
    if scales is not None:
        return F.interpolate(x, scale_factor=scales, mode=mode, align_corners=align_corners)
    return F.interpolate(x, size=size, mode=mode, align_corners=align_corners)


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_unfold(b, st):
    _onnx_static_take(b, st)


def _onnx_fold(b, st):
    """``fold`` scatters-adds its columns: each column element goes where ``unfold``
    of the output takes it from."""
    from ...ops_registry import get
    a = st.attrs
    n, ckk, L = b.shape(st, 0)
    if 0 in b.shape(st, 0) or 0 in b.out_shape(st):
        b.node("Identity", [b.const(np.zeros(b.out_shape(st), b.out_dtype(st)))], [b.output(st)])
        return
    oh, ow = a["output_size"]
    kh, kw = a["kernel_size"] if isinstance(a["kernel_size"], tuple) else (a["kernel_size"],) * 2
    c = ckk // (kh * kw)
    out_shape = (1, c, oh, ow)
    attrs = {k: a[k] for k in ("kernel_size", "dilation", "padding", "stride")}
    dest = _onnx_positions(get("unfold"), out_shape, attrs)[0]   # (ckk, L): -1 = padding
    size = c * oh * ow
    dest = np.where(dest < 0, size, dest)                    # a slot thrown away
    x = b.reshape(b.input(st, 0), [0, -1])
    idx = b.const(dest.reshape(1, -1), "index")
    idx = b.node("Expand", [idx, b.node("Concat", [b.slice(b.node("Shape", [x]), [0], [1], [0]),
                                                    b.ints([dest.size])], axis=0)])
    zeros = b.node("Expand", [b.const(np.zeros((1, size + 1), b.out_dtype(st))),
                              b.node("Concat", [b.slice(b.node("Shape", [x]), [0], [1], [0]),
                                                b.ints([size + 1])], axis=0)])
    y = b.node("ScatterElements", [zeros, idx, x], axis=1, reduction="add")
    y = b.slice(y, [0], [size], [1])
    b.node("Reshape", [y, b.ints([0, c, oh, ow])], [b.output(st)])


def _onnx_bins(n, m, dtype):
    """(m, n): row i averages adaptive pooling's bin i of n inputs."""
    A = np.zeros((m, n), dtype)
    for i in range(m):
        lo, hi = (i * n) // m, -((-(i + 1) * n) // m)
        A[i, lo:hi] = 1.0 / (hi - lo)
    return A


def _onnx_area(b, st, x, shape):
    """Mode 'area' (adaptive average pooling): a matrix product per spatial axis."""
    out = b.out_shape(st)
    nd = len(shape) - 2
    dt = b.out_dtype(st)
    y = x
    for k in range(nd):
        A = _onnx_bins(shape[2 + k], out[2 + k], dt)
        # contract axis 2 + k with A^T: move it last, MatMul, move it back
        perm = list(range(len(shape)))
        perm[2 + k], perm[-1] = perm[-1], perm[2 + k]
        if 2 + k != len(shape) - 1:
            y = b.node("Transpose", [y], perm=perm)
        y = b.node("MatMul", [y, b.const(A.T.copy())])
        if 2 + k != len(shape) - 1:
            y = b.node("Transpose", [y], perm=perm)
    b.node("Identity", [y], [b.output(st)])


def _onnx_interpolate(b, st):
    a = st.attrs
    mode = a.get("mode", "nearest")
    shape = b.shape(st, 0)
    x = b.input(st, 0)
    ac = bool(a.get("align_corners"))
    kw = {}
    if mode == "nearest":
        kw = dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor")
    elif mode == "nearest-exact":
        kw = dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                  nearest_mode="round_prefer_ceil")
    elif mode in ("linear", "bilinear", "trilinear", "bicubic"):
        kw = dict(mode="cubic" if mode == "bicubic" else "linear",
                  coordinate_transformation_mode="align_corners" if ac else "pytorch_half_pixel")
        if mode == "bicubic":
            kw["cubic_coeff_a"] = -0.75
    elif mode == "area":
        _onnx_area(b, st, x, shape)
        return
    else:
        b.refuse(st, f"interpolate mode {mode!r}")
    scales = a.get("scales")
    if scales is not None and not ac and all(s is not None for s in scales):
        sc = b.const(np.asarray([1.0, 1.0] + [float(s) for s in scales], np.float32))
        b.node("Resize", [x, "", sc], [b.output(st)], **kw)
        return
    size = list(b.out_shape(st)[2:])
    lead = b.slice(b.node("Shape", [x]), [0], [2], [0])
    sizes = b.node("Concat", [lead, b.ints(size)], axis=0)
    del shape
    b.node("Resize", [x, "", "", sizes], [b.output(st)], **kw)


def _interp_grad_fn_name(attrs, shapes):
    """PyTorch's upsample kernel for the mode and number of spatial dims
    (``UpsampleBilinear2DBackward0``); mode "area" is adaptive average pooling."""
    n = len(shapes[0]) - 2
    mode = attrs["mode"]
    if mode == "area":
        return f"AdaptiveAvgPool{n}DBackward0"
    return f"Upsample{mode.replace('-', '_').title().replace('_', '')}{n}DBackward0"


INTERPOLATE = register(
    name="interpolate", grad_fn_name=_interp_grad_fn_name,
    autocast={"cuda": "fp32"}, vmap=_vmap.nchw_rule, kernel=_interp_kernel,
    # CUDA lists the upsample kernels; mode "area" is adaptive average pooling, unlisted
    autocast_when=lambda device_type, args, attrs: attrs.get("mode") != "area",
    infer=_interp_infer,
    args=("input",),
    vjp=_interp_vjp, jvp=_interp_jvp, saves=(), samples=_interp_samples, torch=_torch_interp,
    error_samples=lambda: [((_rand((2, 3)),), _interp_attrs((4,)), NotImplementedError),
                           ((_rand((1, 2, 3)),), _interp_attrs((4,), "bilinear", False),
                            NotImplementedError),
                           ((_rand((1, 2, 3)),), _interp_attrs((4,), "bicubic", False),
                            NotImplementedError),
                           ((_rand((1, 2, 3, 3)),), _interp_attrs((4, 4), "lanczos", False),
                            NotImplementedError),
                           ((_rand((1, 2, 3, 3)),), _interp_attrs((4, 0)), ValueError),
                           ((np.ones((1, 2, 3, 3), np.int64),), _interp_attrs((4, 4)),
                            TypeError)], onnx=_onnx_interpolate)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of an (N, C, L), (N, C, H, W) or (N, C, D, H, W) input
    to ``size`` or by ``scale_factor``, as ``torch.nn.functional.interpolate``:
    ``mode`` 'nearest', 'nearest-exact', 'area', 'linear' (3-D), 'bilinear' or
    'bicubic' (4-D), 'trilinear' (5-D); ``align_corners`` for the linear and cubic
    modes (default False); ``recompute_scale_factor``: the coordinates from the
    output size rather than from ``scale_factor``; ``antialias`` (bilinear and bicubic,
    4-D) widens the filter when shrinking, as PyTorch's."""
    nsp = len(input.shape) - 2
    if mode not in _ALL_MODES:
        raise op_error("interpolate", f"mode {mode!r} is not supported "
                                      f"({', '.join(_ALL_MODES)})", NotImplementedError)
    if antialias and (mode not in ("bilinear", "bicubic") or nsp != 2):
        raise op_error("interpolate", "Anti-alias option is restricted to bilinear and "
                                      "bicubic modes and requires a 4-D tensor as input",
                       ValueError)
    if mode not in _LINEAR:
        if align_corners is not None:
            raise op_error("interpolate", "align_corners option can only be set with the "
                                          "interpolating modes: linear | bilinear | bicubic | "
                                          "trilinear", ValueError)
    elif align_corners is None:
        align_corners = False
    if (size is None) == (scale_factor is None):
        raise op_error("interpolate", "only one of size or scale_factor should be defined",
                       ValueError)
    if nsp < 1:
        raise op_error("interpolate", f"expected a 3-D, 4-D or 5-D input, got "
                                      f"{tuple(input.shape)}", NotImplementedError)
    scales = None
    if size is not None:
        size = tuple(size) if isinstance(size, (tuple, list)) else (size,) * nsp
        if len(size) != nsp:
            raise op_error("interpolate", f"size {size} must have {nsp} values for input "
                                          f"{tuple(input.shape)}", ValueError)
        size = tuple(int(s) for s in size)
    else:
        sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) \
            else (scale_factor,) * nsp
        if len(sf) != nsp:
            raise op_error("interpolate", f"scale_factor {sf} must have {nsp} values for "
                                          f"input {tuple(input.shape)}", ValueError)
        size = tuple(int(np.floor(float(n) * float(s))) for n, s in zip(input.shape[2:], sf))
        if not recompute_scale_factor and mode != "area":
            scales = tuple(float(s) for s in sf)
    if antialias:
        return _antialiased(input, size, scales, mode, bool(align_corners))
    return bind(INTERPOLATE, input, size=size, mode=mode,
                align_corners=bool(align_corners) if mode in _LINEAR else None,
                scales=scales)


# ---------------------------------------------------------------- antialias
def _aa_filter(mode, x):
    """The antialiasing filter (PyTorch's and PIL's): the triangle for bilinear, Keys'
    cubic with a = -0.5 for bicubic."""
    x = np.abs(x)
    if mode == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    return np.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
                    np.where(x < 2.0, (((x - 5.0) * x + 8.0) * x - 4.0) * a, 0.0))


def _aa_taps(n_in, n_out, scale, mode, align_corners):
    """(index, weight), each (n_out, K): the input positions each output reads along one
    dim and their normalized weights (PyTorch's upsample ``_aa`` kernels: a filter widened
    by the scale when shrinking, so every input contributes)."""
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        s = 1.0 / scale if scale is not None and scale > 0 else n_in / n_out
    half = 1.0 if mode == "bilinear" else 2.0
    support = half * s if s >= 1.0 else half
    inv = 1.0 / s if s >= 1.0 else 1.0
    centers = s * (np.arange(n_out) + 0.5)
    lo = np.maximum((centers - support + 0.5).astype(np.int64), 0)
    hi = np.minimum((centers + support + 0.5).astype(np.int64), n_in)
    k = max(int((hi - lo).max()), 1)
    idx = lo[:, None] + np.arange(k)
    w = _aa_filter(mode, (idx - centers[:, None] + 0.5) * inv)
    w = np.where(idx < hi[:, None], w, 0.0)
    total = w.sum(1, keepdims=True)
    w = w / np.where(total == 0.0, 1.0, total)
    return np.minimum(idx, n_in - 1), w


def _antialiased(x, size, scales, mode, align_corners):
    """``interpolate(..., antialias=True)`` of an (N, C, H, W) input: along W, then H,
    each output a weighted sum of the input elements under its filter (a gather, a
    product and a sum: ops, so every order differentiates, and a NaN reaches only the
    outputs whose filter covers it)."""
    from ..reduce import sum as _sum
    dt = np_dtype(x)
    out = x
    for dim in (3, 2):
        n_in, n_out = out.shape[dim], size[dim - 2]
        sc = None if scales is None else scales[dim - 2]
        idx, w = _aa_taps(n_in, n_out, sc, mode, align_corners)
        k = idx.shape[1]
        xp = xp_of(buffer(x))
        shape = list(out.shape)
        shape[dim] = n_out * k
        ix = _constant(Tensor(xp.asarray(idx.reshape(-1))))
        wt = _constant(Tensor(xp.asarray(w.astype(dt))))
        if dim == 3:
            g = gather(out, 3, expand(ix, tuple(shape)))
            out = _sum(reshape(g, tuple(shape[:3]) + (n_out, k)) * wt, dim=-1)
        else:
            ix = reshape(ix, (n_out * k, 1))
            g = gather(out, 2, expand(ix, tuple(shape)))
            g = reshape(g, (shape[0], shape[1], n_out, k, shape[3]))
            out = _sum(g * reshape(wt, (n_out, k, 1)), dim=3)
    return out


# ================================================================ unfold and fold
def _patch_attrs(kernel_size, dilation=1, padding=0, stride=1, name="unfold"):
    return dict(kernel_size=pair(name, kernel_size, "kernel_size"),
                dilation=pair(name, dilation, "dilation"), padding=pair(name, padding, "padding"),
                stride=pair(name, stride, "stride"))


def _blocks(name, hw, kernel_size, dilation, padding, stride):
    for what, v, low in (("kernel_size", kernel_size, 1), ("dilation", dilation, 1),
                         ("padding", padding, 0), ("stride", stride, 1)):
        if min(v) < low:
            raise op_error(name, f"{what} must be {'positive' if low else 'non-negative'}, "
                                 f"got {v}", RuntimeError)
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, d, p, s in
                zip(hw, kernel_size, dilation, padding, stride))
    if min(out) < 1:
        raise op_error(name, f"spatial size {tuple(hw)} (padded by {padding}) is smaller than "
                             f"the dilated kernel {kernel_size} (dilation {dilation})",
                       RuntimeError)
    return out


def _unfold_infer(input, *, kernel_size, dilation, padding, stride):
    xs = tuple(input.shape)
    if len(xs) != 4:
        raise op_error("unfold", f"expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                                 f"{xs}", RuntimeError)
    need_float("unfold", allow_bool=True, input=input)
    Ho, Wo = _blocks("unfold", xs[2:], kernel_size, dilation, padding, stride)
    return TensorSpec((xs[0], xs[1] * kernel_size[0] * kernel_size[1], Ho * Wo),
                      np.dtype(input.dtype))


def _taps(kernel_size, dilation, padding, stride, hw, blocks):
    """(i, j, block slices, input slices) for every kernel tap that sees the input."""
    for i in range(kernel_size[0]):
        r = _valid(i * dilation[0], stride[0], padding[0], hw[0], blocks[0])
        for j in range(kernel_size[1]):
            c = _valid(j * dilation[1], stride[1], padding[1], hw[1], blocks[1])
            if r is not None and c is not None:
                yield i, j, (r[0], c[0]), (r[1], c[1])


def _unfold_kernel(input, *, kernel_size, dilation, padding, stride, out=None):
    N, C, H, W = input.shape
    kh, kw = kernel_size
    Ho, Wo = _blocks("unfold", (H, W), kernel_size, dilation, padding, stride)
    xp = xp_of(input)
    ph, pw = padding
    if out is not None:
        try:
            o6 = xp.reshape(out, (N, C, kh, kw, Ho, Wo), copy=False)
        except (ValueError, TypeError):
            o6 = None
        if o6 is None or xp.may_share_memory(out, input):
            out[...] = _unfold_kernel(input, kernel_size=kernel_size, dilation=dilation,
                                      padding=padding, stride=stride)
            return out
        if not (ph or pw):  # every window inside: one copy of the strided windows
            sN, sC, sH, sW = input.strides
            o6[...] = xp.lib.stride_tricks.as_strided(
                input, shape=(N, C, kh, kw, Ho, Wo), strides=(
                    sN, sC, sH * dilation[0], sW * dilation[1], sH * stride[0], sW * stride[1]))
            return out
        o6[...] = 0  # taps in the padding read zeros
        for i, j, (bo, bw), (ih, iw) in _taps(kernel_size, dilation, padding, stride,
                                              (H, W), (Ho, Wo)):
            o6[:, :, i, j, bo, bw] = input[:, :, ih, iw]
        return out
    if ph or pw:
        buf = xp.zeros((N, C, H + 2 * ph, W + 2 * pw), input.dtype)
        buf[:, :, ph:ph + H, pw:pw + W] = input
    else:
        buf = xp.ascontiguousarray(input)
    sN, sC, sH, sW = buf.strides
    win = xp.lib.stride_tricks.as_strided(
        buf, shape=(N, C, kh, kw, Ho, Wo),
        strides=(sN, sC, sH * dilation[0], sW * dilation[1], sH * stride[0], sW * stride[1]))
    return xp.ascontiguousarray(win).reshape(N, C * kh * kw, Ho * Wo)


def _fold_infer(input, *, output_size, kernel_size, dilation, padding, stride):
    xs = tuple(input.shape)
    kh, kw = kernel_size
    if min(kernel_size) < 1:
        raise op_error("fold", f"kernel_size must be positive, got {kernel_size}",
                       RuntimeError)
    if len(xs) != 3:
        raise op_error("fold", f"expected a 2-D (C * kH * kW, L) or 3-D (N, C * kH * kW, L) "
                               f"input, got {xs}", RuntimeError)
    need_float("fold", allow_bool=True, input=input)
    if xs[1] % (kh * kw):
        raise op_error("fold", f"expected dim 1 of input {xs} to be divisible by the kernel "
                               f"size {kh} * {kw}", RuntimeError)
    Ho, Wo = _blocks("fold", output_size, kernel_size, dilation, padding, stride)
    if xs[2] != Ho * Wo:
        raise op_error("fold", f"input {xs} has {xs[2]} blocks, but output_size "
                               f"{tuple(output_size)} with kernel {kernel_size} gives "
                               f"{Ho} * {Wo} = {Ho * Wo}", RuntimeError)
    return TensorSpec((xs[0], xs[1] // (kh * kw)) + tuple(output_size), np.dtype(input.dtype))


def _fold_kernel(input, *, output_size, kernel_size, dilation, padding, stride, out=None):
    N, K, _ = input.shape
    kh, kw = kernel_size
    C = K // (kh * kw)
    H, W = output_size
    Ho, Wo = _blocks("fold", output_size, kernel_size, dilation, padding, stride)
    xp = xp_of(input)
    ph, pw = padding
    if out is not None:
        if xp.may_share_memory(out, input):
            out[...] = _fold_kernel(input, output_size=output_size, kernel_size=kernel_size,
                                    dilation=dilation, padding=padding, stride=stride)
            return out
        out[...] = 0
        cols = xp.reshape(input, (N, C, kh, kw, Ho, Wo))
        if isinstance(out, np.ndarray) and N and C and _isf(out.dtype) and \
                not (ph or pw) and out.flags.c_contiguous and cols.flags.c_contiguous:
            cpu_conv.col2im_add(cols, out, stride, dilation)
        else:  # the taps that land inside the output, added in tap order
            for i, j, (bo, bw), (ih, iw) in _taps(kernel_size, dilation, padding, stride,
                                                  (H, W), (Ho, Wo)):
                out[:, :, ih, iw] += cols[:, :, i, j, bo, bw]
        return out
    dst = xp.zeros((N, C, H + 2 * ph, W + 2 * pw), input.dtype)
    cols = xp.ascontiguousarray(input).reshape(N, C, kh, kw, Ho, Wo)
    if isinstance(dst, np.ndarray) and N and C and _isf(dst.dtype):
        cpu_conv.col2im_add(cols, dst, stride, dilation)
    else:
        for i in range(kh):
            for j in range(kw):
                h0, w0 = i * dilation[0], j * dilation[1]
                dst[:, :, h0:h0 + stride[0] * (Ho - 1) + 1:stride[0],
                    w0:w0 + stride[1] * (Wo - 1) + 1:stride[1]] += cols[:, :, i, j]
    return xp.ascontiguousarray(dst[:, :, ph:ph + H, pw:pw + W])


def _unfold_vjp(ctx, g):
    a = ctx.attrs
    return (bind(FOLD, g, output_size=tuple(ctx.shapes[0][2:]), **a),)


def _fold_vjp(ctx, g):
    a = dict(ctx.attrs)
    a.pop("output_size")
    return (bind(UNFOLD, g, **a),)


def _unfold_samples(dtype=np.float64):
    r = lambda s, k: _rand(s, dtype, seed=k)  # noqa: E731
    return [Sample((r((2, 2, 4, 5), 1),), _patch_attrs(2)),
            Sample((r((1, 3, 5, 5), 2),), _patch_attrs((3, 2), 1, 1, 2)),
            Sample((r((1, 1, 6, 5), 3),), _patch_attrs(2, (2, 1), (0, 1), (1, 2))),
            Sample((r((0, 2, 3, 3), 4),), _patch_attrs(1))]


def _fold_samples(dtype=np.float64):
    out = []
    for s in _unfold_samples(dtype):
        x = s.args[0]
        spec = _unfold_infer(TensorSpec(x.shape, x.dtype), **s.attrs)
        out.append(Sample((_rand(spec.shape, dtype, seed=x.size),),
                          dict(s.attrs, output_size=tuple(x.shape[2:]))))
    return out


UNFOLD = register(
    name="unfold", grad_fn_name="Im2ColBackward0",
    vmap=_vmap.nchw_rule, kernel=_unfold_kernel, infer=_unfold_infer,
    args=("input",),
    vjp=_unfold_vjp, jvp=lambda ctx, xt: (None if xt is None else
                                          bind(UNFOLD, xt, **ctx.attrs),),
    samples=_unfold_samples,
    torch=lambda torch, x, **a: torch.nn.functional.unfold(x, **a),
    error_samples=lambda: [((_rand((2, 3, 3)),), _patch_attrs(2), RuntimeError),
                           ((_rand((1, 1, 2, 2)),), _patch_attrs(3), RuntimeError),
                           ((_rand((1, 1, 4, 4)),), _patch_attrs(2, stride=0), RuntimeError)],
                  onnx=_onnx_unfold)
FOLD = register(
    name="fold", grad_fn_name="Col2ImBackward0",
    vmap=_vmap.nchw_rule, kernel=_fold_kernel, infer=_fold_infer, args=("input",),
    vjp=_fold_vjp,
    jvp=lambda ctx, xt: (None if xt is None else bind(FOLD, xt, **ctx.attrs),),
    samples=_fold_samples,
    torch=lambda torch, x, **a: torch.nn.functional.fold(x, **a),
    error_samples=lambda: [((_rand((1, 5, 4)),), dict(_patch_attrs(2), output_size=(3, 3)),
                            RuntimeError),
                           ((_rand((1, 4, 3)),), dict(_patch_attrs(2), output_size=(3, 3)),
                            RuntimeError),
                           ((_rand((4, 3)),), dict(_patch_attrs(2), output_size=(3, 3)),
                            RuntimeError)], onnx=_onnx_fold)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding blocks of an (N, C, H, W) input as columns, (N, C * kH * kW, L), as
    ``torch.nn.functional.unfold`` (im2col); an unbatched (C, H, W) input gives
    (C * kH * kW, L)."""
    if getattr(input, "ndim", None) == 3:
        return bind(UNFOLD, input[None],
                    **_patch_attrs(kernel_size, dilation, padding, stride))[0]
    return bind(UNFOLD, input, **_patch_attrs(kernel_size, dilation, padding, stride))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum (N, C * kH * kW, L) columns back into an (N, C, H, W) image, as
    ``torch.nn.functional.fold`` (col2im; the adjoint of ``unfold``); unbatched
    (C * kH * kW, L) columns give a (C, H, W) image."""
    one = getattr(input, "ndim", None) == 2
    out = bind(FOLD, input[None] if one else input,
               output_size=pair("fold", output_size, "output_size"),
               **_patch_attrs(kernel_size, dilation, padding, stride, "fold"))
    return out[0] if one else out


# ------------------------------------------------------------------ grid_sample
_GRID_MODES = ("bilinear", "nearest", "bicubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")


def _grid_check(x, g, mode, padding_mode):
    """grid_sample's checks on shapes and dtypes (specs or tensors); its output shape."""
    name = "grid_sample"
    if mode not in _GRID_MODES:
        raise op_error(name, f"expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                             f"got: {mode!r}", ValueError)
    if padding_mode not in _GRID_PADDINGS:
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
    if not _isf(xd) or not _isf(gd) or xd != gd:
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


def _grid_sample_infer(x, g, mode="bilinear", padding_mode="zeros", align_corners=None):
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
             ((1, 2, 4, 5), "nearest", "zeros", False),
             ((1, 1, 3, 4), "nearest", "reflection", True),
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
    checked against torch.nn.functional.grid_sample's values (tests/ops/nn/
    test_conv_nd_grid_sample_ctc.py compares the gradients with PyTorch's own, every mode)."""
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


composite(grid_sample, autocast={"cuda": "promote"}, infer=_grid_sample_infer,
          args=("input", "grid"), samples=_grid_samples,
          error_samples=lambda: [
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 3))), {}, RuntimeError),
              ((rand((1, 2, 4, 5)), rand((2, 3, 2, 2))), {}, RuntimeError),
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 2))), {"mode": "cubic"}, ValueError),
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 2))), {"padding_mode": "wrap"}, ValueError),
              ((rand((1, 2, 3, 4, 5)), rand((1, 3, 2, 2, 3))), {"mode": "bicubic"},
               RuntimeError),
              ((rand((1, 2, 4, 5)), rand((1, 3, 2, 2), np.float32)), {}, RuntimeError)],
          torch=_torch_grid)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated spelling of ``interpolate``."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='nearest')``."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='bilinear', align_corners=True)``."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def affine_grid(theta, size, align_corners=None):
    """The sampling grid ``base @ theta^T`` of ``grid_sample`` for a batch of affine
    matrices (N, 2, 3) (size (N, C, H, W)) or (N, 3, 4) (size (N, C, D, H, W)); the
    base grid spans [-1, 1] at the corners' centres (``align_corners=False``) or at
    the corners."""
    if hasattr(theta, "is_floating_point") and not theta.is_floating_point():
        raise op_error("affine_grid", f"Expected theta to have floating point type, but got "
                                      f"{theta.dtype}", ValueError)
    size = tuple(size)
    nsp = len(size) - 2
    if nsp not in (2, 3) or theta.ndim != 3 or tuple(theta.shape[1:]) != (nsp, nsp + 1) \
            or theta.shape[0] != size[0]:
        raise op_error("affine_grid", f"Expected a batch of {nsp}D affine matrices of shape "
                                      f"Nx{nsp}x{nsp + 1} for size {list(size)}. Got "
                                      f"{list(theta.shape)}.", ValueError)
    ac = bool(align_corners)
    axes = []
    for n in size[2:][::-1]:  # x (W) first, then y (H), then z (D)
        if n <= 1:
            axes.append(np.zeros(max(n, 1)))
        elif ac:
            axes.append(np.linspace(-1.0, 1.0, n))
        else:
            axes.append((np.arange(n) * 2.0 + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes[::-1], indexing="ij")  # D/H first
    base = np.stack([m for m in mesh[::-1]] + [np.ones_like(mesh[0])], -1)
    base = base.reshape(1, -1, nsp + 1)
    dt = np.dtype(str(theta.dtype).split(".")[-1])
    # (the base grid, a constant of the sizes: tg.compile's capture takes it as one)
    grid = matmul(_constant(theta.new_tensor(base.astype(dt))), theta.transpose(1, 2))
    return reshape(grid, (size[0],) + size[2:] + (nsp,))


# ------------------------------------------------------------------ the registry
def _torch_functional(name):
    def oracle(torch, *a, **kw):
        return getattr(torch.nn.functional, name)(*a, **kw)
    return oracle


def _up_infer(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    sp = tuple(x.shape[2:])
    if size is not None:
        out = tuple(size) if isinstance(size, (tuple, list)) else (size,) * len(sp)
    else:
        out = tuple(int(np.floor(n * scale_factor)) for n in sp)
    return TensorSpec(tuple(x.shape[:2]) + out, x.dtype)


for _fn, _kw in ((upsample, {"scale_factor": 2, "mode": "bilinear", "align_corners": False}),
                 (upsample_nearest, {"size": (5, 4)}), (upsample_bilinear, {"scale_factor": 2})):
    composite(_fn, infer=_up_infer,
              samples=(lambda kw: lambda dtype=np.float64: [
                  Sample((rand((1, 2, 3, 3), dtype),), dict(kw))])(_kw),
              error_samples=lambda: [((rand((1, 2, 3, 3)),), {}, ValueError)],
              torch=_torch_functional(_fn.__name__))


def _affine_grid_infer(theta, size, align_corners=None):
    size = tuple(size)
    return TensorSpec((size[0],) + size[2:] + (len(size) - 2,), theta.dtype)


composite(affine_grid, infer=_affine_grid_infer, args=("theta",),
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 2, 3), dtype),), {"size": (2, 3, 4, 5), "align_corners": False}),
              Sample((rand((1, 3, 4), dtype),), {"size": (1, 1, 2, 3, 4), "align_corners": True})],
          error_samples=lambda: [((rand((2, 2, 3)),), {"size": (2, 3, 4)}, ValueError)],
          torch=_torch_functional("affine_grid"))
del _fn, _kw
