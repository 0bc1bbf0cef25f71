"""``torch.utils.data.dataset``'s path to ``tapegrad.data``'s datasets."""
from ...data import (ConcatDataset, Dataset, IterableDataset, Subset,  # noqa: F401
                     TensorDataset, random_split)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset",
           "random_split"]
