"""65,536-entry float32 tables of unary functions of a half-width value.

A bfloat16 or float16 element has 65,536 possible values, so a function of one such
element alone is a table lookup: ``f(x) = T[bits(x)]``. A half-width kernel
(``codegen_numba``, ``store=``) whose chain computes a costly function (gelu's erf,
softplus, sin ...: tens of instructions an element, or a libm call) of an input it
reads as 16 bits looks the value up instead: one gather, whatever the function (it
costs about as much as tanh on Zen 4, so cheaper functions stay computed there:
``COST``; on a Sapphire Rapids Xeon it beats exp: ``thresholds``).
``plan`` picks the nodes; ``table`` builds each one ONCE per process by running the
float32 kernel of that very subexpression (the same generated code, helpers and
flags as the kernel it replaces) over all 65,536 bit patterns, NaNs, infinities and
subnormals included, so a lookup gives the float32 value the kernel computes, bit
for bit, and the kernel rounds it to the output's dtype as before. A table is 256 KB
(L2-resident); randn-like bfloat16 data touches ~20 KB of it. Tables are kernel
arguments, not Numba globals (a 64K-element constant would be compiled into every
kernel).

A whole kernel whose outputs are functions of ONE half-width input alone (its other
inputs, if any, constants) is itself such a function: ``whole`` gives the 16-bit
patterns its outputs store at every input value, one ``uint16`` row (128 KB) per
output, built by running the kernel itself over the 65,536 patterns (so the rounding
to the output's dtype is in the table, bit for bit), and ``run_whole`` stores them by
one lookup an element instead of the kernel: four elements a step, each 64-bit word
of the input split into four indices and the four looked-up patterns packed into one
64-bit store. It pays where the chain costs more than that loop
(``WHOLE_MIN_COST``: a transcendental in bfloat16, an ``erf`` or dearer in float16,
whose randn-like data spread over more of the table); cheaper chains (``x * 2 + 1``)
stay computed. The tables are kept for the ``WHOLE_CACHE`` expressions used last.
"""
import collections
import sys

import numpy as np

from . import codegen_numba, expr as E

# the time of each op's float32 code, roughly (others: 1), in units where a lookup
# costs ~12 (one gather per 16 elements; measured on Zen 4 at 4M elements: exp 5,
# tanh 10, erf 20, softplus 40; sin, cos and a general pow call libm per element;
# a float16 rounding inside a chain, ``jit_helpers.f16_round``'s integer lanes, 7)
COST = {"exp": 5, "_expneg": 5, "exp2": 5, "expm1": 8, "sigmoid": 7, "tanh": 10, "log": 15,
        "log2": 15, "log10": 15, "log1p": 20, "erf": 20, "softplus": 40, "sin": 300,
        "cos": 300, "pow": 300, "logaddexp": 30, "round_float16": 7}
# the least cost a lookup replaces (``MIN_COST``) and the least ``COST`` of a whole
# kernel replaced by its table of output patterns (``WHOLE_MIN_COST``), by dtype and
# CPU; ``thresholds()`` fills the two from the CPU Numba compiles for on first use
# (a test may set either first). Zen 4 (and any CPU not named below): randn-like
# bfloat16 data (7 mantissa bits) touches ~20 KB of a table, L1-resident; float16
# (10 bits) ~160 KB, from L2, where gelu's erf (cost 24 with its arithmetic) was
# slower looked up than computed; the whole-kernel lookup loop runs in ~1.6x the time
# of ``x * 2 + 1``'s kernel in bfloat16 and ~0.75x that of ``exp(x) + 1``; in
# float16, whose data spread over ~40 KB of the table, ~2x and ~1x
_ZEN4 = ({"bfloat16": 20, "float16": 30}, {"bfloat16": 5, "float16": 20})
# Intel Xeon with AVX512-FP16 (Sapphire Rapids and later; no gather microcode
# mitigation slows its vgatherdps), measured in CPU time at 4M elements: a lookup
# beats computing every function tried, of one input in a two-input chain
# (``f(x) * y``, float16 / bfloat16: exp 1.44 -> 1.32 / 1.87 -> 1.55 ms, tanh 1.48
# -> 1.31 / 1.94 -> 1.53, erf 2.08 -> 1.28 / 2.60 -> 1.54, log 2.00 -> 1.28) and
# as a whole kernel from tanh up in float16 (``tanh(x) * x`` 1.60 -> 1.40, ``exp(x) +
# 1`` even, ``x * 2 + 1`` 0.89 computed against 1.42 looked up)
_SPR = ({"bfloat16": 5, "float16": 5}, {"bfloat16": 5, "float16": 10})
MIN_COST = {}
WHOLE_MIN_COST = {}
_TABLES = {}  # (expression over __tab, store, approximate) -> (1, 65536) float32
_PATTERNS = []


def thresholds():
    """``(MIN_COST, WHOLE_MIN_COST)``, filled for this CPU on the first call."""
    if not MIN_COST or not WHOLE_MIN_COST:
        from ..devices import cpu
        tuned = _SPR if cpu._target_has("avx512fp16") else _ZEN4
        for d, t in zip((MIN_COST, WHOLE_MIN_COST), tuned):
            if not d:
                d.update(t)
    return MIN_COST, WHOLE_MIN_COST


# an op's ``COST`` in a whole kernel: arithmetic, a vector instruction or two in a
# loop bound by its bytes, counts a fifth (``x * x * x + x * 2 + 1`` is computed
# ~1.6x faster than looked up in bfloat16); a division or square root one
_WHOLE_COST = {**COST, "div": 1, "sqrt": 1, "rsqrt": 1}
# the least elements a call answers from a whole-kernel table: building one runs the
# kernel over 65,536 elements (a new one per value of a size-one input)
WHOLE_MIN_NUMEL = 1 << 16
# elements a thread looks up at least at a time (run_chunked's min_chunk): the
# lookup runs ~4x faster than a computing kernel, which takes 2**17 at a time
WHOLE_CHUNK = 1 << 18
WHOLE_CACHE = 64  # whole-kernel tables kept (least recently used dropped): 128 KB each
_WHOLE = collections.OrderedDict()  # key -> (outputs, 65536) uint16


def plan(inputs, outputs, pattern, store):
    """The nodes of IR ``outputs`` a half-width kernel storing ``store`` looks up:
    ``[(node, k)]``, each a function of input ``k`` (pattern ``h``) alone, maximal (an
    output, or used by a node that depends on more) and whose float32 code costs at
    least ``MIN_COST[store]`` (``COST``). Empty where there is none."""
    src = {n: k for k, (n, p) in enumerate(zip(inputs, pattern)) if p == "h"}
    dep, users = {}, {}
    order = E.topo(outputs)
    for n in order:
        if n in src:
            dep[n] = src[n]
            continue
        if n.op == "const":
            dep[n] = None
            continue
        ds = {dep.get(a, -1) for a in n.args} - {None}
        dep[n] = ds.pop() if len(ds) == 1 and -1 not in ds else -1
        for a in n.args:
            users.setdefault(a, []).append(n)

    def tabled(n):
        return (n not in src and n.op not in ("var", "const") and dep.get(n, -1) not in
                (None, -1) and not n.is_bool)
    outs = set(outputs)
    top = [n for n in order if tabled(n) and
           (n in outs or any(not tabled(u) for u in users.get(n, ())))]
    least = thresholds()[0][store]
    return [(n, dep[n]) for n in top if _cost(n, src) >= least]


def _cost(node, sources):
    """The ``COST`` of computing ``node`` from its half-width input (each shared
    subexpression once)."""
    return sum(COST.get(n.op, 1) for n in E.topo([node], stop=sources)
               if n not in sources and n.op not in ("var", "const"))


def table(node, source, store, approximate):
    """The float32 values of IR ``node`` (a function of the variable node ``source``
    alone) at every ``store`` (``"bfloat16"``/``"float16"``) value, indexed by its
    bits, as a ``(1, 65536)`` array: built once per process by the half-width kernel
    of ``node`` alone, its one output written unrounded."""
    x = E.var("__tab")
    (f,) = E.substitute([node], {source: x})
    key = (str(f), store, bool(approximate))
    t = _TABLES.get(key)
    if t is None:
        from ..devices import cpu as _cpu
        src = codegen_numba.kernel_source([x], [f], np.float32, "h", approximate,
                                          store=store, wide=(0,))
        fn = _cpu.compile_source(("table", src), src, "kernel", parallel=False,
                                 fastmath=_cpu.FASTMATH, error_model="numpy")
        t = np.empty((1, 1 << 16), np.float32)
        fn(1 << 16, patterns(), t.reshape(-1))
        t.flags.writeable = False
        _TABLES[key] = t
    return t


def patterns():
    """Every 16-bit pattern, in order, as a read-only uint16 array."""
    if not _PATTERNS:
        p = np.arange(1 << 16, dtype=np.uint16)
        p.flags.writeable = False
        _PATTERNS.append(p)
    return _PATTERNS[0]


def whole_input(inputs, outputs, pattern, store):
    """The index of the one input of a half-width kernel (``pattern``; IR ``inputs``
    and ``outputs``) that a table of its output patterns replaces (``whole``): the
    kernel's only full input, a ``store`` element (``h``), its other inputs size-one
    constants the caller keys the table on, and its outputs costing at least
    ``WHOLE_MIN_COST[store]`` to compute. None otherwise."""
    least = thresholds()[1].get(store)
    if pattern.count("h") != 1 or "f" in pattern or least is None:
        return None
    k = pattern.index("h")
    varies, cost = {inputs[k]}, 0  # (the nodes that depend on the input: the rest
    for n in E.topo(outputs, stop=varies):  # is computed once, before the loop)
        if n not in varies and any(a in varies for a in n.args):
            varies.add(n)
            cost += 0 if n.op.startswith("round_") else _WHOLE_COST.get(n.op, 0.2)
    return k if cost >= least else None


def whole(key, build):
    """The table of a whole kernel's output patterns under ``key`` (its source, the
    store, the bytes of its constant inputs): ``build()`` runs the kernel over
    ``patterns()`` and returns its outputs as an ``(outputs, 65536)`` uint16 array;
    kept for the ``WHOLE_CACHE`` keys used last."""
    t = _WHOLE.get(key)
    if t is not None:
        _WHOLE.move_to_end(key)
        return t
    t = np.ascontiguousarray(build(), dtype=np.uint16)
    t.flags.writeable = False
    _WHOLE[key] = t
    while len(_WHOLE) > WHOLE_CACHE:
        _WHOLE.popitem(last=False)
    return t


def run_whole(table, k, nin, n, *args):
    """A kernel call ``kernel(n, a0 .. a{nin-1}, o0, o1 ...)`` answered from its
    ``whole`` table: each output ``oj[i] = table[j, ak[i]]`` (uint16 arrays of the
    elements' bits). Serial and thread-safe (``run_chunked`` calls it per chunk):
    four elements a step over 64-bit words from the first index where the input
    and every output are 8-byte aligned (little-endian machines), one at a time
    before and after."""
    a, outs = args[k], args[nin:]
    start = (-a.ctypes.data // 2) % 4 if n >= 8 and _LITTLE else n
    if any((o.ctypes.data + 2 * start) % 8 for o in outs):
        start = n
    m = start + (n - start) // 4 * 4
    one, four = _lookup_kernels(len(outs))
    if start:
        one(start, a[:start], *[o[:start] for o in outs], table)
    if m > start:
        one_word = [o[start:m].view(np.uint64) for o in outs]
        four((m - start) // 4, a[start:m].view(np.uint64), *one_word, table)
    if n > m:
        one(n - m, a[m:n], *[o[m:n] for o in outs], table)
    return None


_LOOKUP = {}  # outputs -> (per-element kernel, per-word kernel)
_LITTLE = sys.byteorder == "little"  # a word's first element in its low 16 bits


def _lookup_kernels(nout):
    """The compiled lookup loops of ``run_whole`` for ``nout`` outputs."""
    hit = _LOOKUP.get(nout)
    if hit is None:
        from ..devices import cpu as _cpu
        outs = ", ".join(f"o{j}" for j in range(nout))
        head = ["import numpy as np", "", "_m, _s1, _s2, _s3 = np.uint64(0xFFFF), "
                "np.uint64(16), np.uint64(32), np.uint64(48)", ""]
        one = head + [f"def kernel(n, a, {outs}, T):"]
        one += [f"    t{j} = T[{j}]" for j in range(nout)]
        one += ["    for i in range(n):", "        x = a[i]"]
        one += [f"        o{j}[i] = t{j}[x]" for j in range(nout)]
        four = head + [f"def kernel(n, a, {outs}, T):"]
        four += [f"    t{j} = T[{j}]" for j in range(nout)]
        four += ["    for i in range(n):", "        w = a[i]",
                 "        x0, x1, x2, x3 = w & _m, (w >> _s1) & _m, (w >> _s2) & _m, w >> _s3"]
        four += [f"        o{j}[i] = (np.uint64(t{j}[x0]) | (np.uint64(t{j}[x1]) << _s1) | "
                 f"(np.uint64(t{j}[x2]) << _s2) | (np.uint64(t{j}[x3]) << _s3))"
                 for j in range(nout)]
        hit = _LOOKUP[nout] = tuple(
            _cpu.compile_source(("lookup", src), src, "kernel", parallel=False,
                                fastmath=frozenset(), error_model="numpy")
            for src in ("\n".join(one) + "\n", "\n".join(four) + "\n"))
    return hit
