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
- ``segment_reduce(data, reduce, *, lengths=None, offsets=None, axis=0, unsafe=False,
  initial=None)``: a composite (each position's segment counted from the cumulative
  lengths, then ``scatter_reduce``), so it differentiates at every order, in forward
  mode and under vmap. Ties of max/min share the gradient evenly; PyTorch's kernel
  divides a tie's gradient only where it is positive (``grad > 0``), a quirk not
  copied.
"""
from collections import namedtuple

import numpy as np

from .._util import op_error
from ..dispatch import bind
from ..tensor import Tensor, buffer
from ._decl import register, composite, Sample, TensorSpec, rand

__all__ = ["histogramdd", "segment_reduce"]

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
    from ..devices import xp_of, check_alloc
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



# ---------------------------------------------------------------- segment_reduce
_SEG_REDUCE = {"sum": "sum", "prod": "prod", "mean": "mean", "max": "amax", "amax": "amax",
               "min": "amin", "amin": "amin"}


def _seg_fail(msg, cls=RuntimeError):
    raise op_error("segment_reduce", msg, cls)


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    """Reduce consecutive segments of ``data`` along ``axis`` (``reduce``: "sum",
    "prod", "mean", "max"/"amax", "min"/"amin"), the segments given by their ``lengths``
    or their ``offsets`` (batch dims first, as ``data``'s leading dims), as
    ``torch.segment_reduce``: an empty segment gives ``initial`` if given, else the
    reduction's identity (0, 1, -inf, inf; NaN for mean); ``initial`` takes part in
    every segment's reduction. Built from ops (``scatter_reduce`` with PyTorch's
    gradients: ties of max/min share it evenly), so it differentiates at every order,
    in forward mode and under vmap."""
    from . import shape as SH, elementwise as E, creation as C, reduce as R, reduce3 as R3
    from . import indexing as IX
    if reduce not in _SEG_REDUCE:
        _seg_fail(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                  f"{reduce}")
    red = _SEG_REDUCE[reduce]
    if indices is not None:
        _seg_fail("indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        _seg_fail("Either lengths or offsets must be defined.")
    dt = _np_dt(data)
    if dt.kind != "f":
        _seg_fail(f"expected a floating point data, got {dt.name}")
    nd = len(data.shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or \
            not -max(nd, 1) <= axis < max(nd, 1):
        _seg_fail(f"axis {axis} is out of range for data of {nd} dimensions", IndexError)
    axis = int(axis) % max(nd, 1)
    if offsets is not None:  # offsets win over lengths, as PyTorch's
        if _np_dt(offsets).kind not in "iu":
            _seg_fail(f"expected integer offsets, got {_np_dt(offsets).name}")
        if len(offsets.shape) == 0 or offsets.shape[-1] < 1:
            _seg_fail(f"offsets must hold at least one offset, got shape "
                      f"{tuple(offsets.shape)}")
        lengths = offsets[..., 1:] - offsets[..., :-1]
    elif _np_dt(lengths).kind not in "iu":
        _seg_fail(f"expected integer lengths, got {_np_dt(lengths).name}")
    if len(lengths.shape) - 1 != axis or tuple(lengths.shape[:-1]) != tuple(data.shape[:axis]):
        _seg_fail(f"Expected lengths (or offsets) of shape data.shape[:axis] + (segments,) = "
                  f"{tuple(data.shape[:axis])} + (S,), got {tuple(lengths.shape)} (axis "
                  f"{axis}, data {tuple(data.shape)})")
    N, S = data.shape[axis], lengths.shape[-1]
    if not unsafe and getattr(lengths, "_vlevel", None) is None:  # (its values: not in vmap)
        lv = np.asarray(_host(buffer(lengths)))
        if (lv < 0).any():
            _seg_fail("lengths contains negative value!")
        if lv.size and not (lv.sum(-1) == N).all():
            _seg_fail("Expected all rows of lengths along axis to sum to data.size(lengths."
                      "dim()-1) when !unsafe.")
    # each position's segment: how many segment ends are at or before it
    ends = R.cumsum(lengths, -1)
    pos = C.arange(N, dtype=_dt_int64(), device=data.device)
    seg = R.sum(SH.unsqueeze(ends, -2) <= SH.unsqueeze(pos, -1), -1)    # (*, N)
    trail = nd - axis - 1
    index = SH.expand(SH.reshape(seg, tuple(seg.shape) + (1,) * trail), *data.shape)
    out_shape = tuple(data.shape[:axis]) + (S,) + tuple(data.shape[axis + 1:])
    base = C.zeros(out_shape, dtype=data.dtype, device=data.device)
    if red in ("sum", "mean"):   # (scatter_add: a gather for its gradient)
        r = IX.scatter_add(base, axis, index, data)
    else:
        r = R3.scatter_reduce(base, axis, index, data, red, include_self=False)
    count = SH.reshape(lengths, tuple(lengths.shape) + (1,) * trail)
    empty = count == 0
    if red == "mean":
        total = r if initial is None else r + initial
        mean = total / C.cast(E.where(empty, 1, count), data.dtype)
        return E.where(empty, float("nan") if initial is None else float(initial), mean)
    if red == "sum":
        return r if initial is None else r + initial
    ident = {"prod": 1.0, "amax": float("-inf"), "amin": float("inf")}[red]
    r = E.where(empty, ident, r)
    if initial is None:
        return r
    if red == "prod":
        return r * initial
    return E.clamp(r, min=initial) if red == "amax" else E.clamp(r, max=initial)


def _dt_int64():
    from .. import dtypes as _dt
    return _dt.int64


def _seg_infer(data, lengths=None, offsets=None, *, reduce, axis=0, unsafe=False,
               initial=None):
    if reduce not in _SEG_REDUCE:
        _seg_fail(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                  f"{reduce}")
    if lengths is None and offsets is None:
        _seg_fail("Either lengths or offsets must be defined.")
    nd = len(data.shape)
    axis = int(axis) % max(nd, 1)
    S = offsets.shape[-1] - 1 if offsets is not None else lengths.shape[-1]
    return TensorSpec(tuple(data.shape[:axis]) + (S,) + tuple(data.shape[axis + 1:]),
                      _np_dt(data))


def _seg_samples(dtype=np.float64):
    x1 = rand((7,), dtype, seed=1)
    L1 = np.array([2, 1, 3, 1], np.int64)
    O1 = np.array([0, 2, 3, 6, 7], np.int64)
    E1 = np.array([2, 0, 4, 1], np.int64)   # an empty segment: no finite differences there
    x2 = rand((2, 6, 3), dtype, seed=2)
    L2 = np.array([[2, 4], [3, 3]], np.int64)
    off = np.array([[0, 1, 2, 6], [0, 3, 5, 6]], np.int64)
    out = [Sample((x1, L1, O1), {"reduce": "sum"})]   # both given (offsets win)
    out += [Sample((x1, L1), {"reduce": r}) for r in ("mean", "max", "min", "prod")]
    out += [Sample((x1, E1), {"reduce": r}, False) for r in ("sum", "mean", "max", "min",
                                                              "prod")]
    out += [Sample((x1, E1), {"reduce": "mean", "initial": 0.5}),
            Sample((x1, E1), {"reduce": "amax", "initial": -5.0}),
            Sample((x2, L2), {"reduce": "sum", "axis": 1}),
            Sample((x2, None, off), {"reduce": "amin", "axis": 1}),
            Sample((rand((5, 2), dtype, seed=3), np.array([3, 2], np.int64)),
                   {"reduce": "prod", "initial": 2.0})]
    return out


def _seg_torch(torch, data, lengths=None, offsets=None, *, reduce, **k):
    return torch.segment_reduce(data, reduce, lengths=lengths, offsets=offsets, **k)


composite(segment_reduce, args=("data", "lengths", "offsets"), optional=("lengths", "offsets"),
          by_name=True, infer=_seg_infer, samples=_seg_samples,
          error_samples=lambda: [((rand((6,)), np.array([2, 2])), {"reduce": "sum"},
                                  RuntimeError),
                                 ((rand((6,)), np.array([2, 4])), {"reduce": "foo"},
                                  RuntimeError),
                                 ((rand((6,)),), {"reduce": "sum"}, RuntimeError),
                                 ((rand((2, 6)), np.array([2, 4])), {"reduce": "sum",
                                                                     "axis": 1}, RuntimeError)],
          torch=_seg_torch)
