"""bincount into the caller's memory on the CPU: one pass adding each weight (or 1)
into its bin of ``out`` (NumPy's ``bincount`` returns a fresh array, which a caller's
allocator would then need copied in; ``np.add.at`` writes in place at ~2.5x its
time). A Numba loop, compiled on first use, cached on disk."""
import numpy as np

from ..cpu import njit


@njit
def _count(x, out):
    for i in range(x.shape[0]):
        out[x[i]] += 1


@njit
def _weigh(x, w, out):
    for i in range(x.shape[0]):
        out[x[i]] += w[i]


def bincount_into(x, weights, out):
    """``out[...] = bincount(x, weights)`` (``out`` already sized, ``x`` 1-D and
    non-negative, each value < ``out.size``), with no array of its size made."""
    out[...] = 0
    if not x.size:
        return out
    x = np.ascontiguousarray(x, dtype=np.int64)
    if weights is None:
        _count(x, out)
    else:
        _weigh(x, np.ascontiguousarray(weights), out)
    return out
