"""tg.save / tg.load: exact round trips, and files that are not ours are refused
without executing anything."""
import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import tapegrad as tg


def test_nested_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    shared = tg.tensor(rng.standard_normal((3, 2)).astype(np.float32))
    obj = {
        "model": OrderedDict(w=shared, b=tg.tensor(np.arange(3, dtype=np.int64))),
        "optim": {"state": {0: {"step": 7, "exp_avg": tg.zeros(3, dtype=tg.float64)}},
                  "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0],
                                    "amsgrad": False, "eps": 1e-8, "name": None}]},
        "again": shared, "flags": tg.tensor([True, False]), "half": tg.ones(2, dtype=tg.float16),
        "big": 2 ** 70, "nan": float("nan"), "np": np.arange(4, dtype=np.uint8),
        "scalar": tg.tensor(3.5), "empty": tg.zeros((0, 4)),
    }
    path = tmp_path / "ckpt.tg"
    tg.save(obj, path)
    back = tg.load(path)
    assert isinstance(back["model"], OrderedDict) and list(back["model"]) == ["w", "b"]
    for a, b in [(obj["model"]["w"], back["model"]["w"]), (obj["model"]["b"], back["model"]["b"]),
                 (obj["flags"], back["flags"]), (obj["half"], back["half"]),
                 (obj["scalar"], back["scalar"]), (obj["empty"], back["empty"])]:
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert back["again"] is back["model"]["w"]
    st = back["optim"]["state"]
    assert list(st) == [0] and st[0]["step"] == 7 and st[0]["exp_avg"].dtype == tg.float64
    assert back["optim"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert back["optim"]["param_groups"][0]["name"] is None
    assert back["big"] == 2 ** 70 and np.isnan(back["nan"])
    assert isinstance(back["np"], np.ndarray) and back["np"].dtype == np.uint8


def test_parameters_and_requires_grad_survive(tmp_path):
    p = tg.nn.Parameter(tg.ones(2))
    tg.save([p, tg.ones(1, requires_grad=True)], tmp_path / "p.tg")
    q, r = tg.load(tmp_path / "p.tg")
    assert isinstance(q, tg.nn.Parameter) and q.requires_grad and r.requires_grad


def test_an_object_the_format_cannot_hold_is_pickled_and_refused_by_default():
    f = io.BytesIO()
    tg.save({"x": slice(1, 5, 2), "w": tg.ones(2)}, f)
    f.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
        tg.load(f)
    f.seek(0)
    out = tg.load(f, weights_only=False)
    assert out["x"] == slice(1, 5, 2) and out["w"].tolist() == [1.0, 1.0]


def _pair_of_models():
    import torch
    tg.manual_seed(0)
    ours = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.Tanh(), tg.nn.LSTM(4, 5, batch_first=True))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                 torch.nn.LSTM(4, 5, batch_first=True))
    with torch.no_grad():
        for (_, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            q.copy_(torch.tensor(p.detach().numpy()))
    return ours, theirs


def test_a_whole_module_saves_and_loads_with_weights_only_false(tmp_path):
    """As torch.save(model, f) / torch.load(f, weights_only=False): the same class,
    parameters (leaves that train) and outputs; the default refuses, naming the
    argument, as PyTorch's does."""
    import torch
    ours, theirs = _pair_of_models()
    torch.save(theirs, tmp_path / "model.pt")
    tg.save(ours, tmp_path / "model.tg")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        torch.load(tmp_path / "model.pt")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        tg.load(tmp_path / "model.tg")
    theirs = torch.load(tmp_path / "model.pt", weights_only=False)
    loaded = tg.load(tmp_path / "model.tg", weights_only=False, map_location="cpu")
    assert type(loaded) is type(ours) and type(loaded[2]) is tg.nn.LSTM
    assert [n for n, _ in loaded.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for p in loaded.parameters():
        assert isinstance(p, tg.nn.Parameter) and p.is_leaf and p.requires_grad
    x = np.random.default_rng(0).standard_normal((2, 6, 3)).astype(np.float32)
    y, _ = loaded(tg.tensor(x))
    yt, _ = theirs(torch.tensor(x))
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    assert loaded[0].weight.grad is not None
    # the loaded copy is independent of the original
    with tg.no_grad():
        loaded[0].weight.zero_()
    assert ours[0].weight.abs().sum().item() > 0


def test_map_location_as_a_dict(tmp_path):
    tg.save({"w": tg.ones(2)}, tmp_path / "w.tg")
    assert tg.load(tmp_path / "w.tg", map_location={"cpu": "cpu"})["w"].device.type == "cpu"
    tg.save([tg.nn.Linear(2, 2)], tmp_path / "m.tg")
    m, = tg.load(tmp_path / "m.tg", weights_only=False, map_location={"cpu": "cpu"})
    assert m.weight.device.type == "cpu"


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch " + _Boom.marker,))


def test_malicious_pickle_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    _Boom.marker = str(marker)
    path = tmp_path / "evil.tg"
    with open(path, "wb") as f:
        pickle.dump({"weights": _Boom()}, f)
    with pytest.raises(ValueError, match="Python pickle"):
        tg.load(path)
    assert not marker.exists()


def test_pickle_inside_npz_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    _Boom.marker = str(marker)
    # an .npz whose manifest looks right but whose array member is an object array
    path = tmp_path / "evil.npz"
    manifest = b'{"format": "tapegrad.save", "version": 1, "tree": {"tensor": "a0"}}'
    arr = np.empty(1, dtype=object)
    arr[0] = _Boom()
    np.savez(path, a0=arr, __tapegrad__=np.frombuffer(manifest, dtype=np.uint8))
    with pytest.raises(ValueError, match="unpickling"):
        tg.load(path)
    assert not marker.exists()


def test_torch_save_file_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(ValueError, match="torch.save"):
        tg.load(path)


@pytest.mark.parametrize("content", [b"", b"hello world", b"PK\x03\x04garbage"])
def test_corrupt_files_give_clear_errors(tmp_path, content):
    path = tmp_path / "bad.tg"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="tg.load"):
        tg.load(path)


def test_truncated_and_tampered_files(tmp_path):
    path = tmp_path / "ok.tg"
    tg.save({"w": tg.ones(100)}, path)
    data = path.read_bytes()
    (tmp_path / "cut.tg").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="tg.load"):
        tg.load(tmp_path / "cut.tg")
    with zipfile.ZipFile(tmp_path / "tampered.tg", "w") as z:
        z.writestr("__tapegrad__.npy", b"\x93NUMPY not really")
    with pytest.raises(ValueError, match="tg.load"):
        tg.load(tmp_path / "tampered.tg")
    buf = io.BytesIO()
    np.savez(buf, __tapegrad__=np.frombuffer(b'{"format": "tapegrad.save", "version": 1, '
                                             b'"tree": {"tensor": "nope"}}', dtype=np.uint8))
    buf.seek(0)
    with pytest.raises(ValueError, match="missing array"):
        tg.load(buf)


def test_fortran_order_arrays_round_trip(tmp_path):
    a = np.arange(6.0).reshape(2, 3).T
    t = tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).T
    tg.save({"a": a, "t": t}, tmp_path / "f.tg")
    with zipfile.ZipFile(tmp_path / "f.tg") as z:
        assert b"'fortran_order': True" in z.read("a0.npy")[:128]
    back = tg.load(tmp_path / "f.tg")
    np.testing.assert_array_equal(back["a"], a)
    np.testing.assert_array_equal(back["t"].numpy(), t.numpy())


def test_load_reads_from_the_current_position_of_a_file_object():
    f = io.BytesIO(b"header")
    f.seek(0, 2)
    tg.save([1, tg.ones(2)], f)
    f.seek(len(b"header"))
    assert tg.load(f)[0] == 1


def test_a_file_object_must_be_seekable(tmp_path):
    tg.save(tg.ones(2), tmp_path / "x.tg")
    with open(tmp_path / "x.tg", "rb") as fh:
        r, w = os.pipe()
        os.write(w, fh.read())
        os.close(w)
    with open(r, "rb") as pipe, pytest.raises(ValueError, match="not seekable"):
        tg.load(pipe)


def test_save_refuses_what_load_would(monkeypatch):
    from tapegrad import serialization
    nested = []
    for _ in range(98):
        nested = [nested]
    f = io.BytesIO()
    tg.save(nested, f)     # 99 lists in the root dict: 199 JSON levels
    f.seek(0)
    assert tg.load(f) == nested
    with pytest.raises(ValueError, match="nests 201 JSON levels deep, over the 200"):
        tg.save([nested], io.BytesIO())
    monkeypatch.setattr(serialization, "_MAX_ARRAYS", 2)
    with pytest.raises(ValueError, match="3 arrays, over the 2"):
        tg.save([tg.ones(1), tg.ones(1), tg.ones(1)], io.BytesIO())
    monkeypatch.setattr(serialization, "_MAX_MANIFEST_BYTES", 100)
    with pytest.raises(ValueError, match="manifest, over the 100"):
        tg.save(list(range(100)), io.BytesIO())


# ---------------------------------------------------------------- views of one storage
def _views(M):
    x = M.arange(12.0).reshape(3, 4)
    return [x, x[1:], x[:, 1], x.T, x.detach(), x[2, 3:], M.ones(2)]


def _layout(ts):
    first = ts[0].data_ptr()
    return [(t.data_ptr() - first, t.storage_offset(), t.stride(), tuple(t.shape))
            for t in ts[:-1]]


def test_views_of_one_storage_stay_views_after_load_as_torch():
    torch = pytest.importorskip("torch")
    f, tf = io.BytesIO(), io.BytesIO()
    tg.save(_views(tg), f)
    torch.save(_views(torch), tf)
    f.seek(0)
    tf.seek(0)
    ours, theirs = tg.load(f), torch.load(tf)
    assert _layout(ours) == _layout(theirs)
    for t in (ours, theirs):
        t[0][2, 1] = 100.0  # a write through the base shows in every view
        t[-1][0] = 7.0      # (a tensor of its own memory does not)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_views_of_one_storage_keep_dtype_views_and_parameters(tmp_path):
    x = tg.arange(8.0).bfloat16()
    p = tg.nn.Parameter(tg.zeros(6))
    tg.save({"x": x[2:], "bits": x.view(tg.int16), "p": p, "p_row": p[3:]}, tmp_path / "v.tg")
    d = tg.load(tmp_path / "v.tg")
    assert d["x"].dtype == tg.bfloat16 and d["x"].tolist() == list(range(2, 8))
    assert isinstance(d["p"], tg.nn.Parameter) and d["p"].requires_grad
    d["bits"][3] = x.view(tg.int16)[0].item()
    assert d["x"].tolist()[1] == 0.0
    with tg.no_grad():
        d["p"][4] = 5.0
    assert d["p_row"].tolist() == [0.0, 5.0, 0.0]


def test_a_view_beyond_its_storage_is_refused():
    buf = io.BytesIO()
    tree = (b'{"format": "tapegrad.save", "version": 2, "tree": {"list": ['
            b'{"view": "s0", "dtype": "float32", "shape": [4], "strides": [4], "offset": 8, '
            b'"device": "cpu", "id": "a0"}]}}')
    np.savez(buf, s0=np.zeros(16, np.uint8), __tapegrad__=np.frombuffer(tree, np.uint8))
    buf.seek(0)
    with pytest.raises(ValueError, match="tg.load: .*view of 's0'"):
        tg.load(buf)
