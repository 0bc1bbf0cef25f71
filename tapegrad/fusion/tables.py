"""65,536-entry float32 tables of unary functions of a half-width value.

A bfloat16 or float16 element has 65,536 possible values, so a function of one such
element alone is a table lookup: ``f(x) = T[bits(x)]``. A half-width kernel
(``codegen_numba``, ``store=``) whose chain computes a costly function (gelu's erf,
softplus, sin ...: tens of instructions an element, or a libm call) of an input it
reads as 16 bits looks the value up instead: one gather, whatever the function (it
costs about as much as tanh on Zen 4, so cheaper functions stay computed: ``COST``).
``plan`` picks the nodes; ``table`` builds each one ONCE per process by running the
float32 kernel of that very subexpression (the same generated code, helpers and
flags as the kernel it replaces) over all 65,536 bit patterns, NaNs, infinities and
subnormals included, so a lookup gives the float32 value the kernel computes, bit
for bit, and the kernel rounds it to the output's dtype as before. A table is 256 KB
(L2-resident); randn-like bfloat16 data touches ~20 KB of it. Tables are kernel
arguments, not Numba globals (a 64K-element constant would be compiled into every
kernel).
"""
import numpy as np

from . import codegen_numba, expr as E

# the time of each op's float32 code, roughly (others: 1), in units where a lookup
# costs ~12 (one gather per 16 elements; measured on Zen 4 at 4M elements: exp 5,
# tanh 10, erf 20, softplus 40; sin, cos and a general pow call libm per element)
COST = {"exp": 5, "_expneg": 5, "expm1": 8, "sigmoid": 7, "tanh": 10, "log": 15,
        "log1p": 20, "erf": 20, "softplus": 40, "sin": 300, "cos": 300, "pow": 300}
# the least cost a lookup replaces, by dtype: randn-like bfloat16 data (7 mantissa
# bits) touches ~20 KB of a table, L1-resident; float16 (10 bits) ~160 KB, from L2,
# where gelu's erf (cost 24 with its arithmetic) was slower looked up than computed
MIN_COST = {"bfloat16": 20, "float16": 30}
_TABLES = {}  # (expression over __tab, store, approximate) -> (1, 65536) float32
_PATTERNS = []


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
    return [(n, dep[n]) for n in top if _cost(n, src) >= MIN_COST[store]]


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
