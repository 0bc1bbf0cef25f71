"""PixelShuffle and PixelUnshuffle (``torch.nn.modules.pixelshuffle``)."""
from .. import functional as F
from ..module import Module

__all__ = ["PixelShuffle", "PixelUnshuffle"]


class PixelShuffle(Module):
    """Rearranges channels into space: ``(C r^2, H, W)`` to ``(C, H r, W r)``, as
    ``torch.nn.PixelShuffle``."""
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """The inverse of ``PixelShuffle``: space into channels, as
    ``torch.nn.PixelUnshuffle``."""
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"
