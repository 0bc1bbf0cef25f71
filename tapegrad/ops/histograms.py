"""Counting and binning, none differentiable (as PyTorch's): ``bincount``, ``histc``,
``histogram`` and ``histogramdd``.

``histogramdd(input, bins, *, range=None, weight=None, density=False)`` follows
PyTorch's rules (the last dim of ``input`` holds a point's coordinates; ``bins`` a
count, one count per dim, or one tensor of edges per dim; the data's range per dim
unless ``range``, widened by 0.5 each side when empty, ``[0, 1]`` for no points; each
bin half-open but the last, closed; points outside ignored; ``density`` divides by the
total and the bin volumes). It is one registry op (a NumPy kernel) whose outputs are
the histogram and the edges, flat: ``(hist, *bin_edges)``, ``1 + D`` of them (under
vmap a loop over the examples, stacking each); the public function gives PyTorch's
``(hist, bin_edges)`` pair."""
from collections import namedtuple

import numpy as np

from .. import dtypes as _dt
from .._util import op_error
from ..dispatch import bind
from ..dtypes import is_float as _isf
from ..tensor import Tensor, buffer
from ._decl import S, Sample, TensorSpec, rand, register
from .joining import _index_array

__all__ = ["histogramdd", "bincount", "histc", "histogram"]


_HISTDD = namedtuple("histogramdd", ("hist", "bin_edges"))
_HIST = namedtuple("histogram", ("hist", "bin_edges"))


def _np_dt(x):
    return np.dtype(getattr(x.dtype, "np", x.dtype))


def _dims(D):
    return list(np.arange(D).tolist())  # (``range`` is a parameter name here, PyTorch's)


def _host(a):
    """A NumPy array of a raw array (a CuPy one copied to the host)."""
    return a if isinstance(a, np.ndarray) else (a.get() if hasattr(a, "get") else np.asarray(a))


# ---------------------------------------------------------------- histogramdd
def _linspace(lo, hi, steps, dt):
    """PyTorch's linspace: from both ends toward the middle, in ``dt``'s arithmetic."""
    lo, hi = dt.type(lo), dt.type(hi)
    i = np.arange(steps).astype(dt)
    step = (hi - lo) / dt.type(steps - 1) if steps > 1 else dt.type(0)
    half = steps // 2
    out = np.where(i < half, lo + step * i, hi - step * (dt.type(steps - 1) - i))
    return out.astype(dt)


def _histdd_check(x, weight, bins, range, density):  # noqa: A002
    name = "histogramdd"
    if len(x.shape) < 2:
        raise op_error(name, "input tensor should have at least 2 dimensions", RuntimeError)
    dt = _np_dt(x)
    if dt.kind != "f":
        raise op_error(name, f"not implemented for {dt.name}", NotImplementedError)
    D = x.shape[-1]
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        bins = (int(bins),) * D
    bins = tuple(bins)
    if len(bins) != D:
        raise op_error(name, "The size of bins must be equal to the innermost dimension of "
                             "the input.", RuntimeError)
    counts = []
    for d, b in enumerate(bins):
        if hasattr(b, "shape"):
            if len(b.shape) != 1 or b.shape[0] < 2:  # (PyTorch: one edge is 0 bins)
                raise op_error(name, f"bins[{d}] must be a 1-D tensor of at least two edges, "
                                     f"got shape {tuple(b.shape)}", RuntimeError)
            if _np_dt(b) != dt:
                raise op_error(name, f"bins[{d}] dtype {_np_dt(b).name} does not match input "
                                     f"dtype {dt.name}", RuntimeError)
            counts.append(b.shape[0] - 1)
        elif isinstance(b, bool) or not isinstance(b, (int, np.integer)):
            raise op_error(name, f"bins must be an int, a sequence of ints or of tensors, got "
                                 f"{b!r}", TypeError)
        elif b <= 0:
            raise op_error(name, f"bins must be > 0, but got {b} for dimension {d}",
                           RuntimeError)
        else:
            counts.append(int(b))
    if weight is not None:
        if tuple(weight.shape) != tuple(x.shape[:-1]):
            raise op_error(name, f"if weight tensor is provided it should have the same shape "
                                 f"as the input tensor excluding its innermost dimension, but "
                                 f"got input with shape {list(x.shape)} and weight with shape "
                                 f"{list(weight.shape)}", RuntimeError)
        if _np_dt(weight) != dt:
            raise op_error(name, f"if weight tensor is provided, input tensor and weight tensor "
                                 f"should have the same dtype, but got input({dt.name}), and "
                                 f"weight({_np_dt(weight).name})", RuntimeError)
    if range is not None:
        range = tuple(float(v) for v in range)  # noqa: A001
        if len(range) != 2 * D:
            raise op_error(name, f"for a {D}-dimensional histogram range should have {2 * D} "
                                 f"elements, but got {len(range)}", RuntimeError)
        for d in _dims(D):
            if range[2 * d] > range[2 * d + 1]:
                raise op_error(name, f"min should not exceed max, but got min {range[2 * d]} "
                                     f"max {range[2 * d + 1]} for dimension {d}", RuntimeError)
    return dt, D, bins, counts, range


def _histdd_arrays(x, weight, bins, range, density):  # noqa: A002
    """(hist, edges) on NumPy arrays (``bins``: counts or edge arrays, checked)."""
    dt, D, bins, counts, range = _histdd_check(x, weight, bins, range, density)  # noqa: A001
    pts = np.asarray(x, dtype=dt).reshape(-1, D)
    edges = []
    for d in _dims(D):
        b = bins[d]
        if hasattr(b, "shape"):
            edges.append(np.asarray(b, dtype=dt))
            continue
        if range is not None:
            lo, hi = range[2 * d], range[2 * d + 1]
        elif pts.shape[0]:
            lo, hi = float(pts[:, d].min()), float(pts[:, d].max())
        else:
            lo, hi = 0.0, 1.0
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise op_error("histogramdd", f"dimension {d}'s range [{lo:g}, {hi:g}] is not "
                                          f"finite", RuntimeError)
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges.append(_linspace(lo, hi, counts[d] + 1, dt))
    keep = np.ones(pts.shape[0], bool)
    idx = []
    for d in _dims(D):
        e, v = edges[d], pts[:, d]
        keep &= (v >= e[0]) & (v <= e[-1])
        i = np.searchsorted(e, v, side="right") - 1
        i = np.where(v == e[-1], counts[d] - 1, i)   # the last bin is closed
        idx.append(np.clip(i, 0, max(counts[d] - 1, 0)))
    flat = np.ravel_multi_index(tuple(i[keep] for i in idx), tuple(counts)) if D else \
        np.zeros(0, np.int64)
    w = None if weight is None else np.asarray(weight, dtype=dt).reshape(-1)[keep]
    hist = np.bincount(flat, weights=w, minlength=int(np.prod(counts))).astype(dt)
    hist = hist.reshape(tuple(counts))
    if density:
        hist = hist / hist.sum()
        for d in _dims(D):
            shape = [1] * D
            shape[d] = -1
            hist = hist / np.diff(edges[d]).reshape(shape)
        hist = hist.astype(dt)
    return hist, edges


def _histdd_kernel(x, weight=None, *, bins, range=None, density=False):  # noqa: A002
    """The registry's kernel: ``(hist, *bin_edges)`` in ``x``'s array module."""
    from ..devices import check_alloc, xp_of
    xp = xp_of(x)
    check_alloc("histogramdd", x.shape, x.dtype)   # its points are copied (a huge view)
    hist, edges = _histdd_arrays(_host(x), None if weight is None else _host(weight), bins,
                                 range, density)
    return tuple(xp.asarray(a) for a in (hist, *edges))


def histogramdd(input, bins, *, range=None, weight=None, density=False, out=None):  # noqa: A002
    """``(hist, bin_edges)``: the ``D``-dimensional histogram of the points in the rows of
    ``input`` (its last dim is ``D``), as ``torch.histogramdd``."""
    if out is not None:
        raise op_error("histogramdd", "out= is not supported", TypeError)
    if not isinstance(input, Tensor):
        raise op_error("histogramdd", f"argument 'input' must be a Tensor, not "
                                      f"{type(input).__name__}", TypeError)
    if not isinstance(bins, (int, np.integer)):
        bins = tuple(_host(buffer(b)) if isinstance(b, Tensor) else b for b in bins)
    res = bind(HISTOGRAMDD, input, weight, bins=bins, range=range, density=bool(density))
    return _HISTDD(res[0], tuple(res[1:]))


def _histdd_infer(x, weight=None, *, bins, range=None, density=False):  # noqa: A002
    dt, D, bins, counts, _ = _histdd_check(x, weight, bins, range, density)
    return (TensorSpec(tuple(counts), dt),) + tuple(TensorSpec((c + 1,), dt) for c in counts)


def _histdd_samples(dtype=np.float64):
    pts = rand((20, 2), dtype, seed=1)
    return [Sample((pts,), {"bins": 3}),
            Sample((pts, rand((20,), dtype, 0.0, 1.0, seed=2)), {"bins": (2, 4),
                                                                  "density": True}),
            Sample((rand((4, 5, 3), dtype, seed=3),), {"bins": (2, 3, 2),
                                                       "range": (-1.0, 1.0, -3.0, 3.0, 0.0,
                                                                 2.0)}),
            Sample((np.ones((6, 1), dtype),), {"bins": 2})]


def _histdd_torch(torch, x, weight=None, *, bins, range=None, density=False):  # noqa: A002
    h = torch.histogramdd(x, list(bins) if not isinstance(bins, int) else bins, range=range,
                          weight=weight, density=density)
    return (h.hist,) + tuple(h.bin_edges)


def _histdd_vmap(ctx, *values):
    """Under vmap: one histogram (and its edges) per example, stacked (it reads the
    data; its output count is 1 + D, so ``_vmap.loop``'s fixed count does not apply)."""
    outs = [bind(ctx.op, *[v[b] if bt else v for v, bt in zip(values, ctx.batched)],
                 **ctx.attrs) for b in range(ctx.size)]
    return tuple(ctx.m.stack([o[k] for o in outs]) for k in range(len(outs[0])))


HISTOGRAMDD = register(
    name="histogramdd", kernel=_histdd_kernel, infer=_histdd_infer, args=("input", "weight"),
    optional=("weight",), nout=2, differentiable=False, vmap=_histdd_vmap,
    samples=_histdd_samples,
    error_samples=lambda: [((rand((5,)),), {"bins": 2}, RuntimeError),
                           ((rand((5, 2)),), {"bins": (2, 3, 4)}, RuntimeError),
                           ((rand((5, 2)), rand((4,))), {"bins": 2}, RuntimeError),
                           ((rand((5, 2)),), {"bins": 2, "range": (0.0, 1.0)}, RuntimeError),
                           ((rand((5, 2)),), {"bins": 0}, RuntimeError),
                           ((np.ones((5, 2), np.int64),), {"bins": 2}, NotImplementedError)],
    torch=_histdd_torch,
    doc="``(hist, *bin_edges)``: histogramdd's histogram and its edges, flat (nout: 1 + D).")


# ------------------------------------------------------------------ counting (no gradient)
def _ints(shape, lo, hi, seed=0):
    return np.random.default_rng(seed).integers(lo, hi, shape)


def _bincount_values(x, weights, minlength):
    """The checks on bincount's values, in the kernel (a replay runs it, not the
    function's), PyTorch's errors."""
    if int(minlength) < 0:
        raise op_error("bincount", f"minlength should be >= 0, got {int(minlength)}",
                       RuntimeError)
    if weights is not None and tuple(weights.shape) != tuple(x.shape):
        raise op_error("bincount", f"weights should be 1-d and have the same length as "
                                   f"input: {tuple(weights.shape)} against {tuple(x.shape)}",
                       RuntimeError)
    if x.size and int(x.min()) < 0:
        raise op_error("bincount", "bincount only supports 1-d non-negative integral inputs.",
                       RuntimeError)


def _bincount_kernel(x, weights=None, minlength=0, alloc=None):
    if alloc is not None and type(x) is np.ndarray:  # sized first, counted in place
        _bincount_infer(x, weights, minlength)  # infer_first=False: the kernel checks
        _bincount_values(x, weights, minlength)
        n = max(int(x.max()) + 1 if x.size else 0, int(minlength))
        dt = np.dtype(np.int64) if weights is None else (
            weights.dtype if _isf(weights.dtype) else np.dtype(np.float64))
        from ..devices.cpu_kernels.scatter import bincount_into
        return bincount_into(x, weights, alloc((n,), dt))
    _bincount_values(x, weights, minlength)
    counts = np.bincount(x, weights, minlength=minlength)
    if weights is not None and _isf(weights.dtype):
        counts = counts.astype(weights.dtype)
    out = alloc(counts.shape, counts.dtype)
    out[...] = counts
    return out


def _bincount_infer(x, weights=None, minlength=0):
    if len(x.shape) != 1:
        raise op_error("bincount", "bincount only supports 1-d non-negative integral inputs.",
                       RuntimeError)
    dt = np.dtype(np.int64) if weights is None else (
        np.dtype(weights.dtype) if _isf(np.dtype(weights.dtype)) else np.dtype(np.float64))
    return TensorSpec((None,), dt)


BINCOUNT = register(name="bincount", kernel=_bincount_kernel, infer=_bincount_infer,
                    args=("input", "weights"), optional=("weights",), kind="dynamic",
                    differentiable=False, infer_first=False,
                    samples=lambda dtype=np.float64: [S(_ints((10,), 0, 5)),
                                                      S(_ints((6,), 0, 4, 1), rand((6,), dtype),
                                                        minlength=7)],
                    torch=lambda T, x, w=None, minlength=0: T.bincount(x, w, minlength),
                    error_samples=lambda: [((_ints((2, 3), 0, 3),), {}, RuntimeError)])


def bincount(input, weights=None, minlength=0):
    """Counts of each non-negative integer in a 1-D int tensor (``weights`` summed)."""
    if input.dtype.is_floating_point or input.dtype == _dt.bool or input.ndim != 1:
        raise op_error("bincount", "bincount only supports 1-d non-negative integral inputs.",
                       RuntimeError)
    return bind(BINCOUNT, input, weights, minlength=int(minlength))


def _histc_kernel(x, bins=100, min=0, max=0):  # noqa: A002
    lo, hi = float(min), float(max)
    if lo == hi and x.size:
        lo, hi = float(x.min()), float(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    h, _ = np.histogram(x, bins=bins, range=(lo, hi))
    return h.astype(x.dtype)


HISTC = register(name="histc", kernel=_histc_kernel, args=("input",), differentiable=False,
                 infer=lambda x, bins=100, min=0, max=0: TensorSpec((bins,), np.dtype(x.dtype)),
                 samples=lambda dtype=np.float64: [S(rand((20,), dtype), bins=4, min=-2, max=2),
                                                   S(rand((3, 4), dtype), bins=5)],
                 torch=lambda T, x, **k: T.histc(x, **k),
                 error_samples=lambda: [(("not a tensor",), {}, TypeError)])


def histc(input, bins=100, min=0, max=0):  # noqa: A002
    """A histogram of ``bins`` equal bins over ``[min, max]`` (the data's range when
    both are 0); elements outside are ignored."""
    if not input.dtype.is_floating_point:
        raise op_error("histc", f"\"histogram_cpu\" not implemented for '{input.dtype}'",
                       RuntimeError)
    if bins <= 0:
        raise op_error("histc", "bins must be > 0", RuntimeError)
    if max < min:
        raise op_error("histc", "max must be larger than min", RuntimeError)
    return bind(HISTC, input, bins=int(bins), min=min, max=max)


def _histogram_kernel(x, bins=100, range=None, weight=None, density=False):  # noqa: A002
    h, edges = np.histogram(x, bins=bins, range=range, weights=weight, density=density)
    return h.astype(x.dtype), edges.astype(x.dtype)


HISTOGRAM = register(name="histogram", kernel=_histogram_kernel, args=("input",), nout=2,
                     differentiable=False,
                     infer=lambda x, bins=100, range=None, weight=None, density=False: (
                         TensorSpec((bins,), np.dtype(x.dtype)),
                         TensorSpec((bins + 1,), np.dtype(x.dtype))),
                     samples=lambda dtype=np.float64: [S(rand((20,), dtype), bins=4),
                                                       S(rand((3, 4), dtype), bins=3,
                                                         range=(-1.0, 1.0))],
                     torch=lambda T, x, **k: tuple(T.histogram(x, **k)),
                     error_samples=lambda: [(("not a tensor",), {}, TypeError)])


def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """``(hist, bin_edges)``, as ``torch.histogram``: ``bins`` equal bins over ``range``
    (the data's by default), or the bins between the increasing edges of a 1-D tensor
    ``bins`` (``histogramdd``'s, on one dim)."""
    if isinstance(bins, Tensor):
        if range is not None:
            raise op_error("histogram", "range cannot be given with a tensor of bin edges",
                           TypeError)
        h = histogramdd(input.reshape(-1, 1), (bins,), density=density,
                        weight=None if weight is None else weight.reshape(-1))
        return _HIST(h.hist, h.bin_edges[0])
    if not isinstance(bins, (int, np.integer)) or isinstance(bins, bool):
        raise op_error("histogram", f"bins must be an int or a 1-D tensor of edges, got "
                                    f"{type(bins).__name__}", TypeError)
    bins = int(bins)
    if not input.dtype.is_floating_point:
        raise op_error("histogram", f"\"histogram_cpu\" not implemented for '{input.dtype}'",
                       RuntimeError)
    kw = {"bins": bins}
    if range is not None:
        kw["range"] = tuple(float(v) for v in range)
    if weight is not None:
        kw["weight"] = _index_array(weight)
    if density:
        kw["density"] = True
    return _HIST(*bind(HISTOGRAM, input, **kw))

