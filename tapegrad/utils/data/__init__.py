"""``tg.utils.data``: ``torch.utils.data``'s path to ``tapegrad.data`` (the same objects),
with its submodules ``distributed`` (``DistributedSampler``), ``sampler``, ``dataset``
and ``dataloader``."""
from ... import data as _data
from ...data import *  # noqa: F401,F403
from . import dataloader, dataset, distributed, sampler  # noqa: F401

__all__ = list(_data.__all__)
