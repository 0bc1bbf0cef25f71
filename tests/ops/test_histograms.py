"""``histogramdd`` against PyTorch's: counts, weights, density, edges given as tensors,
the default and explicit ranges, points on the edges, the empty input; not
differentiable; vmap; PyTorch's errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


def _both(x, bins, **kw):
    tb = bins if isinstance(bins, int) or not hasattr(bins[0], "shape") else \
        [torch.from_numpy(np.asarray(b)) for b in bins]
    gb = bins if isinstance(bins, int) or not hasattr(bins[0], "shape") else \
        [tg.tensor(b) for b in bins]
    tkw = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    gkw = {k: tg.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    return tg.histogramdd(tg.tensor(x), gb, **gkw), torch.histogramdd(torch.from_numpy(x), tb,
                                                                       **tkw)


def _same(g, t):
    # weights summed in float64 here, in float32 by PyTorch: float32's rounding apart
    tol = 1e-12 if _np(g.hist).dtype == np.float64 else 1e-6
    np.testing.assert_allclose(_np(g.hist), _np(t.hist), rtol=tol, atol=tol)
    assert len(g.bin_edges) == len(t.bin_edges)
    for a, b in zip(g.bin_edges, t.bin_edges):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", [
    dict(shape=(200, 2), bins=5),
    dict(shape=(50, 3), bins=[2, 3, 4], density=True),
    dict(shape=(4, 10, 2), bins=[3, 3], range=[-1.0, 1.0, 0.0, 2.0]),
    dict(shape=(30, 1), bins=4, weight=True),
    dict(shape=(0, 2), bins=2),
])
def test_matches_torch(case, dtype):
    r = np.random.default_rng(0)
    x = r.uniform(-1.5, 1.5, case["shape"]).astype(dtype)
    kw = {k: case[k] for k in ("density", "range") if k in case}
    if case.get("weight"):
        kw["weight"] = r.uniform(0, 2, case["shape"][:-1]).astype(dtype)
    _same(*_both(x, case["bins"], **kw))


def test_tensor_edges_points_on_edges_and_the_closed_last_bin():
    x = np.array([[0.0, 0.0], [0.5, 1.0], [1.0, 2.0], [1.0, 0.5], [-0.1, 1.0], [0.25, 3.0]])
    edges = [np.array([0.0, 0.5, 1.0]), np.array([0.0, 1.0, 2.0])]
    g, t = _both(x, edges)
    _same(g, t)
    assert _np(g.hist).sum() == 4   # (-0.1, .) and (., 3.0) fall outside


def test_constant_data_widens_the_range_and_no_gradient():
    x = tg.ones(6, 2, dtype=tg.float64, requires_grad=True)
    g = tg.histogramdd(x, 2)
    t = torch.histogramdd(torch.ones(6, 2, dtype=torch.float64), 2)
    _same(g, t)
    assert not g.hist.requires_grad


def test_vmap_is_one_histogram_per_example():
    x = np.random.default_rng(1).uniform(0, 1, (3, 10, 2))
    got = tg.vmap(lambda a: tg.histogramdd(a, 3).hist)(tg.tensor(x))
    want = np.stack([torch.histogramdd(torch.from_numpy(e), 3).hist.numpy() for e in x])
    np.testing.assert_allclose(_np(got), want)


@pytest.mark.parametrize("call,exc,words", [
    (lambda L, d: L.histogramdd(L.ones(5, dtype=d), [2]), RuntimeError, "at least 2"),
    (lambda L, d: L.histogramdd(L.ones(5, 2, dtype=d), [2, 3, 4]), RuntimeError,
     "innermost dimension"),
    (lambda L, d: L.histogramdd(L.ones(5, 2, dtype=d), 2, weight=L.ones(4, dtype=d)),
     RuntimeError, "same shape"),
    (lambda L, d: L.histogramdd(L.ones(5, 2, dtype=d), 2, range=[0.0, 1.0]), RuntimeError,
     "4 elements"),
    (lambda L, d: L.histogramdd(L.ones(5, 2, dtype=d), 2, range=[1.0, 0.0, 0.0, 1.0]),
     RuntimeError, "min should not exceed max"),
])
def test_errors_are_pytorchs(call, exc, words):
    for L, d in ((tg, tg.float64), (torch, torch.float64)):
        with pytest.raises(exc, match=words):
            call(L, d)


@pytest.mark.parametrize("kw", [{}, {"density": True}, {"weight": True},
                                {"weight": True, "density": True}])
@pytest.mark.parametrize("shape", [(56,), (7, 8)])
def test_histogram_of_tensor_edges_matches_torch(kw, shape):
    r = np.random.default_rng(0)
    x = r.uniform(-1, 5, shape)
    x.flat[:6] = [0.0, 1.0, 2.0, 4.0, -3.0, 7.0]   # on the edges, and outside
    edges = np.array([0.0, 1.0, 2.0, 4.0])
    w = r.uniform(0, 2, shape)
    got = tg.histogram(tg.tensor(x), tg.tensor(edges), density=kw.get("density", False),
                       weight=tg.tensor(w) if kw.get("weight") else None)
    want = torch.histogram(torch.tensor(x), torch.tensor(edges),
                           density=kw.get("density", False),
                           weight=torch.tensor(w) if kw.get("weight") else None)
    assert type(got).__name__ == "histogram"
    np.testing.assert_allclose(_np(got.hist), want.hist.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(_np(got.bin_edges), want.bin_edges.numpy())


@pytest.mark.parametrize("call,exc", [
    (lambda L: L.histogram(L.tensor([0.5, 1.5]), L.tensor([[0.0, 1.0], [2.0, 3.0]])),
     RuntimeError),
    (lambda L: L.histogram(L.tensor([0.5, 1.5]), L.tensor([1.0])), RuntimeError),
    (lambda L: L.histogram(L.tensor([0.5, 1.5]), L.tensor([0.0, 1.0], dtype=L.float64)),
     RuntimeError),
    (lambda L: L.histogram(L.tensor([0.5, 1.5]), L.tensor([0.0, 1.0]), range=(0.0, 1.0)),
     TypeError),
    (lambda L: L.histogram(L.tensor([0.5, 1.5]), 2.5), TypeError),
])
def test_histogram_refuses_what_torch_refuses(call, exc):
    for L in (tg, torch):
        with pytest.raises(exc):
            call(L)
