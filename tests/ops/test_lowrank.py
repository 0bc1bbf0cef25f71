"""``svd_lowrank`` and ``pca_lowrank`` against PyTorch's, where the answer does not depend
on the random directions (matrices of rank at most ``q``): singular values, the
reconstruction, the principal variances; reproducibility from ``tg.manual_seed``;
gradients of gauge-invariant functions against PyTorch's and finite differences."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.ops.linalg_decomp import _low_rank
from tapegrad.testing import gradcheck


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


@pytest.mark.parametrize("shape,svals,q", [((12, 7), [4.0, 2.0, 1.0], 3),
                                           ((6, 11), [3.0, 1.0], 4),
                                           ((3, 8, 5), [2.0, 0.5], 2)])
def test_exact_low_rank_matches_torch(shape, svals, q):
    a = _low_rank(shape, svals, np.float64, 3)
    tg.manual_seed(1)
    U, S, V = tg.svd_lowrank(tg.tensor(a), q=q)
    tU, tS, tV = torch.svd_lowrank(torch.from_numpy(a), q=q)
    k = len(svals)
    np.testing.assert_allclose(_np(S)[..., :k], _np(tS)[..., :k], rtol=1e-12)
    np.testing.assert_allclose(_np(S)[..., k:], 0.0, atol=1e-12)   # q above the rank
    rec = _np(U) @ (_np(S)[..., None] * np.swapaxes(_np(V), -1, -2))
    np.testing.assert_allclose(rec, a, atol=1e-12)
    trec = _np(tU) @ (_np(tS)[..., None] * np.swapaxes(_np(tV), -1, -2))
    np.testing.assert_allclose(rec, trec, atol=1e-12)
    assert U.shape == tU.shape and S.shape == tS.shape and V.shape == tV.shape
    eye = np.eye(U.shape[-1])
    np.testing.assert_allclose(np.swapaxes(_np(U), -1, -2) @ _np(U), np.broadcast_to(
        eye, U.shape[:-2] + eye.shape), atol=1e-12)


def test_M_is_subtracted_as_torch():
    a = _low_rank((9, 6), [2.0, 1.0], np.float64, 4)
    mrow = np.random.default_rng(0).uniform(-1, 1, (1, 6))
    tg.manual_seed(2)
    U, S, V = tg.svd_lowrank(tg.tensor(a + mrow), q=2, M=tg.tensor(mrow))
    _, tS, _ = torch.svd_lowrank(torch.from_numpy(a + mrow), q=2, M=torch.from_numpy(mrow))
    np.testing.assert_allclose(_np(S), _np(tS), rtol=1e-12)
    np.testing.assert_allclose(_np(U) @ np.diag(_np(S)) @ _np(V).T, a, atol=1e-12)


def test_reproducible_from_the_seed_and_random_otherwise():
    a = np.random.default_rng(5).standard_normal((10, 8))  # full rank: the draw matters
    runs = []
    for seed in (3, 3, 4):
        tg.manual_seed(seed)
        runs.append(_np(tg.svd_lowrank(tg.tensor(a), q=3, niter=0)[1]))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], runs[2])


def test_pca_variances_are_the_covariance_eigenvalues():
    a = _low_rank((20, 6), [5.0, 3.0, 1.0], np.float64, 6, center=True)
    tg.manual_seed(0)
    U, S, V = tg.pca_lowrank(tg.tensor(a), q=3)
    _, tS, _ = torch.pca_lowrank(torch.from_numpy(a), q=3)
    cov = np.cov(a, rowvar=False)
    ev = np.sort(np.linalg.eigvalsh(cov))[::-1][:3]
    np.testing.assert_allclose(_np(S) ** 2 / (a.shape[0] - 1), ev, rtol=1e-10)
    np.testing.assert_allclose(_np(S), _np(tS), rtol=1e-12)
    # V's columns are the principal directions: the centred data projects onto them
    c = a - a.mean(0)
    np.testing.assert_allclose(np.abs(c @ _np(V)), np.abs(_np(U) * _np(S)), atol=1e-12)


def test_pca_default_q():
    a = _low_rank((5, 4), [2.0, 1.0], np.float64, 7)
    U, S, V = tg.pca_lowrank(tg.tensor(a), center=False)
    assert U.shape == (5, 4) and S.shape == (4,) and V.shape == (4, 4)


def test_gradients_of_gauge_invariant_losses():
    """sum(S) and the reconstruction: against PyTorch's gradient and finite differences."""
    a = _low_rank((7, 5), [3.0, 1.5], np.float64, 8)
    w = np.random.default_rng(1).standard_normal((7, 5))

    def loss(lib, x):
        fn = tg.svd_lowrank if lib is tg else torch.svd_lowrank
        U, S, V = fn(x, q=2)
        rec = (U * S) @ V.mT
        return S.sum() + (rec * (lib.tensor(w) if lib is tg else torch.from_numpy(w))).sum()
    x = tg.tensor(a, requires_grad=True)
    tx = torch.from_numpy(a.copy()).requires_grad_(True)
    tg.manual_seed(0)
    g, = tg.grad(loss(tg, x), [x])
    tgr, = torch.autograd.grad(loss(torch, tx), [tx])
    np.testing.assert_allclose(_np(g), tgr.numpy(), rtol=1e-8, atol=1e-10)
    assert gradcheck(lambda x: loss(tg, x), [tg.tensor(a, requires_grad=True)])


@pytest.mark.parametrize("call,exc", [
    (lambda: tg.svd_lowrank(tg.ones(3)), RuntimeError),
    (lambda: tg.svd_lowrank(tg.ones(3, 3, dtype=tg.int64)), RuntimeError),
    (lambda: tg.svd_lowrank(tg.ones(4, 3), q=2, niter=-1), ValueError),
    (lambda: tg.svd_lowrank(tg.ones(4, 3), q=2, M=tg.ones(2, 3)), RuntimeError),
    (lambda: tg.pca_lowrank(tg.ones(4, 3), q=4), ValueError),
    (lambda: tg.pca_lowrank(tg.ones(4, 3), niter=-1), ValueError),
])
def test_errors(call, exc):
    with pytest.raises(exc, match="lowrank"):
        call()
