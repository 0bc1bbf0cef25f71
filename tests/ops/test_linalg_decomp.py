"""The decompositions of ``ops/linalg_decomp.py`` where the registry's samples cannot reach.

QR, SVD and pinv against PyTorch where the registry's samples cannot reach:
gradients of gauge-invariant functions of the singular vectors (each pair's sign is
arbitrary) and of QR in every shape, first and second order, the full_matrices and
compute_uv forms, mode='r', and pinv with a cut-off (ours is the derivative, checked
against central differences; PyTorch's is its full-rank formula there).

``geqrf``, ``linalg.householder_product``/``orgqr`` and ``ormqr`` against PyTorch's:
values, gradients (vs PyTorch's and finite differences, float64), the Tensor methods,
and PyTorch's errors.

``svd_lowrank`` and ``pca_lowrank`` against PyTorch's, where the answer does not depend
on the random directions (matrices of rank at most ``q``): singular values, the
reconstruction, the principal variances; reproducibility from ``tg.manual_seed``;
gradients of gauge-invariant functions against PyTorch's and finite differences.

``linalg.eigh``/``eigvalsh`` and ``lobpcg`` against PyTorch's: values (eigenvectors
up to sign), gradients (PyTorch's symmetric one; against finite differences through a
symmetric parametrization), ``lobpcg`` against ``torch.lobpcg`` itself at its
convergence tolerance, and PyTorch's errors."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.linalg_decomp import _distinct_svals, _low_rank, _spd, _sym
from tapegrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- QR, SVD, pinv, LU
def _grad(L, f, a, create=False):
    x = L.tensor(a, requires_grad=True)
    y = f(L, x)
    if L is tg:
        g, = tg.grad(y, [x], create_graph=create)
    else:
        g, = torch.autograd.grad(y, [x], create_graph=create)
    return x, g


def _svd_loss(L, x, full=False):
    U, S, Vh = L.linalg.svd(x, full_matrices=full)
    k = S.shape[-1]
    w = L.tensor(np.linspace(1.0, 2.0, U.shape[-2]))
    # gauge-invariant: |U|^2 rows, S, and U diag(S) Vh pieces
    return ((U[..., :, :k] ** 2) * w[:, None]).sum() + (S ** 3).sum() + \
        ((U[..., :, :k] * S[..., None, :]) @ Vh[..., :k, :]).pow(2).sum() * 0.1 + \
        ((Vh[..., :k, :] ** 2) * L.tensor(np.linspace(0.5, 1.0, Vh.shape[-1]))).sum()


@pytest.mark.parametrize("shape,full", [((4, 3), False), ((3, 5), False), ((2, 3, 3), False),
                                        ((5, 2), True), ((2, 4), True)])
def test_svd_gradients_like_pytorch(shape, full):
    a = _distinct_svals(shape, np.float64, 7)
    (_, ours), (_, theirs) = (_grad(L, lambda L, x: _svd_loss(L, x, full), a) for L in (tg, torch))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-10)


def test_svd_second_order_like_pytorch():
    a = _distinct_svals((4, 3), np.float64, 8)
    res = []
    for L in (tg, torch):
        x, g = _grad(L, _svd_loss, a, create=True)
        gg, = (tg.grad if L is tg else torch.autograd.grad)((g * g).sum(), [x])
        res.append(gg.numpy())
    np.testing.assert_allclose(res[0], res[1], rtol=1e-7, atol=1e-9)


def test_torch_svd_forms():
    a = _distinct_svals((4, 3), np.float64, 9)
    U, S, V = tg.svd(tg.tensor(a))
    np.testing.assert_allclose((U * S[None, :]) @ V.T, a, atol=1e-12)
    U0, S0, V0 = tg.svd(tg.tensor(a), compute_uv=False)
    assert float(abs(U0).sum()) == 0 and tuple(V0.shape) == (3, 3)
    np.testing.assert_allclose(tg.linalg.svdvals(tg.tensor(a)).numpy(),
                               torch.linalg.svdvals(torch.tensor(a)).numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="linalg_svd"):
        tg.linalg.svd(tg.tensor(np.full((2, 2), np.nan)))


def _qr_loss(L, x, mode="reduced"):
    Q, R = L.linalg.qr(x, mode=mode)
    return (Q * L.tensor(np.arange(1.0, Q.shape[-1] + 1))).sum() + (R ** 2).sum() + \
        (Q.sin() * R.sum()).sum() * 0.1


@pytest.mark.parametrize("shape,mode", [((4, 3), "reduced"), ((3, 3), "complete"),
                                        ((3, 5), "reduced"), ((2, 4), "complete"),
                                        ((2, 3, 4), "reduced")])
def test_qr_gradients_first_and_second_order_like_pytorch(shape, mode):
    a = np.random.default_rng(1).standard_normal(shape)
    res = []
    for L in (tg, torch):
        x, g = _grad(L, lambda L, x: _qr_loss(L, x, mode), a, create=True)
        gg, = (tg.grad if L is tg else torch.autograd.grad)((g ** 2).sum(), [x])
        res.append((g.detach().numpy(), gg.numpy()))
    for a_, b_ in zip(*res):
        np.testing.assert_allclose(a_, b_, rtol=1e-8, atol=1e-10)


def test_qr_mode_r_and_refusals():
    a = np.random.default_rng(2).standard_normal((5, 3))
    Q, R = tg.linalg.qr(tg.tensor(a), mode="r")
    tQ, tR = torch.linalg.qr(torch.tensor(a), mode="r")
    assert tuple(Q.shape) == tuple(tQ.shape)
    np.testing.assert_allclose(R.numpy(), tR.numpy(), atol=1e-12)
    x = tg.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="mode='complete'"):
        tg.linalg.qr(x, mode="complete")[0].sum().backward()
    q, r = tg.qr(tg.tensor(a), some=False)
    assert tuple(q.shape) == (5, 5) and tuple(r.shape) == (5, 3)


def test_pinv_with_a_cutoff_is_the_derivative():
    a = _distinct_svals((4, 3), np.float64, 3)
    g = np.random.default_rng(4).standard_normal((3, 4))
    x = tg.tensor(a, requires_grad=True)
    p = tg.linalg.pinv(x, rtol=0.5)  # drops the smallest singular value (1 < 0.5 * 3)
    np.testing.assert_allclose(p.detach().numpy(),
                               torch.linalg.pinv(torch.tensor(a), rtol=0.5).numpy(), atol=1e-12)
    (p * tg.tensor(g)).sum().backward()
    d = np.random.default_rng(5).standard_normal(a.shape)
    f = lambda m: (tg.linalg.pinv(tg.tensor(m), rtol=0.5).numpy() * g).sum()  # noqa: E731
    fd = (f(a + 1e-6 * d) - f(a - 1e-6 * d)) / 2e-6
    np.testing.assert_allclose((x.grad.numpy() * d).sum(), fd, rtol=1e-6)
    np.testing.assert_allclose(tg.pinverse(tg.tensor(a)).numpy(),
                               torch.pinverse(torch.tensor(a)).numpy(), atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_lu_factor_unpack_solve_like_pytorch_with_gradients(shape):
    r = np.random.default_rng(6)
    a = r.standard_normal(shape) + 3 * np.eye(shape[-1])
    b = r.standard_normal(shape[:-1] + (2,))
    res = []
    for L in (tg, torch):
        A = L.tensor(a, requires_grad=True)
        B = L.tensor(b, requires_grad=True)
        LU, piv = L.linalg.lu_factor(A)
        P, Lm, U = L.lu_unpack(LU, piv)
        X = L.linalg.lu_solve(LU, piv, B)
        Xa = L.linalg.lu_solve(LU, piv, B, adjoint=True)
        x1 = L.lu_solve(B, LU, piv)
        loss = (Lm.sin() * 2).sum() + (U ** 2).sum() + (X * 1.5).sum() + Xa.sum() + \
            (x1 ** 2).sum() + (LU ** 3).sum() * 0.1
        gA, gB = (tg.grad if L is tg else torch.autograd.grad)(loss, [A, B], create_graph=True)
        ggA, = (tg.grad if L is tg else torch.autograd.grad)((gA ** 2).sum(), [A])
        res.append([t.detach().numpy() for t in (LU, P, Lm, U, X, Xa, gA, gB, ggA)]
                   + [piv.numpy()])
    for p, q in zip(*res):
        np.testing.assert_allclose(p, q, rtol=1e-9, atol=1e-10)
    Pl, Ll, Ul = tg.linalg.lu(tg.tensor(a))
    np.testing.assert_allclose((Pl @ Ll @ Ul).numpy(), a, atol=1e-12)
    LU2, piv2, info = tg.lu(tg.tensor(a), get_infos=True)
    assert info.numpy().max() == 0 and info.dtype == tg.int32


def test_lu_rectangular_forward_like_pytorch():
    a = np.random.default_rng(7).standard_normal((4, 6))
    for m in (a, a.T):
        ours = [t.numpy() for t in tg.linalg.lu(tg.tensor(m))]
        theirs = [t.numpy() for t in torch.linalg.lu(torch.tensor(m))]
        for p, q in zip(ours, theirs):
            np.testing.assert_allclose(p, q, atol=1e-12)


# ------------------------------------------- Householder: geqrf, householder_product, orgqr, ormqr
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


def test_householder_gradients_match_torch_and_finite_differences():
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
def test_householder_errors_are_pytorchs(call, words):
    for L, d in ((tg, tg.float64), (torch, torch.float64)):
        with pytest.raises(RuntimeError, match=words):
            call(L, d)


# -------------------------------------------------------------- low rank: svd_lowrank, pca_lowrank
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


def test_lowrank_gradients_of_gauge_invariant_losses():
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
def test_lowrank_errors(call, exc):
    with pytest.raises(exc, match="lowrank"):
        call()


# ---------------------------------------------------------------- eigh, eigvalsh, lobpcg
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
def test_eigh_lobpcg_errors_are_pytorchs(call, exc, words):
    for L in (tg, torch):
        with pytest.raises(exc, match=words):
            call(L)
