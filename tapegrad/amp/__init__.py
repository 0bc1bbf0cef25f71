"""``tg.amp``: mixed precision, as ``torch.amp``: ``GradScaler`` (loss scaling for
float16 training)."""
from .grad_scaler import GradScaler

__all__ = ["GradScaler"]
