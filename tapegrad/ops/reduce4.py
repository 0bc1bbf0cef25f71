"""The census's last reductions (issue 17, fourth part): ``histogramdd`` and
``segment_reduce``.

- ``histogramdd(input, bins, *, range=None, weight=None, density=False)``: PyTorch's
  rules (the last dim of ``input`` holds a point's coordinates; ``bins`` a count, one
  count per dim, or one tensor of edges per dim; the data's range per dim unless
  ``range``, widened by 0.5 each side when empty, ``[0, 1]`` for no points; each bin
  half-open but the last, closed; points outside ignored; ``density`` divides by the
  total and the bin volumes). Not differentiable (as PyTorch's). One registry op (a
  NumPy kernel) whose outputs are the histogram and the edges, flat: ``(hist,
  *bin_edges)``, ``1 + D`` of them (under vmap a loop over the examples, stacking
  each); the public function gives PyTorch's ``(hist, bin_edges)`` pair.
"""
from collections import namedtuple

import numpy as np

from .._util import op_error
from ..dispatch import bind
from ..tensor import Tensor, buffer
from ._decl import register, Sample, TensorSpec, rand

__all__ = ["histogramdd"]

_HISTDD = namedtuple("histogramdd", ("hist", "bin_edges"))


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
            if len(b.shape) != 1 or b.shape[0] < 1:
                raise op_error(name, f"bins[{d}] must be a 1-D tensor of at least one edge, "
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
    from ..devices import xp_of
    xp = xp_of(x)
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

