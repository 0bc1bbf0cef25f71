"""The census's last linear algebra (issue 17, fourth part): the randomized low-rank
SVD and PCA, and the Householder (QR) family.

- ``svd_lowrank(A, q=6, niter=2, M=None)``, ``pca_lowrank(A, q=None, center=True,
  niter=2)``: PyTorch's algorithm (Halko et al. 2009, 4.4 and 5.1), step for step, as
  composites of ``randn`` (tapegrad's seeded generator, ``tg.manual_seed``), matmul,
  ``linalg.qr`` and ``linalg.svd``: gradients, forward mode and vmap come from those
  ops. The sign of each singular pair is fixed as ``linalg.svd``'s (the largest entry
  of each column of U positive), so a result does not depend on the random draw
  where the decomposition is determined (a matrix of rank at most ``q``).
- ``geqrf``: LAPACK's QR in Householder form ``(a, tau)`` (NumPy's ``qr(mode="raw")``),
  not differentiable, as PyTorch's.
- ``linalg.householder_product`` (``orgqr``): the first ``n`` columns of
  ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^T``; ``ormqr``: that full ``Q`` (or its
  transpose) times a matrix, from the left or the right. Composites applying one
  reflector at a time with ops, so both differentiate in ``input``, ``tau`` and
  ``other``, at every order.
"""
from collections import namedtuple

import numpy as np

from .._util import op_error
from ..dispatch import bind
from ._decl import register, composite, Sample, TensorSpec, rand
from . import _vmap
from . import shape as SH, elementwise as E, reduce as R, creation as C, linalg as L
from . import indexing as IX
from .linalg3 import linalg_qr, linalg_svd

__all__ = ["svd_lowrank", "pca_lowrank"]

_SVDL = namedtuple("svd_lowrank", ("U", "S", "V"))
_GEQRF = namedtuple("geqrf", ("a", "tau"))


def _np_dt(x):
    return np.dtype(getattr(x.dtype, "np", x.dtype))


def _float_matrix(name, x, what="A"):
    if len(x.shape) < 2:
        raise op_error(name, f"{what} must have at least 2 dimensions, got shape "
                             f"{tuple(x.shape)}", RuntimeError)
    dt = _np_dt(x)
    if dt.kind != "f":
        raise op_error(name, f"expected a floating point {what}, got {dt.name}", RuntimeError)
    return dt


# ---------------------------------------------------------------- low rank
def _fix_signs(U, V):
    """Each singular pair's sign: the largest entry (by magnitude) of each column of U
    positive (no gradient through the choice)."""
    idx = R.argmax(E.abs(U.detach()), dim=-2, keepdim=True)
    sg = E.sign(IX.gather(U.detach(), -2, idx))
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
    _float_matrix(name, A)
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
    U, V = _fix_signs(U, V)
    return _SVDL(U, S, V)


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


def pca_lowrank(A, q=None, center=True, niter=2):
    """Principal components of the rows of ``A``: ``svd_lowrank`` of ``A`` less its
    column means (``center=True``), ``q`` defaulting to ``min(6, m, n)``, as
    ``torch.pca_lowrank``."""
    _float_matrix("pca_lowrank", A)
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


def _lowrank_infer(name):
    def infer(A, M=None, q=6, niter=2, center=True):
        _float_matrix(name, A)
        *b, m, n = A.shape
        if q is None:
            q = min(6, m, n) if name == "pca_lowrank" else 6
        dt = _np_dt(A)
        k = min(q, m, n)  # the reduced QR of an (m, q) sketch keeps min(m, q) columns
        b = tuple(b)
        return (TensorSpec(b + (m, k), dt), TensorSpec(b + (k,), dt),
                TensorSpec(b + (n, k), dt))
    return infer


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


def _svdl_torch(torch, A, M=None, q=6, niter=2):
    return _torch_signs(torch, *torch.svd_lowrank(A, q=q, niter=niter, M=M))


def _pca_torch(torch, A, q=None, center=True, niter=2):
    return _torch_signs(torch, *torch.pca_lowrank(A, q=q, center=center, niter=niter))


def _svdl_samples(dtype=np.float64):
    # determined decompositions: rank q, well-separated singular values
    return [Sample((_low_rank((8, 6), [3.0, 2.0, 1.0], dtype, 1),), {"q": 3}),
            Sample((_low_rank((5, 9), [2.0, 1.0], dtype, 2),), {"q": 2, "niter": 1}),
            Sample((_low_rank((2, 6, 4), [2.5, 1.0], dtype, 3),), {"q": 2}),
            Sample((_low_rank((7, 5), [3.0, 1.5], dtype, 4) + np.full((1, 5), 0.3, dtype),
                    np.full((1, 5), 0.3, dtype)), {"q": 2})]


def _pca_samples(dtype=np.float64):
    return [Sample((_low_rank((9, 5), [3.0, 2.0, 1.0], dtype, 5, center=True),), {"q": 3}),
            Sample((_low_rank((6, 4), [2.0, 1.0], dtype, 6),), {"q": 2, "center": False}),
            Sample((_low_rank((2, 7, 5), [2.0, 1.0], dtype, 7, center=True),), {"q": 2})]


composite(svd_lowrank, infer=_lowrank_infer("svd_lowrank"), args=("A", "M"), optional=("M",),
          by_name=True,
          samples=_svdl_samples, nout=3,
          error_samples=lambda: [((rand((3,)),), {}, RuntimeError),
                                 ((np.ones((3, 3), np.int64),), {}, RuntimeError),
                                 ((rand((4, 3)),), {"q": 2, "niter": -1}, ValueError),
                                 ((rand((4, 3)), rand((2, 3))), {"q": 2}, RuntimeError)],
          torch=_svdl_torch)
composite(pca_lowrank, infer=_lowrank_infer("pca_lowrank"), args=("A",), nout=3,
          samples=_pca_samples,
          error_samples=lambda: [((rand((4, 3)),), {"q": 4}, ValueError),
                                 ((rand((4, 3)),), {"q": 2, "niter": -1}, ValueError),
                                 ((rand((3,)),), {}, RuntimeError)],
          torch=_pca_torch)
