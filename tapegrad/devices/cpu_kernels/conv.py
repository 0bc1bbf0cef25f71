"""conv2d on the CPU: batched GEMMs over the CPU threads, and im2col and col2im as Numba
loops that read and write the unpadded image (the zero padding is taken in the loop,
with no padded copy of the image); conv2d and its two gradients as one parallel region
each over chunks of the batch (``conv2d``, ``conv2d_weight_grad``,
``conv2d_input_grad`` at the end)."""
import functools

import numpy as np

from ..cpu import blas_single_thread, compile_source, njit, numba, run_chunked, run_rows, threads

# Chunks of the batch per CPU thread in the conv kernels' parallel regions. Each
# chunk's im2col, GEMM and epilogue are separate native calls with Python between
# them, so each chunk hands the GIL back and forth between the threads; at 2 threads
# the small CNN's compiled step ran ~15% faster with one chunk per thread than with
# four (the claiming stays dynamic: a worker the OS has not scheduled yet leaves its
# chunk to the caller).
CHUNKS_PER_THREAD = 1
NATIVE = True  # a fused conv layer's chunk as one native call where it can (_native_work)


def few_chunks(n):
    """``min_chunk`` for ``run_chunked`` over ``n`` rows: ``CHUNKS_PER_THREAD`` chunks
    per thread."""
    return max(1, -(-n // (CHUNKS_PER_THREAD * threads())))


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
        run_chunked(work, out.shape[0], np.arange(out.shape[0]), min_chunk=few_chunks(out.shape[0]))
    return out


@njit
def _im2col_dense(x, cols):
    """im2col for stride 1, dilation 1, no padding: every index provably non-negative,
    so the inner copy vectorises (no wraparound test per element). On flat views with
    unsigned running offsets: ~10% faster than 6-D indexing on the CNN's second layer
    (the index arithmetic, not the copy, was the cost). Rows of at most 16 are copied
    as 16 values, all loaded before any is stored (one vector load and store; the
    extra values land where the next row is written next), wherever 16 fit in ``x``
    and ``cols``: 2x faster on the small CNN's 11-wide rows, where the plain loop
    spent its time on the runtime overlap test and the scalar tail."""
    N, C, kh, kw, Ho, Wo = cols.shape
    H, W = x.shape[2], x.shape[3]
    xf = x.reshape(-1)
    cf = cols.reshape(-1)
    U = np.uint64
    nx, nc_ = U(xf.size), U(cf.size)
    o = U(0)
    for nc in range(N * C):
        base = nc * H * W
        for i in range(kh):
            for j in range(kw):
                for ho in range(Ho):
                    s = U(base + (ho + i) * W + j)
                    if Wo <= 16 and s + U(16) <= nx and o + U(16) <= nc_:
                        t0, t1, t2, t3 = xf[s], xf[s + U(1)], xf[s + U(2)], xf[s + U(3)]
                        t4, t5, t6, t7 = (xf[s + U(4)], xf[s + U(5)], xf[s + U(6)],
                                          xf[s + U(7)])
                        t8, t9, t10, t11 = (xf[s + U(8)], xf[s + U(9)], xf[s + U(10)],
                                            xf[s + U(11)])
                        t12, t13, t14, t15 = (xf[s + U(12)], xf[s + U(13)], xf[s + U(14)],
                                              xf[s + U(15)])
                        cf[o], cf[o + U(1)], cf[o + U(2)], cf[o + U(3)] = t0, t1, t2, t3
                        cf[o + U(4)], cf[o + U(5)], cf[o + U(6)], cf[o + U(7)] = t4, t5, t6, t7
                        cf[o + U(8)], cf[o + U(9)], cf[o + U(10)], cf[o + U(11)] = \
                            t8, t9, t10, t11
                        cf[o + U(12)], cf[o + U(13)], cf[o + U(14)], cf[o + U(15)] = \
                            t12, t13, t14, t15
                    else:
                        for wo in range(U(Wo)):
                            cf[o + wo] = xf[s + wo]
                    o += U(Wo)


@njit
def _im2col_loop(x, cols, sh, sw, ph, pw, dh, dw):
    N, C, kh, kw, Ho, Wo = cols.shape
    H, W = x.shape[2], x.shape[3]
    U = np.uint64  # unsigned indices: no per-element negative-index wraparound
    for n in range(N):
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    # the output columns [lo, hi) whose tap falls inside [0, W), found
                    # once here, not tested in the inner loop
                    w0 = j * dw - pw
                    lo = 0 if w0 >= 0 else min(Wo, (sw - 1 - w0) // sw)
                    hi = max(lo, min(Wo, (W - w0 + sw - 1) // sw) if W > w0 else 0)
                    for ho in range(Ho):
                        h = ho * sh + i * dh - ph
                        if h < 0 or h >= H:
                            for wo in range(Wo):
                                cols[n, c, i, j, ho, wo] = 0
                            continue
                        for wo in range(lo):
                            cols[n, c, i, j, ho, wo] = 0
                        for wo in range(U(lo), U(hi)):
                            cols[n, c, i, j, ho, wo] = x[n, c, h, U(wo * sw + w0)]
                        for wo in range(hi, Wo):
                            cols[n, c, i, j, ho, wo] = 0


def _dense(stride, padding, dilation):
    return tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and \
        not any(padding[0]) and not any(padding[1])


def im2col(x, cols, stride, padding, dilation):
    """``cols[n, c, i, j, ho, wo] = x[n, c, ho*sh + i*dh - pt, wo*sw + j*dw - pl]`` for
    (N, C, kh, kw, Ho, Wo) ``cols``, zero where that falls in the padding."""
    x = np.ascontiguousarray(x)  # one compile of the loops per dtype, faster than strided,
    if _dense(stride, padding, dilation):  # and the dense loop reads it flat
        run_rows(lambda n, a, c: _im2col_dense(a, c), cols.shape[0], x, cols,
                 per_row=cols[0].size)
        return cols
    (sh, sw), (dh, dw) = stride, dilation
    ph, pw = padding[0][0], padding[1][0]
    run_rows(lambda n, a, c: _im2col_loop(a, c, sh, sw, ph, pw, dh, dw), cols.shape[0], x,
             cols, per_row=cols[0].size)
    return cols


@njit
def _col2im_dense(cols, dst):
    """col2im for stride 1, dilation 1, no padding (as ``_im2col_dense``)."""
    N, C, kh, kw, Ho, Wo = cols.shape
    H, W = dst.shape[2], dst.shape[3]
    for n in range(N):
        for c in range(C):
            for h in range(H):
                for w in range(W):
                    dst[n, c, h, w] = 0
            for i in range(kh):
                for j in range(kw):
                    for ho in range(Ho):
                        for wo in range(Wo):
                            dst[n, c, ho + i, wo + j] += cols[n, c, i, j, ho, wo]


@njit
def _col2im_loop(cols, dst, sh, sw, ph, pw, dh, dw):
    N, C, kh, kw, Ho, Wo = cols.shape
    H, W = dst.shape[2], dst.shape[3]
    U = np.uint64
    for n in range(N):
        for c in range(C):
            for h in range(H):
                for w in range(W):
                    dst[n, c, h, w] = 0
            for i in range(kh):
                for j in range(kw):
                    w0 = j * dw - pw
                    lo = 0 if w0 >= 0 else min(Wo, (sw - 1 - w0) // sw)
                    hi = max(lo, min(Wo, (W - w0 + sw - 1) // sw) if W > w0 else 0)
                    for ho in range(Ho):
                        h = ho * sh + i * dh - ph
                        if h < 0 or h >= H:
                            continue
                        for wo in range(U(lo), U(hi)):
                            dst[n, c, h, U(wo * sw + w0)] += cols[n, c, i, j, ho, wo]


@njit
def _bias_add_loop(out, b):
    N, C, L = out.shape
    for n in range(N):
        for c in range(C):
            v = b[c]
            for k in range(L):
                out[n, c, k] += v


def bias_add(out, b):
    """``out[n, c, ...] += b[c]`` in place, for a C-contiguous (N, C, ...) ``out``
    (one pass; NumPy's broadcast add is ~1.6x slower on the small-CNN shapes)."""
    N, C = out.shape[:2]
    o3 = out.reshape(N, C, -1)
    b = np.ascontiguousarray(b, dtype=out.dtype)  # by closure: run_rows slices arrays of N rows
    run_rows(lambda n, o: _bias_add_loop(o, b), N, o3, per_row=o3[0].size)
    return out


@njit
def _transpose_loop(src, dst):
    B, R, C = src.shape
    for b in range(B):
        for r in range(R):
            for c in range(C):
                dst[b, c, r] = src[b, r, c]


@njit
def _col2im_add_loop(cols, dst, sh, sw, dh, dw):
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
    (N, C, kh, kw, Ho, Wo) ``cols`` into an already padded ``dst`` (fold's)."""
    (sh, sw), (dh, dw) = stride, dilation
    run_rows(lambda n, c, d: _col2im_add_loop(c, d, sh, sw, dh, dw), cols.shape[0], cols, dst,
             per_row=cols[0].size)


# ---------------------------------------------------------------- whole kernels
# One parallel region per kernel: each chunk of the batch runs its im2col, GEMM and
# epilogue in turn on one thread (a region per phase waited for the slowest thread
# at every phase and paid the hand-off each time).
def _im2col_fn(stride, padding, dilation):
    if _dense(stride, padding, dilation):
        return _im2col_dense
    (sh, sw), (dh, dw) = stride, dilation
    ph, pw = padding[0][0], padding[1][0]
    return lambda x, c: _im2col_loop(x, c, sh, sw, ph, pw, dh, dw)


def _col2im_fn(stride, padding, dilation):
    if _dense(stride, padding, dilation):
        return _col2im_dense
    (sh, sw), (dh, dw) = stride, dilation
    ph, pw = padding[0][0], padding[1][0]
    return lambda c, d: _col2im_loop(c, d, sh, sw, ph, pw, dh, dw)


@njit
def _bias_relu_loop(out, b):
    """``out[n, c] = relu(out[n, c] + b[c])`` in place: eager's bias pass then its
    ReLU (NaN passes), the same arithmetic in one pass."""
    N, C, L = out.shape
    for n in range(N):
        for c in range(C):
            v = b[c]
            for k in range(L):
                s = out[n, c, k] + v
                out[n, c, k] = s if not s <= 0 else 0


@njit
def _relu_in_place(out):
    N, C, L = out.shape
    for n in range(N):
        for c in range(C):
            for k in range(L):
                s = out[n, c, k]
                out[n, c, k] = s if not s <= 0 else 0


# ---------------------------------------------------------------- one native call a chunk
# A chunk of the batch as separate native calls (im2col, NumPy's GEMMs, the epilogue)
# hands the GIL between the threads at each, so the two threads wait on each other;
# as one Numba call (the GEMMs through the CBLAS of NumPy's own OpenBLAS, with the
# parameters NumPy's matmul passes it, so the results are bitwise the same) the
# chunk runs without the GIL: the small CNN's two forward layers 676 -> 564 us.
def _numpy_gemm(char):
    """NumPy's OpenBLAS ``cblas_?gemm`` (``char`` "s" or "d") as a Numba external
    function (``blas.load``'s; pointers passed as integers: ``a.ctypes.data``), or
    None (another BLAS: the separate calls stay)."""
    from . import blas
    if not blas.load():
        return None
    return blas._sgemm if char == "s" else blas._dgemm


@functools.lru_cache(maxsize=None)
def native_parts(char):
    """The compiled parts ``_native_layer``'s generated module calls: (im2col dense,
    im2col loop, bias+ReLU, ReLU, 2x2 pooling, the GEMM)."""
    from .pool import _max_pool2x2
    nb = numba()
    opts = dict(nogil=True, cache=True)
    return (nb.njit(**opts)(_im2col_dense.py_func), nb.njit(**opts)(_im2col_loop.py_func),
            nb.njit(**opts)(_bias_relu_loop.py_func), nb.njit(**opts)(_relu_in_place.py_func),
            nb.njit(error_model="numpy", **opts)(_max_pool2x2.py_func), _numpy_gemm(char))


_LAYER_SOURCE = """\
# parts: {digest}
from tapegrad.devices.cpu_kernels.conv import native_parts

im_dense, im_loop, bias_relu, relu, pool, gemm = native_parts("{char}")


def layer(x, w, b, cols, out, vals, idx, dense, params, flags):
    N, Co, Ho, Wo = out.shape
    K = w.shape[1]
    L = Ho * Wo
    if dense:
        im_dense(x, cols)
    else:
        im_loop(x, cols, params[0], params[1], params[2], params[3], params[4], params[5])
    c3 = cols.reshape(N, K, L)
    o3 = out.reshape(N, Co, L)
    for n in range(N):  # (as NumPy's matmul: row-major, no transposes)
        gemm(101, 111, 111, Co, L, K, 1.0, w.ctypes.data, K, c3[n].ctypes.data, L, 0.0,
             o3[n].ctypes.data, L)
    if flags[0]:
        bias_relu(o3, b)
    else:
        relu(o3)
    if flags[1]:
        Hq, Wq = vals.shape[2], vals.shape[3]
        pool(out.reshape(N * Co, Ho, Wo), vals.reshape(N * Co, Hq, Wq),
             idx.reshape(N * Co, Hq, Wq))
"""


@functools.lru_cache(maxsize=None)
def _native_layer(char):
    """``layer(x, w, b, cols, out, vals, idx, dense, params, flags)``: conv2d (one
    group, ``w`` (O, K)), bias (``flags[0]``), ReLU and 2x2 max pooling
    (``flags[1]``) of a chunk of the batch in one call, or None. Generated source
    (``compile_source``: Numba caches it on disk; the called kernels' source digest
    in it, so an edit of theirs compiles it anew)."""
    if _numpy_gemm(char) is None:
        return None
    import hashlib
    import inspect

    from .pool import _max_pool2x2
    parts = "".join(inspect.getsource(f.py_func) for f in (
        _im2col_dense, _im2col_loop, _bias_relu_loop, _relu_in_place, _max_pool2x2))
    from . import blas
    parts += f"blas {blas.VERSION}"
    src = _LAYER_SOURCE.format(char=char, digest=hashlib.sha1(parts.encode()).hexdigest())
    return compile_source(("conv_layer", src), src, "layer", parallel=False, fastmath=())


@functools.lru_cache(maxsize=None)
def native_grad_parts(char):
    """The compiled parts ``_native_grads``' generated module calls."""
    from .pool import _scatter_relu_pooled_rows, _scatter_relu_rows
    nb = numba()
    opts = dict(nogil=True, cache=True)
    fns = (_scatter_relu_rows, _scatter_relu_pooled_rows, _col2im_dense, _col2im_loop,
           _to_nhwc, _im2col_nhwc, _im2col_dense, _im2col_loop, _transpose_loop)
    return tuple(nb.njit(**opts)(f.py_func) for f in fns) + (_numpy_gemm(char),)


_GRADS_SOURCE = """\
# parts: {digest}
from numba import njit

from tapegrad.devices.cpu_kernels.conv import native_grad_parts

(scatter, scatter_pooled, c2i_dense, c2i_loop, to_nhwc, im2col_nhwc, im_dense, im_loop,
 transpose, gemm) = native_grad_parts("{char}")


@njit(nogil=True, cache=True)
def pre(g, gp, idx, y, flags):
    # flags: has_pre, pooled, overlap
    if flags[0]:
        rows = g.shape[0] * idx.shape[1]
        o, i, v = g.reshape(rows, -1), idx.reshape(rows, -1), gp.reshape(rows, -1)
        if flags[1]:
            scatter_pooled(o, i, v, y.reshape(rows, -1), flags[2])
        else:
            scatter(o, i, v, y.reshape(rows, -1), flags[2])


def input_weight(g, w, ci, gx, x, xh, cw, per, gp, idx, y, flags, params):
    # flags: has_pre, pooled, overlap, dense; params: sh, sw, ph, pw, dh, dw
    n, _, Og, L = g.shape
    K = w.shape[1]
    Kw = per.shape[2]
    pre(g, gp, idx, y, flags)
    g3 = g.reshape(n, Og, L)
    c3 = ci.reshape(n, K, L)
    for s in range(n):  # (as NumPy's matmul of w's transposed view: A transposed)
        gemm(101, 112, 111, K, L, Og, 1.0, w.ctypes.data, K, g3[s].ctypes.data, L, 0.0,
             c3[s].ctypes.data, L)
    if flags[3]:
        c2i_dense(ci, gx)
    else:
        c2i_loop(ci, gx, params[0], params[1], params[2], params[3], params[4], params[5])
    to_nhwc(x, xh, params[2], params[3])
    im2col_nhwc(xh, cw)
    w3 = cw.reshape(n, L, Kw)
    for s in range(n):
        gemm(101, 111, 111, Og, Kw, L, 1.0, g3[s].ctypes.data, L, w3[s].ctypes.data, Kw, 0.0,
             per[s].ctypes.data, Kw)


def weight(x, g, cols, per, gT, gp, idx, y, flags, params):
    # flags: has_pre, pooled, overlap, dense, transposed copy of g; one group
    n, _, Og, L = g.shape
    K = per.shape[2]
    pre(g, gp, idx, y, flags)
    if flags[3]:
        im_dense(x, cols)
    else:
        im_loop(x, cols, params[0], params[1], params[2], params[3], params[4], params[5])
    g3 = g.reshape(n, Og, L)
    c3 = cols.reshape(n, K, L)
    p3 = per.reshape(n, K, Og)
    if flags[4]:
        t3 = gT.reshape(n, L, Og)
        transpose(g3, t3)
        for s in range(n):
            gemm(101, 111, 111, K, Og, L, 1.0, c3[s].ctypes.data, L, t3[s].ctypes.data, Og,
                 0.0, p3[s].ctypes.data, Og)
    else:
        for s in range(n):  # (as NumPy's matmul of g's transposed view: B transposed)
            gemm(101, 111, 112, K, Og, L, 1.0, c3[s].ctypes.data, L, g3[s].ctypes.data, L,
                 0.0, p3[s].ctypes.data, Og)
"""


@functools.lru_cache(maxsize=None)
def _native_grads(char):
    """The generated module of the conv gradients' chunks as one native call each
    (``input_weight``: ``conv2d_input_weight_grad_nhwc_work``'s; ``weight``:
    ``conv2d_weight_grad_work``'s), or None (as ``_native_layer``)."""
    if _numpy_gemm(char) is None:
        return None
    import hashlib
    import inspect

    from .pool import _scatter_relu_pooled_rows, _scatter_relu_rows
    parts = "".join(inspect.getsource(f.py_func) for f in (
        _scatter_relu_rows, _scatter_relu_pooled_rows, _col2im_dense, _col2im_loop, _to_nhwc,
        _im2col_nhwc, _im2col_dense, _im2col_loop, _transpose_loop))
    from . import blas
    parts += f"blas {blas.VERSION}"
    src = _GRADS_SOURCE.format(char=char, digest=hashlib.sha1(parts.encode()).hexdigest())
    iw = compile_source(("conv_grads_iw", src), src, "input_weight", parallel=False,
                        fastmath=())
    w = compile_source(("conv_grads_w", src), src, "weight", parallel=False, fastmath=())
    return iw, w


def _native_pre(pre, dtype):
    """(flags of the pooling pass ``pre`` runs natively, its arrays) or None."""
    if pre is None:
        z = np.zeros((1, 1, 1, 1), dtype)
        return (False, False, False), (z, np.zeros((1, 1, 1, 1), np.int64), z)
    native = getattr(pre[0], "native", None)
    if native is None or len(pre) != 4:
        return None
    gp, idx, y = pre[1:]
    if not (gp.dtype == y.dtype == dtype and idx.dtype == np.int64 and
            all(a.ndim == 4 and a.flags.c_contiguous for a in (gp, idx, y))):
        return None
    return (True, native[1], native[0]), (gp, idx, y)


def _gemm_dims_ok(*dims):
    """NumPy's matmul takes gemm (not gemv, dot) where both result dims are >= 2."""
    return all(d >= 2 for d in dims)


def _native_work(x, w, b, out, cols, stride, padding, dilation, pool):
    """``conv2d_work``'s chunk as one native call (``_native_layer``) where it applies:
    one group, a ReLU, 2x2 pooling of stride 2 or none, float32/float64, C-contiguous,
    GEMMs NumPy would not turn into vector products; else None."""
    from .pool import _max_pool2x2
    groups, Og, K = w.shape
    N, Co, Ho, Wo = out.shape
    if groups != 1 or Og < 2 or Ho * Wo < 2 or K < 1 or out.dtype != x.dtype or \
            x.dtype not in (np.float32, np.float64) or \
            (pool is not None and pool[0] is not _max_pool2x2) or \
            not all(a.flags.c_contiguous and a.dtype == x.dtype
                    for a in (x, w, out, cols) + (() if b is None else (b,))):
        return None
    layer = _native_layer("s" if x.dtype == np.float32 else "d")
    if layer is None:
        return None
    w2 = w.reshape(Og, K)
    (sh, sw), (dh, dw) = stride, dilation
    params = np.array([sh, sw, padding[0][0], padding[1][0], dh, dw], np.int64)
    flags = np.array([b is not None, pool is not None], np.bool_)
    b_ = b if b is not None else np.zeros(1, x.dtype)
    dense = _dense(stride, padding, dilation)
    none_v = np.zeros((1, 1, 1, 1), x.dtype)
    none_i = np.zeros((1, 1, 1, 1), np.int64)

    def work(n, xc, cc, oc, vc, ic):
        layer(xc, w2, b_, cc, oc, none_v if vc is None else vc, none_i if ic is None else ic,
              dense, params, flags)
    return work


def conv2d_work(x, w, bias, out, cols, stride, padding, dilation, relu=False, pool=None):
    """``conv2d``'s work as ``(fn, arrays)``: ``fn(n, *chunks of arrays)`` runs one chunk
    of the batch (``run_work`` runs them all; a caller may run it as another kernel's
    per-chunk prologue)."""
    groups, Og, K = w.shape
    N, Co, Ho, Wo = out.shape
    L = Ho * Wo
    im = _im2col_fn(stride, padding, dilation)
    x = np.ascontiguousarray(x)  # (as im2col)
    b = None if bias is None else np.ascontiguousarray(bias, dtype=out.dtype)
    pk, pv, pi = pool if pool is not None else (None, None, None)
    native = _native_work(x, w, b, out, cols, stride, padding, dilation, pool) \
        if relu and NATIVE else None
    if native is not None:
        return native, (x, cols, out, pv, pi)

    def work(n, xc, cc, oc, vc, ic):  # w and b by closure: run_chunked slices N rows
        im(xc, cc)
        o3 = oc.reshape(n, Co, L)
        np.matmul(w, cc.reshape(n, groups, K, L), out=oc.reshape(n, groups, Og, L))
        if b is not None:
            (_bias_relu_loop if relu else _bias_add_loop)(o3, b)
        elif relu:
            _relu_in_place(o3)
        if pk is not None:
            Hq, Wq = vc.shape[2], vc.shape[3]
            pk(oc.reshape(n * Co, Ho, Wo), vc.reshape(n * Co, Hq, Wq),
               ic.reshape(n * Co, Hq, Wq))
    return work, (x, cols, out, pv, pi)


def run_work(plan, pre=None):
    """Run ``conv2d_work``'s ``plan`` over the batch in one parallel region; ``pre``,
    another such plan over the same batch, runs first in each chunk (it makes the
    chunk's input: a layer before)."""
    fn, arrays = plan
    N = arrays[0].shape[0]
    if pre is not None:
        first, more = pre
        k = len(arrays)
        second = fn

        def fn(n, *a):
            first(n, *a[k:])
            second(n, *a[:k])
        arrays = tuple(arrays) + tuple(more)
    with blas_single_thread():
        run_chunked(fn, N, *arrays, min_chunk=few_chunks(N))


def run_plans(*plans):
    """Run plans (``(fn, arrays)``, as ``conv2d_work``'s) over one batch in one
    parallel region: each chunk of the batch runs them in turn (a plan may read what
    an earlier one wrote in the same rows: a layer's gradient from the next's)."""
    fns = [p[0] for p in plans]
    counts = [len(p[1]) for p in plans]
    arrays = tuple(a for p in plans for a in p[1])
    N = plans[0][1][0].shape[0]

    def fn(n, *a):
        o = 0
        for f, c in zip(fns, counts):
            f(n, *a[o:o + c])
            o += c
    with blas_single_thread():
        run_chunked(fn, N, *arrays, min_chunk=few_chunks(N))


def conv2d(x, w, bias, out, cols, stride, padding, dilation, relu=False, pool=None):
    """``out = conv2d(x, w) + bias`` for (N, C, H, W) ``x``, (groups, O/groups, K) ``w``,
    a C-contiguous (N, O, Ho, Wo) ``out`` and (N, C, kh, kw, Ho, Wo) scratch ``cols``:
    per chunk of the batch, im2col, the GEMMs straight into ``out`` and the bias.
    ``relu``: ``out`` is then ReLU'd in place, in the bias's pass. ``pool``: ``(k,
    values, indices)``, a max-pooling plane kernel (``pool.plane_kernel``) and its
    C-contiguous (N, O, Hq, Wq) results, run on the chunk's ``out`` while it is in
    cache (the epilogues of a compiled conv2d -> relu -> max_pool2d)."""
    run_work(conv2d_work(x, w, bias, out, cols, stride, padding, dilation, relu, pool))
    return out


def conv2d_weight_grad(x, g, per, cols, gT, stride, padding, dilation, pre=None):
    """``conv2d_weight_grad_work``'s plan, run."""
    run_plans(conv2d_weight_grad_work(x, g, per, cols, gT, stride, padding, dilation, pre))
    return per


def conv2d_weight_grad_work(x, g, per, cols, gT, stride, padding, dilation, pre=None,
                            native=False):
    """Per-sample weight gradients ``per[n, grp] = cols[n, grp] @ g[n, grp]^T`` for
    (N, groups, O/groups, L) ``g``, (N, groups, K, O/groups) ``per`` and scratch
    ``cols``; with a (N, groups, L, O/groups) scratch ``gT``, g is copied transposed
    first so the GEMMs run untransposed. ``pre``: ``(fn, *arrays)``, each chunk first
    computes its rows of ``g`` (C-contiguous) with ``fn(n, *chunks of arrays, g's
    chunk)`` (the gradient reaching the conv, made in the same region). ``native``:
    each chunk one native call where ``_native_weight_work`` applies (the compiled
    programs' fused steps: the eager kernel keeps the separate calls, whose Numba
    kernels are already compiled)."""
    N, groups, Og, L = g.shape
    K = per.shape[2]
    im = _im2col_fn(stride, padding, dilation)
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)  # (as conv2d)

    native = _native_weight_work(x, g, per, cols, gT, stride, padding, dilation, pre) \
        if NATIVE and native else None
    if native is not None:
        return native
    fn, extra = (pre[0], pre[1:]) if pre is not None else (None, ())

    def work(n, xc, gc, cc, pc, tc, *ec):
        if fn is not None:
            fn(n, *ec, gc)
        im(xc, cc)
        if tc is None:
            rhs = gc.transpose(0, 1, 3, 2)
        else:
            _transpose_loop(gc.reshape(n * groups, Og, L), tc.reshape(n * groups, L, Og))
            rhs = tc
        np.matmul(cc.reshape(n, groups, K, L), rhs, out=pc)
    return work, (x, g, cols, per, gT, *extra)


def _native_weight_work(x, g, per, cols, gT, stride, padding, dilation, pre):
    N, groups, Og, L = g.shape
    K = per.shape[2]
    dt = g.dtype
    if groups != 1 or dt not in (np.float32, np.float64) or not _gemm_dims_ok(K, Og) or \
            not all(a.dtype == dt and a.flags.c_contiguous for a in (x, g, per, cols)) or \
            (gT is not None and not (gT.dtype == dt and gT.flags.c_contiguous)):
        return None
    p = _native_pre(pre, dt)
    mods = _native_grads("s" if dt == np.float32 else "d")
    if p is None or mods is None:
        return None
    flags = np.array(p[0] + (_dense(stride, padding, dilation), gT is not None), np.bool_)
    (sh, sw), (dh, dw) = stride, dilation
    params = np.array([sh, sw, padding[0][0], padding[1][0], dh, dw], np.int64)
    k = mods[1]
    t = gT if gT is not None else np.zeros((1, 1, 1, 1), dt)

    def work(n, xc, gc, cc, pc, tc, gp, idx, y):
        k(xc, gc, cc, pc, t if tc is None else tc, gp, idx, y, flags, params)
    return work, (x, g, cols, per, gT, *p[1])


def conv2d_input_grad(g, wT, out, cols, stride, padding, dilation):
    """``out`` = the input gradient for (N, groups, O/groups, L) ``g`` and (groups, K,
    O/groups) ``wT``: per chunk of the batch, the GEMMs into scratch ``cols`` (N, C,
    kh, kw, Ho, Wo), then col2im into ``out`` (N, C, H, W)."""
    N, groups, Og, L = g.shape
    K = wT.shape[1]
    c2i = _col2im_fn(stride, padding, dilation)

    def work(n, gc, cc, oc):
        np.matmul(wT, gc, out=cc.reshape(n, groups, K, L))
        c2i(cc, oc)
    with blas_single_thread():
        run_chunked(work, N, g, cols, out, min_chunk=few_chunks(N))
    return out


# ---------------------------------------------------------------- channels-last columns
# The weight gradient for stride 1, dilation 1, one group and enough channels
# (``nhwc_ok``): the image is copied channels-last into a zero-bordered buffer, whose
# every receptive-field row (kw taps of C channels) is then one contiguous run: im2col
# is a copy of kw*C contiguous values per (n, ho, wo, i), the copy and it together
# ~1.7x faster than the channel-first loop's Wo-long rows on the small-CNN shapes. The
# columns come out (N, L, K), K ordered (i, j, c), and dW is g @ cols per sample, with
# no transposed copy of g. (The forward this way, cols @ W^T and a transposed copy out
# with the bias, measured no faster than the channel-first im2col and W @ cols.)
NHWC_MIN_CHANNELS = 8


def nhwc_ok(C, groups, stride, dilation):
    return groups == 1 and C >= NHWC_MIN_CHANNELS and tuple(stride) == (1, 1) \
        and tuple(dilation) == (1, 1)


@njit
def _to_nhwc(x, xh, pt, pl):
    """``xh[n, pt + h, pl + w, c] = x[n, c, h, w]``, the border of ``xh`` zeroed."""
    N, C, H, W = x.shape
    Hp, Wp = xh.shape[1], xh.shape[2]
    for n in range(N):
        for h in range(Hp):
            if h < pt or h >= pt + H:
                for w in range(Wp):
                    for c in range(C):
                        xh[n, h, w, c] = 0
            else:
                for w in range(pl):
                    for c in range(C):
                        xh[n, h, w, c] = 0
                for w in range(pl + W, Wp):
                    for c in range(C):
                        xh[n, h, w, c] = 0
        for h in range(H):  # (this loop order: ~1.5x faster than the others here)
            for c in range(C):
                for w in range(W):
                    xh[n, pt + h, pl + w, c] = x[n, c, h, w]


@njit
def _im2col_nhwc(xh, cols):
    """``cols[n, ho, wo, i, j*C + c] = xh[n, ho + i, wo + j, c]`` for (N, Ho, Wo, kh,
    kw*C) ``cols`` (stride 1, dilation 1, ``xh`` already padded)."""
    N, Ho, Wo, kh, KC = cols.shape
    H, W, C = xh.shape[1], xh.shape[2], xh.shape[3]
    xf = xh.reshape(N, H, W * C)
    U = np.uint64
    for n in range(N):
        for ho in range(Ho):
            for wo in range(Wo):
                s = U(wo * C)
                for i in range(kh):
                    for q in range(U(KC)):
                        cols[n, ho, wo, i, q] = xf[n, ho + i, s + q]


def conv2d_weight_grad_nhwc(x, g, per, xh, cols, padding, pre=None):
    """``conv2d_weight_grad_nhwc_work``'s plan, run."""
    run_plans(conv2d_weight_grad_nhwc_work(x, g, per, xh, cols, padding, pre))
    return per


def conv2d_weight_grad_nhwc_work(x, g, per, xh, cols, padding, pre=None):
    """Per-sample weight gradients ``per[n] = g[n] @ cols[n]`` (O, K), K ordered (i, j,
    c), for (N, O, L) ``g`` (stride 1, dilation 1, one group); scratch: (N, Hp, Wp, C)
    ``xh``, (N, Ho, Wo, kh, kw*C) ``cols``. Per chunk of the batch: the channels-last
    copy, im2col and the GEMMs."""
    N, _, L = g.shape
    K = per.shape[2]
    pt, pl = padding[0][0], padding[1][0]
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)  # (one compiled layout)

    fn, extra = (pre[0], pre[1:]) if pre is not None else (None, ())

    def work(n, xc, gc, hc, cc, pc, *ec):  # (pre: as conv2d_weight_grad's)
        if fn is not None:
            fn(n, *ec, gc)
        _to_nhwc(xc, hc, pt, pl)
        _im2col_nhwc(hc, cc)
        np.matmul(gc, cc.reshape(n, L, K), out=pc)
    return work, (x, g, xh, cols, per, *extra)


def conv2d_input_weight_grad_nhwc(g, wT, gx, cols_i, x, per, xh, cols_w, stride, padding,
                                  dilation, pre=None):
    """``conv2d_input_weight_grad_nhwc_work``'s plan, run."""
    run_plans(conv2d_input_weight_grad_nhwc_work(g, wT, gx, cols_i, x, per, xh, cols_w, stride,
                                                 padding, dilation, pre))
    return gx, per


def conv2d_input_weight_grad_nhwc_work(g, wT, gx, cols_i, x, per, xh, cols_w, stride, padding,
                                       dilation, pre=None, native=False):
    """``conv2d_input_grad`` (into ``gx``, scratch ``cols_i``) and
    ``conv2d_weight_grad_nhwc`` (into ``per``, scratch ``xh`` and ``cols_w``) of one
    (N, 1, O, L) ``g`` in one parallel region: per chunk of the batch, the input
    gradient's GEMMs and col2im, then the weight gradient's channels-last columns and
    GEMMs, g's chunk still in cache (one hand-off to the threads, not two). ``native``:
    as ``conv2d_weight_grad_work``'s."""
    N, groups, Og, L = g.shape
    K = wT.shape[1]
    Kw = per.shape[2]
    c2i = _col2im_fn(stride, padding, dilation)
    pt, pl = padding[0][0], padding[1][0]
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)

    native = _native_input_weight_work(g, wT, gx, cols_i, x, per, xh, cols_w, stride,
                                       padding, dilation, pre) if NATIVE and native else None
    if native is not None:
        return native
    fn, extra = (pre[0], pre[1:]) if pre is not None else (None, ())

    def work(n, gc, ci, oc, xc, hc, cc, pc, *ec):  # (pre: as conv2d_weight_grad's)
        if fn is not None:
            fn(n, *ec, gc)
        np.matmul(wT, gc, out=ci.reshape(n, groups, K, L))
        c2i(ci, oc)
        _to_nhwc(xc, hc, pt, pl)
        _im2col_nhwc(hc, cc)
        np.matmul(gc.reshape(n, Og, L), cc.reshape(n, L, Kw), out=pc)
    return work, (g, cols_i, gx, x, xh, cols_w, per, *extra)


def _native_input_weight_work(g, wT, gx, cols_i, x, per, xh, cols_w, stride, padding,
                              dilation, pre):
    N, groups, Og, L = g.shape
    K = wT.shape[1]
    Kw = per.shape[2]
    dt = g.dtype
    w = wT[0].T  # (the weight, (O, K): wT is its transposed view)
    if groups != 1 or wT.shape[0] != 1 or dt not in (np.float32, np.float64) or \
            not _gemm_dims_ok(K, L, Og, Kw) or not all(
            a.dtype == dt and a.flags.c_contiguous
            for a in (g, w, gx, cols_i, x, per, xh, cols_w)):
        return None
    p = _native_pre(pre, dt)
    mods = _native_grads("s" if dt == np.float32 else "d")
    if p is None or mods is None:
        return None
    flags = np.array(p[0] + (_dense(stride, padding, dilation),), np.bool_)
    (sh, sw), (dh, dw) = stride, dilation
    params = np.array([sh, sw, padding[0][0], padding[1][0], dh, dw], np.int64)
    k = mods[0]

    def work(n, gc, ci, oc, xc, hc, cc, pc, gp, idx, y):
        k(gc, w, ci, oc, xc, hc, cc, pc, gp, idx, y, flags, params)
    return work, (g, cols_i, gx, x, xh, cols_w, per, *p[1])
