"""conv2d on the CPU: batched GEMMs over the CPU threads, and col2im as a Numba loop."""
import numpy as np

from ..cpu import blas_single_thread, njit, run_chunked, run_rows


def bmm(a, b, out):
    """``np.matmul(a, b, out=out)`` batched over the leading dim of ``out``, in chunks
    of the batch on the CPU threads with BLAS itself on one thread (its idle workers
    spin-wait after each multi-threaded call, which slows the kernels that run next
    on a small machine 3-5x). ``a`` or ``b`` may lack the batch dim (shared by all)."""
    a_b, b_b = a.ndim == out.ndim, b.ndim == out.ndim  # which carry the batch dim

    def work(n, rows):
        lo, hi = rows[0], rows[-1] + 1
        np.matmul(a[lo:hi] if a_b else a, b[lo:hi] if b_b else b, out=out[lo:hi])
    with blas_single_thread():
        run_chunked(work, out.shape[0], np.arange(out.shape[0]), min_chunk=1)
    return out


@njit
def _col2im_loop(cols, dst, sh, sw, dh, dw):
    N, C, kh, kw, Ho, Wo = cols.shape
    for n in range(N):
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    for ho in range(Ho):
                        h = ho * sh + i * dh
                        for wo in range(Wo):
                            dst[n, c, h, wo * sw + j * dw] += cols[n, c, i, j, ho, wo]


def col2im_add(cols, dst, stride, dilation):
    """``dst[n, c, i*dh + ho*sh, j*dw + wo*sw] += cols[n, c, i, j, ho, wo]`` for
    (N, C, kh, kw, Ho, Wo) ``cols`` (NumPy's strided adds cost ~10 ns/element here)."""
    (sh, sw), (dh, dw) = stride, dilation
    run_rows(lambda n, c, d: _col2im_loop(c, d, sh, sw, dh, dw), cols.shape[0], cols, dst,
             per_row=cols[0].size)
