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
  transpose) times a matrix, from the left or the right. Composites over the compact
  WY form ``Q = I - V M^-1 diag(tau) V^T`` (matmuls and one unit-triangular solve), so
  both differentiate in ``input``, ``tau`` and ``other``, at every order.
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

__all__ = ["svd_lowrank", "pca_lowrank", "geqrf", "orgqr", "ormqr", "lobpcg"]

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
    if U.shape[-1] == 0 or U.shape[-2] == 0:
        return U, V
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
    from ..devices import check_alloc
    _float_matrix(name, A)
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
            Sample((_low_rank((5, 9), [2.0, 1.0], dtype, 2),), {"q": 2, "niter": 3}),
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
    name="geqrf", kernel=_geqrf_kernel, infer=_geqrf_infer, args=("x",), nout=2,
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


def orgqr(input, tau):
    """``torch.orgqr``: ``linalg.householder_product``."""
    return householder_product(input, tau)


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


def _qr_pair(shape, dtype, seed):
    """``geqrf``'s output for a random matrix (the Householder form of its QR)."""
    a, tau = _geqrf_reference(rand(shape, np.float64, seed=seed))
    return a.astype(dtype), tau.astype(dtype)


def _hp_samples(dtype=np.float64):
    out = []
    for k, (shape, t) in enumerate((((5, 3), 3), ((4, 4), 4), ((2, 5, 3), 2), ((3, 2), 0))):
        a, tau = _qr_pair(shape, dtype, k)
        out.append(Sample((a, tau[..., :t]), {}))
    return out


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


composite(householder_product, name="linalg_householder_product", args=("A", "tau"),
          infer=lambda A, tau: TensorSpec(tuple(A.shape), _np_dt(A)),
          samples=_hp_samples,
          error_samples=lambda: [((rand((3, 4)), rand((2,))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((4,))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((2, 2))), {}, RuntimeError),
                                 ((rand((4, 3)), rand((2,)).astype(np.float32)), {},
                                  RuntimeError)],
          torch=lambda torch, A, tau: torch.linalg.householder_product(A, tau))
composite(orgqr, args=("input", "tau"),
          infer=lambda A, tau: TensorSpec(tuple(A.shape), _np_dt(A)),
          samples=lambda dtype=np.float64: _hp_samples(dtype)[:2],
          error_samples=lambda: [((rand((3, 4)), rand((2,))), {}, RuntimeError)],
          torch=lambda torch, A, tau: torch.orgqr(A, tau))
composite(ormqr, args=("input", "tau", "other"),
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


# ---------------------------------------------------------------- eigh, lobpcg
_EIGH = namedtuple("eigh", ("eigenvalues", "eigenvectors"))


def _eigh_infer(x, UPLO="L"):
    dt = _float_matrix("linalg_eigh", x)
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
    name="linalg_eigh", kernel=_eigh_kernel, infer=_eigh_infer, args=("A",), nout=2,
    saves=("out",), vjp=_eigh_vjp, jvp=_eigh_jvp, vmap=_vmap.leading,
    # forward-only samples: the kernel reads one triangle, PyTorch's gradient (kept) is
    # the symmetric one, so finite differences in each entry differ from it; the
    # gradients are checked on symmetric inputs in tests/ops/test_eigh_lobpcg.py, and
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
    _float_matrix(name, A)
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


def _vec_signs_ops(V):
    if V.shape[-1] == 0 or V.shape[-2] == 0:
        return V
    idx = R.argmax(E.abs(V.detach()), dim=-2, keepdim=True)
    sg = E.sign(IX.gather(V.detach(), -2, idx))
    return V * E.where(sg == 0, 1.0, sg)


def _lobpcg_infer(A, B=None, k=None, largest=None, **kw):
    _float_matrix("lobpcg", A)
    k = 1 if k is None else k
    dt = _np_dt(A)
    return (TensorSpec(tuple(A.shape[:-2]) + (k,), dt),
            TensorSpec(tuple(A.shape[:-1]) + (k,), dt))


def _lobpcg_torch(torch, A, B=None, k=None, largest=None, **kw):
    """The eigenpairs torch.lobpcg converges to, exactly (torch.linalg.eigh after
    PyTorch's symmetrization and Cholesky reduction): its iteration stops at a residual
    of sqrt(eps), too loose for the registry's tolerances (tests/ops/test_eigh_lobpcg.py
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
composite(eigvalsh, name="linalg_eigvalsh", args=("A",),
          infer=lambda x, UPLO="L": _eigh_infer(x, UPLO)[0],
          samples=lambda dtype=np.float64: [Sample((_sym((4, 4), dtype, 1),), {}, False),
                                            Sample((_sym((2, 3, 3), dtype, 2),), {"UPLO": "U"},
                                                   False)],
          error_samples=lambda: [((rand((3, 4)),), {}, RuntimeError)],
          torch=lambda torch, x, UPLO="L": torch.linalg.eigvalsh(x, UPLO=UPLO))
