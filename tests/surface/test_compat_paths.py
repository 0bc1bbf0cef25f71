"""PyTorch programs' import paths, DataLoader workers, legacy ``Tensor`` constructors,
``Size`` and dtype reprs, each against PyTorch's behaviour."""
import importlib
import pickle
import threading
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import tapegrad as tg
from tapegrad.utils.data import (
    DataLoader,
    Dataset,
    IterableDataset,
    TensorDataset,
    get_worker_info,
    random_split,
)


# ---------------------------------------------------------------- import paths
def test_torch_utils_data_path():
    import tapegrad.utils.data as ud
    for name in ud.__all__:
        assert getattr(ud, name) is getattr(tg.data, name)
    assert tg.utils.data.DataLoader is tg.data.DataLoader is DataLoader
    for name in ("DataLoader", "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset",
                 "Subset", "random_split", "default_collate", "get_worker_info", "Sampler",
                 "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler",
                 "DistributedSampler"):
        assert hasattr(tdata, name) and hasattr(ud, name), name
    from tapegrad.utils.checkpoint import checkpoint
    assert checkpoint is tg.checkpoint


def test_nn_modules_paths_match_torch_layout():
    import torch.nn.modules as tm
    checked = 0
    for sub in tg.nn.modules.__all__[1:]:
        ours = importlib.import_module(f"tapegrad.nn.modules.{sub}")
        assert ours is getattr(tg.nn.modules, sub)
        theirs = importlib.import_module(f"torch.nn.modules.{sub}")
        for name in theirs.__all__:
            if hasattr(tg.nn, name):     # every class tapegrad has is under PyTorch's path
                assert getattr(ours, name) is getattr(tg.nn, name), (sub, name)
                assert name in ours.__all__
                checked += 1
            elif name in ours.__all__:  # (a name only this path has: module.py's hooks)
                assert callable(getattr(ours, name)), (sub, name)
            else:
                with pytest.raises(AttributeError, match="tapegrad does not yet"):
                    getattr(ours, name)
        assert set(ours.__all__) <= set(theirs.__all__)
    assert checked >= 40
    assert set(tg.nn.modules.__all__[1:]) <= {m for m in dir(tm) if not m.startswith("_")}
    from tapegrad.nn.modules.loss import MSELoss, _Loss
    assert MSELoss is tg.nn.MSELoss
    for ours_cls, theirs_cls, base, tbase in [
            (tg.nn.MSELoss, torch.nn.MSELoss, tg.nn.modules.loss._Loss,
             torch.nn.modules.loss._Loss),
            (tg.nn.BatchNorm2d, torch.nn.BatchNorm2d, tg.nn.modules.batchnorm._BatchNorm,
             torch.nn.modules.batchnorm._BatchNorm)]:
        assert issubclass(ours_cls, base) == issubclass(theirs_cls, tbase) is True
    assert issubclass(tg.nn.CrossEntropyLoss, _Loss)
    assert tg.nn.modules.Module is tg.nn.Module
    import tapegrad.backends.cudnn  # noqa: F401
    import tapegrad.nn.parallel  # noqa: F401


# ---------------------------------------------------------------- DataLoader
class _Squares(Dataset):
    """Items (features, label); records which thread served each index."""

    def __init__(self, n=23, delay=0.0):
        self.n, self.delay, self.threads, self.infos = n, delay, set(), []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        self.threads.add(threading.get_ident())
        self.infos.append(get_worker_info())
        return np.array([i, i * i], dtype=np.float64), i


@pytest.mark.parametrize("seeding", ["manual_seed", "generator"])
def test_workers_give_the_order_of_num_workers_0(seeding):
    def epochs(nw, persistent=False):
        tg.manual_seed(5)
        ds = _Squares(delay=0.0005)
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=nw,
                            generator=11 if seeding == "generator" else None,
                            persistent_workers=persistent, pin_memory=True)
        out = [[(x.numpy().copy(), y.numpy().copy()) for x, y in loader] for _ in range(3)]
        return out, ds
    ref, ds0 = epochs(0)
    assert len(ds0.threads) == 1 and ds0.infos[0] is None
    for nw, persistent in [(1, False), (3, False), (3, True)]:
        got, ds = epochs(nw, persistent)
        assert len(got) == len(ref)
        for e_ref, e_got in zip(ref, got):
            assert len(e_ref) == len(e_got) == 6
            for (x0, y0), (x1, y1) in zip(e_ref, e_got):
                np.testing.assert_array_equal(x0, x1)
                np.testing.assert_array_equal(y0, y1)
        assert threading.get_ident() not in ds.threads
        assert {i.id for i in ds.infos} <= set(range(nw)) and all(
            i.num_workers == nw and i.dataset is ds for i in ds.infos)
    # epochs differ from each other (a fresh permutation each)
    assert not np.array_equal(ref[0][0][1], ref[1][0][1])


def test_batches_equal_torch_without_shuffle():
    ds = _Squares(n=10)
    for nw in (0, 2):
        ours = list(DataLoader(ds, batch_size=3, num_workers=nw))
        theirs = list(tdata.DataLoader(ds, batch_size=3))
        assert len(ours) == len(theirs) == 4
        for (x, y), (tx, ty) in zip(ours, theirs):
            np.testing.assert_array_equal(x.numpy(), tx.numpy())
            np.testing.assert_array_equal(y.numpy(), ty.numpy())
            assert x.dtype.name == str(tx.dtype).split(".")[1]
            assert y.dtype.name == str(ty.dtype).split(".")[1]


def test_worker_init_fn_errors_and_timeout():
    seen = []
    lock = threading.Lock()

    def init(worker_id):
        with lock:
            seen.append((worker_id, get_worker_info().id, get_worker_info().seed))
    loader = DataLoader(_Squares(n=12), batch_size=2, num_workers=3, worker_init_fn=init,
                        prefetch_factor=1)
    assert len(list(loader)) == 6
    assert sorted(s[0] for s in seen) == [0, 1, 2] and all(a == b for a, b, _ in seen)
    assert len({s[2] for s in seen}) == 3           # base seed + worker id
    assert get_worker_info() is None

    class Bad(_Squares):
        def __getitem__(self, i):
            if i == 7:
                raise KeyError("no item 7")
            return super().__getitem__(i)
    with pytest.raises(RuntimeError, match="KeyError.*no item 7"):
        list(DataLoader(Bad(n=10), batch_size=2, num_workers=2))
    with pytest.raises(RuntimeError, match="timed out after 0.05 seconds"):
        list(DataLoader(_Squares(n=4, delay=0.5), batch_size=2, num_workers=1, timeout=0.05))


@pytest.mark.parametrize("kw,msg", [
    (dict(num_workers=-1), "num_workers option should be non-negative"),
    (dict(prefetch_factor=2), "prefetch_factor option could only be specified"),
    (dict(persistent_workers=True), "persistent_workers option needs num_workers > 0"),
    (dict(timeout=-1), "timeout option should be non-negative"),
    (dict(shuffle=True, sampler=[0, 1]), "sampler option is mutually exclusive with shuffle"),
    (dict(batch_sampler=[[0, 1]], batch_size=2), "batch_sampler option is mutually exclusive"),
])
def test_loader_arguments_checked_as_torch(kw, msg):
    with pytest.raises(ValueError, match=msg):
        DataLoader(_Squares(), **kw)
    with pytest.raises(ValueError, match=msg):
        tdata.DataLoader(_Squares(), **kw)


def test_samplers_batch_sampler_and_unbatched_as_torch():
    ds = _Squares(n=7)
    for ours, theirs in [(tg.data.SequentialSampler(ds), tdata.SequentialSampler(ds)),
                         (tg.data.BatchSampler(tg.data.SequentialSampler(ds), 3, False),
                          tdata.BatchSampler(tdata.SequentialSampler(ds), 3, False)),
                         (tg.data.BatchSampler(range(7), 3, True),
                          tdata.BatchSampler(range(7), 3, True))]:
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    r = list(tg.data.RandomSampler(ds, generator=0))
    assert sorted(r) == list(range(7)) and len(tg.data.RandomSampler(ds)) == 7
    assert len(list(tg.data.RandomSampler(ds, replacement=True, num_samples=20))) == 20
    assert sorted(tg.data.SubsetRandomSampler([5, 1, 3])) == [1, 3, 5]
    bs = [[6, 0], [3], [2, 4, 5]]
    ours = [y.tolist() for _, y in DataLoader(ds, batch_sampler=bs, num_workers=2)]
    theirs = [y.tolist() for _, y in tdata.DataLoader(ds, batch_sampler=bs)]
    assert ours == theirs == bs
    ours = list(DataLoader(ds, batch_size=None))
    theirs = list(tdata.DataLoader(ds, batch_size=None))
    assert len(ours) == len(theirs) == 7
    np.testing.assert_array_equal(np.asarray(ours[3][0]), theirs[3][0].numpy())


def test_datasets_collate_and_split_as_torch():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    class TorchStream(tdata.IterableDataset):
        def __iter__(self):
            return iter(range(7))
    for drop_last in (False, True):
        ours = [b.tolist() for b in DataLoader(Stream(), batch_size=3, drop_last=drop_last)]
        assert ours == [b.tolist() for b in tdata.DataLoader(TorchStream(), batch_size=3,
                                                             drop_last=drop_last)]
    with pytest.raises(ValueError):
        DataLoader(Stream(), shuffle=True)
    a, b = TensorDataset(np.arange(3.0)), TensorDataset(np.arange(3.0, 5.0))
    cat = a + b
    assert len(cat) == 5 and float(cat[3][0]) == 3.0 and float(cat[-1][0]) == 4.0
    batch = [{"x": np.ones(2) * i, "n": i, "f": 0.5 * i, "s": str(i)} for i in range(3)]
    ours, theirs = tg.data.default_collate(batch), tdata.default_collate(batch)
    for k in ("x", "n", "f"):
        np.testing.assert_array_equal(ours[k].numpy(), theirs[k].numpy())
        assert ours[k].dtype.name == str(theirs[k].dtype).split(".")[1], k
    assert ours["s"] == theirs["s"] == ["0", "1", "2"]
    parts = random_split(TensorDataset(np.arange(10)), [0.7, 0.3], generator=1)
    assert [len(p) for p in parts] == [7, 3]
    assert isinstance(parts[0], Dataset)


# ---------------------------------------------------------------- legacy Tensor
def test_legacy_tensor_constructor_vs_torch():
    for args in [(3, 4), (3,), (0, 2)]:
        a, b = tg.Tensor(*args), torch.Tensor(*args)
        assert tuple(a.shape) == tuple(b.shape) and a.dtype.name == "float32"
    for data in ([1, 2], [[1, 2], [3, 4]], (2, 3), [True, False], range(3)):
        np.testing.assert_array_equal(tg.Tensor(data).numpy(), torch.Tensor(data).numpy())
        assert tg.Tensor(data).dtype == tg.float32
    assert tuple(tg.Tensor().shape) == tuple(torch.Tensor().shape) == (0,)
    assert tuple(tg.Tensor(tg.Size([2, 5])).shape) == (2, 5)
    t = tg.tensor([1, 2])
    s = tg.Tensor(t)   # as PyTorch: the same memory, whatever the dtype
    s[0] = 7
    assert t.tolist() == [7, 2] and s.dtype == tg.int64
    with pytest.raises(RuntimeError, match="negative dimension"):
        tg.Tensor(-1)
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.Tensor(-1)
    for bad in [(2.5,), (2, "a")]:
        with pytest.raises(TypeError):
            tg.Tensor(*bad)
        with pytest.raises(TypeError):
            torch.Tensor(*bad)
    assert tuple(tg.LongTensor(2).shape) == (2,) and tg.LongTensor(2).dtype == tg.int64
    tg.set_default_dtype(tg.float64)
    try:
        assert tg.Tensor(2).dtype == tg.float64 and tg.Tensor([1]).dtype == tg.float64
    finally:
        tg.set_default_dtype(tg.float32)
    p = tg.nn.Parameter(tg.Tensor(3, 2))   # the old init idiom
    assert p.requires_grad and tuple(p.shape) == (3, 2)


# ---------------------------------------------------------------- Size and dtypes
def _torch_text(s):
    return s.replace("torch.", "tapegrad.")


def test_size_behaves_as_torch_size():
    x, tx = tg.ones(2, 3, 4), torch.ones(2, 3, 4)
    for ours, theirs in [(x.shape, tx.shape), (x.size(), tx.size()), (x.shape[1:], tx.shape[1:]),
                         (x.shape + (5,), tx.shape + (5,)), ((1,) + x.shape, (1,) + tx.shape),
                         (x.shape * 2, tx.shape * 2), (tg.Size(), torch.Size()),
                         (tg.Size([2, 3]), torch.Size([2, 3]))]:
        assert type(ours) is tg.Size and type(theirs) is torch.Size
        assert repr(ours) == _torch_text(repr(theirs)) and str(ours) == _torch_text(str(theirs))
        assert ours == theirs == tuple(theirs) and hash(ours) == hash(tuple(theirs))
        assert ours.numel() == theirs.numel()
    assert type(x.shape[0]) is int and x.size(1) == 3
    assert isinstance(x.shape, tuple) and x.shape == (2, 3, 4)
    assert f"{x.shape}" == "tapegrad.Size([2, 3, 4])"
    assert pickle.loads(pickle.dumps(x.shape)) == x.shape
    assert type(pickle.loads(pickle.dumps(x.shape))) is tg.Size
    with pytest.raises(TypeError, match="iterable of 'int'"):
        tg.Size([2.5])
    with pytest.raises(TypeError, match="iterable of 'int'"):
        torch.Size([2.5])
    # a Size works wherever a shape tuple does
    assert x.view(x.shape).shape == x.shape and tg.zeros(x.shape).shape == x.shape
    assert x.reshape(x.size(0), -1).shape == (2, 12)
    assert x.new_zeros(x.shape).shape == x.shape
    assert tg.ones(3, 1).expand(tg.ones(3, 4).shape).shape == (3, 4)
    assert np.zeros(x.shape).shape == (2, 3, 4)
    up = tg.nn.functional.interpolate(tg.ones(1, 1, 2, 2), size=tg.ones(1, 1, 4, 4).shape[-2:])
    assert up.shape == (1, 1, 4, 4)


def test_dtype_reprs_are_torch_with_the_package_name():
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                 "bool"):
        ours, theirs = getattr(tg, name), getattr(torch, name)
        assert repr(ours) == str(ours) == _torch_text(repr(theirs)) == f"tapegrad.{name}"
    assert repr(tg.ones(2, dtype=tg.int32)) == _torch_text(repr(torch.ones(2, dtype=torch.int32)))
    assert repr(tg.tensor([1.5, 2.0], dtype=tg.float64)) == _torch_text(
        repr(torch.tensor([1.5, 2.0], dtype=torch.float64)))
    assert f"{tg.float32}" == "tapegrad.float32"


def test_format_and_iterables_as_torch():
    from collections import deque
    one = tg.tensor([0.25, 1.0]).sum()
    for spec in ("{:+.2f}", "{:.3e}", "{:8.1f}", "{}"):
        assert spec.format(one) == spec.format(torch.tensor([0.25, 1.0]).sum())
    d = deque([1.5, 2.5], maxlen=4)
    np.testing.assert_array_equal(tg.tensor(d).numpy(), torch.tensor(d).numpy())
    np.testing.assert_array_equal(tg.tensor(deque([deque([1, 2]), deque([3, 4])])).numpy(),
                                  torch.tensor([[1, 2], [3, 4]]).numpy())
