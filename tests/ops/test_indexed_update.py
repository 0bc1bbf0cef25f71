"""``segment_reduce`` against PyTorch's: every reduction, ``initial``, empty segments,
offsets (which win over lengths), a batch of segmentations along ``axis``; gradients
against PyTorch's (ties of max share the gradient) and finite differences; errors.

``index_reduce`` and the in-place ``index_reduce_`` / ``scatter_reduce_`` methods against
PyTorch's."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck

RED = ("sum", "mean", "max", "min", "prod", "amax", "amin")


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


def _both(x, reduce, **kw):
    g = tg.segment_reduce(tg.tensor(x), reduce, **{
        k: tg.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
    t = torch.segment_reduce(torch.from_numpy(x), reduce, **{
        k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
    return g, t


@pytest.mark.parametrize("reduce", RED)
@pytest.mark.parametrize("initial", [None, 0.7])
def test_values_match_torch_with_empty_segments(reduce, initial):
    x = np.random.default_rng(0).uniform(-2, 2, (9, 2))
    g, t = _both(x, reduce, lengths=np.array([3, 0, 4, 0, 2]), initial=initial)
    np.testing.assert_allclose(_np(g), t.numpy(), rtol=1e-12, equal_nan=True)


def test_offsets_batch_and_axis():
    x = np.random.default_rng(1).uniform(-2, 2, (2, 3, 8, 2))
    lengths = np.array([[[3, 5], [8, 0], [1, 7]], [[2, 6], [4, 4], [0, 8]]])
    offsets = np.concatenate([np.zeros((2, 3, 1), np.int64), np.cumsum(lengths, -1)], -1)
    for reduce in ("sum", "max", "mean"):
        g, t = _both(x, reduce, lengths=lengths, axis=2)
        np.testing.assert_allclose(_np(g), t.numpy(), rtol=1e-12, equal_nan=True)
        g, t = _both(x, reduce, offsets=offsets, axis=2)
        np.testing.assert_allclose(_np(g), t.numpy(), rtol=1e-12, equal_nan=True)
    x1 = np.arange(6.0)
    g, t = _both(x1, "sum", lengths=np.array([2, 4]), offsets=np.array([0, 3, 6]))
    np.testing.assert_array_equal(_np(g), t.numpy())   # offsets win, as PyTorch


@pytest.mark.parametrize("reduce", RED)
def test_gradients_match_torch_ties_included(reduce):
    x = np.array([1.0, 3.0, 3.0, 2.0, -1.0, 0.5, 0.5, 4.0])   # ties in the first segment
    L = np.array([4, 3, 1])
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    gx = tg.tensor(x, requires_grad=True)
    # positive cotangents: PyTorch's backward splits a tie's gradient only where it is
    # positive (a negative one goes whole to every tied element, its kernel tests
    # ``grad > 0`` before dividing); here ties always share it evenly, as amax does
    c = np.abs(np.random.default_rng(2).standard_normal(3)) + 0.1
    tgr, = torch.autograd.grad(torch.segment_reduce(tx, reduce, lengths=torch.from_numpy(L)),
                               tx, torch.from_numpy(c))
    ggr, = tg.grad(tg.segment_reduce(gx, reduce, lengths=tg.tensor(L)), gx, tg.tensor(c))
    np.testing.assert_allclose(_np(ggr), tgr.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("reduce", ("sum", "mean", "max", "prod"))
def test_finite_differences(reduce):
    x = tg.tensor(np.random.default_rng(3).uniform(0.5, 2, (7, 2)), requires_grad=True)
    L = tg.tensor(np.array([2, 4, 1]))

    def f(x):
        return tg.segment_reduce(x, reduce, lengths=L, initial=0.3)
    assert gradcheck(f, [x])
    assert gradgradcheck(f, [x])


@pytest.mark.parametrize("kw,words", [
    ({"lengths": np.array([2, 2])}, "sum to data.size"),
    ({}, "Either lengths or offsets"),
    ({"lengths": np.array([2, 4]), "reduce": "foo"}, "reduce argument"),
    ({"indices": np.array([0, 0, 1, 1, 1, 1])}, "indices based reduction"),
])
def test_errors_are_pytorchs(kw, words):
    kw = dict(kw)
    reduce = kw.pop("reduce", "sum")
    for lib in (tg, torch):
        T = (lambda a: torch.from_numpy(a)) if lib is torch else tg.tensor
        with pytest.raises(RuntimeError, match=words):
            lib.segment_reduce(T(np.arange(6.0)), reduce,
                               **{k: T(v) for k, v in kw.items()})


def test_inplace_methods_and_index_reduce():
    x = np.random.default_rng(1).uniform(0.5, 2.0, (4, 3))
    src = np.random.default_rng(2).uniform(0.5, 2.0, (3, 3))
    for L in (tg, torch):
        a = L.tensor(x)
        a.scatter_reduce_(0, L.tensor([[0, 1, 0], [3, 3, 3], [0, 0, 0]]), L.tensor(src), "mean",
                          include_self=False)
        b = L.tensor(x)
        b.index_reduce_(0, L.tensor([0, 3, 0]), L.tensor(src), "amax")
        if L is tg:
            ours = (a.numpy(), b.numpy())
        else:
            np.testing.assert_allclose(ours[0], a.numpy())
            np.testing.assert_allclose(ours[1], b.numpy())
    with pytest.raises(RuntimeError, match="index_reduce"):
        tg.index_reduce(tg.tensor(x), 0, tg.tensor([0, 1, 0]), tg.tensor(src), "sum")
