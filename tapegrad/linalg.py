"""``tg.linalg``: PyTorch's ``torch.linalg`` names over the ops in ``tapegrad.ops.linalg``.

>>> import tapegrad as tg
>>> A = tg.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=tg.float64)
>>> tg.linalg.cholesky(A)
tensor([[2.0000, 0.0000],
        [0.5000, 1.6583]], dtype=tapegrad.float64)
"""
from .ops._decl import composite_op as _composite_op
from .ops.guard import checked as _checked
from .ops.linalg import (  # noqa: F401
                         LinAlgError,
                         SlogdetResult,
                         cholesky,
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
from .ops.linalg_decomp import (  # noqa: F401  # noqa: F401
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
