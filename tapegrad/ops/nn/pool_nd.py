"""The 1-d and 3-d pooling of ``nn.functional``, adaptive max pooling, power-average
pooling and max-unpooling, all composites of the 2-d pooling ops:

- 1-d pooling is the 2-d op on a height-1 image;
- 3-d average and max pooling (and their adaptive forms) are separable: the 2-d op
  over (H, W) for each depth, then the 2-d op with a (1, k) window over D (a box's
  max is the max of its rows' maxes; its sum the sum of its rows' sums, and the
  counts PyTorch divides by are products of per-dim counts);
- max_pool3d with ``return_indices`` takes its window's slices and their argmax;
- adaptive max pooling takes PyTorch's bins (``floor(i n / o)`` to ``ceil((i+1) n / o)``);
- lp_pool is PyTorch's formula ``(sign(s) relu(|s|) k)^(1/p)`` of the average of
  ``x^p``; max_unpool scatters into zeros at the pooling indices.
"""
import numpy as np

from ..._util import op_error
from .._decl import Sample, TensorSpec, composite, rand
from ..creation import _constant
from ..elementwise import abs as _abs, relu, sign, where
from ..indexing import scatter
from ..reduce import amax, argmax
from ..shape import flatten, pad as _pad, permute, reshape, squeeze, stack, unsqueeze
from ._common import torch_functional as _torch
from .pool import _bins, adaptive_avg_pool2d, avg_pool2d, max_pool2d

__all__ = ["avg_pool1d", "max_pool1d", "adaptive_avg_pool1d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "lp_pool1d", "lp_pool2d", "avg_pool3d", "max_pool3d",
           "adaptive_avg_pool3d", "adaptive_max_pool3d", "lp_pool3d", "max_unpool1d",
           "max_unpool2d", "max_unpool3d"]


def _tuple(v, n, name, what):
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return tuple(v) * n
        if len(v) != n:
            raise op_error(name, f"{what} must be an int or {n} ints, got {tuple(v)}",
                           RuntimeError)
        return tuple(v)
    return (v,) * n


def _ndim_check(name, x, n):
    if x.ndim not in (n + 1, n + 2):
        raise op_error(name, f"expected a {n + 1}-D or {n + 2}-D input, got shape "
                             f"{tuple(x.shape)}", RuntimeError)


# ------------------------------------------------------------------ 1-d
def _one(name, x, fn):
    """``fn`` (a 2-d op) on ``x`` (N, C, L) or (C, L) as a height-1 image."""
    _ndim_check(name, x, 1)
    out = fn(unsqueeze(x, -2))
    if isinstance(out, tuple):
        return tuple(squeeze(o, -2) for o in out)
    return squeeze(out, -2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """1-d average pooling over (N, C, L)."""
    k = _tuple(kernel_size, 1, "avg_pool1d", "kernel_size")[0]
    s = k if stride is None or stride == () else _tuple(stride, 1, "avg_pool1d", "stride")[0]
    p = _tuple(padding, 1, "avg_pool1d", "padding")[0]
    return _one("avg_pool1d", input, lambda x: avg_pool2d(
        x, (1, k), (1, s), (0, p), ceil_mode=ceil_mode, count_include_pad=count_include_pad))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-d max pooling over (N, C, L); indices count along L."""
    k = _tuple(kernel_size, 1, "max_pool1d", "kernel_size")[0]
    s = k if stride is None or stride == () else _tuple(stride, 1, "max_pool1d", "stride")[0]
    p = _tuple(padding, 1, "max_pool1d", "padding")[0]
    d = _tuple(dilation, 1, "max_pool1d", "dilation")[0]
    return _one("max_pool1d", input, lambda x: max_pool2d(
        x, (1, k), (1, s), (0, p), (1, d), ceil_mode=ceil_mode, return_indices=return_indices))


def _need_floating(name, x):
    """PyTorch's refusal of an integer or bool input (its max kernels are floating only)."""
    if hasattr(x, "is_floating_point") and not x.is_floating_point():
        raise op_error(name, f"not implemented for {x.dtype} input (a floating point input "
                             f"is expected)", NotImplementedError)


def _empty(x, n, out):
    """The empty result of an adaptive pool to an output size with a 0 (as PyTorch)."""
    return x.new_zeros(tuple(x.shape[:-n]) + tuple(int(o) for o in out))


def adaptive_avg_pool1d(input, output_size):
    """Average pooling of (N, C, L) to ``output_size`` bins."""
    o = _tuple(output_size, 1, "adaptive_avg_pool1d", "output_size")[0]
    return _one("adaptive_avg_pool1d", input, lambda x: adaptive_avg_pool2d(x, (1, o)))


def _adaptive_max_last(x, o):
    """Max over PyTorch's adaptive bins of the last dim (values, and the argmax within
    each bin as an index into that dim)."""
    n = x.shape[-1]
    vals, idx = [], []
    for lo, hi in _bins(n, o):
        piece = x[..., lo:hi]
        vals.append(amax(piece, -1))
        idx.append(argmax(piece, -1) + lo)
    return stack(vals, -1), stack(idx, -1)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Max pooling of (N, C, H, W) to ``output_size`` bins (indices flat over H W)."""
    _ndim_check("adaptive_max_pool2d", input, 2)
    _need_floating("adaptive_max_pool2d", input)
    H, W = input.shape[-2:]
    oh, ow = _tuple(output_size, 2, "adaptive_max_pool2d", "output_size")
    oh, ow = H if oh is None else int(oh), W if ow is None else int(ow)
    if oh == 0 or ow == 0:
        out = _empty(input, 2, (oh, ow))
        return (out, out.long()) if return_indices else out
    if not return_indices:
        rows, _ = _adaptive_max_last(input.transpose(-1, -2), oh)
        out, _ = _adaptive_max_last(rows.transpose(-1, -2), ow)
        return out
    vals, idx = [], []
    for lo, hi in _bins(H, oh):
        vrow, irow = [], []
        for lo2, hi2 in _bins(W, ow):
            piece = flatten(input[..., lo:hi, lo2:hi2], -2)
            r = argmax(piece, -1)
            vrow.append(amax(piece, -1))
            w = hi2 - lo2
            irow.append((lo + r // w) * W + lo2 + r % w)
        vals.append(stack(vrow, -1))
        idx.append(stack(irow, -1))
    return stack(vals, -2), stack(idx, -2)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Max pooling of (N, C, L) to ``output_size`` bins."""
    _ndim_check("adaptive_max_pool1d", input, 1)
    _need_floating("adaptive_max_pool1d", input)
    o = _tuple(output_size, 1, "adaptive_max_pool1d", "output_size")[0]
    if o == 0:
        out = _empty(input, 1, (0,))
        return (out, out.long()) if return_indices else out
    out, idx = _adaptive_max_last(input, int(o))
    return (out, idx) if return_indices else out


def _lp(name, input, norm_type, kernel_size, stride, ceil_mode, n, avg):
    ks = _tuple(kernel_size, n, name, "kernel_size")
    if stride is not None:
        out = avg(input ** norm_type, kernel_size, stride, 0, ceil_mode)
    else:
        out = avg(input ** norm_type, kernel_size, padding=0, ceil_mode=ceil_mode)
    return (sign(out) * relu(_abs(out)) * float(np.prod(ks))) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling: ``(sum over the window of x^p)^(1/p)``."""
    return _lp("lp_pool1d", input, norm_type, kernel_size, stride, ceil_mode, 1, avg_pool1d)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, H, W)."""
    return _lp("lp_pool2d", input, norm_type, kernel_size, stride, ceil_mode, 2, avg_pool2d)


# ------------------------------------------------------------------ 3-d
def _separable(name, x, fn_hw, fn_d):
    """``fn_hw`` (a 2-d op) over (H, W) of each depth, then ``fn_d`` (a 2-d op with a
    (1, k) window) over D; ``x`` (N, C, D, H, W) or (C, D, H, W)."""
    _ndim_check(name, x, 3)
    one = x.ndim == 4
    if one:
        x = unsqueeze(x, 0)
    N, C, D, H, W = x.shape
    y = fn_hw(reshape(x, (N, C * D, H, W)))
    H2, W2 = y.shape[-2:]
    y = permute(reshape(y, (N, C, D, H2, W2)), (0, 1, 3, 4, 2))
    z = fn_d(reshape(y, (N, C * H2 * W2, 1, D)))
    D2 = z.shape[-1]
    z = permute(reshape(z, (N, C, H2, W2, D2)), (0, 1, 4, 2, 3))
    return z[0] if one else z


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """3-d average pooling over (N, C, D, H, W)."""
    k = _tuple(kernel_size, 3, "avg_pool3d", "kernel_size")
    s = k if stride is None or stride == () else _tuple(stride, 3, "avg_pool3d", "stride")
    p = _tuple(padding, 3, "avg_pool3d", "padding")
    if divisor_override is not None:
        if divisor_override == 0:
            raise op_error("avg_pool3d", "divisor must be not zero", RuntimeError)
        total = _separable("avg_pool3d", input,
                           lambda y: avg_pool2d(y, k[1:], s[1:], p[1:], ceil_mode,
                                                count_include_pad, 1),
                           lambda y: avg_pool2d(y, (1, k[0]), (1, s[0]), (0, p[0]), ceil_mode,
                                                count_include_pad, 1))
        return total / divisor_override
    return _separable("avg_pool3d", input,
                      lambda y: avg_pool2d(y, k[1:], s[1:], p[1:], ceil_mode, count_include_pad),
                      lambda y: avg_pool2d(y, (1, k[0]), (1, s[0]), (0, p[0]), ceil_mode,
                                           count_include_pad))


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """3-d max pooling over (N, C, D, H, W); indices flat over D H W."""
    k = _tuple(kernel_size, 3, "max_pool3d", "kernel_size")
    s = k if stride is None or stride == () else _tuple(stride, 3, "max_pool3d", "stride")
    p = _tuple(padding, 3, "max_pool3d", "padding")
    d = _tuple(dilation, 3, "max_pool3d", "dilation")
    out = _separable("max_pool3d", input,
                     lambda y: max_pool2d(y, k[1:], s[1:], p[1:], d[1:], ceil_mode),
                     lambda y: max_pool2d(y, (1, k[0]), (1, s[0]), (0, p[0]), (1, d[0]),
                                          ceil_mode))
    if not return_indices:
        return out
    return out, _max3d_indices(input, out, k, s, p, d)


def _max3d_indices(x, out, k, s, p, d):
    """The flat (D H W) index of each window's max: the window's slices stacked, their
    argmax turned into positions."""
    one = x.ndim == 4
    if one:
        x, out = unsqueeze(x, 0), unsqueeze(out, 0)
    sizes = tuple(x.shape[2:])
    osz = tuple(out.shape[2:])
    xp = _pad(x, (p[2], p[2] + s[2] * osz[2], p[1], p[1] + s[1] * osz[1],
                  p[0], p[0] + s[0] * osz[0]), value=float("-inf"))
    pieces, offsets = [], []
    for a in range(k[0]):
        for b in range(k[1]):
            for c in range(k[2]):
                o = (a * d[0], b * d[1], c * d[2])
                pieces.append(xp[:, :, o[0]:o[0] + s[0] * osz[0]:s[0],
                                 o[1]:o[1] + s[1] * osz[1]:s[1],
                                 o[2]:o[2] + s[2] * osz[2]:s[2]])
                offsets.append(o)
    r = argmax(stack(pieces, 2), 2)  # which offset, (N, C, D', H', W')
    off = _constant(r.new_tensor(np.array(offsets, dtype=np.int64)))  # int64, as r
    pos = []
    for axis in range(3):
        base = np.arange(osz[axis], dtype=np.int64) * s[axis] - p[axis]
        shape = [1, 1, 1, 1, 1]
        shape[2 + axis] = osz[axis]
        pos.append(base.reshape(shape))
    D, H, W = sizes
    # the chosen offset per axis, read from the table with the argmax
    oa, ob, oc = off[:, 0][r], off[:, 1][r], off[:, 2][r]
    pos = [_constant(r.new_tensor(p)) for p in pos]
    idx = ((oa + pos[0]) * H + (ob + pos[1])) * W + (oc + pos[2])
    return idx[0] if one else idx


def adaptive_avg_pool3d(input, output_size):
    """Average pooling of (N, C, D, H, W) to ``output_size`` bins."""
    _ndim_check("adaptive_avg_pool3d", input, 3)
    od, oh, ow = _tuple(output_size, 3, "adaptive_avg_pool3d", "output_size")
    D = input.shape[-3]
    od = D if od is None else od
    if 0 in (od, oh, ow):
        H, W = input.shape[-2:]
        return _empty(input, 3, (od, H if oh is None else oh, W if ow is None else ow))
    return _separable("adaptive_avg_pool3d", input,
                      lambda y: adaptive_avg_pool2d(y, (oh, ow)),
                      lambda y: adaptive_avg_pool2d(y, (1, od)))


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max pooling of (N, C, D, H, W) to ``output_size`` bins."""
    if return_indices:
        raise op_error("adaptive_max_pool3d", "return_indices=True is not supported yet",
                       NotImplementedError)
    _ndim_check("adaptive_max_pool3d", input, 3)
    _need_floating("adaptive_max_pool3d", input)
    od, oh, ow = _tuple(output_size, 3, "adaptive_max_pool3d", "output_size")
    D = input.shape[-3]
    od = D if od is None else od
    if 0 in (od, oh, ow):
        H, W = input.shape[-2:]
        return _empty(input, 3, (od, H if oh is None else oh, W if ow is None else ow))
    return _separable("adaptive_max_pool3d", input,
                      lambda y: adaptive_max_pool2d(y, (oh, ow)),
                      lambda y: adaptive_max_pool2d(y, (1, od)))


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Power-average pooling over (N, C, D, H, W)."""
    return _lp("lp_pool3d", input, norm_type, kernel_size, stride, ceil_mode, 3, avg_pool3d)


# ------------------------------------------------------------------ unpooling
def _unpool(name, n, input, indices, kernel_size, stride, padding, output_size):
    k = _tuple(kernel_size, n, name, "kernel_size")
    s = k if stride is None or stride == () else _tuple(stride, n, name, "stride")
    p = _tuple(padding, n, name, "padding")
    if input.ndim not in (n + 1, n + 2):
        raise op_error(name, f"expected a {n + 1}-D or {n + 2}-D input, got shape "
                             f"{tuple(input.shape)}", RuntimeError)
    _need_floating(name, input)
    if tuple(indices.shape) != tuple(input.shape):
        raise op_error(name, f"Expected shape of indices to be same as that of the input "
                             f"tensor ({tuple(input.shape)}) but got indices tensor with "
                             f"shape: {tuple(indices.shape)}", RuntimeError)
    sp = tuple(input.shape[-n:])
    if output_size is None:
        size = tuple((i - 1) * st - 2 * pd + kk for i, st, pd, kk in zip(sp, s, p, k))
    else:
        size = tuple(output_size)[-n:]
    lead = tuple(input.shape[:-n])
    flat_in = reshape(input, lead + (-1,))
    flat_idx = reshape(indices, lead + (-1,))
    zeros = input.new_zeros(lead + (int(np.prod(size)),))
    return reshape(scatter(zeros, -1, flat_idx, flat_in), lead + size)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool1d: ``input`` placed at ``indices``, zeros elsewhere."""
    return _unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool2d: ``input`` placed at ``indices``, zeros elsewhere."""
    return _unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool3d: ``input`` placed at ``indices``, zeros elsewhere."""
    return _unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)


# ------------------------------------------------------------------ the registry
def _infer_from(fn):
    """A shape rule that runs the function on zeros of the specs (small inputs only:
    the samples' and the error samples')."""
    def infer(*specs, **attrs):
        from ...grad_mode import no_grad
        from ...tensor import wrap
        args = [wrap(np.zeros(s.shape, np.dtype(s.dtype))) if hasattr(s, "shape") else s
                for s in specs]
        with no_grad():
            out = fn(*args, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        specs_out = tuple(TensorSpec(tuple(o.shape), np.dtype(o.dtype.np)) for o in outs)
        return specs_out if isinstance(out, tuple) else specs_out[0]
    return infer


def _distinct(shape, dtype, seed=0):
    """Distinct values (no ties in a window), shuffled."""
    n = int(np.prod(shape))
    v = np.random.default_rng(seed).permutation(n).astype(np.float64) / n - 0.5
    return v.reshape(shape).astype(dtype)


def _decl(fn, samples, errors, args=("input",), widen=False, autocast=None):
    composite(fn, infer=_infer_from(fn), samples=samples, torch=_torch(fn.__name__),
              error_samples=errors, args=args, widen=widen, autocast=autocast)


_BAD2 = lambda: [((rand((4, 4)),), {"kernel_size": 2}, RuntimeError)]  # noqa: E731
_BAD3 = lambda: [((rand((4, 4)),), {"kernel_size": 2}, RuntimeError)]  # noqa: E731

_decl(avg_pool1d, lambda dtype=np.float64: [
    Sample((rand((2, 3, 8), dtype),), {"kernel_size": 2}),
    Sample((rand((3, 7), dtype),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                    "ceil_mode": True, "count_include_pad": False})],
    lambda: [((rand((4,)),), {"kernel_size": 2}, RuntimeError)])
_decl(max_pool1d, lambda dtype=np.float64: [
    Sample((_distinct((2, 3, 8), dtype),), {"kernel_size": 2}),
    Sample((_distinct((3, 9), dtype, 1),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                            "dilation": 1, "ceil_mode": True})],
    lambda: [((rand((4,)),), {"kernel_size": 2}, RuntimeError)])
_decl(adaptive_avg_pool1d, lambda dtype=np.float64: [
    Sample((rand((2, 3, 8), dtype),), {"output_size": 3})],
    lambda: [((rand((4,)),), {"output_size": 2}, RuntimeError)], widen=True,
    autocast={"cpu": "keep"})
_decl(adaptive_max_pool1d, lambda dtype=np.float64: [
    Sample((_distinct((2, 3, 8), dtype),), {"output_size": 3})],
    lambda: [((rand((4,)),), {"output_size": 2}, RuntimeError)])
_decl(adaptive_max_pool2d, lambda dtype=np.float64: [
    Sample((_distinct((2, 3, 6, 5), dtype),), {"output_size": (3, 2)}),
    Sample((_distinct((2, 5, 7), dtype, 1),), {"output_size": 3})],
    lambda: [((rand((4,)),), {"output_size": 2}, RuntimeError)])
_decl(lp_pool1d, lambda dtype=np.float64: [
    Sample((rand((2, 3, 8), dtype),), {"norm_type": 2, "kernel_size": 2})],
    lambda: [((rand((4,)),), {"norm_type": 2, "kernel_size": 2}, RuntimeError)])
_decl(lp_pool2d, lambda dtype=np.float64: [
    Sample((rand((2, 3, 6, 6), dtype),), {"norm_type": 2, "kernel_size": 2}),
    Sample((rand((1, 2, 5, 5), dtype, 0.2, 1.0),), {"norm_type": 1.5, "kernel_size": 3,
                                                    "stride": 2})],
    lambda: [((rand((4,)),), {"norm_type": 2, "kernel_size": 2}, RuntimeError)])
_decl(avg_pool3d, lambda dtype=np.float64: [
    Sample((rand((1, 2, 4, 4, 4), dtype),), {"kernel_size": 2}),
    Sample((rand((2, 5, 4, 5), dtype),), {"kernel_size": (3, 2, 2), "stride": 2,
                                          "padding": 1, "ceil_mode": True,
                                          "count_include_pad": False}),
    Sample((rand((1, 1, 4, 4, 4), dtype),), {"kernel_size": 2, "divisor_override": 3})],
    lambda: [((rand((4, 4)),), {"kernel_size": 2}, RuntimeError)])
_decl(max_pool3d, lambda dtype=np.float64: [
    Sample((_distinct((1, 2, 4, 4, 4), dtype),), {"kernel_size": 2}),
    Sample((_distinct((2, 5, 4, 5), dtype, 1),), {"kernel_size": (3, 2, 2), "stride": 2,
                                                  "padding": 1, "ceil_mode": True})],
    lambda: [((rand((4, 4)),), {"kernel_size": 2}, RuntimeError)])
_decl(adaptive_avg_pool3d, lambda dtype=np.float64: [
    Sample((rand((1, 2, 4, 5, 6), dtype),), {"output_size": (2, 3, 2)})],
    lambda: [((rand((4, 4)),), {"output_size": 2}, RuntimeError)], autocast={"cpu": "keep"})
_decl(adaptive_max_pool3d, lambda dtype=np.float64: [
    Sample((_distinct((1, 2, 4, 5, 6), dtype),), {"output_size": (2, 3, 2)})],
    lambda: [((rand((4, 4)),), {"output_size": 2}, RuntimeError)])
_decl(lp_pool3d, lambda dtype=np.float64: [
    Sample((rand((1, 2, 4, 4, 4), dtype),), {"norm_type": 2, "kernel_size": 2})],
    lambda: [((rand((4, 4)),), {"norm_type": 2, "kernel_size": 2}, RuntimeError)])


def _pool2_with_indices(x, n):
    """NumPy max pooling with window 2 and stride 2 over the last ``n`` dims: the
    values and their flat indices (as max_pool with return_indices)."""
    lead, sp = x.shape[:-n], x.shape[-n:]
    half = tuple(s // 2 for s in sp)
    grid = np.indices(sp).reshape(n, -1).T  # every position, row-major
    flat = np.arange(int(np.prod(sp)))
    window = tuple(g // 2 for g in grid.T)
    vals = np.full(lead + half, -np.inf)
    idx = np.zeros(lead + half, np.int64)
    for pos, w in zip(flat, zip(*window)):
        at = np.unravel_index(pos, sp)
        v = x[(Ellipsis,) + at]
        better = v > vals[(Ellipsis,) + w]
        vals[(Ellipsis,) + w] = np.where(better, v, vals[(Ellipsis,) + w])
        idx[(Ellipsis,) + w] = np.where(better, pos, idx[(Ellipsis,) + w])
    return vals, idx


def _unpool_samples(n):
    def samples(dtype=np.float64):
        v, i = _pool2_with_indices(_distinct((1, 2) + (4,) * n, np.float64), n)
        return [Sample((v.astype(dtype), i), {"kernel_size": 2})]
    return samples


for _n, _fn in ((1, max_unpool1d), (2, max_unpool2d), (3, max_unpool3d)):
    _decl(_fn, _unpool_samples(_n),
          (lambda n: lambda: [((rand((1, 2) + (2,) * n), np.zeros((1, 2) + (3,) * n, np.int64)),
                               {"kernel_size": 2}, RuntimeError)])(_n),
          args=("input", "indices"))
del _n, _fn, where
