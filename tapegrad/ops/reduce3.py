"""Scatter and index reductions, running extrema, ``mode`` and ``unique_consecutive``
(issue 17's census, third part).

- ``scatter_reduce(input, dim, index, src, reduce, include_self=True)``: one registry
  op for PyTorch's five reductions ("sum", "prod", "mean", "amax", "amin"). Its
  gradient is PyTorch's (``scatter_reduce_backward``): for every reduction the output
  is, per position, a function of ``input`` there and the ``src`` elements scattered
  there, and both gradients are ``g`` times a weight (``_weights``): 1 (sum), 1/count
  (mean), the tied extrema split evenly (amax/amin), the product of the others (prod,
  with PyTorch's handling of zeros). The weights are computed with ops, so the
  gradient differentiates again (prod's weights depend on the inputs), and the
  forward-mode rule is the same weights applied to the tangents.
- ``index_reduce``: ``scatter_reduce`` with the 1-D index spread over ``source``
  (a composite).
- ``cummax``/``cummin``: ``(values, indices)``, one op each; the values' gradient
  goes back to the index each running extremum came from (as ``sort``'s).
- ``mode`` (a composite: the index found on the raw values, the value gathered) and ``unique_consecutive`` (a NumPy kernel,
  no gradient, as PyTorch's).
"""
from collections import namedtuple

import numpy as np

from .. import devices as _devices
from ..devices.cpu_kernels import scatter as _cpu_scatter
from .._util import normalize_dim, op_error
from ..dispatch import bind
from ._decl import register, Sample, TensorSpec, rand
from . import _vmap
from .indexing import (_cut, _dim3, _overlaps, _same_memory, _grid, _check_int,
                       _check_range, _same_ndim, _index_not_larger, _src_part, _int_sample,
                       _raw, _scatter_back_vjp, take_along_dim)
from .pointwise2 import decl, S
from .shape2 import _index_check, _spread
from . import shape as SH, indexing as I

__all__ = ["scatter_reduce", "index_reduce", "cummax", "cummin", "mode",
           "unique_consecutive"]

REDUCES = ("sum", "prod", "mean", "amax", "amin")
_vi = {n: namedtuple(n, ("values", "indices")) for n in ("cummax", "cummin", "mode")}


# ---------------------------------------------------------------- scatter_reduce
def _check_reduce(name, reduce, allowed=REDUCES):
    if reduce not in allowed:
        raise op_error(name, f"reduce argument must be either {', '.join(allowed[:-1])} or "
                             f"{allowed[-1]}, got {reduce!r}", RuntimeError)


def _sr_infer(x, index, src, dim, reduce, include_self=True):
    name = "scatter_reduce"
    _check_reduce(name, reduce)
    _check_int(name, index)
    d = normalize_dim(name, dim, len(x.shape))
    _same_ndim(name, input=x, index=index, src=src)
    _index_not_larger(name, index, src, -1, "src")
    _index_not_larger(name, index, x, d, "input")
    if np.dtype(src.dtype) != np.dtype(x.dtype):
        raise op_error(name, f"expected self.dtype to be equal to src.dtype, got "
                             f"{np.dtype(x.dtype)} and {np.dtype(src.dtype)}", RuntimeError)
    if np.dtype(x.dtype).kind == "b" and reduce != "amax" and reduce != "amin":
        raise op_error(name, f"reduce={reduce!r} is not implemented for bool tensors",
                       RuntimeError)
    return TensorSpec(tuple(x.shape), x.dtype)


def _identity(reduce, dt):
    dt = np.dtype(dt)
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dt.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if dt.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dt)
    return info.min if reduce == "amax" else info.max


def _sr_into(out, x, index, src, dim, reduce, include_self):
    """The scatter-reduce written into out (out may be x: in place) by one compiled
    loop over (before, dim, after) views; False where it does not apply."""
    if type(out) is not np.ndarray or not x.ndim or _overlaps(out, index, src) or (
            _overlaps(out, x) and not _same_memory(out, x)):
        return False
    views = [_dim3(a, dim) for a in (_cut(out, index.shape, dim), index,
                                     _src_part(src, index))]
    if any(v is None for v in views) or not _cpu_scatter._along_fits(views[0], views[2],
                                                                     views[1]):
        return False
    if not _same_memory(out, x):
        out[...] = x
    return _cpu_scatter.scatter_reduce_dim(*views, reduce, include_self,
                                           _identity(reduce, x.dtype))


def _sr_kernel(x, index, src, dim, reduce, include_self=True, out=None):
    _check_range("scatter_reduce", index, x, dim)
    if out is not None:
        if not _sr_into(out, x, index, src, dim, reduce, include_self):
            out[...] = _sr_kernel(x, index, src, dim, reduce, include_self)
        return out
    if type(x) is np.ndarray and x.ndim:  # the compiled loop (~3x NumPy's ufunc.at)
        out = np.empty_like(x, order="C")
        if _sr_into(out, x, index, src, dim, reduce, include_self):
            return out
    xp = _devices.xp_of(x)
    out = x.copy()
    if x.ndim == 0:  # one position: index is 0-d too
        grid = ()
        s = src
    else:
        grid = _grid(index, dim)
        s = _src_part(src, index)
    if not include_self:
        out[grid] = _identity(reduce, x.dtype)
    how = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum",
           "amin": "minimum"}[reduce]
    _devices.reduce_at(out, grid, s, how)
    if reduce == "mean":
        count = xp.ones(x.shape, dtype=np.int64)
        if not include_self:
            count[grid] = 0
        _devices.add_at(count, grid, xp.ones(index.shape, dtype=np.int64))
        count = xp.maximum(count, 1)  # untouched positions keep input (count 1)
        if out.dtype.kind == "f":
            out = out / count.astype(out.dtype)
        else:  # integer mean: floor division, as PyTorch
            out = (out // count).astype(out.dtype)
    return out


def _gather_at(m, t, index, dim):
    """``t`` at the scatter positions (shaped as index)."""
    if len(t.shape) == 0:
        return t
    return m.gather(t, dim, index)


def _scatter_sum(m, like, index, dim, v):
    """Zeros of ``like``'s shape and dtype with ``v`` (shaped as index) summed in at
    ``index`` along ``dim`` (a 0-d ``like`` takes them all)."""
    zero = m.zeros_like(like)
    if len(zero.shape) == 0:
        return zero + m.sum(v)
    return m.scatter_add(zero, dim, index, v)


def _recording(ctx):
    """Whether this adjoint is itself recorded (a higher-order gradient is wanted)."""
    from ..tensor import Tensor
    return any(isinstance(v, Tensor) for v in ctx.inputs)


def _weights(ctx, x, src):
    """``(w_self, w_src)``: d out / d input at each position, and d out[index] / d src
    at each scattered element (shaped as index), for the op's reduction. Computed with
    ``ctx.m``'s ops only (no host copy of an input), so they run wherever the adjoint
    does (an export's arrays, the GPU) and differentiate again."""
    m = ctx.m
    index = ctx.inputs[1]
    dim, reduce, inc = ctx.attrs["dim"], ctx.attrs["reduce"], ctx.attrs["include_self"]
    out = ctx.out
    src_p = _src_part(src, index) if len(src.shape) else src
    one_s = m.ones_like(src_p)
    one, zero = m.ones_like(out), m.zeros_like(out)
    hits = None  # how many src elements each position takes
    if not inc or reduce == "mean":
        hits = _scatter_sum(m, out, index, dim, one_s)
    # positions a scatter replaced (include_self=False) take nothing from input
    keep = one if inc else m.where(m.gt(hits, 0), zero, one)
    if reduce == "sum":
        return keep, one_s
    if reduce == "mean":
        c = m.clamp_min(hits + 1.0 if inc else hits, 1.0)  # untouched: input, count 1
        return keep / c, _gather_at(m, m.reciprocal(c), index, dim)
    if reduce in ("amax", "amin"):
        # as PyTorch, input's ties are counted even where include_self=False leaves
        # it out (then it takes no share)
        mself = m.where(m.eq(x, out), one, zero)
        msrc = m.where(m.eq(src_p, _gather_at(m, out, index, dim)), one_s, m.zeros_like(src_p))
        tied = m.clamp_min(mself + _scatter_sum(m, out, index, dim, msrc), 1.0)
        return mself * keep / tied, msrc / _gather_at(m, tied, index, dim)
    # prod, as PyTorch: the product of the others, exact where an element is zero
    zero_x = m.eq(x, 0)
    masked_x = m.where(zero_x, 1.0, x)
    w_self = m.scatter_reduce(masked_x, dim, index, src_p, "prod", include_self=inc) / masked_x
    if not inc:
        w_self = w_self * keep
    zero_s = m.eq(src_p, 0)
    nzs = _gather_at(m, _scatter_sum(m, out, index, dim, m.where(zero_s, one_s, 0.0)),
                     index, dim)  # how many zeros of src meet at each one's position
    if _recording(ctx) and bool(m.any(m.gt(nzs, 1))):
        raise RuntimeError("scatter_reduce: double backward is not supported for src when "
                           "more than one zero of src is scattered to the same position "
                           "(reduce='prod'), as in PyTorch")
    single = m.logical_and(zero_s, m.eq(nzs, 1))
    masked_src = m.where(single, 1.0, src_p)
    others = m.scatter_reduce(x, dim, index, masked_src, "prod", include_self=inc)
    w_src = m.where(single, _gather_at(m, others, index, dim),
                    _gather_at(m, out, index, dim) / m.where(zero_s, 1.0, src_p))
    return w_self, w_src


def _pad_src(m, gs, src_shape, index_shape):
    if tuple(src_shape) == tuple(index_shape):
        return gs
    return m.index_add_into(gs, tuple(src_shape), tuple(slice(0, n) for n in index_shape))


def _sr_vjp(ctx, g):
    x, index, src = ctx.inputs
    m = ctx.m
    w_self, w_src = _weights(ctx, x, src)
    gx = g * w_self if ctx.needs_input_grad[0] else None
    gsrc = None
    if ctx.needs_input_grad[2]:
        gsrc = _pad_src(m, _gather_at(m, g, index, ctx.attrs["dim"]) * w_src,
                        ctx.shapes[2], tuple(index.shape))
    return gx, None, gsrc


def _sr_jvp(ctx, tx, ti, tsrc):
    x, index, src = ctx.inputs
    m = ctx.m
    w_self, w_src = _weights(ctx, x, src)
    out = None if tx is None else tx * w_self
    if tsrc is not None:
        ts = _src_part(tsrc, index) if len(tsrc.shape) else tsrc
        part = _scatter_sum(m, ctx.out, index, ctx.attrs["dim"], ts * w_src)
        out = part if out is None else out + part
    return (out,)


def _sr_samples(dtype=np.float64):
    out = []
    base = rand((3, 4), dtype, seed=1)
    src = rand((3, 5), dtype, seed=2)
    idx = _int_sample(4, (3, 5), 3)
    for k, red in enumerate(REDUCES):
        for inc in (True, False):
            out.append(Sample((base, idx, src), {"dim": 1, "reduce": red, "include_self": inc}))
    # dim 0, a src larger than index, ties for amax, zeros for prod, 0-d
    out.append(Sample((rand((3, 4), dtype, seed=4), _int_sample(3, (2, 3), 5),
                       rand((4, 4), dtype, seed=6)), {"dim": 0, "reduce": "mean",
                                                      "include_self": True}))
    tie = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], dtype)
    out.append(Sample((tie, np.array([[0, 0, 2], [1, 1, 1]]),
                       np.array([[1.0, 0.5, 3.0], [0.5, -1.0, 0.5]], dtype)),
                      {"dim": 1, "reduce": "amax", "include_self": True}, False))
    out.append(Sample((tie, np.array([[0, 0, 2], [1, 1, 1]]),
                       np.array([[1.0, 0.5, 3.0], [0.5, -1.0, 0.5]], dtype)),
                      {"dim": 1, "reduce": "amin", "include_self": False}, False))
    zeros = np.array([[0.0, 2.0, 3.0], [1.5, -0.5, 2.0]], dtype)
    out.append(Sample((zeros, np.array([[0, 1, 1, 2], [0, 0, 2, 2]]),
                       np.array([[1.5, 0.0, 2.0, 0.5], [0.0, 0.0, 1.2, 0.0]], dtype)),
                      {"dim": 1, "reduce": "prod", "include_self": True}, False))
    one_zero = np.array([[0.0, 2.0, 3.0], [1.5, -0.5, 2.0]], dtype)
    out.append(Sample((one_zero, np.array([[0, 1, 1, 2], [0, 0, 2, 2]]),
                       np.array([[1.5, 0.0, 2.0, 0.5], [0.0, 1.1, 1.2, 0.0]], dtype)),
                      {"dim": 1, "reduce": "prod", "include_self": False}))
    out.append(Sample((np.array([[1, 5, 2]]), np.array([[0, 0, 2]]), np.array([[4, 3, 7]])),
                      {"dim": 1, "reduce": "mean", "include_self": True}, False))
    out.append(Sample((np.array([[1, 5, 2]]), np.array([[0, 0, 2]]), np.array([[4, 3, 7]])),
                      {"dim": 1, "reduce": "amax", "include_self": False}, False))
    return out


SCATTER_REDUCE = register(
    name="scatter_reduce", kernel=_sr_kernel, infer=_sr_infer, args=("x", "index", "src"),
    saves=("x", "index", "src", "out"), vjp=_sr_vjp, jvp=_sr_jvp,
    vmap=_vmap.all_batched_dim(), samples=_sr_samples,
    error_samples=lambda: [
        ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4))),
         {"dim": 1, "reduce": "max", "include_self": True}, RuntimeError),
        ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4), np.float32)),
         {"dim": 1, "reduce": "sum", "include_self": True}, RuntimeError),
        ((rand((3, 4)), np.full((3, 4), 4), rand((3, 4))),
         {"dim": 1, "reduce": "amax", "include_self": True}, IndexError),
        ((rand((3, 4)), _int_sample(3, (3, 4), 0), rand((3, 4))),
         {"dim": 2, "reduce": "sum", "include_self": True}, IndexError),
        ((rand((3, 4)), _int_sample(3, (3, 4), 0).astype(np.float64), rand((3, 4))),
         {"dim": 1, "reduce": "sum", "include_self": True}, RuntimeError)],
    torch=lambda torch, x, index, src, dim, reduce, include_self=True: torch.scatter_reduce(
        x, dim, index, src[tuple(slice(0, n) for n in index.shape)], reduce,
        include_self=include_self))


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """A copy of ``input`` with the ``src`` values at ``index`` along ``dim`` reduced
    into it: ``reduce`` is "sum", "prod", "mean", "amax" or "amin"; with
    ``include_self=False`` input's values at the scattered positions are left out of
    the reduction. Differentiable in input and src (PyTorch's gradients: ties of
    amax/amin share it evenly)."""
    _check_reduce("scatter_reduce", reduce)
    d = normalize_dim("scatter_reduce", dim, len(input.shape))
    return bind(SCATTER_REDUCE, input, index, src, dim=d, reduce=reduce,
                include_self=bool(include_self))


# ---------------------------------------------------------------- index_reduce
_IR = ("prod", "mean", "amax", "amin")


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """``input`` with the slices of ``source`` reduced into it at ``index`` along
    ``dim``: ``reduce`` is "prod", "mean", "amax" or "amin" (``scatter_reduce`` with
    the index spread over ``source``)."""
    _check_reduce("index_reduce", reduce, _IR)
    d = normalize_dim("index_reduce", dim, max(input.ndim, 1))
    _index_check("index_reduce", input, d, index, source)
    if _raw(index).size and int(_raw(index).min()) < 0:  # no wrapping, as PyTorch
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
     errors=lambda: [((rand((3, 4)), 1, np.array([0, 1]), rand((3, 2))), {"reduce": "sum"}, RuntimeError),
                     ((rand((3, 4)), 1, np.array([0, 1]), rand((3, 3))), {"reduce": "mean"},
                      RuntimeError),
                     ((rand((3, 4)), 1, np.array([0, 9]), rand((3, 2))), {"reduce": "mean"},
                      IndexError),
                     ((rand((3, 4)), 1, np.array([0, -1]), rand((3, 2))), {"reduce": "mean"},
                      IndexError)])


# ---------------------------------------------------------------- cummax / cummin
def _cum_infer(name):
    def infer(x, dim):
        normalize_dim(name, dim, len(x.shape))
        if np.dtype(x.dtype).kind == "c":
            raise op_error(name, "not implemented for complex tensors", RuntimeError)
        return TensorSpec(tuple(x.shape), x.dtype), TensorSpec(tuple(x.shape), np.dtype(np.int64))
    return infer


def _cum_kernel(name):
    acc = np.maximum if name == "cummax" else np.minimum

    def kernel(x, dim, out=None):
        xp = _devices.xp_of(x)
        dim = dim % max(x.ndim, 1)
        if out is not None and (x.ndim == 0 or x.shape[dim] == 0):
            out[0][...] = x
            out[1][...] = 0
            return out
        if x.ndim == 0:
            return x.copy(), xp.zeros((), np.int64)
        if x.shape[dim] == 0:
            return x.copy(), xp.zeros(x.shape, np.int64)
        if out is not None and xp.may_share_memory(out[0], x):
            x = x.copy()  # (the values out is the input: the index pass reads x after)
        vals = getattr(xp, acc.__name__).accumulate(
            x, axis=dim, **({} if out is None else {"out": out[0]}))
        pos = xp.arange(x.shape[dim]).reshape([-1 if k == dim else 1 for k in range(x.ndim)])
        # the running extremum's index is the last position holding it (ties: the
        # later index, as PyTorch); once a NaN is met the value stays NaN and each
        # later NaN takes the index (PyTorch's rule)
        hold = x == vals
        if x.dtype.kind == "f":
            hold |= xp.isnan(x)
        if out is None:
            idx = xp.maximum.accumulate(xp.where(hold, pos, -1), axis=dim)
            return vals, idx.astype(np.int64)
        # in the caller's index buffer: the position where held, else -1, then the
        # running maximum of that along dim, in place (boolean masks only beside it)
        idx = out[1]
        idx[...] = pos
        xp.logical_not(hold, out=hold)
        xp.copyto(idx, -1, where=hold)
        xp.maximum.accumulate(idx, axis=dim, out=idx)
        return vals, idx
    kernel.__name__ = name
    return kernel


def _cum_jvp(ctx, t):
    if len(t.shape) == 0:  # one element: the value is the input
        return (t * 1, None)
    return (take_along_dim(t, ctx.out[1], dim=ctx.attrs["dim"]), None)


def _cum_samples(dtype=np.float64):
    return [Sample((rand((3, 5), dtype, seed=1),), {"dim": 1}),
            Sample((rand((4, 3), dtype, seed=2),), {"dim": 0}),
            Sample((rand((2, 3, 4), dtype, seed=3),), {"dim": 2}),
            Sample((rand((), dtype, seed=4),), {"dim": 0}),
            Sample((np.array([1.0, 3.0, 3.0, 2.0, np.nan, 5.0, np.nan], dtype),), {"dim": 0},
                   False),
            Sample((np.array([[2, 1, 2, 0, 5]]),), {"dim": 1}, False)]


def _cum_op(name):
    return register(
        name=name, kernel=_cum_kernel(name), infer=_cum_infer(name), args=("x",), nout=2,
        saves=("out",), vjp=_scatter_back_vjp, jvp=_cum_jvp, vmap=_vmap.dim_attrs(),
        samples=_cum_samples,
        error_samples=lambda: [((rand((3, 4)),), {"dim": 2}, IndexError)],
        torch=lambda torch, x, dim: getattr(torch, name)(x, dim))


CUMMAX, CUMMIN = _cum_op("cummax"), _cum_op("cummin")


def cummax(input, dim):
    """``(values, indices)``: the running maximum along ``dim`` and where it was
    (ties: the later index); differentiable in the values."""
    d = normalize_dim("cummax", dim, len(input.shape))
    return _vi["cummax"](*bind(CUMMAX, input, dim=d))


def cummin(input, dim):
    """``(values, indices)``: the running minimum along ``dim`` and where it was."""
    d = normalize_dim("cummin", dim, len(input.shape))
    return _vi["cummin"](*bind(CUMMIN, input, dim=d))


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
    if s.dtype.kind == "f":  # NaNs (sorted last) count as one value (PyTorch's answer
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
        return _vi["mode"](input * 1, idx)
    vals = I.gather(input, d, idx)
    if not keepdim:
        vals, idx = SH.squeeze(vals, d), SH.squeeze(idx, d)
    return _vi["mode"](vals, idx)


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
    # PyTorch's in tests/ops/test_scatter_reduce_cummax.py)
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
