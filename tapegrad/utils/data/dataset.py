"""``torch.utils.data.dataset``'s path to ``tapegrad.data``'s datasets."""
from ...data import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split  # noqa: F401

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset",
           "random_split"]
