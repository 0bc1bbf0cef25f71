"""fractional_max_pool2d / fractional_max_pool3d (Graham's fractional max pooling), as
PyTorch: windows of ``kernel_size`` starting at pseudo-random steps, one uniform sample
per (batch, channel) plane and spatial dim (``_random_samples`` (N, C, 2) or (N, C, 3),
drawn from tapegrad's generator when not given: ``tg.manual_seed`` repeats them).

A window's starts along a dim of input size n, output size m, pool size k, sample u:
``int((i + u) * a) - int(u * a)`` for i < m - 1 with ``a = (n - k) / (m - 1)``, and
``n - k`` for the last; computed with ops in the input's dtype (PyTorch computes in
the input's scalar type: the same roundings), so the composite batches under vmap.
The windows' values are gathered (N, C, *out, window) and the first maximum taken
(an argmax and a gather: the gradient goes to that one element, as PyTorch's). For 2-d
the samples are (width, height), for 3-d (depth, height, width), as PyTorch's kernels.
"""
import numpy as np

from ... import dtypes as _dt
from ..._util import op_error
from ...dtypes import int64
from .._decl import Sample, TensorSpec, composite, rand
from ..creation import _constant, rand as _rand_op
from ..indexing import gather
from ..reduce import argmax
from ..shape import cat, expand, reshape, squeeze, unsqueeze
from ._common import np_dtype

__all__ = ["fractional_max_pool2d", "fractional_max_pool3d"]


def _ints(name, v, n, what):
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise op_error(name, f"{what} must be an int or {n} ints, got {v!r}", ValueError)
    return vals


def _geometry(name, nd, shape, kernel_size, output_size, output_ratio):
    """(kernel, output size) checked as PyTorch: the output from ``output_size`` or
    ``output_ratio``, each window inside the input."""
    if len(shape) not in (nd + 1, nd + 2):
        raise op_error(name, f"expected a {nd + 1}-D or {nd + 2}-D input, got shape "
                             f"{tuple(shape)}", RuntimeError)
    k = tuple(int(i) for i in _ints(name, kernel_size, nd, "kernel_size"))
    if output_size is None and output_ratio is None:
        raise op_error(name, "requires specifying either an output_size or an output_ratio",
                       ValueError)
    sizes = tuple(shape[-nd:])
    if output_size is None:
        r = _ints(name, output_ratio, nd, "output_ratio")  # its range: the module's check
        out = tuple(int(n * float(x)) for n, x in zip(sizes, r))
    else:
        out = tuple(int(i) for i in _ints(name, output_size, nd, "output_size"))
    if any(kk < 1 for kk in k) or any(o < 0 for o in out):
        raise op_error(name, f"kernel_size {k} must be positive and the output size {out} "
                             f"non-negative", RuntimeError)
    for n, o, kk in zip(sizes, out, k):
        if o + kk - 1 > n:
            raise op_error(name, f"the output size {out} with pool size {k} is too large "
                                 f"for the input's spatial size {sizes} (output + pool - 1 "
                                 f"must be at most the input size)", RuntimeError)
    return k, out


def _starts(u, n, m, k):
    """The window starts (N, C, m), int64, for samples ``u`` (N, C) of one dim."""
    dt = np_dtype(u)
    last = _constant(u.new_tensor(np.full((1, 1, 1), n - k, dtype=np.int64), dtype=int64))
    if m == 1:
        return expand(last, tuple(u.shape) + (1,))
    a = dt.type(n - k) / dt.type(m - 1)  # in the input's dtype, as PyTorch's kernel
    i = _constant(u.new_tensor(np.arange(m - 1, dtype=dt)[None, None, :]))
    uu = unsqueeze(u, 2)
    seq = ((i + uu) * a).long() - (uu * a).long()  # the casts truncate (non-negative)
    return cat([seq, expand(last, tuple(u.shape) + (1,))], 2)


def _pool(name, nd, input, kernel_size, output_size, output_ratio, return_indices, samples,
          order):
    k, out = _geometry(name, nd, tuple(input.shape), kernel_size, output_size, output_ratio)
    if not _dt.is_float(np_dtype(input)):
        raise op_error(name, f"expected a floating point input, got {input.dtype}",
                       RuntimeError)
    one = input.ndim == nd + 1
    x = unsqueeze(input, 0) if one else input
    N, C = x.shape[:2]
    sizes = tuple(x.shape[2:])
    if samples is None:
        samples = _rand_op(N, C, nd, dtype=input.dtype, device=input.device)
    if tuple(samples.shape) != (N, C, nd):
        raise op_error(name, f"expected _random_samples of shape {(N, C, nd)}, got "
                             f"{tuple(samples.shape)}", RuntimeError)
    if 0 in out:  # an empty output, as PyTorch
        y = x.new_zeros((N, C) + out)
        idx = x.new_zeros((N, C) + out, dtype=int64)
        y, idx = (y[0], idx[0]) if one else (y, idx)
        return (y, idx) if return_indices else y
    # the flat input index of every window element: (N, C, *out, *k)
    lin = None
    for d in range(nd):
        st = _starts(samples[:, :, order[d]], sizes[d], out[d], k[d])  # (N, C, m)
        pos = unsqueeze(st, 3) + _constant(st.new_tensor(
            np.arange(k[d], dtype=np.int64)[None, None, None], dtype=int64))
        shape = [N, C] + [1] * nd + [1] * nd
        shape[2 + d], shape[2 + nd + d] = out[d], k[d]
        pos = reshape(pos, tuple(shape))
        lin = pos if lin is None else lin * sizes[d] + pos
    full = (N, C) + out + k
    lin = reshape(expand(lin, full), (N, C, -1))
    flat = reshape(x, (N, C, -1))
    K = int(np.prod(k))
    vals = reshape(gather(flat, 2, lin), (N, C, int(np.prod(out)), K))
    best = argmax(vals, 3, keepdim=True)
    y = reshape(squeeze(gather(vals, 3, best), 3), (N, C) + out)
    if not return_indices:
        return y[0] if one else y
    idx = reshape(squeeze(gather(reshape(lin, (N, C, -1, K)), 3, best), 3), (N, C) + out)
    return (y[0], idx[0]) if one else (y, idx)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    """Fractional max pooling over (N, C, H, W) (or (C, H, W)); ``_random_samples``
    (N, C, 2) in [0, 1), drawn from tapegrad's generator when None."""
    return _pool("fractional_max_pool2d", 2, input, kernel_size, output_size, output_ratio,
                 return_indices, _random_samples, order=(1, 0))


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    """Fractional max pooling over (N, C, D, H, W) (or (C, D, H, W)); ``_random_samples``
    (N, C, 3) in [0, 1), drawn from tapegrad's generator when None."""
    return _pool("fractional_max_pool3d", 3, input, kernel_size, output_size, output_ratio,
                 return_indices, _random_samples, order=(0, 1, 2))


# ------------------------------------------------------------------ the registry
def _infer(name, nd):
    def infer(x, samples=None, kernel_size=1, output_size=None, output_ratio=None,
              return_indices=False):
        _, out = _geometry(name, nd, tuple(x.shape), kernel_size, output_size, output_ratio)
        lead = tuple(x.shape[:-nd])
        return TensorSpec(lead + out, np.dtype(x.dtype))
    return infer


def _torch(name):
    def oracle(torch, x, samples=None, **kw):
        return getattr(torch.nn.functional, name)(
            x, _random_samples=None if samples is None else samples.detach(), **kw)
    return oracle


def _distinct(shape, seed, dtype):
    """Values without ties (a max's gradient is then one element's)."""
    r = np.random.default_rng(seed)
    return (r.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 3).astype(dtype)


def _samples2(dtype=np.float64):
    return [
        Sample((_distinct((2, 2, 7, 6), 0, dtype), rand((2, 2, 2), dtype, 0, 1, seed=1)),
               {"kernel_size": 2, "output_size": (4, 3)}),
        Sample((_distinct((1, 3, 8, 8), 2, dtype), rand((1, 3, 2), dtype, 0, 1, seed=3)),
               {"kernel_size": (3, 2), "output_ratio": (0.5, 0.5)}),
        Sample((_distinct((2, 5, 5), 4, dtype), rand((1, 2, 2), dtype, 0, 1, seed=5)),
               {"kernel_size": 2, "output_size": 3})]


def _samples3(dtype=np.float64):
    return [
        Sample((_distinct((1, 2, 5, 6, 5), 0, dtype), rand((1, 2, 3), dtype, 0, 1, seed=1)),
               {"kernel_size": 2, "output_size": (3, 4, 2)}),
        Sample((_distinct((2, 1, 6, 5, 4), 2, dtype), rand((2, 1, 3), dtype, 0, 1, seed=3)),
               {"kernel_size": (2, 3, 1), "output_ratio": (0.5, 0.5, 0.5)})]


for _fn, _nd, _samples in ((fractional_max_pool2d, 2, _samples2),
                           (fractional_max_pool3d, 3, _samples3)):
    _shape = (1, 2) + (5,) * _nd
    composite(_fn, infer=_infer(_fn.__name__, _nd), args=("input", "_random_samples"),
              optional=("_random_samples",), by_name=True, samples=_samples,
              error_samples=lambda _nd=_nd, _shape=_shape: [
                  ((rand(_shape), rand((1, 2, _nd), low=0, high=1)), {"kernel_size": 2},
                   ValueError),
                  ((rand(_shape), rand((1, 2, _nd), low=0, high=1)),
                   {"kernel_size": 3, "output_size": 4}, RuntimeError),
                  ((rand(_shape), rand((1, 2, _nd), low=0, high=1)),
                   {"kernel_size": 2, "output_ratio": (1.5,) * _nd}, RuntimeError)],
              torch=_torch(_fn.__name__))
