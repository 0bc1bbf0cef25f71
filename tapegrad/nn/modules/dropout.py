"""The dropouts (``torch.nn.modules.dropout``): Dropout, Dropout1d/2d/3d,
AlphaDropout, FeatureAlphaDropout, drawing from tapegrad's generator."""
from .. import functional as F
from ..module import Module

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]


class Dropout(Module):
    """Zeroes elements with probability ``p`` during training, scaling the rest, as
    ``torch.nn.Dropout``."""
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        if not self.training or self.p == 0:
            return input
        return F.dropout(input, self.p, True, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


def _dropout(name, fn):
    def forward(self, input):
        return getattr(F, fn)(input, self.p, self.training, self.inplace)
    return type(name, (Dropout,), {"forward": forward, "__module__": __name__,
                                   "__doc__": f"``F.{fn}`` as a module."})


Dropout1d = _dropout("Dropout1d", "dropout1d")
Dropout3d = _dropout("Dropout3d", "dropout3d")
AlphaDropout = _dropout("AlphaDropout", "alpha_dropout")
FeatureAlphaDropout = _dropout("FeatureAlphaDropout", "feature_alpha_dropout")


class Dropout2d(Dropout):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` (training mode)."""

    def forward(self, input):
        if not self.training or self.p == 0:
            return input
        return F.dropout2d(input, self.p, True, self.inplace)
