"""``tg.amp``: mixed precision, as ``torch.amp``: ``autocast`` (ops run in a lower
precision dtype per PyTorch's op lists) and ``GradScaler`` (loss scaling for
float16 training)."""
from .autocast_mode import (
    autocast,
    clear_autocast_cache,
    custom_bwd,
    custom_fwd,
    get_autocast_dtype,
    is_autocast_available,
    is_autocast_cache_enabled,
    is_autocast_enabled,
)
from .grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "is_autocast_available", "is_autocast_enabled",
           "get_autocast_dtype",
           "clear_autocast_cache", "is_autocast_cache_enabled", "custom_fwd", "custom_bwd"]
