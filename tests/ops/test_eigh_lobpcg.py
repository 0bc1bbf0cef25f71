"""``linalg.eigh``/``eigvalsh`` and ``lobpcg`` against PyTorch's: values (eigenvectors
up to sign), gradients (PyTorch's symmetric one; against finite differences through a
symmetric parametrization), ``lobpcg`` against ``torch.lobpcg`` itself at its
convergence tolerance, and PyTorch's errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.ops.linalg_decomp import _spd, _sym
from tapegrad.testing import gradcheck, gradgradcheck


def _np(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.detach())


@pytest.mark.parametrize("shape,UPLO", [((5, 5), "L"), ((2, 4, 4), "U")])
def test_eigh_matches_torch(shape, UPLO):
    a = _sym(shape, np.float64, 3)
    a_one = np.tril(a) if UPLO == "L" else np.triu(a)   # only that triangle is read
    w, V = tg.linalg.eigh(tg.tensor(a_one), UPLO=UPLO)
    tw, tV = torch.linalg.eigh(torch.from_numpy(a_one), UPLO=UPLO)
    np.testing.assert_allclose(_np(w), tw.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.abs(_np(V)), np.abs(tV.numpy()), atol=1e-12)
    np.testing.assert_allclose(_np(tg.linalg.eigvalsh(tg.tensor(a))), _np(w), atol=1e-12)


def test_eigh_gradient_is_torchs_and_the_true_one_on_symmetric_matrices():
    a = _sym((5, 5), np.float64, 4)
    r = np.random.default_rng(0)
    cw, cV = r.standard_normal(5), r.standard_normal((5, 5))

    def loss(lib, x):
        w, V = lib.linalg.eigh(x)
        T = tg.tensor if lib is tg else torch.from_numpy
        return (w * T(cw)).sum() + (V * V * T(cV)).sum()   # sign-invariant in V
    x = tg.tensor(a, requires_grad=True)
    tx = torch.from_numpy(a.copy()).requires_grad_(True)
    g, = tg.grad(loss(tg, x), [x])
    tgr, = torch.autograd.grad(loss(torch, tx), [tx])
    np.testing.assert_allclose(_np(g), tgr.numpy(), rtol=1e-9, atol=1e-11)
    s = tg.tensor(np.tril(a), requires_grad=True)

    def sym_loss(s):
        return loss(tg, (s + s.mT) * 0.5)
    assert gradcheck(sym_loss, [s])
    small = tg.tensor(np.tril(_sym((3, 3), np.float64, 5)), requires_grad=True)
    assert gradgradcheck(lambda s: tg.linalg.eigvalsh((s + s.mT) * 0.5), [small])


def test_eigh_forward_mode():
    a = _sym((4, 4), np.float64, 6)
    d = np.random.default_rng(1).standard_normal((4, 4))
    d = d + d.T
    (w, V), (dw, dV) = tg.functional.jvp(lambda x: tuple(tg.linalg.eigh(x)), (tg.tensor(a),),
                                         (tg.tensor(d),))
    eps = 1e-6
    wp, Vp = np.linalg.eigh(a + eps * d)
    wm, Vm = np.linalg.eigh(a - eps * d)
    np.testing.assert_allclose(_np(dw), (wp - wm) / (2 * eps), rtol=1e-6, atol=1e-8)
    fd = (np.abs(Vp) - np.abs(Vm)) / (2 * eps)
    np.testing.assert_allclose(np.abs(_np(V) + eps * _np(dV)) - np.abs(_np(V) - eps * _np(dV)),
                               fd * 2 * eps, atol=1e-8)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("generalized", [False, True])
def test_lobpcg_matches_torch_lobpcg(largest, generalized):
    a = _sym((12, 12), np.float64, 7)
    b = _spd((12, 12), np.float64, 8) if generalized else None
    E, X = tg.lobpcg(tg.tensor(a), k=3, B=None if b is None else tg.tensor(b), largest=largest)
    torch.manual_seed(0)
    tE, tX = torch.lobpcg(torch.from_numpy(a), k=3, B=None if b is None else
                          torch.from_numpy(b), largest=largest)
    np.testing.assert_allclose(_np(E), tE.numpy(), rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(np.abs(_np(X)), np.abs(tX.numpy()), atol=1e-5)
    bb = np.eye(12) if b is None else b
    np.testing.assert_allclose(a @ _np(X), bb @ _np(X) * _np(E), atol=1e-10)
    np.testing.assert_allclose(_np(X).T @ bb @ _np(X), np.eye(3), atol=1e-10)


def test_lobpcg_gradient_matches_torch():
    a = _sym((9, 9), np.float64, 9)
    a = a + 0.1 * np.random.default_rng(2).standard_normal((9, 9))   # not symmetric: both
    c = np.random.default_rng(3).standard_normal(2)                 # symmetrize it first
    x = tg.tensor(a, requires_grad=True)
    tx = torch.from_numpy(a.copy()).requires_grad_(True)
    E, X = tg.lobpcg(x, k=2)
    torch.manual_seed(0)
    tE, tX = torch.lobpcg(tx, k=2)
    g, = tg.grad((E * tg.tensor(c)).sum() + (X * X).sum(), [x])
    tgr, = torch.autograd.grad((tE * torch.from_numpy(c)).sum() + (tX * tX).sum(), [tx])
    np.testing.assert_allclose(_np(g), tgr.numpy(), rtol=1e-5, atol=1e-6)
    assert gradcheck(lambda x: tg.lobpcg(x, k=2)[0], [tg.tensor(a, requires_grad=True)])


@pytest.mark.parametrize("call,exc,words", [
    (lambda L: L.lobpcg(L.ones(5, 5, dtype=L.float64), k=2), ValueError, "3 x the number"),
    (lambda L: L.linalg.eigh(L.ones(3, 4, dtype=L.float64)), RuntimeError, "square"),
])
def test_errors_are_pytorchs(call, exc, words):
    for L in (tg, torch):
        with pytest.raises(exc, match=words):
            call(L)
