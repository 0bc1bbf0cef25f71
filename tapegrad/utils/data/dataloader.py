"""``torch.utils.data.dataloader``'s path to ``tapegrad.data``'s ``DataLoader``."""
from ...data import DataLoader, default_collate, get_worker_info  # noqa: F401

__all__ = ["DataLoader", "default_collate", "get_worker_info"]
