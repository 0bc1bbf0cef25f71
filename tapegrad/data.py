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

__all__ = ["TensorDataset", "DataLoader", "random_split", "batches", "DistributedSampler"]


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
                 collate_fn=None, sampler=None):
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be positive, got {batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        self.dataset, self.batch_size = dataset, int(batch_size)
        self.shuffle, self.drop_last = shuffle, drop_last
        self.sampler = sampler
        self.collate_fn = collate_fn
        self._gen = None if generator is None else _rng(generator)

    def __len__(self):
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        if self.sampler is not None:
            order = np.fromiter(iter(self.sampler), dtype=np.int64)
        elif self.shuffle:
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


def _torch_randperm(n, seed):
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed))``, exactly:
    PyTorch's CPU randperm is a Fisher-Yates shuffle drawing ``mt19937() % (n - i)``
    from MT19937 seeded with the low 32 bits of the seed, which is NumPy's legacy
    ``RandomState(seed)`` (for n below 2**32 / 20, where PyTorch switches to 64-bit
    draws)."""
    if n >= (2 ** 32 - 1) // 20:
        raise ValueError(f"DistributedSampler: {n} samples is past the size whose "
                         f"shuffle matches PyTorch's (2**32 / 20)")
    out = np.arange(n, dtype=np.int64)
    if n < 2:
        return out
    draws = np.random.RandomState(seed % 2 ** 32).randint(0, 2 ** 32, size=n - 1,
                                                          dtype=np.uint64)
    jumps = (draws % (n - np.arange(n - 1, dtype=np.uint64))).astype(np.int64)
    jumps += np.arange(n - 1)
    for i, j in enumerate(jumps.tolist()):
        out[i], out[j] = out[j], out[i]
    return out


class DistributedSampler:
    """The indices of one rank's share of a dataset, as
    ``torch.utils.data.DistributedSampler`` (the same indices for the same arguments):
    shuffled by ``seed + epoch`` (call ``set_epoch(epoch)`` before each epoch), padded
    by repeating the first indices so that every rank gets ``ceil(len / num_replicas)``
    (or, with ``drop_last``, the tail dropped so that each gets
    ``len // num_replicas``), then rank r takes every ``num_replicas``-th index from r.

    ``dataset`` is a dataset or its length; ``num_replicas`` and ``rank`` default to
    those of ``tg.distributed``'s process group. Pass it to
    ``DataLoader(..., sampler=sampler)``."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from . import distributed
            if not distributed.is_initialized():
                raise RuntimeError("DistributedSampler: give num_replicas and rank, or call "
                                   "tg.distributed.init_process_group() first")
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be positive, got "
                             f"{num_replicas}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset_len = int(dataset) if isinstance(dataset, (int, np.integer)) \
            else len(dataset)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.epoch = 0
        n, r = self.dataset_len, self.num_replicas
        if drop_last and n % r != 0:
            self.num_samples = math.ceil((n - r) / r)
        else:
            self.num_samples = math.ceil(n / r)
        self.total_size = self.num_samples * r

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __len__(self):
        return self.num_samples

    def indices(self):
        """This rank's indices for the current epoch, as an int64 array."""
        n = self.dataset_len
        idx = _torch_randperm(n, self.seed + self.epoch) if self.shuffle else \
            np.arange(n, dtype=np.int64)
        if not self.drop_last:
            pad = self.total_size - n
            if pad > 0 and n > 0:
                idx = np.concatenate([idx, np.resize(idx, pad)])
        else:
            idx = idx[:self.total_size]
        return idx[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices().tolist())
