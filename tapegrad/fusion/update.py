"""Fused in-place updates: a few scalar statements -> one compiled loop.

An optimizer step is a handful of elementwise statements over arrays of one shape
(``m <- beta1 * m + (1 - beta1) * g``, then ``p <- ...`` reading the new ``m``).
``Update`` parses them with the fusion IR (``expr.parse``: the statements are
chained, so a later one sees the values the earlier ones assigned, and shared
subexpressions are computed once) and emits one Numba loop that reads
each array once at ``i``, computes every statement in registers, and writes the
assigned arrays in place (a serial loop; a ``prange`` one for very large arrays,
see ``config``). Hyperparameters are runtime scalar arguments of the
kernel (cast to the arrays' dtype, as PyTorch casts a scalar for a float32
tensor), so a new learning rate, a bias correction that changes every step or a
scheduler compiles nothing; the source is compiled once per dtype and cached on
disk by ``tapegrad.devices.cpu.compile_source``.

>>> import numpy as np
>>> sgd = Update("sgd", [("p", "p - lr * g")], arrays=("p", "g"), scalars=("lr",))
>>> p, g = np.ones(4, np.float32), np.full(4, 2.0, np.float32)
>>> sgd(p, g, 0.25) and p.tolist()   # doctest: +SKIP
[0.5, 0.5, 0.5, 0.5]

On CuPy arrays the same statements run as one CuPy ``ElementwiseKernel``
(``codegen_cuda.update_spec``): one launch per parameter at any size.

``__call__`` returns False (and changes nothing) when it cannot run: Numba is
missing or failed, an array is not a C-contiguous NumPy float32/float64 array of the
common shape, or the arrays are smaller than ``config.min_numel``; the caller then
runs its array-module path.
"""
import hashlib
import warnings

import numpy as np

from . import expr as E
from .codegen_numba import _expr, _lit

__all__ = ["Update", "config"]


class config:
    """``use_numba``: run compiled kernels (False: callers use their NumPy path).
    ``min_numel``: None lets each ``Update`` use its own threshold (below it the
    caller's NumPy path is faster: a parallel Numba launch costs ~5 us, a ufunc call
    ~1 us); an int overrides it for all (tests set 0 to run every kernel).
    ``parallel_min_numel``: arrays this large run a ``prange`` (multi-threaded) loop;
    smaller ones, a serial loop (None: always serial). An update is memory-bound,
    and Numba's OpenMP workers spin-wait after each parallel region: on a 2-core
    machine they took the cores from the next BLAS calls and made a 784-512-512-10
    MLP training step ~3x slower (BLAS at 1 thread, a loaded machine); a serial loop
    costs ~60 us on 400k float32 elements in cache (parallel: ~36 us)."""
    use_numba = True
    min_numel = None
    parallel_min_numel = 1 << 22


_broken = []
_NDARRAY = np.ndarray


def _is_cupy(a):
    return type(a).__module__.startswith("cupy")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class Update:
    """``Update(name, statements, arrays, scalars)``.

    ``statements``: ``[(target, expression), ...]`` (or a dict), run in order; a
    target may be assigned more than once; a target that is one of ``arrays`` is
    written back, any other name is a temporary (kept in a register). ``arrays``:
    names of the array arguments (all of one shape and dtype); ``scalars``: names
    of the scalar arguments. ``min_numel``: smaller arrays are left to the caller's
    NumPy path (measured per optimizer). Call as ``upd(*arrays, *scalars)``.
    """

    def __init__(self, name, statements, arrays, scalars=(), min_numel=0):
        if isinstance(statements, dict):
            statements = list(statements.items())
        self.name, self.arrays, self.scalars = name, tuple(arrays), tuple(scalars)
        self.min_numel = min_numel
        dup = set(self.arrays) & set(self.scalars)
        if dup or len(set(self.arrays)) != len(self.arrays):
            raise ValueError(f"Update {name}: names must be distinct, got arrays "
                             f"{self.arrays} and scalars {self.scalars}")
        self.in_nodes = [E.var(f"__a{k}") for k in range(len(self.arrays))]
        self.scalar_nodes = [E.var(f"__s{k}") for k in range(len(self.scalars))]
        env = dict(zip(self.arrays, self.in_nodes))
        env.update(zip(self.scalars, self.scalar_nodes))
        for target, src in statements:
            if target in self.scalars:
                raise ValueError(f"Update {name}: cannot assign the scalar {target!r}")
            node = E.parse(src, env)
            free = [n.value for n in E.topo([node]) if n.op == "var"
                    and n not in self.in_nodes and n not in self.scalar_nodes]
            if free:
                raise ValueError(f"Update {name}: {free[0]!r} in {src!r} is neither an array "
                                 f"nor a scalar argument")
            env[target] = node
        # only the arrays whose value changed are written back
        self.targets = [k for k, a in enumerate(self.arrays)
                        if env[a] is not self.in_nodes[k]]
        self.out_nodes = [env[self.arrays[k]] for k in self.targets]
        self._kernels = {}

    # ------------------------------------------------------------ source
    def source(self, dtype, parallel=False):
        """Python source of ``kernel(n, a0, a1, ..., s0, s1, ...)`` for ``dtype``
        (a ``prange`` loop when ``parallel``)."""
        dtype = np.dtype(dtype)
        tname = "np.float32" if dtype == np.float32 else "np.float64"
        used = {n for n in E.topo(self.out_nodes)}
        names, consts, body = {}, {}, []
        for k, node in enumerate(self.in_nodes):
            if node in used:
                names[node] = f"x{k}"
                body.append(f"x{k} = a{k}[i]")
        for k, node in enumerate(self.scalar_nodes):
            names[node] = f"s{k}"
        for n in E.topo(self.out_nodes):
            if n in names:
                continue
            if n.op == "const":
                names[n] = consts.setdefault(n.value, f"_c{len(consts)}")
                continue
            t = f"t{len(body)}"
            body.append(f"{t} = {_expr(n, [names[a] for a in n.args], False, tname)}")
            names[n] = t
        for k, node in zip(self.targets, self.out_nodes):
            body.append(f"a{k}[i] = {names[node]}" if not node.is_bool else
                        f"a{k}[i] = _one if {names[node]} else _zero")
        params = ", ".join([f"a{k}" for k in range(len(self.arrays))] +
                           [f"s{k}" for k in range(len(self.scalars))])
        lines = [f'"""tapegrad fused update {self.name} ({dtype.name})."""',
                 "import math as _math", "import numpy as np",
                 "from tapegrad.devices.cpu import jit_helpers as _jit_helpers",
                 "prange = _jit_helpers().prange", "",
                 f"_one, _zero = {tname}(1.0), {tname}(0.0)"]
        lines += [f"{c} = {tname}({_lit(v)})" for v, c in consts.items()]
        loop = "prange" if parallel else "range"
        lines += ["", "", f"def kernel(n, {params}):", f"    for i in {loop}(n):"]
        lines += ["        " + b for b in body]
        return "\n".join(lines) + "\n"

    def kernel(self, dtype, parallel=False):
        """The compiled kernel for ``dtype`` (compiled or loaded from disk once)."""
        key = (np.dtype(dtype), bool(parallel))
        fn = self._kernels.get(key)
        if fn is None:
            from ..devices import cpu
            src = self.source(key[0], key[1])
            fn = self._kernels[key] = cpu.compile_source(
                ("update", hashlib.sha1(src.encode()).hexdigest()), src, "kernel",
                parallel=key[1], fastmath=cpu.FASTMATH, error_model="numpy")
        return fn

    # ------------------------------------------------------------ running
    def __call__(self, *args):
        """``upd(*arrays, *scalars)``: run in place; True if it ran, False (nothing
        changed) if the caller must take its own path."""
        first = args[0]
        if type(first) is not _NDARRAY:
            return self._call_cuda(args) if _is_cupy(first) else False
        if not config.use_numba or _broken:
            return False
        n = first.size
        if n < (self.min_numel if config.min_numel is None else config.min_numel) or n == 0:
            return False
        dt = first.dtype
        par = config.parallel_min_numel is not None and n >= config.parallel_min_numel
        fn = self._kernels.get((dt, par))
        if fn is None and dt not in _FLOATS:
            return False
        na = len(self.arrays)
        if len(args) != na + len(self.scalars):
            raise TypeError(f"Update {self.name}: expected arrays {self.arrays} and scalars "
                            f"{self.scalars}, got {len(args)} arguments")
        shape, flat, targets = first.shape, [n], self.targets
        for k in range(na):
            a = args[k]
            if type(a) is not _NDARRAY or a.dtype != dt or a.shape != shape:
                return False
            if not a.flags.c_contiguous:
                if k in targets:
                    return False
                a = np.ascontiguousarray(a)     # a read-only input: a contiguous copy
            flat.append(a if a.ndim == 1 else a.reshape(-1))
        cast = dt.type
        for k in range(na, len(args)):
            flat.append(cast(args[k]))
        try:
            (fn or self.kernel(dt, par))(*flat)
        except Exception as e:  # numba missing or broken: the NumPy paths still work
            _broken.append(e)
            warnings.warn(f"tapegrad.fusion.update: running {self.name} with Numba failed "
                          f"({type(e).__name__}: {e}); optimizers use NumPy from now on",
                          RuntimeWarning, stacklevel=2)
            return False
        return True

    def cuda_spec(self, dtype):
        """The CuPy ``ElementwiseKernel`` spec of the update for ``dtype``
        (``codegen_cuda.update_spec``): one kernel, one pass over the arrays."""
        from .codegen_cuda import update_spec
        return update_spec(self.in_nodes, self.scalar_nodes, self.targets, self.out_nodes,
                           np.dtype(dtype), self.name)

    def _call_cuda(self, args):
        """The update on CuPy arrays: one ``ElementwiseKernel`` launch writing the
        targets in place (any size, any strides: the kernel indexes each array). False
        when the arrays are not float32/float64 of one shape and dtype."""
        from ..devices import cuda as _cuda
        na = len(self.arrays)
        if len(args) != na + len(self.scalars):
            raise TypeError(f"Update {self.name}: expected arrays {self.arrays} and scalars "
                            f"{self.scalars}, got {len(args)} arguments")
        first = args[0]
        dt = np.dtype(first.dtype)
        if dt not in _FLOATS or first.size == 0:
            return first.size == 0 and dt in _FLOATS
        for a in args[1:na]:
            if not _is_cupy(a) or a.dtype != dt or a.shape != first.shape:
                return False
        spec = self._kernels.get(("cuda", dt))
        if spec is None:
            spec = self._kernels[("cuda", dt)] = self.cuda_spec(dt)
        kern = _cuda.elementwise_kernel(*spec)
        targets = set(self.targets)
        ins = [a for k, a in enumerate(args[:na]) if k not in targets]
        outs = [args[k] for k in self.targets]
        kern(*ins, *[dt.type(s) for s in args[na:]], *outs)
        return True

    def reference(self, *arrays):
        """The same statements evaluated with NumPy ufuncs (for tests), in place."""
        from .op import evaluate
        na = len(self.arrays)
        arrs, svals = arrays[:na], arrays[na:]
        dt = np.result_type(*arrs)
        vals = dict(zip(self.in_nodes, arrs))
        vals.update((n, dt.type(s)) for n, s in zip(self.scalar_nodes, svals))
        for k, r in zip(self.targets, evaluate(self.out_nodes, vals, dt)):
            arrs[k][...] = r
