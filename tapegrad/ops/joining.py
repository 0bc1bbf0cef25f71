"""Splitting, joining and rearranging tensors, composites of the shape and indexing ops:
``dsplit``/``hsplit``/``vsplit``, ``column_stack``/``dstack``/``row_stack``,
``atleast_1d/2d/3d``, ``block_diag``, ``broadcast_tensors``, ``meshgrid``,
``cartesian_prod``, ``combinations``, ``kron``, ``rot90``, ``take``, ``ravel``,
``unravel_index``, ``select``, ``narrow``/``narrow_copy``, ``t``, ``diagflat``,
``vander``."""
import itertools

import numpy as np

from .. import dtypes as _dt
from .._util import normalize_dim, op_error
from ..tape import name_call
from ..tensor import Tensor
from . import creation as C, elementwise as E, indexing as I, shape as SH
from ._checks import any_value, host
from ._decl import S, Sample, TensorSpec, composite, decl, rand

__all__ = ["dsplit", "hsplit", "vsplit", "column_stack", "dstack", "row_stack", "narrow_copy",
           "select", "take", "atleast_1d", "atleast_2d", "atleast_3d", "block_diag",
           "broadcast_tensors", "cartesian_prod", "combinations", "diagflat", "kron", "rot90",
           "meshgrid", "ravel", "vander", "unravel_index", "t", "narrow"]


def _same_dtype(name, *ts):
    ds = [t.dtype for t in ts if hasattr(t, "dtype")]
    if any(d != ds[0] for d in ds):
        raise op_error(name, f"expected all tensors to have the same dtype, got "
                             f"{', '.join(str(d) for d in ds)}", RuntimeError)


def _index_array(t):
    """An index tensor's array (indices are data the op reads, as getitem's)."""
    return t._data if isinstance(t, Tensor) else np.asarray(t)


def _split_dim(name, input, indices_or_sections, dim, need):
    if isinstance(indices_or_sections, int) and indices_or_sections <= 0:
        raise op_error(name, f"number of sections must be larger than 0, got "
                             f"{indices_or_sections}", RuntimeError)
    if input.ndim < need:
        raise op_error(name, f"{name} requires a tensor with at least {need} dimensions, but "
                             f"got a tensor with {input.ndim} dimensions!", RuntimeError)
    if isinstance(indices_or_sections, int) and input.shape[dim] % indices_or_sections:
        raise op_error(name, f"{name} attempted to split along dimension {dim}, but the size "
                             f"of the dimension {input.shape[dim]} is not divisible by the "
                             f"split_size {indices_or_sections}!", RuntimeError)
    return I.tensor_split(input, indices_or_sections, dim)


def dsplit(input, indices_or_sections):
    """``tensor_split`` along dim 2 (equal parts only for an int)."""
    return _split_dim("dsplit", input, indices_or_sections, 2, 3)


def hsplit(input, indices_or_sections):
    """``tensor_split`` along dim 1 (dim 0 for a 1-D tensor)."""
    return _split_dim("hsplit", input, indices_or_sections, 1 if input.ndim > 1 else 0, 1)


def vsplit(input, indices_or_sections):
    """``tensor_split`` along dim 0."""
    return _split_dim("vsplit", input, indices_or_sections, 0, 2)


for _f, _shape in ((dsplit, (2, 3, 4)), (hsplit, (3, 4)), (vsplit, (4, 3))):
    decl(_f, (lambda sh: lambda dtype=np.float64: [
            S(rand(sh, dtype), 2),
            S(rand(sh, dtype, seed=1), indices_or_sections=[1, 3])])(_shape),
         nout=2, errors=(lambda sh: lambda: [((rand(sh[:1]), 2), {}, RuntimeError)])(_shape),
         torch=(lambda n: lambda T, x, indices_or_sections: getattr(T, n)(
             x, indices_or_sections))(_f.__name__))


def _as2d_cols(t):
    return SH.reshape(t, (-1, 1)) if t.ndim <= 1 else t


def column_stack(tensors):
    """1-D (and 0-D) tensors as columns, then ``hstack``."""
    return SH.cat([_as2d_cols(t) for t in tensors], 1)


def dstack(tensors):
    """``cat`` along dim 2 after ``atleast_3d``."""
    return SH.cat([atleast_3d(t) for t in tensors], 2)


def row_stack(tensors):
    """Alias of ``vstack``."""
    return SH.vstack(tensors)


def _seq_samples(shapes):
    def samples(dtype=np.float64):
        return [Sample(tuple(rand(s, dtype, seed=k) for k, s in enumerate(group)), {})
                for group in shapes]
    return samples


for _f, _groups in ((column_stack, [[(3,), (3, 2)], [(4,), (4,)]]),
                    (dstack, [[(3, 4), (3, 4)], [(2,), (2,)]]),
                    (row_stack, [[(4,), (2, 4)], [(3, 2), (1, 2)]])):
    decl(_f, _seq_samples(_groups), args=("tensors",), sequence=True,
         torch=(lambda n: lambda T, *ts: getattr(T, n)(list(ts)))(_f.__name__),
         errors=lambda: [(("not a tensor",), {}, TypeError)])


def narrow_copy(input, dim, start, length):
    """``narrow``, copied."""
    return narrow(input, dim, start, length).clone()


decl(narrow_copy, lambda dtype=np.float64: [S(rand((4, 6), dtype), 1, 2, 3),
                                            S(rand((5, 2), dtype), 0, -3, 2)])


def select(input, dim, index):
    """``input`` at ``index`` along ``dim`` (that dim removed): a view."""
    d = normalize_dim("select", dim, input.ndim)
    n = input.shape[d]
    if not -n <= index < n:
        raise op_error("select", f"select(): index {index} out of range for tensor of size "
                                 f"{tuple(input.shape)} at dimension {d}", IndexError)
    return I.getitem(input, (slice(None),) * d + (int(index),))


decl(select, lambda dtype=np.float64: [S(rand((3, 4), dtype), 1, 2),
                                       S(rand((2, 3, 4), dtype), 0, -1)],
     errors=lambda: [((rand((3, 4)), 1, 7), {}, IndexError)])


def take(input, index):
    """``input`` read as 1-D at ``index`` (the result has ``index``'s shape)."""
    flat = SH.reshape(input, (-1,))
    n = flat.shape[0]
    if any_value(index, lambda i: (i >= n) | (i < -n)):
        ix = host(index).reshape(-1)
        bad = ix[(ix >= n) | (ix < -n)]
        raise op_error("take", f"out of range: tried to access index {int(bad[0])} on a "
                               f"tensor of {n} elements.", IndexError)
    ix = E.remainder(SH.reshape(index, (-1,)), max(n, 1))
    return SH.reshape(I.gather(flat, 0, ix), tuple(index.shape))


decl(take, lambda dtype=np.float64: [S(rand((3, 4), dtype), np.array([[0, 5], [11, -1]])),
                                     S(rand((5,), dtype), np.array([2, 2, 0]))],
     args=("input", "index"), errors=lambda: [((rand((3, 4)), np.array([12])), {}, IndexError)])


def atleast_1d(*tensors):
    """Each tensor with at least 1 dim (one tensor: itself; several: a tuple)."""
    return _atleast(tensors, 1)


def atleast_2d(*tensors):
    """Each tensor with at least 2 dims (new leading dims)."""
    return _atleast(tensors, 2)


def atleast_3d(*tensors):
    """Each tensor with at least 3 dims (PyTorch's placement: (1, n, 1) for 1-D)."""
    return _atleast(tensors, 3)


def _atleast(tensors, k):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(_atleast(tuple(tensors[0]), k))
    out = []
    for t in tensors:
        n = t.ndim
        if n >= k:
            out.append(t)
        elif k == 3 and n == 2:
            out.append(SH.unsqueeze(t, -1))
        elif k == 3 and n == 1:
            out.append(SH.reshape(t, (1, t.shape[0], 1)))
        else:
            out.append(SH.reshape(t, (1,) * (k - n) + tuple(t.shape)))
    return out[0] if len(out) == 1 else tuple(out)


for _f, _k in ((atleast_1d, 1), (atleast_2d, 2), (atleast_3d, 3)):
    decl(_f, lambda dtype=np.float64: [S(rand((), dtype)), S(rand((4,), dtype)),
                                       S(rand((2, 3), dtype))],
         args=("tensors",))


def block_diag(*tensors):
    """The tensors (0-, 1- or 2-D) on the diagonal of one matrix, zeros elsewhere."""
    mats = []
    for t in tensors:
        if t.ndim > 2:
            raise op_error("block_diag", f"Input tensors must have 2 or fewer dimensions. "
                                         f"Input has {t.ndim} dimensions", RuntimeError)
        mats.append(SH.reshape(t, (1, -1)) if t.ndim < 2 else t)
    if not mats:
        return C.zeros((0, 0))
    dt = _dt.from_np(np.result_type(*[m.dtype.np for m in mats]))
    total = sum(m.shape[1] for m in mats)
    rows, left = [], 0
    for m in mats:
        w = m.shape[1]
        rows.append(SH.pad(m.to(dt), (left, total - left - w)))
        left += w
    return SH.cat(rows, 0)


decl(block_diag, lambda dtype=np.float64: [S(rand((2, 3), dtype), rand((3,), dtype, seed=1),
                                             rand((), dtype, seed=2)),
                                           S(rand((2, 2), dtype, seed=3))],
     args=("tensors",), errors=lambda: [((rand((2, 2, 2)),), {}, RuntimeError)])


def broadcast_tensors(*tensors):
    """The tensors broadcast to one shape (views)."""
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in tensors]) if tensors else ()
    return tuple(SH.broadcast_to(t, shape) for t in tensors)


decl(broadcast_tensors, lambda dtype=np.float64: [S(rand((3, 1), dtype), rand((4,), dtype, seed=1)),
                                                  S(rand((2, 3), dtype),
                                                    rand((2, 3), dtype, seed=2))],
     args=("tensors",), nout=2,
     errors=lambda: [((rand((3,)), rand((4,))), {}, ValueError)])


def meshgrid(*tensors, indexing=None):
    """Coordinate grids of 1-D tensors (``indexing='ij'`` by default, or ``'xy'``)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    indexing = indexing or "ij"
    if indexing not in ("ij", "xy"):
        raise op_error("meshgrid", f"indexing must be one of 'xy' or 'ij', got {indexing!r}",
                       ValueError)
    for t in tensors:
        if t.ndim > 1:
            raise op_error("meshgrid", "Expected 0D or 1D tensor in the tensor list but got "
                                       f"a {t.ndim}-D tensor", RuntimeError)
    _same_dtype("meshgrid", *tensors)
    ts = [SH.reshape(t, (-1,)) for t in tensors]
    if indexing == "xy" and len(ts) >= 2:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    out = []
    for k, t in enumerate(ts):
        view = [1] * len(ts)
        view[k] = shape[k]
        out.append(SH.broadcast_to(SH.reshape(t, tuple(view)), shape))
    if indexing == "xy" and len(ts) >= 2:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


decl(meshgrid,
     lambda dtype=np.float64: [S(rand((3,), dtype), rand((4,), dtype, seed=1), indexing="ij"),
                                         S(rand((2,), dtype), rand((3,), dtype, seed=2),
                                           indexing="xy")],
     args=("tensors",), nout=2)


def cartesian_prod(*tensors):
    """The Cartesian product of 1-D tensors, one row per combination."""
    _same_dtype("cartesian_prod", *tensors)
    for t in tensors:
        if t.ndim != 1:
            raise op_error("cartesian_prod", "Expect a 1D vector, but got shape "
                                             f"{list(t.shape)}", RuntimeError)
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return SH.stack([SH.reshape(g, (-1,)) for g in grids], 1)


decl(cartesian_prod, lambda dtype=np.float64: [S(rand((3,), dtype), rand((2,), dtype, seed=1)),
                                               S(rand((2,), dtype), rand((2,), dtype, seed=2),
                                                 rand((3,), dtype, seed=3))],
     args=("tensors",))


def combinations(input, r=2, with_replacement=False):
    """The length-``r`` combinations of a 1-D tensor's elements, one row each."""
    if input.ndim != 1:
        raise op_error("combinations", f"Expect a 1D vector, but got shape "
                                       f"{list(input.shape)}", RuntimeError)
    n = input.shape[0]
    if r == 2:  # the common case, without a Python tuple per pair
        i, j = np.triu_indices(n, k=0 if with_replacement else 1)
        idx = np.stack([i, j], 1).astype(np.int64)
    else:
        it = (itertools.combinations_with_replacement if with_replacement
              else itertools.combinations)(range(n), r)
        idx = np.array(list(it), dtype=np.int64).reshape(-1, r)
    if idx.shape[0] == 0:
        return SH.reshape(input[:0], (0,)) if r else input[:0]
    return I.getitem(input, (idx,))


decl(combinations, lambda dtype=np.float64: [S(rand((4,), dtype)), S(rand((3,), dtype), 3),
                                             S(rand((3,), dtype), 2, True)])


def diagflat(input, offset=0):
    """``input`` flattened onto the ``offset`` diagonal of a square matrix."""
    return SH.diag_embed(SH.reshape(input, (-1,)), offset)


decl(diagflat, lambda dtype=np.float64: [S(rand((2, 2), dtype)), S(rand((3,), dtype), -1)])


def kron(input, other):
    """The Kronecker product."""
    n = max(input.ndim, other.ndim)
    a = SH.reshape(input, (1,) * (n - input.ndim) + tuple(input.shape))
    b = SH.reshape(other, (1,) * (n - other.ndim) + tuple(other.shape))
    ai, bi = [], []
    for k in range(n):
        ai += [a.shape[k], 1]
        bi += [1, b.shape[k]]
    out = SH.reshape(a, tuple(ai)) * SH.reshape(b, tuple(bi))
    return SH.reshape(out, tuple(a.shape[k] * b.shape[k] for k in range(n)))


decl(kron, lambda dtype=np.float64: [S(rand((2, 3), dtype), rand((3, 2), dtype, seed=1)),
                                     S(rand((3,), dtype), rand((2, 2), dtype, seed=2))],
     args=("input", "other"), errors=lambda: [(("x", rand((2,))), {}, TypeError)])


def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``."""
    if len(dims) != 2:
        raise op_error("rot90", f"expected total rotation dims == 2, but got dims = "
                                f"{len(dims)}", RuntimeError)
    if input.ndim < 2:
        raise op_error("rot90", f"expected total dims >= 2, but got total dims = "
                                f"{input.ndim}", RuntimeError)
    d0, d1 = (normalize_dim("rot90", d, input.ndim) for d in dims)
    if d0 == d1:
        raise op_error("rot90", f"expected rotation dims to be different, but got dim0 = "
                                f"{d0} and dim1 = {d1}", RuntimeError)
    k %= 4
    if k == 1:
        return SH.transpose(SH.flip(input, (d1,)), d0, d1)
    if k == 2:
        return SH.flip(input, (d0, d1))
    if k == 3:
        return SH.flip(SH.transpose(input, d0, d1), (d1,))
    return input * 1


decl(rot90,
     lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((2, 3, 4), dtype), 3, dims=(1, 2)),
                                      S(rand((3, 4), dtype), -2)],
     errors=lambda: [((rand((3,)),), {}, RuntimeError)])


def ravel(input):
    """``input`` flattened to 1-D."""
    return SH.reshape(input, (-1,))


decl(ravel, lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((), dtype))])


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D tensor (``N`` columns of powers)."""
    if x.ndim != 1:
        raise op_error("vander", "x must be a one-dimensional tensor.", RuntimeError)
    n = x.shape[0] if N is None else N
    if n < 0:
        raise op_error("vander", "N must be non-negative.", RuntimeError)
    cols = []
    for k in range(n):
        if k == 0:  # 1 everywhere (NaN and inf included, as x ** 0)
            cols.append(E.where(E.isfinite(x), x * 0 + 1, 1.0))
        else:
            cols.append(x if k == 1 else cols[-1] * x)
    if not increasing:
        cols = cols[::-1]
    if not cols:
        return SH.reshape(x[:0], (x.shape[0], 0)) if x.shape[0] == 0 else \
            SH.reshape(x, (-1, 1))[:, :0]
    return SH.stack(cols, 1)


def _torch_vander(T, x, N=None, increasing=False):
    """PyTorch's values by powers (torch.vander's own backward writes in place into
    what it saved, so PyTorch cannot take its second derivative)."""
    n = x.shape[0] if N is None else N
    cols = [x ** k for k in range(n)]
    return T.stack(cols if increasing else cols[::-1], 1)


decl(vander, lambda dtype=np.float64: [S(rand((4,), dtype)), S(rand((3,), dtype), 4, True)],
     args=("x",), torch=_torch_vander)


# ------------------------------------------------------------------ scatters
def _positions(shape, d, pos):
    """An int64 index of ``shape`` holding ``pos`` (1-D) along ``d`` (a constant)."""
    view = [1] * len(shape)
    view[d] = len(pos)
    return np.broadcast_to(np.asarray(pos, dtype=np.int64).reshape(view), shape).copy()


def _embed(input, src, d, pos):
    """``input`` with ``src``'s slices at positions ``pos`` along ``d`` (``src`` has
    ``len(pos)`` there, or 1 to broadcast): a constant mask and a constant gather,
    so it differentiates in both and batches under vmap."""
    n = input.shape[d]
    mask_1d = np.zeros(n, dtype=bool)
    mask_1d[pos] = True
    view = [1] * input.ndim
    view[d] = n
    mask = mask_1d.reshape(view)
    if src.shape[d] == 1 and len(pos) == 1:
        placed = src
    else:
        gidx = np.zeros(n, dtype=np.int64)
        gidx[pos] = np.arange(len(pos))
        placed = I.index_select(src, d, gidx)
    return E.where(mask, placed, input)


def unravel_index(indices, shape):
    """The coordinates (one int64 tensor per dim) of flat ``indices`` in ``shape``."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(s < 0 for s in shape):
        raise op_error("unravel_index", "'shape' cannot have negative values", ValueError)
    if indices.dtype.is_floating_point or indices.dtype == _dt.bool:
        raise op_error("unravel_index", f"expected 'indices' to be integer dtype, but got "
                                        f"{indices.dtype}", TypeError)
    total = int(np.prod(shape))
    if any_value(indices, lambda i: (i >= total) | (i < -total)):
        raise op_error("unravel_index", "'indices' must be in range [-prod(shape), "
                                        "prod(shape) - 1]", RuntimeError)
    rem = E.remainder(indices, total) if total else indices
    out = []
    for s in reversed(shape):
        out.append(E.remainder(rem, s) if s else rem * 0)
        rem = E.floor_divide(rem, s) if s else rem
    return tuple(reversed(out))


decl(unravel_index, lambda dtype=np.float64: [S(np.array([5, 7, 0]), shape=(3, 4)),
                                              S(np.array([[1, 23]]), shape=(2, 3, 4))],
     args=("indices",), nout=2, differentiable=False,
     errors=lambda: [((np.array([12]),), {"shape": (3, 4)}, RuntimeError)])


def _tensors(name, **args):
    """A TypeError naming the argument for anything without a shape (None, a list)."""
    for pname, v in args.items():
        if not hasattr(v, "shape") or isinstance(v, np.generic):
            raise TypeError(f"{name}: argument '{pname}' must be a Tensor, not "
                            f"{type(v).__name__}")


# ------------------------------------------------------------------ t
def t(input):
    """The transpose of a tensor of at most 2 dimensions (0-D and 1-D as they are)."""
    _t_infer(input)
    return name_call(SH.transpose(input), input, "TBackward0") if input.ndim == 2 else input


def _t_infer(x):
    _tensors("t", input=x)
    if len(x.shape) > 2:
        raise op_error("t", f"expects a tensor with <= 2 dimensions, but self is "
                            f"{len(x.shape)}D", RuntimeError)
    return TensorSpec(tuple(x.shape[::-1]), x.dtype)


composite(t, infer=_t_infer, args=("input",),
          samples=lambda dtype=np.float64: [Sample((rand((3, 5), dtype),)),
                                            Sample((rand((4,), dtype),)),
                                            Sample((rand((), dtype),))],
          error_samples=lambda: [((rand((2, 3, 4)),), {}, RuntimeError)],
          torch=lambda torch, x: torch.t(x))


# ------------------------------------------------------------------ narrow
def narrow(input, dim, start, length):
    """``input`` along ``dim`` from ``start`` (negative counts from the end) for
    ``length`` elements: a view, as ``input[..., start:start + length, ...]``."""
    _tensors("narrow", input=input)
    d, s = _narrow_args(input.shape, dim, start, length)
    index = (slice(None),) * d + (slice(s, s + length),)
    return I.getitem(input, index)


def _narrow_args(shape, dim, start, length):
    if len(shape) == 0:
        raise op_error("narrow", "cannot be applied to a 0-dim tensor.", RuntimeError)
    d = normalize_dim("narrow", dim, len(shape))
    if isinstance(start, Tensor):
        start = start.item()
    for name, v in (("start", start), ("length", length)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise op_error("narrow", f"{name} must be an int, got {v!r}", TypeError)
    size = shape[d]
    if not -size <= start <= size:
        raise op_error("narrow", f"start out of range (expected to be in range of [{-size}, "
                                 f"{size}], but got {start})", IndexError)
    if start < 0:
        start += size
    if length < 0:
        raise op_error("narrow", "length must be non-negative.", RuntimeError)
    if start + length > size:
        raise op_error("narrow", f"start ({start}) + length ({length}) exceeds dimension "
                                 f"size ({size}).", RuntimeError)
    return d, int(start)


def _narrow_infer(x, dim, start, length):
    d, _ = _narrow_args(x.shape, dim, start, length)
    shape = list(x.shape)
    shape[d] = length
    return TensorSpec(tuple(shape), x.dtype)


composite(narrow, infer=_narrow_infer, args=("input",),
          samples=lambda dtype=np.float64: [
              Sample((rand((4, 6), dtype),), {"dim": 1, "start": 2, "length": 3}),
              Sample((rand((5, 2, 3), dtype),), {"dim": 0, "start": -3, "length": 2}),
              Sample((rand((5,), dtype),), {"dim": -1, "start": 1, "length": 0})],
          error_samples=lambda: [((rand((4, 6)),), {"dim": 1, "start": 4, "length": 3},
                                  RuntimeError),
                                 ((rand((4, 6)),), {"dim": 2, "start": 0, "length": 1},
                                  IndexError),
                                 ((rand((4, 6)),), {"dim": 0, "start": 9, "length": 1},
                                  IndexError)],
          torch=lambda torch, x, dim, start, length: torch.narrow(x, dim, start, length))



del _f, _shape, _groups, _k
