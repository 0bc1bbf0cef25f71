"""More of ``nn.functional``'s losses, composites with PyTorch's formulas:
cosine_embedding_loss, gaussian_nll_loss, hinge_embedding_loss, kl_div,
margin_ranking_loss, multi_margin_loss, multilabel_margin_loss,
multilabel_soft_margin_loss, poisson_nll_loss, soft_margin_loss, triplet_margin_loss,
triplet_margin_with_distance_loss, linear_cross_entropy.

Targets are read with ops (never as data), so the functions run under vmap, replay
compiled and run on torch.Tensors through the export.
"""
import math

import numpy as np

from ..._util import op_error, broadcast_shapes
from ..elementwise import clamp, clamp_min, exp, log, log1p, sqrt, where, minimum
from ..reduce import sum as _sum, mean as _mean
from ..shape import unsqueeze
from ..indexing import gather
from ..activations import logsigmoid
from .affine import linear
from .loss import _reduce, cross_entropy
from .distance import pairwise_distance
from ._common import whole
from .._decl import composite, Sample, TensorSpec, rand

__all__ = ["cosine_embedding_loss", "gaussian_nll_loss", "hinge_embedding_loss", "kl_div",
           "margin_ranking_loss", "multi_margin_loss", "multilabel_margin_loss",
           "multilabel_soft_margin_loss", "poisson_nll_loss", "soft_margin_loss",
           "triplet_margin_loss", "triplet_margin_with_distance_loss", "linear_cross_entropy"]


def _reduction(name, size_average, reduce, reduction):
    """PyTorch's legacy ``size_average``/``reduce`` flags folded into ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return ("mean" if size_average else "sum") if reduce else "none"


def _check_reduction(name, reduction, extra=()):
    if reduction not in ("none", "mean", "sum") + tuple(extra):
        raise op_error(name, f"{reduction!r} is not a valid value for reduction", ValueError)


def _need_floating(name, **tensors):
    """PyTorch's refusal of an integer or bool tensor argument (torch.Tensors too)."""
    for arg, t in tensors.items():
        if hasattr(t, "is_floating_point") and not t.is_floating_point():
            raise op_error(name, f"expected a floating point {arg}, got {t.dtype}", RuntimeError)


def _is_bool(t):
    return "bool" in str(getattr(t, "dtype", ""))


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where
    ``target == -1`` (cosine over the last dim, PyTorch's EPSILON 1e-12)."""
    reduction = _reduction("cosine_embedding_loss", size_average, reduce, reduction)
    _check_reduction("cosine_embedding_loss", reduction)
    if input1.ndim not in (1, 2) or tuple(input1.shape) != tuple(input2.shape):
        raise op_error("cosine_embedding_loss", f"expects 1-D or 2-D inputs of one shape, got "
                                                f"{tuple(input1.shape)} and "
                                                f"{tuple(input2.shape)}", RuntimeError)
    if target.ndim != input1.ndim - 1:
        raise op_error("cosine_embedding_loss", f"expected a target of {input1.ndim - 1} dims "
                                                f"for inputs of shape {tuple(input1.shape)}, "
                                                f"got {target.ndim}", RuntimeError)
    d = input1.ndim - 1
    eps = 1e-12
    prod = _sum(input1 * input2, d)
    m1 = _sum(input1 * input1, d) + eps
    m2 = _sum(input2 * input2, d) + eps
    cos = prod / sqrt(m1 * m2)
    pos = where(target == 1, 1 - cos, 0.0)
    neg = where(target == -1, clamp_min(cos - margin, 0.0), 0.0)
    return _reduce("cosine_embedding_loss", pos + neg, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``0.5 (log(max(var, eps)) + (input - target)^2 / max(var, eps))`` (+ ``0.5
    log(2 pi)`` when ``full``); ``var`` of input's shape, or one fewer dim, or a last
    dim of 1 (one variance per example), or a number."""
    _check_reduction("gaussian_nll_loss", reduction)
    if not hasattr(var, "shape"):
        if var < 0:
            raise op_error("gaussian_nll_loss", f"var has a negative entry: {var}", ValueError)
        var = input * 0 + float(var)
    if _is_bool(var):
        raise op_error("gaussian_nll_loss", f"expected a numeric var, got {var.dtype}",
                       RuntimeError)
    if bool((whole(var) < 0).any()):
        raise op_error("gaussian_nll_loss", "var has negative entry/entries", ValueError)
    vs, xs = tuple(var.shape), tuple(input.shape)
    if vs != xs:
        if xs[:-1] == vs:
            var = unsqueeze(var, -1)
        elif not (xs[:-1] == vs[:-1] and vs[-1:] == (1,)):
            raise op_error("gaussian_nll_loss", f"var of shape {vs} does not fit input of "
                                                f"shape {xs}", ValueError)
    var = clamp_min(var, float(eps))
    loss = 0.5 * (log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce("gaussian_nll_loss", loss, reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """``x`` where ``target != -1`` plus ``max(0, margin - x)`` where ``target != 1``."""
    reduction = _reduction("hinge_embedding_loss", size_average, reduce, reduction)
    _check_reduction("hinge_embedding_loss", reduction)
    _need_floating("hinge_embedding_loss", input=input)
    broadcast_shapes("hinge_embedding_loss", tuple(input.shape), tuple(target.shape))
    out = where(target != 1, clamp_min(margin - input, 0.0), 0.0) + \
        where(target != -1, input, 0.0)
    return _reduce("hinge_embedding_loss", out, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``target (log target - input)`` pointwise (``input`` log-probabilities; ``target``
    probabilities, or log-probabilities with ``log_target``); ``reduction='batchmean'``
    divides the sum by the batch size."""
    reduction = _reduction("kl_div", size_average, reduce, reduction)
    _check_reduction("kl_div", reduction, ("batchmean",))
    _need_floating("kl_div", input=input, target=target)
    broadcast_shapes("kl_div", tuple(input.shape), tuple(target.shape))
    if log_target:
        loss = exp(target) * (target - input)
    else:
        pos = target > 0
        loss = where(pos, target * log(where(pos, target, 1.0)), 0.0) - target * input
    if reduction == "batchmean":
        total = _sum(loss)
        return total / input.shape[0] if input.ndim else total
    return _reduce("kl_div", loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """``max(0, -target (x1 - x2) + margin)``."""
    reduction = _reduction("margin_ranking_loss", size_average, reduce, reduction)
    _check_reduction("margin_ranking_loss", reduction)
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise op_error("margin_ranking_loss", f"All input tensors should have same dimension "
                                              f"but got sizes: input1: {tuple(input1.shape)}, "
                                              f"input2: {tuple(input2.shape)}, target: "
                                              f"{tuple(target.shape)}", RuntimeError)
    return _reduce("margin_ranking_loss",
                   clamp_min(-target * (input1 - input2) + margin, 0.0), reduction)


def _class_target(name, input, target):
    """``input`` as (N, C) and ``target`` as (N,) (a 1-D input is one example)."""
    if input.ndim not in (1, 2):
        raise op_error(name, f"expected a 1-D or 2-D input, got shape {tuple(input.shape)}",
                       RuntimeError)
    one = input.ndim == 1
    want = () if one else (input.shape[0],)
    if tuple(target.shape) != want and not (one and tuple(target.shape) == (1,)):
        raise op_error(name, f"inconsistent target size: {tuple(target.shape)} for input of "
                             f"shape {tuple(input.shape)}", RuntimeError)
    if one:
        return unsqueeze(input, 0), target.reshape((1,)), True
    return input, target, False


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """``sum_{j != y} max(0, margin - x[y] + x[j])^p / C`` per example (times
    ``weight[y]``)."""
    reduction = _reduction("multi_margin_loss", size_average, reduce, reduction)
    _check_reduction("multi_margin_loss", reduction)
    if p not in (1, 2):
        raise op_error("multi_margin_loss", "only p == 1 and p == 2 supported", ValueError)
    _need_floating("multi_margin_loss", input=input)
    x, t, one = _class_target("multi_margin_loss", input, target)
    C = x.shape[1]
    ti = unsqueeze(t, 1)
    xy = gather(x, 1, ti)
    z = margin - xy + x
    z = where(z > 0, z, 0.0)  # PyTorch's kernel adds a term only where it is > 0 (not NaN)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * unsqueeze(weight[t], 1)
    classes = unsqueeze(_arange_like(C, t), 0)
    z = where(classes == ti, 0.0, z)
    loss = _sum(z, 1) / C
    if one:
        loss = loss.reshape(())
    return _reduce("multi_margin_loss", loss, reduction)


def _arange_like(n, t):
    """``arange(n)`` as a constant of ``t``'s framework (tapegrad or torch)."""
    idx = t.new_tensor(np.arange(n)) if hasattr(t, "new_tensor") else np.arange(n)
    return idx


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """For each example, the targets are ``target``'s classes up to the first -1; the
    loss sums ``max(0, 1 - (x[j] - x[k]))`` over targets ``j`` and non-targets ``k``,
    divided by C."""
    reduction = _reduction("multilabel_margin_loss", size_average, reduce, reduction)
    _check_reduction("multilabel_margin_loss", reduction)
    _need_floating("multilabel_margin_loss", input=input)
    if input.ndim not in (1, 2) or tuple(target.shape) != tuple(input.shape):
        raise op_error("multilabel_margin_loss", f"inconsistent target size: "
                                                 f"{tuple(target.shape)} for input of size: "
                                                 f"{tuple(input.shape)}", RuntimeError)
    one = input.ndim == 1
    x = unsqueeze(input, 0) if one else input
    t = unsqueeze(target, 0) if one else target
    C = x.shape[1]
    # slots before the first -1 are targets
    valid = (t >= 0).cumprod(1) > 0
    ts = where(valid, t, 0)
    xj = gather(x, 1, ts)  # (N, slots)
    classes = _arange_like(C, t)
    is_target = ((unsqueeze(ts, 2) == classes) & unsqueeze(valid, 2)).any(1)  # (N, C)
    z = 1 - unsqueeze(xj, 2) + unsqueeze(x, 1)  # (N, slots, C)
    z = where(z > 0, z, 0.0)  # PyTorch's kernel adds a term only where it is > 0 (not NaN)
    keep = unsqueeze(valid, 2) & ~unsqueeze(is_target, 1)
    loss = _sum(_sum(where(keep, z, 0.0), 2), 1) / C
    if one:
        loss = loss.reshape(())
    return _reduce("multilabel_margin_loss", loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """``-mean_c(t log sigmoid(x) + (1 - t) log sigmoid(-x))`` (times ``weight``)."""
    reduction = _reduction("multilabel_soft_margin_loss", size_average, reduce, reduction)
    _check_reduction("multilabel_soft_margin_loss", reduction)
    broadcast_shapes("multilabel_soft_margin_loss", tuple(input.shape), tuple(target.shape))
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    d = input.ndim - 1
    loss = _sum(loss, d) / input.shape[d]
    return _reduce("multilabel_soft_margin_loss", loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """``exp(x) - t x`` (``log_input``) or ``x - t log(x + eps)``; ``full`` adds
    Stirling's term ``t log t - t + log(2 pi t) / 2`` where ``t > 1``."""
    reduction = _reduction("poisson_nll_loss", size_average, reduce, reduction)
    _check_reduction("poisson_nll_loss", reduction)
    broadcast_shapes("poisson_nll_loss", tuple(input.shape), tuple(target.shape))
    if log_input:
        loss = exp(input) - target * input
    else:
        loss = input - target * log(input + eps)
    if full:
        big = target > 1
        ts = where(big, target, 2.0)
        stirling = ts * log(ts) - ts + 0.5 * log(2 * math.pi * ts)
        loss = loss + where(big, stirling, 0.0)
    return _reduce("poisson_nll_loss", loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target x))``."""
    reduction = _reduction("soft_margin_loss", size_average, reduce, reduction)
    _check_reduction("soft_margin_loss", reduction)
    _need_floating("soft_margin_loss", input=input)
    if _is_bool(target):
        target = target.to(input.dtype)
    broadcast_shapes("soft_margin_loss", tuple(input.shape), tuple(target.shape))
    return _reduce("soft_margin_loss", log1p(exp(-target * input)), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """``max(0, d(a, p) - d(a, n) + margin)``, ``d`` the pairwise ``p``-distance;
    ``swap``: ``d(a, n)`` replaced by ``min(d(a, n), d(p, n))``."""
    reduction = _reduction("triplet_margin_loss", size_average, reduce, reduction)
    _check_reduction("triplet_margin_loss", reduction)
    if margin <= 0:
        raise op_error("triplet_margin_loss", f"margin must be greater than 0, got {margin}",
                       ValueError)
    if not (anchor.ndim == positive.ndim == negative.ndim):
        raise op_error("triplet_margin_loss", f"The anchor, positive, and negative tensors are "
                                              f"expected to have the same number of "
                                              f"dimensions, but got: anchor {anchor.ndim}D, "
                                              f"positive {positive.ndim}D, and negative "
                                              f"{negative.ndim}D inputs", RuntimeError)
    d_ap = pairwise_distance(anchor, positive, p, eps)
    d_an = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = minimum(d_an, pairwise_distance(positive, negative, p, eps))
    return _reduce("triplet_margin_loss", clamp_min(margin + d_ap - d_an, 0.0), reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """``max(0, d(a, p) - d(a, n) + margin)`` for a given distance function (default
    ``pairwise_distance``)."""
    _check_reduction("triplet_margin_with_distance_loss", reduction)
    if margin <= 0:
        raise op_error("triplet_margin_with_distance_loss", f"margin must be greater than 0, "
                                                            f"got {margin}", ValueError)
    if not (anchor.ndim == positive.ndim == negative.ndim):
        raise op_error("triplet_margin_with_distance_loss", "The anchor, positive, and negative "
                       "tensors are expected to have the same number of dimensions",
                       RuntimeError)
    d = distance_function if distance_function is not None else pairwise_distance
    d_ap, d_an = d(anchor, positive), d(anchor, negative)
    if swap:
        d_an = minimum(d_an, d(positive, negative))
    return _reduce("triplet_margin_with_distance_loss", clamp_min(margin + d_ap - d_an, 0.0),
                   reduction)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, weight=None,
                         reduction="mean", ignore_index=None, label_smoothing=0.0, options=None):
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``."""
    logits = linear(input, linear_weight, linear_bias)
    return cross_entropy(logits, target, weight=weight, reduction=reduction,
                         ignore_index=-100 if ignore_index is None else ignore_index,
                         label_smoothing=label_smoothing)


# ------------------------------------------------------------------ the registry
def _reduced(shape, reduction):
    return shape if reduction == "none" else ()


def _loss_infer(*specs, reduction="mean", **kw):
    xs = tuple(specs[0].shape)
    return TensorSpec(_reduced(xs, reduction), specs[0].dtype)


def _sign(shape, seed):
    """Targets -1 / 1 (int64: a float target would be perturbed by finite differences
    across the loss's ``target == 1`` switch)."""
    return np.where(rand(shape, seed=seed) < 0, -1, 1).astype(np.int64)


def _fsign(shape, seed):
    """Float targets -1 / 1 (for losses smooth in the target)."""
    return _sign(shape, seed).astype(np.float64)


def _torch(name):
    def oracle(torch, *a, **kw):
        return getattr(torch.nn.functional, name)(*a, **kw)
    return oracle


def _decl(fn, samples, errors, infer=_loss_infer, args=("input", "target"), torch=None):
    composite(fn, infer=infer, samples=samples, torch=torch or _torch(fn.__name__),
              error_samples=errors, args=args)


def _cast(dtype, *arrays):
    return tuple(a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays)


def _cos_infer(x1, x2, t, reduction="mean", **kw):
    return TensorSpec(_reduced(tuple(x1.shape[:-1]), reduction), x1.dtype)


_decl(cosine_embedding_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((4, 5)), rand((4, 5), seed=1), _sign((4,), 2)), {}),
          Sample(_cast(dtype, rand((4, 5), seed=3), rand((4, 5), seed=4), _sign((4,), 5)),
                 {"margin": -0.5, "reduction": "none"})],
      lambda: [((rand((4, 5)), rand((4, 6)), _sign((4,), 1)), {}, RuntimeError)],
      infer=_cos_infer, args=("input1", "input2", "target"))


def _gauss_infer(x, t, var, full=False, eps=1e-6, reduction="mean"):
    return TensorSpec(_reduced(tuple(x.shape), reduction), x.dtype)


_decl(gaussian_nll_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=1), rand((3, 4), seed=2, low=0.2)),
                 {}),
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=1), rand((3,), seed=2, low=0.2)),
                 {"full": True, "reduction": "sum"})],
      lambda: [((rand((3, 4)), rand((3, 4)), rand((2,), low=0.2)), {}, ValueError)],
      infer=_gauss_infer, args=("input", "target", "var"))
_decl(hinge_embedding_loss,
      lambda dtype=np.float64: [Sample(_cast(dtype, rand((3, 4)), _sign((3, 4), 1)), {}),
                                Sample(_cast(dtype, rand((5,)), _sign((5,), 2)),
                                       {"margin": 0.5, "reduction": "none"})],
      lambda: [((rand((3, 4)), _sign((3, 4), 1)), {"reduction": "bad"}, ValueError)])


def _kl_infer(x, t, reduction="mean", log_target=False, **kw):
    return TensorSpec(_reduced(tuple(x.shape), reduction), x.dtype)


def _logp(shape, seed):
    x = rand(shape, seed=seed) * 2
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


_decl(kl_div,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, _logp((3, 4), 0), np.exp(_logp((3, 4), 1))),
                 {"reduction": "batchmean"}),
          Sample(_cast(dtype, _logp((3, 4), 2), _logp((3, 4), 3)),
                 {"reduction": "sum", "log_target": True})],
      lambda: [((rand((3, 4)), rand((3, 4))), {"reduction": "avg"}, ValueError)],
      infer=_kl_infer)
_decl(margin_ranking_loss,
      lambda dtype=np.float64: [Sample(_cast(dtype, rand((5,)), rand((5,), seed=1),
                                             _fsign((5,), 2)), {"margin": 0.1})],
      lambda: [((rand((5,)), rand((5, 1)), _fsign((5,), 2)), {}, RuntimeError)],
      args=("input1", "input2", "target"))


def _class_infer(x, t, *a, reduction="mean", **kw):
    return TensorSpec(_reduced(tuple(x.shape[:1]) if len(x.shape) == 2 else (), reduction),
                      x.dtype)


def _ints(high, shape, seed=0):
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


def _checked(formula, name):
    """An oracle computing PyTorch's formula with torch ops (PyTorch's own function has
    no forward-mode derivative), checked against that function's values."""
    def oracle(torch, *a, **kw):
        y = formula(torch, *a, **kw)
        ref = getattr(torch.nn.functional, name)(
            *[v.detach() if isinstance(v, torch.Tensor) else v for v in a], **kw)
        assert torch.allclose(y.detach(), ref, rtol=1e-5, atol=1e-6), (y, ref)
        return y
    return oracle


def _red(loss, reduction):
    return {"mean": loss.mean, "sum": loss.sum}.get(reduction, lambda: loss)()


def _torch_multi_margin(torch, x, t, p=1, margin=1.0, weight=None, reduction="mean"):
    one = x.ndim == 1
    x2, t2 = (x[None], t.reshape(1)) if one else (x, t)
    xy = x2.gather(1, t2[:, None])
    z = torch.clamp(margin - xy + x2, min=0)
    z = z * z if p == 2 else z
    if weight is not None:
        z = z * weight[t2][:, None]
    z = torch.where(torch.arange(x2.shape[1])[None] == t2[:, None], torch.zeros_like(z), z)
    loss = z.sum(1) / x2.shape[1]
    return _red(loss.reshape(()) if one else loss, reduction)


def _torch_multilabel_margin(torch, x, t, reduction="mean"):
    one = x.ndim == 1
    x2, t2 = (x[None], t[None]) if one else (x, t)
    valid = (t2 >= 0).long().cumprod(1) > 0
    ts = torch.where(valid, t2, torch.zeros_like(t2))
    xj = x2.gather(1, ts)
    is_t = ((ts[:, :, None] == torch.arange(x2.shape[1])) & valid[:, :, None]).any(1)
    z = torch.clamp(1 - xj[:, :, None] + x2[:, None, :], min=0)
    keep = valid[:, :, None] & ~is_t[:, None, :]
    loss = torch.where(keep, z, torch.zeros_like(z)).sum((1, 2)) / x2.shape[1]
    return _red(loss.reshape(()) if one else loss, reduction)


_decl(multi_margin_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((3, 5)), _ints(5, (3,))), {}),
          Sample(_cast(dtype, rand((3, 5), seed=1), _ints(5, (3,), 1)),
                 {"p": 2, "margin": 0.5, "reduction": "none"}),
          Sample(_cast(dtype, rand((4,), seed=2), np.array(2)), {})],
      lambda: [((rand((3, 5)), _ints(5, (4,))), {}, RuntimeError),
               ((rand((3, 5)), _ints(5, (3,))), {"p": 3}, ValueError)],
      infer=_class_infer, torch=_checked(_torch_multi_margin, "multi_margin_loss"))
_decl(multilabel_margin_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((2, 4)), np.array([[3, 0, -1, 1], [1, 2, 3, -1]])), {}),
          Sample(_cast(dtype, rand((4,), seed=1), np.array([2, -1, 0, 0])),
                 {"reduction": "none"})],
      lambda: [((rand((2, 4)), np.array([[3, 0, -1, 1]])), {}, RuntimeError)],
      infer=_class_infer, torch=_checked(_torch_multilabel_margin, "multilabel_margin_loss"))


def _class_dim_infer(x, t, *a, reduction="mean", **kw):
    return TensorSpec(_reduced(tuple(x.shape[:-1]), reduction), x.dtype)


_decl(multilabel_soft_margin_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((3, 4)), (rand((3, 4), seed=1) > 0).astype(np.float64)), {}),
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=2, low=0, high=1)),
                 {"reduction": "none"})],
      lambda: [((rand((3, 4)), rand((3, 5))), {}, ValueError)],
      infer=_class_dim_infer)
_decl(poisson_nll_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=1, low=0, high=3)), {}),
          Sample(_cast(dtype, rand((3, 4), low=0.2, high=2), rand((3, 4), seed=1, low=0, high=3)),
                 {"log_input": False, "full": True, "reduction": "none"})],
      lambda: [((rand((3, 4)), rand((2, 4))), {}, ValueError)])
def _torch_soft_margin(torch, x, t, reduction="mean"):
    """PyTorch's formula (its soft_margin_loss does not differentiate in target)."""
    loss = torch.log1p(torch.exp(-t * x))
    return {"mean": loss.mean, "sum": loss.sum}.get(reduction, lambda: loss)()


_decl(soft_margin_loss,
      lambda dtype=np.float64: [Sample(_cast(dtype, rand((3, 4)), _fsign((3, 4), 1)), {})],
      lambda: [((rand((3, 4)), rand((2, 4))), {}, ValueError)], torch=_torch_soft_margin)


def _triplet_infer(a, p, n, *args, reduction="mean", **kw):
    return TensorSpec(_reduced(tuple(a.shape[:-1]), reduction), a.dtype)


def _triplet_samples(swap_key=True):
    def samples(dtype=np.float64):
        a, p, n = rand((4, 5)), rand((4, 5), seed=1), rand((4, 5), seed=2)
        return [Sample(_cast(dtype, a, p, n), {}),
                Sample(_cast(dtype, a, p, n), {"swap": True, "margin": 0.5,
                                               "reduction": "none"})]
    return samples


_decl(triplet_margin_loss, _triplet_samples(),
      lambda: [((rand((4, 5)), rand((4, 5)), rand((4,))), {}, RuntimeError)],
      infer=_triplet_infer, args=("anchor", "positive", "negative"))
_decl(triplet_margin_with_distance_loss, _triplet_samples(),
      lambda: [((rand((4, 5)), rand((4, 5)), rand((4, 5))), {"margin": 0.0}, ValueError)],
      infer=_triplet_infer, args=("anchor", "positive", "negative"))


def _lce_infer(x, w, t, reduction="mean", **kw):
    return TensorSpec(_reduced(tuple(x.shape[:-1]), reduction), x.dtype)


composite(linear_cross_entropy, infer=_lce_infer, args=("input", "linear_weight", "target"),
          samples=lambda dtype=np.float64: [
              Sample(_cast(dtype, rand((3, 4)), rand((5, 4), seed=1), _ints(5, (3,))), {}),
              Sample(_cast(dtype, rand((3, 4)), rand((5, 4), seed=1), _ints(5, (3,))),
                     {"reduction": "sum", "label_smoothing": 0.1})],
          error_samples=lambda: [((rand((3, 4)), rand((5, 3)), _ints(5, (3,))), {},
                                  RuntimeError)],
          torch=_torch("linear_cross_entropy"))

del _mean, clamp
