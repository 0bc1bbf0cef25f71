"""Batching and shuffling arrays, with a seeded generator (``tg.manual_seed``).

>>> import numpy as np, tapegrad as tg
>>> ds = tg.data.TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
>>> loader = tg.data.DataLoader(ds, batch_size=2, shuffle=True, generator=0)
>>> [tuple(y.shape) for x, y in loader]
[(2,), (2,), (1,)]
"""
import math

import numpy as np

from .ops import as_tensor, stack
from .ops.creation import generator as _generator
from .tensor import Tensor, buffer

__all__ = ["TensorDataset", "DataLoader", "random_split", "batches"]


class TensorDataset:
    """Arrays (Tensors or NumPy) sharing their first dimension; item ``i`` is the tuple
    of their rows ``i``."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset: give at least one array")
        n = len(tensors[0])
        for t in tensors:
            if len(t) != n:
                raise ValueError(f"TensorDataset: size mismatch between arrays: "
                                 f"{[len(t) for t in tensors]}")
        self.tensors = tuple(t if isinstance(t, Tensor) else as_tensor(np.asarray(t))
                             for t in tensors)

    def __len__(self):
        return len(self.tensors[0])

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def take(self, index):
        """Rows ``index`` (an int array) of every array, as Tensors, in one gather."""
        return tuple(Tensor(buffer(t)[index]) for t in self.tensors)


def _rng(generator):
    if generator is None:
        return np.random.default_rng(_generator().integers(2 ** 63))
    if isinstance(generator, np.random.Generator):
        return generator
    return np.random.default_rng(generator)


class DataLoader:
    """Iterates a dataset in batches, as ``torch.utils.data.DataLoader``.

    ``generator`` is a ``numpy.random.Generator`` or a seed; by default each epoch's
    order is drawn from tapegrad's generator, so ``tg.manual_seed`` makes it
    reproducible. A ``TensorDataset`` is batched by fancy indexing (one gather per
    array); any other dataset by stacking its items."""

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, generator=None,
                 collate_fn=None):
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be positive, got {batch_size}")
        self.dataset, self.batch_size = dataset, int(batch_size)
        self.shuffle, self.drop_last = shuffle, drop_last
        self.collate_fn = collate_fn
        self._gen = None if generator is None else _rng(generator)

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            order = (self._gen or _rng(None)).permutation(n)
        else:
            order = np.arange(n)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            idx = order[start:start + self.batch_size]
            yield self._batch(idx)

    def _batch(self, idx):
        if hasattr(self.dataset, "take") and self.collate_fn is None:
            return self.dataset.take(idx)
        items = [self.dataset[int(i)] for i in idx]
        if self.collate_fn is not None:
            return self.collate_fn(items)
        return _collate(items)


def _collate(items):
    first = items[0]
    if isinstance(first, tuple) or isinstance(first, list):
        return type(first)(_collate([it[k] for it in items]) for k in range(len(first)))
    if isinstance(first, Tensor):
        return stack(items)
    return as_tensor(np.asarray(items))


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping ``Subset``s of the given lengths (or
    fractions summing to 1)."""
    n = len(dataset)
    if all(0 <= f <= 1 for f in lengths) and abs(sum(lengths) - 1) < 1e-9 and sum(lengths) != n:
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
    else:
        sizes = list(lengths)
    if sum(sizes) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _rng(generator).permutation(n)
    out, start = [], 0
    for s in sizes:
        out.append(Subset(dataset, perm[start:start + s]))
        start += s
    return out


class Subset:
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, np.asarray(indices)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.dataset[int(self.indices[i])]

    def take(self, idx):
        return self.dataset.take(self.indices[idx])


def batches(*arrays, batch_size, shuffle=True, generator=None, drop_last=False):
    """Yield tuples of Tensor batches of ``arrays`` (a shortcut for
    ``DataLoader(TensorDataset(*arrays), ...)``)."""
    return iter(DataLoader(TensorDataset(*arrays), batch_size=batch_size, shuffle=shuffle,
                           generator=generator, drop_last=drop_last))
