"""``torch.utils.data``'s names, from ``tapegrad.data``."""
from ..data import (DataLoader, DistributedSampler, Subset, TensorDataset,  # noqa: F401
                    random_split)

__all__ = ["DataLoader", "DistributedSampler", "Subset", "TensorDataset", "random_split"]
