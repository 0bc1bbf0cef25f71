"""``tg.utils.checkpoint``: ``torch.utils.checkpoint``'s path to ``tg.checkpoint``."""
from ..autodiff import checkpoint

__all__ = ["checkpoint"]
