"""Matrix decompositions with PyTorch's gradients, and what is built on them.

- ``linalg_qr``: one registry op (LAPACK through NumPy). Its vjp is the QR adjoint
  for ``m >= n`` (``gA = [gQ + Q copyltu(M)] R^-T``, ``M = R gR^T - gQ^T Q``,
  written as TensorFlow's and PyTorch's), extended to ``m < n`` by splitting
  ``A = Q [R1 | R2]``; its jvp is the tangent of the same map. Both are written with
  ops (matmul, tril, triangular solves), so they differentiate again. As PyTorch,
  mode="complete" with more rows than columns and mode="r" are not differentiable.
- ``linalg_svd``: one registry op (reduced or full). Its vjp is PyTorch's
  ``svd_backward`` (``E_ij = s_j^2 - s_i^2``; the columns ``full_matrices`` adds are
  left out of the gradient, as PyTorch narrows them), its jvp the tangent of the
  same (``dS = diag(U^T dA V)``, ``dU = U F(dP S + S dP^T) + (I - UU^T) dA V S^-1``).
  Singular vectors are defined up to sign, so only a gauge-invariant function of
  them has one gradient; with repeated singular values there is none (as PyTorch).
  ``qr``, ``svd``, ``svdvals``, ``pinv``/``pinverse`` are composites over these two
  (``pinv``: ``V diag(1/s) U^T`` over the singular values above the cut-off).
- ``linalg_lu_factor``: partial pivoting as LAPACK's getrf (pivots 1-based, int32),
  its vjp ``P L^-T [tril(L^T gL, -1) + triu(gU U^T)] U^-T`` and the matching jvp
  (square matrices; rectangular ones factor, without a derivative); ``lu_unpack``,
  ``lu_solve``, ``linalg.lu``, ``linalg.lu_solve`` are composites over it.
- ``cholesky`` (PyTorch's ``torch.cholesky``, with ``upper``), ``cholesky_inverse``,
  ``cholesky_solve``, ``triangular_solve``: composites of ``linalg.cholesky``, ``inv``
  and ``solve_triangular``.
- ``svd_lowrank(A, q=6, niter=2, M=None)``, ``pca_lowrank(A, q=None, center=True,
  niter=2)``: PyTorch's randomized algorithm (Halko et al. 2009, 4.4 and 5.1), step for
  step, as composites of ``randn`` (tapegrad's seeded generator), matmul, ``linalg.qr``
  and ``linalg.svd``: gradients, forward mode and vmap come from those ops. The sign of
  each singular pair is fixed as ``linalg.svd``'s (the largest entry of each column of
  U positive), so a result does not depend on the random draw where the decomposition
  is determined (a matrix of rank at most ``q``).
- ``geqrf``: LAPACK's QR in Householder form ``(a, tau)`` (NumPy's ``qr(mode="raw")``),
  not differentiable, as PyTorch's. ``linalg.householder_product`` (``orgqr``): the
  first ``n`` columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^T``; ``ormqr``:
  that full ``Q`` (or its transpose) times a matrix, from the left or the right.
  Composites over the compact WY form ``Q = I - V M^-1 diag(tau) V^T`` (matmuls and
  one unit-triangular solve), so both differentiate in ``input``, ``tau`` and
  ``other``, at every order.
- ``linalg_eigh``: a registry op with PyTorch's symmetric gradient and tangent
  (``tg.linalg.eigh``/``eigvalsh``), and ``lobpcg`` over it (the exact eigenpairs
  lobpcg converges to, after a Cholesky reduction for ``B``)."""
from collections import namedtuple

import numpy as np

from .. import devices as _devices
from .._util import op_error
from ..dispatch import bind
from . import (
    _vmap,
    creation as C,
    elementwise as E,
    indexing as I,
    linalg as L,
    reduce as R,
    shape as SH,
)
from ._decl import S, Sample, TensorSpec, composite, decl, rand, register
from .linalg import LinAlgError, _same, _spd_sample, _square, solve_triangular

__all__ = ["qr", "svd", "pinverse", "lu", "lu_unpack", "lu_solve", "svd_lowrank", "pca_lowrank",
           "geqrf", "orgqr", "ormqr", "lobpcg", "cholesky", "cholesky_inverse", "cholesky_solve",
           "triangular_solve"]


_QR = namedtuple("qr", ("Q", "R"))


_SVD = namedtuple("svd", ("U", "S", "Vh"))


_SVD_V = namedtuple("svd", ("U", "S", "V"))


def _float_matrix(name, x):
    dt = np.dtype(getattr(x.dtype, "np", x.dtype))
    if len(x.shape) < 2:
        raise op_error(name, f"The input tensor A must have at least 2 dimensions, got "
                             f"shape {tuple(x.shape)}", RuntimeError)
    if dt.kind != "f":
        raise op_error(name, f"Expected a floating point tensor as input, got {dt.name}",
                       RuntimeError)
    return dt


# ---------------------------------------------------------------- QR
def _qr_infer(x, mode="reduced"):
    dt = _float_matrix("linalg_qr", x)
    if mode not in ("reduced", "complete", "r"):
        raise op_error("linalg_qr", f"qr received unrecognized mode '{mode}' but expected "
                                    f"one of 'reduced' (default), 'r', or 'complete'",
                       RuntimeError)
    *b, m, n = x.shape
    k = min(m, n)
    b = tuple(b)
    if mode == "reduced":
        return TensorSpec(b + (m, k), dt), TensorSpec(b + (k, n), dt)
    if mode == "complete":
        return TensorSpec(b + (m, m), dt), TensorSpec(b + (m, n), dt)
    return TensorSpec((0,), dt), TensorSpec(b + (k, n), dt)


def _qr_kernel(x, mode="reduced"):
    *b, m, n = x.shape
    if x.size == 0:
        q_spec, r_spec = _qr_infer(x, mode)
        return np.zeros(q_spec.shape, x.dtype), np.zeros(r_spec.shape, x.dtype)
    if mode == "r":
        return np.zeros((0,), x.dtype), np.linalg.qr(x, mode="r").astype(x.dtype)
    q, r = np.linalg.qr(x, mode=mode)
    return q.astype(x.dtype), r.astype(x.dtype)


def _right_rinvT(m, X, R):
    """``X R^-T`` for upper triangular ``R``."""
    return m.mT(solve_triangular(R, m.mT(X), upper=True))


def _qr_square_vjp(m, Q, R, gQ, gR):
    """The adjoint of ``A = QR`` for ``m >= n`` (reduced): TensorFlow's QrGrad."""
    qdq = m.matmul(m.mT(Q), gQ)
    rdr = m.matmul(R, m.mT(gR))
    low = m.tril(qdq - m.mT(qdq) + rdr - m.mT(rdr))
    grad_a = m.matmul(Q, gR + _right_rinvT(m, low, R))
    grad_b = _right_rinvT(m, gQ - m.matmul(Q, qdq), R)
    return grad_a + grad_b


def _check_qr_diff(ctx):
    mode = ctx.attrs.get("mode", "reduced")
    mm, nn = ctx.shapes[0][-2:]
    if mode == "r":
        raise RuntimeError("linalg_qr: the derivative of linalg.qr depends on Q, which is "
                           "not computed when mode='r'. Please use linalg.qr(A, mode="
                           "'reduced') if you are going to differentiate through linalg.qr.")
    if mode == "complete" and mm > nn:
        raise RuntimeError("linalg_qr: the QR decomposition is not differentiable when "
                           "mode='complete' and nrows > ncols.")


def _qr_vjp(ctx, g):
    _check_qr_diff(ctx)
    m = ctx.m
    Q, R = ctx.out
    gQ, gR = g
    if gQ is None:
        gQ = m.zeros_like(Q)
    if gR is None:
        gR = m.zeros_like(R)
    mm, nn = ctx.shapes[0][-2:]
    if mm >= nn:
        return (_qr_square_vjp(m, Q, R, gQ, gR),)
    # A = Q [R1 | R2]: X = A[:, :m] = Q R1 (square), Y = A[:, m:] = Q R2
    R1, R2 = R[..., :, :mm], R[..., :, mm:]
    gR1, gR2 = gR[..., :, :mm], gR[..., :, mm:]
    Y = m.matmul(Q, R2)
    gX = _qr_square_vjp(m, Q, R1, gQ + m.matmul(Y, m.mT(gR2)), gR1)
    gY = m.matmul(Q, gR2)
    return (SH.cat([gX, gY], -1),)


def _qr_square_jvp(m, Q, R, dA):
    """Tangents of ``A = QR`` (m >= n): with ``C = Q^T dA R^-1``,
    ``dR = (triu(C) - the skew part's upper) R`` and ``dQ = dA R^-1 - Q dR R^-1``."""
    X = m.mT(solve_triangular(m.mT(R), m.mT(dA), upper=False))  # dA R^-1
    C = m.matmul(m.mT(Q), X)
    low = m.tril(C, -1)
    omega = low - m.mT(low)  # Q^T dQ, skew
    dR = m.matmul(C - omega, R)
    dQ = X - m.matmul(Q, m.matmul(dR, _rinv(m, R)))
    return dQ, dR


def _rinv(m, R):
    n = R.shape[-1]
    eye = m.eye(n, dtype=R.dtype) + m.zeros_like(R)
    return solve_triangular(R, eye, upper=True)


def _qr_jvp(ctx, dA):
    _check_qr_diff(ctx)
    m = ctx.m
    Q, R = ctx.out
    mm, nn = ctx.shapes[0][-2:]
    if mm >= nn:
        return _qr_square_jvp(m, Q, R, dA)
    R2 = R[..., :, mm:]
    dX, dY = dA[..., :, :mm], dA[..., :, mm:]
    dQ, dR1 = _qr_square_jvp(m, Q, R[..., :, :mm], dX)
    dR2 = m.matmul(m.mT(Q), dY - m.matmul(dQ, R2))
    return dQ, SH.cat([dR1, dR2], -1)


def _qr_samples(dtype=np.float64):
    return [Sample((rand((4, 3), dtype, seed=1),), {"mode": "reduced"}),
            Sample((rand((3, 3), dtype, seed=2),), {"mode": "reduced"}),
            Sample((rand((2, 3, 5), dtype, seed=3),), {"mode": "reduced"}),
            Sample((rand((3, 3), dtype, seed=4),), {"mode": "complete"}),
            Sample((rand((2, 4), dtype, seed=5),), {"mode": "complete"}),
            Sample((rand((5, 3), dtype, seed=6),), {"mode": "complete"}, False)]


QR = register(
    name="linalg_qr", autocast={"cpu": "fp32"}, kernel=_qr_kernel, infer=_qr_infer, args=("x",),
    nout=2,
    saves=("out",), vjp=_qr_vjp, jvp=_qr_jvp, vmap=_vmap.leading, samples=_qr_samples,
    error_samples=lambda: [((rand((3,)),), {"mode": "reduced"}, RuntimeError),
                           ((rand((3, 3)),), {"mode": "full"}, RuntimeError),
                           ((np.ones((3, 3), np.int64),), {"mode": "reduced"}, RuntimeError)],
    torch=lambda torch, x, mode="reduced": torch.linalg.qr(x, mode=mode))


def linalg_qr(A, mode="reduced", *, out=None):
    """``(Q, R)`` with ``A = QR``, ``Q`` orthonormal columns, ``R`` upper triangular
    (``mode``: "reduced", "complete", or "r": R only, Q empty), as ``torch.linalg.qr``."""
    if out is not None:
        raise op_error("linalg_qr", "out= is not supported", TypeError)
    return _QR(*bind(QR, A, mode=mode))


def qr(input, some=True, *, out=None):
    """``torch.qr``: ``linalg.qr`` with ``some=True`` the reduced and ``some=False``
    the complete decomposition."""
    return linalg_qr(input, "reduced" if some else "complete", out=out)


composite(qr, autocast={"cpu": "fp32"},
          infer=lambda x, some=True: _qr_infer(x, "reduced" if some else "complete"),
          nout=2, samples=lambda dtype=np.float64: [
              Sample((rand((4, 3), dtype, seed=1),), {}),
              Sample((rand((3, 3), dtype, seed=2),), {"some": False}),
              Sample((rand((2, 3, 4), dtype, seed=3),), {})],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, some=True: torch.qr(x, some))


# ---------------------------------------------------------------- SVD
def _svd_infer(x, full_matrices=True):
    dt = _float_matrix("linalg_svd", x)
    *b, m, n = x.shape
    k = min(m, n)
    b = tuple(b)
    if full_matrices:
        return TensorSpec(b + (m, m), dt), TensorSpec(b + (k,), dt), TensorSpec(b + (n, n), dt)
    return TensorSpec(b + (m, k), dt), TensorSpec(b + (k,), dt), TensorSpec(b + (k, n), dt)


def _svd_kernel(x, full_matrices=True):
    if x.size == 0:
        specs = _svd_infer(x, full_matrices)
        outs = [np.zeros(s.shape, x.dtype) for s in specs]
        *b, m, n = x.shape
        if full_matrices:  # identities, as LAPACK's
            outs[0] = np.broadcast_to(np.eye(m, dtype=x.dtype), specs[0].shape).copy()
            outs[2] = np.broadcast_to(np.eye(n, dtype=x.dtype), specs[2].shape).copy()
        return tuple(outs)
    if not np.isfinite(x).all():
        raise LinAlgError("linalg_svd: the algorithm failed to converge because the input "
                          "matrix contained non-finite values.")
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    u, vh = _fix_signs(np, u, vh, s.shape[-1])
    return u.astype(x.dtype), s.astype(x.dtype), vh.astype(x.dtype)


def _fix_signs(xp, u, vh, k):
    """The sign of each singular pair fixed (LAPACK's choice varies by library): the
    largest entry (by magnitude, the first of equals) of each column of U positive,
    the matching row of Vh flipped with it. Works on NumPy arrays and on PyTorch
    tensors (the oracle normalises PyTorch's factors the same way)."""
    if xp is np:
        idx = np.argmax(np.abs(u[..., :, :k]), axis=-2)[..., None, :]
        sg = np.sign(np.take_along_axis(u[..., :, :k], idx, axis=-2))
        sg = np.where(sg == 0, 1.0, sg).astype(u.dtype)
        u = u.copy()
        vh = vh.copy()
        u[..., :, :k] *= sg
        vh[..., :k, :] *= np.swapaxes(sg, -1, -2)
        return u, vh
    idx = xp.argmax(u[..., :, :k].abs(), dim=-2, keepdim=True)
    sg = xp.gather(u[..., :, :k], -2, idx).sign().detach()
    sg = xp.where(sg == 0, xp.ones_like(sg), sg)
    pad_u = xp.ones(u.shape[:-2] + (1, u.shape[-1] - k), dtype=u.dtype)
    pad_v = xp.ones(vh.shape[:-2] + (vh.shape[-2] - k, 1), dtype=vh.dtype)
    return (u * xp.cat([sg, pad_u], -1), vh * xp.cat([sg.mT, pad_v], -2))


def _svd_parts(ctx):
    U, S, Vh = ctx.out
    k = S.shape[-1]
    if ctx.attrs.get("full_matrices", True):  # the added columns take no gradient
        U, Vh = U[..., :, :k], Vh[..., :k, :]
    return U, S, Vh


def _svd_E(m, S):
    S2 = S * S
    E = m.unsqueeze(S2, -2) - m.unsqueeze(S2, -1)  # E_ij = s_j^2 - s_i^2
    k = S.shape[-1]
    eye = m.eye(k, dtype=S.dtype)
    return E + eye, eye  # 1 on the diagonal (masked out by the callers)


def _svd_vjp(ctx, g):
    m = ctx.m
    U, S, Vh = _svd_parts(ctx)
    gU, gS, gVh = g
    k = S.shape[-1]
    if gU is not None and ctx.attrs.get("full_matrices", True):
        gU = gU[..., :, :k]
    if gVh is not None and ctx.attrs.get("full_matrices", True):
        gVh = gVh[..., :k, :]
    mm, nn = ctx.shapes[0][-2:]
    if gU is None and gVh is None:
        gA = m.unsqueeze(gS, -1) * m.eye(k, dtype=S.dtype)
        return (m.matmul(U, m.matmul(gA, Vh)),)
    E, eye = _svd_E(m, S)
    off = 1 - eye
    V = m.mT(Vh)
    gA = None
    if gU is not None:
        UhgU = m.matmul(m.mT(U), gU)
        gA = (UhgU - m.mT(UhgU)) * m.unsqueeze(S, -2) / E * off
    if gVh is not None:
        gV = m.mT(gVh)
        VhgV = m.matmul(Vh, gV)
        part = m.unsqueeze(S, -1) * (VhgV - m.mT(VhgV)) / E * off
        gA = part if gA is None else gA + part
    if gS is not None:
        gA = gA + m.unsqueeze(gS, -1) * eye
    if mm > k and gU is not None:
        gA = m.matmul(U, gA)
        gUSinv = gU / m.unsqueeze(S, -2)
        gA = gA + gUSinv - m.matmul(U, m.matmul(m.mT(U), gUSinv))
        gA = m.matmul(gA, Vh)
    elif nn > k and gVh is not None:
        gA = m.matmul(gA, Vh)
        SinvgVh = gVh / m.unsqueeze(S, -1)
        gA = gA + SinvgVh - m.matmul(m.matmul(SinvgVh, V), Vh)
        gA = m.matmul(U, gA)
    else:
        gA = m.matmul(U, m.matmul(gA, Vh))
    return (gA,)


def _svd_jvp(ctx, dA):
    m = ctx.m
    U, S, Vh = _svd_parts(ctx)
    V = m.mT(Vh)
    mm, nn = ctx.shapes[0][-2:]
    k = S.shape[-1]
    dP = m.matmul(m.mT(U), m.matmul(dA, V))
    E, eye = _svd_E(m, S)
    off = 1 - eye
    dS = R.sum(dP * eye, -1)
    dPS = dP * m.unsqueeze(S, -2)
    SdP = m.unsqueeze(S, -1) * dP
    omega_u = (dPS + m.mT(dPS)) / E * off
    omega_v = (SdP + m.mT(SdP)) / E * off
    dU = m.matmul(U, omega_u)
    dV = m.matmul(V, omega_v)
    if mm > k:
        X = m.matmul(dA, V) / m.unsqueeze(S, -2)
        dU = dU + X - m.matmul(U, m.matmul(m.mT(U), X))
    if nn > k:
        Y = m.matmul(m.mT(dA), U) / m.unsqueeze(S, -2)
        dV = dV + Y - m.matmul(V, m.matmul(Vh, Y))
    dVh = m.mT(dV)
    if ctx.attrs.get("full_matrices", True) and mm != nn:
        # the added columns: their tangent is not defined (PyTorch gives none either)
        if mm > k:
            dU = SH.cat([dU, m.zeros_like(ctx.out[0][..., :, k:])], -1)
        if nn > k:
            dVh = SH.cat([dVh, m.zeros_like(ctx.out[2][..., k:, :])], -2)
    return dU, dS, dVh


def _distinct_svals(shape, dtype, seed):
    """A matrix with well-separated singular values (gradients are finite)."""
    r = np.random.default_rng(seed)
    *b, m, n = shape
    k = min(m, n)
    u, _ = np.linalg.qr(r.standard_normal(tuple(b) + (m, m)))
    v, _ = np.linalg.qr(r.standard_normal(tuple(b) + (n, n)))
    s = np.zeros(tuple(b) + (m, n))
    idx = np.arange(k)
    s[..., idx, idx] = np.linspace(3.0, 1.0, k) if k else s[..., idx, idx]
    return (u @ s @ np.swapaxes(v, -1, -2)).astype(dtype)


def _svd_samples(dtype=np.float64):
    # forward-only: the sign of each singular pair is LAPACK's choice, so a function
    # of U or Vh alone has no one gradient; the gradients are checked against
    # PyTorch's on gauge-invariant functions in tests/ops/test_linalg_decomp.py, and the
    # singular values' here (svdvals)
    return [Sample((_distinct_svals((4, 3), dtype, 1),), {"full_matrices": False}, False),
            Sample((_distinct_svals((3, 5), dtype, 2),), {"full_matrices": False}, False),
            Sample((_distinct_svals((2, 3, 3), dtype, 3),), {"full_matrices": True}, False),
            Sample((_distinct_svals((4, 2), dtype, 4),), {"full_matrices": True}, False)]


def _svd_torch(torch, x, full_matrices=True):
    u, s, vh = torch.linalg.svd(x, full_matrices=full_matrices)
    u, vh = _fix_signs(torch, u, vh, s.shape[-1])
    return u, s, vh


SVD = register(
    name="linalg_svd", autocast={"cpu": "fp32"}, kernel=_svd_kernel, infer=_svd_infer, args=("x",),
    nout=3,
    saves=("out",), vjp=_svd_vjp, jvp=_svd_jvp, vmap=_vmap.leading, samples=_svd_samples,
    error_samples=lambda: [((rand((3,)),), {"full_matrices": False}, RuntimeError),
                           ((np.ones((3, 3), np.int64),), {"full_matrices": False},
                            RuntimeError),
                           ((np.full((2, 2), np.nan),), {"full_matrices": False},
                            RuntimeError)],
    torch=_svd_torch)


def linalg_svd(A, full_matrices=True, *, driver=None, out=None):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, singular values descending, as
    ``torch.linalg.svd`` (``full_matrices=False``: the reduced factors). Each
    singular pair's sign is fixed: the largest entry of each column of U is
    positive (PyTorch leaves it to its LAPACK)."""
    if out is not None:
        raise op_error("linalg_svd", "out= is not supported", TypeError)
    return _SVD(*bind(SVD, A, full_matrices=bool(full_matrices)))


def _svd_v_torch(torch, x, some=True, compute_uv=True):
    u, s, vh = _svd_torch(torch, x, not some)
    if not compute_uv:
        return torch.svd(x, some, compute_uv)
    return u, s, vh.mT


def _svd_v_infer(x, some=True, compute_uv=True):
    u, s, vh = _svd_infer(x, not some)
    return u, s, TensorSpec(tuple(vh.shape[:-2]) + (vh.shape[-1], vh.shape[-2]), vh.dtype)


def svd(input, some=True, compute_uv=True, *, out=None):
    """``torch.svd``: ``(U, S, V)`` (V, not its transpose); ``some=False``: the full
    factors; ``compute_uv=False``: U and V are zeros (and S has no gradient through
    them), as PyTorch."""
    U, S, Vh = linalg_svd(input, full_matrices=not some, out=out)
    if not compute_uv:
        return _SVD_V(C.zeros_like(U.detach()), S, C.zeros_like(SH.mT(Vh).detach()))
    return _SVD_V(U, S, SH.mT(Vh))


composite(svd, autocast={"cpu": "fp32"}, infer=_svd_v_infer, nout=3,
          samples=lambda dtype=np.float64: [
              Sample((_distinct_svals((4, 3), dtype, 1),), {}, False),
              Sample((_distinct_svals((3, 3), dtype, 2),), {"some": False}, False),
              Sample((_distinct_svals((3, 3), dtype, 3),), {"compute_uv": False}, False)],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=_svd_v_torch)


def svdvals(A, *, driver=None, out=None):
    """The singular values of ``A``, descending (``torch.linalg.svdvals``)."""
    return linalg_svd(A, full_matrices=False, out=out)[1]


composite(svdvals, infer=lambda x: _svd_infer(x, False)[1], args=("A",),
          samples=lambda dtype=np.float64: [
              Sample((_distinct_svals((4, 3), dtype, 1),), {}),
              Sample((_distinct_svals((2, 3, 5), dtype, 2),), {})],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x: torch.linalg.svdvals(x), name="linalg_svdvals")


# ---------------------------------------------------------------- pinv
def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    """The Moore-Penrose pseudo-inverse (``torch.linalg.pinv``): ``V diag(1/s) U^T``
    over the singular values above ``max(atol, rtol * s_max)`` (default: rtol =
    eps * max(m, n) when atol is not given), a composite of ``svd``."""
    name = "linalg_pinv"
    if out is not None:
        raise op_error(name, "out= is not supported", TypeError)
    _float_matrix(name, A)
    *b, mm, nn = A.shape
    if rtol is None:
        rtol = 0.0 if (atol is not None and atol > 0) else \
            np.finfo(_float_matrix(name, A)).eps * max(mm, nn)
    atol = 0.0 if atol is None else atol
    U, S, Vh = linalg_svd(A, full_matrices=False)
    if S.shape[-1] == 0:
        return SH.mT(A) * 0
    smax = R.amax(S, -1, True)  # (only compared: no gradient through it)
    cut = smax * rtol
    if atol:
        cut = E.where(cut > atol, cut, float(atol))
    keep = S > cut
    sinv = E.where(keep, 1.0 / E.where(keep, S, 1.0), 0.0)
    return L.matmul(SH.mT(Vh) * SH.unsqueeze(sinv, -2), SH.mT(U))


composite(pinv, infer=lambda x, **k: TensorSpec(tuple(x.shape[:-2]) + (x.shape[-1],
                                                                       x.shape[-2]),
                                                np.dtype(x.dtype)),
          args=("A",), name="linalg_pinv",
          samples=lambda dtype=np.float64: [
              Sample((_distinct_svals((4, 3), dtype, 1),), {}),
              Sample((_distinct_svals((2, 3, 5), dtype, 2),), {}),
              Sample((_distinct_svals((3, 3), dtype, 3),), {"rtol": 0.2})],
          # (a cut-off that drops singular values: PyTorch's gradient there is its
          # full-rank formula, not the derivative; ours is, tests/ops/test_linalg_decomp.py)
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, **k: torch.linalg.pinv(x, **k))


def pinverse(input, rcond=1e-15):
    """``torch.pinverse``: ``linalg.pinv`` with the relative cut-off ``rcond``."""
    return pinv(input, rtol=rcond)


composite(pinverse, autocast={"cpu": "fp32"}, infer=lambda x, rcond=1e-15: TensorSpec(
              tuple(x.shape[:-2]) + (x.shape[-1], x.shape[-2]), np.dtype(x.dtype)),
          samples=lambda dtype=np.float64: [Sample((_distinct_svals((4, 3), dtype, 1),), {}),
                                            Sample((_distinct_svals((3, 5), dtype, 2),),
                                                   {"rcond": 0.2})],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, rcond=1e-15: torch.pinverse(x, rcond))


# ---------------------------------------------------------------- LU
_LUF = namedtuple("lu_factor", ("LU", "pivots"))


_PLU = namedtuple("lu", ("P", "L", "U"))


def _lu_infer(x):
    dt = _float_matrix("linalg_lu_factor", x)
    *b, m, n = x.shape
    return TensorSpec(tuple(x.shape), dt), TensorSpec(tuple(b) + (min(m, n),),
                                                      np.dtype(np.int32))


def _lu_kernel(x):
    """Partial pivoting, LAPACK getrf's rule (the first largest |entry| of the column),
    batched; pivots 1-based, as LAPACK and PyTorch."""
    *b, m, n = x.shape
    k = min(m, n)
    a = np.array(x, dtype=np.float64).reshape(-1, m, n)
    nb = a.shape[0]
    piv = np.zeros((nb, k), np.int32)
    rows = np.arange(nb)
    for j in range(k):
        p = np.argmax(np.abs(a[:, j:, j]), axis=1) + j
        piv[:, j] = p + 1
        top = a[rows, j].copy()
        a[rows, j] = a[rows, p]
        a[rows, p] = top
        pivot = a[:, j, j]
        safe = np.where(pivot == 0, 1.0, pivot)
        a[:, j + 1:, j] /= safe[:, None]
        a[:, j + 1:, j + 1:] -= a[:, j + 1:, j, None] * a[:, j, None, j + 1:]
    return a.reshape(x.shape).astype(x.dtype), piv.reshape(tuple(b) + (k,))


def _perm_matrix(piv, m, dtype, out=None):
    """P (with A = P L U) from LAPACK's 1-based pivots, on the pivots' device; into
    ``out`` (zeroed, then the ones written) when given."""
    xp = _devices.xp_of(piv)
    lead = piv.shape[:-1]
    flat = piv.reshape(-1, piv.shape[-1])
    perm = xp.empty((flat.shape[0], m), np.int64)
    perm[...] = xp.arange(m)
    r = xp.arange(flat.shape[0])
    for j in range(flat.shape[1]):
        pj = flat[:, j] - 1
        tmp = perm[r, j].copy()
        perm[r, j] = perm[r, pj]
        perm[r, pj] = tmp
    if out is not None and out.flags.c_contiguous:
        # the ones' flat positions, in place in the permutation (1/m of the output)
        perm *= m
        perm += xp.arange(m)
        perm += (r * (m * m))[:, None]
        out[...] = 0
        xp.put(out.reshape(-1), perm, 1)
        return out
    P = xp.zeros((flat.shape[0], m, m), dtype)
    P[r[:, None], perm, xp.arange(m)[None, :]] = 1
    if out is not None:
        out[...] = P.reshape(lead + (m, m))
        return out
    return P.reshape(lead + (m, m))


def _perm_infer(piv, m, dtype):
    if np.dtype(piv.dtype).kind not in "iu":
        raise op_error("_lu_pivots_to_permutation", f"pivots must be integers, got "
                                                    f"{np.dtype(piv.dtype)}", RuntimeError)
    return TensorSpec(tuple(piv.shape[:-1]) + (m, m), np.dtype(dtype))


PIVOTS_TO_P = register(
    name="_lu_pivots_to_permutation", kernel=_perm_matrix,
    infer=_perm_infer, args=("pivots",), differentiable=False, vmap=_vmap.leading,
    samples=lambda dtype=np.float64: [
        Sample((np.array([2, 2, 3], np.int32),), {"m": 3, "dtype": np.dtype(dtype)}),
        Sample((np.array([[3, 3, 3, 4], [1, 2, 4, 4]], np.int32),),
               {"m": 4, "dtype": np.dtype(dtype)})],
    error_samples=lambda: [((rand((3,)),), {"m": 3, "dtype": np.dtype(np.float64)},
                            RuntimeError)],
    torch=lambda torch, piv, m, dtype: torch.lu_unpack(
        torch.zeros(tuple(piv.shape[:-1]) + (m, m), dtype=getattr(torch, dtype.name)),
        piv)[0])


def _lu_parts(m, LU):
    n = LU.shape[-1]
    low = m.tril(LU, -1) + m.eye(n, dtype=LU.dtype)
    return low, m.triu(LU)


def _lu_square(ctx):
    mm, nn = ctx.shapes[0][-2:]
    if mm != nn:
        raise NotImplementedError("linalg_lu_factor: the derivative is implemented for "
                                  "square matrices only")
    return mm


def _lu_vjp(ctx, g):
    gLU = g[0]
    mm = _lu_square(ctx)
    m = ctx.m
    LU, piv = ctx.out
    Lm, U = _lu_parts(m, LU)
    M = m.tril(m.matmul(m.mT(Lm), m.tril(gLU, -1)), -1) + m.triu(m.matmul(m.triu(gLU),
                                                                           m.mT(U)))
    Z = solve_triangular(m.mT(Lm), M, upper=True, unitriangular=True)
    Z = m.mT(solve_triangular(U, m.mT(Z), upper=True))
    return (m.matmul(_P_like(piv, mm, ctx.dtypes[0]), Z),)


def _lu_jvp(ctx, dA):
    mm = _lu_square(ctx)
    m = ctx.m
    LU, piv = ctx.out
    Lm, U = _lu_parts(m, LU)
    P = _P_like(piv, mm, ctx.dtypes[0])
    X = solve_triangular(Lm, m.matmul(m.mT(P), dA), upper=False, unitriangular=True)
    X = m.mT(solve_triangular(m.mT(U), m.mT(X), upper=False))  # X U^-1
    return m.matmul(Lm, m.tril(X, -1)) + m.matmul(m.triu(X), U), None


def _raw_of(t):
    from .indexing import _raw
    return _raw(t)


def _P_like(piv, m, dtype):
    """P from the pivots (``_lu_pivots_to_permutation``, bound on them: a Tensor, a raw
    array, or an export's array, where the export runs the op; no host copy)."""
    return bind(PIVOTS_TO_P, piv, m=m, dtype=np.dtype(getattr(dtype, "np", dtype)))


def _lu_samples(dtype=np.float64):
    return [Sample((rand((3, 3), dtype, seed=1),), {}),
            Sample((rand((2, 4, 4), dtype, seed=2),), {}),
            # a tie for the pivot (the first row stays): forward-only, a perturbation
            # flips the choice
            Sample((np.array([[1.0, 2.0], [1.0, 2.0 + 1e-1]], dtype),), {}, False),
            Sample((rand((4, 3), dtype, seed=3),), {}, False),
            Sample((rand((2, 5), dtype, seed=4),), {}, False)]


LU_FACTOR = register(
    name="linalg_lu_factor", kernel=_lu_kernel, infer=_lu_infer, args=("x",), nout=2,
    saves=("out",), vjp=_lu_vjp, jvp=_lu_jvp, vmap=_vmap.leading, samples=_lu_samples,
    error_samples=lambda: [((rand((3,)),), {}, RuntimeError),
                           ((np.ones((2, 2), np.int64),), {}, RuntimeError)],
    torch=lambda torch, x: torch.linalg.lu_factor(x))


def lu_factor(A, *, pivot=True, out=None):
    """``(LU, pivots)``: L (unit lower, below the diagonal) and U packed in one matrix,
    and LAPACK's 1-based row interchanges (int32), as ``torch.linalg.lu_factor``."""
    if out is not None:
        raise op_error("linalg_lu_factor", "out= is not supported", TypeError)
    if not pivot:
        raise op_error("linalg_lu_factor", "LU without pivoting is not implemented on "
                                           "the CPU (as PyTorch)", RuntimeError)
    return _LUF(*bind(LU_FACTOR, A))


def _wc(shape, dtype, seed):
    a = rand(shape, dtype, seed=seed)
    n = shape[-1]
    return (a + 2 * np.eye(n, dtype=dtype)).astype(dtype) if shape[-1] == shape[-2] else a


def lu(A, pivot=True, get_infos=False, out=None):
    """``torch.lu``: ``(LU, pivots)`` (and ``infos``, zeros where the factorization
    completed, with ``get_infos``)."""
    LU, piv = lu_factor(A, pivot=pivot, out=out)
    if get_infos:  # LAPACK's info: the (1-based) index of the first zero pivot, or 0
        d = np.diagonal(_raw_of(LU), 0, -2, -1) == 0
        info = np.where(d.any(-1), np.argmax(d, -1) + 1, 0).astype(np.int32)
        return LU, piv, C.tensor(info)
    return LU, piv


composite(lu, infer=lambda x, **k: _lu_infer(x), nout=2, args=("A",),
          samples=lambda dtype=np.float64: [Sample((_wc((3, 3), dtype, 1),), {}),
                                            Sample((_wc((2, 4, 4), dtype, 2),), {})],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, **k: torch.linalg.lu_factor(x))


def _lu_pair(shape, dtype, seed):
    lu_, piv = _lu_kernel(_wc(shape, dtype, seed))
    return lu_, piv


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` from ``lu_factor``'s packed result, ``A = P L U``."""
    name = "lu_unpack"
    if LU_data.ndim < 2:
        raise op_error(name, f"LU_data must have at least 2 dims, got shape "
                             f"{tuple(LU_data.shape)}", RuntimeError)
    *b, mm, nn = LU_data.shape
    k = min(mm, nn)
    if tuple(LU_pivots.shape) != tuple(b) + (k,):
        raise op_error(name, f"LU_pivots of shape {tuple(LU_pivots.shape)} do not match "
                             f"LU_data of shape {tuple(LU_data.shape)}", RuntimeError)
    from ..tape import state as _state
    span = _raw_of(LU_pivots)  # (inside vmap: the batch's values, checked by the kernel)
    if not _state.vmap_levels and span.size and (int(span.min()) < 1 or
                                                 int(span.max()) > mm):
        raise op_error(name, f"pivots must be in [1, {mm}]", RuntimeError)
    P = None
    if unpack_pivots:
        P = bind(PIVOTS_TO_P, LU_pivots, m=mm, dtype=np.dtype(_raw_of(LU_data).dtype))
    if not unpack_data:
        return _PLU(P, None, None)
    Lm = SH.tril(LU_data, -1)[..., :, :k] + C.eye(mm, k, dtype=LU_data.dtype)
    U = SH.triu(LU_data)[..., :k, :]
    return _PLU(P, Lm, U)


composite(lu_unpack, nout=3, args=("LU_data", "LU_pivots"), differentiable=True,
          infer=lambda lu_, piv, **k: (
              TensorSpec(tuple(lu_.shape[:-2]) + (lu_.shape[-2],) * 2, np.dtype(lu_.dtype)),
              TensorSpec(tuple(lu_.shape[:-1]) + (min(lu_.shape[-2:]),), np.dtype(lu_.dtype)),
              TensorSpec(tuple(lu_.shape[:-2]) + (min(lu_.shape[-2:]), lu_.shape[-1]),
                         np.dtype(lu_.dtype))),
          # (forward-only: P takes no gradient, so the registry's all-outputs checks do
          # not apply; L's and U's gradients: tests/ops/test_linalg_decomp.py)
          samples=lambda dtype=np.float64: [Sample(_lu_pair((3, 3), dtype, 1), {}, False),
                                            Sample(_lu_pair((2, 4, 4), dtype, 2), {}, False)],
          error_samples=lambda: [(("not a tensor", np.ones(3, np.int32)), {}, TypeError)],
          torch=lambda torch, a, p: torch.lu_unpack(a, p))


def _lu_solve(LU, pivots, B, adjoint=False):
    P, Lm, U = lu_unpack(LU, pivots)
    if adjoint:  # A^T X = B: X = P L^-T U^-T B
        Y = solve_triangular(SH.mT(U), B, upper=False)
        Y = solve_triangular(SH.mT(Lm), Y, upper=True, unitriangular=True)
        return L.matmul(P, Y)
    Y = solve_triangular(Lm, L.matmul(SH.mT(P), B), upper=False, unitriangular=True)
    return solve_triangular(U, Y, upper=True)


def _lu_args_samples(fn):
    def samples(dtype=np.float64):
        out = []
        for k, (sa, sb) in enumerate((((3, 3), (3, 2)), ((2, 4, 4), (2, 4, 1)))):
            lu_, piv = _lu_pair(sa, dtype, k)
            out.append(fn(lu_, piv, rand(sb, dtype, seed=k + 5)))
        return out
    return samples


def linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False, out=None):
    """Solve ``A X = B`` given ``lu_factor(A)`` (``adjoint``: ``A^T X = B``;
    ``left=False``: ``X A = B``), as ``torch.linalg.lu_solve``; differentiable in LU
    and B."""
    name = "linalg_lu_solve"
    if out is not None:
        raise op_error(name, "out= is not supported", TypeError)
    if LU.ndim < 2 or LU.shape[-1] != LU.shape[-2]:
        raise op_error(name, f"LU must be a batch of square matrices, got shape "
                             f"{tuple(LU.shape)}", RuntimeError)
    if B.ndim < 2 or B.shape[-2 if left else -1] != LU.shape[-1]:
        raise op_error(name, f"incompatible shapes of A {tuple(LU.shape)} and B "
                             f"{tuple(B.shape)}", RuntimeError)
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return SH.mT(_lu_solve(LU, pivots, SH.mT(B), adjoint=not adjoint))
    return _lu_solve(LU, pivots, B, adjoint=adjoint)


composite(linalg_lu_solve, name="linalg_lu_solve", args=("LU", "pivots", "B"),
          autocast={"cpu": "keep"},  # (float32 under CPU autocast, adjoint or not)
          infer=lambda lu_, piv, b, **k: TensorSpec(tuple(b.shape), np.dtype(b.dtype)),
          samples=lambda dtype=np.float64: (
              _lu_args_samples(lambda lu_, piv, b: Sample((lu_, piv, b), {}))(dtype)
              + _lu_args_samples(lambda lu_, piv, b: Sample((lu_, piv, b),
                                                            {"adjoint": True}))(dtype)
              + [Sample(_lu_pair((3, 3), dtype, 3) + (rand((2, 3), dtype, seed=9),),
                        {"left": False})]),
          error_samples=lambda: [(_lu_pair((3, 3), np.float64, 0) + (rand((4, 2)),), {},
                                  RuntimeError)],
          torch=lambda torch, lu_, piv, b, **k: torch.linalg.lu_solve(lu_, piv, b, **k))


def lu_solve(b, LU_data, LU_pivots, *, out=None):
    """``torch.lu_solve``: the solution of ``A x = b`` from ``torch.lu(A)``."""
    return linalg_lu_solve(LU_data, LU_pivots, b, out=out)


composite(lu_solve, autocast={"cpu": "fp32"},
          infer=lambda b, lu_, piv: TensorSpec(tuple(b.shape), np.dtype(b.dtype)),
          args=("b", "LU_data", "LU_pivots"),
          samples=_lu_args_samples(lambda lu_, piv, b: Sample((b, lu_, piv), {})),
          error_samples=lambda: [((rand((4, 2)),) + _lu_pair((3, 3), np.float64, 0), {},
                                  RuntimeError)],
          torch=lambda torch, b, lu_, piv: torch.lu_solve(b, lu_, piv))


def linalg_lu(A, *, pivot=True, out=None):
    """``(P, L, U)`` with ``A = P L U`` (``torch.linalg.lu``)."""
    if out is not None:
        raise op_error("linalg_lu", "out= is not supported", TypeError)
    return lu_unpack(*lu_factor(A, pivot=pivot))


composite(linalg_lu, name="linalg_lu", nout=3, args=("A",),
          infer=lambda x, **k: (TensorSpec(tuple(x.shape[:-2]) + (x.shape[-2],) * 2,
                                           np.dtype(x.dtype)),
                                TensorSpec(tuple(x.shape[:-1]) + (min(x.shape[-2:]),),
                                           np.dtype(x.dtype)),
                                TensorSpec(tuple(x.shape[:-2]) + (min(x.shape[-2:]),
                                                                  x.shape[-1]),
                                           np.dtype(x.dtype))),
          samples=lambda dtype=np.float64: [Sample((_wc((3, 3), dtype, 1),), {}, False),
                                            Sample((_wc((2, 4, 4), dtype, 2),), {}, False)],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x: torch.linalg.lu(x))


_SVDL = namedtuple("svd_lowrank", ("U", "S", "V"))


_GEQRF = namedtuple("geqrf", ("a", "tau"))


def _np_dt(x):
    return np.dtype(getattr(x.dtype, "np", x.dtype))


def _float_matrix_arg(name, x, what="A"):
    if len(x.shape) < 2:
        raise op_error(name, f"{what} must have at least 2 dimensions, got shape "
                             f"{tuple(x.shape)}", RuntimeError)
    dt = _np_dt(x)
    if dt.kind != "f":
        raise op_error(name, f"expected a floating point {what}, got {dt.name}", RuntimeError)
    return dt


# ---------------------------------------------------------------- low rank
def _fix_lowrank_signs(U, V):
    """Each singular pair's sign: the largest entry (by magnitude) of each column of U
    positive (no gradient through the choice)."""
    if U.shape[-1] == 0 or U.shape[-2] == 0:
        return U, V
    idx = R.argmax(E.abs(U.detach()), dim=-2, keepdim=True)
    sg = E.sign(I.gather(U.detach(), -2, idx))
    sg = E.where(sg == 0, 1.0, sg)
    return U * sg, V * sg


def _approximate_basis(A, q, niter, M):
    """``Q`` with ``q`` orthonormal columns, ``Q Q^T (A - M) ~ A - M`` (Halko 4.4)."""
    n = A.shape[-1]
    Rm = C.randn(n, q, dtype=A.dtype, device=A.device)
    X = L.matmul(A, Rm)
    if M is not None:
        X = X - L.matmul(M, Rm)
    Q = linalg_qr(X).Q
    for _ in range(niter):
        X = L.matmul(SH.mT(A), Q)
        if M is not None:
            X = X - L.matmul(SH.mT(M), Q)
        Q = linalg_qr(X).Q
        X = L.matmul(A, Q)
        if M is not None:
            X = X - L.matmul(M, Q)
        Q = linalg_qr(X).Q
    return Q


def _lowrank_args(name, A, q, niter):
    from ..devices import check_alloc
    _float_matrix_arg(name, A)
    check_alloc(name, A.shape, _np_dt(A))   # (a huge broadcast view is multiplied out)
    for what, v in (("q", q), ("niter", niter)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise op_error(name, f"{what} must be an int, got {v!r}", TypeError)
    if niter < 0:
        raise op_error(name, f"niter(={niter}) must be non-negative integer", ValueError)
    if q < 0:
        raise op_error(name, f"q(={q}) must be non-negative integer", ValueError)


def _svd_lowrank(A, q, niter, M):
    m, n = A.shape[-2:]
    if M is not None:
        M = SH.broadcast_to(M, tuple(A.shape))
    if m < n:
        A = SH.mT(A)
        if M is not None:
            M = SH.mT(M)
    Q = _approximate_basis(A, q, niter, M)
    B = L.matmul(SH.mT(Q), A)
    if M is not None:
        B = B - L.matmul(SH.mT(Q), M)
    U, S, Vh = linalg_svd(B, full_matrices=False)
    V = SH.mT(Vh)
    U = L.matmul(Q, U)
    if m < n:
        U, V = V, U
    U, V = _fix_lowrank_signs(U, V)
    return _SVDL(U, S, V)


def _lowrank_infer(name):
    def infer(A, M=None, q=6, niter=2, center=True):
        _float_matrix_arg(name, A)
        *b, m, n = A.shape
        if q is None:
            q = min(6, m, n) if name == "pca_lowrank" else 6
        dt = _np_dt(A)
        k = min(q, m, n)  # the reduced QR of an (m, q) sketch keeps min(m, q) columns
        b = tuple(b)
        return (TensorSpec(b + (m, k), dt), TensorSpec(b + (k,), dt),
                TensorSpec(b + (n, k), dt))
    return infer


def _svdl_torch(torch, A, M=None, q=6, niter=2):
    return _torch_signs(torch, *torch.svd_lowrank(A, q=q, niter=niter, M=M))


def _svdl_samples(dtype=np.float64):
    # determined decompositions: rank q, well-separated singular values
    return [Sample((_low_rank((8, 6), [3.0, 2.0, 1.0], dtype, 1),), {"q": 3}),
            Sample((_low_rank((5, 9), [2.0, 1.0], dtype, 2),), {"q": 2, "niter": 3}),
            Sample((_low_rank((2, 6, 4), [2.5, 1.0], dtype, 3),), {"q": 2}),
            Sample((_low_rank((7, 5), [3.0, 1.5], dtype, 4) + np.full((1, 5), 0.3, dtype),
                    np.full((1, 5), 0.3, dtype)), {"q": 2})]


def svd_lowrank(A, q=6, niter=2, M=None):
    """``(U, S, V)`` with ``A - M ~ U diag(S) V^T`` from ``q`` random directions and
    ``niter`` subspace iterations, as ``torch.svd_lowrank`` (randomized: seed with
    ``tg.manual_seed``). Exact, up to rounding, when ``A - M`` has rank at most ``q``."""
    q = 6 if q is None else q
    niter = 2 if niter is None else niter
    _lowrank_args("svd_lowrank", A, q, niter)
    if M is not None:
        if _np_dt(M) != _np_dt(A):
            raise op_error("svd_lowrank", f"expected M of A's dtype {_np_dt(A).name}, got "
                                          f"{_np_dt(M).name}", RuntimeError)
        try:
            np.broadcast_shapes(tuple(M.shape), tuple(A.shape))
        except ValueError:
            raise op_error("svd_lowrank", f"M of shape {tuple(M.shape)} does not broadcast "
                                          f"to A's shape {tuple(A.shape)}",
                           RuntimeError) from None
    return _svd_lowrank(A, q, niter, M)


composite(svd_lowrank, infer=_lowrank_infer("svd_lowrank"), args=("A", "M"), optional=("M",),
          by_name=True,
          samples=_svdl_samples, nout=3,
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError),
                                 ((np.ones((3, 3), np.int64),), {}, RuntimeError),
                                 ((rand((4, 3)),), {"q": 2, "niter": -1}, ValueError),
                                 ((rand((4, 3)), rand((2, 3))), {"q": 2}, RuntimeError)],
          torch=_svdl_torch)


def _pca_torch(torch, A, q=None, center=True, niter=2):
    return _torch_signs(torch, *torch.pca_lowrank(A, q=q, center=center, niter=niter))


def _pca_samples(dtype=np.float64):
    return [Sample((_low_rank((9, 5), [3.0, 2.0, 1.0], dtype, 5, center=True),), {"q": 3}),
            Sample((_low_rank((6, 4), [2.0, 1.0], dtype, 6),), {"q": 2, "center": False}),
            Sample((_low_rank((2, 7, 5), [2.0, 1.0], dtype, 7, center=True),), {"q": 2})]


def pca_lowrank(A, q=None, center=True, niter=2):
    """Principal components of the rows of ``A``: ``svd_lowrank`` of ``A`` less its
    column means (``center=True``), ``q`` defaulting to ``min(6, m, n)``, as
    ``torch.pca_lowrank``."""
    _float_matrix_arg("pca_lowrank", A)
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif isinstance(q, bool) or not isinstance(q, (int, np.integer)) or \
            not 0 <= q <= min(m, n):
        raise op_error("pca_lowrank", f"q(={q}) must be non-negative integer and not "
                                      f"greater than min(m, n)={min(m, n)}", ValueError)
    _lowrank_args("pca_lowrank", A, q, niter)
    if not center:
        return _svd_lowrank(A, q, niter, None)
    return _svd_lowrank(A - R.mean(A, dim=-2, keepdim=True), q, niter, None)


composite(pca_lowrank, infer=_lowrank_infer("pca_lowrank"), args=("A",), nout=3,
          samples=_pca_samples,
          error_samples=lambda: [((rand((4, 3)),), {"q": 4}, ValueError),
                                 ((rand((4, 3)),), {"q": 2, "niter": -1}, ValueError),
                                 ((rand((3,)),), {}, RuntimeError)],
          torch=_pca_torch)


def _low_rank(shape, svals, dtype, seed, center=None):
    """A matrix of rank ``len(svals)`` with those singular values (after removing its
    column means, with ``center``: a row vector added to a column-centred product)."""
    r = np.random.default_rng(seed)
    *b, m, n = shape
    k = len(svals)
    u = r.standard_normal(tuple(b) + (m, k))
    if center is not None:
        u = u - u.mean(-2, keepdims=True)
    u, _ = np.linalg.qr(u)
    v, _ = np.linalg.qr(r.standard_normal(tuple(b) + (n, k)))
    a = u @ (np.asarray(svals)[:, None] * np.swapaxes(v, -1, -2))
    if center is not None:
        a = a + r.uniform(-1, 1, tuple(b) + (1, n))
    return a.astype(dtype)


def _torch_signs(torch, U, S, V):
    idx = U.detach().abs().argmax(-2, keepdim=True)
    sg = torch.gather(U.detach(), -2, idx).sign()
    sg = torch.where(sg == 0, torch.ones_like(sg), sg)
    return U * sg, S, V * sg


# ---------------------------------------------------------------- Householder QR
def _geqrf_infer(x):
    if len(x.shape) < 2:
        raise op_error("geqrf", "input must have at least 2 dimensions.", RuntimeError)
    dt = _np_dt(x)
    if dt.kind != "f":
        raise op_error("geqrf", f"not implemented for {dt.name}", NotImplementedError)
    *b, m, n = x.shape
    return TensorSpec(tuple(x.shape), dt), TensorSpec(tuple(b) + (min(m, n),), dt)


def _geqrf_kernel(x):
    from ..devices import xp_of
    xp = xp_of(x)
    *b, m, n = x.shape
    if x.size == 0:
        return xp.zeros(x.shape, x.dtype), xp.zeros(tuple(b) + (min(m, n),), x.dtype)
    h, tau = xp.linalg.qr(x, mode="raw")   # LAPACK's geqrf; h is the transpose
    return (xp.ascontiguousarray(xp.swapaxes(h, -1, -2)).astype(x.dtype, copy=False),
            tau.astype(x.dtype, copy=False))


def _geqrf_reference(x):
    """Householder QR written out (the LAPACK convention: ``beta = -sign(alpha) norm``)."""
    *b, m, n = x.shape
    a = np.array(x, dtype=np.float64).reshape((-1, m, n))
    taus = np.zeros((a.shape[0], min(m, n)))
    for s in range(a.shape[0]):
        for j in range(min(m, n)):
            alpha, rest = a[s, j, j], a[s, j + 1:, j]
            xn = np.linalg.norm(rest)
            if xn == 0.0:
                continue
            beta = -np.copysign(np.hypot(alpha, xn), alpha)
            taus[s, j] = (beta - alpha) / beta
            v = rest / (alpha - beta)
            a[s, j + 1:, j] = v
            a[s, j, j] = beta
            w = a[s, j, j + 1:] + v @ a[s, j + 1:, j + 1:]
            a[s, j, j + 1:] -= taus[s, j] * w
            a[s, j + 1:, j + 1:] -= taus[s, j] * np.outer(v, w)
    return (a.reshape(x.shape).astype(x.dtype),
            taus.reshape(tuple(b) + (min(m, n),)).astype(x.dtype))


GEQRF = register(
    name="geqrf", autocast={"cpu": "fp32"}, kernel=_geqrf_kernel, infer=_geqrf_infer, args=("x",),
    nout=2,
    differentiable=False, vmap=_vmap.leading,
    samples=lambda dtype=np.float64: [Sample((rand((5, 3), dtype, seed=1),), {}),
                                      Sample((rand((3, 5), dtype, seed=2),), {}),
                                      Sample((rand((2, 4, 4), dtype, seed=3),), {})],
    error_samples=lambda: [((rand((3,)),), {}, RuntimeError),
                           ((np.ones((3, 3), np.int64),), {}, NotImplementedError)],
    torch=lambda torch, x: torch.geqrf(x), reference=_geqrf_reference)


def geqrf(input, *, out=None):
    """``(a, tau)``: the QR decomposition in LAPACK's Householder form (R on and above
    the diagonal of ``a``, the reflectors' vectors below it, their scales in ``tau``),
    as ``torch.geqrf``; ``linalg.householder_product(a, tau)`` rebuilds Q. Not
    differentiable (as PyTorch's)."""
    if out is not None:
        raise op_error("geqrf", "out= is not supported", TypeError)
    return _GEQRF(*bind(GEQRF, input))


def _reflectors(name, A, tau):
    """The unit lower-trapezoidal vectors ``V`` (``mn x t``), ``tau`` as ``(*, t, 1)``,
    and the unit upper-triangular ``M = I + triu(diag(tau) V^T V, 1)`` of the compact
    WY form ``H_1 ... H_t = I - V T V^T``, ``T = M^-1 diag(tau)`` (Joffrain et al.,
    2006, with tau scaled into M so that a zero tau (``H_i = I``) needs no inverse)."""
    t = tau.shape[-1]
    mn = A.shape[-2]
    V = SH.tril(A[..., :, :t], -1) + C.eye(mn, t, dtype=A.dtype, device=A.device)
    Tc = SH.unsqueeze(tau, -1)
    M = SH.triu(Tc * L.matmul(SH.mT(V), V), 1)   # its unit diagonal is implied
    return V, Tc, M


def _apply_q(V, Tc, M, X, left, transpose):
    """``Q X``, ``Q^T X`` (``left``), ``X Q`` or ``X Q^T`` with ``Q = I - V T V^T``: two
    matmuls and one triangular solve (for every reflector at once)."""
    from .linalg import solve_triangular
    if left:
        W = L.matmul(SH.mT(V), X)
        if transpose:   # Q^T X = X - V diag(tau) M^-T V^T X
            Y = Tc * solve_triangular(SH.mT(M), W, upper=False, unitriangular=True)
        else:           # Q X = X - V M^-1 diag(tau) V^T X
            Y = solve_triangular(M, Tc * W, upper=True, unitriangular=True)
        return X - L.matmul(V, Y)
    Z = L.matmul(X, V)
    Tr = SH.mT(Tc)
    if transpose:       # X Q^T = X - X V diag(tau) M^-T V^T
        Z = solve_triangular(SH.mT(M), Z * Tr, upper=False, left=False, unitriangular=True)
    else:               # X Q = X - X V M^-1 diag(tau) V^T
        Z = solve_triangular(M, Z, upper=True, left=False, unitriangular=True) * Tr
    return X - L.matmul(Z, SH.mT(V))


def _hh_check(name, A, tau, want_tau=None):
    if len(A.shape) < 2:
        raise op_error(name, "input must have at least 2 dimensions.", RuntimeError)
    if len(tau.shape) != len(A.shape) - 1:
        raise op_error(name, f"Expected tau to have one dimension less than input, but got "
                             f"tau.ndim equal to {len(tau.shape)} and input.ndim is equal to "
                             f"{len(A.shape)}", RuntimeError)
    if tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise op_error(name, f"Expected batch dimensions of tau to be equal to "
                             f"input.shape[:-2], but got {list(tau.shape[:-1])}", RuntimeError)
    da, dtau = _np_dt(A), _np_dt(tau)
    if da.kind != "f":
        raise op_error(name, f"expected a floating point input, got {da.name}", RuntimeError)
    if dtau != da:
        raise op_error(name, f"tau dtype {dtau.name} does not match input dtype {da.name}",
                       RuntimeError)


def _hp_samples(dtype=np.float64):
    out = []
    for k, (shape, t) in enumerate((((5, 3), 3), ((4, 4), 4), ((2, 5, 3), 2), ((3, 2), 0))):
        a, tau = _qr_pair(shape, dtype, k)
        out.append(Sample((a, tau[..., :t]), {}))
    return out


def householder_product(A, tau, *, out=None):
    """The first ``n`` columns of ``H_1 ... H_k`` (``H_i = I - tau_i v_i v_i^T``, ``v_i``
    column ``i`` of ``A`` below the diagonal with a unit ``i``-th entry), as
    ``torch.linalg.householder_product`` (``orgqr``): ``Q`` of ``geqrf``'s ``(a, tau)``.
    Differentiable in ``A`` and ``tau``."""
    name = "householder_product"
    if out is not None:
        raise op_error(name, "out= is not supported", TypeError)
    _hh_check(name, A, tau)
    m, n = A.shape[-2:]
    if m < n:
        raise op_error(name, "input.shape[-2] must be greater than or equal to "
                             "input.shape[-1]", RuntimeError)
    if tau.shape[-1] > n:
        raise op_error(name, "input.shape[-1] must be greater than or equal to "
                             "tau.shape[-1]", RuntimeError)
    X = C.eye(m, n, dtype=A.dtype, device=A.device)
    X = SH.expand(X, tuple(A.shape)) if len(A.shape) > 2 else X
    if tau.shape[-1] == 0:  # no reflector: still a function of A and tau (zero gradients)
        return X + SH.unsqueeze(R.sum(A[..., :0, :], (-2, -1)) + R.sum(tau, -1), -1)[..., None]
    return _apply_q(*_reflectors(name, A, tau), X, True, False)


composite(householder_product, name="linalg_householder_product", args=("A", "tau"),
          infer=lambda A, tau: TensorSpec(tuple(A.shape), _np_dt(A)),
          samples=_hp_samples,
          error_samples=lambda: [((rand((3, 4)), rand((2,))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((4,))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((2, 2))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((2,)).astype(np.float32)), {},
                                  RuntimeError)],
          torch=lambda torch, A, tau: torch.linalg.householder_product(A, tau))


def orgqr(input, tau):
    """``torch.orgqr``: ``linalg.householder_product``."""
    return householder_product(input, tau)


composite(orgqr, autocast={"cpu": "fp32"}, args=("input", "tau"),
          infer=lambda A, tau: TensorSpec(tuple(A.shape), _np_dt(A)),
          samples=lambda dtype=np.float64: _hp_samples(dtype)[:2],
          error_samples=lambda: [((rand((3, 4)), rand((2,))), {}, RuntimeError)],
          torch=lambda torch, A, tau: torch.orgqr(A, tau))


def _ormqr_samples(dtype=np.float64):
    out = []
    a, tau = _qr_pair((5, 3), dtype, 1)
    c = rand((5, 2), dtype, seed=2)
    for left, tr in ((True, False), (True, True)):
        out.append(Sample((a, tau, c), {"left": left, "transpose": tr}))
    c2 = rand((2, 5), dtype, seed=3)
    for left, tr in ((False, False), (False, True)):
        out.append(Sample((a, tau, c2), {"left": left, "transpose": tr}))
    ab, taub = _qr_pair((2, 4, 4), dtype, 4)
    out.append(Sample((ab, taub, rand((2, 4, 3), dtype, seed=5)), {}))
    return out


def ormqr(input, tau, other, left=True, transpose=False, *, out=None):
    """``Q @ other`` (``left``) or ``other @ Q``, with ``Q^T`` for ``transpose``, where
    ``Q = H_1 ... H_k`` is the full orthogonal matrix of the Householder form
    ``(input, tau)`` (``geqrf``'s), as ``torch.ormqr``. Differentiable in all three."""
    name = "ormqr"
    if out is not None:
        raise op_error(name, "out= is not supported", TypeError)
    _hh_check(name, input, tau)
    if len(other.shape) != len(input.shape):
        raise op_error(name, f"Expected other to have the same number of dimensions as "
                             f"input, but got other.ndim equal to {len(other.shape)} and "
                             f"input.ndim is equal to {len(input.shape)}", RuntimeError)
    if _np_dt(other) != _np_dt(input):
        raise op_error(name, f"Expected input and other to have the same dtype, but input "
                             f"has dtype {_np_dt(input).name} and other has dtype "
                             f"{_np_dt(other).name}", RuntimeError)
    if tuple(other.shape[:-2]) != tuple(input.shape[:-2]):
        raise op_error(name, f"Expected batch dimensions of other to be equal to "
                             f"input.shape[:-2], but got {list(other.shape[:-2])}",
                       RuntimeError)
    ax = -2 if left else -1
    if other.shape[ax] != input.shape[-2]:
        raise op_error(name, f"other.shape[{ax}] must be equal to input.shape[-2]",
                       RuntimeError)
    if tau.shape[-1] != min(other.shape[ax], input.shape[-1]):
        raise op_error(name, f"tau.shape[-1] must be equal to min(other.shape[{ax}], "
                             f"input.shape[-1])", RuntimeError)
    return _apply_q(*_reflectors(name, input, tau), other, bool(left), bool(transpose))


composite(ormqr, autocast={"cpu": "fp32"}, args=("input", "tau", "other"),
          infer=lambda A, tau, other, left=True, transpose=False: TensorSpec(
              tuple(other.shape), _np_dt(other)),
          samples=_ormqr_samples,
          error_samples=lambda: [((rand((4, 3)), rand((2,)), rand((5, 2))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((2,)), rand((4, 2))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((3,)), rand((2, 4, 2))), {},
                                  RuntimeError),
                                 ((rand((4, 3)), rand((2,)), rand((2, 4))), {"left": False},
                                  RuntimeError)],
          torch=lambda torch, A, tau, other, **k: torch.ormqr(A, tau, other, **k))


def _qr_pair(shape, dtype, seed):
    """``geqrf``'s output for a random matrix (the Householder form of its QR)."""
    a, tau = _geqrf_reference(rand(shape, np.float64, seed=seed))
    return a.astype(dtype), tau.astype(dtype)


# ---------------------------------------------------------------- eigh, lobpcg
_EIGH = namedtuple("eigh", ("eigenvalues", "eigenvectors"))


def _eigh_infer(x, UPLO="L"):
    dt = _float_matrix_arg("linalg_eigh", x)
    if x.shape[-1] != x.shape[-2]:
        raise op_error("linalg_eigh", f"A must be batches of square matrices, but they are "
                                      f"{x.shape[-2]} by {x.shape[-1]} matrices", RuntimeError)
    if UPLO not in ("L", "U"):
        raise op_error("linalg_eigh", f"Expected UPLO argument to be 'L' or 'U', but got "
                                      f"{UPLO}", RuntimeError)
    return TensorSpec(tuple(x.shape[:-1]), dt), TensorSpec(tuple(x.shape), dt)


def _vec_signs(xp, V):
    """Each eigenvector's sign: its largest entry (by magnitude, the first of equals)
    positive (LAPACK's choice varies by library)."""
    if V.shape[-1] == 0 or V.shape[-2] == 0:
        return V
    idx = xp.argmax(xp.abs(V), axis=-2)[..., None, :]
    sg = xp.sign(xp.take_along_axis(V, idx, axis=-2))
    return V * xp.where(sg == 0, 1, sg).astype(V.dtype)


def _eigh_kernel(x, UPLO="L"):
    from ..devices import xp_of
    xp = xp_of(x)
    if x.size == 0:
        return xp.zeros(x.shape[:-1], x.dtype), xp.zeros(x.shape, x.dtype)
    w, v = xp.linalg.eigh(x, UPLO=UPLO)
    return w.astype(x.dtype, copy=False), _vec_signs(xp, v).astype(x.dtype, copy=False)


def _eigh_F(m, L):
    """``F_ij = 1 / (l_j - l_i)`` off the diagonal, 0 on it."""
    k = L.shape[-1]
    eye = m.eye(k, dtype=L.dtype)
    E = m.unsqueeze(L, -2) - m.unsqueeze(L, -1) + eye
    return (1 - eye) / E, eye


def _eigh_vjp(ctx, g):
    """PyTorch's: ``V (diag(gL) + F o skew(V^T gV)) V^T`` (symmetric)."""
    m = ctx.m
    L, V = ctx.out
    gL, gV = g
    F, eye = _eigh_F(m, L)
    inner = 0
    if gV is not None:
        M = m.matmul(m.mT(V), gV)
        inner = F * ((M - m.mT(M)) * 0.5)
    if gL is not None:
        inner = inner + m.unsqueeze(gL, -1) * eye
    return (m.matmul(V, m.matmul(inner, m.mT(V))),)


def _eigh_jvp(ctx, dA):
    m = ctx.m
    L, V = ctx.out
    F, eye = _eigh_F(m, L)
    dA = (dA + m.mT(dA)) * 0.5   # the symmetric part (the vjp's adjoint)
    P = m.matmul(m.mT(V), m.matmul(dA, V))
    dL = R.sum(P * eye, -1)
    dV = m.matmul(V, F * P)
    return dL, dV


def _sym(shape, dtype, seed):
    """A symmetric matrix with well-separated eigenvalues."""
    r = np.random.default_rng(seed)
    *b, n, _ = shape
    q, _ = np.linalg.qr(r.standard_normal(tuple(b) + (n, n)))
    lam = np.linspace(-2.0, 3.0, n)
    return ((q * lam[..., None, :]) @ np.swapaxes(q, -1, -2)).astype(dtype)


def _eigh_torch(torch, x, UPLO="L"):
    w, v = torch.linalg.eigh(x, UPLO=UPLO)
    idx = v.detach().abs().argmax(-2, keepdim=True)
    sg = torch.gather(v.detach(), -2, idx).sign()
    return w, v * torch.where(sg == 0, torch.ones_like(sg), sg)


EIGH = register(
    name="linalg_eigh", autocast={"cpu": "fp32"}, kernel=_eigh_kernel, infer=_eigh_infer,
    args=("A",), nout=2,
    saves=("out",), vjp=_eigh_vjp, jvp=_eigh_jvp, vmap=_vmap.leading,
    # forward-only samples: the kernel reads one triangle, PyTorch's gradient (kept) is
    # the symmetric one, so finite differences in each entry differ from it; the
    # gradients are checked on symmetric inputs in tests/ops/test_linalg_decomp.py, and
    # through lobpcg (which symmetrizes) here
    samples=lambda dtype=np.float64: [Sample((_sym((4, 4), dtype, 1),), {}, False),
                                      Sample((_sym((2, 3, 3), dtype, 2),), {"UPLO": "U"},
                                             False),
                                      Sample((rand((3, 3), dtype, seed=3),), {}, False)],
    error_samples=lambda: [((rand((3, 4)),), {}, RuntimeError),
                           ((rand((3,)),), {}, RuntimeError),
                           ((rand((3, 3)),), {"UPLO": "X"}, RuntimeError)],
    torch=_eigh_torch)


def eigh(A, UPLO="L", *, out=None):
    """``(eigenvalues, eigenvectors)`` of a symmetric matrix (its ``UPLO`` triangle
    read), eigenvalues ascending, as ``torch.linalg.eigh``; each eigenvector's sign
    fixed (its largest entry positive). PyTorch's gradient (symmetric; defined for
    distinct eigenvalues) and tangent."""
    if out is not None:
        raise op_error("linalg_eigh", "out= is not supported", TypeError)
    return _EIGH(*bind(EIGH, A, UPLO=UPLO))


def eigvalsh(A, UPLO="L", *, out=None):
    """The eigenvalues of a symmetric matrix, ascending (``torch.linalg.eigvalsh``)."""
    return eigh(A, UPLO, out=out)[0]


composite(eigvalsh, autocast={"cpu": "fp32"}, name="linalg_eigvalsh", args=("A",),
          infer=lambda x, UPLO="L": _eigh_infer(x, UPLO)[0],
          samples=lambda dtype=np.float64: [Sample((_sym((4, 4), dtype, 1),), {}, False),
                                            Sample((_sym((2, 3, 3), dtype, 2),), {"UPLO": "U"},
                                                   False)],
          error_samples=lambda: [((rand((3, 4)),), {}, RuntimeError)],
          torch=lambda torch, x, UPLO="L": torch.linalg.eigvalsh(x, UPLO=UPLO))


def _lobpcg_infer(A, B=None, k=None, largest=None, **kw):
    _float_matrix_arg("lobpcg", A)
    k = 1 if k is None else k
    dt = _np_dt(A)
    return (TensorSpec(tuple(A.shape[:-2]) + (k,), dt),
            TensorSpec(tuple(A.shape[:-1]) + (k,), dt))


def _lobpcg_torch(torch, A, B=None, k=None, largest=None, **kw):
    """The eigenpairs torch.lobpcg converges to, exactly (torch.linalg.eigh after
    PyTorch's symmetrization and Cholesky reduction): its iteration stops at a residual
    of sqrt(eps), too loose for the registry's tolerances (tests/ops/test_linalg_decomp.py
    compares with torch.lobpcg itself)."""
    k = 1 if k is None else k
    As = (A + A.mT) / 2
    if B is None:
        w, V = torch.linalg.eigh(As)
    else:
        Lc = torch.linalg.cholesky((B + B.mT) / 2)
        Y = torch.linalg.solve_triangular(Lc, As, upper=False)
        Cm = torch.linalg.solve_triangular(Lc, Y.mT, upper=False).mT
        w, W = torch.linalg.eigh((Cm + Cm.mT) / 2)
        V = torch.linalg.solve_triangular(Lc.mT, W, upper=True)
    if largest is None or largest:
        w, V = w.flip(-1), V.flip(-1)
    w, V = w[..., :k], V[..., :k]
    idx = V.detach().abs().argmax(-2, keepdim=True)
    sg = torch.gather(V.detach(), -2, idx).sign()
    return w, V * torch.where(sg == 0, torch.ones_like(sg), sg)


def _spd(shape, dtype, seed):
    r = np.random.default_rng(seed)
    n = shape[-1]
    a = r.standard_normal(shape)
    return (a @ np.swapaxes(a, -1, -2) / n + np.eye(n)).astype(dtype)


def lobpcg(A, k=None, B=None, X=None, n=None, iK=None, niter=None, tol=None, largest=None,
           method=None, tracker=None, ortho_iparams=None, ortho_fparams=None,
           ortho_bparams=None):
    """``(E, X)``: the ``k`` largest (``largest=False``: smallest) eigenpairs of the
    symmetric (generalized, with positive definite ``B``) problem ``A X = B X diag(E)``,
    as ``torch.lobpcg`` returns them at convergence (``A`` and ``B`` symmetrized first,
    as PyTorch does; E ordered from the extreme end; each vector's sign fixed, its
    largest entry positive). Computed directly (a Cholesky reduction and ``linalg.eigh``),
    so the iteration's controls (``X``, ``n``, ``iK``, ``niter``, ``tol``, ``method``,
    ``tracker``, ``ortho_*``) are checked as PyTorch checks them but change nothing; the
    gradient is PyTorch's (that of the exact eigenpairs), in ``B`` too."""
    name = "lobpcg"
    _float_matrix_arg(name, A)
    if A.shape[-2] != A.shape[-1]:
        raise op_error(name, f"A must be square, got shape {tuple(A.shape)}", RuntimeError)
    if B is not None and tuple(B.shape) != tuple(A.shape):
        raise op_error(name, f"A and B must have same shape, got {tuple(A.shape)} vs "
                             f"{tuple(B.shape)}", RuntimeError)
    m = A.shape[-1]
    if X is not None and (len(X.shape) < 2 or X.shape[-2] != m):
        raise op_error(name, f"X shape mismatch: got {tuple(X.shape)}, expected ({m}, n)",
                       RuntimeError)
    k = (1 if X is None else X.shape[-1]) if k is None else k
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise op_error(name, f"k must be a positive int, got {k!r}", RuntimeError)
    n = (k if n is None else n) if X is None else X.shape[-1]
    if m < 3 * n:
        raise op_error(name, f"LOBPCG algorithm is not applicable when the number of A rows "
                             f"(={m}) is smaller than 3 x the number of requested eigenpairs "
                             f"(={n})", ValueError)
    if method not in (None, "basic", "ortho"):
        raise op_error(name, f"method must be 'basic' or 'ortho', got {method!r}", ValueError)
    largest = True if largest is None else bool(largest)
    As = (A + SH.mT(A)) * 0.5
    if B is None:
        w, V = eigh(As)
    else:
        Bs = (B + SH.mT(B)) * 0.5
        Lc = L.cholesky(Bs)
        from .linalg import solve_triangular
        Y = solve_triangular(Lc, As, upper=False)                 # L^-1 A
        Cm = SH.mT(solve_triangular(Lc, SH.mT(Y), upper=False))    # L^-1 A L^-T
        w, W = eigh((Cm + SH.mT(Cm)) * 0.5)
        V = _vec_signs_ops(solve_triangular(SH.mT(Lc), W, upper=True))   # L^-T W
    if largest:
        w, V = SH.flip(w, (-1,))[..., :k], SH.flip(V, (-1,))[..., :k]
    else:
        w, V = w[..., :k], V[..., :k]
    return w, V


composite(lobpcg, args=("A", "B"), optional=("B",), by_name=True, infer=_lobpcg_infer,
          nout=2,
          samples=lambda dtype=np.float64: [
              Sample((_sym((6, 6), dtype, 4),), {"k": 2}),
              Sample((_sym((7, 7), dtype, 5),), {"k": 2, "largest": False}),
              Sample((_sym((2, 6, 6), dtype, 6),), {"k": 1}),
              Sample((_sym((6, 6), dtype, 7), _spd((6, 6), dtype, 8)), {"k": 2}, False)],
          error_samples=lambda: [((rand((5, 5)),), {"k": 2}, ValueError),
                                 ((rand((6, 5)),), {"k": 1}, RuntimeError),
                                 ((rand((6, 6)), rand((5, 5))), {"k": 1}, RuntimeError)],
          torch=_lobpcg_torch)


def _vec_signs_ops(V):
    if V.shape[-1] == 0 or V.shape[-2] == 0:
        return V
    idx = R.argmax(E.abs(V.detach()), dim=-2, keepdim=True)
    sg = E.sign(I.gather(V.detach(), -2, idx))
    return V * E.where(sg == 0, 1.0, sg)


_solution = namedtuple("triangular_solve", ("solution", "cloned_coefficient"))


def _finite(name, x):
    """PyTorch's LAPACK calls refuse a NaN/inf matrix (not checked inside vmap, where
    no example's values are read)."""
    if getattr(x, "_vlevel", None) is None and x.numel() and \
            not bool(R.all(E.isfinite(x)).item()):
        raise op_error(name, "the factorization could not be completed because the input "
                             "is not finite", RuntimeError)


def _floats(name, *ts):
    for t in ts:
        if not t.dtype.is_floating_point:
            raise op_error(name, f"expected a floating point tensor, got {t.dtype}",
                           RuntimeError)
    _same(name, *ts)


def cholesky(input, upper=False):
    """The Cholesky factor (lower, or upper with ``upper=True``) of an SPD matrix."""
    _finite("cholesky", input)
    return L.cholesky(input, upper=upper)


decl(cholesky,
     lambda dtype=np.float64: [S(_spd_sample((3, 3), dtype)),
                               S(_spd_sample((2, 3, 3), dtype, 1), True)],
     torch=lambda T, x, upper=False: T.linalg.cholesky(x, upper=upper),  # has forward mode
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)], fill="eye")


def _tri(L_, upper):
    return SH.triu(L_) if upper else SH.tril(L_)


def _chol(shape, dtype, seed=0):
    return np.linalg.cholesky(_spd_sample(shape, np.float64, seed)).astype(dtype)


def _t_chol_inverse(T, f, upper=False):
    t = _t_tri(T, f, upper)
    return T.linalg.inv(t.mT @ t if upper else t @ t.mT)


def cholesky_inverse(input, upper=False):
    """The inverse of ``A`` from its Cholesky factor (``A = L L^T``, or ``U^T U``)."""
    _square("cholesky_inverse", input)
    f = _tri(input, upper)
    a = L.matmul(SH.mT(f), f) if upper else L.matmul(f, SH.mT(f))
    return L.inv(a)


decl(cholesky_inverse, torch=_t_chol_inverse,
     samples=lambda dtype=np.float64: [
         S(_chol((3, 3), dtype)),
         S(np.swapaxes(_chol((3, 3), dtype, 1), -1, -2).copy(), True)],
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)], fill="eye")


def _t_chol_solve(T, b, f, upper=False):
    t = _t_tri(T, f, upper)
    return T.linalg.solve(t.mT @ t if upper else t @ t.mT, b)


def cholesky_solve(input, input2, upper=False):
    """``X`` with ``A X = input``, ``A`` given by its Cholesky factor ``input2``."""
    _square("cholesky_solve", input2)
    _floats("cholesky_solve", input, input2)
    f = _tri(input2, upper)
    a = L.matmul(SH.mT(f), f) if upper else L.matmul(f, SH.mT(f))
    return L.solve(a, input)


decl(cholesky_solve, torch=_t_chol_solve,
     samples=lambda dtype=np.float64: [
         S(rand((3, 2), dtype), _chol((3, 3), dtype)),
         S(rand((3, 2), dtype, seed=2), np.swapaxes(_chol((3, 3), dtype, 1), -1, -2).copy(), True)],
     args=("input", "input2"), errors=lambda: [((rand((3, 2)), rand((3, 4))), {}, RuntimeError)],
     fill="eye")


# PyTorch's values by its formula: its derivatives of cholesky_inverse, cholesky_solve and
# triangular_solve treat the factor as a full matrix, though only its triangle is read
# (finite differences see the triangle's): tapegrad's are the true derivatives.
def _t_tri(T, f, upper):
    return f.triu() if upper else f.tril()


def _t_tri_solve(T, b, A, upper=True, transpose=False, unitriangular=False):
    t = _t_tri(T, A, upper)
    if unitriangular:
        eye = T.eye(A.shape[-1], dtype=A.dtype)
        t = t * (1 - eye) + eye
    return T.linalg.solve(t.mT if transpose else t, b), A.clone()


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """``(X, A)`` with ``op(A) X = b`` for triangular ``A`` (``op``: transpose or not)."""
    _square("triangular_solve", A)
    _floats("triangular_solve", b, A)
    t = _tri(A, upper)
    if unitriangular:
        n = A.shape[-1]
        eye = C.eye(n, dtype=A.dtype)
        t = t * (1 - eye) + eye
    m = SH.mT(t) if transpose else t
    return _solution(L.solve(m, b), A * 1)


decl(triangular_solve, torch=_t_tri_solve, samples=lambda dtype=np.float64: [
        S(rand((3, 2), dtype), np.triu(_spd_sample((3, 3), dtype))),
        S(rand((3, 2), dtype, seed=1), np.tril(_spd_sample((3, 3), dtype, 1)), False, True)],
     args=("b", "A"), nout=2, errors=lambda: [((rand((3, 2)), rand((3, 4))), {}, RuntimeError)],
     fill="eye")

