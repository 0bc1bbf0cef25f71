"""API.md "PyTorch compatibility, continued": detach shares memory and version and
takes in-place writes; an op saves only what its adjoint reads for the inputs that
require grad; sparse COO tensors as torch.sparse; tg.save of a whole module and
tg.load(weights_only=...); parametrizations; parameters_to_vector."""
import io
import os
import pickle

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- detach
def test_detach_shares_memory_and_takes_inplace_writes():
    x = tg.ones(3, requires_grad=True)
    d = x.detach()
    assert d.is_leaf and not d.requires_grad and d.grad_fn is None
    assert d.data_ptr() == x.data_ptr()
    d[0] = 5
    d[1:].add_(1)
    assert x.tolist() == [5.0, 2.0, 2.0]
    d.zero_()
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_detach_shares_the_version_counter():
    x = tg.ones(3, requires_grad=True)
    y = x.exp()
    y.detach().zero_()  # exp's adjoint reads y: the backward must refuse, as PyTorch
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ---------------------------------------------------------------- saves
def test_constant_factor_saves_nothing():
    x = tg.ones(3, requires_grad=True)
    y = x * 1
    z = (y * 2).sum()
    y.add_(1)
    z.backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_only_the_needed_operand_is_saved():
    x = tg.ones(3, requires_grad=True)
    w = tg.full((3,), 3.0)
    y = x * 1
    z = (y * w).sum()  # only y requires grad: its adjoint reads w, not y
    y.add_(1)
    z.backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
    x2 = tg.ones(3, requires_grad=True)
    w2 = tg.full((3,), 3.0)
    z2 = (x2 * w2).sum()
    w2.add_(1)  # w is read by x's adjoint: refused
    with pytest.raises(RuntimeError):
        z2.backward()


# ---------------------------------------------------------------- sparse
IDX = [[0, 1, 1], [2, 0, 2]]
VAL = [3.0, 4.0, 5.0]


@pytest.mark.parametrize("call", [
    lambda x: x.sort(), lambda x: x.topk(2), lambda x: x.max(0), lambda x: x.min(0),
    lambda x: x.cummax(0), lambda x: x.sort(descending=True)])
def test_values_written_in_place_after_an_op_that_saves_only_indices(call):
    # sort/topk/max(dim)'s adjoint reads the indices: the values may be written in place
    torch = pytest.importorskip("torch")
    data = [3.0, 1.0, 2.0, 5.0]
    x = tg.tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    v, _ = call(x * 1)
    tv, _ = call(tx * 1)
    v.mul_(2)
    tv.mul_(2)
    w = np.arange(1.0, 1 + v.numel())
    (v * tg.tensor(w).reshape(v.shape)).sum().backward()
    (tv * torch.tensor(w).reshape(tv.shape)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    # the indices the adjoint reads are still checked
    x2 = tg.tensor(data, requires_grad=True)
    v, i = call(x2 * 1)
    i.add_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        v.sum().backward()


def test_sparse_coo_basics_as_torch():
    s = tg.sparse_coo_tensor(IDX, VAL, (2, 3))
    t = torch.sparse_coo_tensor(IDX, VAL, (2, 3))
    assert s.is_sparse and not tg.ones(2).is_sparse
    assert s.layout == tg.sparse_coo and tg.ones(1).layout == tg.strided
    assert tuple(s.shape) == tuple(t.shape)
    assert s.to_dense().tolist() == t.to_dense().tolist()
    assert tuple(tg.sparse_coo_tensor(IDX, VAL).shape) == (2, 3)
    assert (s.sparse_dim(), s.dense_dim()) == (t.sparse_dim(), t.dense_dim())
    assert repr(s).replace("tapegrad", "torch") == repr(t)
    dup = tg.sparse_coo_tensor([[0, 0, 1], [1, 1, 0]], [1.0, 2.0, 3.0], (2, 2))
    with pytest.raises(RuntimeError, match="coalesce"):
        dup.indices()
    c = dup.coalesce()
    tc = torch.sparse_coo_tensor([[0, 0, 1], [1, 1, 0]], [1.0, 2.0, 3.0], (2, 2)).coalesce()
    assert c.is_coalesced()
    assert c.indices().tolist() == tc.indices().tolist()
    assert c.values().tolist() == tc.values().tolist()
    d = tg.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse()
    assert d.is_sparse and d.indices().tolist() == [[0, 1], [1, 0]]
    assert d.values().tolist() == [2.0, 3.0]


def test_sparse_mm_sum_and_gradients_as_torch():
    b = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    vals = tg.tensor(VAL, requires_grad=True)
    B = tg.tensor(b, requires_grad=True)
    A = tg.sparse_coo_tensor(IDX, vals, (2, 3))
    out1 = tg.sparse.mm(A, B)
    out2 = A @ B
    assert not out1.is_sparse
    (out1.sum() + (out2 * 2).sum()).backward()
    tvals = torch.tensor(VAL, requires_grad=True)
    tB = torch.tensor(b, requires_grad=True)
    tA = torch.sparse_coo_tensor(IDX, tvals, (2, 3))
    (torch.sparse.mm(tA, tB).sum() + (torch.sparse.mm(tA, tB) * 2).sum()).backward()
    np.testing.assert_allclose(out1.detach().numpy(), torch.sparse.mm(tA, tB).detach().numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(out2.detach().numpy(), out1.detach().numpy())
    np.testing.assert_allclose(B.grad.numpy(), tB.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(vals.grad.numpy(), tvals.grad.numpy(), rtol=1e-5)
    s = tg.sparse_coo_tensor(IDX, VAL, (2, 3))
    ts = torch.sparse_coo_tensor(IDX, VAL, (2, 3))
    assert tg.sparse.sum(s).item() == torch.sparse.sum(ts).item()
    x = tg.ones(2, 2, requires_grad=True)
    (x.to_sparse().to_dense() * 2).sum().backward()
    assert x.grad.tolist() == [[2.0, 2.0], [2.0, 2.0]]


# ---------------------------------------------------------------- save / load
def test_whole_module_needs_weights_only_false(tmp_path):
    path = str(tmp_path / "model.pt")
    m = tg.nn.Sequential(tg.nn.Linear(3, 2), tg.nn.ReLU())
    tg.save(m, path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        tg.load(path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        tg.load(path, weights_only=True)
    m2 = tg.load(path, weights_only=False, map_location="cpu")
    assert type(m2) is type(m)
    x = tg.randn(4, 3)
    with tg.no_grad():
        np.testing.assert_array_equal(m(x).numpy(), m2(x).numpy())
    assert type(tg.load(path, weights_only=False, map_location=tg.device("cpu"))) is type(m)


def test_hostile_pickle_is_refused_by_default(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = str(tmp_path / "evil.pt")
    with open(path, "wb") as f:
        pickle.dump(Evil(), f)
    with pytest.raises(pickle.UnpicklingError):
        tg.load(path)
    assert not marker.exists()


def test_state_dicts_and_plain_values_round_trip(tmp_path):
    m = tg.nn.Linear(3, 2)
    opt = tg.optim.Adam(m.parameters(), lr=1e-3)
    obj = {"model": m.state_dict(), "optim": opt.state_dict(), "epoch": 3, "best": 0.25,
           "name": "run", "flags": [True, None, (1, 2)], "ids": {1: "a"},
           "t": tg.zeros(3, dtype=tg.int64), "p": tg.nn.Parameter(tg.ones(2))}
    for target in (str(tmp_path / "ckpt.pt"), tmp_path / "ckpt2.pt", io.BytesIO()):
        tg.save(obj, target)
        if isinstance(target, io.BytesIO):
            target.seek(0)
        r = tg.load(target)
        assert type(r["model"]).__name__ == "OrderedDict"
        assert list(r["model"]) == ["weight", "bias"]
        np.testing.assert_array_equal(r["model"]["weight"].numpy(), m.weight.detach().numpy())
        assert r["optim"]["param_groups"][0]["lr"] == 1e-3
        assert (r["epoch"], r["best"], r["name"]) == (3, 0.25, "run")
        assert r["flags"] == [True, None, (1, 2)] and r["ids"] == {1: "a"}
        assert r["t"].dtype == tg.int64
        assert isinstance(r["p"], tg.nn.Parameter) and r["p"].requires_grad
    assert os.path.getsize(tmp_path / "ckpt.pt") > 0


# ---------------------------------------------------------------- parametrizations
class _Sym(tg.nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


def test_sparse_tensors_save_and_load(tmp_path):
    s = tg.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()
    u = tg.sparse_coo_tensor([[0, 0, 2]], [1.0, 2.0, 3.0], (4,))   # uncoalesced
    w = tg.sparse_coo_tensor([[1]], [5.0], (2,), requires_grad=True)
    p = tmp_path / "s.pt"
    tg.save({"s": s, "more": [u, w]}, p)
    r = tg.load(p)
    assert r["s"].is_sparse and r["s"].is_coalesced()
    np.testing.assert_array_equal(r["s"].to_dense().numpy(), [[0, 1], [2, 0]])
    ru, rw = r["more"]
    assert not ru.is_coalesced() and tuple(ru.shape) == (4,)
    np.testing.assert_array_equal(ru.to_dense().numpy(), [3, 0, 3, 0])
    assert rw.requires_grad
    np.testing.assert_array_equal(rw.to_dense().detach().numpy(), [0, 5])


def test_load_map_location_callable_as_torch(tmp_path):
    p = tmp_path / "t.pt"
    tg.save({"w": tg.arange(3.0)}, p)
    seen = []

    def keep(storage, location):
        seen.append(location)
        return storage
    r = tg.load(p, map_location=keep)
    assert seen == ["cpu"] and str(r["w"].device) == "cpu"
    np.testing.assert_array_equal(r["w"].numpy(), [0, 1, 2])
    r = tg.load(p, map_location=lambda storage, location: None)   # the saved device
    np.testing.assert_array_equal(r["w"].numpy(), [0, 1, 2])
    with pytest.raises((TypeError, ValueError), match="map_location"):
        tg.load(p, map_location=lambda storage, location: "cpu")


@pytest.mark.parametrize("make", [
    lambda m: [m.tensor(1.5, dtype=m.float16)],
    lambda m: [np.float16(1.5)], lambda m: [np.float64(1.5)], lambda m: [np.int32(3)],
    lambda m: [m.tensor(3, dtype=m.int8)], lambda m: [m.tensor(1.5, dtype=m.float16), 2.5],
    lambda m: [m.tensor(3, dtype=m.int32), 4], lambda m: [np.float32(1), 2.0],
    lambda m: [np.bool_(True)],
    lambda m: [m.tensor(3, dtype=m.int32), m.tensor(1.5, dtype=m.float16)],
    lambda m: [[np.float16(1)], [np.float16(2)]], lambda m: [1, 2.5]])
def test_tensor_of_a_list_takes_its_elements_dtypes_as_torch(make):
    # 0-d tensors and NumPy scalars in a list keep their dtypes (promoted together
    # with the Python numbers' defaults), as torch.tensor
    torch = pytest.importorskip("torch")
    got, want = tg.tensor(make(tg)), torch.tensor(make(torch))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy().astype(np.float64),
                                  want.numpy().astype(np.float64))


def test_register_and_remove_parametrization():
    P = tg.nn.utils.parametrize
    m = tg.nn.Linear(3, 3)
    P.register_parametrization(m, "weight", _Sym())
    assert P.is_parametrized(m) and P.is_parametrized(m, "weight")
    assert not P.is_parametrized(m, "bias")
    assert [n for n, _ in m.named_parameters()] == ["bias", "parametrizations.weight.original"]
    W = m.weight.detach().numpy()
    np.testing.assert_array_equal(W, W.T)
    m(tg.randn(2, 3)).sum().backward()
    assert m.parametrizations.weight.original.grad is not None
    with P.cached():
        assert m.weight is m.weight
    P.remove_parametrizations(m, "weight", leave_parametrized=True)
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight"]
    np.testing.assert_array_equal(m.weight.detach().numpy(), W)
    with pytest.raises(ValueError):
        P.remove_parametrizations(m, "weight")

    class Shrink(tg.nn.Module):
        def forward(self, X):
            return X[:2]

    with pytest.raises(ValueError, match="unsafe"):
        P.register_parametrization(tg.nn.Linear(3, 3), "weight", Shrink())


def test_weight_norm_spectral_norm_orthogonal_as_torch():
    tm = torch.nn.Linear(4, 3)
    m = tg.nn.Linear(4, 3)
    m.weight.data = tg.tensor(tm.weight.detach().numpy())
    tg.nn.utils.parametrizations.weight_norm(m)
    torch.nn.utils.parametrizations.weight_norm(tm)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in tm.named_parameters()]
    np.testing.assert_allclose(m.parametrizations.weight.original0.detach().numpy(),
                               tm.parametrizations.weight.original0.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(m.weight.detach().numpy(), tm.weight.detach().numpy(), rtol=1e-6)
    s = tg.nn.Linear(5, 4)
    tg.nn.utils.parametrizations.spectral_norm(s)
    ts = torch.nn.Linear(5, 4)
    torch.nn.utils.parametrizations.spectral_norm(ts)
    assert list(s.state_dict()) == list(ts.state_dict())
    for _ in range(30):
        s.weight  # noqa: B018  (power iterations in training mode)
    s.eval()
    assert np.linalg.svd(s.weight.detach().numpy(), compute_uv=False)[0] == pytest.approx(
        1.0, rel=1e-3)
    for shape in ((4, 4), (3, 5), (5, 3)):
        o = tg.nn.Linear(shape[1], shape[0])
        tg.nn.utils.parametrizations.orthogonal(o)
        W = o.weight.detach().numpy()
        gram = W @ W.T if shape[0] <= shape[1] else W.T @ W
        np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-5)


def test_parameters_to_vector_and_back():
    m = tg.nn.Linear(3, 2)
    v = tg.nn.utils.parameters_to_vector(m.parameters())
    assert tuple(v.shape) == (8,)
    np.testing.assert_array_equal(v.detach().numpy()[:6], m.weight.detach().numpy().ravel())
    tg.nn.utils.vector_to_parameters(tg.arange(8.0), m.parameters())
    assert m.weight.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert m.bias.tolist() == [6.0, 7.0]
    m2 = tg.nn.Linear(2, 1)
    tg.nn.utils.parameters_to_vector(m2.parameters()).sum().backward()
    assert m2.weight.grad.tolist() == [[1.0, 1.0]]
    with pytest.raises(TypeError):
        tg.nn.utils.vector_to_parameters([1.0, 2.0], tg.nn.Linear(1, 1).parameters())


def test_plain_values_load_under_weights_only_as_torch(tmp_path):
    # what torch.load(weights_only=True) accepts of plain values loads by default here too
    obj = {"b": b"\x00ab", "ba": bytearray(b"xy"), "s": {1, 2, (3, "a")}, "c": 1 + 2j,
           (1, 2): "tuple key", "size": tg.ones(2, 3).shape, "dev": tg.device("cpu"),
           "dt": tg.float16}
    path = tmp_path / "plain.pt"
    tg.save(obj, path)
    r = tg.load(path)
    assert r == obj
    assert type(r["size"]) is type(obj["size"]) and type(r["ba"]) is bytearray
    tobj = {k: v for k, v in obj.items() if k not in ("size", "dev", "dt")}
    torch.save(tobj, tmp_path / "t.pt")
    assert torch.load(tmp_path / "t.pt", weights_only=True) == tobj
    tg.save({"x": slice(1, 2)}, path)  # not a plain value: pickled, refused by default
    with pytest.raises(pickle.UnpicklingError):
        tg.load(path)


@pytest.mark.parametrize("name", ["empty", "zeros", "ones", "rand", "randn"])
def test_factories_take_size_by_keyword(name):
    """``torch.empty(size=(2, 3))`` as PyTorch: the shape by keyword; with a positional
    size as well, PyTorch's TypeError."""
    assert tuple(getattr(tg, name)(size=(2, 3)).shape) == (2, 3)
    assert tuple(getattr(tg, name)(size=[4], dtype=tg.float64).shape) == (4,)
    with pytest.raises(TypeError, match="multiple values for argument 'size'"):
        getattr(tg, name)(2, size=(3,))
    with pytest.raises(TypeError, match="unexpected keyword argument 'shape'"):
        getattr(tg, name)(shape=(3,))


SIZE_ELEMENTS = [
    ("a 0-d integer tensor", lambda m: (m.tensor(2),)),
    ("a 0-d tensor beside an int", lambda m: (m.tensor(2), 3)),
    ("a tuple holding a tensor", lambda m: ((m.tensor(2), 3),)),
    ("a one-element integer tensor", lambda m: (m.tensor([2]),)),
    ("a uint8 tensor", lambda m: (m.tensor(3, dtype=m.uint8),)),
    ("a 0-d NumPy integer array", lambda m: (np.array(2),)),
]


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "randn"])
@pytest.mark.parametrize("case, args", SIZE_ELEMENTS, ids=[c for c, _ in SIZE_ELEMENTS])
def test_a_size_takes_integer_tensors_of_one_element_as_torch(name, case, args):
    torch = pytest.importorskip("torch")
    assert tuple(getattr(tg, name)(*args(tg)).shape) == \
        tuple(getattr(torch, name)(*args(torch)).shape)


@pytest.mark.parametrize("bad", [lambda m: m.tensor(2.0), lambda m: m.tensor([2, 3]),
                                 lambda m: m.tensor(True), lambda m: 2.0],
                         ids=["float tensor", "two elements", "bool tensor", "float"])
def test_a_size_refuses_other_tensors_as_torch(bad):
    torch = pytest.importorskip("torch")
    with pytest.raises((TypeError, RuntimeError)):
        torch.zeros(bad(torch))
    with pytest.raises(TypeError, match="zeros: size must be ints"):
        tg.zeros(bad(tg))


def test_views_take_tensor_sizes_and_a_capture_guards_them():
    x = tg.arange(6.0)
    assert x.view(tg.tensor(3), -1).shape == (3, 2)
    assert x.reshape(tg.tensor(6)).shape == (6,)
    assert x.reshape(2, 3).expand(tg.tensor(2), 3).shape == (2, 3)
    f = tg.compile(lambda x, n: tg.zeros(n, 2) + x)
    one = tg.ones(2)
    for k in (3, 3, 4, 4):
        assert f(one, tg.tensor(k)).shape == (k, 2)
    assert f.stats()["captures"] == 2 and f.stats()["replays"] == 2


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
def test_embedding_max_norm_renormalizes_the_rows_it_reads_as_torch(norm_type):
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(0).standard_normal((6, 4))
    idx = np.array([[0, 2, 2], [5, 1, 0]])
    tw, gw = torch.tensor(w, requires_grad=True), tg.tensor(w, requires_grad=True)
    to = torch.nn.functional.embedding(torch.tensor(idx), tw, max_norm=1.0, norm_type=norm_type)
    go = tg.nn.functional.embedding(tg.tensor(idx), gw, max_norm=1.0, norm_type=norm_type)
    (to ** 2).sum().backward()
    (go ** 2).sum().backward()
    np.testing.assert_allclose(go.detach().numpy(), to.detach().numpy(), rtol=1e-12)
    # the rows read are rescaled in place; row 3 and 4, not read, keep their norms
    np.testing.assert_allclose(gw.detach().numpy(), tw.detach().numpy(), rtol=1e-12)
    assert np.array_equal(gw.detach().numpy()[3:5], w[3:5])
    np.testing.assert_allclose(gw.grad.numpy(), tw.grad.numpy(), rtol=1e-12)
    assert gw._version == tw._version == 1


def test_embedding_bag_max_norm_as_torch():
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(1).standard_normal((8, 3)) * 3
    idx, offsets = np.array([1, 2, 4, 5, 4, 3, 2, 7]), np.array([0, 3, 5])
    t = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(w), freeze=False, max_norm=2.0,
                                              mode="sum")
    g = tg.nn.EmbeddingBag.from_pretrained(tg.tensor(w), freeze=False, max_norm=2.0,
                                           mode="sum")
    assert repr(g) == repr(t)
    to, go = t(torch.tensor(idx), torch.tensor(offsets)), g(tg.tensor(idx), tg.tensor(offsets))
    np.testing.assert_allclose(go.detach().numpy(), to.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.weight.detach().numpy(), t.weight.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("freeze", [True, False])
def test_embedding_from_pretrained_as_torch(freeze):
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(2).standard_normal((5, 2))
    t = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=freeze, padding_idx=1,
                                           max_norm=1.5, norm_type=3)
    g = tg.nn.Embedding.from_pretrained(tg.tensor(w), freeze=freeze, padding_idx=1,
                                        max_norm=1.5, norm_type=3)
    assert repr(g) == repr(t)
    assert g.weight.requires_grad is t.weight.requires_grad is (not freeze)
    idx = np.array([4, 1, 0, 4])
    np.testing.assert_allclose(g(tg.tensor(idx)).detach().numpy(),
                               t(torch.tensor(idx)).detach().numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="2-dimensional"):
        tg.nn.Embedding.from_pretrained(tg.ones(3))


def test_a_compiled_model_renormalizes_embedding_rows_on_every_replay():
    def make():
        tg.manual_seed(0)
        return tg.nn.Sequential(tg.nn.Embedding(10, 4, max_norm=1.0), tg.nn.Linear(4, 2))
    eager, model = make(), make()
    compiled = tg.compile(model)
    opts = [tg.optim.SGD(m.parameters(), lr=0.05) for m in (eager, model)]
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = tg.tensor(rng.integers(0, 10, (3, 5)))
        for run, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            (run(x) ** 2).sum().backward()
            opt.step()
        for a, b in zip(eager.parameters(), model.parameters()):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), atol=1e-6)
    assert compiled.stats()["replays"] == 4
