"""``geqrf``, ``linalg.householder_product``/``orgqr`` and ``ormqr`` against PyTorch's:
values, gradients (vs PyTorch's and finite differences, float64), the Tensor methods,
and PyTorch's errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 5, 5), (0, 3)])
def test_geqrf_matches_torch_and_rebuilds_the_matrix(shape):
    x = np.random.default_rng(1).standard_normal(shape)
    a, tau = tg.geqrf(tg.tensor(x))
    ta, ttau = torch.geqrf(torch.from_numpy(x))
    np.testing.assert_allclose(_np(a), ta.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(tau), ttau.numpy(), rtol=1e-10, atol=1e-12)
    m, n = shape[-2:]
    if m >= n and m:
        Q = tg.linalg.householder_product(a, tau)
        Rm = np.triu(_np(a))
        np.testing.assert_allclose(_np(Q) @ Rm[..., :n, :], x, atol=1e-12)


def test_geqrf_is_not_differentiable_and_methods_exist():
    x = tg.randn(4, 3, dtype=tg.float64, requires_grad=True)
    a, tau = x.geqrf()
    assert not a.requires_grad and not tau.requires_grad
    np.testing.assert_allclose(_np(a.orgqr(tau)), _np(tg.orgqr(a, tau)))
    c = tg.randn(4, 2, dtype=tg.float64)
    np.testing.assert_allclose(_np(a.ormqr(tau, c)), _np(tg.ormqr(a, tau, c)))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_ormqr_is_the_full_q_times_other(left, transpose):
    r = np.random.default_rng(2)
    x = r.standard_normal((2, 5, 3))
    ta, ttau = torch.geqrf(torch.from_numpy(x))
    c = r.standard_normal((2, 5, 4) if left else (2, 4, 5))
    got = tg.ormqr(tg.tensor(ta.numpy()), tg.tensor(ttau.numpy()), tg.tensor(c), left,
                   transpose)
    want = torch.ormqr(ta, ttau, torch.from_numpy(c), left, transpose)
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-10, atol=1e-12)
    # and against the explicit full Q
    Qf = torch.linalg.householder_product(
        torch.cat([ta, torch.zeros(2, 5, 2, dtype=ta.dtype)], -1),
        torch.cat([ttau, torch.zeros(2, 2, dtype=ta.dtype)], -1)).numpy()
    Qf = np.swapaxes(Qf, -1, -2) if transpose else Qf
    np.testing.assert_allclose(_np(got), Qf @ c if left else c @ Qf, atol=1e-12)


def test_gradients_match_torch_and_finite_differences():
    r = np.random.default_rng(3)
    a0, t0 = (t.numpy() for t in torch.geqrf(torch.from_numpy(r.standard_normal((5, 3)))))
    c0 = r.standard_normal((5, 2))
    w1, w2 = r.standard_normal((5, 3)), r.standard_normal((5, 2))
    ta = torch.from_numpy(a0.copy()).requires_grad_(True)
    tt = torch.from_numpy(t0.copy()).requires_grad_(True)
    tc = torch.from_numpy(c0.copy()).requires_grad_(True)
    tl = (torch.linalg.householder_product(ta, tt) * torch.from_numpy(w1)).sum() + \
        (torch.ormqr(ta, tt, tc, transpose=True) * torch.from_numpy(w2)).sum()
    tgr = torch.autograd.grad(tl, [ta, tt, tc])

    def loss(a, t, c):
        return (tg.linalg.householder_product(a, t) * tg.tensor(w1)).sum() + \
            (tg.ormqr(a, t, c, transpose=True) * tg.tensor(w2)).sum()
    ins = [tg.tensor(v, requires_grad=True) for v in (a0, t0, c0)]
    gs = tg.grad(loss(*ins), ins)
    for g, e in zip(gs, tgr):
        np.testing.assert_allclose(_np(g), e.numpy(), rtol=1e-9, atol=1e-11)
    assert gradcheck(loss, ins)
    small = [tg.tensor(v[:3, :2] if v.ndim == 2 else v[:2], requires_grad=True)
             for v in (a0, t0)]
    assert gradgradcheck(lambda a, t: tg.linalg.householder_product(a, t), small)


@pytest.mark.parametrize("call,words", [
    (lambda L, d: L.linalg.householder_product(L.ones(3, 4, dtype=d), L.ones(2, dtype=d)),
     "greater than or equal"),
    (lambda L, d: L.linalg.householder_product(L.ones(4, 3, dtype=d), L.ones(4, dtype=d)),
     "tau.shape"),
    (lambda L, d: L.linalg.householder_product(L.ones(2, 4, 3, dtype=d),
                                               L.ones(3, 2, dtype=d)), "batch dimensions"),
    (lambda L, d: L.ormqr(L.ones(4, 3, dtype=d), L.ones(2, dtype=d), L.ones(5, 2, dtype=d)),
     "must be equal to input"),
    (lambda L, d: L.ormqr(L.ones(4, 3, dtype=d), L.ones(2, dtype=d), L.ones(4, 2, dtype=d)),
     "tau.shape"),
    (lambda L, d: L.geqrf(L.ones(3, dtype=d)), "at least 2 dimensions"),
])
def test_errors_are_pytorchs(call, words):
    for L, d in ((tg, tg.float64), (torch, torch.float64)):
        with pytest.raises(RuntimeError, match=words):
            call(L, d)
