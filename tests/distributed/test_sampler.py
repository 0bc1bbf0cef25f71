"""tg.data.DistributedSampler gives exactly torch.utils.data.DistributedSampler's
indices, and the ranks together cover the data once per epoch."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg

torch = pytest.importorskip("torch")
from torch.utils.data import DistributedSampler as TorchSampler  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), replicas=st.integers(1, 7), shuffle=st.booleans(),
       seed=st.integers(0, 2 ** 40), epoch=st.integers(0, 5), drop_last=st.booleans())
def test_same_indices_as_torch(n, replicas, shuffle, seed, epoch, drop_last):
    for rank in range(replicas):
        ours = tg.data.DistributedSampler(n, num_replicas=replicas, rank=rank,
                                          shuffle=shuffle, seed=seed, drop_last=drop_last)
        theirs = TorchSampler(range(n), num_replicas=replicas, rank=rank, shuffle=shuffle,
                              seed=seed, drop_last=drop_last)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert len(ours) == len(theirs)
        assert list(ours) == list(theirs)


def test_the_ranks_cover_the_data_once_per_epoch():
    n, replicas = 1437, 4
    for epoch in range(3):
        parts = []
        for rank in range(replicas):
            s = tg.data.DistributedSampler(n, num_replicas=replicas, rank=rank, seed=3)
            s.set_epoch(epoch)
            parts.append(s.indices())
        every = np.concatenate(parts)
        assert len(every) == 1440  # padded to a multiple of 4 with 3 repeats
        assert set(every.tolist()) == set(range(n))
        assert np.bincount(every, minlength=n).max() == 2
    # another epoch, another order
    a = tg.data.DistributedSampler(n, 4, 0, seed=3)
    b = tg.data.DistributedSampler(n, 4, 0, seed=3)
    b.set_epoch(1)
    assert list(a) != list(b)


def test_a_large_dataset_matches_torch():
    s = tg.data.DistributedSampler(200_000, num_replicas=3, rank=2, seed=11)
    t = TorchSampler(range(200_000), num_replicas=3, rank=2, seed=11)
    assert list(s) == list(t)


def test_dataloader_takes_a_sampler():
    x = np.arange(10.0).reshape(10, 1)
    y = np.arange(10)
    s = tg.data.DistributedSampler(10, num_replicas=2, rank=1, shuffle=False)
    batches = list(tg.data.DataLoader(tg.data.TensorDataset(x, y), batch_size=2, sampler=s))
    assert [b[1].numpy().tolist() for b in batches] == [[1, 3], [5, 7], [9]]
    with pytest.raises(ValueError, match="mutually exclusive"):
        tg.data.DataLoader(tg.data.TensorDataset(x, y), sampler=s, shuffle=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Invalid rank 2"):
        tg.data.DistributedSampler(10, num_replicas=2, rank=2)
    with pytest.raises(RuntimeError, match="init_process_group"):
        tg.data.DistributedSampler(10)
    with pytest.raises(ValueError, match="not been initialized"):  # PyTorch's class
        tg.data.DistributedSampler(10)
    with pytest.raises(ValueError, match="not been initialized"):
        tg.nn.parallel.DistributedDataParallel(tg.nn.Linear(2, 2))


def test_pytorch_and_api_spellings():
    # API.md's keyword (dataset_len), PyTorch's (dataset: a sized dataset), its base
    # class and attributes, and torch.utils.data's module paths
    from tapegrad.utils.data.distributed import DistributedSampler
    from tapegrad.utils.data.sampler import Sampler
    assert DistributedSampler is tg.data.DistributedSampler
    a = DistributedSampler(dataset_len=10, num_replicas=3, rank=1, seed=4)
    ds = tg.data.TensorDataset(np.zeros((10, 2)))
    b = DistributedSampler(dataset=ds, num_replicas=3, rank=1, seed=4)
    t = TorchSampler(range(10), num_replicas=3, rank=1, seed=4)
    assert list(a) == list(b) == list(t)
    assert isinstance(a, Sampler) and isinstance(a, tg.data.Sampler)
    assert b.dataset is ds and a.dataset == 10
    assert (a.num_samples, a.total_size, a.epoch) == (t.num_samples, t.total_size, 0)
    from tapegrad.utils.data.dataloader import DataLoader
    from tapegrad.utils.data.dataset import TensorDataset
    assert DataLoader is tg.data.DataLoader and TensorDataset is tg.data.TensorDataset
    with pytest.raises(TypeError, match="dataset_len"):
        tg.data.DistributedSampler(num_replicas=2, rank=0)
    with pytest.raises(TypeError, match="sized dataset"):
        tg.data.DistributedSampler(iter([1, 2]), num_replicas=2, rank=0)


def test_tg_distributed_has_torch_distributed_names():
    # what a PyTorch script reaches for (the values are checked under mpiexec)
    import tapegrad.distributed as dist
    names = ["init_process_group", "destroy_process_group", "is_initialized", "is_available",
             "get_rank", "get_world_size", "get_backend", "barrier", "monitored_barrier",
             "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
             "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
             "all_to_all_single", "send", "recv", "isend", "irecv", "P2POp",
             "batch_isend_irecv", "all_gather_object", "gather_object",
             "broadcast_object_list", "scatter_object_list", "new_group", "group",
             "GroupMember", "Backend", "ReduceOp", "Work", "DistError", "DistBackendError",
             "is_mpi_available", "is_nccl_available", "is_gloo_available",
             "get_process_group_ranks", "get_global_rank", "get_group_rank"]
    missing = [n for n in names if not hasattr(dist, n)]
    assert not missing, missing
    assert set(names) <= set(dist.__all__)
    import torch.distributed as tdist
    assert all(hasattr(tdist, n) for n in names)
    for op in ("SUM", "AVG", "PRODUCT", "MAX", "MIN", "BAND", "BOR", "BXOR"):
        assert hasattr(dist.ReduceOp, op) and hasattr(tdist.ReduceOp, op)
    assert issubclass(dist.DistBackendError, dist.DistError)
    assert issubclass(dist.DistError, RuntimeError)
    with pytest.raises(ValueError, match="not been initialized"):
        dist.get_rank()
    with pytest.raises(RuntimeError, match="not been initialized"):
        dist.all_reduce(tg.ones(2))
