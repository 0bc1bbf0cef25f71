"""``nn.Dropout2d``, ``nn.SmoothL1Loss``, ``nn.HuberLoss`` (issue 17's surface)."""
from . import functional as F
from .layers import Dropout, _Loss

__all__ = ["Dropout2d", "SmoothL1Loss", "HuberLoss"]


class Dropout2d(Dropout):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` (training mode)."""

    def forward(self, input):
        if not self.training or self.p == 0:
            return input
        return F.dropout2d(input, self.p, True, self.inplace)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)
