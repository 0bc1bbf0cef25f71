"""Sparse COO tensors, as ``torch.sparse``: ``sparse_coo_tensor``, ``Tensor.to_sparse``
and the sparse tensor's methods, ``mm``/``addmm``/``sum`` (``tg.sparse``).

A sparse tensor is a ``SparseTensor``: a Tensor whose buffer is a small COO holder
(an int64 ``indices`` Tensor of shape ``(sparse_dim, nnz)`` and a ``values`` Tensor of
shape ``(nnz, *dense_dims)``), not an array. It is kept out of dispatch's Tensor
types, so the dense path never looks at it: a registry op given one reaches
dispatch's fallback for arguments that are not arrays, which hands it to
``SparseTensor._layout_bind``; that runs the matrix product (``matmul``, so ``a @ b``,
``tg.mm``, ``tg.matmul``, ``tg.addmm``; a vector ``b`` through ``mv``), a product with a
scalar and the negation (on the values), a product with a dense tensor of the same size
(``_times_dense``: sparse) and refuses every other op with an error naming it and the
layout. ``a + b``/``a - b`` of two sparse tensors of one size is sparse
(both sets of elements, uncoalesced), ``a.t()`` swaps the index rows. Gradients flow
through ``values``: ``requires_grad`` and ``grad`` are those of the values (``grad`` as
a sparse tensor with the same indices).

The registry ops take the COO parts as dense arrays: ``sparse_mm(indices, values,
mat2, size)`` (a compiled loop over the stored elements, never densifying) and
``sparse_coo_to_dense(indices, values, size)``; their adjoints are ops, so every
order differentiates.
"""
import functools
import math
import operator
import re

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import op_error, value_range
from ..dispatch import bind
from ..tape import state as _state
from ..tensor import Tensor, subclasses as _tensor_types
from . import _jvp, creation as _C, indexed_update as _IU, reduce as _R
from ._checks import any_value, int_value
from ._decl import Sample, TensorSpec, rand, register

__all__ = []  # the public names are reached as tg.sparse.* and tg.sparse_coo_tensor

_DTYPE_SUFFIX = re.compile(r",\s+dtype=[\w.]+\)$")  # the values' dtype: the sparse repr says it
_NO_ONNX = "sparse layout: ONNX tensors are dense"


class layout:
    """A tensor's memory layout (``tg.strided``, ``tg.sparse_coo``)."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"

    def __reduce__(self):
        return self.name


strided = layout("strided")
sparse_coo = layout("sparse_coo")


def _dense_to_dense(self):
    return self


# ------------------------------------------------------------------ registry ops
def _indices_in_range(name, indices, size):
    """The kernels' own check of the index values (a replay runs a kernel without the
    shape rule; the compiled loops index without bounds checks): each row of
    ``indices`` within its dim of ``size``, IndexError otherwise."""
    for d in range(indices.shape[0]):
        r = value_range(indices[d])
        if r is not None and (r[0] < 0 or r[1] >= size[d]):
            bad = r[0] if r[0] < 0 else r[1]
            raise op_error(name, f"index {bad} is out of bounds for dimension {d} with size "
                                 f"{size[d]}", IndexError)


def _sparse_mm_kernel(indices, values, mat2, *, size, out=None):
    _indices_in_range("sparse_mm", indices, size)
    if out is None:
        xp = _devices.xp_of(mat2)
        out = xp.zeros((size[0], mat2.shape[1]),
                       dtype=np.result_type(values.dtype, mat2.dtype))
    else:
        out[...] = 0
    if indices.shape[1]:
        rows = indices[0].astype(np.int64, copy=False)
        cols = indices[1].astype(np.int64, copy=False)
        _devices.coo_mm(rows, cols, values.astype(out.dtype, copy=False),
                        mat2.astype(out.dtype, copy=False), out)
    return out


def _check_coo(name, indices, values, size, sparse_dim=None):
    if np.dtype(indices.dtype).kind not in "iu":
        raise op_error(name, f"indices must be an int64 tensor, got {np.dtype(indices.dtype)}",
                       RuntimeError)
    if len(indices.shape) != 2:
        raise op_error(name, f"indices must be 2-D (sparse_dim, nnz), got shape "
                             f"{tuple(indices.shape)}", RuntimeError)
    if len(values.shape) < 1 or values.shape[0] != indices.shape[1]:
        raise op_error(name, f"indices and values must have the same number of elements: "
                             f"indices {tuple(indices.shape)} has {indices.shape[1]}, values "
                             f"{tuple(values.shape)} has "
                             f"{values.shape[0] if len(values.shape) else 0}", RuntimeError)
    sd = indices.shape[0]
    if len(size) != sd + len(values.shape) - 1 or tuple(size[sd:]) != tuple(values.shape[1:]):
        raise op_error(name, f"size {tuple(size)} does not fit indices {tuple(indices.shape)} and "
                             f"values {tuple(values.shape)} (expected sparse_dim + dense_dim = "
                             f"{sd} + {len(values.shape) - 1} dims ending in "
                             f"{tuple(values.shape[1:])})", RuntimeError)


def _sparse_mm_infer(indices, values, mat2, *, size):
    _check_coo("sparse_mm", indices, values, size)
    if len(size) != 2 or len(values.shape) != 1:
        raise op_error("sparse_mm", f"the sparse operand must be a 2-D matrix with scalar values, "
                                    f"got size {tuple(size)} with values of shape "
                                    f"{tuple(values.shape)}", RuntimeError)
    if len(mat2.shape) != 2:
        raise op_error("sparse_mm", f"mat2 must be a matrix, got a {len(mat2.shape)}-D tensor of "
                                    f"shape {tuple(mat2.shape)}", RuntimeError)
    if mat2.shape[0] != size[1]:
        raise op_error("sparse_mm", f"mat1 and mat2 shapes cannot be multiplied "
                                    f"({size[0]}x{size[1]} and {mat2.shape[0]}x{mat2.shape[1]})",
                       RuntimeError)
    if np.dtype(values.dtype) != np.dtype(mat2.dtype):
        raise op_error("sparse_mm", f"expected mat1 and mat2 to have the same dtype, but got "
                                    f"{_dt.from_np(values.dtype)} != {_dt.from_np(mat2.dtype)}",
                       RuntimeError)
    return TensorSpec((size[0], mat2.shape[1]), values.dtype)


def _sparse_mm_vjp(ctx, g):
    indices, values, mat2 = ctx.inputs
    m = ctx.m
    n = ctx.needs_input_grad
    gv = gb = None
    rows, cols = indices[0], indices[1]
    if n[1]:  # the sampled product: (g @ mat2^T) at the stored elements only
        gv = m.sum(m.index_select(g, 0, rows) * m.index_select(mat2, 0, cols), -1)
    if n[2]:  # A^T @ g, still sparse
        size = ctx.attrs["size"]
        gb = bind(SPARSE_MM, indices[[1, 0]], values, g, size=(size[1], size[0]))
    return None, gv, gb


def _coo_sample(dtype, shape, nnz, seed, dense=()):
    rng = np.random.default_rng(seed)
    idx = np.stack([rng.integers(0, s, nnz) for s in shape]).astype(np.int64)
    return idx, rand((nnz,) + tuple(dense), dtype, seed=seed)


def _sparse_mm_samples(dtype=np.float64):
    i, v = _coo_sample(dtype, (4, 3), 6, 1)  # with repeats: duplicates accumulate
    i0 = np.zeros((2, 0), np.int64)
    return [Sample((i, v, rand((3, 5), dtype, seed=2)), dict(size=(4, 3))),
            Sample((i[:, :1], v[:1], rand((3, 2), dtype, seed=3)), dict(size=(2, 3))),
            Sample((i0, rand((0,), dtype), rand((3, 2), dtype, seed=4)), dict(size=(4, 3)))]


def _torch_sparse_mm(torch, indices, values, mat2, *, size):
    a = torch.sparse_coo_tensor(indices, values, size, check_invariants=True)
    return torch.sparse.mm(a, mat2)


SPARSE_MM = register(
    name="sparse_mm", grad_fn_name="SparseAddmmBackward0",
    kernel=_sparse_mm_kernel, infer=_sparse_mm_infer,
    args=("indices", "values", "mat2"), vjp=_sparse_mm_vjp,
    saves={"values": ("indices", "mat2"), "mat2": ("indices", "values")},
    jvp=_jvp.multilinear, promote="none", samples=_sparse_mm_samples, torch=_torch_sparse_mm,
    onnx=_NO_ONNX, autocast={"cpu": "lower"},  # (torch.autocast("cpu") lowers sparse.mm)
    error_samples=lambda: [
        ((np.array([[0], [1]]), rand((1,)), rand((4, 2))), dict(size=(2, 3)), RuntimeError),
        ((np.array([[0], [1]]), rand((2,)), rand((3, 2))), dict(size=(2, 3)), RuntimeError),
        ((np.array([[0], [1]]), rand((1,)), rand((3,))), dict(size=(2, 3)), RuntimeError)])


def _to_dense_kernel(indices, values, *, size, out=None):
    _indices_in_range("sparse_coo_to_dense", indices, size)
    if out is None:
        out = _devices.xp_of(values).zeros(tuple(size), dtype=values.dtype)
    else:
        out[...] = 0
    if indices.shape[1]:
        _devices.add_at(out, tuple(indices.astype(np.int64, copy=False)), values)
    return out


def _to_dense_infer(indices, values, *, size):
    _check_coo("sparse_coo_to_dense", indices, values, size)
    return TensorSpec(tuple(size), values.dtype)


def _to_dense_vjp(ctx, g):
    indices = ctx.inputs[0]
    sd = ctx.shapes[0][0]
    return None, g[tuple(indices[d] for d in range(sd))]


def _to_dense_samples(dtype=np.float64):
    i, v = _coo_sample(dtype, (3, 4), 5, 5)
    i2, v2 = _coo_sample(dtype, (3,), 4, 6, dense=(2,))
    return [Sample((i, v), dict(size=(3, 4))), Sample((i2, v2), dict(size=(3, 2)))]


SPARSE_COO_TO_DENSE = register(
    name="sparse_coo_to_dense", grad_fn_name="ToDenseBackward0",
    kernel=_to_dense_kernel, infer=_to_dense_infer,
    args=("indices", "values"), vjp=_to_dense_vjp, saves=("indices",), jvp=_jvp.multilinear,
    promote="none", samples=_to_dense_samples, onnx=_NO_ONNX,
    torch=lambda torch, indices, values, *, size:
        torch.sparse_coo_tensor(indices, values, size, check_invariants=True).to_dense(),
    error_samples=lambda: [((np.array([[0, 1]]), rand((3,))), dict(size=(2,)), RuntimeError),
                           ((np.array([[0, 1]]), rand((2,))), dict(size=(2, 3)), RuntimeError)])


# ------------------------------------------------------------------ the sparse tensor
class _COO:
    """A sparse tensor's buffer: its indices and values Tensors, size and whether it
    is coalesced (sorted, no duplicate indices)."""
    __slots__ = ("indices", "values", "shape", "coalesced")

    def __init__(self, indices, values, shape, coalesced):
        self.indices, self.values, self.shape, self.coalesced = indices, values, shape, coalesced

    @property
    def dtype(self):
        return self.values._data.dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)


def _layout_error(op_name):
    return NotImplementedError(
        f"{op_name}: not supported for layout torch.sparse_coo (a sparse COO tensor among "
        f"its arguments); the sparse operations are tg.sparse.mm/addmm/sum, a @ b, "
        f"to_dense(), coalesce(), indices(), values(): call .to_dense() first")


class SparseTensor(Tensor):
    """A sparse COO tensor (``layout=tg.sparse_coo``), made by ``tg.sparse_coo_tensor``
    or ``x.to_sparse()``."""

    def __init__(self, indices, values, shape, coalesced=False):
        self._data = _COO(indices, values, tuple(int(s) for s in shape), coalesced)
        self._node = None
        self._idx = 0
        self._vc = [0]

    layout = sparse_coo
    is_sparse = True

    # gradients are the values'
    @property
    def requires_grad(self):
        return self._data.values.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._data.values.requires_grad = flag

    def requires_grad_(self, requires_grad=True):
        self._data.values.requires_grad_(requires_grad)
        return self

    @property
    def grad(self):
        d = self._data
        g = d.values.grad
        if g is None:
            return None
        if d.coalesced:
            return SparseTensor(d.indices, g, d.shape, True)
        # the gradient at each distinct element (its duplicates' values all got it)
        uniq, first = _unique(_host(d.indices), d.shape)
        pick = _C.tensor(first, device=g.device)
        return SparseTensor(_C.tensor(uniq, device=g.device), g[pick], d.shape, True)

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise RuntimeError("grad: only None can be assigned to a sparse tensor's grad")
        self._data.values.grad = None

    @property
    def is_leaf(self):
        return self._data.values.is_leaf

    @property
    def grad_fn(self):
        return self._data.values.grad_fn

    @property
    def device(self):
        return self._data.values.device

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def detach(self):
        return SparseTensor(self._data.indices, self._data.values.detach(), self._data.shape,
                            self._data.coalesced)

    # the COO parts
    def indices(self):
        if not self._data.coalesced:
            raise RuntimeError("indices: cannot get indices on an uncoalesced tensor, please "
                               "call .coalesce() first")
        return self._data.indices

    def values(self):
        if not self._data.coalesced:
            raise RuntimeError("values: cannot get values on an uncoalesced tensor, please "
                               "call .coalesce() first")
        return self._data.values

    def _indices(self):
        return self._data.indices

    def _values(self):
        return self._data.values

    def _nnz(self):
        return int(self._data.indices.shape[1])

    def sparse_dim(self):
        return int(self._data.indices.shape[0])

    def dense_dim(self):
        return len(self._data.shape) - self.sparse_dim()

    def is_coalesced(self):
        return self._data.coalesced

    def coalesce(self):
        """The same tensor with sorted, unique indices (duplicates' values summed)."""
        if self._data.coalesced:
            return self
        d = self._data
        new_idx, _, inv = _unique(_host(d.indices), d.shape, inverse=True)
        dev = d.values.device
        vals = _IU.index_add(_C.zeros((new_idx.shape[1],) + tuple(d.values.shape[1:]),
                                      dtype=d.values.dtype, device=dev),
                             0, _C.tensor(inv, device=dev), d.values)
        return SparseTensor(_C.tensor(new_idx, device=dev), vals, d.shape, True)

    def to_dense(self):
        d = self._data
        return bind(SPARSE_COO_TO_DENSE, d.indices, d.values, size=d.shape)

    def to_sparse(self, sparse_dim=None):
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise RuntimeError(f"to_sparse: the tensor already is sparse with sparse_dim "
                               f"{self.sparse_dim()}, got sparse_dim={sparse_dim}")
        return self

    def numel(self):
        return self._data.size

    def float(self):
        return self._cast(_dt.float32)

    def double(self):
        return self._cast(_dt.float64)

    def _cast(self, dtype):
        d = self._data
        return SparseTensor(d.indices, d.values.to(dtype), d.shape, d.coalesced)

    def to(self, *args, **kwargs):
        d = self._data
        values = d.values.to(*args, **kwargs)
        indices = d.indices if values.device == d.indices.device else \
            d.indices.to(device=values.device)
        return SparseTensor(indices, values, d.shape, d.coalesced)

    def sum(self, dim=None, keepdim=False, dtype=None):
        if keepdim:
            raise _layout_error("sum(keepdim=True)")
        return _sparse_sum(self, dim, dtype)

    def __matmul__(self, other):
        if isinstance(other, Tensor) and not isinstance(other, SparseTensor) and \
                other.ndim == 1:
            return mv(self, other)
        return mm(self, other)

    def mv(self, vec):
        return mv(self, vec)

    def t(self):
        """The transpose of a 2-D sparse tensor (its index rows swapped; a 1-D one as
        it is), as PyTorch's."""
        d = self._data
        if len(d.shape) < 2:
            return self
        if len(d.shape) != 2 or self.dense_dim():
            raise RuntimeError(f"t() expects a tensor with <= 2 sparse and 0 dense "
                               f"dimensions, got size {d.shape}")
        return SparseTensor(d.indices.flip(0), d.values, d.shape[::-1], False)

    def __neg__(self):
        return self._scaled(-1)

    def clone(self, *, memory_format=None):
        """A copy: its own indices and values (the values' graph kept, as ``clone``)."""
        d = self._data
        return SparseTensor(d.indices.clone(), d.values.clone(), d.shape, d.coalesced)

    def __getitem__(self, key):
        """``s[i]``: the sparse tensor of the elements whose first index is ``i`` (an
        int, negative counting from the end), one dim fewer, as PyTorch's select."""
        d = self._data
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            raise _layout_error("getitem (an index other than an int)")
        if self.sparse_dim() < 2:
            raise _layout_error("getitem (of a tensor with one sparse dim)")
        n = d.shape[0]
        if not -n <= key < n:
            raise IndexError(f"index {key} is out of bounds for dimension 0 with size {n}")
        key = int(key) % n
        keep = np.nonzero(_host(d.indices)[0] == key)[0]
        it = _C.tensor(keep, device=d.values.device)
        return SparseTensor(d.indices[1:][:, it], d.values[it], d.shape[1:], d.coalesced)

    def __mul__(self, other):
        if _scalar(other):
            return self._scaled(other)
        if isinstance(other, Tensor) and not isinstance(other, SparseTensor):
            return _times_dense(self, other)
        return _layout_bind_op("mul", self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if _scalar(other):
            d = self._data
            return SparseTensor(d.indices, d.values / other, d.shape, d.coalesced)
        raise _layout_error("div")

    def __add__(self, other):
        return _sparse_add(self, other, 1)

    def __sub__(self, other):
        return _sparse_add(self, other, -1)

    def _autocast_to(self, dtype, device_type):
        """Under tg.autocast (dispatch's casts of an op's arguments): this tensor with
        its floating values (not float64) on ``device_type`` cast to ``dtype``."""
        v = self._data.values
        if (not v.dtype.is_floating_point or v.dtype == _dt.float64 or v.dtype == dtype
                or v.device.type != device_type):
            return self
        return self.to(dtype)

    def _scaled(self, k):
        d = self._data
        return SparseTensor(d.indices, d.values * k, d.shape, d.coalesced)

    def __repr__(self):
        d = self._data
        ind = repr(d.indices).replace("\n", "\n" + " " * 15)
        val = _DTYPE_SUFFIX.sub(")", repr(d.values.detach())).replace("\n", "\n" + " " * 14)
        extra = ""
        if d.values.dtype != _dt.get_default_dtype():
            extra += f", dtype={d.values.dtype}"
        extra += ", layout=torch.sparse_coo"
        if self.device.type != "cpu":
            extra += f", device='{self.device}'"
        if d.values.grad_fn is not None:
            extra += f", grad_fn=<{d.values.grad_fn.name()}>"
        elif d.values.requires_grad:
            extra += ", requires_grad=True"
        return (f"tensor(indices={ind},\n       values={val},\n       size={d.shape}, "
                f"nnz={self._nnz()}{extra})")

    __str__ = __repr__

    @staticmethod
    def _layout_bind(op, args, attrs):
        """A registry op given a sparse tensor (dispatch's fallback): the matrix product
        runs sparse (a sparse operand on either side, the other dense); ``dense + sparse``
        and ``dense - sparse`` are dense, as PyTorch's (which refuses the sparse operand
        first); anything else is refused, naming the op and the layout."""
        if op.name == "matmul" and len(args) == 2:
            a, b = args
            if isinstance(a, SparseTensor):
                return a @ b
            if isinstance(a, Tensor):
                return _dense_mm_sparse(a, b)
        if (op.name in ("add", "sub") and len(args) == 2
                and all(isinstance(a, Tensor) for a in args)
                and not all(isinstance(a, SparseTensor) for a in args)):
            if isinstance(args[0], SparseTensor):
                raise RuntimeError(f"{op.name}(sparse, dense) is not supported. Use "
                                   f"{op.name}(dense, sparse) instead.")
            return bind(op, args[0], args[1].to_dense(), **attrs)
        if op.name == "mul" and len(args) == 2 and not attrs:
            a, b = args
            if isinstance(a, SparseTensor) and _scalar(b):
                return a._scaled(b)
            if isinstance(b, SparseTensor) and _scalar(a):
                return b._scaled(a)
            if isinstance(a, SparseTensor) != isinstance(b, SparseTensor) and \
                    isinstance(a, Tensor) and isinstance(b, Tensor):
                return _times_dense(a, b) if isinstance(a, SparseTensor) else \
                    _times_dense(b, a)
        if op.name == "neg" and len(args) == 1 and not attrs:
            return args[0]._scaled(-1)
        raise _layout_error(op.name)


_tensor_types.discard(SparseTensor)  # dispatch's Tensor types stay the dense ones


def _times_dense(sp, dense):
    """``sparse * dense`` of one size: sparse, the stored elements times the dense
    tensor's at their indices (differentiable to both), as PyTorch's."""
    d = sp._data
    if tuple(dense.shape) != d.shape:
        raise RuntimeError(f"mul: a sparse tensor of size {d.shape} times a dense one of size "
                           f"{tuple(dense.shape)}: the sizes must match")
    at = dense[tuple(d.indices[k] for k in range(d.indices.shape[0]))]
    return SparseTensor(d.indices, d.values * at, d.shape, d.coalesced)


def _scalar(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) \
        or (isinstance(v, Tensor) and not isinstance(v, SparseTensor) and v.ndim == 0)


def _layout_bind_op(name, *args):
    from ..ops_registry import get
    return SparseTensor._layout_bind(get(name), args, {})


def _sparse_add(a, b, sign):
    """``a + b`` (``sign`` 1) or ``a - b`` (-1) for a sparse ``a``: with a sparse ``b`` of
    the same size, the sparse tensor of both sets of elements (uncoalesced, as
    PyTorch's before ``coalesce()``); a dense ``b`` is refused as PyTorch refuses it."""
    name = "add" if sign > 0 else "sub"
    if not isinstance(b, SparseTensor):
        return _layout_bind_op(name, a, b)
    da, db = a._data, b._data
    if da.shape != db.shape:
        raise RuntimeError(f"{name}: the sparse operands' sizes must match, got {da.shape} "
                           f"and {db.shape}")
    if da.indices.shape[0] != db.indices.shape[0]:
        raise RuntimeError(f"{name}: the sparse operands' sparse dims must match, got "
                           f"{da.indices.shape[0]} and {db.indices.shape[0]}")
    from . import shape as _S
    vb = db.values if sign > 0 else -db.values
    dt = _dt.from_np(_dt.result_type(_dt.as_dtype(da.values.dtype).np,
                                     _dt.as_dtype(vb.dtype).np))
    return SparseTensor(_S.cat([da.indices, db.indices], 1),
                        _S.cat([da.values.to(dt), vb.to(dt)], 0), da.shape, False)


def mv(input, vec):
    """``input @ vec`` for a sparse COO matrix and a dense vector, as ``torch.mv``:
    a dense vector, differentiable as ``tg.sparse.mm``."""
    _sparse_arg("mv", "input", input)
    if not isinstance(vec, Tensor) or isinstance(vec, SparseTensor) or vec.ndim != 1:
        raise RuntimeError(f"mv: vec must be a dense 1-D Tensor, got "
                           f"{getattr(vec, 'shape', type(vec).__name__)}")
    return mm(input, vec.reshape(-1, 1)).reshape(-1)



def _unique(idx, shape, inverse=False):
    """The sorted distinct columns of COO indices ``idx``, the position of each one's
    first occurrence (and, with ``inverse``, each column's place among them)."""
    sd = idx.shape[0]
    if not idx.shape[1]:
        e = np.zeros(0, np.int64)
        return (np.zeros((sd, 0), np.int64), e) + ((e,) if inverse else ())
    keys = np.ravel_multi_index(tuple(idx), tuple(shape[:sd]))
    uniq, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    cols = np.stack(np.unravel_index(uniq, tuple(shape[:sd]))).astype(np.int64).reshape(sd, -1)
    return (cols, first) + ((inv.reshape(-1),) if inverse else ())


def _host(t):
    a = t._data
    return a if isinstance(a, np.ndarray) else a.get()


# ------------------------------------------------------------------ public functions
def _as_index_tensor(indices, device):
    if isinstance(indices, Tensor):
        return indices.to(device=device) if indices.device != device else indices
    return _C.tensor(np.asarray(indices), device=device)


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """A sparse COO tensor with ``values[k]`` at ``indices[:, k]`` (duplicates add up),
    as ``torch.sparse_coo_tensor``: ``size`` defaults to the smallest that holds the
    indices."""
    if not isinstance(values, Tensor):
        values = _C.tensor(values, dtype=dtype, device=device)
    elif dtype is not None and values.dtype != dtype:
        values = values.to(dtype)
    if device is not None:
        values = values.to(device=device)
    indices = _as_index_tensor(indices, values.device)
    if indices.dtype not in (_dt.int64, _dt.int32):
        raise op_error("sparse_coo_tensor", f"indices must be an int64 tensor, got "
                                            f"{indices.dtype}", RuntimeError)
    if indices.dtype != _dt.int64:
        indices = indices.to(_dt.int64)
    if indices.ndim != 2:
        raise op_error("sparse_coo_tensor", f"indices must be 2-D (sparse_dim, nnz), got "
                                            f"shape {tuple(indices.shape)}", RuntimeError)
    sd, nnz = tuple(indices.shape)
    if size is None:  # (the indices' values read as guarded numbers: see ops/_checks.py)
        size = tuple(int_value(indices, lambda v, d=d: v[d].max(), by_position=True) + 1
                     if nnz else 0
                     for d in range(sd)) + tuple(values.shape[1:])
    size = tuple(int(s) for s in size)
    _check_coo("sparse_coo_tensor", indices._data, values._data, size)
    if nnz and any_value(indices, lambda v: functools.reduce(
            operator.or_, [(v[d] < 0) | (v[d] >= size[d]) for d in range(sd)]),
            by_position=True):
        idx = _host(indices)
        lo, hi = idx.min(1), idx.max(1)
        for d in range(sd):
            if lo[d] < 0:
                raise op_error("sparse_coo_tensor", f"found negative index {lo[d]} for dim {d}",
                               RuntimeError)
            if hi[d] >= size[d]:
                raise op_error("sparse_coo_tensor", f"size is inconsistent with indices: for "
                                                    f"dim {d}, size is {size[d]} but found index "
                                                    f"{hi[d]}", RuntimeError)
    if requires_grad:
        if values.requires_grad and not values.is_leaf:
            raise RuntimeError("sparse_coo_tensor: requires_grad=True makes a leaf; the values "
                               "already require grad (leave requires_grad unset)")
        values = values.detach().requires_grad_(True)
    coalesced = nnz <= 1 if is_coalesced is None else bool(is_coalesced)
    return SparseTensor(indices, values, size, coalesced)


def _to_sparse(self, sparse_dim=None):
    """The sparse COO form of a dense tensor (its nonzeros; differentiable to ``self``)."""
    sd = self.ndim if sparse_dim is None else int(sparse_dim)
    if not 0 < sd <= self.ndim:
        raise op_error("to_sparse", f"sparse_dim must be in [1, {self.ndim}], got {sd}",
                       RuntimeError)
    a = self._data
    host = a if isinstance(a, np.ndarray) else a.get()
    nz = host != 0
    if sd < self.ndim:
        nz = nz.any(axis=tuple(range(sd, self.ndim)))
    idx = np.stack(np.nonzero(nz)).astype(np.int64).reshape(sd, -1)
    it = _C.tensor(idx, device=self.device)
    values = self[tuple(it[d] for d in range(sd))]
    return SparseTensor(it, values, tuple(self.shape), True)


# the dense Tensor's methods (ops/methods.py installs them)
TABLE = {"to_sparse": _to_sparse, "to_sparse_coo": _to_sparse, "to_dense": _dense_to_dense}


def _sparse_arg(name, what, a):
    if not isinstance(a, SparseTensor):
        raise TypeError(f"{name}: {what} must be a sparse COO tensor, got "
                        f"{type(a).__name__} with layout {getattr(a, 'layout', None)}")


def mm(mat1, mat2):
    """``mat1 @ mat2`` for a sparse COO ``mat1`` (2-D) and a dense ``mat2``, as
    ``torch.sparse.mm``: a dense result; gradients to ``mat2`` and to ``mat1``'s values
    (the product ``grad @ mat2^T`` sampled at ``mat1``'s stored elements)."""
    _sparse_arg("sparse.mm", "mat1", mat1)
    if isinstance(mat2, SparseTensor):
        raise NotImplementedError("sparse.mm: a sparse mat2 is not supported (layout "
                                  "torch.sparse_coo); call mat2.to_dense()")
    if not isinstance(mat2, Tensor):
        raise TypeError(f"sparse.mm: mat2 must be a Tensor, got {type(mat2).__name__}")
    d = mat1._data
    return bind(SPARSE_MM, d.indices, d.values, mat2, size=d.shape)


def spmm(input, mat2):
    """``input @ mat2`` for a sparse COO (or dense) 2-D ``input`` and a dense ``mat2``,
    as ``torch.spmm``: dense, differentiable as ``tg.sparse.mm``."""
    if isinstance(input, SparseTensor):
        return mm(input, mat2)
    if not isinstance(input, Tensor):
        raise TypeError(f"spmm: input must be a Tensor, got {type(input).__name__}")
    return input.mm(mat2)


def _dense_mm_sparse(mat1, mat2):
    """``mat1 @ mat2`` for a dense ``mat1`` and a sparse COO ``mat2`` (both 2-D), as
    PyTorch's: dense, ``(mat2^T @ mat1^T)^T`` with the sparse product (the transpose of
    a COO matrix swaps its index rows)."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise op_error("mm", f"a dense @ sparse product takes 2-D operands, got "
                             f"{mat1.ndim}-D and {mat2.ndim}-D", RuntimeError)
    if mat1.shape[1] != mat2.shape[0]:
        raise op_error("mm", f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x"
                             f"{mat1.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})",
                       RuntimeError)
    d = mat2._data
    return bind(SPARSE_MM, d.indices[[1, 0]], d.values, mat1.transpose(0, 1),
                size=(d.shape[1], d.shape[0])).transpose(0, 1)


def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``beta * input + alpha * (mat1 @ mat2)`` for a sparse ``mat1``, as
    ``torch.sparse.addmm``."""
    p = mm(mat1, mat2)
    if (_state.autocast is not None and isinstance(input, Tensor)
            and input.dtype.is_floating_point and input.dtype != _dt.float64
            and input.dtype != p.dtype):
        input = input.to(p.dtype)  # autocast lowers addmm as a whole, input included
    if alpha != 1:
        p = p * alpha
    if beta == 0:
        return p + _C.zeros_like(input) if isinstance(input, Tensor) else p
    return p + (input if beta == 1 else input * beta)


def _sparse_sum(input, dim=None, dtype=None):
    """The sum of a sparse tensor's elements, as ``torch.sparse.sum``: over every dim
    (a 0-d dense tensor), or over ``dim``: dense when every sparse dim is summed, else a
    coalesced sparse tensor."""
    _sparse_arg("sparse.sum", "input", input)
    d = input._data
    values = d.values if dtype is None else d.values.to(dtype)
    if dim is None:
        return _R.sum(values)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    nd = len(d.shape)
    norm = set()
    for k in dims:
        if not -nd <= k < nd:
            raise op_error("sparse.sum", f"dim {k} is out of range for a {nd}-D tensor",
                           IndexError)
        norm.add(k % nd)
    sd = d.indices.shape[0]
    dense_red = tuple(1 + k - sd for k in sorted(norm) if k >= sd)
    if dense_red:
        values = _R.sum(values, dense_red)
    keep = [k for k in range(sd) if k not in norm]
    if not keep:
        return _R.sum(values, 0)
    shape = tuple(d.shape[k] for k in keep) + tuple(
        s for k, s in enumerate(d.shape) if k >= sd and k not in norm)
    idx = d.indices[_C.tensor(np.array(keep, np.int64), device=values.device)]
    return SparseTensor(idx, values, shape, False).coalesce()


sum = _sparse_sum  # tg.sparse.sum (the name shadows the builtin in this module's namespace)


def is_sparse(t):
    return isinstance(t, SparseTensor)
