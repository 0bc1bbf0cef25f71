"""Out-of-place updates of a tensor at indices, composites of the indexing ops, so each
differentiates at every order, in forward mode and under vmap: ``index_add``,
``index_copy``, ``index_fill``, ``select_scatter``, ``slice_scatter``,
``diagonal_scatter``, ``index_reduce`` (``scatter_reduce`` with the 1-D index spread
over ``source``) and ``segment_reduce``.

``segment_reduce(data, reduce, *, lengths=None, offsets=None, axis=0, unsafe=False,
initial=None)`` counts each position's segment from the cumulative lengths, then
reduces with ``scatter_reduce``. Ties of max/min share the gradient evenly; PyTorch's
kernel divides a tie's gradient only where it is positive (``grad > 0``), a quirk not
copied."""
import numpy as np

from .. import dtypes as _dt
from .._util import normalize_dim, op_error
from ..tape import state as _state
from ..tensor import Tensor, wrap as _wrap
from . import creation as C, elementwise as E, indexing as I, reduce as R, shape as SH
from ._checks import any_value
from ._decl import S, Sample, TensorSpec, composite, decl, rand
from .histograms import _np_dt
from .indexing import _check_reduce, scatter_reduce
from .joining import _index_array

__all__ = ["index_reduce", "segment_reduce", "select_scatter", "slice_scatter", "diagonal_scatter",
           "index_add", "index_copy", "index_fill"]


# ---------------------------------------------------------------- index_reduce
_IR = ("prod", "mean", "amax", "amin")


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """``input`` with the slices of ``source`` reduced into it at ``index`` along
    ``dim``: ``reduce`` is "prod", "mean", "amax" or "amin" (``scatter_reduce`` with
    the index spread over ``source``)."""
    _check_reduce("index_reduce", reduce, _IR)
    d = normalize_dim("index_reduce", dim, max(input.ndim, 1))
    _index_check("index_reduce", input, d, index, source)
    if any_value(index, lambda i: i < 0):  # no wrapping, as PyTorch
        raise op_error("index_reduce", "index out of range in self", IndexError)
    if input.ndim == 0:
        return scatter_reduce(input, 0, SH.reshape(index, ()), SH.reshape(source, ()), reduce,
                              include_self=include_self)
    idx = _spread(index, tuple(source.shape), d)
    return scatter_reduce(input, d, idx, source, reduce, include_self=include_self)


def _ir_samples(dtype=np.float64):
    x = rand((3, 4), dtype, seed=1)
    s = rand((3, 5), dtype, seed=2)
    idx = np.array([0, 2, 2, 1, 3])
    out = [S(x, 1, idx, s, reduce=red, include_self=inc) for red in _IR for inc in (True, False)]
    out.append(S(rand((3, 4), dtype, seed=5), 0, np.array([2, 0]), rand((2, 4), dtype, seed=3),
                 reduce="mean"))
    return out


decl(index_reduce, _ir_samples, args=("input", "dim", "index", "source"),
     errors=lambda: [((rand((3, 4)), 1, np.array([0, 1]), rand((3, 2))), {"reduce": "sum"},
                      RuntimeError),
                     ((rand((3, 4)), 1, np.array([0, 1]), rand((3, 3))), {"reduce": "mean"},
                      RuntimeError),
                     ((rand((3, 4)), 1, np.array([0, 9]), rand((3, 2))), {"reduce": "mean"},
                      IndexError),
                     ((rand((3, 4)), 1, np.array([0, -1]), rand((3, 2))), {"reduce": "mean"},
                      IndexError)])


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
    from . import creation as C, elementwise as E, indexing as IX, reduce as R, shape as SH
    if reduce not in _SEG_REDUCE:
        _seg_fail(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                  f"{reduce}")
    red = _SEG_REDUCE[reduce]
    if indices is not None:
        _seg_fail("indices based reduction is not supported yet.")
    if lengths is None and offsets is None:
        _seg_fail("Either lengths or offsets must be defined.")
    dt = _np_dt(data)
    if not _dt.is_float(dt):
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
        if any_value(lengths, lambda v: v < 0):
            _seg_fail("lengths contains negative value!")
        if S and any_value(lengths, lambda v: v.sum(-1) != N, by_position=True):
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
        r = scatter_reduce(base, axis, index, data, red, include_self=False)
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


def _alloc(name, input):
    from .. import devices
    devices.check_alloc(name, tuple(input.shape), input.dtype.np)


def _cast_to(src, input):
    return src.to(input.dtype) if src.dtype != input.dtype else src


def _xp_of(array):
    from .. import devices
    return devices.xp_of(array)


def _c_strides(shape):
    st = [1] * len(shape)
    for j in range(len(shape) - 2, -1, -1):
        st[j] = st[j + 1] * shape[j + 1]
    return st


def _scatter_flat(input, src, pos):
    """``input`` with ``src`` written at the C-order flat positions ``pos`` (an int
    array of ``src``'s shape, no position twice): one scatter into the flattened
    input, so it differentiates in both (scatter's adjoints) and batches under vmap;
    3-5x faster than a mask and a gather over the whole input (``_embed``)."""
    from .. import devices
    idx = np.ascontiguousarray(pos, dtype=np.int64).reshape(-1)
    xp = devices.xp_of(_index_array(input))
    if xp is not np:
        idx = xp.asarray(idx)
    # a Tensor index: vmap broadcasts it over the batch with the other inputs
    out = I.scatter(SH.reshape(input, (-1,)), 0, _wrap(idx),
                    SH.reshape(_cast_to(src, input), (-1,)))
    return SH.reshape(out, tuple(input.shape))


def _along(shape, d, pos):
    """Flat positions of ``x[(:,) * d + (pos,)]`` for ``x`` of ``shape``."""
    from .. import devices
    return devices.flat_positions(shape, (slice(None),) * d + (np.asarray(pos, dtype=np.int64),))


def select_scatter(input, src, dim, index):
    """``input`` with ``src`` embedded at ``index`` along ``dim``."""
    _alloc("select_scatter", input)
    d = normalize_dim("select_scatter", dim, input.ndim)
    n = input.shape[d]
    if not -n <= index < n:
        raise op_error("select_scatter", f"index {index} out of range for dimension {d} of "
                                         f"size {n}", IndexError)
    want = tuple(input.shape[:d]) + tuple(input.shape[d + 1:])
    if tuple(src.shape) != want:
        raise op_error("select_scatter", f"expected src to have a size equal to the slice of "
                                         f"self. src size = {list(src.shape)}, slice size = "
                                         f"{list(want)}", RuntimeError)
    return _scatter_flat(input, src, _along(tuple(input.shape), d, index % n))


decl(select_scatter,
     lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((3,), dtype, seed=1), 1, 0),
                                               S(rand((2, 3, 4), dtype),
                                                 rand((2, 4), dtype, seed=2), 1, -1)],
     args=("input", "src"), errors=lambda: [((rand((3, 4)), rand((4,)), 1, 0), {}, RuntimeError)])


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """``input`` with ``src`` embedded at ``start:end:step`` along ``dim``."""
    _alloc("slice_scatter", input)
    d = normalize_dim("slice_scatter", dim, input.ndim)
    pos = list(range(input.shape[d]))[slice(start, end, step)]
    want = tuple(input.shape[:d]) + (len(pos),) + tuple(input.shape[d + 1:])
    if tuple(src.shape) != want:
        raise op_error("slice_scatter", f"expected src to have a size equal to the slice of "
                                        f"self. src size = {list(src.shape)}, slice size = "
                                        f"{list(want)}", RuntimeError)
    if not pos:
        return input * 1
    return _scatter_flat(input, src, _along(tuple(input.shape), d, pos))


decl(slice_scatter, lambda dtype=np.float64: [
        S(rand((3, 4), dtype), rand((3, 2), dtype, seed=1), 1, 0, 2),
        S(rand((6, 2), dtype), rand((3, 2), dtype, seed=2), 0, step=2)],
     args=("input", "src"),
     errors=lambda: [((rand((3, 4)), rand((3, 3)), 1, 0, 2), {}, RuntimeError)])


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """``input`` with ``src`` on its ``offset`` diagonal (of ``dim1``, ``dim2``)."""
    _alloc("diagonal_scatter", input)
    d1 = normalize_dim("diagonal_scatter", dim1, input.ndim)
    d2 = normalize_dim("diagonal_scatter", dim2, input.ndim)
    n1, n2 = input.shape[d1], input.shape[d2]
    if offset >= 0:
        k = max(0, min(n1, n2 - offset))
        r, c = np.arange(k), np.arange(k) + offset
    else:
        k = max(0, min(n1 + offset, n2))
        r, c = np.arange(k) - offset, np.arange(k)
    want = tuple(s for j, s in enumerate(input.shape) if j not in (d1, d2)) + (k,)
    if tuple(src.shape) != want:
        raise op_error("diagonal_scatter", f"expected src to have a size equal to the "
                                           f"diagonal of self. src size = {list(src.shape)}, "
                                           f"diagonal size = {list(want)}", RuntimeError)
    # flat positions of the diagonal in input's C order, in src's order (the other
    # dims in order, then the diagonal)
    shape = tuple(input.shape)
    st = _c_strides(shape)
    others = [j for j in range(input.ndim) if j not in (d1, d2)]
    pos = r * st[d1] + c * st[d2]
    for m, j in enumerate(others):
        pos = pos + (np.arange(shape[j]) * st[j]).reshape(
            (1,) * m + (shape[j],) + (1,) * (len(others) - m))
    return _scatter_flat(input, src, pos)


decl(diagonal_scatter, lambda dtype=np.float64: [S(rand((4, 4), dtype), rand((4,), dtype, seed=1)),
                                                 S(rand((3, 5), dtype), rand((3,), dtype, seed=2),
                                                   1),
                                                 S(rand((2, 3, 3), dtype),
                                                   rand((2, 2), dtype, seed=3), -1, 1, 2)],
     args=("input", "src"), errors=lambda: [((rand((3, 3)), rand((2,))), {}, RuntimeError)])


def _index_check(name, input, d, index, source=None):
    if source is not None:
        if source.dtype != input.dtype:
            raise op_error(name, f"{name}_(): self ({input.dtype}) and source ({source.dtype}) "
                                 f"must have the same scalar type", RuntimeError)
    ix = _index_array(index)
    if ix.ndim > 1:
        raise op_error(name, "Index is supposed to be a vector", IndexError)
    n = input.shape[d] if input.ndim else 1
    if ix.size and (ix.max() >= n or ix.min() < -n):
        raise op_error(name, "index out of range in self", IndexError)
    if source is not None:
        want = list(input.shape)
        if input.ndim:
            want[d] = ix.size
        if source.ndim and list(source.shape) != want:
            raise op_error(name, f"source of shape {list(source.shape)} does not match the "
                                 f"indexed shape {want}", RuntimeError)


def _spread(index, shape, d):
    """``index`` (1-D) along ``d`` of an index tensor of ``shape`` (negatives wrapped)."""
    ix = index if isinstance(index, Tensor) else C.tensor(np.asarray(index, dtype=np.int64))
    n_d = shape[d]
    view = [1] * len(shape)
    view[d] = n_d
    return SH.broadcast_to(SH.reshape(ix, tuple(view)), tuple(shape))


def _spread_plain(index, shape, d, n):
    """``_spread`` with the negatives wrapped to ``n``, built on the raw array (a
    broadcast view, no op dispatched), or None for an index vmap batches (a
    Tensor subclass) or where an observer watches: the ops path then runs."""
    if isinstance(index, Tensor) and type(index) is not Tensor or _state.observers:
        return None  # (an observed call, tg.compile's capture: the ops path, which it sees)
    ix = _index_array(index).reshape(-1)
    xp = _xp_of(ix)
    if ix.size and int(ix.min()) < 0:
        ix = xp.where(ix < 0, ix + n, ix)
    view = [1] * len(shape)
    view[d] = shape[d]
    return _wrap(xp.broadcast_to(ix.reshape(view), tuple(shape)))


def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` added at ``index`` along ``dim`` (repeated
    indices accumulate)."""
    d = normalize_dim("index_add", dim, max(input.ndim, 1))
    _index_check("index_add", input, d, index, source)
    src = _cast_to(source if alpha == 1 else source * alpha, input)
    if input.ndim == 0:
        return input + R.sum(src)
    n = input.shape[d]
    idx = _spread_plain(index, tuple(src.shape), d, n)
    if idx is None:
        idx = E.remainder(_spread(index, tuple(src.shape), d), n)
    return I.scatter_add(input, d, idx, src)


def index_copy(input, dim, index, source):
    """``input`` with ``source``'s slices copied at ``index`` along ``dim``."""
    d = normalize_dim("index_copy", dim, max(input.ndim, 1))
    _index_check("index_copy", input, d, index, source)
    if input.ndim == 0:
        return source * 1
    n = input.shape[d]
    idx = _spread_plain(index, tuple(source.shape), d, n)
    if idx is None:
        idx = E.remainder(_spread(index, tuple(source.shape), d), n)
    return I.scatter(input, d, idx, _cast_to(source, input))


def index_fill(input, dim, index, value):
    """``input`` with ``value`` at ``index`` along ``dim``."""
    d = normalize_dim("index_fill", dim, max(input.ndim, 1))
    _index_check("index_fill", input, d, index)
    if input.ndim == 0:
        return input * 0 + value
    k = _index_array(index).size
    shape = tuple(input.shape[:d]) + (k,) + tuple(input.shape[d + 1:])
    idx = _spread_plain(index, shape, d, input.shape[d])
    if idx is None:
        idx = E.remainder(_spread(index, shape, d), input.shape[d])
    if isinstance(value, Tensor):
        return I.scatter(input, d, idx, SH.broadcast_to(_cast_to(value, input), shape))
    return I.scatter(input, d, idx, value=value)


def _idx_samples(dtype=np.float64):
    return [S(rand((4, 3), dtype), 0, np.array([0, 2, 0]), rand((3, 3), dtype, seed=1)),
            S(rand((3, 5), dtype), 1, np.array([4, 1]), rand((3, 2), dtype, seed=2))]


decl(index_add, _idx_samples, args=("input", "dim", "index", "source"),
     errors=lambda: [((rand((4, 3)), 0, np.array([7]), rand((1, 3))), {}, IndexError)])


decl(index_copy, lambda dtype=np.float64: [
        S(rand((4, 3), dtype), 0, np.array([3, 1]), rand((2, 3), dtype, seed=1)),
        S(rand((3, 5), dtype), 1, np.array([4, 0]), rand((3, 2), dtype, seed=2))],
     autocast={"cpu": "promote"}, args=("input", "dim", "index", "source"),
     errors=lambda: [((rand((4, 3)), 0, np.array([7]), rand((1, 3))), {}, IndexError)])


decl(index_fill, lambda dtype=np.float64: [S(rand((4, 3), dtype), 0, np.array([3, 1]), -1.5),
                                           S(rand((3, 5), dtype), 1, np.array([4]), 2.0)],
     args=("input", "dim", "index"),
     errors=lambda: [((rand((4, 3)), 0, np.array([7]), 1.0), {}, IndexError)])

