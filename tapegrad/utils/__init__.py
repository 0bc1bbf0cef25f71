"""``tg.utils``: PyTorch's ``torch.utils`` paths that programs import from:
``tg.utils.data`` (the names of ``tapegrad.data``: ``from tapegrad.utils.data import
DataLoader, Dataset, TensorDataset, random_split``) and ``tg.utils.checkpoint``."""
from . import checkpoint, data  # noqa: F401

__all__ = ["checkpoint", "data"]
