"""Sorting and order statistics: ``sort``, ``argsort``, ``topk``, ``unique`` and
``unique_consecutive`` (NumPy kernels, no gradient for the indices), ``msort``,
``median``/``nanmedian``, ``kthvalue``, ``mode`` (composites: the index found on the raw
values, the value gathered, so the value's gradient goes to that index),
``quantile``/``nanquantile`` (the sorted values gathered at the two ranks around each
quantile and blended), and the searches ``searchsorted``/``bucketize`` (no gradient)."""
from collections import namedtuple, namedtuple as _namedtuple

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import normalize_dim, op_error
from ..dispatch import bind
from ..dtypes import is_float as _isf
from ..tensor import Tensor
from . import _vmap, creation as C, elementwise as E, indexing as I, reduce as R, shape as SH
from ._decl import S, Sample, TensorSpec, decl, rand, register
from .indexing import _CHUNK, _compress_into, _raw, _scatter_back_vjp, take_along_dim
from .reduce import _cum_mode_result, _distinct_entries

__all__ = ["median", "nanmedian", "kthvalue", "msort", "mode", "unique_consecutive", "bucketize",
           "searchsorted", "unique", "sort", "argsort", "topk", "quantile", "nanquantile"]


# ---------------------------------------------------------------- unique
def _unique_infer(x, sorted=True, dim=None):
    shape = tuple(x.shape)
    i64 = np.dtype(np.int64)
    if dim is None:
        return (TensorSpec((None,), x.dtype), TensorSpec(shape, i64), TensorSpec((None,), i64))
    d = normalize_dim("unique", dim, len(shape))
    if any(s == 0 for i, s in enumerate(shape) if i != d):
        raise op_error("unique", f"input of shape {shape} has a zero-size dim other than dim "
                                 f"{d}: there are no slices along dim {d} to compare",
                       RuntimeError)
    return (TensorSpec(shape[:d] + (None,) + shape[d + 1:], x.dtype),
            TensorSpec((shape[d],), i64), TensorSpec((None,), i64))


def _unique_kernel(x, sorted=True, dim=None, alloc=None):
    _unique_infer(x, sorted, dim)
    xp = _devices.xp_of(x)
    if alloc is not None and xp is np and not (dim is not None and x.shape[dim] == 0):
        return _unique_into(x, dim, alloc)
    if dim is None:
        vals, inv, cnt = xp.unique(x.reshape(-1), return_inverse=True, return_counts=True)
        inv = inv.reshape(x.shape)
    else:
        if x.shape[dim] == 0:
            vals, inv, cnt = x, xp.zeros(0, np.int64), xp.zeros(0, np.int64)
        else:
            vals, inv, cnt = np.unique(x, axis=dim, return_inverse=True, return_counts=True)
            inv = inv.reshape(-1)
    if alloc is None:
        return (vals.copy() if vals is x else vals), inv.astype(np.int64), cnt.astype(np.int64)
    # the sizes are the result: computed, then written into the caller's memory
    outs = []
    for r, dt in ((vals, x.dtype), (inv, np.int64), (cnt, np.int64)):
        o = alloc(r.shape, dt)
        o[...] = r
        outs.append(o)
    return tuple(outs)


def _unique_into(x, dim, alloc):
    """unique with a caller's allocator: sizes first, then written there. The input
    sorted (by rows along ``dim``) is the scratch; the first of each run of equal
    values (NaNs one run, as NumPy's unique) marks the ``k`` distinct ones, which size
    the outputs; values are compressed into the caller's memory, each input's rank
    scattered into the inverse, the runs' starts differenced into the counts."""
    if dim is None:
        flat = x.reshape(-1)
        n = flat.size
        perm = np.argsort(flat, kind="stable")
        srt = flat[perm]
        first = np.empty(n, bool)
        first[:1] = True
        np.not_equal(srt[1:], srt[:-1], out=first[1:])
        if n and srt.dtype.kind in "fc" and np.isnan(srt[-1]):
            nan0 = int(np.argmax(np.isnan(srt)))
            first[nan0 + 1:] = False
        k = int(np.count_nonzero(first))
        vals = alloc((k,), x.dtype)
        _compress_into(np, first, srt, vals)
        inv_shape = tuple(x.shape)
    else:
        d = dim % x.ndim
        moved = np.moveaxis(x, d, 0)
        rows = moved.reshape(moved.shape[0], -1)
        n = rows.shape[0]
        perm = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(n)
        srt = rows[perm]
        first = np.empty(n, bool)
        first[:1] = True
        np.any(srt[1:] != srt[:-1], axis=1, out=first[1:])
        k = int(np.count_nonzero(first))
        shape = tuple(x.shape)
        vals = alloc(shape[:d] + (k,) + shape[d + 1:], x.dtype)
        np.compress(first, np.take(x, perm, axis=d), axis=d, out=vals)
        inv_shape = (n,)
    inv = alloc(inv_shape, np.int64)
    rank = np.cumsum(first, dtype=np.int64)
    rank -= 1
    flat_inv = inv.reshape(-1)
    if np.shares_memory(flat_inv, inv):
        flat_inv[perm] = rank
    else:  # memory that does not flatten in place
        tmp = np.empty_like(rank)
        tmp[perm] = rank
        inv[...] = tmp.reshape(inv_shape)
    cnt = alloc((k,), np.int64)
    if k:
        _compress_into(np, first, np.arange(n, dtype=np.int64), cnt)  # where runs start
        for a in range(0, k, _CHUNK):  # start[i + 1] - start[i], block by block
            b = min(a + _CHUNK, k)
            nxt = cnt[a + 1:b + 1].copy()
            if b == k:
                nxt = np.append(nxt, n)
            cnt[a:b] = nxt - cnt[a:b]
    return vals, inv, cnt


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
def _onnx_unique(b, st):
    d = st.attrs.get("dim")
    x = b.input(st, 0)
    shape = b.shape(st, 0)
    if d is None:
        y, _, inv, cnt = b.node("Unique", [b.reshape(x, [-1])], 4, sorted=1)
        b.node("Identity", [y], [b.output(st, 0)])
        b.node("Reshape", [inv, b.ints(shape)], [b.output(st, 1)])
    else:
        d = int(d) % len(shape)
        y, _, inv, cnt = b.node("Unique", [x], 4, sorted=1, axis=d)
        b.node("Identity", [y], [b.output(st, 0)])
        b.node("Identity", [inv], [b.output(st, 1)])
    b.node("Identity", [cnt], [b.output(st, 2)])


def _onnx_topk_all(b, st, largest, k=None, dim=None):
    shape = b.shape(st, 0)
    x = b.input(st, 0)
    if not shape:
        return b.node("Identity", [x]), b.const(np.zeros((), np.int64))
    d = int(st.attrs.get("dim", -1) if dim is None else dim) % len(shape)
    k = shape[d] if k is None else k
    return b.node("TopK", [x, b.ints([k])], 2, axis=d, largest=int(largest), sorted=1)


def _onnx_sort(b, st):
    v, i = _onnx_topk_all(b, st, st.attrs.get("descending", False))
    b.node("Identity", [v], [b.output(st, 0)])
    b.node("Identity", [i], [b.output(st, 1)])


def _onnx_argsort(b, st):
    _, i = _onnx_topk_all(b, st, st.attrs.get("descending", False))
    b.node("Identity", [i], [b.output(st)])


def _onnx_topk(b, st):
    a = st.attrs
    v, i = _onnx_topk_all(b, st, a.get("largest", True), int(a["k"]), a.get("dim", -1))
    b.node("Identity", [v], [b.output(st, 0)])
    b.node("Identity", [i], [b.output(st, 1)])


def _onnx_searchsorted(seq_j, x_j):
    def lower(b, st):
        right = st.attrs.get("right", False) or st.attrs.get("side") == "right"
        dt = np.result_type(b.dtype(st, seq_j), b.dtype(st, x_j))
        seq, x = b.input(st, seq_j, dt), b.input(st, x_j, dt)
        if len(b.shape(st, seq_j)) > 1:
            seq = b.unsqueeze(seq, [-2])
        cmp = b.node("LessOrEqual" if right else "Less", [seq, b.unsqueeze(x, [-1])])
        cnt = b.reduce("ReduceSum", b.cast(cmp, np.int64), [-1], False)
        b.cast(cnt, b.out_dtype(st), [b.output(st)])
    return lower


UNIQUE = register(
    name="unique", onnx=_onnx_unique, kind="dynamic", kernel=_unique_kernel, infer=_unique_infer,
    differentiable=False, nout=3,
    samples=lambda dtype=np.float64: [
        Sample((np.array([[3, 1, 2], [1, 3, 3]], dtype),), {"sorted": True, "dim": None}),
        Sample((np.array([[1, 2], [1, 2], [0, 4]], dtype),), {"sorted": True, "dim": 0}),
        Sample((np.array([[1, 2, 1], [3, 0, 3]], dtype),), {"sorted": True, "dim": 1}),
        Sample((np.zeros(0, dtype),), {"sorted": True, "dim": None})],
    error_samples=lambda: [((rand((3, 4)),), {"sorted": True, "dim": 2}, IndexError),
                           ((rand((0, 4)),), {"sorted": True, "dim": 1}, RuntimeError)],
    torch=lambda torch, x, sorted=True, dim=None: torch.unique(
        x, sorted=sorted, return_inverse=True, return_counts=True, dim=dim))


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The unique elements (sorted), optionally with the inverse indices and counts;
    with ``dim``, unique slices along that dim."""
    d = None if dim is None else normalize_dim("unique", dim, len(input.shape))
    vals, inv, cnt = bind(UNIQUE, input, sorted=bool(sorted), dim=d)
    out = (vals,) + ((inv,) if return_inverse else ()) + ((cnt,) if return_counts else ())
    return out[0] if len(out) == 1 else out


# ---------------------------------------------------------------- sort / argsort / topk
_SortResult = _namedtuple("sort", ("values", "indices"))


_TopkResult = _namedtuple("topk", ("values", "indices"))


def _sort_indices(x, dim, descending):
    """Stable argsort along dim; descending keeps equal elements in their order."""
    xp = _devices.xp_of(x)
    if not descending:
        return xp.argsort(x, axis=dim, kind="stable").astype(np.int64)
    n = x.shape[dim]
    i = xp.argsort(xp.flip(x, axis=dim), axis=dim, kind="stable")
    return ((n - 1) - xp.flip(i, axis=dim)).astype(np.int64)


def _sort_infer(x, dim=-1, descending=False, stable=False, name="sort"):
    shape = tuple(x.shape)
    normalize_dim(name, dim, len(shape))
    return TensorSpec(shape, x.dtype), TensorSpec(shape, np.dtype(np.int64))


def _sort_kernel(x, dim=-1, descending=False, stable=False):
    _sort_infer(x, dim, descending, stable)
    xp = _devices.xp_of(x)
    if x.ndim == 0:
        return x.copy(), xp.zeros((), np.int64)
    idx = _sort_indices(x, dim, descending)
    return xp.take_along_axis(x, idx, axis=dim), idx


def _distinct(shape, dtype, seed):
    """Values with no ties (finite differences and tie order stay unambiguous)."""
    n = int(np.prod(shape))
    v = np.random.default_rng(seed).permutation(n).astype(dtype) * 0.37 - 1.0
    return v.reshape(shape)


def _sort_samples(dtype=np.float64):
    return [Sample((_distinct((3, 4), dtype, 1),), {"dim": 1, "descending": False,
                                                    "stable": False}),
            Sample((_distinct((3, 4), dtype, 2),), {"dim": 0, "descending": True,
                                                    "stable": False}),
            Sample((_distinct((4, 3), dtype, 3).T,), {"dim": 1, "descending": True,
                                                      "stable": True}),
            Sample((np.array([2, 1, 2, 1, 3], dtype),), {"dim": 0, "descending": True,
                                                         "stable": True}, False),
            Sample((np.array([2, 1, 2, 1, 3], dtype),), {"dim": 0, "descending": False,
                                                         "stable": True}, False),
            Sample((_distinct((2, 0), dtype, 4),), {"dim": 1, "descending": False,
                                                    "stable": False})]


def _sort_jvp(ctx, t):
    # the values are the input's elements the indices name
    return (take_along_dim(t, ctx.out[1], dim=ctx.attrs.get("dim", -1)), None)


SORT = register(
    name="sort", onnx=_onnx_sort, vmap=_vmap.dim_attrs(), jvp=_sort_jvp, kernel=_sort_kernel,
    infer=_sort_infer, nout=2, saves=("out",), out_checked=1,
    vjp=_scatter_back_vjp, samples=_sort_samples,
    error_samples=lambda: [((rand((3, 4)),), {"dim": 2, "descending": False, "stable": False},
                            IndexError),
                           ((rand(()),), {"dim": 1, "descending": False, "stable": False},
                            IndexError)],
    torch=lambda torch, x, dim=-1, descending=False, stable=False: torch.sort(
        x, dim=dim, descending=descending, stable=True))


def sort(input, dim=-1, descending=False, stable=False):
    """``(values, indices)`` sorted along ``dim`` (always stable here); differentiable
    in the values."""
    d = normalize_dim("sort", dim, len(input.shape))
    v, i = bind(SORT, input, dim=d, descending=bool(descending), stable=bool(stable))
    return _SortResult(v, i)


def _argsort_kernel(x, dim=-1, descending=False, stable=False):
    _sort_infer(x, dim, descending, stable, "argsort")
    if x.ndim == 0:
        return _devices.xp_of(x).zeros((), np.int64)
    return _sort_indices(x, dim, descending)


ARGSORT = register(
    name="argsort", onnx=_onnx_argsort, vmap=_vmap.dim_attrs(), kernel=_argsort_kernel,
    differentiable=False,
    infer=lambda x, dim=-1, descending=False, stable=False: _sort_infer(x, dim, descending,
                                                                        stable, "argsort")[1],
    samples=_sort_samples,
    error_samples=lambda: [((rand((3, 4)),), {"dim": -3, "descending": False, "stable": False},
                            IndexError),
                           ((rand(()),), {"dim": -2, "descending": False, "stable": False},
                            IndexError)],
    torch=lambda torch, x, dim=-1, descending=False, stable=False: torch.argsort(
        x, dim=dim, descending=descending, stable=True))


def argsort(input, dim=-1, descending=False, stable=False):
    """The indices that sort ``input`` along ``dim`` (stable)."""
    d = normalize_dim("argsort", dim, len(input.shape))
    return bind(ARGSORT, input, dim=d, descending=bool(descending), stable=bool(stable))


def _topk_infer(x, k, dim=-1, largest=True, sorted=True):
    shape = tuple(x.shape)
    if np.dtype(x.dtype).kind == "b":  # PyTorch's RuntimeError
        raise op_error("topk", "does not support bool dtypes", RuntimeError)
    d = normalize_dim("topk", dim, len(shape))
    n = shape[d] if shape else 1
    if not 0 <= k <= n:
        raise op_error("topk", f"selected index k={k} out of range for dim {d} of size {n} "
                               f"(shape {shape})", RuntimeError)
    out = shape[:d] + (k,) + shape[d + 1:] if shape else ()
    return TensorSpec(out, x.dtype), TensorSpec(out, np.dtype(np.int64))


def _topk_kernel(x, k, dim=-1, largest=True, sorted=True):
    _topk_infer(x, k, dim, largest, sorted)
    xp = _devices.xp_of(x)
    if x.ndim == 0:
        return x.copy(), xp.zeros((), np.int64)
    idx = _sort_indices(x, dim, largest)
    idx = idx[(slice(None),) * dim + (slice(0, k),)]
    return xp.take_along_axis(x, idx, axis=dim), idx


def _topk_jvp(ctx, t):
    # the values are the input's elements the indices name
    return (take_along_dim(t, ctx.out[1], dim=ctx.attrs.get("dim", -1)), None)


TOPK = register(
    name="topk", onnx=_onnx_topk, vmap=_vmap.dim_attrs(), jvp=_topk_jvp, kernel=_topk_kernel,
    infer=_topk_infer, nout=2, saves=("out",), out_checked=1,
    vjp=_scatter_back_vjp,
    samples=lambda dtype=np.float64: [
        Sample((_distinct((3, 5), dtype, 1),), {"k": 2, "dim": 1, "largest": True,
                                                "sorted": True}),
        Sample((_distinct((4, 3), dtype, 2),), {"k": 3, "dim": 0, "largest": False,
                                                "sorted": True}),
        Sample((_distinct((5, 3), dtype, 3).T,), {"k": 1, "dim": 1, "largest": True,
                                                  "sorted": True}),
        Sample((_distinct((3, 4), dtype, 4),), {"k": 0, "dim": 1, "largest": True,
                                                "sorted": True})],
    error_samples=lambda: [((rand((3, 4)),), {"k": 5, "dim": 1, "largest": True,
                                              "sorted": True}, RuntimeError),
                           ((rand(()),), {"k": 1, "dim": 1, "largest": True, "sorted": True},
                            IndexError),
                           ((rand(()),), {"k": 2, "dim": 0, "largest": True, "sorted": True},
                            RuntimeError)],
    torch=lambda torch, x, k, dim=-1, largest=True, sorted=True: torch.topk(
        x, k, dim=dim, largest=largest, sorted=sorted))


def topk(input, k, dim=-1, largest=True, sorted=True):
    """``(values, indices)`` of the ``k`` largest (or smallest) along ``dim``, in
    sorted order; differentiable in the values."""
    d = normalize_dim("topk", dim, len(input.shape))
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise op_error("topk", f"k must be an int, got {k!r}", TypeError)
    v, i = bind(TOPK, input, k=int(k), dim=d, largest=bool(largest), sorted=bool(sorted))
    return _TopkResult(v, i)


_sort_result = {n: namedtuple(n, ("values", "indices"))
       for n in ("median", "nanmedian", "kthvalue", "cummax", "cummin")}


def _no_bool(name, input):
    if str(input.dtype).endswith(".bool"):  # a tapegrad or (exported) torch dtype
        raise op_error(name, f"{name}: not implemented for 'Bool'", NotImplementedError)


def _lower_median(name, input, dim, keepdim, ignore_nan):
    _no_bool(name, input)
    if dim is None:
        flat = SH.reshape(input, (-1,))
        if flat.shape[0] == 0:
            raise op_error(name, "median() input tensor cannot be empty", IndexError)
        return _lower_median(name, flat, 0, False, ignore_nan)[0]
    d = normalize_dim(name, dim, input.ndim)
    if input.ndim and input.shape[d] == 0:
        raise op_error(name, f"median(): Expected reduction dim {d} to have non-zero size.",
                       IndexError)
    v, i = sort(input, d)
    size = input.shape[d] if input.ndim else 1
    k = None
    if input.dtype.is_floating_point and input.ndim:  # NaNs sort last
        cnt = R.sum(~E.isnan(input), d, True)
        if ignore_nan:
            k = E.where(cnt == 0, (size - 1) // 2, E.maximum(cnt - 1, 0) // 2)
        else:  # a NaN in the slice is its median (the first NaN, as PyTorch)
            k = E.where(cnt < size, cnt, (size - 1) // 2)
    if input.ndim == 0:
        return _sort_result[name](input, SH.reshape(i, ()))
    if k is None:
        idx = [slice(None)] * input.ndim
        idx[d] = slice((size - 1) // 2, (size - 1) // 2 + 1)
        vals, inds = v[tuple(idx)], i[tuple(idx)]
    else:
        vals, inds = I.gather(v, d, k), I.gather(i, d, k)
    if not keepdim:
        vals, inds = SH.squeeze(vals, d), SH.squeeze(inds, d)
    return _sort_result[name](vals, inds)


def median(input, dim=None, keepdim=False):
    """The lower median of all elements; with ``dim``, ``(values, indices)`` along it."""
    return _lower_median("median", input, dim, keepdim, False)


def nanmedian(input, dim=None, keepdim=False):
    """``median`` ignoring NaNs."""
    return _lower_median("nanmedian", input, dim, keepdim, True)


def _median_samples(dtype=np.float64):  # (the 1-output form, no dim, first)
    return [S(_distinct_entries((3, 5), dtype, 1), 1),
            S(_distinct_entries((4, 3), dtype, 2), 0, True)]


for _f in (median, nanmedian):
    decl(_f, _median_samples, nout=2)


def kthvalue(input, k, dim=-1, keepdim=False):
    """``(values, indices)`` of the ``k``-th smallest element along ``dim``."""
    _no_bool("kthvalue", input)
    d = normalize_dim("kthvalue", dim, input.ndim)
    size = input.shape[d] if input.ndim else 1
    if not 1 <= k <= size:
        raise op_error("kthvalue", f"kthvalue(): selected number k out of range for "
                                   f"dimension {d}", IndexError)
    if input.ndim == 0:
        return _sort_result["kthvalue"](input * 1, SH.reshape(argsort(SH.reshape(input, (1,))), ()))
    v, i = sort(input, d)
    idx = [slice(None)] * input.ndim
    idx[d] = slice(k - 1, k)
    vals, inds = v[tuple(idx)], i[tuple(idx)]
    if not keepdim:
        vals, inds = SH.squeeze(vals, d), SH.squeeze(inds, d)
    return _sort_result["kthvalue"](vals, inds)


decl(kthvalue, lambda dtype=np.float64: [S(_distinct_entries((3, 4), dtype), 2),
                                         S(_distinct_entries((3, 4), dtype, 1), 3, 0, True)],
     nout=2, errors=lambda: [((rand((3, 4)), 9), {}, IndexError)])


_QUANTILE_MODES = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_qs(name, input, q):
    """The quantiles as Python floats, and whether ``q`` was a 1-D tensor (a leading
    dim in the result)."""
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise op_error(name, f"{name}() q must be a scalar or 1D tensor", RuntimeError)
        if q.dtype != input.dtype:
            raise op_error(name, f"{name}() q tensor must be same dtype as the input tensor",
                           RuntimeError)
        qs, listed = [float(v) for v in np.ravel(q.detach().numpy())], q.ndim == 1
    elif isinstance(q, (int, float, np.floating, np.integer)) and not isinstance(q, bool):
        qs, listed = [float(q)], False
    else:
        raise op_error(name, f"q must be a float or a Tensor, got {type(q).__name__}", TypeError)
    for v in qs:
        if not 0.0 <= v <= 1.0:
            raise op_error(name, f"{name}() q must be in the range [0, 1] but got {v}",
                           RuntimeError)
    return qs, listed


def _quantile(name, input, q, dim, keepdim, interpolation, ignore_nan):
    if not isinstance(input, Tensor):
        raise op_error(name, f"input must be a Tensor, got {type(input).__name__}", TypeError)
    if input.dtype not in (_dt.float32, _dt.float64):
        raise op_error(name, f"{name}() input tensor must be either float or double dtype",
                       RuntimeError)
    if interpolation not in _QUANTILE_MODES:
        raise op_error(name, f"{name}() interpolation must be one of linear, lower, higher, "
                             f"midpoint or nearest, but got {interpolation}", RuntimeError)
    qs, listed = _quantile_qs(name, input, q)
    if input.numel() == 0:
        raise op_error(name, f"{name}() input tensor must be non-empty", RuntimeError)
    if dim is None:
        x, d = SH.reshape(input, (-1,)), 0
        kept = (1,) * input.ndim
    else:
        d = normalize_dim(name, dim, input.ndim)
        x = SH.reshape(input, (1,)) if input.ndim == 0 else input
        kept = tuple(1 if i == d else n for i, n in enumerate(input.shape))
    v = sort(x, d)[0]                                   # NaNs sort last
    valid = R.sum(~E.isnan(x), d, True)                 # the non-NaN count of each slice
    n = x.shape[d]
    count = valid if ignore_nan else C.full_like(valid, n)
    last = E.maximum(count - 1, 0).to(x.dtype)
    outs = []
    for qv in qs:
        rank = last * qv
        if interpolation == "nearest":
            rank = E.round(rank)
        below = E.floor(rank) if interpolation != "higher" else E.ceil(rank)
        above = E.ceil(rank) if interpolation != "lower" else below
        lo = I.gather(v, d, below.long())
        hi = I.gather(v, d, above.long())
        if interpolation in ("linear", "midpoint"):
            w = rank - below if interpolation == "linear" else E.ceil(rank - below) * 0.5
            # PyTorch's lerp, from whichever end is nearer (so infinities blend as its)
            out = E.where(w < 0.5, lo + w * (hi - lo), hi - (hi - lo) * (1 - w))
        else:
            out = lo
        missing = (count == 0) if ignore_nan else (valid < n)
        outs.append(E.where(missing, float("nan"), out))
    shape = kept if keepdim else () if dim is None else kept[:d] + kept[d + 1:]
    outs = [SH.reshape(o, shape) for o in outs]
    return SH.stack(outs, 0) if listed else outs[0]


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """The ``q``-th quantiles of ``input`` along ``dim`` (all of it when None), as
    ``torch.quantile``: ``q`` a float or a 1-D tensor (a leading dim in the result);
    ``interpolation`` between the two nearest ranks: linear, lower, higher, midpoint or
    nearest. A slice with a NaN gives NaN. ``out=``: the result written there
    (PyTorch's out=)."""
    res = _quantile("quantile", input, q, dim, keepdim, interpolation, False)
    if out is None:
        return res
    from .compat import write_out
    return write_out("quantile", res, out)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """``quantile`` ignoring NaNs (a slice of NaNs only gives NaN); ``out=`` as
    ``quantile``'s."""
    res = _quantile("nanquantile", input, q, dim, keepdim, interpolation, True)
    if out is None:
        return res
    from .compat import write_out
    return write_out("nanquantile", res, out)


def _quantile_samples(dtype=np.float64):
    return [S(_distinct_entries((3, 5), dtype, 1), 0.3, 1),
            S(_distinct_entries((4, 3), dtype, 2), 0.5, 0, True, interpolation="midpoint"),
            S(_distinct_entries((2, 5), dtype, 3), 0.75, interpolation="lower"),
            S(_distinct_entries((5,), dtype, 4), 0.6, -1, interpolation="nearest")]


def _quantile_errors():
    return [((rand((3, 4)), 1.5), {}, RuntimeError),
            ((rand((3, 4)), 0.5), {"interpolation": "cubic"}, RuntimeError),
            ((rand((3, 4)), 0.5, 2), {}, IndexError),
            ((np.ones((3, 4), np.int64), 0.5), {}, RuntimeError)]


for _f in (quantile, nanquantile):
    decl(_f, _quantile_samples, errors=_quantile_errors)


def msort(input):
    """``sort(input, dim=0).values``."""
    return sort(input, 0)[0]


decl(msort,
     lambda dtype=np.float64: [S(_distinct_entries((3, 4), dtype)),
                               S(_distinct_entries((5,), dtype))])


# ---------------------------------------------------------------- mode
def _mode_index_kernel(x, dim):
    """The index (kept dim) of the mode along ``dim``: the most frequent value (the
    smallest of those equally frequent) at its last occurrence, as PyTorch's."""
    xp = _devices.xp_of(x)
    if x.ndim == 0:
        return xp.zeros((), np.int64)
    a = xp.moveaxis(x, dim, -1)
    order = xp.argsort(a, axis=-1, kind="stable")
    s = xp.take_along_axis(a, order, axis=-1)
    new = xp.ones(s.shape, dtype=bool)
    new[..., 1:] = s[..., 1:] != s[..., :-1]
    if _isf(s.dtype):  # NaNs (sorted last) count as one value (PyTorch's answer
        # with NaNs follows its sort's comparisons: [nan, 1, 2] -> NaN, [1, nan, 2] -> 1)
        new[..., 1:] &= ~(xp.isnan(s[..., 1:]) & xp.isnan(s[..., :-1]))
    # the running length of each run of equal values; the first longest run ends at
    # the argmax, where a stable sort puts the value's largest original index
    pos = xp.arange(s.shape[-1])
    start = xp.maximum.accumulate(xp.where(new, pos, 0), axis=-1)
    best = xp.argmax(pos - start + 1, axis=-1)[..., None]
    idx = xp.take_along_axis(order, best, axis=-1)
    return xp.moveaxis(idx, -1, dim).astype(np.int64)


def _mode_check(name, shape, dtype, dim):
    d = normalize_dim(name, dim, len(shape))
    if shape and shape[d] == 0:
        raise op_error(name, f"mode(): Expected reduction dim {d} to have non-zero size.",
                       IndexError)
    return d


def _mode_index_infer(x, dim):
    shape = list(x.shape)
    d = _mode_check("_mode_index", shape, x.dtype, dim)
    if shape:
        shape[d] = 1
    return TensorSpec(tuple(shape), np.dtype(np.int64))


MODE_INDEX = register(
    name="_mode_index", kernel=_mode_index_kernel, infer=_mode_index_infer, args=("x",),
    differentiable=False, vmap=_vmap.dim_attrs(),
    samples=lambda dtype=np.float64: [
        Sample((np.array([[1.0, 2.0, 2.0, 3.0, 1.0, 2.0], [0.5, 0.5, -1.0, -1.0, 4.0, 4.0]],
                         dtype),), {"dim": 1}),
        Sample((np.array([[3, 1], [1, 1], [3, 2], [1, 2]]),), {"dim": 0}),
        Sample((np.array([[np.inf, 1.0, -np.inf, 1.0, np.inf], [np.inf, 0.0, 2.0, np.inf, 0.0]],
                         dtype),), {"dim": 1}),
        Sample((np.array([[True, False, True], [False, False, True]]),), {"dim": 1})],
    error_samples=lambda: [((rand((3, 0)),), {"dim": 1}, IndexError)],
    torch=lambda torch, x, dim: torch.mode(x, dim, keepdim=True).indices)


def mode(input, dim=-1, keepdim=False):
    """``(values, indices)``: the most frequent value along ``dim`` (the smallest of
    those equally frequent, as PyTorch) and the index of its last occurrence;
    differentiable in the values (the gradient goes to that index)."""
    d = _mode_check("mode", tuple(input.shape), _raw(input).dtype, dim)
    idx = bind(MODE_INDEX, input, dim=d)
    if input.ndim == 0:
        return _cum_mode_result["mode"](input * 1, idx)
    vals = I.gather(input, d, idx)
    if not keepdim:
        vals, idx = SH.squeeze(vals, d), SH.squeeze(idx, d)
    return _cum_mode_result["mode"](vals, idx)


def _mode_infer(x, dim=-1, keepdim=False):
    d = normalize_dim("mode", dim, len(x.shape))
    shape = tuple(x.shape)
    if shape:
        shape = shape[:d] + ((1,) if keepdim else ()) + shape[d + 1:]
    return TensorSpec(shape, x.dtype), TensorSpec(shape, np.dtype(np.int64))


def _mode_samples(dtype=np.float64):
    a = np.array([[1.0, 2.0, 2.0, 3.0, 1.0, 2.0], [0.5, 0.5, -1.0, -1.0, 4.0, 4.0],
                  [3.0, 1.5, 2.5, 0.5, 1.0, 2.0]], dtype)
    # the mode repeats: moving one of its copies changes the answer, so finite
    # differences cannot follow (forward-only here; the gradient is tested against
    # PyTorch's in tests/ops/test_sorting.py)
    return [Sample((a,), {"dim": 1}, False),
            Sample((a.T.copy(),), {"dim": 0, "keepdim": True}, False),
            Sample((np.array([3, 1, 3, 1, 2]),), {}, False)]


decl(mode, _mode_samples, infer=_mode_infer, nout=2,
     errors=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError),
                                 ((rand((3, 0)),), {"dim": 1}, IndexError)])


# ---------------------------------------------------------------- unique_consecutive
def _uc_kernel(x, dim=None, alloc=None):
    xp = _devices.xp_of(x)
    if dim is None:
        flat = x.reshape(-1)
        n = flat.shape[0]
        new = xp.ones(n, dtype=bool)
        if n:
            new[1:] = flat[1:] != flat[:-1]
        vals = flat[new]
        inv = (xp.cumsum(new) - 1).reshape(x.shape)
    else:
        a = xp.moveaxis(x, dim, 0)
        n = a.shape[0]
        new = xp.ones(n, dtype=bool)
        if n:
            new[1:] = (a[1:] != a[:-1]).reshape(n - 1, -1).any(axis=1)
        vals = xp.moveaxis(a[new], 0, dim)
        inv = xp.cumsum(new) - 1
    starts = xp.nonzero(new)[0]
    counts = xp.diff(xp.concatenate([starts, xp.asarray([n])]))
    outs = (vals, inv.astype(np.int64), counts.astype(np.int64))
    if alloc is None:
        return outs
    res = []  # the sizes are the result: computed, then written into the caller's memory
    for r in outs:
        o = alloc(r.shape, r.dtype)
        o[...] = r
        res.append(o)
    return tuple(res)


def _uc_infer(x, dim=None):
    if dim is not None:
        dim = normalize_dim("unique_consecutive", dim, len(x.shape))
        vals = tuple(None if k == dim else n for k, n in enumerate(x.shape))
        inv = (x.shape[dim],)
    else:
        vals, inv = (None,), tuple(x.shape)
    return (TensorSpec(vals, x.dtype), TensorSpec(inv, np.dtype(np.int64)),
            TensorSpec((None,), np.dtype(np.int64)))


UNIQUE_CONSECUTIVE = register(
    name="unique_consecutive", kind="dynamic", kernel=_uc_kernel, infer=_uc_infer,
    args=("x",), nout=3, differentiable=False,
    samples=lambda dtype=np.float64: [
        Sample((np.array([1, 1, 2, 2, 3, 1, 1, 2]),), {}),
        Sample((np.array([[1.0, 1.0, 2.0], [1.0, 1.0, 2.0], [0.5, 1.0, 1.0]], dtype),), {}),
        Sample((np.array([[1.0, 1.0, 2.0], [1.0, 1.0, 2.0], [0.5, 1.0, 1.0]], dtype),),
               {"dim": 0}),
        Sample((np.array([[1, 1, 2], [1, 1, 3]]),), {"dim": 1}),
        Sample((np.zeros((0,), dtype),), {})],
    error_samples=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError)],
    torch=lambda torch, x, dim=None: torch.unique_consecutive(
        x, return_inverse=True, return_counts=True, dim=dim))


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """The input with each run of equal consecutive elements (slices along ``dim``)
    kept once; optionally the inverse (each element's run) and the counts. No
    gradient, as PyTorch."""
    d = None if dim is None else normalize_dim("unique_consecutive", dim, input.ndim)
    vals, inv, cnt = bind(UNIQUE_CONSECUTIVE, input, dim=d)
    out = (vals,) + ((inv,) if return_inverse else ()) + ((cnt,) if return_counts else ())
    return out if len(out) > 1 else vals


def _searchsorted_kernel(seq, values, right=False):
    side = "right" if right else "left"
    if seq.ndim == 1:
        return np.searchsorted(seq, values, side=side).astype(np.int64)
    out = np.empty(values.shape, dtype=np.int64)
    s2, v2, o2 = seq.reshape(-1, seq.shape[-1]), values.reshape(-1, values.shape[-1]), \
        out.reshape(-1, values.shape[-1])
    for k in np.ndindex(s2.shape[0]):
        o2[k] = np.searchsorted(s2[k], v2[k], side=side)
    return out


def _searchsorted_infer(seq, values, right=False):
    if len(seq.shape) > 1 and tuple(seq.shape[:-1]) != tuple(values.shape[:-1]):
        raise op_error("searchsorted", "boundaries and input value tensors should have same "
                                       "size for all but the last dimension", RuntimeError)
    return TensorSpec(tuple(values.shape), np.dtype(np.int64))


SEARCHSORTED = register(name="searchsorted", onnx=_onnx_searchsorted(0, 1),
                        kernel=_searchsorted_kernel,
                        infer=_searchsorted_infer, args=("sorted_sequence", "input"),
                        differentiable=False, promote="same",
                        samples=lambda dtype=np.float64: [
                            S(np.sort(rand((5,), dtype)), rand((3, 4), dtype, seed=1)),
                            S(np.sort(rand((2, 5), dtype), 1), rand((2, 3), dtype, seed=2),
                              right=True)],
                        torch=lambda T, s, v, right=False: T.searchsorted(s, v, right=right),
                        error_samples=lambda: [((rand((2, 5)), rand((3, 3))), {}, RuntimeError)])


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """Where each value of ``input`` would go in ``sorted_sequence`` (sorted along its
    last dim) to keep it sorted; ``sorter``: the indices that sort an unsorted
    ``sorted_sequence`` along its last dim (the result indexes that sorted order)."""
    if side is not None:
        if side not in ("left", "right"):
            raise op_error("searchsorted", f"side can only be 'left' or 'right' but got "
                                           f"{side!r}", RuntimeError)
        if right and side == "left":
            raise op_error("searchsorted", "side and right can't be set to opposites, got "
                                           "side of left while right was True", RuntimeError)
        right = side == "right"
    if sorter is not None:
        if tuple(sorter.shape) != tuple(sorted_sequence.shape):
            raise op_error("searchsorted", f"boundary and sorter must have the same size, but "
                                           f"got boundary tensor {tuple(sorted_sequence.shape)}"
                                           f" and got sorter tensor {tuple(sorter.shape)}",
                           RuntimeError)
        if sorter.dtype != _dt.int64:
            raise op_error("searchsorted", f"sorter must be a tensor of long dtype but got "
                                           f"{sorter.dtype}", RuntimeError)
        from .indexing import gather
        sorted_sequence = gather(sorted_sequence, -1, sorter)
    if not isinstance(input, Tensor):
        input = C.full((), input, dtype=sorted_sequence.dtype)
    out = bind(SEARCHSORTED, sorted_sequence, input, right=bool(right))
    return out.to(_dt.int32) if out_int32 else out


def _bucketize_infer(x, boundaries, right=False):
    if len(boundaries.shape) != 1:
        raise op_error("bucketize", f"boundaries tensor must be 1 dimension, but got dim("
                                    f"{len(boundaries.shape)})", RuntimeError)
    return TensorSpec(tuple(x.shape), np.dtype(np.int64))


BUCKETIZE = register(name="bucketize", onnx=_onnx_searchsorted(1, 0), infer=_bucketize_infer,
                     kernel=lambda x, boundaries, right=False: _searchsorted_kernel(
                         boundaries, x, right),
                     args=("input", "boundaries"), differentiable=False, promote="same",
                     samples=lambda dtype=np.float64: [
                         S(rand((3, 4), dtype), np.array([-1.0, 0.0, 1.0], dtype=dtype)),
                         S(rand((5,), dtype, seed=1), np.array([-0.5, 0.5], dtype=dtype),
                           right=True)],
                     torch=lambda T, x, b, right=False: T.bucketize(x, b, right=right),
                     error_samples=lambda: [((rand((3,)), rand((2, 2))), {}, RuntimeError)])


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each value of ``input`` in the 1-D sorted ``boundaries``."""
    if not isinstance(input, Tensor):
        input = C.full((), input, dtype=boundaries.dtype)
    out = bind(BUCKETIZE, input, boundaries, right=bool(right))
    return out.to(_dt.int32) if out_int32 else out


del _f


METHODS = "unique sort argsort topk"
