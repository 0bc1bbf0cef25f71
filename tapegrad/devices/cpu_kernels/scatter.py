"""Accumulating scatters as Numba loops: ``out[pos] += vals`` on flat float arrays
(3-5x faster than NumPy's 1-D ``np.add.at``, itself several times faster than its
multi-array form), and ``out[:, ix, :] += vals`` slice by slice (the form of
``index_add`` and of the adjoints of ``index_select``/``embedding``), and ``bincount``
into a caller's memory (NumPy's returns a fresh array). Indices must
be in range (the callers check them). Each loop compiles on first use per dtype
(cached on disk by Numba).
"""
import numpy as np

from ..cpu import arr, typed

_FLOATS = (np.float32, np.float64)


def _add_flat_loop(out, pos, vals):
    for i in range(pos.size):
        out[pos[i]] += vals[i]


def _count_loop(out, pos):
    for i in range(pos.size):
        out[pos[i]] += 1


def _add_rows_loop(out, ix, vals):
    # out: (pre, n, post), vals: (pre, k, post), ix: (k,) in [0, n)
    for a in range(out.shape[0]):
        for i in range(ix.size):
            r = ix[i]
            for b in range(out.shape[2]):
                out[a, r, b] += vals[a, i, b]


def _gather_dim_loop(x, idx, out, negative):
    # out[p, k, q] = x[p, idx[p, k, q], q]; a negative index wraps (negative 0) or
    # gives 0 (negative 1: max-pool's window wholly in the padding)
    n = x.shape[1]
    for p in range(idx.shape[0]):
        for k in range(idx.shape[1]):
            for q in range(idx.shape[2]):
                j = idx[p, k, q]
                if j < 0:
                    if negative:
                        out[p, k, q] = 0
                        continue
                    j += n
                out[p, k, q] = x[p, j, q]


def _scatter_dim_loop(out, idx, src):
    for p in range(idx.shape[0]):
        for k in range(idx.shape[1]):
            for q in range(idx.shape[2]):
                out[p, idx[p, k, q], q] = src[p, k, q]


def _scatter_add_dim_loop(out, idx, src):
    for p in range(idx.shape[0]):
        for k in range(idx.shape[1]):
            for q in range(idx.shape[2]):
                out[p, idx[p, k, q], q] += src[p, k, q]


def _scatter_reduce_dim_loop(out, idx, src, how, include_self, identity, cnt, floor):
    # how: 0 sum, 1 prod, 2 amax, 3 amin, 4 mean; in C order of idx, as NumPy's ufunc.at
    P, K, Q = idx.shape
    if not include_self:
        for p in range(P):
            for k in range(K):
                for q in range(Q):
                    out[p, idx[p, k, q], q] = identity
    for p in range(P):
        for k in range(K):
            for q in range(Q):
                j = idx[p, k, q]
                v = src[p, k, q]
                o = out[p, j, q]
                if how == 0 or how == 4:
                    out[p, j, q] = o + v
                elif how == 1:
                    out[p, j, q] = o * v
                elif how == 2:
                    if v > o or v != v:  # NaN propagates, as np.maximum
                        out[p, j, q] = v
                elif v < o or v != v:
                    out[p, j, q] = v
    if how == 4:  # each column's counts along dim (cnt: one column's worth)
        extra = 1 if include_self else 0
        for p in range(P):
            for q in range(Q):
                cnt[:] = 0
                for k in range(K):
                    cnt[idx[p, k, q]] += 1
                for j in range(cnt.size):
                    if cnt[j]:  # integers: floor division, as PyTorch
                        if floor:
                            out[p, j, q] = out[p, j, q] // (cnt[j] + extra)
                        else:
                            out[p, j, q] = out[p, j, q] / (cnt[j] + extra)


def _kernel(fn, *args):
    """``fn`` compiled once per dtype combination of its arguments, whatever the
    arrays' layouts and read-only flags (``devices.cpu.typed``): each array argument
    given as ``(array, layout, writes)`` (``"C"`` or ``"A"``; whether the loop writes
    it), each scalar as its type's name."""
    return typed(fn, *(a if isinstance(a, str) else
                       arr(a[0].dtype, a[0].ndim, a[1], readonly=not a[2]) for a in args),
                 boundscheck=False)


def _fits(out, ix, vals):
    return out.dtype in _FLOATS and vals.dtype == out.dtype and ix.dtype == np.int64


def add_flat(out, pos, vals):
    """``out[pos[i]] += vals[i]`` in order (repeats accumulate) for 1-D contiguous
    ``out`` and ``vals`` of one float dtype and int64 ``pos``; False where it does not
    apply (other dtypes): the caller runs ``np.add.at``."""
    if not _fits(out, pos, vals):
        return False
    _kernel(_add_flat_loop, (out, "C", True), (pos, "A", False), (vals, "A", False))(out, pos, vals)
    return True


def add_rows(out, ix, vals):
    """``out[:, ix[i], :] += vals[:, i, :]`` in order (repeats accumulate) for
    C-contiguous 3-D ``out`` and ``vals`` of one float dtype and 1-D int64 ``ix``;
    False where it does not apply (other dtypes)."""
    if not _fits(out, ix, vals):
        return False
    _kernel(_add_rows_loop, (out, "C", True), (ix, "A", False), (vals, "C", False))(out, ix, vals)
    return True


def bincount_into(x, weights, out):
    """``out[...] = bincount(x, weights)`` (``out`` already sized, ``x`` 1-D and
    non-negative, each value < ``out.size``), with no array of its size made
    (``np.add.at`` writes in place at ~2.5x ``np.bincount``'s time)."""
    out[...] = 0
    if not x.size:
        return out
    x = np.ascontiguousarray(x, dtype=np.int64)
    if weights is None:
        _kernel(_count_loop, (out, "C", True), (x, "A", False))(out, x)
    else:
        weights = np.ascontiguousarray(weights)
        _kernel(_add_flat_loop, (out, "C", True), (x, "A", False), (weights, "A", False))(
            out, x, weights)
    return out


_ALONG = (np.float32, np.float64, np.int64, np.int32)


def _along_fits(a, b, idx):
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype
            and a.dtype in _ALONG and idx.dtype == np.int64 and a.ndim == b.ndim == idx.ndim == 3)


def gather_dim(x, idx, out, negative_zero=False):
    """``out[p, k, q] = x[p, idx[p, k, q], q]`` on 3-D views of any strides (the
    form of gather/take_along_dim along one dim, written into a caller's memory; a
    negative index wraps, or gives 0 with ``negative_zero``); False where it does not
    apply (other dtypes): the caller computes another way."""
    if not _along_fits(x, out, idx):
        return False
    _kernel(_gather_dim_loop, (x, "A", False), (idx, "A", False), (out, "A", True),
            "int64")(x, idx, out, int(negative_zero))
    return True


def scatter_dim(out, idx, src, add=False):
    """``out[p, idx[p, k, q], q] = src[p, k, q]`` (``+=`` with ``add``: repeats
    accumulate; otherwise the last write in C order stays), in place, on 3-D views
    of any strides, indices in range; False where it does not apply."""
    if not _along_fits(out, src, idx):
        return False
    _kernel(_scatter_add_dim_loop if add else _scatter_dim_loop, (out, "A", True),
            (idx, "A", False), (src, "A", False))(out, idx, src)
    return True


def scatter_reduce_dim(out, idx, src, how, include_self, identity):
    """``out[p, idx[p, k, q], q] = how(out[...], src[p, k, q])`` in place, in C order
    of idx (how: "sum", "prod", "amax", "amin", "mean"; without ``include_self`` the
    targeted positions start from ``identity``; "mean" divides each targeted position
    by its count, counted a column along dim at a time); False where it does not
    apply (other dtypes)."""
    if not _along_fits(out, src, idx):
        return False
    code = ("sum", "prod", "amax", "amin", "mean").index(how)
    cnt = np.zeros(out.shape[1], np.int64)
    k = _kernel(_scatter_reduce_dim_loop, (out, "A", True), (idx, "A", False), (src, "A", False),
                "int64", "int64", out.dtype.name, (cnt, "C", True), "int64")
    k(out, idx, src, code, int(bool(include_self)), out.dtype.type(identity), cnt,
      int(out.dtype.kind != "f"))
    return True
