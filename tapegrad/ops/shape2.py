"""More of PyTorch's shape, joining, indexing and "other" functions (issue 17's
census), composites of the shape and indexing ops (``dsplit``, ``block_diag``,
``kron``, ``cdist``, ``index_add``, ``slice_scatter``...), and the counting/binning
functions with no gradient as NumPy kernels (``bincount``, ``histc``,
``searchsorted``...). Declared with ``pointwise2.decl``."""
import itertools

import numpy as np

from .. import dtypes as _dt
from ..tensor import Tensor, wrap as _wrap
from ..dispatch import bind
from .._util import normalize_dim, op_error
from ._decl import rand, register, TensorSpec, Sample
from .pointwise2 import decl, S
from . import elementwise as E, reduce as R, indexing as I, shape as SH, creation as C
from . import linalg as L

__all__ = ["adjoint", "dsplit", "hsplit", "vsplit", "column_stack", "dstack", "row_stack",
           "narrow_copy", "select", "take", "atleast_1d", "atleast_2d", "atleast_3d",
           "block_diag", "broadcast_tensors", "cartesian_prod", "cdist", "combinations",
           "corrcoef", "cov", "cross", "diagflat", "diff", "kron", "rot90", "meshgrid",
           "ravel", "renorm", "vander", "trapezoid", "trapz", "cumulative_trapezoid",
           "select_scatter", "slice_scatter", "diagonal_scatter", "index_add", "index_copy",
           "index_fill", "unravel_index", "bincount", "histc",
           "bucketize", "searchsorted", "histogram"]


def _same_dtype(name, *ts):
    ds = [t.dtype for t in ts if hasattr(t, "dtype")]
    if any(d != ds[0] for d in ds):
        raise op_error(name, f"expected all tensors to have the same dtype, got "
                             f"{', '.join(str(d) for d in ds)}", RuntimeError)


def _no_bool(name, *ts):
    for t in ts:
        if hasattr(t, "dtype") and str(t.dtype).endswith(".bool"):
            raise op_error(name, "not implemented for 'Bool'", RuntimeError)


def _alloc(name, input):
    from .. import devices
    devices.check_alloc(name, tuple(input.shape), input.dtype.np)


def _raw(t):
    """An index tensor's array (indices are data the op reads, as getitem's)."""
    return t._data if isinstance(t, Tensor) else np.asarray(t)


# ------------------------------------------------------------------ splits and stacks
def adjoint(input):
    """The conjugate transpose of the last two dims (the transpose, for real tensors)."""
    if input.ndim < 2:
        raise op_error("adjoint", "tensor.adjoint() is only supported on matrices or batches "
                                  "of matrices. Got 1-D tensor.", RuntimeError)
    return SH.mT(input)


decl(adjoint, lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((2, 3, 4), dtype))])


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
    from .compat import narrow
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
    ix = _raw(index)
    if ix.size and (ix.max() >= n or ix.min() < -n):
        raise op_error("take", f"out of range: tried to access index {int(ix.max())} on a "
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
                                                  S(rand((2, 3), dtype), rand((2, 3), dtype, seed=2))],
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


decl(meshgrid, lambda dtype=np.float64: [S(rand((3,), dtype), rand((4,), dtype, seed=1), indexing="ij"),
                                         S(rand((2,), dtype), rand((3,), dtype, seed=2), indexing="xy")],
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


def cdist(x1, x2, p=2.0, compute_mode=None):
    """Pairwise ``p``-norm distances between the rows of ``x1`` and of ``x2``."""
    for t in (x1, x2):
        if not t.dtype.is_floating_point:
            raise op_error("cdist", f"cdist only supports floating-point dtypes, X1 got: "
                                    f"{x1.dtype}", RuntimeError)
    _same_dtype("cdist", x1, x2)
    if x1.ndim < 2 or x2.ndim < 2:
        raise op_error("cdist", f"cdist only supports at least 2D tensors, X1 got: "
                                f"{x1.ndim}D", RuntimeError)
    if x1.shape[-1] != x2.shape[-1]:
        raise op_error("cdist", f"X1 and X2 must have the same number of columns. X1: "
                                f"{x1.shape[-1]} X2: {x2.shape[-1]}", RuntimeError)
    d = SH.unsqueeze(x1, -2) - SH.unsqueeze(x2, -3)
    if p == 2:
        return E.sqrt(R.sum(d * d, -1))
    if p == 1:
        return R.sum(E.abs(d), -1)
    return R.norm(d, p, -1)


def _torch_cdist(T, a, b, p=2.0):
    """PyTorch's values by formula (torch.cdist has no forward-mode derivative)."""
    d = (a.unsqueeze(-2) - b.unsqueeze(-3)).abs()
    return (d ** p).sum(-1) ** (1.0 / p)


decl(cdist, torch=_torch_cdist, samples=lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((5, 4), dtype, seed=1)),
                                      S(rand((2, 3, 2), dtype), rand((2, 4, 2), dtype, seed=2), 1.0)],
     args=("x1", "x2"), errors=lambda: [((rand((3, 4)), rand((5, 3))), {}, RuntimeError)])


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance of the rows (variables) over the columns (observations)."""
    if input.ndim > 2:
        raise op_error("cov", f"cov(): expected input to have two or fewer dimensions but "
                              f"got an input with {input.ndim} dimensions", ValueError)
    _no_bool("cov", input)
    x = SH.reshape(input, (1, -1)) if input.ndim < 2 else input
    if not x.dtype.is_floating_point:
        x = x.to(_dt.get_default_dtype())
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights.to(x.dtype)
    if aweights is not None:
        w = aweights.to(x.dtype) if w is None else w * aweights.to(x.dtype)
    if w is None:
        mean = R.mean(x, 1, True)
        xc = x - mean
        denom = n - correction
        c = L.matmul(xc, SH.mT(xc)) / max(denom, 0)
    else:
        wsum = R.sum(w)
        mean = R.sum(x * w, 1, True) / wsum
        xc = x - mean
        if aweights is None or correction == 0:
            denom = wsum - correction
        else:
            denom = wsum - correction * R.sum(w * aweights.to(x.dtype)) / wsum
        c = L.matmul(xc * w, SH.mT(xc)) / E.maximum(denom, 0.0)
    return SH.reshape(c, ()) if input.ndim < 2 else c


decl(cov, lambda dtype=np.float64: [S(rand((3, 5), dtype)), S(rand((6,), dtype, seed=1)),
                                    S(rand((2, 4), dtype, seed=2), correction=0)])


def corrcoef(input):
    """Pearson correlation coefficients of the rows, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = SH.diagonal(c)
    s = E.sqrt(d)
    out = c / SH.unsqueeze(s, 1) / SH.unsqueeze(s, 0)
    return E.clamp(out, -1.0, 1.0)


decl(corrcoef, lambda dtype=np.float64: [S(rand((3, 5), dtype)), S(rand((2, 6), dtype, seed=1))])


def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (the first dim of size 3 if None)."""
    if str(input.dtype).endswith(".bool"):
        raise op_error("cross", "not implemented for 'Bool'", NotImplementedError)
    _same_dtype("cross", input, other)
    if input.ndim == 0 or other.ndim == 0 or input.ndim != other.ndim:
        raise op_error("cross", f"linalg.cross: inputs must have the same number of "
                                f"dimensions (got {input.ndim} and {other.ndim})", RuntimeError)
    shape = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
    if dim is None:
        cands = [k for k, s in enumerate(shape) if s == 3]
        if not cands:
            raise op_error("cross", "no dimension of size 3 in input", RuntimeError)
        dim = cands[0]
    d = normalize_dim("cross", dim, len(shape))
    if shape[d] != 3:
        raise op_error("cross", f"linalg.cross: inputs dimension {d} must have length 3. Got "
                                f"{input.shape[d] if d < input.ndim else '?'} and "
                                f"{other.shape[d] if d < other.ndim else '?'}", RuntimeError)
    a = SH.broadcast_to(input, shape)
    b = SH.broadcast_to(other, shape)

    def c(t, k):
        return I.getitem(t, (slice(None),) * d + (k,))
    a0, a1, a2 = c(a, 0), c(a, 1), c(a, 2)
    b0, b1, b2 = c(b, 0), c(b, 1), c(b, 2)
    return SH.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


decl(cross, lambda dtype=np.float64: [S(rand((4, 3), dtype), rand((4, 3), dtype, seed=1), 1),
                                      S(rand((3, 2), dtype), rand((3, 1), dtype, seed=2), 0)],
     args=("input", "other"), errors=lambda: [((rand((3, 4)), rand((3, 4)), 1), {}, RuntimeError)])


def diagflat(input, offset=0):
    """``input`` flattened onto the ``offset`` diagonal of a square matrix."""
    return SH.diag_embed(SH.reshape(input, (-1,)), offset)


decl(diagflat, lambda dtype=np.float64: [S(rand((2, 2), dtype)), S(rand((3,), dtype), -1)])


def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` joined first)."""
    if input.ndim == 0:
        raise op_error("diff", "diff expects input to be at least one-dimensional",
                       RuntimeError)
    d = normalize_dim("diff", dim, input.ndim)
    x = input
    if prepend is not None or append is not None:
        parts = ([prepend] if prepend is not None else []) + [x] + \
                ([append] if append is not None else [])
        x = SH.cat(parts, d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        hi = I.getitem(x, (slice(None),) * d + (slice(1, m),))
        lo = I.getitem(x, (slice(None),) * d + (slice(0, m - 1),))
        x = (hi != lo) if x.dtype == _dt.bool else hi - lo
    return x


decl(diff, lambda dtype=np.float64: [S(rand((3, 5), dtype)), S(rand((4, 3), dtype), 2, 0),
                                     S(rand((3, 4), dtype), 1, 1, rand((3, 1), dtype, seed=1),
                                       rand((3, 2), dtype, seed=2))],
     args=("input", "n", "dim", "prepend", "append"), optional=("prepend", "append"))


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


decl(rot90, lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((2, 3, 4), dtype), 3, dims=(1, 2)),
                                      S(rand((3, 4), dtype), -2)],
     errors=lambda: [((rand((3,)),), {}, RuntimeError)])


def ravel(input):
    """``input`` flattened to 1-D."""
    return SH.reshape(input, (-1,))


decl(ravel, lambda dtype=np.float64: [S(rand((3, 4), dtype)), S(rand((), dtype))])


def renorm(input, p, dim, maxnorm):
    """Each slice along ``dim`` rescaled to ``p``-norm at most ``maxnorm``."""
    d = normalize_dim("renorm", dim, input.ndim)
    if p <= 0:
        raise op_error("renorm", "non-positive-norm not supported", RuntimeError)
    if maxnorm < 0:
        raise op_error("renorm", f"renorm: expected maxnorm to be >= 0 but got {maxnorm}",
                       RuntimeError)
    others = tuple(k for k in range(input.ndim) if k != d)
    nrm = R.norm(input, p, others, True)
    scale = E.where(nrm > maxnorm, maxnorm / (nrm + 1e-7), 1.0)
    return input * scale


decl(renorm, lambda dtype=np.float64: [S(rand((3, 4), dtype), 2, 0, 1.0),
                                       S(rand((3, 4), dtype, seed=1), 1, 1, 1.5)])


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


def _trap_dx(y, x, dx, d):
    if x is None:
        return dx
    if x.ndim == 1:
        sh = [1] * y.ndim
        sh[d] = x.shape[0]
        x = SH.reshape(x, tuple(sh))
    m = x.shape[d] if x.ndim == y.ndim else y.shape[d]
    return I.getitem(x, (slice(None),) * d + (slice(1, m),)) - \
        I.getitem(x, (slice(None),) * d + (slice(0, m - 1),))


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule along ``dim`` (spacing ``dx``, or sample points ``x``)."""
    _no_bool("trapezoid", y, x)
    d = normalize_dim("trapezoid", dim, y.ndim)
    m = y.shape[d]
    if m == 0:
        return R.sum(y, d) * 0
    lo = I.getitem(y, (slice(None),) * d + (slice(0, m - 1),))
    hi = I.getitem(y, (slice(None),) * d + (slice(1, m),))
    h = _trap_dx(y, x, 1.0 if dx is None else dx, d)
    return R.sum((lo + hi) * h, d) * 0.5


def trapz(y, x=None, *, dx=None, dim=-1):
    """Alias of ``trapezoid``."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal rule along ``dim``."""
    _no_bool("cumulative_trapezoid", y, x)
    d = normalize_dim("cumulative_trapezoid", dim, y.ndim)
    m = y.shape[d]
    lo = I.getitem(y, (slice(None),) * d + (slice(0, max(m - 1, 0)),))
    hi = I.getitem(y, (slice(None),) * d + (slice(1, m),))
    h = _trap_dx(y, x, 1.0 if dx is None else dx, d)
    return R.cumsum((lo + hi) * h * 0.5, d)


for _f in (trapezoid, trapz, cumulative_trapezoid):
    decl(_f, lambda dtype=np.float64: [S(rand((3, 5), dtype)),
                                       S(rand((3, 4), dtype), rand((4,), dtype, seed=1)),
                                       S(rand((4, 3), dtype), dx=0.5, dim=0)],
         args=("y", "x"), optional=("x",))


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
    xp = devices.xp_of(_raw(input))
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


decl(select_scatter, lambda dtype=np.float64: [S(rand((3, 4), dtype), rand((3,), dtype, seed=1), 1, 0),
                                               S(rand((2, 3, 4), dtype), rand((2, 4), dtype, seed=2), 1, -1)],
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
     args=("input", "src"), errors=lambda: [((rand((3, 4)), rand((3, 3)), 1, 0, 2), {}, RuntimeError)])


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
                                                 S(rand((3, 5), dtype), rand((3,), dtype, seed=2), 1),
                                                 S(rand((2, 3, 3), dtype), rand((2, 2), dtype, seed=3), -1, 1, 2)],
     args=("input", "src"), errors=lambda: [((rand((3, 3)), rand((2,))), {}, RuntimeError)])


def _index_check(name, input, d, index, source=None):
    if source is not None:
        if source.dtype != input.dtype:
            raise op_error(name, f"{name}_(): self ({input.dtype}) and source ({source.dtype}) "
                                 f"must have the same scalar type", RuntimeError)
    ix = _raw(index)
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
    Tensor subclass): the ops path then runs."""
    if isinstance(index, Tensor) and type(index) is not Tensor:
        return None
    ix = _raw(index).reshape(-1)
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
    k = _raw(index).size
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
     args=("input", "dim", "index", "source"),
     errors=lambda: [((rand((4, 3)), 0, np.array([7]), rand((1, 3))), {}, IndexError)])
decl(index_fill, lambda dtype=np.float64: [S(rand((4, 3), dtype), 0, np.array([3, 1]), -1.5),
                                           S(rand((3, 5), dtype), 1, np.array([4]), 2.0)],
     args=("input", "dim", "index"),
     errors=lambda: [((rand((4, 3)), 0, np.array([7]), 1.0), {}, IndexError)])


def unravel_index(indices, shape):
    """The coordinates (one int64 tensor per dim) of flat ``indices`` in ``shape``."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(s < 0 for s in shape):
        raise op_error("unravel_index", "'shape' cannot have negative values", ValueError)
    if indices.dtype.is_floating_point or indices.dtype == _dt.bool:
        raise op_error("unravel_index", f"expected 'indices' to be integer dtype, but got "
                                        f"{indices.dtype}", TypeError)
    total = int(np.prod(shape))
    ix = _raw(indices)
    if ix.size and (ix.max() >= total or ix.min() < -total):
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


# ------------------------------------------------------------------ counting (no gradient)
def _ints(shape, lo, hi, seed=0):
    return np.random.default_rng(seed).integers(lo, hi, shape)


def _bincount_kernel(x, weights=None, minlength=0, alloc=None):
    if alloc is not None and type(x) is np.ndarray:  # sized first, counted in place
        _bincount_infer(x, weights, minlength)  # infer_first=False: the kernel checks
        if x.size and int(x.min()) < 0 or int(minlength) < 0 or \
                weights is not None and tuple(weights.shape) != tuple(x.shape):
            np.bincount(x, weights, minlength=minlength)  # NumPy's error for these
        n = max(int(x.max()) + 1 if x.size else 0, int(minlength))
        dt = np.dtype(np.int64) if weights is None else (
            weights.dtype if weights.dtype.kind == "f" else np.dtype(np.float64))
        from ..devices.cpu_kernels.scatter import bincount_into
        return bincount_into(x, weights, alloc((n,), dt))
    counts = np.bincount(x, weights, minlength=minlength)
    if weights is not None and weights.dtype.kind == "f":
        counts = counts.astype(weights.dtype)
    out = alloc(counts.shape, counts.dtype)
    out[...] = counts
    return out


def _bincount_infer(x, weights=None, minlength=0):
    if len(x.shape) != 1:
        raise op_error("bincount", "bincount only supports 1-d non-negative integral inputs.",
                       RuntimeError)
    dt = np.dtype(np.int64) if weights is None else (
        np.dtype(weights.dtype) if np.dtype(weights.dtype).kind == "f" else np.dtype(np.float64))
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
    if input.numel() and int(_raw(input).min()) < 0:
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
                                                       S(rand((3, 4), dtype), bins=3, range=(-1.0, 1.0))],
                     torch=lambda T, x, **k: tuple(T.histogram(x, **k)),
                     error_samples=lambda: [(("not a tensor",), {}, TypeError)])


def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """``(hist, bin_edges)`` of ``bins`` equal bins (an int count only)."""
    if not isinstance(bins, int):
        raise op_error("histogram", "bins as a tensor of edges is not supported; pass a count",
                       NotImplementedError)
    if not input.dtype.is_floating_point:
        raise op_error("histogram", f"\"histogram_cpu\" not implemented for '{input.dtype}'",
                       RuntimeError)
    kw = {"bins": bins}
    if range is not None:
        kw["range"] = tuple(float(v) for v in range)
    if weight is not None:
        kw["weight"] = _raw(weight)
    if density:
        kw["density"] = True
    return tuple(bind(HISTOGRAM, input, **kw))


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


SEARCHSORTED = register(name="searchsorted", kernel=_searchsorted_kernel,
                        infer=_searchsorted_infer, args=("sorted_sequence", "input"),
                        differentiable=False, promote="same",
                        samples=lambda dtype=np.float64: [
                            S(np.sort(rand((5,), dtype)), rand((3, 4), dtype, seed=1)),
                            S(np.sort(rand((2, 5), dtype), 1), rand((2, 3), dtype, seed=2), right=True)],
                        torch=lambda T, s, v, right=False: T.searchsorted(s, v, right=right),
                        error_samples=lambda: [((rand((2, 5)), rand((3, 3))), {}, RuntimeError)])


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """Where each value of ``input`` would go in ``sorted_sequence`` (sorted along its
    last dim) to keep it sorted."""
    if side is not None:
        right = side == "right"
    if not isinstance(input, Tensor):
        input = C.full((), input, dtype=sorted_sequence.dtype)
    out = bind(SEARCHSORTED, sorted_sequence, input, right=bool(right))
    return out.to(_dt.int32) if out_int32 else out


def _bucketize_infer(x, boundaries, right=False):
    if len(boundaries.shape) != 1:
        raise op_error("bucketize", f"boundaries tensor must be 1 dimension, but got dim("
                                    f"{len(boundaries.shape)})", RuntimeError)
    return TensorSpec(tuple(x.shape), np.dtype(np.int64))


BUCKETIZE = register(name="bucketize", infer=_bucketize_infer,
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
