"""Losses, all composites: cross_entropy, nll_loss, mse_loss, l1_loss,
binary_cross_entropy, binary_cross_entropy_with_logits; and with PyTorch's formulas
cosine_embedding_loss, gaussian_nll_loss, hinge_embedding_loss, kl_div,
margin_ranking_loss, multi_margin_loss, multilabel_margin_loss,
multilabel_soft_margin_loss, poisson_nll_loss, soft_margin_loss, triplet_margin_loss,
triplet_margin_with_distance_loss, linear_cross_entropy.

Class-index losses turn the targets into a constant coefficient array M (one-hot
times class weight, label smoothing folded in), and the loss is
-sum(log_probs * M) / denominator; so every order differentiates through mul/sum.
The margin and embedding losses read their targets with ops (never as data), so they
run under vmap, replay compiled and run on torch.Tensors through the export.
"""
import math

import numpy as np

from ..._util import NoKernelError, broadcast_shapes, dtype_kind, op_error, require_floating
from ...devices import xp_of
from ...dispatch import autocast_call, bind
from ...dtypes import get_default_dtype as tg_float, is_float as _isf
from ...ops_registry.opdef import OpDef, validate
from ...tape import name_call, state as _state
from ...tensor import Tensor, wrap
from .._checks import any_value, host
from .._decl import Sample, TensorSpec, composite, composite_op, rand, rand as _rand
from ..activations import logsigmoid
from ..creation import _constant, from_dlpack
from ..elementwise import (
    abs as _abs,
    clamp_min,
    exp,
    ge,
    log,
    log1p,
    maximum,
    minimum,
    ne,
    sqrt,
    sub,
    where,
)
from ..indexing import gather
from ..reduce import mean, sum as _sum
from ..shape import movedim, unsqueeze
from . import softmax_rows as _fused_rows
from ._common import np_dtype, raw, torch_functional as _torch
from .activation import _log_softmax_kernel, _softmax_kernel, log_softmax, softmax
from .affine import linear
from .distance import pairwise_distance
from .sparse import one_hot


def _reduce(name, loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    raise op_error(name, f"{reduction!r} is not a valid value for reduction "
                         f"(expected 'none', 'mean' or 'sum')")


def _check_index_target(name, xs, ts, tdt):
    """PyTorch's checks of class-index targets of shape ``ts`` and NumPy dtype ``tdt``
    for an input of shape ``xs`` (classes at dim 1, or dim 0 of a 1-D input), in its
    order and with its exception classes."""
    if not xs:
        raise op_error(name, "Expected 1 or more dimensions (got 0)", ValueError)
    if len(xs) != 1 and (ts[0] if ts else 0) != xs[0]:
        raise op_error(name, f"Expected input batch_size ({xs[0]}) to match target "
                             f"batch_size ({ts[0] if ts else 0}).", ValueError)
    if len(xs) == 1 and len(ts) == 1 and ts[0] != 1:
        raise op_error(name, f"For 1D input, 1D target must have size 1, but got target "
                             f"size: {ts[0]}", ValueError)
    if len(xs) <= 2 and len(ts) > 1:
        raise op_error(name, f"0D or 1D target tensor expected, multi-target not supported "
                             f"(got target of shape {tuple(ts)} for input of shape {xs})",
                       RuntimeError)
    if len(xs) > 2 and tuple(ts) != (xs[0],) + xs[2:]:
        raise op_error(name, f"Expected target size {list((xs[0],) + xs[2:])}, got "
                             f"{list(ts)}", RuntimeError)
    if tdt not in _INDEX_DTYPES:
        raise op_error(name, f"expected target dtype to be Long or Byte (class indices of "
                             f"dtype int64 or uint8), but got {tdt}", RuntimeError)


def _check_weight(name, C, ws, wdt=None, xdt=None):
    """The class weights' shape, and (class-index targets) their dtype: input's."""
    if tuple(ws) != (C,):
        raise op_error(name, f"weight tensor should be defined either for all {C} classes or "
                             f"no classes but got weight tensor of shape: {list(ws)}",
                       RuntimeError)
    if wdt is not None and wdt != xdt:
        raise op_error(name, f"expected scalar type {xdt} but found {wdt} (weight must have "
                             f"input's dtype)", RuntimeError)


def _label_smoothing(name, label_smoothing):
    """PyTorch's reading: above 1 is an error, anything not above 0 (NaN too) is none."""
    if label_smoothing > 1.0:
        raise op_error(name, f"label_smoothing must be between 0.0 and 1.0. Got: "
                             f"{label_smoothing}", RuntimeError)
    return label_smoothing if label_smoothing > 0.0 else 0.0


def _class_coef(name, input, target, weight, ignore_index, label_smoothing):
    """(M, denominator) for class-index targets; M has input's shape."""
    if not isinstance(target, Tensor):
        if not hasattr(target, "dtype") or not hasattr(target, "shape"):
            raise op_error(name, f"target must be a Tensor, not {type(target).__name__}",
                           TypeError)
        target = from_dlpack(target) if np.dtype(target.dtype).kind != "c" else target
    xs = tuple(input.shape)
    _check_index_target(name, xs, tuple(target.shape),
                        np.dtype(getattr(target.dtype, "np", target.dtype)))
    if len(xs) == 1 and len(target.shape) == 1:
        target = target.reshape(())
    C = xs[1] if len(xs) > 1 else xs[0]
    w = None
    if weight is not None:
        _check_weight(name, C, tuple(weight.shape), np.dtype(np_dtype(weight)),
                      np.dtype(np_dtype(input)))
        w = weight
    if target._vlevel is None and getattr(input, "_vlevel", None) is None and \
            (w is None or w._vlevel is None) and not _state.observers:
        return _class_coef_data(name, input, target, w, ignore_index, label_smoothing, C)
    # batched targets or input (inside vmap), or an observed call (tg.compile's capture,
    # which must see the coefficients come from the targets; tg.profile): the same with
    # ops, the range check too (a guarded read that each replay repeats)
    if any_value(target, lambda t: (t != ignore_index) & ((t < 0) | (t >= C))):
        t = host(target).reshape(-1)
        bad = t[(t != ignore_index) & ((t < 0) | (t >= C))]
        raise op_error(name, f"target {int(bad[0])} is out of bounds for {C} classes",
                       IndexError)
    valid = ne(target, ignore_index)
    onehot = one_hot(where(valid, target, 0), C)  # classes last
    dt = input.dtype
    M = onehot.to(dt) * unsqueeze(valid, -1).to(dt)
    if w is not None:
        M = M * w
    denom = _sum(M)
    if label_smoothing:
        share = unsqueeze(valid, -1).to(dt) * (label_smoothing / C)
        M = (1 - label_smoothing) * M + (share * w if w is not None else share)
    if len(xs) > 2:
        M = movedim(M, -1, 1)
    return M, denom


def _class_coef_data(name, input, target, w, ignore_index, label_smoothing, C):
    """``_class_coef`` on the arrays: a constant, computed without a dispatch per step
    (most of a small classifier's loss)."""
    x, t = raw(input), raw(target)
    xp = xp_of(x)
    if x.ndim == 2 and w is None and not label_smoothing:
        # the common case (a batch of class indices, no weights), in fewer array ops
        valid = t != ignore_index
        every = bool(valid.all())
        tv = t if every else t[valid]
        if tv.size and (int(tv.min()) < 0 or int(tv.max()) >= C):
            bad = tv[(tv < 0) | (tv >= C)]
            raise op_error(name, f"target {int(bad[0])} is out of bounds for {C} classes",
                           IndexError)
        M = xp.zeros(x.shape, dtype=x.dtype)
        rows = xp.arange(x.shape[0]) if every else xp.nonzero(valid)[0]
        M[rows, tv] = 1
        return M, float(tv.size)
    squeeze = x.ndim == 1
    if squeeze:
        x, t = x[None], t[None]
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= C))
    if bad.any():
        raise op_error(name, f"target {int(t[bad].reshape(-1)[0])} is out of bounds for "
                             f"{C} classes", IndexError)
    classes = xp.arange(C).reshape((1, C) + (1,) * (x.ndim - 2))
    onehot = (xp.expand_dims(t, 1) == classes) & xp.expand_dims(valid, 1)
    wb = (xp.ones(C, dtype=x.dtype) if w is None else raw(w)).reshape(classes.shape)
    M = onehot * wb
    denom = M.sum()
    if label_smoothing:
        M = (1 - label_smoothing) * M + (label_smoothing / C) * (wb * xp.expand_dims(valid, 1))
    M = M.astype(x.dtype)
    return (M[0] if squeeze else M), denom


_INDEX_DTYPES = (np.dtype(np.int64), np.dtype(np.uint8))


def _float_target(name, input, target):
    """PyTorch's rule for the binary losses: a float target of input's dtype (an
    integer or bool target is a RuntimeError: "Found dtype Long but expected Float")."""
    tk, ik = np_dtype(target), np_dtype(input)
    if tk is not None and tk != ik:
        raise op_error(name, f"found target dtype {tk} but expected {ik} (input's dtype)",
                       RuntimeError)


def _weighted_nll(name, logp, target, weight, ignore_index, reduction, label_smoothing):
    M, denom = _class_coef(name, logp, target, weight, ignore_index, label_smoothing)
    if not isinstance(M, Tensor):  # constants: a Tensor and a Python number, so the
        M = wrap(M)                # products below take dispatch's lane
        denom = float(denom)
    if reduction == "none":
        return -_sum(logp * M, dim=1 if len(logp.shape) > 1 else 0)
    if reduction == "mean":  # -s / d as s / -d: one op fewer, the same rounding; all
        return _sum(logp * M) / -denom  # targets ignored: nan (quietly), as PyTorch
    total = -_sum(logp * M)
    if reduction == "sum":
        return total
    return _reduce(name, total, reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class indices ``target`` under log-probabilities
    ``input`` (N, C, ...); ``weight`` rescales classes (a constant, as PyTorch)."""
    reduction = _reduction("nll_loss", size_average, reduce, reduction)
    require_floating("nll_loss", input)
    return _weighted_nll("nll_loss", input, target, weight, ignore_index, reduction, 0.0)


# ---------------------------------------------------------------- the one-node cross-entropy
# The common call (a batch of logits (N, C) on the CPU in float32/float64, int64 or uint8
# class indices, no weights, no label smoothing, the mean or the sum), run eagerly with
# nothing observing (no capture, vmap or forward mode): one node whose kernel is a
# log-softmax row pass and a pick, and whose vjp is ``(softmax - onehot) * g / n``,
# instead of four op calls and their four adjoints (most of a small classifier's step).
# Its vjp on Tensors (a higher-order gradient) is made of recorded ops.
def _xent_kernel(x, target, rows, picked, denom, mean, tgt, lse):
    # tgt: (N,) each row's class, -1 where ignored; lse: (N, 2) scratch the fused row
    # pass fills with each row's max and log of the sum of exponentials (for the vjp)
    rows_k = _row_kernels(x)
    if rows_k is not None:
        total = np.float64(rows_k[0](x, tgt, lse))  # (0 / 0 with every row ignored:
        return np.asarray(total / denom if mean else total, x.dtype)  # nan, as PyTorch)
    logp = _log_softmax_kernel(x, 1, out=np.empty_like(x))
    s = logp[rows, picked].sum()
    out = np.empty((), x.dtype)
    np.divide(s, -denom, out=out) if mean else np.negative(s, out=out)
    return out


def _xent_vjp(ctx, g):
    x = ctx.inputs[0]
    a = ctx.attrs
    rows, picked, scale = a["rows"], a["picked"], (a["denom"] if a["mean"] else 1.0)
    # (rows whose target is ignored get zeros, also when all are: PyTorch's gradient
    # there is 0 though the mean is nan)
    if isinstance(g, Tensor):  # recorded: softmax and products that differentiate again
        onehot = np.zeros(tuple(x.shape), np_dtype(x))
        onehot[rows, picked] = 1
        gx = (softmax(x, 1) - wrap(onehot)) * (g / scale)
        if len(rows) != x.shape[0]:
            keep = np.zeros((x.shape[0], 1), bool)
            keep[rows] = True
            gx = where(wrap(keep), gx, 0.0)
        return (gx, None)
    rows_k = _row_kernels(x)
    if rows_k is not None:  # (the forward's row pass ran: lse holds its rows' terms)
        out = np.empty_like(x)
        rows_k[1](x, a["tgt"], a["lse"], x.dtype.type(np.float64(g) / scale), out)
        return (out, None)
    p = _softmax_kernel(x, 1, out=np.empty_like(x))
    p[rows, picked] -= 1
    p *= g / scale
    if len(rows) != x.shape[0]:
        ignored = np.ones(x.shape[0], bool)
        ignored[rows] = False
        p[ignored] = 0
    return (p, None)


def _row_kernels(x):
    """(forward, backward) of the fused cross-entropy row passes for ``x``
    (``softmax_rows.py``'s ``xent_forward``/``xent_backward``: one pass per row for the
    loss and each row's max and log-sum-exp, one more for the gradient; NumPy's passes
    over the whole (N, C) array took 3.5x the time on (2048, 65) float32), or None (not
    a C-contiguous NumPy float32/float64 array with classes, or no Numba)."""
    if type(x) is not np.ndarray or x.dtype not in _XENT_DTYPES or not x.flags.c_contiguous \
            or x.shape[1] == 0:
        return None
    ks = _fused_rows.kernels(x.dtype)
    return None if ks is None else ks[2:]


_XENT = OpDef(name="nll_loss", kernel=_xent_kernel, infer=lambda *s, **k: None,
              infer_first=False, args=("input", "target"), vjp=_xent_vjp, saves=("input",),
              samples=lambda dtype=None: [])
validate(_XENT)
_XENT.fast = False  # (the general path: an integer target beside a float input)
_XENT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


_ARANGES = {}
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce  # (ndarray.min/max's own calls)


def _arange(n):
    """``np.arange(n)``, made once per ``n`` (read-only: shared by the nodes)."""
    r = _ARANGES.get(n)
    if r is None:
        if len(_ARANGES) > 64:
            _ARANGES.clear()
        r = _ARANGES[n] = np.arange(n)
        r.flags.writeable = False
    return r


def _one_node_xent(input, target, ignore_index, reduction):
    """The one-node cross-entropy's result, or None where the call is not its case."""
    st = _state
    if st.observers or st._dual or st.autocast is not None or type(target) is not Tensor \
            or input._vlevel is not None or target._vlevel is not None:
        return None
    x, t = input._data, target._data
    if type(x) is not np.ndarray or type(t) is not np.ndarray or x.ndim != 2 or \
            x.dtype not in _XENT_DTYPES or t.dtype not in _INDEX_DTYPES or \
            t.shape != (x.shape[0],) or x.size == 0:
        return None
    N, C = x.shape
    if not 0 <= ignore_index < C and 0 <= int(_MIN(t)) and int(_MAX(t)) < C:
        rows, picked = _arange(N), t.copy()  # (every target a class: none ignored;
        #                                        a copy: the target may be written later)
    else:
        valid = t != ignore_index
        rows = np.nonzero(valid)[0]
        picked = t[rows]
        if picked.size and (int(picked.min()) < 0 or int(picked.max()) >= C):
            bad = picked[(picked < 0) | (picked >= C)]
            raise op_error("cross_entropy", f"target {int(bad[0])} is out of bounds for {C} "
                                            f"classes", IndexError)
    if len(rows) == N:
        tgt = picked.astype(np.int64, copy=False)
    else:
        tgt = np.full(N, -1, np.int64)
        tgt[rows] = picked
    return bind(_XENT, input, target, rows=rows, picked=picked, denom=float(picked.size),
                mean=reduction == "mean", tgt=tgt, lse=np.empty((N, 2), x.dtype))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """``nll_loss(log_softmax(input, 1), target)`` for class indices, or
    ``-sum(target * log_softmax(input, 1), 1)`` for class probabilities (target of
    input's shape); ``label_smoothing`` mixes in the uniform distribution.

    >>> tg.cross_entropy(tg.zeros(2, 4), tg.tensor([0, 3])).item()  # log(4)
    1.3862943611198906
    """
    reduction = _reduction("cross_entropy", size_average, reduce, reduction)
    label_smoothing = _label_smoothing("cross_entropy", label_smoothing)
    if len(input.shape) == 0 and len(getattr(target, "shape", ())) != 0:
        raise op_error("cross_entropy", "Expected 1 or more dimensions (got 0)", ValueError)
    require_floating("cross_entropy", input)
    if weight is None and not label_smoothing and (reduction == "mean" or reduction == "sum"):
        loss = _one_node_xent(input, target, ignore_index, reduction)
        if loss is not None:
            return loss
    if tuple(getattr(target, "shape", ())) != tuple(input.shape):
        logp = log_softmax(input, dim=1 if len(input.shape) > 1 else 0)
        return _weighted_nll("cross_entropy", logp, target, weight, ignore_index, reduction,
                             label_smoothing)
    # class probabilities: a target of input's shape
    _check_probability_target("cross_entropy", target, ignore_index)
    if len(input.shape) == 0:
        raise op_error("cross_entropy", "Expected 1 or more dimensions (got 0)", ValueError)
    cdim = 1 if len(input.shape) > 1 else 0
    C = input.shape[cdim]
    logp = log_softmax(input, dim=cdim)
    if label_smoothing:
        target = target * (1 - label_smoothing) + label_smoothing / C
    if weight is not None:
        _check_weight("cross_entropy", C, tuple(weight.shape))
        target = target * raw(weight).astype(np_dtype(logp)).reshape(
            (C,) + (1,) * (len(input.shape) - cdim - 1))
    loss = -_sum(logp * target, dim=cdim)
    if reduction == "mean" and len(input.shape) > 1:
        return _sum(loss) / float(loss.shape[0] * int(np.prod(loss.shape[1:])))
    return _reduce("cross_entropy", loss, reduction) if reduction != "mean" else mean(loss)


def _check_probability_target(name, target, ignore_index):
    if dtype_kind(target) != "f":
        raise op_error(name, f"Expected floating point type for target with class "
                             f"probabilities, got {np.dtype(np_dtype(target))}", RuntimeError)
    if ignore_index >= 0:
        raise op_error(name, "ignore_index is not supported for floating point target",
                       RuntimeError)


def _same_shape(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        broadcast_shapes(name, tuple(input.shape), tuple(target.shape))


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean squared error (``reduction`` 'mean', 'sum' or 'none')."""
    reduction = _reduction("mse_loss", size_average, reduce, reduction)
    _same_shape("mse_loss", input, target)
    ki, kt = dtype_kind(input), dtype_kind(target)
    if ki in ("b", "i", "u") and kt in ("b", "i", "u"):
        # no integer kernel, as PyTorch's (a float operand on either side promotes)
        raise op_error("mse_loss", f"not implemented for {input.dtype} input and "
                                   f"{target.dtype} target "
                                   f"(a floating point operand is expected)", NoKernelError)
    # PyTorch computes a bool operand's loss as its promoted dtype (0/1): cast it
    # first (the `-` refuses bools)
    if dtype_kind(input) == "b":
        input = input.to(target.dtype if dtype_kind(target) not in ("b", None) else tg_float())
    if dtype_kind(target) == "b":
        target = target.to(input.dtype)
    d = input - target
    return name_call(_reduce("mse_loss", d * d, reduction), input, "MseLossBackward0")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean absolute error (subgradient 0 where input == target, as PyTorch)."""
    reduction = _reduction("l1_loss", size_average, reduce, reduction)
    _same_shape("l1_loss", input, target)
    return _reduce("l1_loss", _abs(sub(input, target)), reduction)  # sub refuses bools


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-(t log x + (1 - t) log(1 - x))`` with each log clamped at -100, as PyTorch."""
    reduction = _reduction("binary_cross_entropy", size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise op_error("binary_cross_entropy", f"target of shape {tuple(target.shape)} must "
                                               f"match input {tuple(input.shape)}")
    require_floating("binary_cross_entropy", input, cls=RuntimeError)
    _float_target("binary_cross_entropy", input, target)
    for what, v in (("input", input), ("target", target)):
        # NaN is out of range too (PyTorch checks both)
        if any_value(v, lambda a: ~((a >= 0) & (a <= 1))):
            raise op_error("binary_cross_entropy", f"all elements of {what} should be "
                                                   f"between 0 and 1", RuntimeError)
    if any_value(input, lambda a: a * (1 - a) < _BCE_EPS):
        loss = _bce_at_edges(input, target)
    else:
        loss = -(target * maximum(log(input), -100.0) +
                 (1 - target) * maximum(log(1 - input), -100.0))
    if weight is not None:
        loss = loss * weight
    return name_call(_reduce("binary_cross_entropy", loss, reduction), input,
                     "BinaryCrossEntropyBackward0")


_BCE_EPS = 1e-12  # PyTorch's floor of x (1 - x) in the gradient


def _bce_at_edges(x, t):
    """The elementwise loss where some ``x (1 - x)`` is below ``_BCE_EPS`` (x at or
    next to 0 or 1), with PyTorch's gradients there: ``(x - t) / max(x (1 - x), eps)``
    for x (the clamped logs' own gradient is 0 * inf = nan at 0 and 1), and the
    clamped logs' difference for t. There the value is the clamped logs of x held
    constant plus ``q(x) - q(x held)``, ``q = (x - t)^2 / (2 eps)``: zero, whose
    gradient is ``(x - t) / eps`` (and second derivative ``1 / eps``); elsewhere the
    usual formula, on x moved off the edges so its unused gradient stays finite."""
    xd = x.detach() if isinstance(x, Tensor) else x
    edge = xd * (1 - xd) < _BCE_EPS
    xs = where(edge, 0.5, x)
    inner = -(t * maximum(log(xs), -100.0) + (1 - t) * maximum(log(1 - xs), -100.0))
    held = -(t * maximum(log(xd), -100.0) + (1 - t) * maximum(log(1 - xd), -100.0))

    def q(v):
        d = v - t
        return d * d * (0.5 / _BCE_EPS)
    return where(edge, held + (q(x) - q(xd)), inner)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross-entropy in one stable formula:
    ``(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)``."""
    reduction = _reduction("binary_cross_entropy_with_logits", size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise op_error("binary_cross_entropy_with_logits",
                       f"target of shape {tuple(target.shape)} must match input "
                       f"{tuple(input.shape)}")
    require_floating("binary_cross_entropy_with_logits", input)
    _float_target("binary_cross_entropy_with_logits", input, target)
    # softplus(-x) = -min(x, 0) + log1p(exp(-|x|)); both pieces pick the x >= 0 branch
    # at 0 through where, so the derivative there is the true -1/2 (abs/relu give 0)
    pos = ge(input, 0)
    softplus_neg = log1p(exp(-where(pos, input, -input))) - where(pos, 0.0, input)
    loss = (1 - target) * input
    if pos_weight is not None:
        loss = loss + (1 + (pos_weight - 1) * target) * softplus_neg
    else:
        loss = loss + softplus_neg
    if weight is not None:
        loss = loss * weight
    return name_call(_reduce("binary_cross_entropy_with_logits", loss, reduction), input,
                     "BinaryCrossEntropyWithLogitsBackward0")


# ---------------------------------------------------------------- in the registry
# Each loss is a composite (``_decl.composite``) with its shape rule. ``weight`` and
# ``pos_weight`` are constants in PyTorch (not differentiable there; ours are), so
# the samples that pass one are forward-only.
def _reduced(name, shape, reduction):
    if reduction == "none":
        return tuple(shape)
    if reduction in ("mean", "sum"):
        return ()
    raise op_error(name, f"{reduction!r} is not a valid value for reduction "
                         f"(expected 'none', 'mean' or 'sum')")


def _float_input(name, x, cls=TypeError):
    if not _isf(np.dtype(x.dtype)):
        raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}", cls)


def _class_infer(name):
    def infer(x, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
              reduction="mean", label_smoothing=0.0):
        xs, ts = tuple(x.shape), tuple(target.shape)
        if name == "cross_entropy":
            _label_smoothing(name, label_smoothing)
        if not xs and (name != "cross_entropy" or ts):
            raise op_error(name, "Expected 1 or more dimensions (got 0)", ValueError)
        _float_input(name, x)
        cdim = 1 if len(xs) > 1 else 0
        if name == "cross_entropy" and ts == xs:
            _check_probability_target(name, target, ignore_index)
            if not xs:
                raise op_error(name, "Expected 1 or more dimensions (got 0)", ValueError)
            if weight is not None:
                _check_weight(name, xs[cdim], tuple(weight.shape))
        else:
            _check_index_target(name, xs, ts, np.dtype(target.dtype))
            if weight is not None:
                _check_weight(name, xs[cdim], tuple(weight.shape), np.dtype(weight.dtype),
                              np.dtype(x.dtype))
        return TensorSpec(_reduced(name, xs[:cdim] + xs[cdim + 1:], reduction), x.dtype)
    return infer


def _class_samples(dtype=np.float64):
    x = _rand((4, 3), dtype, seed=1)
    t = np.array([0, 2, 1, 2])
    x3 = _rand((2, 3, 2), dtype, seed=2)
    t3 = np.array([[1, 0], [2, -100]])  # an ignored target
    w = _rand((3,), dtype, 0.5, 2.0, seed=3)
    return [Sample((x, t), {}),
            Sample((x3, t3), {"reduction": "none"}),
            Sample((x3, t3, w), {"reduction": "sum"}, False),
            Sample((_rand((3,), dtype, seed=4), np.array(1)), {})]


def _class_errors():
    return [((_rand((4, 3)), np.array([0, 1, 2])), {}, ValueError),
            ((_rand((4, 3)), np.array([0, 1, 2, 0])), {"reduction": "avg"}, ValueError),
            ((_rand((4, 3)), np.array([0.0, 1, 2, 0])), {}, RuntimeError)]


def _torch_loss(fname):
    def f(torch, *a, **kw):
        return getattr(torch.nn.functional, fname)(*a, **kw)
    return f


composite(nll_loss, autocast="fp32", infer=_class_infer("nll_loss"),
          args=("input", "target", "weight"),
          optional=("weight",), samples=_class_samples, error_samples=_class_errors,
          torch=_torch_loss("nll_loss"))


def _cross_entropy_samples(dtype=np.float64):
    p = _rand((4, 3), dtype, 0.1, 1.0, seed=5)
    return _class_samples(dtype)[:3] + [
        Sample((_rand((4, 3), dtype, seed=6), np.array([2, 0, 1, 1])), {"label_smoothing": 0.2}),
        Sample((_rand((4, 3), dtype, seed=7), p / p.sum(1, keepdims=True)), {}),
        Sample((_rand((4, 3), dtype, seed=8), np.array([2, 0, 1, 1]), _rand((3,), dtype, 0.5, 2.0)),
               {"label_smoothing": 0.1}, False)]


composite(cross_entropy, autocast="fp32", infer=_class_infer("cross_entropy"),
          args=("input", "target", "weight"), optional=("weight",),
          samples=_cross_entropy_samples,
          error_samples=lambda: _class_errors() + [
              ((_rand((4, 3)), np.array([0, 1, 2, 0])), {"label_smoothing": 1.5}, RuntimeError)],
          torch=_torch_loss("cross_entropy"))


def _pointwise_infer(name):
    def infer(x, target, size_average=None, reduce=None, reduction="mean"):
        shape = tuple(x.shape) if tuple(x.shape) == tuple(target.shape) else \
            broadcast_shapes(name, tuple(x.shape), tuple(target.shape))
        dt = np.result_type(np.dtype(x.dtype), np.dtype(target.dtype))
        return TensorSpec(_reduced(name, shape, reduction), dt)
    return infer


def _pointwise_samples(dtype=np.float64):
    return [Sample((_rand((3, 4), dtype, seed=1), _rand((3, 4), dtype, seed=2)), {}),
            Sample((_rand((2, 3), dtype, seed=3), _rand((2, 3), dtype, seed=4)),
                   {"reduction": "none"}),
            Sample((_rand((2, 3), dtype, seed=5), _rand((2, 3), dtype, seed=6)),
                   {"reduction": "sum"})]


for _fn in (mse_loss, l1_loss):
    composite(_fn, autocast="fp32", infer=_pointwise_infer(_fn.__name__), args=("input", "target"),
              samples=_pointwise_samples,
              error_samples=lambda: [((_rand((3, 4)), _rand((5,))), {}, ValueError),
                                     ((_rand((3,)), _rand((3,))), {"reduction": "avg"},
                                      ValueError)],
              torch=_torch_loss(_fn.__name__))


def _binary_infer(name):
    def infer(x, target, weight=None, size_average=None, reduce=None, reduction="mean",
              pos_weight=None):
        if tuple(x.shape) != tuple(target.shape):
            raise op_error(name, f"target of shape {tuple(target.shape)} must match input "
                                 f"{tuple(x.shape)}")
        _float_input(name, x, RuntimeError if name == "binary_cross_entropy" else TypeError)
        if np.dtype(target.dtype) != np.dtype(x.dtype):
            raise op_error(name, f"found target dtype {np.dtype(target.dtype)} but expected "
                                 f"{np.dtype(x.dtype)} (input's dtype)", RuntimeError)
        for what, w in (("weight", weight), ("pos_weight", pos_weight)):
            if w is not None:
                broadcast_shapes(name, tuple(x.shape), tuple(w.shape))
        return TensorSpec(_reduced(name, tuple(x.shape), reduction), x.dtype)
    return infer


def _bce_samples(dtype=np.float64):
    x = _rand((3, 4), dtype, 0.05, 0.95, seed=1)
    t = _rand((3, 4), dtype, 0.0, 1.0, seed=2)
    return [Sample((x, t), {}),
            Sample((x[:2], t[:2]), {"reduction": "none"}),
            Sample((x, t, _rand((4,), dtype, 0.5, 2.0, seed=3)), {"reduction": "sum"}, False)]


composite(binary_cross_entropy, widen=True, autocast={"cpu": "fp32", "cuda": "unsafe"},
          infer=_binary_infer("binary_cross_entropy"),
          args=("input", "target", "weight"), optional=("weight",), samples=_bce_samples,
          error_samples=lambda: [((_rand((3, 4), low=0.1, high=0.9),
                                   _rand((3,), low=0.1, high=0.9)),
                                  {}, ValueError),
                                 ((_rand((3,), low=1.5, high=2.0), _rand((3,), low=0.1, high=0.9)),
                                  {}, RuntimeError)],
          torch=_torch_loss("binary_cross_entropy"))


def _bce_logits_samples(dtype=np.float64):
    x = _rand((3, 4), dtype, seed=1)
    t = _rand((3, 4), dtype, 0.0, 1.0, seed=2)
    return [Sample((x, t), {}),
            Sample((x, t, _rand((4,), dtype, 0.5, 2.0, seed=3)), {"reduction": "none"}, False),
            Sample((x, t, None, _rand((4,), dtype, 0.5, 3.0, seed=4)), {"reduction": "sum"},
                   False)]


composite(binary_cross_entropy_with_logits, autocast="fp32",
          args=("input", "target", "weight", "pos_weight"),
          infer=_binary_infer("binary_cross_entropy_with_logits"),
          optional=("weight", "pos_weight"), by_name=True, samples=_bce_logits_samples,
          error_samples=lambda: [((_rand((3, 4)), _rand((3,))), {}, ValueError),
                                 ((_rand((3,)), np.arange(3)), {}, RuntimeError)],
          torch=lambda torch, x, t, weight=None, pos_weight=None, **kw:
              torch.nn.functional.binary_cross_entropy_with_logits(
                  x, t, weight, pos_weight=pos_weight, **kw))


del _fn


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
    if any_value(var, lambda v: v < 0):
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
    """``arange(n)`` as a constant of ``t``'s framework (tapegrad or torch): a
    tapegrad one marked so (``creation._constant``: a capture keeps it)."""
    if isinstance(t, Tensor):
        return _constant(t.new_tensor(np.arange(n)))
    return t.new_tensor(np.arange(n)) if hasattr(t, "new_tensor") else np.arange(n)


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
    # (as PyTorch's composite under autocast: the linear in its policy, lowered, and the
    # cross-entropy in its own, float32)
    return autocast_call(composite_op(cross_entropy), cross_entropy, (logits, target), dict(
        weight=weight, reduction=reduction, label_smoothing=label_smoothing,
        ignore_index=-100 if ignore_index is None else ignore_index))


# ------------------------------------------------------------------ the registry
def _reduced_shape(shape, reduction):
    return shape if reduction == "none" else ()


def _loss_infer(*specs, reduction="mean", **kw):
    xs = tuple(specs[0].shape)
    return TensorSpec(_reduced_shape(xs, reduction), specs[0].dtype)


def _sign(shape, seed):
    """Targets -1 / 1 (int64: a float target would be perturbed by finite differences
    across the loss's ``target == 1`` switch)."""
    return np.where(rand(shape, seed=seed) < 0, -1, 1).astype(np.int64)


def _fsign(shape, seed):
    """Float targets -1 / 1 (for losses smooth in the target)."""
    return _sign(shape, seed).astype(np.float64)


def _decl(fn, samples, errors, infer=_loss_infer, args=("input", "target"), torch=None,
          autocast="fp32"):
    # (a loss reduces: in half width it computes in float32 and rounds once, as
    # PyTorch's loss kernels accumulate in float32)
    composite(fn, infer=infer, samples=samples, torch=torch or _torch(fn.__name__),
              error_samples=errors, args=args, autocast=autocast, widen=True)


def _cast(dtype, *arrays):
    return tuple(a.astype(dtype) if _isf(a.dtype) else a for a in arrays)


def _cos_infer(x1, x2, t, reduction="mean", **kw):
    return TensorSpec(_reduced_shape(tuple(x1.shape[:-1]), reduction), x1.dtype)


_decl(cosine_embedding_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((4, 5)), rand((4, 5), seed=1), _sign((4,), 2)), {}),
          Sample(_cast(dtype, rand((4, 5), seed=3), rand((4, 5), seed=4), _sign((4,), 5)),
                 {"margin": -0.5, "reduction": "none"})],
      lambda: [((rand((4, 5)), rand((4, 6)), _sign((4,), 1)), {}, RuntimeError)],
      infer=_cos_infer, args=("input1", "input2", "target"))


def _gauss_infer(x, t, var, full=False, eps=1e-6, reduction="mean"):
    return TensorSpec(_reduced_shape(tuple(x.shape), reduction), x.dtype)


_decl(gaussian_nll_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=1), rand((3, 4), seed=2, low=0.2)),
                 {}),
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=1), rand((3,), seed=2, low=0.2)),
                 {"full": True, "reduction": "sum"})],
      lambda: [((rand((3, 4)), rand((3, 4)), rand((2,), low=0.2)), {}, ValueError)],
      autocast=None, infer=_gauss_infer, args=("input", "target", "var"))
_decl(hinge_embedding_loss,
      lambda dtype=np.float64: [Sample(_cast(dtype, rand((3, 4)), _sign((3, 4), 1)), {}),
                                Sample(_cast(dtype, rand((5,)), _sign((5,), 2)),
                                       {"margin": 0.5, "reduction": "none"})],
      lambda: [((rand((3, 4)), _sign((3, 4), 1)), {"reduction": "bad"}, ValueError)])


def _kl_infer(x, t, reduction="mean", log_target=False, **kw):
    return TensorSpec(_reduced_shape(tuple(x.shape), reduction), x.dtype)


def _log_probs(shape, seed):
    x = rand(shape, seed=seed) * 2
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


_decl(kl_div,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, _log_probs((3, 4), 0), np.exp(_log_probs((3, 4), 1))),
                 {"reduction": "batchmean"}),
          Sample(_cast(dtype, _log_probs((3, 4), 2), _log_probs((3, 4), 3)),
                 {"reduction": "sum", "log_target": True})],
      lambda: [((rand((3, 4)), rand((3, 4))), {"reduction": "avg"}, ValueError)],
      infer=_kl_infer)
_decl(margin_ranking_loss,
      lambda dtype=np.float64: [Sample(_cast(dtype, rand((5,)), rand((5,), seed=1),
                                             _fsign((5,), 2)), {"margin": 0.1})],
      lambda: [((rand((5,)), rand((5, 1)), _fsign((5,), 2)), {}, RuntimeError)],
      args=("input1", "input2", "target"))


def _margin_class_infer(x, t, *a, reduction="mean", **kw):
    return TensorSpec(_reduced_shape(tuple(x.shape[:1]) if len(x.shape) == 2 else (), reduction),
                      x.dtype)


def _class_ints(high, shape, seed=0):
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
          Sample(_cast(dtype, rand((3, 5)), _class_ints(5, (3,))), {}),
          Sample(_cast(dtype, rand((3, 5), seed=1), _class_ints(5, (3,), 1)),
                 {"p": 2, "margin": 0.5, "reduction": "none"}),
          Sample(_cast(dtype, rand((4,), seed=2), np.array(2)), {})],
      lambda: [((rand((3, 5)), _class_ints(5, (4,))), {}, RuntimeError),
               ((rand((3, 5)), _class_ints(5, (3,))), {"p": 3}, ValueError)],
      autocast={"cuda": "fp32"}, infer=_margin_class_infer,
      torch=_checked(_torch_multi_margin, "multi_margin_loss"))
_decl(multilabel_margin_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((2, 4)), np.array([[3, 0, -1, 1], [1, 2, 3, -1]])), {}),
          Sample(_cast(dtype, rand((4,), seed=1), np.array([2, -1, 0, 0])),
                 {"reduction": "none"})],
      lambda: [((rand((2, 4)), np.array([[3, 0, -1, 1]])), {}, RuntimeError)],
      autocast={"cuda": "fp32"}, infer=_margin_class_infer,
      torch=_checked(_torch_multilabel_margin, "multilabel_margin_loss"))


def _class_dim_infer(x, t, *a, reduction="mean", **kw):
    return TensorSpec(_reduced_shape(tuple(x.shape[:-1]), reduction), x.dtype)


_decl(multilabel_soft_margin_loss,
      lambda dtype=np.float64: [
          Sample(_cast(dtype, rand((3, 4)), (rand((3, 4), seed=1) > 0).astype(np.float64)), {}),
          Sample(_cast(dtype, rand((3, 4)), rand((3, 4), seed=2, low=0, high=1)),
                 {"reduction": "none"})],
      lambda: [((rand((3, 4)), rand((3, 5))), {}, ValueError)],
      autocast=None, infer=_class_dim_infer)
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
      lambda: [((rand((3, 4)), rand((2, 4))), {}, ValueError)], torch=_torch_soft_margin,
      autocast={"cuda": "fp32"})


def _triplet_infer(a, p, n, *args, reduction="mean", **kw):
    return TensorSpec(_reduced_shape(tuple(a.shape[:-1]), reduction), a.dtype)


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
      autocast=None, infer=_triplet_infer, args=("anchor", "positive", "negative"))


def _lce_infer(x, w, t, reduction="mean", **kw):
    return TensorSpec(_reduced_shape(tuple(x.shape[:-1]), reduction), x.dtype)


composite(linear_cross_entropy, infer=_lce_infer, args=("input", "linear_weight", "target"),
          samples=lambda dtype=np.float64: [
              Sample(_cast(dtype, rand((3, 4)), rand((5, 4), seed=1), _class_ints(5, (3,))), {}),
              Sample(_cast(dtype, rand((3, 4)), rand((5, 4), seed=1), _class_ints(5, (3,))),
                     {"reduction": "sum", "label_smoothing": 0.1})],
          error_samples=lambda: [((rand((3, 4)), rand((5, 3)), _class_ints(5, (3,))), {},
                                  RuntimeError)],
          torch=_torch("linear_cross_entropy"))
