"""``torch.utils.data.distributed``'s path: ``DistributedSampler``."""
from ...data import DistributedSampler

__all__ = ["DistributedSampler"]
