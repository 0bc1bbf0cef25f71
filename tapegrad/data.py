"""Datasets, samplers and ``DataLoader`` (``torch.utils.data``'s names, also importable as
``tapegrad.utils.data``), with a seeded order (``tg.manual_seed`` or ``generator=``).

>>> import numpy as np, tapegrad as tg
>>> ds = tg.data.TensorDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
>>> loader = tg.data.DataLoader(ds, batch_size=2, shuffle=True, generator=0)
>>> [tuple(y.shape) for x, y in loader]
[(2,), (2,), (1,)]

``num_workers=N`` loads batches in N worker **threads** (batch i on worker i % N, up to
``prefetch_factor * N`` batches ahead, yielded in order): the batches and their order
are those of ``num_workers=0``. A worker runs ``worker_init_fn(worker_id)`` first and
sees ``get_worker_info()`` (id, num_workers, seed = base seed + id, dataset). Threads,
not processes: datasets need not pickle, and NumPy work in ``__getitem__`` runs in
parallel (it releases the GIL), but tapegrad's global generator is shared, so random
draws inside ``__getitem__`` are not per-worker reproducible (seed a per-worker
``numpy.random.Generator`` from ``get_worker_info().seed`` for that).
"""
import bisect
import copy
import itertools
import math
import queue
import threading

import numpy as np

from .ops import as_tensor, stack
from .ops.creation import Generator, generator as _generator
from .tensor import Tensor, buffer

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset",
           "DataLoader", "random_split", "batches", "default_collate", "get_worker_info",
           "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "BatchSampler", "DistributedSampler"]


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and ``__len__``), as
    ``torch.utils.data.Dataset``; ``a + b`` concatenates."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset given by ``__iter__`` (a stream), as ``torch.utils.data.IterableDataset``.
    ``DataLoader`` iterates it once, in the calling thread, whatever ``num_workers``."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class ConcatDataset(Dataset):
    """The concatenation of map-style datasets."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise ValueError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        k = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[k - 1] if k > 0 else 0
        return self.datasets[k][idx - start]


class TensorDataset(Dataset):
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
    if isinstance(generator, Generator):   # tg.Generator: draws from its stream
        return np.random.default_rng(generator.integers(2 ** 63))
    return np.random.default_rng(generator)


class DataLoader:
    """Iterates a dataset in batches, as ``torch.utils.data.DataLoader``::

        DataLoader(dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
                   num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
                   timeout=0, worker_init_fn=None, multiprocessing_context=None,
                   generator=None, *, prefetch_factor=None, persistent_workers=False,
                   pin_memory_device="")

    ``generator`` is a ``numpy.random.Generator`` or a seed; by default each epoch's
    order is drawn from tapegrad's generator, so ``tg.manual_seed`` makes it
    reproducible. A ``TensorDataset`` is batched by fancy indexing (one gather per
    array); any other dataset by collating its items (``default_collate``).
    ``num_workers > 0`` loads in worker threads (see the module's docstring);
    ``pin_memory`` and ``multiprocessing_context`` are accepted and change nothing
    (there is no pinned host memory to copy through, and workers are threads)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device=""):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None:
            if drop_last:
                raise ValueError("batch_size=None option disables auto-batching and is "
                                 "mutually exclusive with drop_last")
        elif batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be positive, got {batch_size}")
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, "
                             "sampler and batch_sampler options")
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle, self.drop_last = shuffle, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.collate_fn = collate_fn
        self.num_workers, self.timeout = int(num_workers), timeout
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, prefetch_factor or 2
        self.persistent_workers, self.pin_memory = persistent_workers, pin_memory
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self._gen = None if generator is None else _rng(generator)
        self._pool = None

    def __len__(self):
        if self._iterable:
            return len(self.dataset)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _index_batches(self):
        """The index lists of this epoch's batches, drawn in the calling thread."""
        if self.batch_sampler is not None:
            return [np.asarray(list(b), dtype=np.int64) for b in self.batch_sampler]
        n = len(self.dataset)
        if self.sampler is not None:
            order = np.fromiter(iter(self.sampler), dtype=np.int64)
        elif self.shuffle:
            order = (self._gen or _rng(None)).permutation(n)
        else:
            order = np.arange(n)
        if self.batch_size is None:
            return [int(i) for i in order]
        return [order[start:start + self.batch_size]
                for start in range(0, len(self) * self.batch_size, self.batch_size)]

    def __iter__(self):
        if self._iterable:
            return self._iter_stream()
        batches = self._index_batches()
        if self.num_workers == 0:
            return (self._batch(idx) for idx in batches)
        return self._iter_workers(batches)

    def _iter_stream(self):
        it = iter(self.dataset)
        if self.batch_size is None:
            for item in it:
                yield item if self.collate_fn is None else self.collate_fn(item)
            return
        while True:
            items = list(itertools.islice(it, self.batch_size))
            if not items or (self.drop_last and len(items) < self.batch_size):
                return
            yield (self.collate_fn or default_collate)(items)

    def _iter_workers(self, batches):
        pool = self._pool
        if pool is None or pool.closed:
            pool = _WorkerPool(self)
            if self.persistent_workers:
                self._pool = pool
        try:
            yield from pool.run(batches)
        finally:
            if not self.persistent_workers:
                pool.close()

    def _batch(self, idx):
        if type(idx) is int:                      # batch_size=None: one item, not collated
            item = self.dataset[idx]
            return item if self.collate_fn is None else self.collate_fn(item)
        if hasattr(self.dataset, "take") and self.collate_fn is None:
            return self.dataset.take(idx)
        items = [self.dataset[int(i)] for i in idx]
        return (self.collate_fn or default_collate)(items)

    def __del__(self):
        pool = self.__dict__.get("_pool")
        if pool is not None:
            pool.close()


class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker: ``id``, ``num_workers``,
    ``seed`` (the epoch's base seed + id) and ``dataset``."""

    def __init__(self, id, num_workers, seed, dataset):  # noqa: A002 (PyTorch's name)
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return (f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, "
                f"seed={self.seed}, dataset={type(self.dataset).__name__})")


_worker = threading.local()


def get_worker_info():
    """The calling worker's ``WorkerInfo``; None outside a DataLoader worker."""
    return getattr(_worker, "info", None)


class _Failed:
    def __init__(self, exc):
        self.exc = exc


class _WorkerPool:
    """``num_workers`` daemon threads, each with its own queue of (batch number,
    indices); results come back on one queue and are yielded in batch order."""

    def __init__(self, loader):
        self.loader = loader
        self.n = loader.num_workers
        # the workers' base seed is read from a copy of the generator, so that loading
        # with workers draws exactly the numbers loading without them draws (same order)
        g = loader._gen if loader._gen is not None else _generator()
        self.base_seed = int(copy.deepcopy(g).integers(2 ** 63))
        self.inqs = [queue.Queue() for _ in range(self.n)]
        self.outq = queue.Queue()
        self.closed = False
        self.busy = False
        self.threads = [threading.Thread(target=self._work, args=(w,), daemon=True,
                                         name=f"tapegrad-DataLoader-worker-{w}")
                        for w in range(self.n)]
        for t in self.threads:
            t.start()

    def _work(self, w):
        loader = self.loader
        _worker.info = WorkerInfo(w, self.n, self.base_seed + w, loader.dataset)
        init_error = None
        if loader.worker_init_fn is not None:
            try:
                loader.worker_init_fn(w)
            except BaseException as e:  # reported with the first batch this worker gets
                init_error = e
        while True:
            task = self.inqs[w].get()
            if task is None:
                return
            epoch, i, idx = task
            if init_error is not None:
                self.outq.put((epoch, i, _Failed(init_error)))
                continue
            try:
                res = loader._batch(idx)
            except BaseException as e:
                res = _Failed(e)
            self.outq.put((epoch, i, res))

    def run(self, batches):
        if self.busy:
            raise RuntimeError("DataLoader: a persistent worker pool is already serving an "
                               "iteration; finish it before starting another")
        self.busy = True
        self.epoch = epoch = getattr(self, "epoch", 0) + 1
        try:
            n, sent, done = len(batches), 0, {}
            ahead = max(1, self.loader.prefetch_factor) * self.n
            while sent < min(n, ahead):
                self.inqs[sent % self.n].put((epoch, sent, batches[sent]))
                sent += 1
            for i in range(n):
                while i not in done:
                    try:
                        e, k, res = self.outq.get(timeout=self.loader.timeout or None)
                    except queue.Empty:
                        raise RuntimeError(f"DataLoader timed out after "
                                           f"{self.loader.timeout} seconds") from None
                    if e == epoch:       # a result of an abandoned epoch is dropped
                        done[k] = res
                res = done.pop(i)
                if sent < n:
                    self.inqs[sent % self.n].put((epoch, sent, batches[sent]))
                    sent += 1
                if isinstance(res, _Failed):
                    raise RuntimeError(f"Caught {type(res.exc).__name__} in DataLoader "
                                       f"worker process {i % self.n}: {res.exc}") from res.exc
                yield res
        finally:
            self.busy = False

    def close(self):
        if not self.closed:
            self.closed = True
            for q in self.inqs:
                q.put(None)


def default_collate(batch):
    """Stack a list of samples into a batch, as ``torch.utils.data.default_collate``:
    Tensors and NumPy arrays are stacked, numbers become a Tensor, tuples/lists and
    dicts are collated field by field, strings are left as a list."""
    return _collate(batch)


def _collate(items):
    first = items[0]
    if isinstance(first, (tuple, list)):
        if any(len(it) != len(first) for it in items):
            raise RuntimeError("each element in list of batch should be of equal size")
        cols = [_collate([it[k] for it in items]) for k in range(len(first))]
        if hasattr(first, "_fields"):        # a namedtuple keeps its type
            return type(first)(*cols)
        return cols if isinstance(first, list) else tuple(cols)
    if isinstance(first, dict):
        return {k: _collate([it[k] for it in items]) for k in first}
    if isinstance(first, Tensor):
        return stack(items)
    if isinstance(first, (str, bytes)):
        return list(items)
    if isinstance(first, float):
        return as_tensor(np.asarray(items, dtype=np.float64))
    return as_tensor(np.asarray(items))


class Sampler:
    """Base of the index samplers: subclasses define ``__iter__`` (and ``__len__``)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation of the indices (or ``num_samples`` draws with ``replacement``),
    from ``generator`` (a ``numpy.random.Generator`` or a seed) or tapegrad's."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        self._gen = None if generator is None else _rng(generator)
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, g = len(self.data_source), self._gen or _rng(None)
        if self.replacement:
            return iter(g.integers(0, n, size=self.num_samples).tolist())
        reps = -(-self.num_samples // n)
        order = np.concatenate([g.permutation(n) for _ in range(reps)])[:self.num_samples]
        return iter(order.tolist())

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator
        self._gen = None if generator is None else _rng(generator)

    def __iter__(self):
        perm = (self._gen or _rng(None)).permutation(len(self.indices))
        return iter([self.indices[i] for i in perm])

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


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


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``."""

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


class DistributedSampler(Sampler):
    """The indices of one rank's share of a dataset, as
    ``torch.utils.data.DistributedSampler`` (the same indices for the same arguments):
    shuffled by ``seed + epoch`` (call ``set_epoch(epoch)`` before each epoch), padded
    by repeating the first indices so that every rank gets ``ceil(len / num_replicas)``
    (or, with ``drop_last``, the tail dropped so that each gets
    ``len // num_replicas``), then rank r takes every ``num_replicas``-th index from r.

    ``dataset`` is a dataset or its length (also by the keyword ``dataset_len``);
    ``num_replicas`` and ``rank`` default to those of ``tg.distributed``'s process
    group. Pass it to ``DataLoader(..., sampler=sampler)``."""

    def __init__(self, dataset=None, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, *, dataset_len=None):
        if (dataset is None) == (dataset_len is None):
            raise TypeError("DistributedSampler: give the dataset (or its length) or "
                            "dataset_len, not both")
        if dataset is None:
            dataset = dataset_len
        if not isinstance(dataset, (int, np.integer)) and not hasattr(dataset, "__len__"):
            raise TypeError(f"DistributedSampler: dataset must be a sized dataset or its "
                            f"length (an int), got {type(dataset).__name__}")
        if num_replicas is None or rank is None:
            from . import distributed
            # (before init_process_group: PyTorch's ValueError, a RuntimeError too)
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be positive, got "
                             f"{num_replicas}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.dataset_len = int(dataset) if isinstance(dataset, (int, np.integer)) \
            else len(dataset)
        if self.dataset_len < 0:
            raise ValueError(f"DistributedSampler: a dataset length cannot be negative, got "
                             f"{self.dataset_len}")
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
