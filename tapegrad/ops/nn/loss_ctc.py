"""ctc_loss: the Connectionist Temporal Classification loss, a composite: the forward
(alpha) recursion over time in log space, batched over examples, with the ops
(gather, logsumexp, where), so its gradient (and every order, and forward mode) is
the recursion's own.

PyTorch's hand-written backward returns ``exp(log_probs) - posterior``, which equals
the true gradient only after a log_softmax (it is the gradient with respect to the
logits); tapegrad's is the true gradient with respect to ``log_probs``; composed with
log_softmax both give the same (tests/ops/nn/test_conv_nd_grid_sample_ctc.py checks it).
"""
import numpy as np

from ..._util import op_error
from ...tape import state as _state
from ...tensor import Tensor
from .._checks import any_value, host as _host, int_value
from .._decl import Sample, TensorSpec, composite, rand
from ..creation import _constant
from ..elementwise import clamp, where
from ..indexing import gather
from ..reduce import cumsum, logsumexp, mean, sum as _sum
from ..shape import cat, expand, reshape, squeeze, stack, unsqueeze
from ._common import np_dtype

__all__ = ["ctc_loss"]

_NEG = -1e30  # log(0) as a finite number: logsumexp's gradient stays finite


def _as_lengths(v, like, what):
    """``input_lengths`` / ``target_lengths``: an integer tensor, or ints (a tuple, a
    list), as PyTorch takes them."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        if np_dtype(v).kind not in "iu":
            raise op_error("ctc_loss", f"{what} must be integers, got a tensor of "
                                       f"{np_dtype(v)}", RuntimeError)
        return v if hasattr(v, "new_tensor") else like.new_tensor(v)
    vals = v if isinstance(v, (tuple, list)) else [v]
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in vals):
        raise op_error("ctc_loss", f"{what} must be a tensor or a tuple of ints, not "
                                   f"{type(v).__name__} {v!r}"[:200], TypeError)
    return _constant(like.new_tensor(np.asarray(v, dtype=np.int64)))  # (of Python ints)


def _any_bad(lp_shape, targets, il, tl):
    """Whether a value fails ``_check_ctc``'s checks, read with ops."""
    T, N, C = lp_shape
    n = targets.shape[-1]
    pos = _constant(targets.new_tensor(np.arange(n, dtype=np.int64)))
    if any_value(il, lambda v: (v < 0) | (v > T)) or any_value(tl, lambda v: v < 0):
        return True
    if targets.ndim == 1:  # concatenated: the first sum(lengths) are read
        return any_value(tl, lambda v: v.sum() > n) or any_value(
            (targets, tl), lambda t, v: ((t < 0) | (t >= C)) & (pos < v.sum()))
    return any_value(tl, lambda v: v > n) or any_value(
        (targets, tl), lambda t, v: ((t < 0) | (t >= C)) & (pos < unsqueeze(v, 1)))


def _check_ctc(lp_shape, targets, il, tl):
    """The argument checks that read the lengths and labels (small integer tensors;
    inside vmap every example's), PyTorch's errors: lengths within the input and the
    targets, labels in range. Returns the longest target length."""
    name = "ctc_loss"
    T, N, C = lp_shape
    if np_dtype(targets).kind not in "iu":
        raise op_error(name, f"targets must be an integer tensor, got {targets.dtype}",
                       RuntimeError)
    if il.shape[-1:] != (N,) or tl.shape[-1:] != (N,):
        raise op_error(name, f"input_lengths and target_lengths must have one entry per batch "
                             f"element ({N}), got shapes {tuple(il.shape)} and "
                             f"{tuple(tl.shape)}", RuntimeError)
    if _state.observers and all(type(t) is Tensor for t in (targets, il, tl)):
        # (a capture: the checks read through ops, guarded outcomes each replay
        # repeats; the values that fail are then read and named below)
        if not _any_bad(lp_shape, targets, il, tl):
            if targets.ndim == 1 and tl.shape[0]:
                return int_value(tl, lambda v: v.max())
            return 0  # (padded targets: the caller reads S from their shape)
    ils, tls, tv = _host(il), _host(tl), _host(targets).astype(np.int64)
    if ils.size and (ils.min() < 0 or ils.max() > T):
        raise op_error(name, f"Expected input_lengths to have value at most {T} (and at least "
                             f"0), but got {ils.tolist()}", RuntimeError)
    if tls.size and tls.min() < 0:
        raise op_error(name, f"target_lengths must be non-negative, got {tls.tolist()}",
                       RuntimeError)
    longest = int(tls.max()) if tls.size else 0
    if targets.ndim == 1:  # concatenated (or one unbatched target)
        total = tls.sum(-1)
        if total.size and total.max() > targets.shape[0]:
            raise op_error(name, f"the target_lengths {tls.tolist()} sum to more than the "
                                 f"{targets.shape[0]} concatenated targets", RuntimeError)
        read = np.arange(tv.shape[-1]) < total[..., None]
    else:
        if longest > targets.shape[-1]:
            raise op_error(name, f"Expected targets of shape {tuple(targets.shape)} to have "
                                 f"size at least {longest} at dimension 1 (the longest "
                                 f"target)", RuntimeError)
        read = np.arange(tv.shape[-1]) < tls[..., None]  # the padding is not read
    tv, read = np.broadcast_arrays(tv, read)
    labels = tv[read]
    if labels.size and (labels.min() < 0 or labels.max() >= C):
        raise op_error(name, f"target labels must be in [0, {C}), got values from "
                             f"{labels.min()} to {labels.max()}", RuntimeError)
    return longest


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """``-log p(target | log_probs)`` summed over the alignments; ``log_probs`` (T, N, C)
    (or unbatched (T, C)), ``targets`` padded (N, S) or concatenated (sum of
    target_lengths); 'mean' divides each loss by its target length (at least 1), then
    averages; ``zero_infinity`` zeroes the impossible alignments' infinite losses (and
    their gradients)."""
    name = "ctc_loss"
    if reduction not in ("none", "mean", "sum"):
        raise op_error(name, f"{reduction!r} is not a valid value for reduction", ValueError)
    one = log_probs.ndim == 2
    lp = unsqueeze(log_probs, 1) if one else log_probs
    if lp.ndim != 3:
        raise op_error(name, f"log_probs must be (T, N, C) or (T, C), got shape "
                             f"{tuple(log_probs.shape)}", RuntimeError)
    if np_dtype(lp).kind != "f":
        raise op_error(name, f"log_probs must be floating point, got {lp.dtype}", RuntimeError)
    T, N, C = lp.shape
    if not 0 <= blank < C:
        raise op_error(name, f"blank must be in label range, got {blank} for {C} classes",
                       RuntimeError)
    il = reshape(_as_lengths(input_lengths, targets, "input_lengths"), (-1,))
    tl = reshape(_as_lengths(target_lengths, targets, "target_lengths"), (-1,))
    S = _check_ctc((T, N, C), targets, il, tl)
    if targets.ndim == 1:
        # concatenated targets (or one unbatched target): gathered into (N, S) rows,
        # the blank past each length (S, the longest, read from every example inside vmap)
        j = unsqueeze(_constant(tl.new_tensor(np.arange(S, dtype=np.int64))), 0)
        start = unsqueeze(cumsum(tl, 0) - tl, 1)
        idx = clamp(start + j, 0, max(targets.shape[0] - 1, 0))
        rows = gather(expand(unsqueeze(targets, 0), (N, targets.shape[0])), 1, idx) \
            if targets.shape[0] else idx * 0
        tg_ = where(j < unsqueeze(tl, 1), rows, blank)
    else:
        tg_ = targets
        if tg_.shape[0] != N:
            raise op_error(name, f"targets of shape {tuple(targets.shape)} do not fit a batch "
                                 f"of {N}", RuntimeError)
        # the padding past each target's length may hold anything (-1): the blank there
        spos = unsqueeze(_constant(tg_.new_tensor(np.arange(tg_.shape[1], dtype=np.int64))), 0)
        tg_ = where(spos < unsqueeze(tl, 1), tg_, blank)
    S = tg_.shape[1]
    L = 2 * S + 1
    # the extended labels: blank, l1, blank, l2, ..., blank
    blanks = tg_ * 0 + blank
    ext = cat([reshape(stack([blanks, tg_], 2), (N, 2 * S)), blanks[:, :1] if S else
               _constant(tg_.new_tensor(np.full((N, 1), blank, np.int64)))], 1)
    pos = unsqueeze(_constant(ext.new_tensor(np.arange(L, dtype=np.int64))), 0)
    valid_s = pos < unsqueeze(2 * tl + 1, 1)  # positions inside this example's labels
    # the skip from s - 2 is allowed onto a label that differs from the one before
    prev2 = cat([ext[:, :2] * 0 + blank, ext[:, :-2]], 1) if L > 2 else ext * 0 + blank
    skip = (ext != blank) & (ext != prev2) & (pos >= 2)
    # (N, 1): log 0 in the input's dtype, on its device (whatever values it holds)
    neg = _constant(lp.new_tensor(np.full((N, 1), _NEG, dtype=np_dtype(lp))))
    emit = [gather(lp[t], 1, ext) for t in range(T)]  # (N, L) each
    alpha = where((pos < 2) & valid_s, emit[0], neg)
    for t in range(1, T):
        a1 = cat([neg, alpha[:, :-1]], 1)
        a2 = cat([neg, neg, alpha[:, :-2]], 1) if L > 2 else neg + alpha * 0
        a2 = where(skip, a2, neg)
        new = logsumexp(stack([alpha, a1, a2], 0), 0) + emit[t]
        new = where(valid_s, new, neg)
        alpha = where(unsqueeze(il > t, 1), new, alpha)
    last = unsqueeze(2 * tl, 1)
    end = gather(alpha, 1, last)
    before = gather(alpha, 1, where(last > 0, last - 1, last))
    before = where(last > 0, before, neg)
    loss = -squeeze(logsumexp(cat([end, before], 1), 1, keepdim=True), 1)
    inf = loss > 1e29
    loss = where(inf, 0.0 if zero_infinity else float("inf"), loss)
    if reduction == "none":
        return loss[0] if one else loss
    if reduction == "sum":
        return _sum(loss)
    return mean(loss / where(tl > 0, tl, 1).to(loss.dtype))


# ------------------------------------------------------------------ the registry
def _ctc_infer(lp, targets, il, tl, blank=0, reduction="mean", zero_infinity=False):
    name = "ctc_loss"
    if reduction not in ("none", "mean", "sum"):
        raise op_error(name, f"{reduction!r} is not a valid value for reduction", ValueError)
    if len(lp.shape) not in (2, 3):
        raise op_error(name, f"log_probs must be (T, N, C) or (T, C), got shape "
                             f"{tuple(lp.shape)}", RuntimeError)
    C = lp.shape[-1]
    if not 0 <= blank < C:
        raise op_error(name, f"blank must be in label range, got {blank} for {C} classes",
                       RuntimeError)
    N = lp.shape[1] if len(lp.shape) == 3 else 1
    shape = (N,) if reduction == "none" and len(lp.shape) == 3 else ()
    return TensorSpec(shape, lp.dtype)


def _logp(shape, seed):
    x = rand(shape, seed=seed) * 2
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _torch_ctc(torch, lp, targets, il, tl, blank=0, reduction="mean", zero_infinity=False):
    """The same recursion with torch ops (the true gradient with respect to
    ``log_probs``: PyTorch's ctc_loss backward is the logits' gradient, see the module
    docstring), its values checked against torch.nn.functional.ctc_loss's."""
    ref = torch.nn.functional.ctc_loss(lp.detach(), targets, il, tl, blank, reduction,
                                       zero_infinity)
    one = lp.ndim == 2
    if one:
        lp, il, tl = lp[:, None], il.reshape(1), tl.reshape(1)
    T, N, C = lp.shape
    if targets.ndim == 1:  # concatenated: padded with the blank
        S = int(tl.max())
        rows = torch.full((N, S), blank, dtype=torch.long)
        for n, piece in enumerate(torch.split(targets[:int(tl.sum())], tl.tolist())):
            rows[n, :len(piece)] = piece
        targets = rows
    S = targets.shape[1]
    L = 2 * S + 1
    ext = torch.full((N, L), blank, dtype=torch.long)
    ext[:, 1::2] = torch.where(torch.arange(S)[None] < tl[:, None], targets, blank)
    pos = torch.arange(L)[None]
    valid = pos < (2 * tl + 1)[:, None]
    prev2 = torch.cat([torch.full((N, 2), blank), ext[:, :-2]], 1)
    skip = (ext != blank) & (ext != prev2) & (pos >= 2)
    neg = torch.full((N, 1), -1e30, dtype=lp.dtype)
    alpha = torch.where((pos < 2) & valid, lp[0].gather(1, ext), neg)
    for t in range(1, T):
        a1 = torch.cat([neg, alpha[:, :-1]], 1)
        a2 = torch.where(skip, torch.cat([neg, neg, alpha[:, :-2]], 1), neg)
        new = torch.logsumexp(torch.stack([alpha, a1, a2]), 0) + lp[t].gather(1, ext)
        new = torch.where(valid, new, neg)
        alpha = torch.where((il > t)[:, None], new, alpha)
    last = (2 * tl)[:, None]
    before = torch.where(last > 0, alpha.gather(1, (last - 1).clamp(min=0)), neg)
    loss = -torch.logsumexp(torch.cat([alpha.gather(1, last), before], 1), 1)
    loss = torch.where(loss > 1e29, 0.0 if zero_infinity else float("inf"), loss)
    out = {"none": lambda: loss[0] if one else loss, "sum": loss.sum,
           "mean": lambda: (loss / tl.clamp(min=1)).mean()}[reduction]()
    assert torch.allclose(out.detach(), ref), (out, ref)
    return out


def _ctc_samples(dtype=np.float64):
    a = np.array
    return [
        Sample((_logp((6, 2, 4), 0).astype(dtype), a([[1, 2, 2], [3, 1, -1]]), a([6, 5]),
                a([3, 2])), {}),
        Sample((_logp((5, 3, 3), 1).astype(dtype), a([[1, 1], [2, 0], [1, 2]]), a([5, 4, 5]),
                a([2, 1, 2])), {"reduction": "none"}),
        Sample((_logp((4, 2, 3), 2).astype(dtype), a([[2, 1], [1, 1]]), a([4, 4]), a([2, 2])),
               {"reduction": "sum", "blank": 0}),
        # concatenated targets, another blank, an empty target
        Sample((_logp((5, 3, 4), 3).astype(dtype), a([1, 3, 0, 0, 1]), a([5, 3, 4]),
                a([2, 0, 3])), {"blank": 2}),
        # an impossible alignment (3 frames for 1, 1: 4 needed), zeroed
        Sample((_logp((4, 2, 3), 4).astype(dtype), a([[1, 1], [2, 1]]), a([3, 4]), a([2, 2])),
               {"zero_infinity": True, "reduction": "none"}),
        Sample((_logp((4, 2, 3), 4).astype(dtype), a([[1, 1], [2, 1]]), a([3, 4]), a([2, 2])),
               {"zero_infinity": True}),
        # unbatched
        Sample((_logp((5, 3), 5).astype(dtype), a([2, 1]), a(5), a(2)), {"reduction": "none"})]


composite(ctc_loss, infer=_ctc_infer,
          args=("log_probs", "targets", "input_lengths", "target_lengths"),
          samples=_ctc_samples,
          error_samples=lambda: [
              ((_logp((6, 2, 4), 0), np.array([[1, 2], [3, 1]]), np.array([6, 5]),
                np.array([2, 2])), {"blank": 7}, RuntimeError),
              ((_logp((6, 2, 4), 0), np.array([[1, 2], [3, 1]]), np.array([7, 5]),
                np.array([2, 2])), {}, RuntimeError),
              ((_logp((6, 2, 4), 0), np.array([[1, 2], [3, 4]]), np.array([6, 5]),
                np.array([2, 2])), {}, RuntimeError),
              ((_logp((6, 2, 4), 0), np.array([[1, 2], [3, 1]]), np.array([6, 5]),
                np.array([3, 2])), {}, RuntimeError),
              ((_logp((6, 2, 4), 0), np.array([[1, 2], [3, 1]]), np.array([6, 5]),
                np.array([2, 2])), {"reduction": "avg"}, ValueError)],
          torch=_torch_ctc)
