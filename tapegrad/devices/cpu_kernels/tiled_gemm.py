"""Float32 GEMM for compiled loops on few rows: ``gemm32(a, b, c, trans_b)``, the same
call as ``blas.gemm32``, computed by register tiles that LLVM compiles for the host's
vector width instead of by a BLAS library.

The recurrent layers' step loops (``ops/nn/rnn.py``) multiply a block of 16 or 32
batch rows by ``W_hh`` at every step. At such row counts a BLAS library spends much of
each call packing its operands, and the kernels NumPy's OpenBLAS picks need not use
the widest vectors the CPU has. Here each ``MR x 16 NV`` block of ``c`` stays in
vector registers over the whole ``k`` loop: broadcast ``a[i, k]``, load ``b[k, j:j +
16]``, fused multiply-add, no packing. On an AMD EPYC (Zen 5, AVX-512), one thread,
charlm's step shapes: ``(16, 256) @ (256, 1024)`` 52 against OpenBLAS's 100 us (110
with its AVX-512 kernels), ``(16, 1024) @ (1024, 256)`` 37 against 89 us (75).

The tiles are LLVM IR written with llvmlite (a Numba ``intrinsic``): Numba's own loops
keep such accumulators in memory, and its scalar code is not packed into vectors.
``load()`` -> True where the host has AVX-512 (so that a tile's 16 accumulators and
its operands fit in the 32 vector registers) and a check product matched NumPy's;
elsewhere callers keep BLAS. Numba is imported by ``load`` only.

In compiled code, ``gemm32(a, b, c, trans_b)``: ``c = a @ b`` (``trans_b``: ``a @
b.T``, a plain loop: the step loops never ask for it) for float32 2-D arrays whose rows
are contiguous (row slices of a C-contiguous array qualify), ``c`` overwritten; rows
left over by the tiles run in narrower tiles, columns left over (``N % 16``) in a
plain loop. ``gemm32_tn(a, b, c, add)``: ``c = a.T @ b`` (``add``: ``c += a.T @ b``),
``a`` (K, M) and ``b`` (K, N) with contiguous rows, in blocks of ``KC`` steps of k so
that a block's rows of ``b`` stay in cache across its tiles (the recurrent weights'
gradient over all steps: charlm's ``W_hh``, K = 2016, 5.4 against OpenBLAS's 9.2 ms on
one thread); rows of ``c`` left over by the tiles run in a plain loop. ``product``
splits ``c`` over the threads.
"""
import threading

__all__ = ["load", "gemm32", "gemm32_tn", "gemm32_nn", "applies", "product", "matmul",
           "VERSION"]

VERSION = 4  # (generated kernels that call gemm32 name it: a new one recompiles them)

MR = 8    # rows of a tile
VW = 16   # float32 lanes of a vector (512 bits)
_state = []  # [True/False] once load() ran
_loading = threading.Lock()

# module-level functions (Numba caches them); the tiles they call are set by _build:
# _tr (r < 8 rows by 16 columns, r at run time), _t8x1, _t8x2 (8 rows by 16 or 32
# columns), _a8x1, _a8x2 (the same, added to c)
_tr = _t8x1 = _t8x2 = _a8x1 = _a8x2 = None
gemm32 = gemm32_tn = gemm32_nn = None
KC = 256  # the k-block of gemm32_tn (its b rows stay in cache across a block's tiles)


def _emit(context, builder, mr, nv, add, a, sak, sar, b, ldb, c, ldc, K):
    """The IR of one tile of ``mr`` rows by ``16 nv`` columns at the builder's
    position (integer arguments as i64; see ``_tile``)."""
    import llvmlite.ir as ir
    from numba.core import cgutils
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    vt = ir.VectorType(f32, VW)
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fma.v{VW}f32")
    ap, bp, cp = (builder.inttoptr(p, f32.as_pointer()) for p in (a, b, c))
    zero = ir.Constant(vt, [0.0] * VW)
    splat0 = ir.Constant(ir.VectorType(i32, VW), [0] * VW)
    rows = [builder.gep(ap, [builder.mul(ir.Constant(i64, r), sar)]) for r in range(mr)]
    crows = [builder.gep(cp, [builder.mul(ir.Constant(i64, r), ldc)]) for r in range(mr)]

    def cvec(r, j):
        return builder.bitcast(builder.gep(crows[r], [ir.Constant(i64, j * VW)]),
                               vt.as_pointer())
    # (allocas that LLVM's mem2reg turns into registers)
    acc = [[cgutils.alloca_once_value(
        builder, builder.load(cvec(r, j), align=4) if add else zero)
        for j in range(nv)] for r in range(mr)]
    with cgutils.for_range(builder, K) as loop:
        k = loop.index
        brow = builder.gep(bp, [builder.mul(k, ldb)])
        bv = [builder.load(builder.bitcast(
            builder.gep(brow, [ir.Constant(i64, j * VW)]), vt.as_pointer()), align=4)
              for j in range(nv)]
        ka = builder.mul(k, sak)
        for r in range(mr):
            x = builder.load(builder.gep(rows[r], [ka]))
            x = builder.shuffle_vector(
                builder.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(i32, 0)),
                ir.Constant(vt, ir.Undefined), splat0)
            for j in range(nv):
                builder.store(builder.call(fma, [x, bv[j], builder.load(acc[r][j])]),
                              acc[r][j])
    for r in range(mr):
        for j in range(nv):
            builder.store(builder.load(acc[r][j]), cvec(r, j), align=4)


def _tile(mr, nv, add=False):
    """The intrinsic ``tile(a, sak, sar, b, ldb, c, ldc, K)``: ``c[r, j] (+)= sum_k
    a[r * sar + k * sak] b[k * ldb + j]`` for ``r < mr``, ``j < 16 nv`` (``add``: added
    to ``c``); pointers as integers, strides in elements."""
    from numba.core import types
    from numba.extending import intrinsic

    def tile(typingctx, a, sak, sar, b, ldb, c, ldc, K):
        def codegen(context, builder, sig, args):
            _emit(context, builder, mr, nv, add, *(
                context.cast(builder, v, t, types.int64) for v, t in zip(args, sig.args)))
            return context.get_dummy_value()
        return types.void(a, sak, sar, b, ldb, c, ldc, K), codegen
    tile.__name__ = f"tile_{mr}x{nv}{'_add' if add else ''}"
    return intrinsic(tile)


def _tile_rows():
    """The intrinsic ``tile(r, a, sak, sar, b, ldb, c, ldc, K)``: ``_tile(r, 1)``'s for a
    row count ``r`` from 1 to MR - 1 known at run time (a switch over the seven)."""
    from numba.core import types
    from numba.extending import intrinsic

    def tile(typingctx, r, a, sak, sar, b, ldb, c, ldc, K):
        def codegen(context, builder, sig, args):
            r, *rest = (context.cast(builder, v, t, types.int64)
                        for v, t in zip(args, sig.args))
            end = builder.append_basic_block("rows_end")
            switch = builder.switch(r, end)
            for m in range(1, MR):
                block = builder.append_basic_block(f"rows_{m}")
                switch.add_case(m, block)
                builder.position_at_end(block)
                _emit(context, builder, m, 1, False, *rest)
                builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()
        return types.void(r, a, sak, sar, b, ldb, c, ldc, K), codegen
    return intrinsic(tile)


def _ld(x):
    # the row stride of 2-D float32 ``x`` in elements (see blas._ld)
    return max(1, x.strides[0] // 4 if x.shape[0] > 1 else x.shape[1])


def _rows(r, pa, sa, pb, sb, pc, sc, K, N16):
    # one band of ``r`` (< MR) rows, in tiles of r rows by 16 columns
    for j0 in range(0, N16, VW):
        _tr(r, pa, 1, sa, pb + 4 * j0, sb, pc + 4 * j0, sc, K)


def _gemm32(a, b, c, trans_b):
    M, K = a.shape
    N = c.shape[1]
    if trans_b:
        for i in range(M):
            for j in range(N):
                s = 0.0
                for k in range(K):
                    s += a[i, k] * b[j, k]
                c[i, j] = s
        return
    if M == 0 or N == 0:
        return
    sa, sb, sc = _ld(a), _ld(b), _ld(c)
    pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
    N16 = N - N % VW
    N32 = N - N % (2 * VW)
    i0 = 0
    while i0 + MR <= M:
        ra, rc = pa + 4 * i0 * sa, pc + 4 * i0 * sc
        for j0 in range(0, N32, 2 * VW):
            _t8x2(ra, 1, sa, pb + 4 * j0, sb, rc + 4 * j0, sc, K)
        if N16 > N32:
            _t8x1(ra, 1, sa, pb + 4 * N32, sb, rc + 4 * N32, sc, K)
        i0 += MR
    if i0 < M:
        _rows(M - i0, pa + 4 * i0 * sa, sa, pb, sb, pc + 4 * i0 * sc, sc, K, N16)
    for i in range(M):
        for j in range(N16, N):
            s = 0.0
            for k in range(K):
                s += a[i, k] * b[k, j]
            c[i, j] = s


def _blocked(pa, sak, sar, pb, sb, pc, sc, M8, N, K):
    # the tiles of c[:M8, :N - N % 16] (c zeroed, or holding what the products add to)
    # in blocks of KC steps of k; a's element (i, k) at pa + 4 (i sar + k sak)
    N16 = N - N % VW
    N32 = N - N % (2 * VW)
    for k0 in range(0, K, KC):
        kn = min(KC, K - k0)
        qa, qb = pa + 4 * k0 * sak, pb + 4 * k0 * sb
        for i0 in range(0, M8, MR):
            ra, rc = qa + 4 * i0 * sar, pc + 4 * i0 * sc
            for j0 in range(0, N32, 2 * VW):
                _a8x2(ra, sak, sar, qb + 4 * j0, sb, rc + 4 * j0, sc, kn)
            if N16 > N32:
                _a8x1(ra, sak, sar, qb + 4 * N32, sb, rc + 4 * N32, sc, kn)


def _gemm32_tn(a, b, c, add):
    K, M = a.shape
    N = c.shape[1]
    if not add:
        c[:, :] = 0.0
    if M == 0 or N == 0 or K == 0:
        return
    M8 = M - M % MR
    N16 = N - N % VW
    _blocked(a.ctypes.data, _ld(a), 1, b.ctypes.data, _ld(b), c.ctypes.data, _ld(c), M8,
             N, K)
    for i in range(M):
        for j in range(N16 if i < M8 else 0, N):
            s = c[i, j]
            for k in range(K):
                s += a[k, i] * b[k, j]
            c[i, j] = s


def _gemm32_nn(a, b, c):
    M, K = a.shape
    N = c.shape[1]
    c[:, :] = 0.0
    if M == 0 or N == 0 or K == 0:
        return
    M8 = M - M % MR
    N16 = N - N % VW
    _blocked(a.ctypes.data, 1, _ld(a), b.ctypes.data, _ld(b), c.ctypes.data, _ld(c), M8,
             N, K)
    if M8 < M:
        gemm32(a[M8:], b, c[M8:], False)
    for i in range(M8):
        for j in range(N16, N):
            s = c[i, j]
            for k in range(K):
                s += a[i, k] * b[k, j]
            c[i, j] = s


def _host_has_avx512():
    import llvmlite.binding as llvm
    from numba.core import config
    if (config.CPU_NAME or "host") != "host" or config.CPU_FEATURES:
        return False  # (a portable build's target: the host's vectors may be missing)
    return bool(llvm.get_host_cpu_features().get("avx512f"))


def _build():
    import numba
    g = globals()
    g["_tr"] = _tile_rows()
    g["_t8x1"], g["_t8x2"] = _tile(MR, 1), _tile(MR, 2)
    g["_a8x1"], g["_a8x2"] = _tile(MR, 1, add=True), _tile(MR, 2, add=True)
    jit = numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
    g["_ld"] = jit(_ld)
    g["_rows"] = jit(_rows)
    g["gemm32"] = jit(_gemm32)
    g["_blocked"] = jit(_blocked)
    g["gemm32_tn"] = jit(_gemm32_tn)
    g["gemm32_nn"] = jit(_gemm32_nn)


def load():
    """Compile (or load) ``gemm32`` and ``gemm32_tn``; whether they can be used (see the
    module's docstring). Once per process."""
    if _state:
        return _state[0]
    with _loading:  # (two threads' first products must not take two paths)
        if not _state:
            _state.append(_load())
    return _state[0]


def _load():
    try:
        import numpy as np
        if not _host_has_avx512():
            return False
        _build()
        rng = np.random.default_rng(0)
        for M, K, N in ((19, 37, 75), (8, 256, 64), (3, 5, 16), (1, 0, 33)):
            a = rng.standard_normal((M + 2, K)).astype(np.float32)[1:M + 1]
            b = rng.standard_normal((K, N)).astype(np.float32)
            big = np.zeros((M + 2, N + 3), np.float32)
            c = big[1:M + 1, :N]      # (rows of a wider array: its leading dimension)
            gemm32(a, b, c, False)
            if not np.allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5) or \
                    big[0].any() or big[M + 1].any() or big[:, N:].any():
                return False
            t = np.empty((K, N), np.float32)      # (a.T as the (M, K) operand)
            at = rng.standard_normal((M, K)).astype(np.float32)
            bt = rng.standard_normal((M, N)).astype(np.float32)
            gemm32_tn(at, bt, t, False)
            if not np.allclose(t, at.T.astype(np.float64) @ bt, rtol=1e-5, atol=1e-5):
                return False
    except Exception:
        return False
    return True


MIN_WORK = 1 << 20       # multiply-adds from which product() runs the tiles
THREADED_WORK = 1 << 22  # ... and splits the result over the CPU threads
# Products of rows by rows (``x @ w.T``: both operands contiguous along k) take the
# tiles only where the result has this many rows or columns: ``w.T`` is copied first
# (``_contiguous``: 0.14 ms for a (512, 784) float32 weight, a third of the product's
# time at 128 rows of x; at charlm Transformer's 4096 rows the tiles with the copy take
# 1.24 against OpenBLAS's 2.20 ms). A shape rule, so that a product and its transpose
# take one path (and have the same bits).
NT_ROWS = 512


def applies(m, k, n):
    """Whether ``product`` runs an (m, k) by (k, n) product of columns-contiguous
    operands in the tiles (the shape rule; rows by rows has ``NT_ROWS`` too)."""
    return m % 16 == 0 and n % 16 == 0 and m * n * k >= MIN_WORK and m > 0 and n > 0 \
        and load()


def product(a, b, out=None):
    """``a @ b`` for 2-D float32 NumPy arrays in the tiles, on the CPU threads, into
    ``out`` (or a new array); None where the tiles do not apply: not loaded, other
    arrays or dtypes, less work than ``MIN_WORK``, a result's row or column count not a
    multiple of 16, a product of rows by rows (``x @ w.T``) below ``NT_ROWS``.

    The rule looks at the shapes only (and a product of rows by rows is one in either
    orientation), and every element of the result is one chain of fused multiply-adds
    over k in order, whatever the operands' layouts and the split over threads: ``a @
    b`` and ``(b.T @ a.T).T`` have the same bits, so a compiled program that computes a
    product transposed matches eager's. ``b`` without contiguous rows is copied; ``a``
    is read by rows or, transposed, by columns (``gemm32_nn``/``gemm32_tn``); the
    result is split along its longer side, in multiples of 16.

    On 2 cores of a Zen 5, against NumPy's OpenBLAS (Haswell kernels, 2 threads), in
    ms: charlm Transformer's ``x @ w.T`` (4096, 128) by (512, 128) 1.24 against 2.20,
    its gradients ``g @ w`` 1.12 against 2.23 and ``g.T @ x`` 1.22 against 2.39."""
    import numpy as np
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or \
            b.ndim != 2 or a.dtype != np.float32 or b.dtype != np.float32:
        return None
    M, K = a.shape
    N = b.shape[1]
    if b.shape[0] != K or not applies(M, K, N):
        return None
    if b.strides[0] == 4 and b.strides[1] != 4 and a.strides[1] == 4 and max(M, N) < NT_ROWS:
        return None   # (x @ w.T, w.T to be copied for too few rows of x to pay for it)
    from ..cpu import run_chunked, threads
    if b.strides[1] != 4 or b.strides[0] % 4:
        b = _contiguous(b, 1)
    tn = a.strides[0] == 4 and a.strides[1] % 4 == 0 and a.strides[1] != 4
    if not tn and (a.strides[1] != 4 or a.strides[0] % 4):
        a = _contiguous(a, 0)
    c = out
    if c is None or type(c) is not np.ndarray or c.dtype != np.float32 or \
            c.shape != (M, N) or c.strides[1] != 4 or c.strides[0] % 4 or \
            np.may_share_memory(c, a) or np.may_share_memory(c, b):
        c = np.empty((M, N), np.float32)
    nt = threads() if M * N * K >= THREADED_WORK else 1
    rows = M >= N
    n = (M if rows else N) // 16
    cut = [n * i // nt * 16 for i in range(nt + 1)]
    at = a.T if tn else a

    def job(lo, hi):
        if rows:
            if tn:
                return lambda: gemm32_tn(at[:, lo:hi], b, c[lo:hi], False)
            return lambda: gemm32_nn(a[lo:hi], b, c[lo:hi])
        if tn:
            return lambda: gemm32_tn(at, b[:, lo:hi], c[:, lo:hi], False)
        return lambda: gemm32_nn(a, b[:, lo:hi], c[:, lo:hi])
    jobs = [job(lo, hi) for lo, hi in zip(cut, cut[1:]) if hi > lo]
    if len(jobs) == 1:
        jobs[0]()
    else:   # (the caller runs a part too: one hand-off fewer)
        run_chunked(_run_jobs, len(jobs), np.arange(len(jobs)), jobs, min_chunk=1)
    if out is not None and c is not out:
        out[...] = c
        return out
    return c


_scratch = threading.local()  # .bufs: {(operand, shape): array}, this thread's copies
SCRATCH_KEEP = 4               # ... at most this many (the last shapes used)


def _run_jobs(n, which, jobs):
    for i in which:
        jobs[i]()


def _contiguous(b, which):
    """A C-contiguous copy of 2-D float32 ``b`` in this thread's scratch buffer of its
    shape for operand ``which`` (0, 1) of a product (a replay of a compiled step
    allocates nothing per call); of the transpose of a C-contiguous ``w``, in bands of
    32 of w's rows (NumPy's one transposing copy of a (512, 512) float32 array took 0.40
    ms here, the bands 0.14: its rows 2 KB apart map onto few cache sets)."""
    import numpy as np
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    key = (which, b.shape)
    out = bufs.pop(key, None)
    if out is None:
        out = np.empty(b.shape, np.float32)
        while len(bufs) >= SCRATCH_KEEP:
            del bufs[next(iter(bufs))]
    bufs[key] = out
    w = b.T
    if not w.flags.c_contiguous:
        out[...] = b
        return out
    for j in range(0, w.shape[0], 32):
        out[:, j:j + 32] = w[j:j + 32].T
    return out


def matmul(a, b, out=None):
    """``a @ b`` of 2-D arrays: ``product``'s tiles where they apply, else NumPy's."""
    import numpy as np
    c = product(a, b, out)
    if c is not None:
        return c
    return a @ b if out is None else np.matmul(a, b, out=out)
