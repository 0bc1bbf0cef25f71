"""``tg.utils``, PyTorch's ``torch.utils`` import path: ``tg.utils.data`` is
``tg.data`` under PyTorch's name (``from torch.utils.data import DataLoader``)."""
from . import data  # noqa: F401
