"""Compositions of ``nn.functional`` over the existing layers: bilinear (an einsum),
conv_transpose1d (conv_transpose2d on a height-1 image), conv_tbc (conv1d in
time-batch-channel layout), upsample / upsample_nearest / upsample_bilinear
(interpolate), embedding_bag (embedding, then a sum, mean or max per bag) and
affine_grid (a constant base grid times theta)."""
import numpy as np

from ..._util import op_error
from ..linalg import einsum, matmul
from ..reduce import sum as _sum, amax
from ..shape import unsqueeze, squeeze, permute, reshape, cat
from ..elementwise import where
from .conv import conv1d, conv_transpose2d
from .sparse import embedding
from .spatial import interpolate
from ._common import whole
from .._decl import composite, Sample, TensorSpec, rand

__all__ = ["bilinear", "conv_transpose1d", "conv_tbc", "upsample", "upsample_nearest",
           "upsample_bilinear", "embedding_bag", "affine_grid"]


def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]``."""
    if bias is not None and hasattr(bias, "is_floating_point") and not bias.is_floating_point():
        raise op_error("bilinear", f"expected a floating point bias, got {bias.dtype}",
                       RuntimeError)
    if weight.ndim != 3:
        raise op_error("bilinear", f"expected a 3-D weight (out, in1, in2), got shape "
                                   f"{tuple(weight.shape)}", RuntimeError)
    if input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2] or \
            tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise op_error("bilinear", f"input1 {tuple(input1.shape)} and input2 "
                                   f"{tuple(input2.shape)} do not fit weight "
                                   f"{tuple(weight.shape)}", RuntimeError)
    lead = tuple(input1.shape[:-1])
    a = reshape(input1, (-1, input1.shape[-1]))
    b = reshape(input2, (-1, input2.shape[-1]))
    out = einsum("bi,oij,bj->bo", a, weight, b)
    if bias is not None:
        out = out + bias
    return reshape(out, lead + (weight.shape[0],))


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


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated spelling of ``interpolate``."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='nearest')``."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode='bilinear', align_corners=True)``."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """The sum, mean or max of each bag's embeddings: the rows of a 2-D ``input``, or
    the pieces of a 1-D ``input`` cut at ``offsets``; ``padding_idx`` entries are left
    out (an empty bag gives zeros); ``per_sample_weights`` scale the rows (sum only)."""
    name = "embedding_bag"
    if hasattr(weight, "is_floating_point") and not weight.is_floating_point():
        raise op_error(name, f"expected a floating point weight, got {weight.dtype}",
                       RuntimeError)
    if mode not in ("sum", "mean", "max"):
        raise op_error(name, f"mode has to be one of sum, mean or max, got {mode!r}", ValueError)
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise op_error(name, "max_norm, scale_grad_by_freq and sparse are not supported",
                       NotImplementedError)
    if per_sample_weights is not None:
        if mode != "sum":
            raise op_error(name, f"embedding_bag: per_sample_weights was not None. "
                                 f"per_sample_weights is only supported for mode='sum' (got "
                                 f"mode='{mode}'). Please open a feature request on GitHub.",
                           NotImplementedError)
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise op_error(name, f"embedding_bag: If per_sample_weights "
                                 f"({tuple(per_sample_weights.shape)}) is not None, then it "
                                 f"must have the same shape as the input "
                                 f"({tuple(input.shape)})", ValueError)
    if input.ndim == 2:
        if offsets is not None:
            raise op_error(name, "if input is 2D, then offsets has to be None, as input is "
                                 "treated is a mini-batch of fixed length sequences.",
                           ValueError)
        emb = embedding(input, weight)  # (B, L, D)
        keep = None if padding_idx is None else unsqueeze(input != padding_idx, -1)
        if per_sample_weights is not None:
            emb = emb * unsqueeze(per_sample_weights, -1)
        if mode == "max":
            if keep is not None:
                emb = where(keep, emb, float("-inf"))
            out = amax(emb, 1)
            return where(out == float("-inf"), 0.0, out) if keep is not None else out
        if keep is not None:
            emb = where(keep, emb, 0.0)
        total = _sum(emb, 1)
        if mode == "sum":
            return total
        n = input.shape[1] if keep is None else _sum(keep, 1)
        if keep is None:
            return total / n if n else total
        return total / where(n > 0, n, 1).to(total.dtype)
    if input.ndim != 1:
        raise op_error(name, f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                             f"{input.ndim}", ValueError)
    if offsets is None or offsets.ndim != 1:
        raise op_error(name, "offsets has to be a 1D Tensor when input is 1D", ValueError)
    first = whole(offsets).reshape(-1)[:1]
    if len(first) and int(first[0]) != 0:
        raise op_error(name, f"offsets[0] has to be 0, i.e., the first sequence in the "
                             f"mini-batch has to start from position 0. However, got "
                             f"{int(first[0])}", RuntimeError)
    # bag b holds positions starts[b] <= k < ends[b]: a (B, n) membership mask, with ops
    # (so it runs under vmap and compiled, and on torch.Tensors)
    n = input.shape[0]
    tail = offsets.new_tensor(np.array([n], np.int64))
    starts = offsets[:-1] if include_last_offset else offsets
    ends = offsets[1:] if include_last_offset else cat([offsets[1:], tail])
    pos = unsqueeze(offsets.new_tensor(np.arange(n, dtype=np.int64)), 0)
    member = (pos >= unsqueeze(starts, 1)) & (pos < unsqueeze(ends, 1))
    if padding_idx is not None:
        member = member & unsqueeze(input != padding_idx, 0)
    emb = embedding(input, weight)  # (n, D)
    if per_sample_weights is not None:
        emb = emb * unsqueeze(per_sample_weights, -1)
    if mode == "max":
        out = amax(where(unsqueeze(member, -1), unsqueeze(emb, 0), float("-inf")), 1)
        return where(out == float("-inf"), 0.0, out)
    # a masked sum (not member @ emb: a 0 weight times a NaN/inf row of another bag
    # would spread it)
    total = _sum(where(unsqueeze(member, -1), unsqueeze(emb, 0), 0.0), 1)
    if mode == "sum":
        return total
    count = _sum(member, 1)
    return total / unsqueeze(where(count > 0, count, 1), 1).to(total.dtype)


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
    grid = matmul(theta.new_tensor(base.astype(dt)), theta.transpose(1, 2))
    return reshape(grid, (size[0],) + size[2:] + (nsp,))


# ------------------------------------------------------------------ the registry
def _torch(name):
    def oracle(torch, *a, **kw):
        return getattr(torch.nn.functional, name)(*a, **kw)
    return oracle


def _bil_infer(a, b, w, bias=None):
    return TensorSpec(tuple(a.shape[:-1]) + (w.shape[0],), a.dtype)


composite(bilinear, infer=_bil_infer, args=("input1", "input2", "weight", "bias"),
          optional=("bias",),
          samples=lambda dtype=np.float64: [
              Sample((rand((4, 3), dtype), rand((4, 5), dtype, seed=1),
                      rand((2, 3, 5), dtype, seed=2), rand((2,), dtype, seed=3))),
              Sample((rand((2, 3, 3), dtype), rand((2, 3, 2), dtype, seed=1),
                      rand((4, 3, 2), dtype, seed=2), None))],
          error_samples=lambda: [((rand((4, 3)), rand((4, 5)), rand((2, 3, 4)), None), {},
                                  RuntimeError)],
          torch=_torch("bilinear"))


def _ct1_infer(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    L = x.shape[-1]
    s, p, op_, d = (_one(v, "conv_transpose1d", "") for v in (stride, padding, output_padding,
                                                               dilation))
    out = (L - 1) * s - 2 * p + d * (w.shape[-1] - 1) + op_ + 1
    return TensorSpec(tuple(x.shape[:-2]) + (w.shape[1] * groups, out), x.dtype)


composite(conv_transpose1d, infer=_ct1_infer, args=("input", "weight", "bias"),
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


composite(conv_tbc, infer=_tbc_infer, args=("input", "weight", "bias"),
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
              torch=_torch(_fn.__name__))


def _bag_infer(x, w, offsets=None, *a, include_last_offset=False, **k):
    B = x.shape[0] if len(x.shape) == 2 else offsets.shape[0] - int(include_last_offset)
    return TensorSpec((B, w.shape[1]), w.dtype)


composite(embedding_bag, infer=_bag_infer, args=("input", "weight", "offsets",
                                                 "per_sample_weights"),
          by_name=True, optional=("offsets", "per_sample_weights"),
          samples=lambda dtype=np.float64: [
              Sample((np.array([[1, 2, 4], [4, 3, 9]]), rand((10, 3), dtype), None, None), {}),
              Sample((np.array([[1, 2, 4], [4, 3, 9]]), rand((10, 3), dtype), None, None),
                     {"mode": "sum", "padding_idx": 4}),
              Sample((np.array([1, 2, 4, 5, 4, 3, 2, 9]), rand((10, 3), dtype),
                      np.array([0, 3, 3, 6]), None), {"mode": "max"}),
              Sample((np.array([1, 2, 4, 5, 4, 3, 2, 9]), rand((10, 3), dtype),
                      np.array([0, 4]), rand((8,), dtype, seed=3)), {"mode": "sum"}),
              Sample((np.array([1, 2, 4, 5, 4, 3, 2, 9]), rand((10, 3), dtype),
                      np.array([0, 2, 5, 8]), None), {"include_last_offset": True})],
          error_samples=lambda: [((np.array([[1, 2]]), rand((10, 3)), None, None),
                                  {"mode": "median"}, ValueError)],
          torch=lambda torch, x, w, off, psw, **kw: _torch_bag(torch, x, w, off, psw, **kw))


def _torch_bag(torch, x, w, off, psw, mode="mean", padding_idx=None,
               include_last_offset=False):
    """embedding_bag as a formula of PyTorch's ops (its embedding_bag has no forward
    mode), checked against torch.nn.functional.embedding_bag."""
    def det(v):
        return None if v is None else v.detach()
    ref = torch.nn.functional.embedding_bag(det(x), det(w), det(off), mode=mode,
                                            per_sample_weights=det(psw), padding_idx=padding_idx,
                                            include_last_offset=include_last_offset)
    if x.ndim == 2:
        n = x.shape[1]
        flat = x.reshape(-1)
        off = torch.arange(0, flat.shape[0], n)
        x, include_last_offset = flat, False
        psw = None if psw is None else psw.reshape(-1)
    n = x.shape[0]
    starts = off[:-1] if include_last_offset else off
    ends = off[1:] if include_last_offset else torch.cat([off[1:], torch.tensor([n])])
    pos = torch.arange(n)[None]
    member = (pos >= starts[:, None]) & (pos < ends[:, None])
    if padding_idx is not None:
        member = member & (x != padding_idx)[None]
    emb = w[x]
    if psw is not None:
        emb = emb * psw[:, None]
    if mode == "max":
        out = torch.where(member[:, :, None], emb[None], torch.tensor(float("-inf"),
                                                                      dtype=w.dtype)).amax(1)
        y = torch.where(out == float("-inf"), torch.zeros_like(out), out)
    else:
        y = member.to(emb.dtype) @ emb
        if mode == "mean":
            y = y / member.sum(1).clamp(min=1)[:, None].to(y.dtype)
    assert torch.allclose(y.detach(), ref), (y, ref)
    return y


def _grid_infer(theta, size, align_corners=None):
    size = tuple(size)
    return TensorSpec((size[0],) + size[2:] + (len(size) - 2,), theta.dtype)


composite(affine_grid, infer=_grid_infer, args=("theta",),
          samples=lambda dtype=np.float64: [
              Sample((rand((2, 2, 3), dtype),), {"size": (2, 3, 4, 5), "align_corners": False}),
              Sample((rand((1, 3, 4), dtype),), {"size": (1, 1, 2, 3, 4), "align_corners": True})],
          error_samples=lambda: [((rand((2, 2, 3)),), {"size": (2, 3, 4)}, ValueError)],
          torch=_torch("affine_grid"))
del _fn, _kw
