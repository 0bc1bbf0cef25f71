"""The CPU device: NumPy buffers and the Numba compile cache.

Numba is imported lazily (its import costs ~0.3 s); compiled functions are cached
per key (op name, dtype signature) in-process and on disk through ``cache=True``.
"""
import functools
import numpy as np

xp = np
_compiled = {}

# fastmath flags safe for anomaly detection: no nnan/ninf, so NaN/inf propagate.
FASTMATH = frozenset({"contract", "reassoc", "afn", "arcp", "nsz"})


def numba():
    import numba as _numba
    return _numba


def compile_source(key, source, func_name, *, parallel=True, fastmath=FASTMATH, vectorize=None,
                   error_model="python"):
    """Exec generated Python ``source`` and njit ``func_name`` once per ``key``.

    Generated modules are written under a cache folder so Numba's on-disk cache can
    find them again in a new process.
    """
    fn = _compiled.get(key)
    if fn is not None:
        return fn
    import hashlib, importlib.util, os, sys
    nb = numba()
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    folder = os.path.join(_cache_dir(), "gen")
    os.makedirs(folder, exist_ok=True)
    modname = f"_tg_gen_{digest}"
    path = os.path.join(folder, modname + ".py")
    if not os.path.exists(path):
        tmp = path + f".{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    py = getattr(mod, func_name)
    if vectorize is not None:
        fn = nb.vectorize(vectorize, target="parallel" if parallel else "cpu",
                          fastmath=set(fastmath), cache=True)(py)
    else:
        fn = nb.njit(parallel=parallel, fastmath=set(fastmath), cache=True, nogil=True,
                     error_model=error_model)(py)
    _compiled[key] = fn
    return fn


@functools.lru_cache(maxsize=None)
def _cache_dir():
    import os
    base = os.environ.get("TAPEGRAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "tapegrad")
    os.makedirs(base, exist_ok=True)
    return base


def njit(fn=None, **kw):
    """Decorator: Numba-compile a hand-written kernel lazily on first call."""
    def wrap(f):
        compiled = []

        @functools.wraps(f)
        def call(*args):
            if not compiled:
                opts = dict(cache=True, nogil=True)
                opts.update(kw)
                compiled.append(numba().njit(**opts)(f))
            return compiled[0](*args)
        call.py_func = f
        return call
    return wrap(fn) if fn is not None else wrap


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


def jit_helpers():
    """What generated kernel modules use from Numba (fusion never imports numba).

    Returns a namespace with ``prange``; ``helper``, a decorator that njits a scalar
    helper with the given fastmath flags (default: only ``contract`` and ``nsz``, so the
    Cody-Waite reductions of the approximations are not reassociated; LLVM keeps the
    flags per instruction after inlining into the kernel); and bit casts between floats
    and integers (``f32_bits(x) -> int64``, ``f32_from_bits(int) -> float32`` and the
    float64 pair), which vectorise, unlike ``ldexp``/``frexp``.
    """
    ns = _helpers.get("ns")
    if ns is not None:
        return ns
    import types as _types
    nb = numba()
    from numba.core import types
    from numba.extending import intrinsic
    from llvmlite import ir

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

    def helper(fn=None, fastmath=("contract", "nsz")):
        def wrap(f):
            return nb.njit(fastmath=set(fastmath), nogil=True, error_model="numpy")(f)
        return wrap(fn) if fn is not None else wrap

    ns = _types.SimpleNamespace(
        prange=nb.prange, helper=helper,
        f32_bits=_cast(types.float32, types.int64, i32, False),
        f32_from_bits=_cast(types.int64, types.float32, i32, True),
        f64_bits=_cast(types.float64, types.int64, i64, False),
        f64_from_bits=_cast(types.int64, types.float64, i64, True))
    _helpers["ns"] = ns
    return ns
