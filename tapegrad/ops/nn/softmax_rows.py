"""Softmax and log-softmax over the last dim of C-contiguous NumPy float32/float64
arrays, forward and backward, one compiled pass per row (max, exponentials, their sum,
the outputs while the row is in cache), the rows split over the CPU threads; and the
same row pass for cross-entropy's one-node path (``loss.py``: the loss and each row's
max and log-sum-exp, then the gradient ``(softmax - onehot) * g``).

NumPy's passes over the whole array (max, subtract, exp, sum, divide: five reads and
writes of it) and Numba's scalar ``expf`` took 6.5x PyTorch's time on attention's
(64, 4, 64, 64) float32 scores. Float32's exponentials are the vectorisable ones of
``fusion/approx.py`` (``exp`` of a non-positive argument: ``x - max`` and a
log-probability are); float64's are libm's.

A row holding a NaN gives NaNs (its sum is NaN), a row of -inf NaNs, as PyTorch.

    kernels(dtype) -> (forward(n, x, out, log), backward(n, y, g, out, log),
                       xent_forward(x, tgt, lse), xent_backward(x, tgt, lse, g, out))
                      or None
    forward / backward: serial nogil loops over ``n`` rows of 2-D arrays
    run(kernel, rows, *arrays, flag): the rows split over the threads (``cpu.run_rows``)
"""
import numpy as np

from ...devices import cpu
from ...fusion import approx

_SOURCE = """
import numpy as np
from tapegrad.devices.cpu import jit_helpers as _jit_helpers
{head}
_h = _jit_helpers()
_zero = {t}(0.0)


def _rowsum(a, r):
    s = _zero
    for j in range(a.shape[1]):
        s += a[r, j]
    return s


def _rowdot(a, b, r):
    s = _zero
    for j in range(a.shape[1]):
        s += a[r, j] * b[r, j]
    return s


# (the sums reassociated, so that they vectorise; nothing else: x - max - log(sum)
# must stay in that order, as PyTorch's)
_rowsum = _h.helper(_rowsum, fastmath=("reassoc", "contract", "nsz"))
_rowdot = _h.helper(_rowdot, fastmath=("reassoc", "contract", "nsz"))


def _shifted_exp(x, r, buf):
    # buf[0] = exp(x[r] - max(x[r])); returns (the max, the sum of buf[0])
    m = x[r, 0]
    for j in range(1, x.shape[1]):
        if x[r, j] > m:
            m = x[r, j]
    for j in range(x.shape[1]):
        buf[0, j] = {exp}(x[r, j] - m)
    return m, _rowsum(buf, 0)


_shifted_exp = _h.helper(_shifted_exp, fastmath=("contract", "nsz"))


def forward(n, x, out, log):
    C = x.shape[1]
    buf = np.empty((1, C), x.dtype)  # (the exponentials: out may be x)
    for r in range(n):
        m, s = _shifted_exp(x, r, buf)
        if log:
            ls = np.log(s)
            for j in range(C):
                out[r, j] = (x[r, j] - m) - ls
        else:
            for j in range(C):
                out[r, j] = buf[0, j] / s


def backward(n, y, g, out, log):
    # softmax: out = y (g - sum(g y)); log-softmax: out = g - exp(y) sum(g)
    C = y.shape[1]
    for r in range(n):
        if log:
            s = _rowsum(g, r)
            for j in range(C):
                out[r, j] = g[r, j] - {exp}(y[r, j]) * s
        else:
            s = _rowdot(g, y, r)
            for j in range(C):
                out[r, j] = y[r, j] * (g[r, j] - s)


def xent_forward(x, tgt, lse):
    # cross-entropy of class tgt[r] per row (-1: ignored), summed; lse (N, 2): each
    # row's max and the log of its sum of exponentials, for xent_backward
    buf = np.empty((1, x.shape[1]), x.dtype)
    total = 0.0
    for r in range(x.shape[0]):
        m, s = _shifted_exp(x, r, buf)
        ls = np.log(s)
        lse[r, 0] = m
        lse[r, 1] = ls
        t = tgt[r]
        if t >= 0:
            total -= (x[r, t] - m) - ls
    return total


def xent_backward(x, tgt, lse, gs, out):
    # (softmax - onehot) * gs; an ignored row zeros, NaNs where its log-softmax is NaN,
    # as PyTorch's
    for r in range(x.shape[0]):
        t = tgt[r]
        m = lse[r, 0]
        ls = lse[r, 1]
        w = gs if t >= 0 else _zero
        for j in range(x.shape[1]):
            out[r, j] = {exp}((x[r, j] - m) - ls) * w
        if t >= 0:
            out[r, t] -= gs
"""

_KERNELS = {}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def kernels(dtype):
    """(forward, backward, xent_forward, xent_backward) compiled for ``dtype``
    (float32/float64), or None (another dtype, or Numba unusable)."""
    dt = np.dtype(dtype)
    if dt not in _DTYPES:
        return None
    if dt.char not in _KERNELS:
        _KERNELS[dt.char] = None
        f32 = dt.char == "f"
        head = ""
        if f32:
            head = "\n".join([f"from tapegrad.fusion.approx import helpers as _approx  "
                              f"# {approx.tag()}", "_A = _approx()"] +
                             [f"{h} = _A.{h}" for h in approx.needed(["_expneg"])])
        src = _SOURCE.format(head=head, t="np.float32" if f32 else "np.float64",
                             exp="_expneg_f32" if f32 else "np.exp")
        try:
            _KERNELS[dt.char] = tuple(
                cpu.compile_source(("softmax_rows", name, src), src, name, parallel=False,
                                   fastmath=("contract", "nsz"), error_model="numpy")
                for name in ("forward", "backward", "xent_forward", "xent_backward"))
        except Exception:  # no Numba: the callers' NumPy passes
            _KERNELS[dt.char] = None
    return _KERNELS[dt.char]


def applies(x, dim):
    """Whether the row kernels take ``x`` along ``dim``: a C-contiguous NumPy
    float32/float64 array with elements, over its last dim."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.size > 0 and x.ndim > 0
            and dim % x.ndim == x.ndim - 1 and x.flags.c_contiguous)


def run(kernel, *arrays, log):
    """``kernel`` over the rows of ``arrays`` (each reshaped to (rows, last dim);
    the last one written), on every thread for large arrays."""
    C = arrays[0].shape[-1]
    rows = arrays[0].size // C
    flat = [a.reshape(rows, C) for a in arrays]
    cpu.run_rows(kernel, rows, *flat, log, per_row=C)
