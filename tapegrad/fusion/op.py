"""Expression ops: an OpDef whose kernel, reference and adjoint all come from one IR.

An ``ExprOp`` holds a ``build(attrs) -> (input_nodes, output_nodes)`` function. Its
kernel runs one compiled loop (Numba on CPU, CuPy on GPU; the NumPy reference where
neither applies); its vjp binds another ExprOp, the derived adjoint (inputs: the
op's inputs and one cotangent per output; outputs: one gradient per input that
needs one), derived lazily and cached per (outputs with cotangent, inputs needing
grad). That adjoint op has its own vjp the same way, so every order works.
"""
import functools
import math
import sys
import time
import warnings

import numpy as np

from .. import devices as _devices, dtypes as _dt
from .._util import broadcast_shapes
from ..devices import cpu as _cpu, cuda as _cuda
from ..dispatch import bind, halfwidth_elementwise as _halfwidth_hook
from ..ops_registry import Sample, TensorSpec, get as _get_op, register
from ..ops_registry.rules import diagonal
from ..tensor import Tensor, wrap
from . import approx, codegen_cuda, codegen_numba, expr as E, tables


class config:
    """Switches of the fusion layer (module-level, read on every call).

    ``use_numba``: compile CPU kernels (False: always the NumPy reference).
    ``min_numel``: below this many output elements the NumPy reference runs instead
    (no compile for tiny tensors; tests set 0 to exercise the compiled path).
    ``approximate``: float32 kernels use the vectorisable approximations.
    ``tables``: the half-width dtypes whose kernels look up a costly function of one
    input (gelu, softplus, sin ...; ``tables.plan``) in a 65,536-entry table of its
    float32 values (``tables.py``: the same values, bit for bit) instead of computing
    it, and whose unary registry ops (``exp``, ``sin`` ...) run as one lookup an
    element instead of widening (``run_halfwidth``).
    """
    use_numba = True
    min_numel = 2048
    approximate = True
    tables = ("bfloat16", "float16")


_F32 = np.dtype(np.float32)
# dtypes with compiled CPU kernels (bfloat16 and float16: half-width loads and stores)
_NUMBA_DTYPES = {_dt.F16, _F32, np.dtype(np.float64)}  # and bfloat16's, once known
_dt.on_bfloat16(_NUMBA_DTYPES.add)

# compile statistics, for benchmarks and the "second call compiles nothing" test
stats = {"compiles": 0, "cache_loads": 0, "compile_seconds": 0.0,
         "last_compile_seconds": 0.0, "numba_failures": 0}
_numba_broken = []
# set by trace.py: (stand-in type, splice function) so that an expression op called
# on @fuse's symbolic stand-ins contributes its IR instead of computing
proxy_hook = [None]


class ExprOp:
    """One elementwise op from a scalar expression (see ``elementwise``)."""

    def __init__(self, name, inputs, build, nout=1, attr_names=(), expr=None,
                 samples=None, error_samples=None, torch=None, doc=""):
        if "out" in inputs:
            raise ValueError(f"elementwise {name}: 'out' cannot be an input name")
        self.name, self.inputs, self.build, self.nout = name, tuple(inputs), build, nout
        self.attr_names = tuple(attr_names)
        # the outputs' layout: the inputs' (PyTorch's elementwise ops), or row-major
        # where PyTorch's kernel makes it so (logsigmoid)
        self.contiguous_out = False
        self._graphs, self._kernels, self._grads = {}, {}, {}
        self.saves = self._derived_saves()
        self.op = register(
            name=name, kernel=self.kernel, infer=self.infer, args=self.inputs,
            vjp=self.vjp, saves=self.saves, expr=expr, broadcasting=True, promote="float",
            jvp=diagonal, nout=nout, samples=samples or _default_samples(len(self.inputs)),
            error_samples=error_samples or _default_errors(len(self.inputs)),
            torch=torch, reference=self.reference, halfwidth=True, doc=doc)
        self.op.fusion = self

    # ------------------------------------------------------------ IR
    def graph(self, attrs):
        key = tuple(sorted(attrs.items()))
        g = self._graphs.get(key)
        if g is None:
            ins, outs = self.build(dict(attrs))
            g = self._graphs[key] = (list(ins), list(outs))
        return g

    def _derived_saves(self):
        """The op's ``saves``: per input, the inputs its derived gradient reads (with
        a cotangent for every output), read off the adjoint expressions; all inputs
        for every gradient where attributes are constants of the expression (their
        values may change which inputs a partial reads)."""
        if self.attr_names:
            return self.inputs
        ins, outs = self.graph({})
        cot = [E.var(f"__g{len(ins) + k}") for k in range(len(outs))]
        per = {}
        for name, a in zip(self.inputs, E.grad(outs, ins, cot)):
            read = set() if a is None else {n.id for n in E.topo([a]) if n.op == "var"}
            per[name] = tuple(nm for nm, v in zip(self.inputs, ins) if v.id in read)
        return per

    # ------------------------------------------------------------ shapes
    def infer(self, *specs, **attrs):
        if len(specs) != len(self.inputs):
            raise TypeError(f"{self.name}: expected {len(self.inputs)} inputs "
                            f"({', '.join(self.inputs)}), got {len(specs)}")
        shapes = [tuple(s.shape) for s in specs if hasattr(s, "shape")]
        shape = broadcast_shapes(self.name, *shapes) if shapes else ()
        spec = TensorSpec(shape, _result_dtype(specs))
        return spec if self.nout == 1 else (spec,) * self.nout

    # ------------------------------------------------------------ kernels
    def kernel(self, *arrays, out=None, **attrs):
        """The op's outputs; ``out`` (one array, or a tuple of ``nout``): the compiled
        loop writes there when it is a C-contiguous array of the loop's dtype, else
        the result is copied in."""
        hook = proxy_hook[0]
        if hook is not None and any(isinstance(a, hook[0]) for a in arrays):
            return hook[1](self, arrays, attrs)
        if len(arrays) != len(self.inputs):
            self.infer(*arrays, **attrs)
        dtype = _result_dtype(arrays)
        arrs = [a for a in arrays if hasattr(a, "shape")]
        shape = broadcast_shapes(self.name, *[a.shape for a in arrs]) if arrs else ()
        if arrs and _cuda.is_cupy(arrs[0]):
            outs = self._run_cuda(arrays, attrs, dtype, shape)
        else:
            n = math.prod(shape)
            outs = None
            if (config.use_numba and not _numba_broken and n >= config.min_numel and n > 0
                    and dtype in _NUMBA_DTYPES):
                perm = None if out is not None or self.contiguous_out else \
                    _common_layout(arrs, shape)
                if perm is None:
                    outs = self._run_numba(arrays, attrs, dtype, shape, n, into=out)
                else:  # (the loop over the inputs' memory order; results in that layout)
                    outs = self._run_numba(
                        [a.transpose(perm) if hasattr(a, "shape") and a.ndim else a
                         for a in arrays], attrs, dtype, tuple(shape[d] for d in perm), n)
                    if outs is not None:
                        inv = np.argsort(perm)
                        outs = [o.transpose(inv) for o in outs]
            if outs is None:
                outs = self._evaluate(arrays, attrs, dtype, shape)
        if out is None:
            if self.contiguous_out:
                outs = [o if not hasattr(o, "flags") or o.flags.c_contiguous else
                        _devices.xp_of(o).ascontiguousarray(o) for o in outs]
            return outs[0] if self.nout == 1 else tuple(outs)
        given = (out,) if self.nout == 1 else tuple(out)
        for o, r in zip(given, outs):
            if r is not o:
                o[...] = r  # (small, strided, another dtype or a GPU array: copied in)
        return out

    def reference(self, *arrays, **attrs):
        """The NumPy reference: the same IR evaluated op by op."""
        dtype = _result_dtype(arrays)
        arrs = [a for a in arrays if hasattr(a, "shape")]
        shape = broadcast_shapes(self.name, *[a.shape for a in arrs]) if arrs else ()
        outs = self._evaluate(arrays, attrs, dtype, shape)
        return outs[0] if self.nout == 1 else tuple(outs)

    def _evaluate(self, arrays, attrs, dtype, shape):
        """The IR evaluated op by op with NumPy (or CuPy); bfloat16 and float16 in
        float32, each output rounded once, as the compiled kernels do."""
        ins, outs = self.graph(attrs)
        xp = np
        for a in arrays:
            if hasattr(a, "shape") and _cuda.is_cupy(a):
                xp = _cuda.cupy()
        cdt = _F32 if dtype in _dt.LOW else dtype
        vals = {n: _cast(xp, a, cdt) for n, a in zip(ins, arrays)}
        res = evaluate(outs, vals, cdt, xp)
        res = [_materialise(xp, r, shape, cdt, any(r is v for v in vals.values()))
               for r in res]
        return res if cdt == dtype else [r.astype(dtype) for r in res]

    def _run_numba(self, arrays, attrs, dtype, shape, n, reduce=False, into=None):
        """Run the compiled kernel; ``reduce``: return the float64 sum of the one
        output instead of writing it; ``into``: the caller's out= (used where it fits
        the loop). None when Numba is unusable. bfloat16 and float16 run a half-width
        kernel (``codegen_numba``): it reads and writes their 16-bit elements and
        computes in float32."""
        half = dtype in _dt.LOW
        cdt = _F32 if half else dtype
        flat, pattern = _flatten(arrays, cdt, shape, dtype if half else None)
        given = [None] * self.nout if into is None else \
            [into] if self.nout == 1 else list(into)
        outs = [] if reduce else [
            o if type(o) is np.ndarray and o.dtype == dtype and o.shape == tuple(shape)
            and o.flags.c_contiguous and o.flags.writeable else np.empty(shape, dtype)
            for o in given]
        bufs = [o.reshape(-1).view(np.uint16) if half else o.reshape(-1) for o in outs]
        if half and not reduce and n >= tables.WHOLE_MIN_NUMEL and \
                self._run_whole(attrs, dtype, pattern, n, flat, bufs):
            return outs
        parts = self._run_compiled(attrs, dtype, pattern, n, flat, bufs, reduce)
        if parts is None:
            return None
        if reduce:
            return math.fsum(parts)
        return outs

    def _run_compiled(self, attrs, dtype, pattern, n, flat, bufs, reduce=False,
                      lookups=True):
        """The kernel over ``n`` elements of the flat inputs into the flat outputs
        ``bufs`` (uint16 for a half-width ``dtype``): its chunks' return values, None
        when Numba is unusable. ``lookups=False``: no table lookups
        (``tables.plan``), every value computed."""
        half = dtype in _dt.LOW
        plan, tabs = self._lookups(attrs, pattern, dtype.name) \
            if half and not reduce and lookups else ((), ())
        if not reduce and not plan and _pairable(dtype, pattern, n, flat, bufs) and \
                not self._calls_approx(attrs):
            return self._run_pairs(attrs, pattern, n, flat, bufs)
        return _launch(lambda: self._compiled(attrs, _F32 if half else dtype, pattern, reduce,
                                              dtype.name if half else None, tables=plan),
                       n, (*flat, *bufs, *tabs), self.name, count=True)

    def _run_whole(self, attrs, dtype, pattern, n, flat, bufs):
        """A half-width kernel whose outputs are functions of its one full input
        (``tables.whole_input``; its size-one inputs' values key the table) run as
        one lookup an element of its outputs' 16-bit patterns (``tables.whole``,
        built by this very kernel, every value computed, over every input pattern):
        True when done, False
        where it does not apply (``config.tables`` leaves the dtype out, a cheap
        chain) or Numba fails (the kernel then computes)."""
        store = dtype.name
        key = ("whole", tuple(sorted(attrs.items())), pattern, store, config.approximate,
               store in config.tables, tables.thresholds()[1].get(store))
        hit = self._graphs.get(key)
        if hit is None:
            hit = (None,)
            if store in config.tables:
                ins, outs = self.graph(attrs)
                k = tables.whole_input(ins, outs, pattern, store)
                if k is not None:
                    hit = (k, codegen_numba.kernel_source(ins, outs, _F32, pattern,
                                                          config.approximate, store=store))
            self._graphs[key] = hit
        if hit[0] is None:
            return False
        k, src = hit
        consts = () if len(flat) == 1 else \
            tuple(np.asarray(a, _F32).tobytes() for j, a in enumerate(flat) if j != k)

        def build():
            res = np.empty((len(bufs), 1 << 16), np.uint16)
            args = [tables.patterns().copy() if j == k else a for j, a in enumerate(flat)]
            if self._run_compiled(attrs, dtype, pattern, 1 << 16, args, list(res),
                                  lookups=False) is None:
                raise RuntimeError(f"{self.name}: its kernel did not run")
            return res
        try:
            table = tables.whole((src, store, consts), build)
            run = functools.partial(tables.run_whole, table, k, len(flat))
            _cpu.run_chunked(run, n, *flat, *bufs, min_chunk=tables.WHOLE_CHUNK)
        except Exception:  # Numba unusable: the kernel's own path says so
            return False
        return True

    def _calls_approx(self, attrs):
        """Whether the chain calls a transcendental approximation (``approx.py``):
        such a chain is bound by arithmetic, and its loop over pairs (twice the
        body: more live constants than vector registers) runs slower than the
        per-element one; an arithmetic chain's pair loop moves its bytes faster."""
        key = ("approx", tuple(sorted(attrs.items())))
        hit = self._graphs.get(key)
        if hit is None:
            hit = self._graphs[key] = (any(
                n.op in approx.HELPERS for n in E.topo(self.graph(attrs)[1])),)
        return hit[0]

    def _run_pairs(self, attrs, pattern, n, flat, bufs):
        """A bfloat16 kernel over element pairs (``_pairable``): the uint32 views of
        the first ``n - n % 2`` elements, then the last element of an odd ``n`` by
        the per-element kernel."""
        m = n // 2
        args = [a[:2 * m].view(np.uint32) if p == "h" else a for a, p in zip(flat, pattern)]
        parts = _launch(lambda: self._compiled(attrs, _F32, pattern, store="bfloat16",
                                               pairs=True),
                        m, (*args, *[b[:2 * m].view(np.uint32) for b in bufs]), self.name,
                        count=True)
        if parts is None or n % 2 == 0:
            return parts
        tail = [a[2 * m:] if p == "h" else a for a, p in zip(flat, pattern)]
        return _launch(lambda: self._compiled(attrs, _F32, pattern, store="bfloat16"),
                       1, (*tail, *[b[2 * m:] for b in bufs]), self.name, count=True)

    def _lookups(self, attrs, pattern, store):
        """The table lookups of the half-width kernel (``tables.plan``: (node,
        input) pairs) and their tables; none where ``config.tables`` leaves ``store``
        out (or where a table cannot be built: the kernel then computes every
        value)."""
        key = ("tables", tuple(sorted(attrs.items())), pattern, store, config.approximate,
               store in config.tables, tables.thresholds()[0].get(store))
        hit = self._graphs.get(key)
        if hit is None:
            hit = ((), ())
            if store in config.tables:
                ins, outs = self.graph(attrs)
                plan = tables.plan(ins, outs, pattern, store)
                try:
                    hit = (tuple(plan), tuple(tables.table(nd, ins[k], store,
                                                           config.approximate)
                                              for nd, k in plan))
                except Exception:  # Numba unusable: the kernel's own compile says so
                    hit = ((), ())
            self._graphs[key] = hit
        return hit

    def _compiled(self, attrs, dtype, pattern, reduce=False, store=None, pairs=False,
                  tables=()):
        key = (tuple(sorted(attrs.items())), dtype.str, pattern, config.approximate, reduce,
               store, pairs, tuple(n.id for n, _ in tables))
        fn = self._kernels.get(key)
        if fn is None:
            ins, outs = self.graph(attrs)
            src = codegen_numba.kernel_source(ins, outs, dtype, pattern, config.approximate,
                                              reduce=reduce, store=store, pairs=pairs,
                                              tables=tables)
            # a serial nogil kernel: run_chunked spreads it over the threads (a
            # busy machine does not stall it, unlike prange) and it compiles ~3x
            # faster than parallel=True
            fn = _cpu.compile_source(("fusion", src), src, "kernel", parallel=False,
                                     fastmath=_cpu.FASTMATH, error_model="numpy")
            self._kernels[key] = fn
        return fn

    def _run_cuda(self, arrays, attrs, dtype, shape):
        cp = _cuda.cupy()
        cdt = _F32 if dtype in _dt.LOW else dtype
        ins, outs = self.graph(attrs)
        key = ("cuda", tuple(sorted(attrs.items())), cdt.str)
        spec = self._kernels.get(key)
        if spec is None:
            spec = self._kernels[key] = codegen_cuda.kernel_spec(ins, outs, cdt, self.name)
        k = _cuda.elementwise_kernel(*spec)
        args = [cp.asarray(a, dtype=cdt) for a in arrays]
        res = [cp.empty(shape, dtype=cdt) for _ in outs]
        k(*args, *res)
        return [r.astype(dtype) for r in res] if cdt != dtype else res

    def _run_cuda_sum(self, arrays, attrs, dtype, shape):
        """The float64 sum of the one output over ``shape`` as a 0-d CuPy array, in
        one pass that stores no elementwise result (``codegen_cuda.reduce_source``)."""
        cp = _cuda.cupy()
        cdt = _F32 if dtype in _dt.LOW else dtype
        n = math.prod(shape)
        if n == 0:
            return cp.zeros((), np.float64)
        flat, pattern = _flatten_cuda(cp, arrays, cdt, shape)
        key = ("cuda-sum", tuple(sorted(attrs.items())), cdt.str, pattern)
        src = self._kernels.get(key)
        if src is None:
            ins, outs = self.graph(attrs)
            src = self._kernels[key] = codegen_cuda.reduce_source(ins, outs[0], cdt, pattern,
                                                                  self.name)
        k = _cuda.raw_kernel(*src)
        block = codegen_cuda.REDUCE_BLOCK
        grid = max(1, min(-(-n // block), _cuda.REDUCE_MAX_BLOCKS))
        partial = cp.empty(grid, np.float64)
        k((grid,), (block,), (*flat, partial, n))
        return partial.sum()

    # ------------------------------------------------------------ adjoint
    def vjp(self, ctx, g):
        gs = tuple(g) if self.nout > 1 else (g,)
        omask = tuple(x is not None for x in gs)
        imask = tuple(bool(n) for n in ctx.needs_input_grad)
        if not any(omask) or not any(imask):
            return [None] * len(self.inputs)
        return _run_grad_op(self.grad_op(omask, imask), ctx,
                            [x for x in gs if x is not None], imask)

    def grad_op(self, omask, imask):
        """The ExprOp computing this op's input gradients (derived once, cached)."""
        key = (omask, imask)
        gop = self._grads.get(key)
        if gop is not None:
            return gop
        n_in = len(self.inputs)
        gnames = [f"__g{n_in + k}" for k in range(sum(omask))]

        def build(attrs):
            ins, outs = self.graph(attrs)
            gvars = [E.var(nm) for nm in gnames]
            it = iter(gvars)
            adj = E.grad(outs, ins, [next(it) if m else None for m in omask])
            res = [adj[i] if adj[i] is not None else E.const(0.0)
                   for i in range(n_in) if imask[i]]
            return list(ins) + gvars, res

        tag = "".join("1" if m else "0" for m in omask) + "_" + \
            "".join("1" if m else "0" for m in imask)
        name = f"{self.name}_grad{tag}"
        try:
            gop = _get_op(name).fusion
        except KeyError:
            gop = ExprOp(name, self.inputs + tuple(gnames), build, nout=sum(imask),
                         attr_names=self.attr_names,
                         samples=_grad_samples(self.op, sum(omask)),
                         doc=f"gradient of {self.name} (derived)")
        self._grads[key] = gop
        return gop


class ReduceExprOp:
    """``sum`` or ``mean`` over every element of an ExprOp's one output, as one op.

    The forward is one pass that reads the inputs and writes nothing: the
    elementwise values are summed (in float64, per chunk) as they are computed. The
    adjoint is the inner op's derived adjoint with the scalar cotangent broadcast
    (divided by the element count for ``mean``), so it too is one pass, and every
    order works as for the inner op. ``@fuse`` builds these for a body that ends in
    ``sum()`` or ``mean()`` over all elements.
    """

    def __init__(self, name, inner, how, doc=""):
        if how not in ("sum", "mean") or inner.nout != 1:
            raise ValueError(f"{name}: a fused reduction is sum or mean of one output")
        self.name, self.inner, self.how = name, inner, how
        self.inputs = inner.inputs
        self.op = register(
            name=name, kernel=self.kernel, infer=self.infer, args=self.inputs,
            vjp=self.vjp, jvp=self.jvp, saves=inner.saves, broadcasting=True,
            promote="float", expr=f"{how}({inner.op.expr})" if inner.op.expr else None,
            samples=inner.op.samples, error_samples=inner.op.error_samples,
            reference=self.reference, halfwidth=True,
            doc=doc or f"{how} of {inner.name} over all elements")
        self.op.fusion = self

    def infer(self, *specs, **attrs):
        self._shape(specs, attrs)
        return TensorSpec((), _result_dtype(specs))

    def _shape(self, arrays, attrs):
        if len(arrays) != len(self.inputs):
            raise TypeError(f"{self.name}: expected {len(self.inputs)} inputs "
                            f"({', '.join(self.inputs)}), got {len(arrays)}")
        arrs = [a for a in arrays if hasattr(a, "shape")]
        return broadcast_shapes(self.name, *[a.shape for a in arrs]) if arrs else ()

    def kernel(self, *arrays, **attrs):
        hook = proxy_hook[0]
        if hook is not None and any(isinstance(a, hook[0]) for a in arrays):
            return hook[2](self.how, hook[1](self.inner, arrays, attrs))
        shape = self._shape(arrays, attrs)
        dtype = _result_dtype(arrays)
        n = math.prod(shape)
        arrs = [a for a in arrays if hasattr(a, "shape")]
        if arrs and _cuda.is_cupy(arrs[0]):
            total = self.inner._run_cuda_sum(arrays, attrs, dtype, shape)
            if self.how == "mean":  # the mean of nothing is NaN, as PyTorch
                total = total / n if n else _cuda.cupy().full((), np.nan)
            return total.astype(dtype)
        total = None
        if (config.use_numba and not _numba_broken and n >= config.min_numel
                and dtype in _NUMBA_DTYPES):
            total = self.inner._run_numba(arrays, attrs, dtype, shape, n, reduce=True)
        if total is None:
            return self.reference(*arrays, **attrs)
        if self.how == "mean":
            total = total / n
        return np.asarray(total, dtype=dtype)

    def reference(self, *arrays, **attrs):
        """The NumPy reference: the inner op's reference, then NumPy's reduction."""
        shape = self._shape(arrays, attrs)
        dtype = _result_dtype(arrays)
        y = self.inner._evaluate(arrays, attrs, dtype, shape)[0]
        if self.how == "sum":
            r = np.sum(y, dtype=np.float64)
        else:  # the mean of nothing is NaN, as PyTorch (without NumPy's warning)
            r = np.sum(y, dtype=np.float64) / y.size if y.size else np.nan
        return np.asarray(r, dtype=dtype)

    def jvp(self, ctx, *tangents):
        """The inner op's tangent (its diagonal rule), over the broadcast shape,
        summed or averaged as the forward."""
        m = ctx.m
        inner = _InnerCtx(ctx, self.inner.op)
        (t,) = diagonal(inner, *tangents)
        if t is None:
            return (None,)
        shapes = [s for s, a in zip(ctx.shapes, ctx.inputs) if hasattr(a, "shape")]
        t = m.broadcast_to(t, tuple(np.broadcast_shapes(*shapes)))
        return (m.sum(t) if self.how == "sum" else m.mean(t),)

    def vjp(self, ctx, g):
        imask = tuple(bool(n) for n in ctx.needs_input_grad)
        if g is None or not any(imask):
            return [None] * len(self.inputs)
        if self.how == "mean":
            shapes = [s for s, a in zip(ctx.shapes, ctx.inputs) if hasattr(a, "shape")]
            g = g / max(1, math.prod(np.broadcast_shapes(*shapes)))
        return _run_grad_op(self.inner.grad_op((True,), imask), ctx, [g], imask)


# ---------------------------------------------------------------- helpers
def _launch(compiled, n, args, what, count=False):
    """Run the serial kernel ``compiled()`` returns over ``[0, n)`` with ``args``:
    the first call compiles it (or loads it from Numba's disk cache) on this thread,
    later calls run it over chunks on every CPU thread. Returns the chunks' return
    values, or None when Numba is unusable (then, with a warning, never again this
    process: the callers' NumPy code runs). ``count``: the compile goes into
    ``stats``."""
    try:
        fn = compiled()
        first = not fn.signatures
        t0 = time.perf_counter()
        if first:
            parts = [fn(n, *args)]
        else:
            parts = _cpu.run_chunked(fn, n, *args, collect=True)
    except Exception as e:  # numba missing or broken: NumPy still works
        _numba_broken.append(e)
        stats["numba_failures"] += 1
        warnings.warn(f"tapegrad.fusion: compiling {what} with Numba failed "
                      f"({type(e).__name__}: {e}); using NumPy from now on",
                      RuntimeWarning, stacklevel=4)
        return None
    if first and count:
        dt = time.perf_counter() - t0
        if _loaded_from_cache(fn):
            stats["cache_loads"] += 1
        else:
            stats["compiles"] += 1
            stats["compile_seconds"] += dt
            stats["last_compile_seconds"] = dt
    return parts


class _InnerCtx:
    """A forward-mode context for the inner op of a fused reduction (its vjp reads
    the inputs alone)."""
    __slots__ = ("op", "inputs", "out", "attrs", "shapes", "dtypes", "m")

    def __init__(self, ctx, op):
        self.op, self.inputs, self.out, self.attrs = op, ctx.inputs, None, ctx.attrs
        self.shapes, self.dtypes, self.m = ctx.shapes, ctx.dtypes, ctx.m


_UNARY = {}


def layout_perm(x):
    """The dim order ``p`` in which ``x`` is row-major (``x.transpose(p)`` is
    C-contiguous: a transposed or permuted dense array), or None where ``x`` is
    row-major already or not dense in any order."""
    if x.ndim < 2 or x.flags.c_contiguous:
        return None
    p = tuple(sorted(range(x.ndim), key=lambda d: (-abs(x.strides[d]), d)))
    return p if x.transpose(p).flags.c_contiguous else None


def _common_layout(arrs, shape):
    """The dim order in which every full-shape input of an elementwise op is
    row-major, where it is not the natural one (PyTorch's elementwise results keep the
    inputs' layout: the result of a transposed input is transposed), else None.
    Inputs broadcast along some dim are transposed with them and 0-d ones pass; an
    input of fewer dims keeps the natural order (None)."""
    full = [a for a in arrs if type(a) is np.ndarray and a.shape == tuple(shape)]
    if not full or len(shape) < 2:
        return None
    perm = layout_perm(full[0])
    if perm is None or any(a.ndim not in (0, len(shape)) for a in arrs) or \
            any(not a.transpose(perm).flags.c_contiguous for a in full[1:]):
        return None
    return perm


def run_unary(expr, x, out=None):
    """The one-input scalar expression ``expr`` (free name ``x``) over the float32
    NumPy array ``x``, as one compiled loop with the vectorisable approximations of
    ``approx.py``, run over chunks on the CPU threads: for a registry op whose own
    kernel is a chain of NumPy passes (``sigmoid``, ``erf``). Returns a new C-order
    array, or None where this does not apply (another dtype or array type, fewer than
    ``config.min_numel`` elements, ``config.approximate`` or ``config.use_numba``
    off, Numba unusable): the caller's NumPy code then runs. ``out``: the caller's
    buffer, written (and returned) when it and ``x`` are C-contiguous float32 arrays
    of one shape (it may be ``x`` itself: each element is read before it is written);
    otherwise None."""
    if (type(x) is not np.ndarray or x.dtype != np.float32 or not config.use_numba
            or not config.approximate or _numba_broken or x.size < max(config.min_numel, 1)):
        return None
    if out is not None and (type(out) is not np.ndarray or out.dtype != np.float32
                            or out.shape != x.shape or not out.flags.c_contiguous
                            or not out.flags.writeable or not x.flags.c_contiguous):
        return None
    flat = np.ascontiguousarray(x).reshape(-1)
    if out is None:
        out = np.empty(x.shape, np.float32)

    def compiled():
        fn = _UNARY.get(expr)
        if fn is None:
            v = E.var("x")
            src = codegen_numba.kernel_source([v], [E.parse(expr, {"x": v})], np.float32,
                                              "f", True)
            fn = _UNARY[expr] = _cpu.compile_source(("unary", src), src, "kernel",
                                                    parallel=False, fastmath=_cpu.FASTMATH,
                                                    error_model="numpy")
        return fn
    if _launch(compiled, x.size, (flat, out.reshape(-1)), repr(expr)) is None:
        return None
    return out


# IR ops that float32 computes exactly rounded (IEEE), so a kernel of them alone gives
# the registry kernel's float32 values bit for bit
_EXACT_OPS = frozenset({"add", "sub", "mul", "div", "neg", "abs", "maximum", "minimum", "sqrt",
                        "where", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not"})
_HALF_EXPR = {}  # OpDef -> (input nodes, [output node]), or None: not runnable so


def run_halfwidth(op, arrays):
    """A registry elementwise op on bfloat16 or float16 NumPy arrays (and Python
    numbers) as one half-width kernel built from its expression: the elements are
    widened as they are read, computed in float32 and rounded once as they are
    written, the arrays are never copied to float32. Only for an expression of
    operations float32 rounds exactly (``add``, ``mul``, ``div``, ``maximum``,
    ``sqrt`` ...), compiled without fast-math, so the values equal those of the op's
    own kernel run on float32 copies and rounded. Another op of one array argument
    and an expression (``exp``, ``sin``, ``sigmoid`` ...) on one array of a dtype in
    ``config.tables`` is one table lookup an element (``_run_lookup``). None
    elsewhere (another op, array type or dtype mix, fewer than ``config.min_numel``
    elements, Numba off or unusable), and dispatch widens as before. Installed as
    ``dispatch.halfwidth_elementwise``."""
    entry = _HALF_EXPR.get(op, False)
    if entry is False:
        entry = _HALF_EXPR[op] = _exact_graph(op)
    if not config.use_numba or _numba_broken:
        return None
    if entry is None:
        return _run_lookup(op, arrays)
    dtype = None
    shapes = []
    for a in arrays:
        if type(a) is np.ndarray:
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                return None
            shapes.append(a.shape)
        elif type(a) not in (float, int):
            return None
    if dtype not in _dt.LOW or len(arrays) != len(entry[0]):
        return None
    shape = broadcast_shapes(op.name, *shapes)
    n = math.prod(shape)
    if n < max(config.min_numel, 1):
        return None
    flat, pattern = _flatten(arrays, _F32, shape, dtype)
    out = np.empty(shape, dtype)
    key = (op.name, pattern, dtype.name)

    def compiled():
        fn = _HALF_KERNELS.get(key)
        if fn is None:
            src = codegen_numba.kernel_source(entry[0], entry[1], _F32, pattern, False,
                                              store=dtype.name)
            fn = _HALF_KERNELS[key] = _cpu.compile_source(
                ("halfwidth", src), src, "kernel", parallel=False, fastmath=frozenset(),
                error_model="numpy")
        return fn
    if _launch(compiled, n, (*flat, out.reshape(-1).view(np.uint16)), op.name) is None:
        return None  # dispatch widens instead
    return out


_HALF_KERNELS = {}
_halfwidth_hook[0] = run_halfwidth
_NO_TABLE = set()  # (op name, dtype name, approximate) whose kernel gives no table


def _run_lookup(op, arrays):
    """A registry op of one array argument with an expression (unary: ``exp``,
    ``sin``, ``sigmoid`` ...) on a bfloat16 or float16 array, as one lookup an element
    of its result's 16-bit pattern (``_op_table``: the op's own float32 kernel at every
    value of the dtype, rounded as the widened path rounds it): what widening, the
    kernel and the rounding give, bit for bit, in one pass over the 16-bit elements
    (``tables.run_whole``). None where it does not apply."""
    if (len(arrays) != 1 or type(arrays[0]) is not np.ndarray or len(op.args) != 1
            or not op.expr or op.nout != 1 or op.kind != "basic"
            or getattr(op, "fusion", None) is not None):
        return None
    x = arrays[0]
    # (from min_numel elements up, as the table's 65,536: the kernel's own path, e.g.
    # sigmoid's compiled approximation rather than NumPy, is the same for both)
    if (x.dtype not in _dt.LOW or x.dtype.name not in config.tables
            or x.size < max(config.min_numel, 1) or config.min_numel > 1 << 16):
        return None
    table = _op_table(op, x.dtype)
    if table is None:
        return None
    out = np.empty(x.shape, x.dtype)
    flat = np.ascontiguousarray(x).reshape(-1).view(np.uint16)
    try:
        _cpu.run_chunked(functools.partial(tables.run_whole, table, 0, 1), x.size, flat,
                         out.reshape(-1).view(np.uint16), min_chunk=tables.WHOLE_CHUNK)
    except Exception:  # Numba unusable: dispatch widens instead
        return None
    return out


def _op_table(op, dtype):
    """The 16-bit patterns of ``op``'s results at every ``dtype`` value, indexed by
    its bits, as a ``(1, 65536)`` uint16 array: its kernel run on the widened values
    and rounded (``halfwidth.from_float32``, as dispatch's widened path), kept with
    the whole-kernel tables (``tables.whole``); None where the kernel does not give
    one float32 value per element."""
    key = ("op", op.name, dtype.name, config.approximate)
    if key in _NO_TABLE:
        return None
    from ..devices.cpu_kernels import halfwidth

    def build():
        wide = tables.patterns().view(dtype).astype(_F32)
        with np.errstate(all="ignore"):
            vals = op.compute(wide)
        if type(vals) is not np.ndarray or vals.dtype != _F32 or vals.shape != wide.shape:
            raise TypeError(f"{op.name}: no float32 value per element")
        return halfwidth.from_float32(vals, dtype).view(np.uint16).reshape(1, -1)
    try:
        return tables.whole(key, build)
    except Exception:
        _NO_TABLE.add(key)
        return None


def _exact_graph(op):
    if not op.expr or op.nout != 1 or getattr(op, "fusion", None) is not None:
        return None
    try:
        if not set(E.free_names(op.expr)) <= set(op.args):
            return None
        ins = [E.var(a) for a in op.args]
        out = E.parse(op.expr, dict(zip(op.args, ins)))
    except (ValueError, KeyError, TypeError, SyntaxError):
        return None
    if out.is_bool or any(n.op not in _EXACT_OPS and n.op not in ("var", "const")
                          for n in E.topo([out])):
        return None
    return ins, [out]


def _run_grad_op(gop, ctx, cotangents, imask):
    """One gradient per input (None where ``imask`` is False) from the derived
    adjoint ``gop`` run on the saved inputs and the cotangents. An input not saved
    (no gradient wanted here reads it) is handed as zeros of its shape, one value
    broadcast, which the adjoint's expressions do not read."""
    ins = ctx.inputs
    if any(a is None for a in ins):
        ins = [_unread(ctx, i, cotangents[0]) if a is None else a for i, a in enumerate(ins)]
    res = bind(gop.op, *ins, *cotangents, **ctx.attrs)
    res = (res,) if gop.nout == 1 else res
    out, it = [], iter(res)
    for need in imask:
        out.append(next(it) if need else None)
    return out


def _unread(ctx, i, like):
    """A stand-in for input ``i``, not saved: zeros of its shape and dtype (one value,
    broadcast), a Tensor where the cotangent ``like`` is one (a recording adjoint)."""
    shape, dtype = ctx.shapes[i], ctx.dtypes[i]
    if shape is None:  # a Python number
        return 0.0
    data = like._data if isinstance(like, Tensor) else like
    z = _devices.xp_of(data).broadcast_to(_devices.xp_of(data).zeros((), dtype), shape)
    return wrap(z) if isinstance(like, Tensor) else z


def _pairable(dtype, pattern, n, flat, bufs):
    """Whether a bfloat16 kernel runs over element pairs: every full input is a
    bfloat16 array (pattern ``h``), the arrays start 4-byte aligned and the machine
    is little-endian (a pair's first element in the uint32's low half)."""
    return (dtype == _dt.BF16 and n >= 2 and "h" in pattern and set(pattern) <= {"h", "s"}
            and _LITTLE and all(a.ctypes.data % 4 == 0 for a, p in zip(flat, pattern)
                                if p == "h")
            and all(b.ctypes.data % 4 == 0 for b in bufs))


_LITTLE = sys.byteorder == "little"


def _flatten(arrays, cdt, shape, half=None):
    """Kernel arguments: each input as a flat contiguous ``cdt`` array of the
    broadcast ``shape`` (pattern ``f``), or its one value (pattern ``s``); with
    ``half`` (bfloat16 or float16), a full input of that dtype as the uint16 view of
    its elements (pattern ``h``), unconverted."""
    flat, pattern = [], []
    for a in arrays:
        if half is not None and isinstance(a, np.ndarray) and a.dtype == half and \
                a.size != 1 and any(a.strides):
            if a.shape != shape:
                a = np.broadcast_to(a, shape)
            flat.append(np.ascontiguousarray(a).reshape(-1).view(np.uint16))
            pattern.append("h")
            continue
        if not isinstance(a, np.ndarray):
            a = np.asarray(a, dtype=cdt)
        if a.size == 1 or not any(a.strides):  # one value, maybe a broadcast view
            flat.append(np.asarray(a[(0,) * a.ndim], dtype=cdt).reshape(1))
            pattern.append("s")
        else:
            if a.shape != shape:
                a = np.broadcast_to(a, shape)
            flat.append(np.ascontiguousarray(a, dtype=cdt).reshape(-1))
            pattern.append("f")
    return flat, "".join(pattern)


def _flatten_cuda(cp, arrays, cdt, shape):
    """``_flatten`` for CuPy: kernel arguments as flat contiguous ``cdt`` device
    arrays of the broadcast ``shape`` (``f``) or of one element (``s``)."""
    flat, pattern = [], []
    for a in arrays:
        a = cp.asarray(a, dtype=cdt)
        if a.size == 1 or not any(a.strides):  # one value, maybe a broadcast view
            flat.append(cp.ascontiguousarray(a[(0,) * a.ndim]).reshape(1))
            pattern.append("s")
        else:
            if a.shape != tuple(shape):
                a = cp.broadcast_to(a, shape)
            flat.append(cp.ascontiguousarray(a).reshape(-1))
            pattern.append("f")
    return flat, "".join(pattern)


def _result_dtype(items):
    dts = [np.dtype(a.dtype) for a in items if hasattr(a, "dtype")]
    scal = [a for a in items if isinstance(a, (int, float, bool))]
    dt = _dt.result_type(*dts) if dts else _dt.default_float_np()
    if scal and dts:
        dt = _dt.promote_with_scalars(dt, scal)
    if not _dt.is_float(dt):
        dt = _dt.default_float_np()
    return np.dtype(dt)


def _cast(xp, a, dtype):
    if not hasattr(a, "dtype"):
        return dtype.type(a)
    return a if a.dtype == dtype else a.astype(dtype)


def _materialise(xp, r, shape, dtype, is_input):
    r = xp.asarray(r)
    if r.shape == tuple(shape) and r.dtype == dtype and not is_input and r.base is None:
        return r
    out = xp.empty(shape, dtype=dtype)
    out[...] = r
    return out


def _loaded_from_cache(fn):
    try:
        return bool(fn.stats.cache_hits)
    except AttributeError:
        return False


_NP_UNARY = {"neg": "negative", "exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1",
             "sqrt": "sqrt", "tanh": "tanh", "sin": "sin", "cos": "cos", "abs": "abs",
             "sign": "sign", "not": "logical_not", "exp2": "exp2", "log2": "log2",
             "log10": "log10"}
_NP_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
              "pow": "power", "maximum": "maximum", "minimum": "minimum",
              "logaddexp": "logaddexp", "lt": "less",
              "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal",
              "ne": "not_equal", "and": "logical_and", "or": "logical_or"}


def evaluate(outputs, values, dtype, xp=np):
    """Evaluate IR ``outputs`` with ``values`` (node -> array) using ``xp``."""
    vals = dict(values)
    with np.errstate(all="ignore"):
        for n in E.topo(outputs):
            if n in vals:
                continue
            if n.op == "const":
                vals[n] = dtype.type(n.value)
                continue
            if n.op == "var":
                raise ValueError(f"elementwise: free variable {n.value!r} is not an input")
            a = [vals[x] for x in n.args]
            vals[n] = _np_apply(xp, n.op, a, dtype)
    return [vals[o] if not o.is_bool else xp.asarray(vals[o]).astype(dtype) for o in outputs]


_EXACT_IN_FLOAT64 = ("exp2", "log2", "log10")  # (as the ops: ops/elementwise._in_float64)


def _np_apply(xp, op, a, dtype):
    if op in _EXACT_IN_FLOAT64 and xp is np and np.dtype(dtype) == np.float32:
        return getattr(np, op)(a[0], dtype=np.float64).astype(np.float32)
    if op in _NP_UNARY:
        return getattr(xp, _NP_UNARY[op])(a[0])
    if op in _NP_BINARY:
        r = getattr(xp, _NP_BINARY[op])(a[0], a[1])
        return r if op != "pow" else xp.asarray(r, dtype=dtype)
    if op == "where":
        return xp.where(a[0], a[1], a[2])
    if op == "rsqrt":
        return 1 / xp.sqrt(a[0])
    if op == "softplus":
        x = xp.asarray(a[0])
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))
    if op == "sigmoid":
        x = xp.asarray(a[0])
        e = xp.exp(-xp.abs(x))
        s = 1 / (1 + e)
        return xp.where(x >= 0, s, e * s)
    if op == "erf":
        return _erf(xp, a[0], dtype)
    raise ValueError(f"elementwise: no NumPy rule for {op}")


def _erf(xp, x, dtype):
    x = xp.asarray(x)
    if xp is not np:
        return _devices.special("erf", x)
    if config.use_numba and not _numba_broken:
        try:
            return _devices.special("erf", x).astype(dtype, copy=False)
        except Exception as e:  # numba unusable: the slow exact path below
            _numba_broken.append(e)
    return np.vectorize(math.erf, otypes=[dtype])(x)


def _default_samples(n_in):
    def samples(dtype=np.float64):
        r = np.random.default_rng(0)
        full = tuple(r.uniform(0.3, 1.7, (3, 4)).astype(dtype) for _ in range(n_in))
        bc = tuple(r.uniform(0.3, 1.7, (3, 1) if k % 2 == 0 else (4,)).astype(dtype)
                   for k in range(n_in))
        return [Sample(full, {}), Sample(bc, {})]
    return samples


def _default_errors(n_in):
    def errors():
        r = np.random.default_rng(0)
        if n_in >= 2:
            return [((r.uniform(size=(3, 4)), r.uniform(size=(5,))) +
                     tuple(r.uniform(size=(3, 4)) for _ in range(n_in - 2)), {}, ValueError)]
        return [(("not a tensor",), {}, TypeError)]
    return errors


def _grad_samples(parent, n_cot):
    def samples(dtype=np.float64):
        out = []
        r = np.random.default_rng(1)
        for s in parent.samples(dtype):
            shapes = [np.shape(a) for a in s.args]
            shape = np.broadcast_shapes(*shapes)
            cots = tuple(r.uniform(-1.0, 1.0, shape).astype(dtype) for _ in range(n_cot))
            out.append(Sample(tuple(s.args) + cots, dict(s.attrs), s.grad))
        return out
    return samples
