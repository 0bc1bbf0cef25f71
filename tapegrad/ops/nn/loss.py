"""Losses, all composites: cross_entropy, nll_loss, mse_loss, l1_loss,
binary_cross_entropy, binary_cross_entropy_with_logits.

Class-index losses turn the targets into a constant coefficient array M (one-hot
times class weight, label smoothing folded in), and the loss is
-sum(log_probs * M) / denominator; so every order differentiates through mul/sum.
"""
import numpy as np

from ...devices import xp_of
from ..._util import broadcast_shapes, dtype_kind, op_error, require_floating
from ..elementwise import abs as _abs, exp, ge, log, log1p, maximum, sub, where, ne
from ..reduce import mean, sum as _sum
from ..shape import unsqueeze, movedim
from .sparse import one_hot
from ..creation import from_dlpack
from ...tape import state as _state
from ...tensor import Tensor, wrap
from ...dtypes import get_default_dtype as tg_float
from ._common import np_dtype, raw, whole
from .activation import log_softmax
from .._decl import composite, Sample, TensorSpec, rand as _rand


def _reduce(name, loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    raise op_error(name, f"{reduction!r} is not a valid value for reduction "
                         f"(expected 'none', 'mean' or 'sum')")


def _class_coef(name, input, target, weight, ignore_index, label_smoothing):
    """(M, denominator) for class-index targets; M has input's shape."""
    if not isinstance(target, Tensor):
        if not hasattr(target, "dtype") or not hasattr(target, "shape"):
            raise op_error(name, f"target must be a Tensor, not {type(target).__name__}",
                           TypeError)
        target = from_dlpack(target) if np.dtype(target.dtype).kind != "c" else target
    tdt = np.dtype(getattr(target.dtype, "np", target.dtype))
    if tdt not in _INDEX_DTYPES:  # PyTorch: "expected target dtype to be Long or Byte"
        raise op_error(name, f"expected class indices of dtype int64 or uint8 (or class "
                             f"probabilities of input's shape), got {tdt} target of shape "
                             f"{tuple(target.shape)}", RuntimeError)
    xs = tuple(input.shape)
    C = xs[1] if len(xs) > 1 else xs[0]
    squeeze = len(xs) == 1
    want = ((xs[0],) + xs[2:]) if not squeeze else ()
    if tuple(target.shape) != want:
        raise op_error(name, f"expected target of shape {want} for input of shape {xs}, got "
                             f"{tuple(target.shape)}", ValueError)
    w = None if weight is None else weight.to(input.dtype)
    if w is not None and tuple(w.shape) != (C,):
        raise op_error(name, f"weight of shape {tuple(w.shape)} does not match {C} classes",
                       RuntimeError)
    if target._vlevel is None and getattr(input, "_vlevel", None) is None and \
            (w is None or w._vlevel is None) and not _state.observers:
        return _class_coef_data(name, input, target, w, ignore_index, label_smoothing, C)
    # batched targets or input (inside vmap), or an observed call (tg.compile's capture,
    # which must see the coefficients come from the targets; tg.profile): the same with
    # ops; an out-of-range class is one_hot's IndexError
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
    total = -_sum(logp * M)
    if reduction == "sum":
        return total
    if reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):
            return total / denom  # all targets ignored: nan, as PyTorch
    return _reduce(name, total, reduction)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of class indices ``target`` under log-probabilities
    ``input`` (N, C, ...); ``weight`` rescales classes (a constant, as PyTorch)."""
    require_floating("nll_loss", input)
    return _weighted_nll("nll_loss", input, target, weight, ignore_index, reduction, 0.0)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """``nll_loss(log_softmax(input, 1), target)`` for class indices, or
    ``-sum(target * log_softmax(input, 1), 1)`` for class probabilities (target of
    input's shape); ``label_smoothing`` mixes in the uniform distribution.

    >>> tg.cross_entropy(tg.zeros(2, 4), tg.tensor([0, 3])).item()  # log(4)
    1.3862943611198906
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise op_error("cross_entropy", f"label_smoothing must be in [0, 1], got {label_smoothing}",
                       RuntimeError)
    if len(input.shape) == 0:
        raise op_error("cross_entropy", "input must have at least 1 dim (the classes)",
                       RuntimeError)
    require_floating("cross_entropy", input)
    cdim = 1 if len(input.shape) > 1 else 0
    logp = log_softmax(input, dim=cdim)
    if dtype_kind(target) == "f":
        if tuple(target.shape) != tuple(input.shape):
            raise op_error("cross_entropy", f"probability target of shape {tuple(target.shape)}"
                                            f" must match input {tuple(input.shape)}", RuntimeError)
        C = input.shape[cdim]
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / C
        if weight is not None:
            target = target * raw(weight).astype(np_dtype(logp)).reshape(
                (C,) + (1,) * (len(input.shape) - cdim - 1))
        loss = -_sum(logp * target, dim=cdim)
        if reduction == "mean" and len(input.shape) > 1:
            return _sum(loss) / float(loss.shape[0] * int(np.prod(loss.shape[1:])))
        return _reduce("cross_entropy", loss, reduction) if reduction != "mean" else mean(loss)
    return _weighted_nll("cross_entropy", logp, target, weight, ignore_index, reduction,
                         label_smoothing)


def _same_shape(name, input, target):
    if tuple(input.shape) != tuple(target.shape):
        broadcast_shapes(name, tuple(input.shape), tuple(target.shape))


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean squared error (``reduction`` 'mean', 'sum' or 'none')."""
    _same_shape("mse_loss", input, target)
    # PyTorch computes a bool operand's loss as its promoted dtype (0/1): cast it
    # first (the `-` refuses bools)
    if dtype_kind(input) == "b":
        input = input.to(target.dtype if dtype_kind(target) not in ("b", None) else tg_float())
    if dtype_kind(target) == "b":
        target = target.to(input.dtype)
    d = input - target
    return _reduce("mse_loss", d * d, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean absolute error (subgradient 0 where input == target, as PyTorch)."""
    _same_shape("l1_loss", input, target)
    return _reduce("l1_loss", _abs(sub(input, target)), reduction)  # sub refuses bools


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """``-(t log x + (1 - t) log(1 - x))`` with each log clamped at -100, as PyTorch."""
    if tuple(input.shape) != tuple(target.shape):
        raise op_error("binary_cross_entropy", f"target of shape {tuple(target.shape)} must "
                                               f"match input {tuple(input.shape)}")
    require_floating("binary_cross_entropy", input, cls=RuntimeError)
    _float_target("binary_cross_entropy", input, target)
    for what, v in (("input", whole(input)), ("target", whole(target))):
        # NaN is out of range too (PyTorch checks both)
        if v.size and not bool(((v >= 0) & (v <= 1)).all()):
            raise op_error("binary_cross_entropy", f"all elements of {what} should be "
                                                   f"between 0 and 1", RuntimeError)
    loss = -(target * maximum(log(input), -100.0) + (1 - target) * maximum(log(1 - input), -100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce("binary_cross_entropy", loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross-entropy in one stable formula:
    ``(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)``."""
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
    return _reduce("binary_cross_entropy_with_logits", loss, reduction)


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
    if np.dtype(x.dtype).kind != "f":
        raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}", cls)


def _class_infer(name):
    def infer(x, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
              reduction="mean", label_smoothing=0.0):
        xs = tuple(x.shape)
        if name == "cross_entropy":
            if not 0.0 <= label_smoothing <= 1.0:
                raise op_error(name, f"label_smoothing must be in [0, 1], got {label_smoothing}",
                               RuntimeError)
            if not xs:
                raise op_error(name, "input must have at least 1 dim (the classes)", RuntimeError)
        _float_input(name, x)
        cdim = 1 if len(xs) > 1 else 0
        if name == "cross_entropy" and np.dtype(target.dtype).kind == "f":
            if tuple(target.shape) != xs:
                raise op_error(name, f"probability target of shape {tuple(target.shape)} must "
                                     f"match input {xs}", RuntimeError)
        else:
            if np.dtype(target.dtype) not in _INDEX_DTYPES:
                raise op_error(name, f"expected class indices of dtype int64 or uint8, got "
                                     f"{np.dtype(target.dtype)}", RuntimeError)
            want = (xs[0],) + xs[2:] if len(xs) > 1 else ()
            if tuple(target.shape) != want:
                raise op_error(name, f"expected target of shape {want} for input of shape {xs}, "
                                     f"got {tuple(target.shape)}", ValueError)
        if weight is not None and tuple(weight.shape) != (xs[cdim],):
            raise op_error(name, f"weight of shape {tuple(weight.shape)} does not match "
                                 f"{xs[cdim]} classes", RuntimeError)
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


composite(nll_loss, infer=_class_infer("nll_loss"), args=("input", "target", "weight"),
          optional=("weight",), samples=_class_samples, error_samples=_class_errors,
          torch=_torch_loss("nll_loss"))


def _cross_entropy_samples(dtype=np.float64):
    p = _rand((4, 3), dtype, 0.1, 1.0, seed=5)
    return _class_samples(dtype)[:3] + [
        Sample((_rand((4, 3), dtype, seed=6), np.array([2, 0, 1, 1])), {"label_smoothing": 0.2}),
        Sample((_rand((4, 3), dtype, seed=7), p / p.sum(1, keepdims=True)), {}),
        Sample((_rand((4, 3), dtype, seed=8), np.array([2, 0, 1, 1]), _rand((3,), dtype, 0.5, 2.0)),
               {"label_smoothing": 0.1}, False)]


composite(cross_entropy, infer=_class_infer("cross_entropy"),
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
    composite(_fn, infer=_pointwise_infer(_fn.__name__), args=("input", "target"),
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


composite(binary_cross_entropy, infer=_binary_infer("binary_cross_entropy"),
          args=("input", "target", "weight"), optional=("weight",), samples=_bce_samples,
          error_samples=lambda: [((_rand((3, 4), low=0.1, high=0.9), _rand((3,), low=0.1, high=0.9)),
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


composite(binary_cross_entropy_with_logits, args=("input", "target", "weight", "pos_weight"),
          infer=_binary_infer("binary_cross_entropy_with_logits"),
          optional=("weight", "pos_weight"), by_name=True, samples=_bce_logits_samples,
          error_samples=lambda: [((_rand((3, 4)), _rand((3,))), {}, ValueError),
                                 ((_rand((3,)), np.arange(3)), {}, RuntimeError)],
          torch=lambda torch, x, t, weight=None, pos_weight=None, **kw:
              torch.nn.functional.binary_cross_entropy_with_logits(
                  x, t, weight, pos_weight=pos_weight, **kw))
del _fn
