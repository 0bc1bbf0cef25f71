"""More of PyTorch's BLAS/LAPACK-style functions (issue 17's census), composites of
``matmul``, ``solve``, ``cholesky``, ``inv`` and ``slogdet``: ``addmm`` and its kin,
``bmm``, ``mv``, ``inner``, ``vdot``, ``chain_matmul``, ``matrix_power``,
``matrix_exp``, ``logdet``, ``cholesky``/``cholesky_inverse``/``cholesky_solve``,
``triangular_solve``; and ``range``/``logspace``."""
import builtins
import math
from collections import namedtuple

import numpy as np

from .. import dtypes as _dt
from .._util import op_error
from ._decl import rand
from .pointwise2 import decl as _decl, S
from . import elementwise as E, reduce as R, shape as SH, linalg as L, creation as C

__all__ = ["addmm", "addmv", "addr", "addbmm", "baddbmm", "bmm", "mv", "inner", "vdot",
           "chain_matmul", "matrix_power", "matrix_exp", "logdet", "cholesky",
           "cholesky_inverse", "cholesky_solve", "triangular_solve", "range", "logspace"]

def decl(fn, samples, **kw):
    """``pointwise2.decl`` with the shape rule run on identity matrices."""
    kw.setdefault("fill", "eye")
    return _decl(fn, samples, **kw)


_solution = namedtuple("triangular_solve", ("solution", "cloned_coefficient"))


def _ndim(name, what, t, n):
    if t.ndim != n:
        raise op_error(name, f"{what} must be a {n}-D tensor, got {t.ndim}-D (shape "
                             f"{tuple(t.shape)})", RuntimeError)


def _same(name, *ts):
    ds = [t.dtype for t in ts]
    if any(d != ds[0] for d in ds):
        raise op_error(name, f"expected the operands to have the same dtype, got "
                             f"{', '.join(str(d) for d in ds)}", RuntimeError)


def _scaled(beta, input, alpha, prod):
    out = prod if alpha == 1 else alpha * prod
    if beta == 0:  # input ignored (a NaN in it does not propagate), as PyTorch
        return out
    return out + (input if beta == 1 else beta * input)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``."""
    _ndim("addmm", "mat1", mat1, 2)
    _ndim("addmm", "mat2", mat2, 2)
    _same("addmm", input, mat1, mat2)
    return _scaled(beta, input, alpha, L.matmul(mat1, mat2))


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``."""
    _ndim("addmv", "mat", mat, 2)
    _ndim("addmv", "vec", vec, 1)
    _same("addmv", input, mat, vec)
    return _scaled(beta, input, alpha, L.matmul(mat, vec))


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    _ndim("addr", "vec1", vec1, 1)
    _ndim("addr", "vec2", vec2, 1)
    return _scaled(beta, input, alpha, L.outer(vec1, vec2))


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])``."""
    _ndim("addbmm", "batch1", batch1, 3)
    _ndim("addbmm", "batch2", batch2, 3)
    _same("addbmm", input, batch1, batch2)
    return _scaled(beta, input, alpha, R.sum(L.matmul(batch1, batch2), 0))


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` (batched)."""
    _ndim("baddbmm", "batch1", batch1, 3)
    _ndim("baddbmm", "batch2", batch2, 3)
    _same("baddbmm", input, batch1, batch2)
    return _scaled(beta, input, alpha, L.matmul(batch1, batch2))


def _add_samples(shapes):
    def samples(dtype=np.float64):
        a = [rand(s, dtype, seed=k) for k, s in enumerate(shapes)]
        return [S(*a), S(*a, beta=0.5, alpha=2.0)]
    return samples


for _f, _shapes, _args in (
        (addmm, ((3, 5), (3, 4), (4, 5)), ("input", "mat1", "mat2")),
        (addmv, ((3,), (3, 4), (4,)), ("input", "mat", "vec")),
        (addr, ((3, 4), (3,), (4,)), ("input", "vec1", "vec2")),
        (addbmm, ((3, 5), (2, 3, 4), (2, 4, 5)), ("input", "batch1", "batch2")),
        (baddbmm, ((2, 3, 5), (2, 3, 4), (2, 4, 5)), ("input", "batch1", "batch2"))):
    decl(_f, _add_samples(_shapes), args=_args,
         errors=(lambda sh: lambda: [((rand(sh[0]), rand((2, 2, 2, 2)), rand(sh[2])), {},
                                      RuntimeError)])(_shapes))


def bmm(input, mat2):
    """Batched matrix product of two 3-D tensors."""
    _ndim("bmm", "batch1", input, 3)
    _ndim("bmm", "batch2", mat2, 3)
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise op_error("bmm", f"Expected size for first two dimensions of batch2 tensor to "
                              f"be: [{input.shape[0]}, {input.shape[2]}] but got: "
                              f"[{mat2.shape[0]}, {mat2.shape[1]}].", RuntimeError)
    return L.matmul(input, mat2)


decl(bmm, lambda dtype=np.float64: [S(rand((2, 3, 4), dtype), rand((2, 4, 5), dtype, seed=1))],
     args=("input", "mat2"), errors=lambda: [((rand((2, 3, 4)), rand((3, 4, 5))), {}, RuntimeError)])


def mv(input, vec):
    """Matrix-vector product."""
    _ndim("mv", "input", input, 2)
    _ndim("mv", "vec", vec, 1)
    if input.shape[1] != vec.shape[0]:
        raise op_error("mv", f"size mismatch, got input ({input.shape[0]}x{input.shape[1]}), "
                             f"vec ({vec.shape[0]})", RuntimeError)
    return L.matmul(input, vec)


decl(mv, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((4,), dtype, seed=1))],
     args=("input", "vec"), errors=lambda: [((rand((3, 4)), rand((5,))), {}, RuntimeError)])


def inner(input, other):
    """The inner product over the last dims (a scalar factor for 0-D)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise op_error("inner", f"inner() the last dimension must match on both input "
                                f"tensors but got shapes {list(input.shape)} and "
                                f"{list(other.shape)}", RuntimeError)
    k = input.shape[-1]
    b = SH.reshape(other, (-1, k))
    out = L.matmul(input, SH.mT(b))
    return SH.reshape(out, tuple(input.shape[:-1]) + tuple(other.shape[:-1]))


decl(inner, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((2, 4), dtype, seed=1)),
                                      S(rand((4,), dtype), rand((4,), dtype, seed=2))],
     args=("input", "other"), errors=lambda: [((rand((3, 4)), rand((3,))), {}, RuntimeError)])


def vdot(input, other):
    """The dot product of two 1-D tensors (the first conjugated: real here)."""
    return L.dot(input, other)


decl(vdot, lambda dtype=np.float64: [S(rand((4,), dtype), rand((4,), dtype, seed=1))],
     args=("input", "other"), errors=lambda: [((rand((4,)), rand((3,))), {}, RuntimeError)])


def chain_matmul(*matrices):
    """The product of the 2-D ``matrices`` (deprecated in PyTorch for ``linalg.multi_dot``)."""
    if not matrices:
        raise op_error("chain_matmul", "chain_matmul(): Expected one or more matrices",
                       RuntimeError)
    for k, m in enumerate(matrices):
        _ndim("chain_matmul", f"matrices[{k}]", m, 2)
    out = matrices[0]
    for m in matrices[1:]:
        out = L.matmul(out, m)
    return out if len(matrices) > 1 else out * 1


decl(chain_matmul, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((4, 2), dtype, seed=1),
                                               rand((2, 5), dtype, seed=2))],
     args=("matrices",), errors=lambda: [((rand((3,)),), {}, RuntimeError)])


def _square(name, x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise op_error(name, f"expected a batch of square matrices, got shape "
                             f"{tuple(x.shape)}", RuntimeError)


def matrix_power(input, n):
    """``input`` to the integer power ``n`` (by squaring; ``n < 0``: of the inverse)."""
    _square("matrix_power", input)
    if n < 0:
        input, n = L.inv(input), -n
    if n == 0:
        eye = C.eye(input.shape[-1], dtype=input.dtype)
        return input * 0 + eye
    result, base = None, input
    while n:
        if n & 1:
            result = base if result is None else L.matmul(result, base)
        n >>= 1
        if n:
            base = L.matmul(base, base)
    return result * 1 if result is input else result


def _wc(shape, dtype, seed=0):
    n = shape[-1]
    return (rand(shape, np.float64, -1.0, 1.0, seed=seed) + n * np.eye(n)).astype(dtype) / n


decl(matrix_power, lambda dtype=np.float64: [S(_wc((3, 3), dtype), 3), S(_wc((2, 3, 3), dtype), -2),
                                             S(_wc((3, 3), dtype), 1)],
     errors=lambda: [((rand((3, 4)), 2), {}, RuntimeError)])


def matrix_exp(input):
    """The matrix exponential: scaling and squaring of a degree-18 Taylor series."""
    _square("matrix_exp", input)
    if not input.dtype.is_floating_point:
        raise op_error("matrix_exp", f"not implemented for {input.dtype}", RuntimeError)
    n = input.shape[-1]
    if getattr(input, "_vlevel", None) is not None:  # inside vmap: no example's data
        s = 10
    else:  # the squarings the largest column-sum norm needs
        a_np = np.asarray(input.detach().numpy())
        nrm = float(np.abs(a_np).sum(-2).max()) if a_np.size else 0.0
        s = max(0, int(math.ceil(math.log2(nrm))) + 1) if nrm > 0.5 else 0
    a = input * (1.0 / 2 ** s) if s else input
    eye = C.eye(n, dtype=input.dtype)
    term = a * 0 + eye
    out = term
    for k in builtins.range(1, 19):
        term = L.matmul(term, a) * (1.0 / k)
        out = out + term
    for _ in builtins.range(s):
        out = L.matmul(out, out)
    return out


decl(matrix_exp, lambda dtype=np.float64: [S(rand((3, 3), dtype) * 0.5), S(rand((2, 2, 2), dtype, seed=1) * 2)],
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)])


def logdet(input):
    """``log(det(input))`` (NaN for a negative determinant, -inf for a singular one)."""
    sign, logabs = L.slogdet(input)
    out = E.where(sign < 0, math.nan, E.where(sign == 0, -math.inf, logabs))
    return E.where(E.isnan(logabs) | E.isnan(sign), math.nan, out)


def _spd(shape, dtype, seed=0):
    r = rand(shape, np.float64, -1.0, 1.0, seed=seed)
    n = shape[-1]
    return (r @ np.swapaxes(r, -1, -2) + n * np.eye(n)).astype(dtype)


decl(logdet, lambda dtype=np.float64: [S(_spd((3, 3), dtype)), S(_spd((2, 3, 3), dtype, 1))],
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)])


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


decl(cholesky, lambda dtype=np.float64: [S(_spd((3, 3), dtype)), S(_spd((2, 3, 3), dtype, 1), True)],
     torch=lambda T, x, upper=False: T.linalg.cholesky(x, upper=upper),  # has forward mode
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)])


def _tri(L_, upper):
    return SH.triu(L_) if upper else SH.tril(L_)


def cholesky_inverse(input, upper=False):
    """The inverse of ``A`` from its Cholesky factor (``A = L L^T``, or ``U^T U``)."""
    _square("cholesky_inverse", input)
    f = _tri(input, upper)
    a = L.matmul(SH.mT(f), f) if upper else L.matmul(f, SH.mT(f))
    return L.inv(a)


def cholesky_solve(input, input2, upper=False):
    """``X`` with ``A X = input``, ``A`` given by its Cholesky factor ``input2``."""
    _square("cholesky_solve", input2)
    _floats("cholesky_solve", input, input2)
    f = _tri(input2, upper)
    a = L.matmul(SH.mT(f), f) if upper else L.matmul(f, SH.mT(f))
    return L.solve(a, input)


def _chol(shape, dtype, seed=0):
    return np.linalg.cholesky(_spd(shape, np.float64, seed)).astype(dtype)


# PyTorch's values by its formula: its derivatives of cholesky_inverse, cholesky_solve and
# triangular_solve treat the factor as a full matrix, though only its triangle is read
# (finite differences see the triangle's): tapegrad's are the true derivatives.
def _t_tri(T, f, upper):
    return f.triu() if upper else f.tril()


def _t_chol_inverse(T, f, upper=False):
    t = _t_tri(T, f, upper)
    return T.linalg.inv(t.mT @ t if upper else t @ t.mT)


def _t_chol_solve(T, b, f, upper=False):
    t = _t_tri(T, f, upper)
    return T.linalg.solve(t.mT @ t if upper else t @ t.mT, b)


def _t_tri_solve(T, b, A, upper=True, transpose=False, unitriangular=False):
    t = _t_tri(T, A, upper)
    if unitriangular:
        eye = T.eye(A.shape[-1], dtype=A.dtype)
        t = t * (1 - eye) + eye
    return T.linalg.solve(t.mT if transpose else t, b), A.clone()


decl(cholesky_inverse, torch=_t_chol_inverse, samples=lambda dtype=np.float64: [S(_chol((3, 3), dtype)),
                                                 S(np.swapaxes(_chol((3, 3), dtype, 1), -1, -2).copy(), True)],
     errors=lambda: [((rand((3, 4)),), {}, RuntimeError)])
decl(cholesky_solve, torch=_t_chol_solve, samples=lambda dtype=np.float64: [S(rand((3, 2), dtype), _chol((3, 3), dtype)),
                                               S(rand((3, 2), dtype, seed=2),
                                                 np.swapaxes(_chol((3, 3), dtype, 1), -1, -2).copy(), True)],
     args=("input", "input2"), errors=lambda: [((rand((3, 2)), rand((3, 4))), {}, RuntimeError)])


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
        S(rand((3, 2), dtype), np.triu(_spd((3, 3), dtype))),
        S(rand((3, 2), dtype, seed=1), np.tril(_spd((3, 3), dtype, 1)), False, True)],
     args=("b", "A"), nout=2, errors=lambda: [((rand((3, 2)), rand((3, 4))), {}, RuntimeError)])


# ------------------------------------------------------------------ ranges
def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):  # noqa: A001
    """``start`` to ``end`` inclusive by ``step`` (PyTorch's deprecated ``torch.range``),
    the default float dtype unless ``dtype``."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise op_error("range", "step must be nonzero", RuntimeError)
    n = int(math.floor((end - start) / step)) + 1
    if n < 0:
        raise op_error("range", "upper bound and larger bound inconsistent with step sign",
                       RuntimeError)
    dt = dtype or _dt.get_default_dtype()
    vals = start + step * np.arange(n, dtype=np.float64)
    return C.tensor(vals, dtype=dt, device=device, requires_grad=requires_grad)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    """``steps`` points ``base ** linspace(start, end, steps)``."""
    if steps < 0:
        raise op_error("logspace", "number of steps must be non-negative", RuntimeError)
    dt = dtype or _dt.get_default_dtype()
    vals = np.power(float(base), np.linspace(float(start), float(end), int(steps)))
    return C.tensor(vals, dtype=dt, device=device, requires_grad=requires_grad)


def _creation_infer(fn):
    def infer(*a, **k):
        out = fn(*a, **k)
        from ._decl import TensorSpec
        return TensorSpec(tuple(out.shape), out.dtype.np)
    return infer


decl(range, lambda dtype=np.float64: [S(0, 4), S(1.0, 2.0, 0.25)], args=(),
     infer=_creation_infer(range), differentiable=False,
     torch=lambda T, *a, **k: T.range(*a, **k, dtype=T.get_default_dtype()),
     errors=lambda: [((0, 4, 0), {}, RuntimeError)])
decl(logspace, lambda dtype=np.float64: [S(0, 2, 3), S(-1.0, 1.0, 5, 2.0)], args=(),
     infer=_creation_infer(logspace), differentiable=False,
     errors=lambda: [((0, 2, -1), {}, RuntimeError)])
del _f
