"""softmax and log_softmax: max-shifted, so large inputs do not overflow."""
import numpy as np

from ...devices import cuda as _cuda, cuda_kernels as _cuda_kernels
from ...dispatch import bind
from ..._util import normalize_dim, op_error
from ...devices import cpu as _cpu
from .. import _vmap
from .._decl import register, Sample, TensorSpec, rand as _rand


def _softmax_infer(name):
    def infer(x, dim):
        normalize_dim(name, dim, len(x.shape))
        if np.dtype(x.dtype).kind != "f":
            raise op_error(name, f"expected a floating point input, got {np.dtype(x.dtype)}",
                           TypeError)
        return TensorSpec(tuple(x.shape), x.dtype)
    return infer


def _log_softmax_rows(x, out):
    for r in range(x.shape[0]):
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            v = x[r, j]
            if v > m or v != v:
                m = v
                if v != v:
                    break
        s = 0.0
        for j in range(x.shape[1]):
            s += np.exp(x[r, j] - m)
        lse = np.log(s)
        for j in range(x.shape[1]):
            out[r, j] = (x[r, j] - m) - lse


def _softmax_rows(x, out):
    for r in range(x.shape[0]):
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            v = x[r, j]
            if v > m or v != v:
                m = v
                if v != v:
                    break
        s = 0.0
        for j in range(x.shape[1]):
            e = np.exp(x[r, j] - m)
            out[r, j] = e
            s += e
        for j in range(x.shape[1]):
            out[r, j] = out[r, j] / s


_LOG_SOFTMAX_ROWS = _cpu.njit(_log_softmax_rows, error_model="numpy")
_SOFTMAX_ROWS = _cpu.njit(_softmax_rows, error_model="numpy")


def _rows_into(k, x, dim, out):
    """``out=``: the row loop ``k`` over the last dim (one pass per row, no
    temporaries) where it applies (C-contiguous float NumPy arrays, the last dim,
    non-empty rows), else NumPy's result copied in; returns ``out``."""
    if (type(x) is np.ndarray and type(out) is np.ndarray and x.dtype.kind == "f"
            and x.dtype == out.dtype and x.size and dim % x.ndim == x.ndim - 1
            and x.flags.c_contiguous and out.flags.c_contiguous):
        n = x.shape[-1]
        k(x.reshape(-1, n), out.reshape(-1, n))
        return out
    return None


def _log_softmax_kernel(x, dim, out=None):
    if out is not None:
        if _rows_into(_LOG_SOFTMAX_ROWS, x, dim, out) is None:
            out[...] = _log_softmax_kernel(x, dim)
        return out
    if _cuda.is_cupy(x):  # one CUDA row kernel over the last dim (None: the array code)
        y = _cuda_kernels.softmax(x, dim, log=True)
        if y is not None:
            return y
    mx = np.max(x, axis=dim, keepdims=True) if x.size else 0
    shifted = x - mx
    return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


def _log_softmax_vjp(ctx, g):
    m = ctx.m
    dim = ctx.attrs["dim"]
    return (g - m.exp(ctx.out) * m.sum(g, dim=dim, keepdim=True),)


def _softmax_samples(dtype=np.float64):
    return [Sample((_rand((3, 5), dtype, seed=1),), {"dim": 1}),
            Sample((_rand((2, 3, 4), dtype, seed=2),), {"dim": 0}),
            Sample((_rand((4,), dtype, seed=3) * 40,), {"dim": 0})]


def _log_softmax_jvp(ctx, t):
    m = ctx.m
    return (t - m.sum(m.exp(ctx.out) * t, dim=ctx.attrs["dim"], keepdim=True),)


LOG_SOFTMAX = register(name="log_softmax", vmap=_vmap.dim_attrs(), jvp=_log_softmax_jvp, kernel=_log_softmax_kernel,
                       infer=_softmax_infer("log_softmax"), vjp=_log_softmax_vjp, saves=("out",),
                       samples=_softmax_samples,
                       error_samples=lambda: [((_rand((3, 4)),), {"dim": 2}, IndexError)],
                       torch=lambda torch, x, dim: torch.log_softmax(x, dim))


def _softmax_kernel(x, dim, out=None):
    if out is not None:
        if _rows_into(_SOFTMAX_ROWS, x, dim, out) is None:
            out[...] = _softmax_kernel(x, dim)
        return out
    if _cuda.is_cupy(x):
        y = _cuda_kernels.softmax(x, dim, log=False)
        if y is not None:
            return y
    mx = np.max(x, axis=dim, keepdims=True) if x.size else 0
    e = np.exp(x - mx)
    return e / np.sum(e, axis=dim, keepdims=True)


def _softmax_vjp(ctx, g):
    out = ctx.out
    gy = g * out
    return (gy - out * ctx.m.sum(gy, dim=ctx.attrs["dim"], keepdim=True),)


def _softmax_jvp(ctx, t):
    m = ctx.m
    out = ctx.out
    return (out * (t - m.sum(out * t, dim=ctx.attrs["dim"], keepdim=True)),)


SOFTMAX = register(name="softmax", vmap=_vmap.dim_attrs(), jvp=_softmax_jvp, kernel=_softmax_kernel, infer=_softmax_infer("softmax"),
                   vjp=_softmax_vjp, saves=("out",), samples=_softmax_samples,
                   error_samples=lambda: [((_rand((3, 4)),), {"dim": -3}, IndexError)],
                   torch=lambda torch, x, dim: torch.softmax(x, dim))


def _dim_of(name, input, dim):
    if dim is None:
        nd = len(input.shape)
        dim = 0 if nd in (0, 1, 3) else 1  # PyTorch's legacy implicit choice
    return normalize_dim(name, dim, len(input.shape))


def log_softmax(input, dim=None, dtype=None):
    """``log(softmax(input))`` computed stably (max-shifted)."""
    if dtype is not None:
        input = input.to(dtype)
    return bind(LOG_SOFTMAX, input, dim=_dim_of("log_softmax", input, dim))


def softmax(input, dim=None, dtype=None):
    """``exp(input)`` normalised to sum 1 along ``dim``, computed max-shifted."""
    if dtype is not None:
        input = input.to(dtype)
    return bind(SOFTMAX, input, dim=_dim_of("softmax", input, dim))
