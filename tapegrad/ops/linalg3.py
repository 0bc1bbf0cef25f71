"""QR and SVD with PyTorch's gradients (issue 17's census, third part), and what is
built on them: ``linalg.qr``/``qr``, ``linalg.svd``/``svd``/``linalg.svdvals``,
``linalg.pinv``/``pinverse``.

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
- ``pinv``: ``V diag(1/s) U^T`` over the singular values above the cut-off, a
  composite of ``svd`` (with a cut-off that drops singular values this is the
  derivative; PyTorch's gradient there is its full-rank formula).
- ``linalg_lu_factor``: partial pivoting as LAPACK's getrf (pivots 1-based, int32),
  its vjp ``P L^-T [tril(L^T gL, -1) + triu(gU U^T)] U^-T`` and the matching jvp
  (square matrices; rectangular ones factor, without a derivative); ``lu_unpack``,
  ``lu_solve``, ``linalg.lu``, ``linalg.lu_solve`` are composites over it.
"""
from collections import namedtuple

import numpy as np

from .. import devices as _devices
from .._util import op_error
from ..dispatch import bind
from ._decl import register, composite, Sample, TensorSpec, rand
from . import _vmap
from .linalg import solve_triangular, LinAlgError
from . import shape as SH, elementwise as E, reduce as R, creation as C, linalg as L

__all__ = ["qr", "svd", "pinverse", "lu", "lu_unpack", "lu_solve"]

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
    name="linalg_qr", kernel=_qr_kernel, infer=_qr_infer, args=("x",), nout=2,
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
    # PyTorch's on gauge-invariant functions in tests/ops/test_qr_svd.py, and the
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
    name="linalg_svd", kernel=_svd_kernel, infer=_svd_infer, args=("x",), nout=3,
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


def svd(input, some=True, compute_uv=True, *, out=None):
    """``torch.svd``: ``(U, S, V)`` (V, not its transpose); ``some=False``: the full
    factors; ``compute_uv=False``: U and V are zeros (and S has no gradient through
    them), as PyTorch."""
    U, S, Vh = linalg_svd(input, full_matrices=not some, out=out)
    if not compute_uv:
        return _SVD_V(C.zeros_like(U.detach()), S, C.zeros_like(SH.mT(Vh).detach()))
    return _SVD_V(U, S, SH.mT(Vh))


composite(qr, infer=lambda x, some=True: _qr_infer(x, "reduced" if some else "complete"),
          nout=2, samples=lambda dtype=np.float64: [
              Sample((rand((4, 3), dtype, seed=1),), {}),
              Sample((rand((3, 3), dtype, seed=2),), {"some": False}),
              Sample((rand((2, 3, 4), dtype, seed=3),), {})],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, some=True: torch.qr(x, some))


def _svd_v_torch(torch, x, some=True, compute_uv=True):
    u, s, vh = _svd_torch(torch, x, not some)
    if not compute_uv:
        return torch.svd(x, some, compute_uv)
    return u, s, vh.mT


def _svd_v_infer(x, some=True, compute_uv=True):
    u, s, vh = _svd_infer(x, not some)
    return u, s, TensorSpec(tuple(vh.shape[:-2]) + (vh.shape[-1], vh.shape[-2]), vh.dtype)


composite(svd, infer=_svd_v_infer, nout=3,
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
          # full-rank formula, not the derivative; ours is, tests/ops/test_qr_svd.py)
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, **k: torch.linalg.pinv(x, **k))


def pinverse(input, rcond=1e-15):
    """``torch.pinverse``: ``linalg.pinv`` with the relative cut-off ``rcond``."""
    return pinv(input, rtol=rcond)


composite(pinverse, infer=lambda x, rcond=1e-15: TensorSpec(
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


def lu(A, pivot=True, get_infos=False, out=None):
    """``torch.lu``: ``(LU, pivots)`` (and ``infos``, zeros where the factorization
    completed, with ``get_infos``)."""
    LU, piv = lu_factor(A, pivot=pivot, out=out)
    if get_infos:  # LAPACK's info: the (1-based) index of the first zero pivot, or 0
        d = np.diagonal(_raw_of(LU), 0, -2, -1) == 0
        info = np.where(d.any(-1), np.argmax(d, -1) + 1, 0).astype(np.int32)
        return LU, piv, C.tensor(info)
    return LU, piv


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


def _lu_solve(LU, pivots, B, adjoint=False):
    P, Lm, U = lu_unpack(LU, pivots)
    if adjoint:  # A^T X = B: X = P L^-T U^-T B
        Y = solve_triangular(SH.mT(U), B, upper=False)
        Y = solve_triangular(SH.mT(Lm), Y, upper=True, unitriangular=True)
        return L.matmul(P, Y)
    Y = solve_triangular(Lm, L.matmul(SH.mT(P), B), upper=False, unitriangular=True)
    return solve_triangular(U, Y, upper=True)


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


def lu_solve(b, LU_data, LU_pivots, *, out=None):
    """``torch.lu_solve``: the solution of ``A x = b`` from ``torch.lu(A)``."""
    return linalg_lu_solve(LU_data, LU_pivots, b, out=out)


def linalg_lu(A, *, pivot=True, out=None):
    """``(P, L, U)`` with ``A = P L U`` (``torch.linalg.lu``)."""
    if out is not None:
        raise op_error("linalg_lu", "out= is not supported", TypeError)
    return lu_unpack(*lu_factor(A, pivot=pivot))


def _wc(shape, dtype, seed):
    a = rand(shape, dtype, seed=seed)
    n = shape[-1]
    return (a + 2 * np.eye(n, dtype=dtype)).astype(dtype) if shape[-1] == shape[-2] else a


def _lu_pair(shape, dtype, seed):
    lu_, piv = _lu_kernel(_wc(shape, dtype, seed))
    return lu_, piv


def _lu_args_samples(fn):
    def samples(dtype=np.float64):
        out = []
        for k, (sa, sb) in enumerate((((3, 3), (3, 2)), ((2, 4, 4), (2, 4, 1)))):
            lu_, piv = _lu_pair(sa, dtype, k)
            out.append(fn(lu_, piv, rand(sb, dtype, seed=k + 5)))
        return out
    return samples


composite(lu, infer=lambda x, **k: _lu_infer(x), nout=2, args=("A",),
          samples=lambda dtype=np.float64: [Sample((_wc((3, 3), dtype, 1),), {}),
                                            Sample((_wc((2, 4, 4), dtype, 2),), {})],
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError)],
          torch=lambda torch, x, **k: torch.linalg.lu_factor(x))
composite(lu_unpack, nout=3, args=("LU_data", "LU_pivots"), differentiable=True,
          infer=lambda lu_, piv, **k: (
              TensorSpec(tuple(lu_.shape[:-2]) + (lu_.shape[-2],) * 2, np.dtype(lu_.dtype)),
              TensorSpec(tuple(lu_.shape[:-1]) + (min(lu_.shape[-2:]),), np.dtype(lu_.dtype)),
              TensorSpec(tuple(lu_.shape[:-2]) + (min(lu_.shape[-2:]), lu_.shape[-1]),
                         np.dtype(lu_.dtype))),
          # (forward-only: P takes no gradient, so the registry's all-outputs checks do
          # not apply; L's and U's gradients: tests/ops/test_qr_svd.py)
          samples=lambda dtype=np.float64: [Sample(_lu_pair((3, 3), dtype, 1), {}, False),
                                            Sample(_lu_pair((2, 4, 4), dtype, 2), {}, False)],
          error_samples=lambda: [(("not a tensor", np.ones(3, np.int32)), {}, TypeError)],
          torch=lambda torch, a, p: torch.lu_unpack(a, p))
composite(lu_solve, infer=lambda b, lu_, piv: TensorSpec(tuple(b.shape), np.dtype(b.dtype)),
          args=("b", "LU_data", "LU_pivots"),
          samples=_lu_args_samples(lambda lu_, piv, b: Sample((b, lu_, piv), {})),
          error_samples=lambda: [((rand((4, 2)),) + _lu_pair((3, 3), np.float64, 0), {},
                                  RuntimeError)],
          torch=lambda torch, b, lu_, piv: torch.lu_solve(b, lu_, piv))
composite(linalg_lu_solve, name="linalg_lu_solve", args=("LU", "pivots", "B"),
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
