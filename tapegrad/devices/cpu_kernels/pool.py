"""max_pool2d on the CPU: a dedicated kernel for 2x2 windows of stride 2 (the
small-CNN pooling; ~2x the generated kernel's speed), a generated, unrolled kernel
for the other 2x2 and 3x3 windows, a Numba loop for the other window sizes, and the
gradient's scatter.

Both forward kernels stay: on the small-CNN geometries the generated kernels are
2-3.5x faster than the loop (e.g. (32, 16, 26, 26) with 2x2 windows: 0.20 ms
against 0.69 ms; 3x3 windows, stride 2, padding 1 on (32, 64, 56, 56): 14 ms
against 22 ms), while the loop serves every other window size with one compiled
function. (The third implementation, whole-array NumPy code, is the op's
device-generic kernel for CuPy arrays, 4-7x slower than the loop here.)
"""
import functools

import numpy as np

from ..cpu import ROW_BLOCK, compile_source, njit, run_chunked, run_rows
from .conv import few_chunks

UNROLLED = ((2, 2), (3, 3))  # window sizes with a generated, unrolled kernel


def _max_pool2d_source(kh, kw, checked):
    """Source of ``kernel(x, out, idx, sh, sw, ph, pw, dh, dw)`` on ``(planes, H, W)``
    arrays for one window size: every tap unrolled (a loop over 2x2 taps with
    run-time bounds costs ~10x more in Numba), the first maximum of each window and
    its flat H*W index; a NaN wins, the last one in the window (as PyTorch's CPU
    kernel). ``checked``: some window reaches into the padding, so taps
    test their bounds (a window wholly in the padding keeps -inf and index -1).

    Testing for NaN in every comparison stops LLVM from
    turning the comparison into a select, and random data then mispredicts half
    the branches (~9x slower). So a vectorised pass first looks for a NaN in the
    plane, and only planes holding one take the loop with NaN tests.
    """
    lines = list(_SOURCE_HEAD)
    for nan_safe in (True, False):
        lines += ["        if nan:" if nan_safe else "        else:",
                  "            for ho in range(Ho):",
                  "                h0 = ho * sh - ph",
                  "                for wo in range(Wo):",
                  "                    w0 = wo * sw - pw"]
        lines += _window_source(kh, kw, checked, nan_safe)
    return "\n".join(lines) + "\n"


# the kernel's signature and its first pass: whether the plane holds a NaN
_SOURCE_HEAD = ("import numpy as np", "", "", "def kernel(x, out, idx, sh, sw, ph, pw, dh, dw):",
                "    P, H, W = x.shape",
                "    Ho, Wo = out.shape[1], out.shape[2]",
                "    for p in range(P):",
                "        nan = False",
                "        for h in range(H):",
                "            for w in range(W):",
                "                v = x[p, h, w]",
                "                nan |= v != v")


def _window_source(kh, kw, checked, nan_safe):
    """The unrolled taps of one window at (h0, w0), storing its max and argmax."""
    ind = " " * 20
    if nan_safe:
        take = "arg < 0 or v > best or v != v"
    else:
        take = "v > best or arg < 0" if checked else "v > best"
    lines = []
    first = True
    for i in range(kh):
        for j in range(kw):
            h, w = f"(h0 + {i} * dh)", f"(w0 + {j} * dw)"
            if first and not checked:
                lines += [ind + f"best = x[p, {h}, {w}]", ind + f"arg = {h} * W + {w}"]
                first = False
                continue
            if first:
                lines += [ind + "best = -np.inf", ind + "arg = -1"]
                first = False
            pre = ind
            if checked:
                lines.append(ind + f"if 0 <= {h} < H and 0 <= {w} < W:")
                pre = ind + "    "
            lines += [pre + f"v = x[p, {h}, {w}]",
                      pre + f"if {take}:",
                      pre + "    best = v",
                      pre + f"    arg = {h} * W + {w}"]
    return lines + [ind + "out[p, ho, wo] = best", ind + "idx[p, ho, wo] = arg"]


@njit
def _max_pool2d_loop(x, out, idx, kh, kw, sh, sw, ph, pw, dh, dw):
    """What the generated kernels compute, for the other window sizes: run-time tap
    loops, NaN tests only in planes holding a NaN."""
    P, H, W = x.shape
    Ho, Wo = out.shape[1], out.shape[2]
    for p in range(P):
        nan = False
        for h in range(H):
            for w in range(W):
                v = x[p, h, w]
                nan |= v != v
        for ho in range(Ho):
            h0 = ho * sh - ph
            for wo in range(Wo):
                w0 = wo * sw - pw
                best = -np.inf
                arg = -1
                for i in range(kh):
                    h = h0 + i * dh
                    if h < 0 or h >= H:
                        continue
                    for j in range(kw):
                        w = w0 + j * dw
                        if w < 0 or w >= W:
                            continue
                        v = x[p, h, w]
                        if arg < 0 or v > best or (nan and v != v):
                            best = v
                            arg = h * W + w
                out[p, ho, wo] = best
                idx[p, ho, wo] = arg


@njit(error_model="numpy")
def _max_pool2x2(x, out, idx):
    """2x2 windows, stride 2, no padding or dilation, none hanging over: the four taps
    in row-major order by branch-free selects (the first maximum wins), each tap also
    tested for NaN on the way; a plane holding one goes again through the NaN-safe
    taps (the last NaN of the window wins, as the generated kernels)."""
    P, H, W = x.shape
    Ho, Wo = out.shape[1], out.shape[2]
    for p in range(P):
        nan = False
        for ho in range(Ho):
            r0 = 2 * ho
            r1 = r0 + 1
            for wo in range(Wo):
                c = 2 * wo
                m = x[p, r0, c]
                k = r0 * W + c
                v = x[p, r0, c + 1]
                nan |= (m != m) | (v != v)
                t = v > m
                m = v if t else m
                k = k + 1 if t else k
                v = x[p, r1, c]
                nan |= v != v
                t = v > m
                m = v if t else m
                k = r1 * W + c if t else k
                v = x[p, r1, c + 1]
                nan |= v != v
                t = v > m
                m = v if t else m
                k = r1 * W + c + 1 if t else k
                out[p, ho, wo] = m
                idx[p, ho, wo] = k
        if nan:
            for ho in range(Ho):
                for wo in range(Wo):
                    h0 = 2 * ho
                    w0 = 2 * wo
                    v = x[p, h0, w0]
                    arg = h0 * W + w0
                    for di in range(2):
                        for dj in range(2):
                            u = x[p, h0 + di, w0 + dj]
                            if u > v or u != u:
                                v = u
                                arg = (h0 + di) * W + w0 + dj
                    out[p, ho, wo] = v
                    idx[p, ho, wo] = arg


@functools.lru_cache(maxsize=None)
def _generated(kh, kw, checked):
    src = _max_pool2d_source(kh, kw, checked)
    return compile_source(("max_pool2d", src), src, "kernel", parallel=False, fastmath=(),
                          error_model="numpy")


def _window_hangs_over(H, W, Ho, Wo, kh, kw, sh, sw, dh, dw):
    """Whether some window reaches past the input's bottom or right edge (ceil_mode)."""
    return (Ho - 1) * sh + (kh - 1) * dh >= H or (Wo - 1) * sw + (kw - 1) * dw >= W


def _plane_kernel(geometry, H, W, Ho, Wo):
    """``k(x, out, idx)`` on (planes, H, W) blocks for one pooling geometry."""
    kh, kw, sh, sw, ph, pw, dh, dw = geometry
    if geometry == (2, 2, 2, 2, 0, 0, 1, 1) and 2 * Ho <= H and 2 * Wo <= W:
        return _max_pool2x2
    if (kh, kw) not in UNROLLED:
        return lambda x, o, i: _max_pool2d_loop(x, o, i, *geometry)
    checked = ph > 0 or pw > 0 or _window_hangs_over(H, W, Ho, Wo, kh, kw, sh, sw, dh, dw)
    fn = _generated(kh, kw, checked)
    rest = geometry[2:]
    return lambda x, o, i: fn(x, o, i, *rest)


def plane_kernel(kernel_size, stride, padding, dilation, H, W, Ho, Wo):
    """``k(x, out, idx)``: ``max_pool2d``'s kernel on (planes, H, W) blocks of one
    geometry, C-contiguous (a caller running it on its own chunks)."""
    return _plane_kernel((*kernel_size, *stride, *padding, *dilation), H, W, Ho, Wo)


def max_pool2d(x, out, idx, kernel_size, stride, padding, dilation):
    """Max of each window of the (N, C, H, W) array ``x`` into ``out`` and its flat
    H*W position into ``idx`` (both (N, C, Ho, Wo), preallocated)."""
    N, C, H, W = x.shape
    Ho, Wo = out.shape[2:]
    if out.size == 0:
        return
    k = _plane_kernel((*kernel_size, *stride, *padding, *dilation), H, W, Ho, Wo)
    planes = np.ascontiguousarray(x).reshape(N * C, H, W)
    run_rows(lambda n, x_, o_, i_: k(x_, o_, i_), N * C, planes,
             out.reshape(N * C, Ho, Wo), idx.reshape(N * C, Ho, Wo), per_row=H * W)


@njit
def _scatter_rows(out, idx, g, zero):
    for r in range(idx.shape[0]):
        if zero:  # (each row zeroed just before its scatter, while it is in cache)
            for k in range(out.shape[1]):
                out[r, k] = 0
        for k in range(idx.shape[1]):
            if idx[r, k] >= 0:  # -1: a window wholly in the padding picked nothing
                out[r, idx[r, k]] += g[r, k]


@njit
def _scatter_relu_rows(out, idx, g, y, overlap):
    """Per row: zeroed, ``g`` scattered (added) to ``idx``, then the ReLU's gradient
    ``out * (0 if y <= 0 else 1)``: eager's max_pool2d_input_grad then relu_backward,
    the same arithmetic. Without overlapping windows each position is reached once,
    so the mask is applied there alone (the others stay 0, as 0 * mask)."""
    for r in range(idx.shape[0]):
        for k in range(out.shape[1]):
            out[r, k] = 0
        if overlap:
            for k in range(idx.shape[1]):
                if idx[r, k] >= 0:
                    out[r, idx[r, k]] += g[r, k]
            for k in range(out.shape[1]):
                out[r, k] = out[r, k] * (0 if y[r, k] <= 0 else 1)
        else:
            for k in range(idx.shape[1]):
                p = idx[r, k]
                if p >= 0:
                    out[r, p] = (out[r, p] + g[r, k]) * (0 if y[r, p] <= 0 else 1)


@njit
def _scatter_relu_pooled_rows(out, idx, g, m, overlap):
    """``_scatter_relu_rows`` with the mask from the pooled values ``m`` (as ``idx``):
    ``y`` at a window's argmax is its ``m``. Overlapping windows: the sums first,
    then each reached position times its mask once per window reaching it (x * 1 is
    x, and x * 0 * 0 is x * 0, bitwise)."""
    for r in range(idx.shape[0]):
        for k in range(out.shape[1]):
            out[r, k] = 0
        if overlap:
            for k in range(idx.shape[1]):
                if idx[r, k] >= 0:
                    out[r, idx[r, k]] += g[r, k]
            for k in range(idx.shape[1]):
                p = idx[r, k]
                if p >= 0:
                    out[r, p] = out[r, p] * (0 if m[r, k] <= 0 else 1)
        else:
            for k in range(idx.shape[1]):
                p = idx[r, k]
                if p >= 0:
                    out[r, p] = (out[r, p] + g[r, k]) * (0 if m[r, k] <= 0 else 1)


def max_pool2d_scatter_relu(out, idx, g, y, overlap, pooled=False):
    """``max_pool2d_scatter(out, idx, g, zero=True)`` then ``out *= (y > 0)`` (the
    gradient through ``max_pool2d(relu(.))``), one pass per row on the threads; all
    (rows, ...) C-contiguous, ``y`` as ``out`` (``pooled``: the pooled values, as
    ``idx``, the mask taken from them)."""
    rows = out.shape[0]
    per_row = max(idx.shape[1], out.shape[1])
    k = _scatter_relu_pooled_rows if pooled else _scatter_relu_rows
    run_chunked(lambda n, o_, i_, g_, y_: k(o_, i_, g_, y_, overlap), rows,
                out, idx, g, y, min_chunk=max(ROW_BLOCK // per_row, few_chunks(rows)))


def scatter_relu_rows(overlap, pooled=False):
    """``fn(n, g, idx, y, out)``: ``max_pool2d_scatter_relu``'s pass on one chunk of
    the batch (arrays with the batch first, C-contiguous), for a caller's region."""
    k = _scatter_relu_pooled_rows if pooled else _scatter_relu_rows

    def fn(n, g, idx, y, out):
        rows = n * idx.shape[1]
        k(out.reshape(rows, -1), idx.reshape(rows, -1), g.reshape(rows, -1),
          y.reshape(rows, -1), overlap)
    fn.native = (overlap, pooled)  # (what a native chunk runs in its place: conv.py)
    return fn


def max_pool2d_scatter(out, idx, g, zero=False):
    """``out[r, idx[r, k]] += g[r, k]`` for (rows, H*W) ``out`` and (rows, K) ``idx``
    and ``g``; repeated positions (overlapping windows) accumulate. ``zero``: ``out``
    is zeroed first (row by row on the threads, not in a serial pass before)."""
    run_rows(lambda n, o_, i_, g_: _scatter_rows(o_, i_, g_, zero), out.shape[0], out, idx, g,
             per_row=max(idx.shape[1], out.shape[1]))
