"""QR, SVD and pinv against PyTorch where the registry's samples cannot reach:
gradients of gauge-invariant functions of the singular vectors (each pair's sign is
arbitrary) and of QR in every shape, first and second order, the full_matrices and
compute_uv forms, mode='r', and pinv with a cut-off (ours is the derivative, checked
against central differences; PyTorch's is its full-rank formula there)."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.linalg_decomp import _distinct_svals

torch = pytest.importorskip("torch")


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
