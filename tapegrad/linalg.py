"""``tg.linalg``: PyTorch's ``torch.linalg`` names over the ops in ``tapegrad.ops.linalg``.

>>> import tapegrad as tg
>>> A = tg.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=tg.float64)
>>> tg.linalg.cholesky(A)
tensor([[2.0000, 0.0000],
        [0.5000, 1.6583]], dtype=tapegrad.float64)
"""
import collections as _collections

import numpy as _np

from . import dtypes as _dt
from ._util import op_error as _op_error
from .ops import creation as _C, elementwise as _E, reduce as _R, shape as _S
from .ops._decl import composite_op as _composite_op
from .ops.guard import checked as _checked
from .ops.linalg import (  # noqa: F401
    LinAlgError,
    SlogdetResult,
    cholesky,
    cross as _cross,
    det,
    inv,
    matmul,
    matrix_exp,
    matrix_norm,
    matrix_power,
    norm,
    slogdet,
    solve,
    solve_triangular,
    vector_norm,
)
from .ops.linalg_decomp import (  # noqa: F401
    eigh,
    eigvalsh,
    householder_product,
    linalg_lu as lu,
    linalg_lu_solve as lu_solve,
    linalg_qr as qr,
    linalg_svd as svd,
    lu_factor,
    pinv,
    svdvals,
)

__all__ = ["inv", "solve", "det", "slogdet", "cholesky", "norm", "vector_norm", "matrix_norm",
           "matmul", "LinAlgError", "solve_triangular", "qr", "svd", "svdvals", "pinv",
           "lu_factor", "lu", "lu_solve", "householder_product", "eigh", "eigvalsh",
           "matrix_exp", "matrix_power"]

# the composites with an autocast or half-width policy get it at this public entry too,
# as tg.* functions do (tg.linalg.eigvalsh in float32 under CPU autocast, as PyTorch's)
for _name in __all__:
    _op = _composite_op(globals()[_name])
    if _op is not None and (_op.autocast is not None or _op.widen):
        globals()[_name] = _checked(globals()[_name])
del _name, _op
matrix_power = _checked(matrix_power)  # (the same function as tg.matrix_power)


# ---------------------------------------------------------------- composites
# torch.linalg's other names, built from the ops above and tg.* ops (gradients, vmap and
# forward mode come from their constituents)


def _no_out(name, out):
    if out is not None:
        raise _op_error(name, "out= is not supported", TypeError)


def cross(input, other, *, dim=-1, out=None):
    """``torch.linalg.cross``: the cross product of 3-vectors along ``dim`` (default
    the last), the batch dims broadcast; both inputs have the same number of dims."""
    _no_out("linalg.cross", out)
    if input.ndim != other.ndim:
        raise _op_error("linalg.cross", f"inputs must have the same number of dimensions "
                                        f"(got {input.ndim} and {other.ndim})", RuntimeError)
    return _cross(input, other, dim=dim)


def vecdot(x, y, *, dim=-1, out=None):
    """``torch.linalg.vecdot``: the dot product of vectors along ``dim`` (default the
    last), the other dims broadcast; floating inputs of one dtype."""
    _no_out("linalg.vecdot", out)
    if x.dtype != y.dtype:
        raise _op_error("linalg.vecdot", f"expected x and y to have the same dtype, but found "
                                         f"x of type {x.dtype} and y of type {y.dtype}",
                        RuntimeError)
    if not x.dtype.is_floating_point:
        raise _op_error("linalg.vecdot", f"expected a floating point tensor as input, got "
                                         f"{x.dtype}", RuntimeError)
    return _R.sum(x * y, dim=dim)


def multi_dot(tensors, *, out=None):
    """``torch.linalg.multi_dot``: the product of two or more matrices, the first and
    last of which may be vectors (1-D results drop their dims as ``matmul`` does)."""
    _no_out("multi_dot", out)
    ts = list(tensors)
    if len(ts) < 2:
        raise _op_error("multi_dot", f"expected at least 2 tensors but got {len(ts)}",
                        RuntimeError)
    for k, t in enumerate(ts):
        ok = (1, 2) if k in (0, len(ts) - 1) else (2,)
        if t.ndim not in ok:
            where = ("the first tensor" if k == 0 else "the last tensor" if k == len(ts) - 1
                     else f"tensor {k}")
            raise _op_error("multi_dot", f"{where} must be {' or '.join(f'{n}D' for n in ok)}"
                                         f" but got {t.ndim}D", RuntimeError)
        if t.dtype != ts[0].dtype:
            raise _op_error("multi_dot", f"all tensors must have the same dtype but tensor 0 "
                                         f"is {ts[0].dtype} and tensor {k} {t.dtype}",
                            RuntimeError)
    for k in range(len(ts) - 1):
        a, b = ts[k], ts[k + 1]
        if a.shape[-1] != b.shape[0]:
            raise _op_error("multi_dot", f"tensors {k} and {k + 1} with shapes "
                                         f"{list(a.shape)} and {list(b.shape)} cannot be "
                                         f"multiplied", RuntimeError)
    r = ts[0]
    for t in ts[1:]:
        r = matmul(r, t)
    return r


def _matrix_input(name, A):
    if A.ndim < 2:
        raise _op_error(name, f"the input tensor A must have at least 2 dimensions, got "
                              f"{A.ndim}", RuntimeError)
    if not A.dtype.is_floating_point:
        raise _op_error(name, f"expected a floating point tensor, got {A.dtype}", RuntimeError)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, out=None):
    """``torch.linalg.matrix_rank``: the number of singular values (eigenvalue
    magnitudes with ``hermitian=True``) above ``max(atol, rtol * largest)``; ``rtol``
    defaults to ``eps * max(m, n)`` when neither tolerance is given, else to 0. An
    int64 tensor of the batch shape."""
    _no_out("linalg.matrix_rank", out)
    _matrix_input("linalg.matrix_rank", A)
    from .grad_mode import no_grad
    with no_grad():
        s = _E.abs(eigvalsh(A)) if hermitian else svdvals(A)
        m, n = A.shape[-2], A.shape[-1]
        if rtol is None:
            rtol = _np.finfo(A.dtype.np).eps * max(m, n) if atol is None else 0.0
        if atol is None:
            atol = 0.0
        if min(m, n) == 0:
            return _C.zeros(tuple(A.shape[:-2]), dtype=_dt.int64)
        smax = _R.amax(s, dim=-1, keepdim=True)
        atol = atol.unsqueeze(-1) if hasattr(atol, "unsqueeze") else atol
        rtol = rtol.unsqueeze(-1) if hasattr(rtol, "unsqueeze") else rtol
        tol = _E.maximum(_C.full_like(smax, 0.0) + atol, smax * rtol)
        return _R.sum(s > tol, dim=-1).to(_dt.int64)


def cond(A, p=None, *, out=None):
    """``torch.linalg.cond``: the condition number of matrices in the norm ``p``: for
    None or 2 (-2), the largest singular value over the smallest (its inverse), any
    shape; for ``'fro'``, ``'nuc'``, ``inf``, ``-inf``, 1, -1, ``norm(A) * norm(inv(A))``
    of square matrices (inf where A is singular)."""
    _no_out("linalg.cond", out)
    _matrix_input("linalg.cond", A)
    if p is None or p == 2 or p == -2:
        s = svdvals(A)
        r = s[..., 0] / s[..., -1]
        return r if p != -2 else s[..., -1] / s[..., 0]
    if p not in ("fro", "nuc", float("inf"), float("-inf"), 1, -1):
        raise _op_error("linalg.cond", f"got an invalid norm type: {p}", RuntimeError)
    if A.shape[-1] != A.shape[-2]:
        raise _op_error("linalg.cond", f"(ord={p}): A must be batches of square matrices, but "
                                       f"they are {A.shape[-2]} by {A.shape[-1]} matrices",
                        RuntimeError)
    try:
        return matrix_norm(A, p) * matrix_norm(inv(A), p)
    except LinAlgError:
        info = _lu_info(A)
        fixed, _ = _replace_failed(A, info)
        r = matrix_norm(fixed, p) * matrix_norm(inv(fixed), p)
        return _E.where(_C.tensor(info == 0, device=A.device), r, _C.full_like(r, float("inf")))


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """``torch.linalg.diagonal``: ``tg.diagonal`` with defaults for batches of
    matrices (the diagonal of the last two dims)."""
    return _S.diagonal(A, offset, dim1, dim2)


def vander(x, *, N=None):
    """``torch.linalg.vander``: the Vandermonde matrix of the last dim of ``x``,
    increasing powers ``x**0 ... x**(N-1)`` in a new last dim (``N`` defaults to
    ``x.shape[-1]``; more than 1)."""
    if x.ndim == 0:
        raise _op_error("linalg.vander", "x must have at least one dimension, got a "
                                         "0-d tensor", RuntimeError)
    n = x.shape[-1] if N is None else N
    if n <= 1:
        raise _op_error("linalg.vander", f"N must be greater than 1, got {n}", RuntimeError)
    cols = [_C.ones_like(x)]
    for _ in range(n - 1):
        cols.append(cols[-1] * x)
    return _S.stack(cols, -1)


# ---------------------------------------------------------------- the _ex forms
InvExResult = _collections.namedtuple("linalg_inv_ex", ["inverse", "info"])
InvExResult.__doc__ = "``tg.linalg.inv_ex``'s result: (inverse, info)."
CholeskyExResult = _collections.namedtuple("linalg_cholesky_ex", ["L", "info"])
CholeskyExResult.__doc__ = "``tg.linalg.cholesky_ex``'s result: (L, info)."
SolveExResult = _collections.namedtuple("linalg_solve_ex", ["result", "info"])
SolveExResult.__doc__ = "``tg.linalg.solve_ex``'s result: (result, info)."


def _host(A):
    return _np.asarray(A.detach().cpu().numpy(), dtype=_np.float64)


def _lu_info(A):
    """LAPACK getrf's info per matrix: the 1-based index of the first zero pivot of
    the LU factorization with partial pivoting, 0 where it completes."""
    a = _host(A)
    batch, n = a.shape[:-2], a.shape[-1]
    a = a.reshape((-1, n, n)).copy()
    info = _np.zeros(a.shape[0], dtype=_np.int32)
    for b in range(a.shape[0]):
        m = a[b]
        for k in range(n):
            piv = k + int(_np.argmax(_np.abs(m[k:, k])))
            if m[piv, k] == 0:
                info[b] = k + 1
                break
            m[[k, piv]] = m[[piv, k]]
            m[k + 1:, k:] -= _np.outer(m[k + 1:, k] / m[k, k], m[k, k:])
    return info.reshape(batch)


def _chol_info(A):
    """LAPACK potrf's info per matrix: the 1-based order of the first leading minor
    that is not positive-definite, 0 where the factorization completes."""
    a = _host(A)
    batch, n = a.shape[:-2], a.shape[-1]
    a = a.reshape((-1, n, n))
    info = _np.zeros(a.shape[0], dtype=_np.int32)
    for b in range(a.shape[0]):
        for k in range(1, n + 1):
            try:
                _np.linalg.cholesky(_np.tril(a[b, :k, :k]) + _np.tril(a[b, :k, :k], -1).T)
            except _np.linalg.LinAlgError:
                info[b] = k
                break
    return info.reshape(batch)


def _replace_failed(A, info):
    """``A`` with the matrices whose ``info`` is not 0 replaced by identities, and the
    mask of the others (broadcastable to A's batch of matrices)."""
    ok = _C.tensor(info == 0, device=A.device)
    ok = ok.reshape(tuple(info.shape) + (1, 1))
    eye = _C.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return _E.where(ok, A, eye), ok


def _info_tensor(info, A):
    return _C.tensor(_np.asarray(info, dtype=_np.int32), device=A.device)


def _nan_where_failed(r, ok):
    return _E.where(ok, r, _C.full_like(r, float("nan")))


def _ex_form(result, compute, info_of, A, check_errors, mask=None):
    """An ``_ex`` form's ``result(value, info)``: ``compute(A)`` with zeros for info;
    where it fails (``check_errors`` false), ``info_of(A)`` per matrix, the failed
    matrices replaced before computing and their results NaN (``mask(r, ok, info)``:
    the mask shaped for ``r``)."""
    try:
        return result(compute(A), _info_tensor(_np.zeros(tuple(A.shape[:-2])), A))
    except LinAlgError:
        if check_errors:
            raise
    info = info_of(A)
    fixed, ok = _replace_failed(A, info)
    r = compute(fixed)
    return result(_nan_where_failed(r, ok if mask is None else mask(r, ok, info)),
                  _info_tensor(info, A))


def inv_ex(A, *, check_errors=False, out=None):
    """``torch.linalg.inv_ex``: ``(inverse, info)``, info an int32 tensor of the batch
    shape: 0 where the matrix was inverted, else the 1-based index of the first zero
    pivot of its LU factorization (its inverse is then NaN). ``check_errors=True``
    raises LinAlgError instead, as ``inv``."""
    _no_out("linalg.inv_ex", out)
    return _ex_form(InvExResult, inv, _lu_info, A, check_errors)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """``torch.linalg.cholesky_ex``: ``(L, info)``, info an int32 tensor of the batch
    shape: 0 where the factorization completed, else the 1-based order of the first
    leading minor that is not positive-definite (its L is then NaN).
    ``check_errors=True`` raises LinAlgError instead, as ``cholesky``."""
    _no_out("linalg.cholesky_ex", out)
    return _ex_form(CholeskyExResult, lambda M: cholesky(M, upper=upper), _chol_info, A,
                    check_errors)


def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """``torch.linalg.solve_ex``: ``(result, info)``, info an int32 tensor of A's
    batch shape: 0 where the system was solved, else the 1-based index of the first
    zero pivot of A's LU factorization (its result is then NaN).
    ``check_errors=True`` raises LinAlgError instead, as ``solve``."""
    _no_out("linalg.solve_ex", out)

    def mask(r, ok, info):
        if r.ndim < ok.ndim or (left and r.ndim == ok.ndim and B.ndim != r.ndim):
            return ok.reshape(tuple(info.shape) + (1,))  # a vector right-hand side
        return ok
    return _ex_form(SolveExResult, lambda M: solve(M, B, left=left), _lu_info, A,
                    check_errors, mask)


# ---------------------------------------------------------------- tensor forms
def tensorinv(A, ind=2, *, out=None):
    """``torch.linalg.tensorinv``: the inverse of ``A`` for ``tensordot(.., ind)``:
    A reshaped to a square matrix ``prod(shape[:ind]) x prod(shape[ind:])``, inverted,
    reshaped to ``shape[ind:] + shape[:ind]``."""
    _no_out("linalg.tensorinv", out)
    if ind <= 0:
        raise _op_error("linalg.tensorinv", f"expected a strictly positive integer for "
                                            f"'ind', but got {ind}", RuntimeError)
    shape = tuple(A.shape)
    rows, cols = int(_np.prod(shape[:ind])), int(_np.prod(shape[ind:]))
    if rows != cols:
        raise _op_error("linalg.tensorinv", f"expected prod(A.shape[:ind]) == "
                                            f"prod(A.shape[ind:]), but got {rows} != {cols} "
                                            f"(A.shape {list(shape)}, ind {ind})", RuntimeError)
    return _S.reshape(inv(_S.reshape(A, (rows, cols))), shape[ind:] + shape[:ind])


def tensorsolve(A, B, dims=None, *, out=None):
    """``torch.linalg.tensorsolve``: ``X`` with ``tensordot(A, X, X.ndim) == B``
    (``dims``: A's dims moved to the end first); X has shape ``A.shape[B.ndim:]``."""
    _no_out("linalg.tensorsolve", out)
    if dims is not None:
        dims = [dims] if isinstance(dims, int) else list(dims)
        A = _S.movedim(A, dims, list(range(A.ndim - len(dims), A.ndim)))
    shape = tuple(A.shape)
    rest = shape[B.ndim:]
    rows, cols = int(_np.prod(tuple(B.shape))), int(_np.prod(rest))
    if shape[:B.ndim] != tuple(B.shape) or rows != cols:
        raise _op_error("linalg.tensorsolve", f"expected prod(A.shape[B.ndim:]) == "
                                              f"B.numel() and A.shape[:B.ndim] == B.shape, got "
                                              f"A.shape {list(shape)} and B.shape "
                                              f"{list(B.shape)}", RuntimeError)
    x = solve(_S.reshape(A, (rows, cols)), _S.reshape(B, (rows,)))
    return _S.reshape(x, rest)



# ---------------------------------------------------------------- least squares
LstsqResult = _collections.namedtuple("linalg_lstsq", ["solution", "residuals", "rank",
                                                       "singular_values"])
LstsqResult.__doc__ = ("``tg.linalg.lstsq``'s result: (solution, residuals, rank, "
                       "singular_values).")
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A, B, rcond=None, *, driver=None):
    """``torch.linalg.lstsq``: the minimum-norm least-squares solution ``X`` of
    ``A X = B`` (B a batch of vectors when it has one dim fewer than A), computed as
    ``pinv(A, rtol=rcond) @ B`` (``rcond`` defaults to ``eps * max(m, n)``), with the
    other fields as the CPU driver (default ``'gelsy'``) returns them: ``rank`` except
    for ``'gels'``; ``singular_values`` for ``'gelsd'``/``'gelss'``; ``residuals``
    (the squared residual norms) except for ``'gelsy'``, where ``m > n`` and every
    matrix has full rank; the fields a driver does not compute are empty tensors."""
    name = "linalg.lstsq"
    driver = "gelsy" if driver is None else driver
    if driver not in _DRIVERS:
        raise _op_error(name, f"parameter `driver` should be one of {_DRIVERS}, got "
                              f"{driver!r}", RuntimeError)
    if A.ndim < 2:
        raise _op_error(name, f"input must have at least 2 dimensions, got {A.ndim}",
                        RuntimeError)
    if A.dtype != B.dtype:
        raise _op_error(name, f"expected input and other to have the same dtype, but got "
                              f"{A.dtype} and {B.dtype}", RuntimeError)
    if not A.dtype.is_floating_point:
        raise _op_error(name, f"expected a floating point tensor, got {A.dtype}",
                        RuntimeError)
    if not (A.ndim >= B.ndim and A.ndim - B.ndim <= 1):
        raise _op_error(name, f"input.dim() must be greater or equal to other.dim() and "
                              f"(input.dim() - other.dim()) <= 1 (got {A.ndim} and "
                              f"{B.ndim})", RuntimeError)
    vector = A.ndim - B.ndim == 1
    m, n = A.shape[-2], A.shape[-1]
    rows = B.shape[-1] if vector else B.shape[-2]
    if rows != m:
        raise _op_error(name, f"input.size(-2) should match other.size(-2) (got {m} and "
                              f"{rows})", RuntimeError)
    if rcond is None:
        rcond = _np.finfo(A.dtype.np).eps * max(m, n)
    Bm = B.unsqueeze(-1) if vector else B
    X = matmul(pinv(A, rtol=rcond), Bm)
    empty = _C.zeros(0, dtype=A.dtype, device=A.device)
    rank = (_C.zeros(0, dtype=_dt.int64, device=A.device) if driver == "gels"
            else matrix_rank(A, rtol=rcond))
    sv = svdvals(A) if driver in ("gelsd", "gelss") else empty
    residuals = empty
    if driver != "gelsy" and m > n:
        full = bool((matrix_rank(A) == n).all().item()) if driver == "gels" else bool(
            (rank == n).all().item())
        if full:
            residuals = _R.sum((matmul(A, X) - Bm) ** 2, dim=-2)  # (a vector B: (..., 1))
    return LstsqResult(X.squeeze(-1) if vector else X, residuals, rank, sv)

__all__ += ["cross", "vecdot", "multi_dot", "matrix_rank", "cond", "diagonal", "vander",
            "inv_ex", "cholesky_ex", "solve_ex", "InvExResult", "CholeskyExResult",
            "SolveExResult", "tensorinv", "tensorsolve", "lstsq", "LstsqResult"]
