"""``tg.backends``: the switches PyTorch programs set (``tg.backends.cudnn.benchmark``);
tapegrad has no cuDNN, so they are plain attributes that change nothing."""
from . import cudnn  # noqa: F401
