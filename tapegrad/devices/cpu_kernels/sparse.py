"""The sparse COO matrix product as a Numba loop: ``out[r] += v * b[c]`` for each
stored element ``(r, c, v)``, a row of the dense operand at a time, so the sparse
operand is never made dense. Duplicate entries accumulate (an uncoalesced tensor's
product is its coalesced one's). Compiles on first use per dtype (cached on disk).
"""
import numpy as np

from ..cpu import numba

_FLOATS = (np.float32, np.float64)
_compiled = {}


def _coo_mm_loop(rows, cols, vals, b, out):
    n = b.shape[1]
    for i in range(rows.size):
        r = rows[i]
        c = cols[i]
        v = vals[i]
        for j in range(n):
            out[r, j] += v * b[c, j]


def coo_mm(rows, cols, vals, b, out):
    """``out += A @ b`` for the COO matrix ``A`` given by ``rows``, ``cols``, ``vals``
    (int64, int64, 1-D float) and a 2-D ``b`` of the same float dtype; False where it
    does not apply (other dtypes): the caller computes it another way."""
    if not (vals.dtype in _FLOATS and b.dtype == vals.dtype and out.dtype == vals.dtype
            and rows.dtype == np.int64 and cols.dtype == np.int64):
        return False
    k = _compiled.get("coo_mm")
    if k is None:
        k = _compiled["coo_mm"] = numba().njit(cache=True, nogil=True, boundscheck=False,
                                               no_cfunc_wrapper=True)(_coo_mm_loop)
    k(np.ascontiguousarray(rows), np.ascontiguousarray(cols), np.ascontiguousarray(vals),
      np.ascontiguousarray(b), out)
    return True
