"""More of PyTorch's reductions and scans (issue 17's census), composites of the
reductions, sorts and elementwise ops: ``aminmax``, ``dist``, ``nansum``/``nanmean``,
``median``/``nanmedian``, ``kthvalue``, ``msort``, ``std_mean``/``var_mean``,
``count_nonzero``, ``logcumsumexp``."""
from collections import namedtuple

import numpy as np

from .._util import normalize_dim, op_error
from ._decl import rand, Sample
from .pointwise2 import decl, S
from . import elementwise as E, reduce as R, indexing as I, shape as SH

__all__ = ["aminmax", "dist", "nansum", "nanmean", "median", "nanmedian", "kthvalue",
           "msort", "std_mean", "var_mean", "count_nonzero", "logcumsumexp"]

_aminmax = namedtuple("aminmax", ("min", "max"))
_vi = {n: namedtuple(n, ("values", "indices"))
       for n in ("median", "nanmedian", "kthvalue", "cummax", "cummin")}


def _distinct(shape, dtype=np.float64, seed=0):
    """Values with no ties (sorts and medians have one answer)."""
    n = int(np.prod(shape)) if shape else 1
    a = np.random.default_rng(seed).permutation(n).astype(dtype) / max(n, 1) * 4 - 2
    return a.reshape(shape)


def aminmax(input, *, dim=None, keepdim=False):
    """``(min, max)`` over ``dim`` (all elements by default)."""
    return _aminmax(R.amin(input, dim, keepdim), R.amax(input, dim, keepdim))


decl(aminmax, lambda dtype=np.float64: [S(_distinct((3, 4), dtype)),
                                        S(_distinct((3, 4), dtype, 1), dim=1, keepdim=True)],
     nout=2)


def dist(input, other, p=2):
    """The ``p``-norm of ``input - other``."""
    return R.norm(input - other, p)


decl(dist, lambda dtype=np.float64: [S(rand((3, 4), dtype, seed=1), rand((3, 4), dtype, seed=2)),
                                     S(rand((3, 4), dtype, seed=3), rand((4,), dtype, seed=4), 1)],
     args=("input", "other"),
     errors=lambda: [((rand((3, 4)), rand((5,))), {}, ValueError)])


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """``sum`` with NaNs counted as zero."""
    x = E.where(E.isnan(input), 0.0, input) if input.dtype.is_floating_point else input
    return R.sum(x, dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """``mean`` of the elements that are not NaN."""
    if not input.dtype.is_floating_point:
        raise op_error("nanmean", f"nanmean(): expected input to have floating point dtype "
                                  f"but got {input.dtype}", RuntimeError)
    keep = ~E.isnan(input)
    total = R.sum(E.where(keep, input, 0.0), dim, keepdim, dtype=dtype)
    return total / R.sum(keep, dim, keepdim).to(total.dtype)


def _nan_samples(dtype=np.float64):
    a = rand((3, 4), dtype, seed=1)
    a[0, 1] = a[2, 3] = np.nan
    return [S(rand((3, 4), dtype, seed=2)), S(rand((3, 4), dtype, seed=3), dim=1, keepdim=True),
            Sample((a,), {"dim": 0}, False)]


decl(nansum, _nan_samples)
decl(nanmean, _nan_samples)


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
    v, i = I.sort(input, d)
    size = input.shape[d] if input.ndim else 1
    k = None
    if input.dtype.is_floating_point and input.ndim:  # NaNs sort last
        cnt = R.sum(~E.isnan(input), d, True)
        if ignore_nan:
            k = E.where(cnt == 0, (size - 1) // 2, E.maximum(cnt - 1, 0) // 2)
        else:  # a NaN in the slice is its median (the first NaN, as PyTorch)
            k = E.where(cnt < size, cnt, (size - 1) // 2)
    if input.ndim == 0:
        return _vi[name](input, SH.reshape(i, ()))
    if k is None:
        idx = [slice(None)] * input.ndim
        idx[d] = slice((size - 1) // 2, (size - 1) // 2 + 1)
        vals, inds = v[tuple(idx)], i[tuple(idx)]
    else:
        vals, inds = I.gather(v, d, k), I.gather(i, d, k)
    if not keepdim:
        vals, inds = SH.squeeze(vals, d), SH.squeeze(inds, d)
    return _vi[name](vals, inds)


def median(input, dim=None, keepdim=False):
    """The lower median of all elements; with ``dim``, ``(values, indices)`` along it."""
    return _lower_median("median", input, dim, keepdim, False)


def nanmedian(input, dim=None, keepdim=False):
    """``median`` ignoring NaNs."""
    return _lower_median("nanmedian", input, dim, keepdim, True)


def _median_samples(dtype=np.float64):  # (the 1-output form, no dim: the census's smoke)
    return [S(_distinct((3, 5), dtype, 1), 1),
            S(_distinct((4, 3), dtype, 2), 0, True)]


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
        return _vi["kthvalue"](input * 1, SH.reshape(I.argsort(SH.reshape(input, (1,))), ()))
    v, i = I.sort(input, d)
    idx = [slice(None)] * input.ndim
    idx[d] = slice(k - 1, k)
    vals, inds = v[tuple(idx)], i[tuple(idx)]
    if not keepdim:
        vals, inds = SH.squeeze(vals, d), SH.squeeze(inds, d)
    return _vi["kthvalue"](vals, inds)


decl(kthvalue, lambda dtype=np.float64: [S(_distinct((3, 4), dtype), 2),
                                         S(_distinct((3, 4), dtype, 1), 3, 0, True)],
     nout=2, errors=lambda: [((rand((3, 4)), 9), {}, IndexError)])


def msort(input):
    """``sort(input, dim=0).values``."""
    return I.sort(input, 0)[0]


decl(msort, lambda dtype=np.float64: [S(_distinct((3, 4), dtype)), S(_distinct((5,), dtype))])


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``."""
    return (R.std(input, dim, unbiased, keepdim, correction=correction),
            R.mean(input, dim, keepdim))


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim``."""
    return (R.var(input, dim, unbiased, keepdim, correction=correction),
            R.mean(input, dim, keepdim))


for _f in (std_mean, var_mean):
    decl(_f, lambda dtype=np.float64: [S(rand((3, 4), dtype)),
                                       S(rand((3, 4), dtype, seed=1), 1, keepdim=True),
                                       S(rand((3, 4), dtype, seed=2), dim=1, correction=0)],
         nout=2)


def count_nonzero(input, dim=None):
    """The number of non-zero elements (over ``dim``), int64."""
    return R.sum(input != 0, dim)


decl(count_nonzero, lambda dtype=np.float64: [
        S(np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]], dtype=dtype)),
        S(np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]], dtype=dtype), 1)],
     differentiable=False)


def logcumsumexp(input, dim):
    """``log(cumsum(exp(input), dim))``, computed stably."""
    if not input.dtype.is_floating_point:
        raise op_error("logcumsumexp", f"logcumsumexp(): expected a floating point input, "
                                       f"got {input.dtype}", RuntimeError)
    d = normalize_dim("logcumsumexp", dim, input.ndim)
    if input.numel() == 0:
        return input * 1
    m = R.amax(input, d, True).detach()
    m = E.where(E.isfinite(m), m, 0.0)
    return E.log(R.cumsum(E.exp(input - m), d)) + m


decl(logcumsumexp, lambda dtype=np.float64: [S(rand((3, 4), dtype), 1),
                                             S(rand((3, 4), dtype, seed=2) * 5, 0)])
del _f
