"""The losses (``torch.nn.modules.loss``), each over its ``tg.nn.functional``
function, on the ``_Loss`` base (``reduction``; the losses that take PyTorch's
deprecated ``size_average``/``reduce`` flags map them to it)."""
from .. import functional as F
from ..module import Module
from .linear import Linear

__all__ = ["L1Loss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "GaussianNLLLoss", "KLDivLoss",
           "MSELoss", "BCELoss", "BCEWithLogitsLoss", "HingeEmbeddingLoss",
           "MultiLabelMarginLoss", "SmoothL1Loss", "HuberLoss", "SoftMarginLoss",
           "CrossEntropyLoss", "LinearCrossEntropyLoss", "MultiLabelSoftMarginLoss",
           "CosineEmbeddingLoss", "MarginRankingLoss", "MultiMarginLoss",
           "TripletMarginLoss", "TripletMarginWithDistanceLoss", "CTCLoss"]


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"{type(self).__name__}: reduction must be 'none', 'mean' or "
                             f"'sum', got {reduction!r}")
        self.reduction = reduction


# PyTorch's base of the losses with a class ``weight``; tapegrad's take it on ``_Loss``
_WeightedLoss = _Loss


class _LegacyLoss(_Loss):
    """A loss taking PyTorch's deprecated ``size_average``/``reduce`` flags too."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        if size_average is not None or reduce is not None:
            sa = True if size_average is None else size_average
            rd = True if reduce is None else reduce
            reduction = ("mean" if sa else "sum") if rd else "none"
        super().__init__(reduction)


class CrossEntropyLoss(_LegacyLoss):
    """Cross-entropy between logits and class indices or probabilities, as
    ``torch.nn.CrossEntropyLoss``."""
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        kw = {}
        if self.weight is not None:
            kw["weight"] = self.weight
        if self.ignore_index != -100:
            kw["ignore_index"] = self.ignore_index
        if self.label_smoothing:
            kw["label_smoothing"] = self.label_smoothing
        if self.reduction != "mean":
            kw["reduction"] = self.reduction
        return F.cross_entropy(input, target, **kw)


class NLLLoss(_LegacyLoss):
    """Negative log-likelihood of class indices given log-probabilities, as
    ``torch.nn.NLLLoss``."""
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_LegacyLoss):
    """Mean (or summed) squared error, as ``torch.nn.MSELoss``."""
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_LegacyLoss):
    """Mean (or summed) absolute error, as ``torch.nn.L1Loss``."""
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class BCELoss(_LegacyLoss):
    """Binary cross-entropy between probabilities and targets, as ``torch.nn.BCELoss``."""
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_LegacyLoss):
    """Binary cross-entropy on logits (a sigmoid inside, numerically stable), as
    ``torch.nn.BCEWithLogitsLoss``."""
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, weight=self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class CosineEmbeddingLoss(_LegacyLoss):
    """Loss on the cosine similarity of pairs labelled similar (1) or dissimilar (-1), as
    ``torch.nn.CosineEmbeddingLoss``."""
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin,
                                       reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Negative log-likelihood of a Gaussian with predicted mean and variance, as
    ``torch.nn.GaussianNLLLoss``."""
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps,
                                   reduction=self.reduction)


class HingeEmbeddingLoss(_LegacyLoss):
    """Hinge loss on distances labelled 1 or -1, as ``torch.nn.HingeEmbeddingLoss``."""
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin,
                                      reduction=self.reduction)


class KLDivLoss(Module):
    """The Kullback-Leibler divergence of log-probabilities from targets, as
    ``torch.nn.KLDivLoss``."""
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__()
        if size_average is not None or reduce is not None:
            sa = True if size_average is None else size_average
            rd = True if reduce is None else reduce
            reduction = ("mean" if sa else "sum") if rd else "none"
        if reduction not in ("none", "mean", "sum", "batchmean"):
            raise ValueError(f"KLDivLoss: reduction must be 'none', 'mean', 'sum' or "
                             f"'batchmean', got {reduction!r}")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class MarginRankingLoss(_LegacyLoss):
    """Ranking loss of two inputs with a target of 1 or -1, as
    ``torch.nn.MarginRankingLoss``."""
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin,
                                     reduction=self.reduction)


class MultiMarginLoss(_LegacyLoss):
    """Multi-class hinge loss, as ``torch.nn.MultiMarginLoss``."""
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        self.p, self.margin = p, margin
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin,
                                   weight=self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_LegacyLoss):
    """Multi-class multi-label hinge loss, as ``torch.nn.MultiLabelMarginLoss``."""
    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_LegacyLoss):
    """Multi-label one-versus-all loss on logits, as
    ``torch.nn.MultiLabelSoftMarginLoss``."""
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight,
                                             reduction=self.reduction)


class PoissonNLLLoss(_LegacyLoss):
    """Negative log-likelihood of a Poisson target, as ``torch.nn.PoissonNLLLoss``."""
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class SoftMarginLoss(_LegacyLoss):
    """Two-class logistic loss with targets 1 or -1, as ``torch.nn.SoftMarginLoss``."""
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class TripletMarginLoss(_LegacyLoss):
    """Triplet loss on anchor, positive and negative embeddings (p-norm distance), as
    ``torch.nn.TripletMarginLoss``."""
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got "
                             f"{margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p,
                                     eps=self.eps, swap=self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet loss with a given distance function, as
    ``torch.nn.TripletMarginWithDistanceLoss``."""
    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater "
                             f"than 0, got {margin} instead")
        self.distance_function = distance_function
        self.margin, self.swap = margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)


class NLLLoss2d(NLLLoss):
    """Deprecated: ``NLLLoss`` (which takes (N, C, H, W) inputs itself)."""


class LinearCrossEntropyLoss(Module):
    """``cross_entropy(linear(input), target)``; the projection ``linear`` (``Linear(
    in_features, num_classes, bias)``)."""

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None,
                 dtype=None, reduction="mean", weight=None, ignore_index=None,
                 label_smoothing=0.0, options=None):
        super().__init__()
        if tuple(out_features):
            raise NotImplementedError("LinearCrossEntropyLoss: out_features is not supported")
        self.linear = Linear(in_features, num_classes, bias=bias, device=device, dtype=dtype)
        self.reduction, self.ignore_index = reduction, ignore_index
        self.label_smoothing, self.options = label_smoothing, options
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.linear_cross_entropy(input, self.linear.weight, target,
                                      linear_bias=self.linear.bias, weight=self.weight,
                                      reduction=self.reduction, ignore_index=self.ignore_index,
                                      label_smoothing=self.label_smoothing)


class CTCLoss(_Loss):
    """The CTC loss of ``F.ctc_loss`` (blank, reduction, zero_infinity as PyTorch)."""

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                          self.reduction, self.zero_infinity)


class SmoothL1Loss(_LegacyLoss):
    """Smooth L1 loss: quadratic below ``beta``, linear above, as
    ``torch.nn.SmoothL1Loss``."""
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Huber loss: quadratic below ``delta``, linear above, as ``torch.nn.HuberLoss``."""
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)
