"""``tg.utils``: PyTorch's ``torch.utils`` paths that programs import from:
``tg.utils.data`` (the names of ``tapegrad.data``: ``from tapegrad.utils.data import
DataLoader, Dataset, TensorDataset, random_split``), ``tg.utils.checkpoint`` and
``tg.utils.tensorboard`` (``SummaryWriter``, on tensorboardX, imported on first use)."""
from . import checkpoint, data, tensorboard  # noqa: F401

__all__ = ["checkpoint", "data", "tensorboard"]
