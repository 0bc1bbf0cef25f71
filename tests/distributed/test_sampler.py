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
