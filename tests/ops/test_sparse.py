"""Sparse COO tensors against PyTorch's: construction, coalescing with duplicate
indices, to_dense/to_sparse, the matrix products and their gradients (to the values
and to the dense operand), sparse.sum, the errors, and a small GCN trained as
PyTorch's example writes it (adjacency as a sparse COO tensor, sparse.mm(adj, x @ W))."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")

IDX = np.array([[0, 2, 1, 0, 2, 0], [1, 0, 3, 1, 3, 2]])  # (0, 1) twice
VALS = np.array([1.5, -2.0, 0.5, 3.0, 4.0, -1.0])
SIZE = (3, 4)


def _pair(dtype=np.float64, requires_grad=False):
    a = tg.sparse_coo_tensor(tg.tensor(IDX), tg.tensor(VALS.astype(dtype)), SIZE,
                             requires_grad=requires_grad)
    t = torch.sparse_coo_tensor(torch.tensor(IDX), torch.tensor(VALS.astype(dtype)), SIZE,
                                requires_grad=requires_grad, check_invariants=True)
    return a, t


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


def _same_sparse(a, t):
    assert a.is_sparse and t.is_sparse
    assert tuple(a.shape) == tuple(t.shape) and a._nnz() == t._nnz()
    assert a.is_coalesced() == t.is_coalesced()
    np.testing.assert_array_equal(_np(a._indices()), _np(t._indices()))
    np.testing.assert_allclose(_np(a._values()), _np(t._values()), rtol=1e-6, atol=1e-12)


def _same_values(a, t):
    if t.is_sparse:
        _same_sparse(a, t)
    else:
        np.testing.assert_allclose(_np(a), _np(t))


def test_construction_and_metadata():
    a, t = _pair()
    _same_sparse(a, t)
    assert str(a.layout) == str(t.layout) == "torch.sparse_coo"
    assert a.layout is tg.sparse_coo and tg.ones(2).layout is tg.strided
    assert not tg.ones(2).is_sparse
    assert a.dtype == tg.float64 and a.device == tg.device("cpu")
    assert a.sparse_dim() == 2 and a.dense_dim() == 0 and a.dim() == 2
    assert isinstance(a, tg.Tensor)
    assert a.numel() == t.numel() and a.size() == a.shape
    for b in (a.double(), a.to(tg.float32), a.float(), a.detach()):
        assert b.is_sparse and b._nnz() == a._nnz()
    assert a.to(tg.float32).dtype == tg.float32


def test_default_size_and_hybrid_values():
    v = np.arange(6.0).reshape(3, 2)
    a = tg.sparse_coo_tensor([[0, 4, 2]], tg.tensor(v))
    t = torch.sparse_coo_tensor(torch.tensor([[0, 4, 2]]), torch.tensor(v))
    assert tuple(a.shape) == tuple(t.shape) == (5, 2)
    np.testing.assert_array_equal(_np(a.to_dense()), _np(t.to_dense()))


def test_coalesce_sums_duplicates_and_sorts():
    a, t = _pair()
    assert not a.is_coalesced()
    with pytest.raises(RuntimeError, match="coalesce"):
        a.indices()
    _same_sparse(a.coalesce(), t.coalesce())
    np.testing.assert_array_equal(_np(a.coalesce().indices()), _np(t.coalesce().indices()))
    np.testing.assert_allclose(_np(a.coalesce().values()), _np(t.coalesce().values()))
    np.testing.assert_allclose(_np(a.to_dense()), _np(t.to_dense()))


def test_to_sparse_round_trip_and_gradient():
    x = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    a = tg.tensor(x, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    sa, st = a.to_sparse(), t.to_sparse()
    _same_sparse(sa, st)
    np.testing.assert_array_equal(_np(sa.to_dense()), x)
    w = np.arange(6.0).reshape(2, 3)
    (sa.to_dense() * tg.tensor(w)).sum().backward()
    (st.to_dense() * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(a.grad), _np(t.grad))


@pytest.mark.parametrize("spelling", ["sparse.mm", "matmul_operator", "mm", "matmul"])
def test_mm_values_and_gradients(spelling):
    a, t = _pair(requires_grad=True)
    bn = np.random.default_rng(0).standard_normal((4, 5))
    w = np.random.default_rng(1).standard_normal((3, 5))
    b, tb = tg.tensor(bn, requires_grad=True), torch.tensor(bn, requires_grad=True)
    f = {"sparse.mm": lambda s, d, M: M.sparse.mm(s, d), "matmul_operator": lambda s, d, M: s @ d,
         "mm": lambda s, d, M: M.mm(s, d), "matmul": lambda s, d, M: M.matmul(s, d)}[spelling]
    y, ty = f(a, b, tg), f(t, tb, torch)
    np.testing.assert_allclose(_np(y), _np(ty), rtol=1e-12)
    (y * tg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(b.grad), _np(tb.grad), rtol=1e-12)
    # the sparse leaf's grad: the sampled product at its (coalesced) elements, as
    # torch.sparse.mm's; PyTorch's mm/matmul give this leaf the whole dense product
    # grad @ mat2^T instead, which agrees with it there
    tg_ = t.grad if t.grad.is_sparse else t.grad.sparse_mask(t.detach().coalesce())
    _same_sparse(a.grad, tg_.coalesce())


def test_dense_times_sparse_values_and_gradients():
    a, t = _pair(requires_grad=True)
    dn = np.random.default_rng(3).standard_normal((2, 3))
    w = np.random.default_rng(4).standard_normal((2, 4))
    d, td = tg.tensor(dn, requires_grad=True), torch.tensor(dn, requires_grad=True)
    y, ty = d @ a, td @ t
    assert not y.is_sparse and not ty.is_sparse
    np.testing.assert_allclose(_np(y), _np(ty), rtol=1e-12)
    (y * tg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(d.grad), _np(td.grad), rtol=1e-12)
    # the sparse leaf's gradient at its stored elements: d^T @ grad sampled there
    tg_ = t.grad if t.grad.is_sparse else t.grad.sparse_mask(t.detach().coalesce())
    _same_sparse(a.grad, tg_.coalesce())
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(2x4 and 3x4\)"):
        tg.ones(2, 4, dtype=tg.float64) @ a


@pytest.mark.parametrize("op", ["dense + sparse", "dense - sparse"])
def test_dense_and_sparse_sum_is_dense(op):
    a, t = _pair(requires_grad=True)
    dn = np.random.default_rng(5).standard_normal(SIZE)
    d, td = tg.tensor(dn, requires_grad=True), torch.tensor(dn, requires_grad=True)
    f = {"dense + sparse": lambda s, x: x + s, "dense - sparse": lambda s, x: x - s}[op]
    y, ty = f(a, d), f(t, td)
    assert not y.is_sparse and not ty.is_sparse
    np.testing.assert_allclose(_np(y), _np(ty), rtol=1e-12)
    w = np.random.default_rng(6).standard_normal(SIZE)
    (y * tg.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(d.grad), _np(td.grad), rtol=1e-12)
    # the sparse leaf's gradient at its stored elements (PyTorch's fills every element)
    tg_ = t.grad.to_dense().sparse_mask(t.detach().coalesce())
    _same_sparse(a.grad, tg_.coalesce())


def test_sparse_plus_dense_is_refused_as_pytorch():
    a, t = _pair()
    for lib, s in ((tg, a), (torch, t)):
        with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
            s + lib.ones(SIZE, dtype=lib.float64)


def test_eye_plus_integer_adjacency_promotes_as_pytorch():
    # an int64 sparse adjacency (float values cast on construction) plus a float32
    # identity: a float32 dense matrix, as in PyTorch's GCN example
    edges = np.array([[0, 1], [1, 2], [2, 0]], dtype=np.int32)
    a = tg.sparse_coo_tensor(edges.T, tg.ones(3), (3, 3), dtype=tg.int64)
    t = torch.sparse_coo_tensor(edges.T, torch.ones(3), (3, 3), dtype=torch.int64)
    y, ty = tg.eye(3) + a, torch.eye(3) + t
    assert y.dtype == tg.float32 and ty.dtype == torch.float32 and not y.is_sparse
    np.testing.assert_array_equal(_np(y), _np(ty))


def test_spmm_is_pytorchs():
    a, t = _pair()
    bn = np.random.default_rng(7).standard_normal((4, 2))
    np.testing.assert_allclose(_np(tg.spmm(a, tg.tensor(bn))),
                               _np(torch.spmm(t, torch.tensor(bn))), rtol=1e-12)
    dn = np.random.default_rng(8).standard_normal((3, 4))
    np.testing.assert_allclose(_np(tg.spmm(tg.tensor(dn), tg.tensor(bn))),
                               _np(torch.spmm(torch.tensor(dn), torch.tensor(bn))), rtol=1e-12)


def test_gradient_to_values_tensor():
    vn = VALS.copy()
    v, tv = tg.tensor(vn, requires_grad=True), torch.tensor(vn, requires_grad=True)
    bn = np.random.default_rng(2).standard_normal((4, 2))
    y = tg.sparse.mm(tg.sparse_coo_tensor(IDX, v, SIZE), tg.tensor(bn))
    ty = torch.sparse.mm(torch.sparse_coo_tensor(torch.tensor(IDX), tv, SIZE), torch.tensor(bn))
    (y ** 2).sum().backward()
    (ty ** 2).sum().backward()
    np.testing.assert_allclose(_np(v.grad), _np(tv.grad), rtol=1e-12)


def test_second_order_matches_finite_differences():
    # the gradient of the values depends on the dense operand (the sampled product);
    # checked against central differences
    def f(v, b):
        return tg.sparse.mm(tg.sparse_coo_tensor(IDX, v, SIZE), b)
    v = tg.tensor(VALS, requires_grad=True)
    b = tg.tensor(np.random.default_rng(3).standard_normal((4, 2)), requires_grad=True)
    assert tg.testing.gradcheck(f, (v, b))
    assert tg.testing.gradgradcheck(f, (v, b))


def test_addmm_and_sparse_addmm():
    a, t = _pair()
    bn = np.random.default_rng(4).standard_normal((4, 2))
    cn = np.random.default_rng(5).standard_normal((3, 2))
    want = torch.addmm(torch.tensor(cn), t, torch.tensor(bn), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(
        _np(tg.addmm(tg.tensor(cn), a, tg.tensor(bn), beta=0.5, alpha=2.0)), _np(want))
    np.testing.assert_allclose(
        _np(tg.sparse.addmm(tg.tensor(cn), a, tg.tensor(bn), beta=0.5, alpha=2.0)),
        _np(torch.sparse.addmm(torch.tensor(cn), t, torch.tensor(bn), beta=0.5, alpha=2.0)))


def test_float32_mm():
    a, t = _pair(np.float32)
    bn = np.random.default_rng(6).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(_np(a @ tg.tensor(bn)), _np(torch.sparse.mm(t, torch.tensor(bn))),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
def test_sparse_sum(dim):
    a, t = _pair(requires_grad=True)
    ours = tg.sparse.sum(a) if dim is None else tg.sparse.sum(a, dim)
    _same_values(a.sum() if dim is None else a.sum(dim),
                 t.sum() if dim is None else t.sum(dim))
    theirs = torch.sparse.sum(t) if dim is None else torch.sparse.sum(t, dim)
    if theirs.is_sparse:
        _same_sparse(ours, theirs)
    else:
        assert not ours.is_sparse
        np.testing.assert_allclose(_np(ours), _np(theirs))
        ours.sum().backward()
        theirs.sum().backward()
        _same_sparse(a.grad, t.grad.coalesce())


def test_repr_like_pytorch():
    a, t = _pair(np.float32)
    assert repr(a) == repr(t)
    c, tc = a.coalesce(), t.coalesce()
    assert repr(c) == repr(tc)
    r, tr = _pair(np.float32, requires_grad=True)
    assert repr(r) == repr(tr)
    d, td = _pair()
    assert repr(d).replace("tapegrad.", "torch.") == repr(td)


def test_errors():
    a, _ = _pair()
    with pytest.raises(RuntimeError, match=r"sparse_mm.*cannot be multiplied \(3x4 and 3x2\)"):
        tg.sparse.mm(a, tg.ones(3, 2, dtype=tg.float64))
    with pytest.raises(RuntimeError, match="sparse_mm.*same dtype"):
        tg.sparse.mm(a, tg.ones(4, 2))
    with pytest.raises(RuntimeError, match="size is inconsistent"):
        tg.sparse_coo_tensor(IDX, VALS, (2, 4))
    with pytest.raises(RuntimeError, match="sparse_coo_tensor.*same number"):
        tg.sparse_coo_tensor(IDX, VALS[:4], SIZE)
    with pytest.raises(RuntimeError, match="negative index"):
        tg.sparse_coo_tensor([[0, -1]], [1.0, 2.0], (3,))
    # dense-only ops name themselves and the layout
    for fn, name in ((lambda: a.relu(), "relu"), (lambda: tg.exp(a), "exp"),
                     (lambda: a + 1, "add"), (lambda: a * a, "mul"),
                     (lambda: a / a, "div")):
        with pytest.raises(NotImplementedError, match=f"{name}.*torch.sparse_coo"):
            fn()


def test_dense_tensor_unchanged():
    x = tg.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert x.to_dense() is x and x.layout is tg.strided and not x.is_sparse




def _gcn_losses(M, F_, adj_parts, feats, labels, weights, steps=5):
    """PyTorch's GCN example (pygcn): two GraphConvolution layers,
    ``output = spmm(adj, input @ W) + b``, relu, log_softmax, nll_loss, Adam."""
    idx, vals, n = adj_parts

    class GraphConvolution(M.nn.Module):
        def __init__(self, w, b):
            super().__init__()
            self.weight = M.nn.Parameter(M.tensor(w))
            self.bias = M.nn.Parameter(M.tensor(b))

        def forward(self, input, adj):
            support = M.mm(input, self.weight)
            output = M.sparse.mm(adj, support)
            return output + self.bias

    class GCN(M.nn.Module):
        def __init__(self):
            super().__init__()
            self.gc1 = GraphConvolution(*weights[:2])
            self.gc2 = GraphConvolution(*weights[2:])

        def forward(self, x, adj):
            x = F_.relu(self.gc1(x, adj))
            x = self.gc2(x, adj)
            return F_.log_softmax(x, dim=1)

    adj = M.sparse_coo_tensor(M.tensor(idx), M.tensor(vals), (n, n))
    model = GCN()
    opt = M.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    x, y = M.tensor(feats), M.tensor(labels)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F_.nll_loss(model(x, adj), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_gcn_training_matches_pytorch():
    rng = np.random.default_rng(7)
    n, f, h, c = 12, 6, 8, 3
    edges = rng.integers(0, n, (2, 30))
    dense = np.zeros((n, n))
    dense[edges[0], edges[1]] = 1.0
    dense = np.maximum(dense, dense.T) + np.eye(n)
    dense = dense / dense.sum(1, keepdims=True)  # row-normalised, as the example's
    idx = np.stack(np.nonzero(dense))
    vals = dense[idx[0], idx[1]].astype(np.float32)
    feats = rng.standard_normal((n, f)).astype(np.float32)
    labels = rng.integers(0, c, n)
    weights = [rng.uniform(-0.3, 0.3, s).astype(np.float32) for s in ((f, h), (h,), (h, c), (c,))]
    ours = _gcn_losses(tg, F, (idx, vals, n), feats, labels, weights)
    theirs = _gcn_losses(torch, torch.nn.functional, (idx, vals, n), feats, labels, weights)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert ours[-1] < ours[0]


@pytest.mark.parametrize("name, args", [
    ("sparse_mm", (np.array([[1, 0, 2], [1, 3, 0]]), np.ones(3), np.ones((3, 2)))),
    ("sparse_coo_to_dense", (np.array([[1, 4, 2], [1, 0, 0]]), np.ones(3))),
    ("sparse_mm", (np.array([[-1, 0], [0, 1]]), np.ones(2), np.ones((3, 2)))),
])
def test_the_kernels_check_their_index_values(name, args):
    """The kernels check the index values themselves (a compiled replay runs them
    without the shape rule, and the COO product's compiled loop indexes without bounds
    checks: an index past the end wrote outside the output)."""
    from tapegrad.dispatch import bind
    op = tg.ops_registry.get(name)
    with pytest.raises(IndexError, match="out of bounds for dimension"):
        bind(op, *[tg.tensor(a) for a in args], size=(4, 3))
    with pytest.raises(Exception, match="out of bounds for dimension"):
        op.kernel(*args, size=(4, 3))


def test_clone_select_and_product_with_dense_as_torch():
    idx, vals = [[0, 1, 1, 0], [2, 0, 2, 2]], [3.0, 4.0, 5.0, 1.0]  # (uncoalesced)
    dense = np.random.default_rng(0).standard_normal((2, 3))
    results = {}
    for lib in (torch, tg):
        s = lib.sparse_coo_tensor(lib.tensor(idx), lib.tensor(vals, dtype=lib.float64),
                                  (2, 3))
        d = lib.tensor(dense)
        got = [s.clone(), s * d, d * s, s[1], s[-2], s.coalesce()[0]]
        assert all(r.layout == lib.sparse_coo for r in got)
        results[lib] = [r.to_dense().numpy() for r in got]
    for a, b in zip(results[tg], results[torch]):
        np.testing.assert_array_equal(a, b)
    v = tg.tensor(vals, dtype=tg.float64, requires_grad=True)
    d = tg.tensor(dense, requires_grad=True)
    s = tg.sparse_coo_tensor(tg.tensor(idx), v, (2, 3))
    ((s * d).to_dense().sum() + 10 * s[1].to_dense().sum() + s.clone().to_dense().sum()
     ).backward()
    at = dense[tuple(np.array(idx))]
    np.testing.assert_allclose(v.grad.numpy(), at + 10 * (np.array(idx[0]) == 1) + 1)
    np.testing.assert_allclose(d.grad.numpy(), [[0, 0, 4], [4, 0, 5]])
    with pytest.raises(RuntimeError, match="sizes must match"):
        s * tg.ones(3)
    with pytest.raises(IndexError):
        s[2]
