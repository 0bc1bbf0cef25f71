import numpy as np
import pytest

import tapegrad as tg


def test_loader_covers_everything_once_and_is_seeded():
    x = np.arange(23 * 2, dtype=np.float32).reshape(23, 2)
    y = np.arange(23)
    ds = tg.data.TensorDataset(x, y)
    tg.manual_seed(0)
    a = [b[1].numpy().copy() for b in tg.data.DataLoader(ds, batch_size=5, shuffle=True)]
    tg.manual_seed(0)
    b = [b[1].numpy().copy() for b in tg.data.DataLoader(ds, batch_size=5, shuffle=True)]
    assert [len(v) for v in a] == [5, 5, 5, 5, 3]
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert sorted(np.concatenate(a).tolist()) == list(range(23))
    loader = tg.data.DataLoader(ds, batch_size=5, drop_last=True)
    xs, ys = zip(*loader)
    assert len(loader) == 4 and np.array_equal(np.concatenate([v.numpy() for v in ys]), y[:20])
    assert np.array_equal(xs[0].numpy(), x[:5])


def test_random_split_and_errors():
    ds = tg.data.TensorDataset(np.arange(10))
    a, b = tg.data.random_split(ds, [0.8, 0.2], generator=1)
    assert len(a) == 8 and len(b) == 2
    got = np.concatenate([v.numpy() for (v,) in tg.data.DataLoader(a, batch_size=3)])
    assert len(got) == 8 and len(set(got.tolist())) == 8
    with pytest.raises(ValueError, match="size mismatch"):
        tg.data.TensorDataset(np.zeros(3), np.zeros(4))
