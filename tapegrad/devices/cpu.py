"""The CPU device: NumPy buffers and the Numba compile cache.

Numba is imported lazily (its import costs ~0.3 s); compiled functions are cached
per key (op name, dtype signature) in-process and on disk through ``cache=True``.
"""
import functools
import threading

import numpy as np

xp = np
_compiled = {}

# fastmath flags that keep special values IEEE's: no nnan/ninf, so NaN and inf
# propagate; no arcp, with which LLVM turns ``1 / sqrt(x)`` into an rsqrt estimate and
# a Newton step (NaN at 0 and inf, -inf at a float32 subnormal, where 1/sqrt gives inf,
# 0 and 1e20); no afn, which lets it swap library calls for approximations; no reassoc,
# with which it folds ``x - (x + 1)`` to -1 and ``x - x * 0`` to x (NaN at inf and NaN)
FASTMATH = frozenset({"contract", "nsz"})
# for a kernel that sums: reassoc too, without which LLVM keeps a loop's additions in
# order and does not vectorise it (the folds above may then happen in its terms)
FASTMATH_SUM = FASTMATH | {"reassoc"}

# glibc malloc thresholds set by ``tune_malloc`` (bytes)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
malloc_tuned = []  # [True] once mallopt succeeded


def tune_malloc():
    """Keep freed NumPy buffers of up to 32 MiB in the heap for reuse.

    glibc serves large blocks with fresh ``mmap``s and returns freed memory at the
    heap top to the OS above a trim threshold, so a training loop whose temporaries
    are a few MB each page-faults them in again (zero-filled) on every step: 25-45%
    of a small CNN step here (``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``
    set the same). Freed memory is then reused rather than unmapped; the process's
    peak footprint does not grow. glibc only (elsewhere nothing happens); an
    environment that sets either variable itself, or ``TAPEGRAD_TUNE_MALLOC=0``,
    is left alone. Returns whether the thresholds were set.
    """
    import os
    import sys
    if malloc_tuned or not sys.platform.startswith("linux"):
        return bool(malloc_tuned)
    if os.environ.get("TAPEGRAD_TUNE_MALLOC", "1") == "0" or \
            "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to tune
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if ok:
        malloc_tuned.append(True)
    return ok


# log2 of the CPU cycles OpenBLAS's idle workers spin before they sleep, set by
# ``tune_blas`` (OpenBLAS's own default is 28: ~0.1 s)
BLAS_SPIN = 18
blas_tuned = []  # [True] once the workers were restarted with BLAS_SPIN


def tune_blas():
    """Let NumPy's OpenBLAS workers sleep ~0.1 ms after a call instead of ~0.1 s.

    OpenBLAS's idle workers spin (``sched_yield`` in a loop) for ``2**28`` cycles after
    each multi-threaded call before they sleep, so between GEMMs they hold the cores
    that tapegrad's own kernels (Numba's threads, ``run_chunked``) need: on a 2-core
    machine a Transformer step's elementwise and row kernels ran ~2x slower than
    alone, and an LSTM run as one loop per thread on its block of rows 1.7x slower.
    OpenBLAS reads its ``OPENBLAS_THREAD_TIMEOUT`` (log2 cycles) when it starts its
    workers: this sets it to ``BLAS_SPIN`` for a moment, has OpenBLAS read its
    environment again (``openblas_read_env``) and stops the workers
    (``blas_thread_shutdown_``, what OpenBLAS itself does before each ``fork``); its
    next threaded call starts them again with the new timeout. Back-to-back GEMMs
    still find them awake. Only for the pthreads build that NumPy's wheel ships (not
    an OpenMP one, not another BLAS); an environment that sets
    ``OPENBLAS_THREAD_TIMEOUT`` itself, or ``TAPEGRAD_TUNE_BLAS=0``, is left alone.
    Call it when no other thread is inside BLAS (tapegrad calls it at import).
    Returns whether the workers now use ``BLAS_SPIN``.
    """
    import os
    import sys
    if blas_tuned or not sys.platform.startswith("linux"):
        return bool(blas_tuned)
    if os.environ.get("TAPEGRAD_TUNE_BLAS", "1") == "0" or \
            "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return False
    try:
        import ctypes

        from .cpu_kernels.blas import numpy_openblas
        path = numpy_openblas()
        if path is None:
            return False
        lib = ctypes.CDLL(path)
        parallel = next((getattr(lib, n) for n in (
            "scipy_openblas_get_parallel64_", "openblas_get_parallel64_",
            "openblas_get_parallel") if hasattr(lib, n)), None)
        read_env, shutdown, timeout = (lib.openblas_read_env, lib.blas_thread_shutdown_,
                                       lib.openblas_thread_timeout)
    except (OSError, AttributeError):  # another BLAS, or an OpenBLAS without them
        return False
    if parallel is None or parallel() != 1:  # (1: OpenBLAS's own pthreads pool)
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(BLAS_SPIN)
    try:
        read_env()
    finally:  # (child processes inherit the user's environment, not this)
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    if timeout() != BLAS_SPIN:
        return False
    shutdown()
    blas_tuned.append(True)
    return True


def numba():
    import numba as _numba
    return _numba


def compile_source(key, source, func_name, *, parallel=True, fastmath=FASTMATH, vectorize=None,
                   error_model="python"):
    """Exec generated Python ``source`` and njit ``func_name`` once per ``key``.

    Generated modules are written under a cache folder so Numba's on-disk cache can
    find them again in a new process. The kernels are called from Python only, so
    they are compiled without the C-callable wrapper Numba adds for use as a
    first-class function value (~15% of a small kernel's compile time).
    """
    fn = _compiled.get(key)
    if fn is not None:
        return fn
    with _compiling:  # (chunks of one call may ask for the same kernel on two threads)
        fn = _compiled.get(key)
        if fn is not None:
            return fn
        nb = numba()
        # (the flags in the source: a module named by its digest, so that Numba's
        # on-disk cache, which keys on the code, never returns one built with others)
        flags = f"# fastmath {sorted(fastmath)}, error_model {error_model}\n"
        py = getattr(load_source(flags + source), func_name)
        if vectorize is not None:
            fn = nb.vectorize(vectorize, target="parallel" if parallel else "cpu",
                              fastmath=set(fastmath), cache=True)(py)
        else:
            fn = nb.njit(parallel=parallel, fastmath=set(fastmath), cache=True, nogil=True,
                         error_model=error_model, no_cfunc_wrapper=True)(py)
        _compiled[key] = fn
    return fn


_compiling = threading.RLock()  # held while a kernel's module is loaded and compiled


def load_source(source, prefix="_tg_gen_"):
    """Import generated Python ``source`` as a module kept under the cache folder
    (named by its digest, so Numba's on-disk cache finds it again in a new process)."""
    import hashlib
    import sys
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    modname = f"{prefix}{digest}"
    mod = sys.modules.get(modname)
    if mod is not None:
        return mod
    with _compiling:  # (another thread sees the module only once it is executed)
        mod = sys.modules.get(modname)
        return mod if mod is not None else _load(modname, source)


def _load(modname, source):
    import importlib.util
    import os
    import sys
    folder = os.path.join(_cache_dir(), "gen")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, modname + ".py")
    if not os.path.exists(path):
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[modname] = mod
    return mod


def threads():
    """CPU threads ``run_chunked`` uses (the process's CPU affinity)."""
    if not _pool:
        import os
        try:
            n = max(1, len(os.sched_getaffinity(0)))
        except AttributeError:
            n = os.cpu_count() or 1
        env = os.environ.get("NUMBA_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
        if env and env.isdigit() and int(env) > 0:
            n = min(n, int(env))  # the same thread budget as Numba and BLAS were given
        _pool.append(n)
    return _pool[0]


_pool = []  # [thread count, worker job queues]
CHUNK_MIN = 1 << 17


class blas_single_thread:
    """Context: BLAS runs on one thread inside (our own loop spreads the work over
    the threads). OpenBLAS's idle workers spin-wait after each multi-threaded call,
    which on a 2-core machine slows everything else that runs next 3-5x. Uses
    threadpoolctl where it is installed; a no-op otherwise."""
    _libs = None
    _calls = None  # [(get, set)] of each library's own C functions, where found

    def __enter__(self):
        libs = blas_single_thread._libs
        if libs is None:
            libs = blas_single_thread._libs = _blas_controllers()
            blas_single_thread._calls = _blas_calls(libs)
        calls = blas_single_thread._calls
        if calls is not None and threading.current_thread() is threading.main_thread():
            # (the C calls themselves: threadpoolctl's accessors cost ~5 us a kernel)
            self.saved = [(put, n) for get, put in calls if (n := get()) != 1]
            for put, _ in self.saved:
                put(1)
            self.direct = True
            return self
        self.direct = False
        self.saved = [(lib, lib.num_threads) for lib in libs if lib.num_threads != 1]
        for lib, _ in self.saved:
            lib.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.direct:
            for put, n in self.saved:
                put(n)
            return
        for lib, n in self.saved:
            lib.set_num_threads(n)


def _blas_controllers():
    try:
        import threadpoolctl
    except ImportError:
        return []
    return [c for c in threadpoolctl.ThreadpoolController().lib_controllers
            if c.user_api == "blas"]


def _blas_calls(libs):
    """``[(get, set)]``: the thread-count functions of each BLAS in ``libs``, when all
    are OpenBLAS with its own thread pool (not OpenMP, whose count is per thread) and
    threadpoolctl names their symbols; else None (threadpoolctl's accessors are used).
    Called from the main thread only: OpenBLAS's pool is process-wide."""
    out = []
    for lib in libs:
        try:
            if getattr(lib, "internal_api", None) != "openblas" or \
                    lib.threading_layer == "openmp":
                return None
            get = lib._get_symbol("openblas_get_num_threads")
            put = lib._get_symbol("openblas_set_num_threads")
        except Exception:  # (another threadpoolctl: its own accessors)
            return None
        if get is None or put is None:
            return None
        out.append((get, put))
    return out


def run_chunked(fn, n, *args, min_chunk=CHUNK_MIN, collect=False):
    """Call a serial, ``nogil`` kernel ``fn(n, *args)`` over ``[0, n)`` in chunks on
    all CPU threads: each array argument whose first dim is ``n`` is sliced per
    chunk along it, others are passed whole. Chunks hold at least ``min_chunk``
    rows. With ``collect`` it returns the chunks' return values in chunk order (a
    reduction kernel's partial results: the split depends only on ``n`` and the
    thread count, so the combined result does not depend on scheduling).

    Chunks are claimed dynamically and the caller works too, waiting only for chunks
    already started: a worker the OS has not scheduled yet (a busy machine) delays
    nothing, where a static split (Numba's ``prange``) waits for it.
    """
    nt = threads()
    if nt == 1 or n < 2 * min_chunk:
        r = fn(n, *args)
        return [r] if collect else r
    import itertools
    import threading
    size = max(min_chunk, -(-n // (4 * nt)))
    chunks = -(-n // size)
    cut = [isinstance(a, np.ndarray) and a.ndim >= 1 and a.shape[0] == n for a in args]
    claim = itertools.count()
    finished = itertools.count(1)  # next() on it is atomic under the GIL
    done = threading.Lock()  # held until the last chunk finishes
    done.acquire()
    error = []
    results = [None] * chunks

    def work():
        while True:
            c = next(claim)
            if c >= chunks:
                return
            lo = c * size
            hi = min(n, lo + size)
            try:
                results[c] = fn(hi - lo, *[a[lo:hi] if k else a for a, k in zip(args, cut)])
            except BaseException as e:  # re-raised by the caller
                error.append(e)
            if next(finished) == chunks:
                done.release()
    queues = _workers(nt - 1)
    for q in queues[:chunks - 1]:
        q.put(work)
    work()
    done.acquire()
    if error:
        raise error[0]
    return results if collect else None


_fork_hook = []  # [True] once the after-fork hook is registered


def _forget_workers():
    """After a fork: the child has no worker threads; its next parallel call starts
    its own."""
    del _pool[1:]


_on_worker = threading.local()  # .yes on the worker threads


def _worker_loop(q):
    _on_worker.yes = True
    while True:
        q.get()()


def _workers(k):
    """The job queues of (at least) ``k`` persistent daemon threads, started on first
    use (and again in a forked child, which inherits no threads). A hand-off is one
    ``SimpleQueue.put`` (no future, no executor bookkeeping); a worker not scheduled
    yet only leaves its chunks to the caller, which claims them dynamically."""
    if len(_pool) < 2:
        import os
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_workers)
            _fork_hook.append(True)
        _pool.append([])
    qs = _pool[1]
    if len(qs) < k:
        import queue
        import threading
        with _compiling:
            for i in range(len(qs), k):
                q = queue.SimpleQueue()
                threading.Thread(target=_worker_loop, args=(q,), daemon=True,
                                 name=f"tapegrad-cpu-{i}").start()
                qs.append(q)
    return qs


def run_on_workers(fns):
    """Call each of ``fns`` (nogil work) on its own worker thread and wait for them
    all; the caller only waits. For loops that call BLAS from compiled code (the
    recurrent layers' sequence loops): here OpenBLAS called from the main thread while
    a worker called it ran both at about half speed (two 16-row GEMM loops side by
    side: 11.4 ms with the main thread as one of them, 6.0 ms on two workers, 5.9 ms
    one alone), so ``run_chunked``'s caller-works-too does not suit them. Called on a
    worker thread (a job that runs such work itself), it runs ``fns`` in turn there: a
    worker waiting for its own queue would wait for ever."""
    if len(fns) == 1 or getattr(_on_worker, "yes", False):
        for fn in fns:
            fn()
        return
    left = [len(fns)]
    done = threading.Lock()
    done.acquire()
    error = []
    count = threading.Lock()

    def job(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # re-raised by the caller
                error.append(e)
            with count:
                left[0] -= 1
                last = left[0] == 0
            if last:
                done.release()
        return run
    for q, fn in zip(_workers(len(fns)), fns):
        q.put(job(fn))
    done.acquire()
    if error:
        raise error[0]


ROW_BLOCK = 1 << 16  # the smallest block of elements run_rows hands a thread


def run_rows(fn, rows, *arrays, per_row):
    """``run_chunked`` for a kernel whose rows hold ``per_row`` elements each: blocks
    of at least ~64k elements."""
    run_chunked(fn, rows, *arrays, min_chunk=max(1, ROW_BLOCK // max(per_row, 1)))


@functools.lru_cache(maxsize=None)
def _cache_dir():
    import os
    base = os.environ.get("TAPEGRAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tapegrad")
    os.makedirs(base, exist_ok=True)
    return base


def njit(fn=None, **kw):
    """Decorator: Numba-compile a hand-written kernel lazily on first call (called
    from Python: without the first-class-function wrapper, as ``compile_source``)."""
    def wrap(f):
        compiled = []

        @functools.wraps(f)
        def call(*args):
            if not compiled:
                opts = dict(cache=True, nogil=True, no_cfunc_wrapper=True)
                opts.update(kw)
                compiled.append(numba().njit(**opts)(f))
            return compiled[0](*args)
        call.py_func = f
        return call
    return wrap(fn) if fn is not None else wrap


_typed = {}


def typed(fn, *argtypes, **kw):
    """``fn`` Numba-compiled for exactly the argument types ``argtypes`` (built with
    ``arr``, or Numba scalar types by name: ``"int64"``, ``"float64"``), once per
    process (and cached on disk), at the first call for those types.

    Numba compiles a lazily jitted function anew for every combination of argument
    types it meets: each array layout (C, F, any strides), read-only flag and scalar
    type (a bool, a NumPy float32 scalar) is another compile of the same loop. A
    function compiled for declared types takes what converts to them instead: a C- or
    F-contiguous array where any strides are declared, a writeable array where a
    read-only one is, a bool or int where int64 is. Arguments that convert to none of
    them (an unaligned array) compile their own specialization, as a lazy function.
    """
    key = (fn, argtypes)
    k = _typed.get(key)
    if k is None:
        nb = numba()
        opts = dict(cache=True, nogil=True, no_cfunc_wrapper=True)  # as compile_source
        opts.update(kw)
        sig = tuple(getattr(nb.types, t) if isinstance(t, str) else t for t in argtypes)
        exact = nb.njit([sig], **opts)(fn)
        lazy = []

        def k(*args):
            try:
                return exact(*args)
            except TypeError as e:
                if "No matching definition" not in str(e):
                    raise
            if not lazy:
                lazy.append(nb.njit(**opts)(fn))
            return lazy[0](*args)
        k.exact = exact
        _typed[key] = k
    return k


@functools.lru_cache(maxsize=None)
def arr(dtype, ndim, layout="C", readonly=False):
    """The Numba type of a ``dtype`` array of ``ndim`` dims (``layout``: ``"C"``
    contiguous, ``"A"`` any strides), for ``typed``; ``readonly``: the kernel does
    not write it (any array converts to that, a read-only one included)."""
    nb = numba()
    return nb.types.Array(nb.from_dtype(np.dtype(dtype)), ndim, layout, readonly=readonly)


_special = {}


def special(name):
    """Vectorised special functions NumPy lacks (erf, erfc), compiled with Numba."""
    fn = _special.get(name)
    if fn is None:
        import math
        nb = numba()
        scalar = {"erf": math.erf, "erfc": math.erfc, "lgamma": math.lgamma}[name]
        src = {"erf": lambda x: math.erf(x), "erfc": lambda x: math.erfc(x),
               "lgamma": lambda x: math.lgamma(x)}[name]
        del scalar
        fn = _special[name] = nb.vectorize(["float32(float32)", "float64(float64)"],
                                           cache=True)(src)
    return fn


_helpers = {}
_MAGIC_BITS = 0x4B400000  # bits of 1.5 * 2**23: t = x + that rounds x to an integer k
# bump when an intrinsic below changes: generated kernels embed it in their source, so
# Numba's disk cache (keyed by the source file) does not serve stale machine code
HELPERS_VERSION = 8
GATHER_WIDTH = 16  # elements of one ``gather16``


def native_half():
    """Whether the code Numba generates converts float16 in hardware (x86 with F16C,
    64-bit ARM): LLVM's ``half`` then lowers to one instruction, else to a library
    call that a JIT may not resolve, so the integer conversions are used instead.
    Generated kernels name the answer in their source, so Numba's disk cache keeps
    the two apart."""
    if _helpers.get("native_half") is None:
        _helpers["native_half"] = _native_half()
    return _helpers["native_half"]


def _target_has(feature):
    """Whether the CPU Numba compiles for has x86 ``feature`` (``avx512f``)."""
    import platform

    from numba.core import config
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if config.CPU_NAME and config.CPU_NAME != "host":  # a portable target was asked for
        return f"+{feature}" in (config.CPU_FEATURES or "")
    import llvmlite.binding as llvm
    return bool(llvm.get_host_cpu_features().get(feature))


def _native_half():
    import platform

    from numba.core import config
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    if machine not in ("x86_64", "amd64"):
        return False
    if config.CPU_NAME and config.CPU_NAME != "host":  # a portable target was asked for
        return "+f16c" in (config.CPU_FEATURES or "")
    import llvmlite.binding as llvm
    return bool(llvm.get_host_cpu_features().get("f16c"))


def jit_helpers():
    """What generated kernel modules use from Numba (fusion never imports numba).

    Returns a namespace with ``prange``; ``helper``, a decorator that njits a scalar
    helper with the given fastmath flags (default: only ``contract`` and ``nsz``, so the
    Cody-Waite reductions of the approximations are not reassociated; LLVM keeps the
    flags per instruction after inlining into the kernel); and bit casts between floats
    and integers (``f32_bits(x) -> int64``, ``f32_from_bits(int) -> float32`` and the
    float64 pair), which vectorise, unlike ``ldexp``/``frexp``; and float32 pieces
    built on 32-bit integer lanes, which AVX2 vectorises fully: ``f32_ldexp(y, kf)``
    (``y * 2**kf``, ``kf`` integral), ``f32_ldexp_magic(y, t)`` and
    ``f32_pow2_magic(t, c)`` (``y * 2**k`` and ``2**(k + c - 127)`` for ``t = k + 1.5 *
    2**23``, the rounding trick's float, whose low bits hold ``k``),
    ``f32_select_sign(x, a, b)`` (``a`` where ``x``'s sign bit is set, else ``b``),
    ``f32_exponent(x)`` (biased exponent field as a
    float) and ``f32_mantissa(x)`` (significand in ``[0.5, 1)``); and the half-width
    loads and stores of fused kernels, on the 16 bits of a bfloat16 or float16 element
    held as uint16 (``bf16_load``/``f16_load``: uint16 -> float32, exact;
    ``bf16_store``/``f16_store``: float32 -> uint16, rounded to nearest-even, infinities
    kept, NaN stays a (quiet) NaN with its sign; ``bf16_load_lo``/``bf16_load_hi``/
    ``bf16_store_pair``: the same on two bfloat16 elements held in one uint32, the
    first in its low half), all on 32-bit integer lanes with
    selects, no branch, so a kernel's loop still vectorises (float16 through LLVM's
    ``half`` where the CPU converts it in hardware, ``native_half``; the integer
    versions stay reachable as ``f16_load_int``/``f16_store_int``); ``f16_round``:
    float32 -> float32 rounded to the nearest float16 value (a rounding inside a
    fused chain), on the float32's bits; and
    ``gather16(table, idx, j, buf, k)``: ``buf[k:k+16] = table[idx[j:j+16]]`` for a
    float32 ``table`` and ``buf`` and a uint16 ``idx``, one vector gather (the lookup
    of a half-width kernel's 65,536-entry tables, ``fusion/tables.py``).
    """
    ns = _helpers.get("ns")
    if ns is not None:
        return ns
    import types as _types
    nb = numba()
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    def _cast(src, dst, ir_int, bits_to_float):
        @intrinsic
        def cast(typingctx, x):
            sig = dst(src) if bits_to_float else dst(src)

            def codegen(context, builder, sig, args):
                v = args[0]
                if bits_to_float:
                    v = builder.trunc(v, ir_int) if ir_int.width < 64 else v
                    return builder.bitcast(v, context.get_value_type(dst))
                v = builder.bitcast(v, ir_int)
                return builder.sext(v, ir.IntType(64)) if ir_int.width < 64 else v
            return sig, codegen
        return cast

    i32, i64 = ir.IntType(32), ir.IntType(64)

    def helper(fn=None, fastmath=("contract", "nsz"), cache=False):
        def wrap(f):
            # forceinline: LLVM-level always-inline, so the helper's own flags stay on
            # its instructions and no call is left to stop the loop vectoriser
            return nb.njit(fastmath=set(fastmath), nogil=True, error_model="numpy",
                           cache=cache, forceinline=True)(f)
        return wrap(fn) if fn is not None else wrap

    f32 = ir.FloatType()

    def _f32_op(nargs, body):
        # a float32 intrinsic whose body works on i32 lanes (Numba would widen
        # integer arithmetic written in Python to int64, which AVX2 cannot convert
        # to or from float32 in vector registers)
        def codegen(context, builder, sig, llargs):
            return body(builder, *llargs)
        if nargs == 1:
            @intrinsic
            def op1(typingctx, x):
                return types.float32(types.float32), codegen
            return op1

        @intrinsic
        def op2(typingctx, x, y):
            return types.float32(types.float32, types.float32), codegen
        return op2

    def _ldexp(b, y, kf):  # y * 2**k, k = int(kf) in [-252, 254], in two exact steps
        k = b.fptosi(kf, i32)
        k1 = b.ashr(k, ir.Constant(i32, 1))
        k2 = b.sub(k, k1)
        s1 = b.bitcast(b.shl(b.add(k1, ir.Constant(i32, 127)), ir.Constant(i32, 23)), f32)
        s2 = b.bitcast(b.shl(b.add(k2, ir.Constant(i32, 127)), ir.Constant(i32, 23)), f32)
        return b.fmul(b.fmul(y, s1), s2)

    def _ldexp_magic(b, y, t):
        # y * 2**k where t = k + 1.5 * 2**23 (the float the rounding trick leaves: its
        # low mantissa bits hold k), k in [-252, 254], in two exact steps
        k = b.sub(b.bitcast(t, i32), ir.Constant(i32, _MAGIC_BITS))
        k1 = b.ashr(k, ir.Constant(i32, 1))
        k2 = b.sub(k, k1)
        s1 = b.bitcast(b.shl(b.add(k1, ir.Constant(i32, 127)), ir.Constant(i32, 23)), f32)
        s2 = b.bitcast(b.shl(b.add(k2, ir.Constant(i32, 127)), ir.Constant(i32, 23)), f32)
        return b.fmul(b.fmul(y, s1), s2)

    @intrinsic
    def sum_add(typingctx, s, v):
        # s + v as one fadd that LLVM may reassociate (a reduction's accumulation: its
        # loop vectorises) in a kernel whose other instructions may not be; v cast to
        # s's type. An intrinsic, so a kernel calling it stays in Numba's disk cache
        if not (isinstance(s, types.Float) and isinstance(v, (types.Float, types.Integer,
                                                              types.Boolean))):
            return None

        def codegen(context, builder, sig, args):
            w = context.cast(builder, args[1], sig.args[1], sig.args[0])
            return builder.fadd(args[0], w, flags=tuple(sorted(FASTMATH_SUM)))
        return s(s, v), codegen

    @intrinsic
    def f32_pow2_magic(typingctx, t, c):
        # 2**(k + c - 127) for t = k + 1.5 * 2**23, c an integer constant: the bits of t
        # shifted into the exponent field ((bits(t) << 23) drops the magic's own bits)
        if not isinstance(c, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            bits = builder.bitcast(args[0], i32)
            cc = context.cast(builder, args[1], sig.args[1], types.int32)
            return builder.bitcast(builder.shl(builder.add(bits, cc), ir.Constant(i32, 23)),
                                   f32)
        return types.float32(types.float32, c), codegen

    @intrinsic
    def f32_select_sign(typingctx, x, a, b):
        # a where x's sign bit is set (x < 0, -0.0, negative NaNs), else b: a single
        # blend on the sign bit (no compare)
        def codegen(context, builder, sig, args):
            neg = builder.icmp_signed("<", builder.bitcast(args[0], i32), ir.Constant(i32, 0))
            return builder.select(neg, args[1], args[2])
        return types.float32(types.float32, types.float32, types.float32), codegen

    def _exponent(b, x):  # the biased exponent field, as a float
        bits = b.bitcast(x, i32)
        e = b.and_(b.lshr(bits, ir.Constant(i32, 23)), ir.Constant(i32, 255))
        return b.sitofp(e, f32)

    def _mantissa(b, x):  # the significand scaled into [0.5, 1)
        bits = b.bitcast(x, i32)
        m = b.or_(b.and_(bits, ir.Constant(i32, 0x7FFFFF)), ir.Constant(i32, 0x3F000000))
        return b.bitcast(m, f32)

    i16 = ir.IntType(16)

    def _c(v):
        return ir.Constant(i32, v)

    def _u16_to_f32(body):
        @intrinsic
        def load(typingctx, h):
            def codegen(context, builder, sig, args):
                return body(builder, builder.zext(args[0], i32))
            return types.float32(types.uint16), codegen
        return load

    def _f32_to_u16(body):
        @intrinsic
        def store(typingctx, x):
            def codegen(context, builder, sig, args):
                return builder.trunc(body(builder, builder.bitcast(args[0], i32)), i16)
            return types.uint16(types.float32), codegen
        return store

    def _bf16_load(b, h):  # the bfloat16 bits are the float32's top half
        return b.bitcast(b.shl(h, _c(16)), f32)

    def _bf16_round(b, u):
        # nearest-even, the result in the top half: add 0x8000 where the lowest kept
        # bit is set, else 0x7fff (a bit test and a blend: no shift); a NaN keeps its
        # top half with the quiet bit set (rounding could make it an inf). Not LLVM's
        # ``fptrunc float to bfloat``: with AVX512-BF16 it lowers to vcvtneps2bf16,
        # which flushes float32 subnormals to zero (and is slower than these integer
        # lanes on Zen 4)
        odd = b.icmp_unsigned("!=", b.and_(u, _c(0x10000)), _c(0))
        r = b.add(u, b.select(odd, _c(0x8000), _c(0x7FFF)))
        x = b.bitcast(u, f32)
        return b.select(b.fcmp_unordered("uno", x, x), b.or_(u, _c(0x400000)), r)

    def _bf16_store(b, u):
        return b.lshr(_bf16_round(b, u), _c(16))

    # two bfloat16 elements in one uint32 (little-endian: the first in the low half):
    # a pair is widened by a shift and a mask and packed back by a shift and an or,
    # with no 16 <-> 32-bit lane conversions
    @intrinsic
    def bf16_load_lo(typingctx, w):
        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.shl(args[0], _c(16)), f32)
        return types.float32(types.uint32), codegen

    @intrinsic
    def bf16_load_hi(typingctx, w):
        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.and_(args[0], _c(-65536)), f32)
        return types.float32(types.uint32), codegen

    @intrinsic
    def bf16_store_pair(typingctx, lo, hi):
        def codegen(context, b, sig, args):
            r0 = _bf16_round(b, b.bitcast(args[0], i32))
            r1 = _bf16_round(b, b.bitcast(args[1], i32))
            return b.or_(b.lshr(r0, _c(16)), b.and_(r1, _c(-65536)))
        return types.uint32(types.float32, types.float32), codegen

    def _f16_load(b, h):
        # exponent and mantissa moved into float32's fields and rebiased; infinities
        # and NaNs get the all-ones exponent; subnormals (and zero) are the mantissa
        # times 2**-24, exact; then the sign
        o = b.shl(b.and_(h, _c(0x7FFF)), _c(13))
        e = b.and_(o, _c(0x7C00 << 13))
        normal = b.add(o, _c((127 - 15) << 23))
        special = b.add(o, _c((255 - 31) << 23))
        sub = b.fmul(b.sitofp(b.and_(h, _c(0x3FF)), f32), ir.Constant(f32, 2.0 ** -24))
        bits = b.select(b.icmp_unsigned("==", e, _c(0x7C00 << 13)), special, normal)
        bits = b.select(b.icmp_unsigned("==", e, _c(0)), b.bitcast(sub, i32), bits)
        return b.bitcast(b.or_(bits, b.shl(b.and_(h, _c(0x8000)), _c(16))), f32)

    def _f16_store(b, u):
        # F. Giesen's float_to_half_fast3_rtne: normal results round by integer
        # arithmetic; results below 2**-14 by one float add of 0.5, whose rounding
        # puts the subnormal's mantissa (nearest-even) in the low bits
        sign = b.and_(u, _c(0x80000000))
        a = b.xor(u, sign)
        big = b.select(b.icmp_unsigned(">", a, _c(0x7F800000)), _c(0x7E00), _c(0x7C00))
        magic = 126 << 23  # 0.5
        sub = b.sub(b.bitcast(b.fadd(b.bitcast(a, f32), ir.Constant(f32, 0.5)), i32),
                    _c(magic))
        odd = b.and_(b.lshr(a, _c(13)), _c(1))
        norm = b.lshr(b.add(b.add(a, _c(((15 - 127) << 23) + 0xFFF)), odd), _c(13))
        o = b.select(b.icmp_unsigned("<", a, _c(113 << 23)), sub, norm)
        o = b.select(b.icmp_unsigned(">=", a, _c((127 + 16) << 23)), big, o)
        return b.or_(o, b.lshr(sign, _c(16)))

    def _f16_load_hw(b, h):  # one instruction each way (x86 F16C's vcvtph2ps / vcvtps2ph)
        return b.fpext(b.bitcast(b.trunc(h, i16), ir.HalfType()), f32)

    def _f16_store_hw(b, u):
        return b.zext(b.bitcast(b.fptrunc(b.bitcast(u, f32), ir.HalfType()), i16), i32)

    def _f16_round(b, x):
        # x rounded to the nearest float16 value, held as a float32 (what f16_load of
        # f16_store gives): no ``half`` type, so LLVM cannot merge it into a chain of
        # native half operations without the rounding. Normal results round at the
        # 13th bit to nearest-even (at least 2**16 after rounding: an infinity);
        # below 2**-14 to a multiple of 2**-24 by one float add of 0.5, whose low bits
        # then count them (read as an integer: the kernel's fast-math flags, which
        # Numba puts on every float instruction, cannot fold it away); NaN: the quiet
        # NaN with its sign
        u = b.bitcast(x, i32)
        sign = b.and_(u, _c(-0x80000000))
        a = b.xor(u, sign)
        odd = b.and_(b.lshr(a, _c(13)), _c(1))
        norm = b.and_(b.add(b.add(a, _c(0xFFF)), odd), _c(-0x2000))
        norm = b.select(b.icmp_unsigned(">=", norm, _c(0x47800000)), _c(0x7F800000), norm)
        norm = b.select(b.icmp_unsigned(">", a, _c(0x7F800000)), _c(0x7FC00000), norm)
        half = ir.Constant(f32, 0.5)
        m = b.sub(b.bitcast(b.fadd(b.bitcast(a, f32), half), i32), _c(126 << 23))
        sub = b.bitcast(b.fmul(b.sitofp(m, f32), ir.Constant(f32, 2.0 ** -24)), i32)
        o = b.select(b.icmp_unsigned("<", a, _c(113 << 23)), sub, norm)
        return b.bitcast(b.or_(o, sign), f32)

    avx512 = _target_has("avx512f")

    @intrinsic
    def gather16(typingctx, table, idx, j, buf, k):
        # buf[k:k+16] = table[idx[j:j+16]] as one vector gather (llvm.masked.gather:
        # AVX-512's and AVX2's gather instructions, scalar loads elsewhere). LLVM's
        # loop vectoriser does not gather through an index array itself: it cannot
        # rule out that the loop's stores alias the table
        if not (isinstance(table, types.Array) and table.dtype == types.float32 and
                isinstance(idx, types.Array) and idx.dtype == types.uint16 and
                isinstance(buf, types.Array) and buf.dtype == types.float32):
            return None
        w = GATHER_WIDTH

        def codegen(context, b, sig, args):
            arr = [context.make_array(t)(context, b, v) for t, v in
                   ((sig.args[0], args[0]), (sig.args[1], args[1]), (sig.args[3], args[3]))]
            j_ = context.cast(b, args[2], sig.args[2], types.intp)
            k_ = context.cast(b, args[4], sig.args[4], types.intp)
            vi = b.load(b.bitcast(b.gep(arr[1].data, [j_], inbounds=True),
                                  ir.VectorType(i16, w).as_pointer()), align=2)
            vf, mask = ir.VectorType(f32, w), ir.VectorType(ir.IntType(1), w)
            out = b.bitcast(b.gep(arr[2].data, [k_], inbounds=True), vf.as_pointer())
            if avx512:  # one vgatherdps on 32-bit indices (the generic gather's
                # 64-bit addresses take two vgatherqps: ~20% slower on Zen 4)
                i8p = ir.IntType(8).as_pointer()
                name = "llvm.x86.avx512.mask.gather.dps.512"
                fn = b.module.globals.get(name) or ir.Function(
                    b.module, ir.FunctionType(vf, [vf, i8p, ir.VectorType(i32, w), mask, i32]),
                    name)
                got = b.call(fn, [ir.Constant(vf, None), b.bitcast(arr[0].data, i8p),
                                  b.zext(vi, ir.VectorType(i32, w)), ir.Constant(mask, [1] * w),
                                  _c(4)])
                b.store(got, out, align=4)
                return context.get_dummy_value()
            off = b.shl(b.zext(vi, ir.VectorType(i64, w)), ir.Constant(ir.VectorType(i64, w),
                                                                      [2] * w))
            base = b.insert_element(ir.Constant(ir.VectorType(i64, w), None),
                                    b.ptrtoint(arr[0].data, i64), _c(0))
            base = b.shuffle_vector(base, ir.Constant(ir.VectorType(i64, w), None),
                                    ir.Constant(ir.VectorType(i32, w), [0] * w))
            ptrs = b.inttoptr(b.add(base, off), ir.VectorType(arr[0].data.type, w))
            name = f"llvm.masked.gather.v{w}f32.v{w}p0"
            fn = b.module.globals.get(name) or ir.Function(
                b.module, ir.FunctionType(vf, [ptrs.type, i32, mask, vf]), name)
            got = b.call(fn, [ptrs, _c(4), ir.Constant(mask, [1] * w), ir.Constant(vf, None)])
            b.store(got, out, align=4)
            return context.get_dummy_value()
        return types.void(table, idx, j, buf, k), codegen

    f16_int = (_u16_to_f32(_f16_load), _f32_to_u16(_f16_store))
    f16 = (_u16_to_f32(_f16_load_hw), _f32_to_u16(_f16_store_hw)) if native_half() else f16_int
    ns = _types.SimpleNamespace(
        bf16_load=_u16_to_f32(_bf16_load), bf16_store=_f32_to_u16(_bf16_store),
        bf16_load_lo=bf16_load_lo, bf16_load_hi=bf16_load_hi, bf16_store_pair=bf16_store_pair,
        f16_load=f16[0], f16_store=f16[1], f16_load_int=f16_int[0], f16_store_int=f16_int[1],
        f16_round=_f32_op(1, _f16_round),
        gather16=gather16, prange=nb.prange, helper=helper, version=HELPERS_VERSION,
        sum_add=sum_add,
        f32_ldexp=_f32_op(2, _ldexp), f32_ldexp_magic=_f32_op(2, _ldexp_magic),
        f32_pow2_magic=f32_pow2_magic, f32_select_sign=f32_select_sign,
        f32_exponent=_f32_op(1, _exponent),
        f32_mantissa=_f32_op(1, _mantissa),
        f32_bits=_cast(types.float32, types.int64, i32, False),
        f32_from_bits=_cast(types.int64, types.float32, i32, True),
        f64_bits=_cast(types.float64, types.int64, i64, False),
        f64_from_bits=_cast(types.int64, types.float64, i64, True))
    _helpers["ns"] = ns
    return ns
