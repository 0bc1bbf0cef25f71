"""A batched triangular solve on the CPU (NumPy has none): forward or back substitution
per matrix of a batch, many right-hand sides at once, as a Numba loop (compiled on first
use, cached on disk)."""
import numpy as np

from ..cpu import arr, typed


def _trsm(a, b, out, upper, unit):
    nb, n, k = b.shape
    for i in range(nb):
        for c in range(k):
            if upper:
                for r in range(n - 1, -1, -1):
                    acc = b[i, r, c]
                    for j in range(r + 1, n):
                        acc -= a[i, r, j] * out[i, j, c]
                    out[i, r, c] = acc if unit else acc / a[i, r, r]
            else:
                for r in range(n):
                    acc = b[i, r, c]
                    for j in range(r):
                        acc -= a[i, r, j] * out[i, j, c]
                    out[i, r, c] = acc if unit else acc / a[i, r, r]


def _kernel(dtype):
    """``_trsm`` compiled once per dtype (read-only or writeable operands alike)."""
    ro = arr(dtype, 3, readonly=True)
    return typed(_trsm, ro, ro, arr(dtype, 3), "int64", "int64")


def solve_triangular(a, b, upper, unitriangular, out=None):
    """``T^-1 b`` for the ``upper`` (else lower) triangle ``T`` of ``a`` (its diagonal
    1 when ``unitriangular``); batch dims broadcast; ``a.dtype`` == ``b.dtype``.
    ``out``: a C-contiguous array of the result's shape and dtype, written in place (b
    is copied there, then solved over itself: each row is read before it is written);
    it may be ``a`` or ``b``."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    n, k = b.shape[-2], b.shape[-1]
    nb = int(np.prod(batch))
    if out is not None and np.may_share_memory(out, a):
        a = a.copy()  # (out is a: the triangle is read throughout)
    A = np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[-2:])).reshape(nb, n, n)
    if out is not None:
        np.copyto(out, b)
        if out.size:
            Out = out.reshape(nb, n, k)
            _kernel(Out.dtype)(A, Out, Out, int(bool(upper)), int(bool(unitriangular)))
        return out
    B = np.ascontiguousarray(np.broadcast_to(b, batch + (n, k))).reshape(nb, n, k)
    out = np.empty_like(B)
    if B.size:
        _kernel(out.dtype)(A, B, out, int(bool(upper)), int(bool(unitriangular)))
    return out.reshape(batch + (n, k))
