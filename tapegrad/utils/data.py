"""``tg.utils.data``: ``torch.utils.data``'s path to ``tapegrad.data`` (the same objects)."""
from .. import data as _data
from ..data import *  # noqa: F401,F403

__all__ = list(_data.__all__)
