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


def compile_source(key, source, func_name, *, parallel=True, fastmath=FASTMATH, vectorize=None):
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
        fn = nb.njit(parallel=parallel, fastmath=set(fastmath), cache=True, nogil=True)(py)
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
