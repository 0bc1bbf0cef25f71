"""Distances and rearrangements of ``nn.functional``, composites: cosine_similarity,
pairwise_distance, pdist, normalize; pixel_shuffle, pixel_unshuffle, channel_shuffle.

The functions compute with the registry's functions and tensor methods both
libraries share, so the PyTorch export runs them on torch.Tensors too.
"""
import numpy as np

from ..._util import broadcast_shapes, normalize_dim, op_error
from .._decl import Sample, TensorSpec, composite, rand
from ..elementwise import clamp_min
from ..reduce import norm, sum as _sum
from ..shape import broadcast_to, permute, reshape
from ._common import same_infer as _same_infer

__all__ = ["cosine_similarity", "pairwise_distance", "pdist", "normalize", "pixel_shuffle",
           "pixel_unshuffle", "channel_shuffle"]


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps))`` along ``dim`` (PyTorch's formula:
    each vector normalised by its norm clamped at ``eps``), after broadcasting."""
    f1, f2 = x1.is_floating_point(), x2.is_floating_point()
    if not (f1 or f2):  # PyTorch: the common dtype must be floating point
        raise op_error("cosine_similarity", f"expected common dtype to be floating point, "
                                            f"got {x1.dtype} and {x2.dtype}", RuntimeError)
    if not f1:
        x1 = x1.to(x2.dtype)
    if not f2:
        x2 = x2.to(x1.dtype)
    shape = broadcast_shapes("cosine_similarity", tuple(x1.shape), tuple(x2.shape))
    d = normalize_dim("cosine_similarity", dim, len(shape))
    if tuple(x1.shape) != shape:
        x1 = broadcast_to(x1, shape)
    if tuple(x2.shape) != shape:
        x2 = broadcast_to(x2, shape)
    n1 = clamp_min(norm(x1, 2, d, True), eps)
    n2 = clamp_min(norm(x2, 2, d, True), eps)
    return _sum((x1 / n1) * (x2 / n2), d)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim (PyTorch's formula)."""
    shape = broadcast_shapes("pairwise_distance", tuple(x1.shape), tuple(x2.shape))
    if not shape:
        raise op_error("pairwise_distance", "expects inputs of at least 1 dimension",
                       RuntimeError)
    return norm(x1 - x2 + eps, p, len(shape) - 1, keepdim)


def pdist(input, p=2):
    """The ``p``-norm distances between the rows of an ``(N, M)`` input, for each pair
    ``i < j`` in row-major order: ``N (N - 1) / 2`` values."""
    if input.ndim != 2:
        raise op_error("pdist", f"only supports 2D tensors, got: {input.ndim}D", RuntimeError)
    if p < 0:
        raise op_error("pdist", "only supports non-negative p values", RuntimeError)
    n = input.shape[0]
    i, j = np.triu_indices(n, 1)
    return norm(input[i.astype(np.int64)] - input[j.astype(np.int64)], p, 1)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim``."""
    if out is not None:
        raise op_error("normalize", "out= is not supported", TypeError)
    d = normalize_dim("normalize", dim, max(input.ndim, 1))
    return input / clamp_min(norm(input, p, d, True), eps)


def _check_factor(name, r):
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or r <= 0:
        raise op_error(name, f"the factor must be a positive int, got {r!r}", RuntimeError)


def pixel_shuffle(input, upscale_factor):
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``."""
    r = upscale_factor
    _check_factor("pixel_shuffle", r)
    s = tuple(input.shape)
    if len(s) < 3 or s[-3] % (r * r):
        raise op_error("pixel_shuffle", f"expects its input's 'channel' dimension to be "
                                        f"divisible by the square of upscale_factor, but "
                                        f"input.size(-3)={s[-3] if len(s) >= 3 else None} is "
                                        f"not divisible by {r * r}", RuntimeError)
    b, (c, h, w) = s[:-3], s[-3:]
    n = len(b)
    x = reshape(input, b + (c // (r * r), r, r, h, w))
    x = permute(x, tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return reshape(x, b + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor):
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``."""
    r = downscale_factor
    _check_factor("pixel_unshuffle", r)
    s = tuple(input.shape)
    if len(s) < 3 or s[-2] % r or s[-1] % r:
        raise op_error("pixel_unshuffle", f"expects height and width divisible by "
                                          f"downscale_factor {r}, got shape {s}", RuntimeError)
    b, (c, h, w) = s[:-3], s[-3:]
    n = len(b)
    x = reshape(input, b + (c, h // r, r, w // r, r))
    x = permute(x, tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return reshape(x, b + (c * r * r, h // r, w // r))


def channel_shuffle(input, groups):
    """``(N, C, *)``: the channels in ``groups`` groups, interleaved."""
    s = tuple(input.shape)
    if not isinstance(groups, (int, np.integer)) or groups <= 0:
        raise op_error("channel_shuffle", f"Number of groups to divide channels in must be "
                                          f"positive. Value of groups:{groups}", RuntimeError)
    if len(s) < 3 or s[1] % groups:
        raise op_error("channel_shuffle", f"expects a (N, C, *) input with C divisible by "
                                          f"groups {groups}, got shape {s}", RuntimeError)
    x = reshape(input, (s[0], groups, s[1] // groups) + s[2:])
    x = permute(x, (0, 2, 1) + tuple(range(3, len(s) + 1)))
    return reshape(x, s)


# ------------------------------------------------------------------ the registry
def _reduced_infer(name, keep=False):
    def infer(x1, x2, dim=1, *a, keepdim=False, **k):
        shape = broadcast_shapes(name, tuple(x1.shape), tuple(x2.shape))
        if name == "pairwise_distance":
            d = len(shape) - 1
            keepdim = a[2] if len(a) > 2 else keepdim
        else:
            d = normalize_dim(name, dim, len(shape))
        out = shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]
        return TensorSpec(out, np.result_type(np.dtype(x1.dtype), np.dtype(x2.dtype)))
    return infer


def _pair_samples(dtype=np.float64):
    return [Sample((rand((4, 5), dtype), rand((4, 5), dtype, seed=1)), {}),
            Sample((rand((2, 3, 4), dtype), rand((3, 4), dtype, seed=2)), {"dim": -1})]


composite(cosine_similarity, autocast={"cuda": "fp32"}, infer=_reduced_infer("cosine_similarity"),
          args=("x1", "x2"),
          samples=_pair_samples,
          error_samples=lambda: [((rand((3, 4)), rand((5,))), {}, ValueError)],
          torch=lambda torch, a, b, **kw: torch.nn.functional.cosine_similarity(a, b, **kw))
composite(pairwise_distance, infer=_reduced_infer("pairwise_distance"), args=("x1", "x2"),
          samples=lambda dtype=np.float64: [
              Sample((rand((4, 5), dtype), rand((4, 5), dtype, seed=1)), {}),
              Sample((rand((3, 4), dtype), rand((4,), dtype, seed=2)),
                     {"p": 1.5, "keepdim": True})],
          error_samples=lambda: [((rand((3, 4)), rand((5,))), {}, ValueError)],
          torch=lambda torch, a, b, **kw: torch.nn.functional.pairwise_distance(a, b, **kw))


def _pdist_infer(x, p=2):
    if len(x.shape) != 2:
        raise op_error("pdist", f"only supports 2D tensors, got: {len(x.shape)}D", RuntimeError)
    n = x.shape[0]
    return TensorSpec((n * (n - 1) // 2,), x.dtype)


composite(pdist, autocast={"cuda": "fp32"}, infer=_pdist_infer,
          samples=lambda dtype=np.float64: [Sample((rand((4, 3), dtype),), {}),
                                            Sample((rand((3, 2), dtype, seed=1),), {"p": 1.5})],
          error_samples=lambda: [((rand((2, 3, 4)),), {}, RuntimeError)],
          torch=lambda torch, x, p=2: _torch_pdist(torch, x, p))


def _torch_pdist(torch, x, p=2):
    """PyTorch's pdist as a formula (its _pdist_backward has no forward mode), checked
    against torch.nn.functional.pdist."""
    i, j = np.triu_indices(x.shape[0], 1)
    y = torch.linalg.vector_norm(x[i] - x[j], p, dim=1)
    assert torch.allclose(y.detach(), torch.nn.functional.pdist(x.detach(), p))
    return y


composite(normalize, infer=_same_infer,
          samples=lambda dtype=np.float64: [Sample((rand((3, 4), dtype),), {}),
                                            Sample((rand((2, 3, 4), dtype),),
                                                   {"p": 1.0, "dim": -1})],
          error_samples=lambda: [((rand((3, 4)),), {"dim": 3}, IndexError)],
          torch=lambda torch, x, **kw: torch.nn.functional.normalize(x, **kw))


def _shuffle_infer(x, upscale_factor):
    r = upscale_factor
    s = tuple(x.shape)
    if len(s) < 3 or s[-3] % (r * r):
        raise op_error("pixel_shuffle", f"channel dim of {s} not divisible by {r * r}",
                       RuntimeError)
    return TensorSpec(s[:-3] + (s[-3] // (r * r), s[-2] * r, s[-1] * r), x.dtype)


def _unshuffle_infer(x, downscale_factor):
    r = downscale_factor
    s = tuple(x.shape)
    if len(s) < 3 or s[-2] % r or s[-1] % r:
        raise op_error("pixel_unshuffle", f"H, W of {s} not divisible by {r}", RuntimeError)
    return TensorSpec(s[:-3] + (s[-3] * r * r, s[-2] // r, s[-1] // r), x.dtype)


composite(pixel_shuffle, infer=_shuffle_infer,
          samples=lambda dtype=np.float64: [Sample((rand((1, 8, 2, 3), dtype),),
                                                   {"upscale_factor": 2}),
                                            Sample((rand((9, 1, 2), dtype),),
                                                   {"upscale_factor": 3})],
          error_samples=lambda: [((rand((1, 6, 2, 2)),), {"upscale_factor": 2}, RuntimeError)],
          torch=lambda torch, x, upscale_factor: torch.nn.functional.pixel_shuffle(
              x, upscale_factor))
composite(pixel_unshuffle, infer=_unshuffle_infer,
          samples=lambda dtype=np.float64: [Sample((rand((1, 2, 4, 6), dtype),),
                                                   {"downscale_factor": 2})],
          error_samples=lambda: [((rand((1, 2, 4, 5)),), {"downscale_factor": 2}, RuntimeError)],
          torch=lambda torch, x, downscale_factor: torch.nn.functional.pixel_unshuffle(
              x, downscale_factor))
composite(channel_shuffle, infer=_same_infer,
          samples=lambda dtype=np.float64: [Sample((rand((2, 6, 2, 2), dtype),), {"groups": 3}),
                                            Sample((rand((1, 4, 3), dtype),), {"groups": 2})],
          error_samples=lambda: [((rand((1, 5, 2, 2)),), {"groups": 2}, RuntimeError)],
          torch=lambda torch, x, groups: torch.nn.functional.channel_shuffle(x, groups))
