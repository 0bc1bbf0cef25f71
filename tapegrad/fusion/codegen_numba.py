"""IR -> Python source for a serial, vectorised Numba kernel (one flat loop; the caller
runs it over chunks on every thread, ``devices.cpu.run_chunked``).

A kernel ``kernel(n, a0, a1, ..., o0, o1, ...)`` reads input ``k`` at ``[i]`` (full
size, contiguous) or once before the loop at ``[0]`` (size one, broadcast) and writes
every output at ``[i]``. Constants are module globals of the kernel's dtype (Numba
freezes them), so a float32 kernel never widens to float64. float32 kernels call the
vectorisable approximations of ``approx.py`` (one shared helper module, force-inlined
by LLVM, so the loop vectorises); float64 kernels use libm through ``np.*``.

Half width (``store="bfloat16"`` or ``"float16"``): the kernel computes in float32 but
reads and writes the 16-bit elements themselves, as uint16 (input pattern ``h``; every
output): each read widens exactly (a bfloat16 is the top half of a float32: a shift),
each write rounds once to nearest-even (``devices.cpu.jit_helpers``' ``bf16_store`` /
``f16_store``, branch-free integer code, so the loop still vectorises). A chain moves
half the bytes of its float32 run and rounds as PyTorch's CPU kernels do: once, at
the end.
"""
import numpy as np

from . import approx
from .expr import topo

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}
_NP = {"exp": "np.exp", "log": "np.log", "log1p": "np.log1p", "expm1": "np.expm1",
       "sqrt": "np.sqrt", "tanh": "np.tanh", "sin": "np.sin", "cos": "np.cos",
       "abs": "np.abs", "erf": "_math.erf", "exp2": "np.exp2", "log2": "np.log2",
       "log10": "np.log10"}


_BLOCK = 1024  # elements per float32 partial sum of a reduction kernel


_STORES = {"bfloat16": ("bf16_load", "bf16_store"), "float16": ("f16_load", "f16_store")}


def kernel_source(inputs, outputs, dtype, pattern, approximate=True, reduce=False, store=None,
                  pairs=False, wide=(), tables=()):
    """Source of ``kernel`` for IR ``outputs`` over input nodes ``inputs``.

    ``pattern[k]`` is ``"f"`` (full, read at i) or ``"s"`` (size one, read at 0), both
    of the kernel's ``dtype``, or ``"h"`` (full, the uint16 bits of a ``store`` element).
    ``store`` (``"bfloat16"``/``"float16"``, with ``dtype`` float32): the outputs are
    uint16 arrays holding that dtype's bits, rounded once from the float32 result.
    With ``reduce`` the kernel returns the sum of its first output over ``[0, n)``:
    ``kernel(n, a0, a1, ..., o1, o2, ...) -> float``, summed in the kernel's dtype
    over blocks of ``_BLOCK`` elements (reassociated into vector lanes, so it vectorises)
    and the blocks in float64; its other outputs (``tg.compile``: values of the chain
    used elsewhere) are written as usual.
    ``pairs`` (bfloat16 only, inputs ``h`` or ``s``, no ``reduce``): every full input
    and output is a uint32 array of element pairs (the first in the low half) and
    ``n`` counts pairs; each step widens a pair with a shift and a mask, computes
    the chain for both and packs the two rounded results (``jit_helpers``'
    ``bf16_load_lo``/``bf16_load_hi``/``bf16_store_pair``), without the 16 <-> 32-bit
    lane conversions of the per-element loop.
    ``wide`` (with ``store``): indices of outputs written as float32, unrounded. A
    ``round_bfloat16``/``round_float16`` node (the store's dtype) rounds a float32
    value to that dtype and widens it back: a rounding inside the chain (float16's
    on float32's bits, ``f16_round``, which LLVM cannot merge into a chain of
    ``half`` operations computed without the intermediate roundings).
    ``tables`` (with ``store``, no ``reduce`` or ``pairs``): pairs ``(node, k)``, the
    node a function of input ``k`` alone (pattern ``h``): its value is looked up in a
    65,536-entry float32 table by the input's 16 bits instead of computed
    (``tables.py``); the kernel takes one table argument per pair after the outputs,
    each a ``(1, 65536)`` array (so ``run_chunked`` never slices it). The loop runs
    in blocks of ``_TBLOCK`` elements: each table is gathered 16 elements at a time
    (``jit_helpers``' ``gather16``) into a block buffer the chain then reads; the
    last ``n % _TBLOCK`` elements look up one at a time.
    """
    if reduce and not outputs:
        raise ValueError("a reduction kernel needs an output to sum")
    dtype = np.dtype(dtype)
    f32 = dtype == np.float32
    if store is not None and (store not in _STORES or not f32):
        raise ValueError(f"a half-width kernel computes in float32 and stores one of "
                         f"{sorted(_STORES)}, not {dtype} as {store}")
    load, write = _STORES[store] if store is not None else (None, None)
    if "h" in pattern and load is None:
        raise ValueError("a half-width input (pattern 'h') needs store=")
    if pairs and (store != "bfloat16" or reduce or wide or not set(pattern) <= {"h", "s"}):
        raise ValueError("a kernel over pairs stores bfloat16 from inputs of pattern "
                         "'h' or 's' and does not reduce")
    if tables and (load is None or reduce or pairs or
                   any(pattern[k] != "h" for _, k in tables)):
        raise ValueError("table lookups need a half-width input (pattern 'h') and "
                         "store=, without reduce or pairs")
    tname = "np.float32" if f32 else "np.float64"
    looked = {node: t for t, (node, _) in enumerate(tables)}
    order = topo(outputs, stop=looked)
    names, consts, body, hoisted = {}, {}, [], []
    rounds = False
    for k, (node, p) in enumerate(zip(inputs, pattern)):
        names[node] = f"v{k}"
        # size-one inputs are read once, before the loop
        if p == "h":
            body.append(f"v{k} = _load(a{k}[i])")
        else:
            (body if p == "f" else hoisted).append(f"v{k} = a{k}[{'i' if p == 'f' else '0'}]")
    use_approx = f32 and approximate
    used_ops = set()
    for n in order:
        if n in names:
            continue
        if n.op == "const":
            if n.value not in consts:
                consts[n.value] = f"_c{len(consts)}"
            names[n] = consts[n.value]
            continue
        if n.op == "var":
            raise ValueError(f"elementwise: free variable {n.value!r} is not an input")
        t = f"t{len(body)}"
        if n in looked:  # (filled in below: the block buffer's or the table's entry)
            body.append(f"{t} = @{looked[n]}@")
            names[n] = t
            continue
        args = [names[a] for a in n.args]
        if n.op.startswith("round_"):
            if n.op != f"round_{store}":
                raise ValueError(f"{n.op} in a kernel that stores {store}")
            body.append(f"{t} = _round({args[0]})" if store == "float16"
                        else f"{t} = _rload(_rstore({args[0]}))")
            rounds = True
            names[n] = t
            continue
        used_ops.add(n.op)
        body.append(f"{t} = {_expr(n, args, use_approx, tname)}")
        names[n] = t
    for j, o in enumerate(outputs):
        if write and j not in wide and o.op == f"round_{store}" and o not in looked:
            o = o.args[0]  # the store rounds it: the same value
        val = names[o] if not o.is_bool else f"(_one if {names[o]} else _zero)"
        if reduce and j == 0:  # an addition LLVM may reassociate; the terms it may not
            body.append(f"s = _sum_add(s, {val})")
        else:
            body.append(f"o{j}[i] = _store({val})" if write and j not in wide
                        else f"o{j}[i] = {val}")
    if pairs:
        body = _paired(body, len(outputs))
    lines = ["import math as _math", "import numpy as np"]
    if pairs:
        from ..devices.cpu import HELPERS_VERSION
        lines += [f"from tapegrad.devices.cpu import jit_helpers as _jit  # v{HELPERS_VERSION}",
                  "_lo, _hi, _pair = _jit().bf16_load_lo, _jit().bf16_load_hi, "
                  "_jit().bf16_store_pair"]
    elif load is not None:
        from ..devices.cpu import HELPERS_VERSION, native_half
        tag = f"v{HELPERS_VERSION}{' native half' if native_half() else ''}"
        lines += [f"from tapegrad.devices.cpu import jit_helpers as _jit  # {tag}",
                  f"_load, _store = _jit().{load}, _jit().{write}"]
        if rounds:  # float16: rounded on float32's bits (``jit_helpers``' ``f16_round``;
            # LLVM turns a hardware rounding widened back into a chain of native half
            # operations computed without the roundings, on x86)
            lines.append("_round = _jit().f16_round" if store == "float16" else
                         f"_rload, _rstore = _jit().{load}, _jit().{write}")
    lines += module_globals(used_ops, use_approx, tname, consts)
    if reduce:
        from ..devices.cpu import HELPERS_VERSION
        lines += [f"from tapegrad.devices.cpu import jit_helpers as _jit_s  # v{HELPERS_VERSION}",
                  "_sum_add = _jit_s().sum_add"]
    if tables:
        lines.append("_gather = _jit().gather16")
    params = ", ".join([f"a{k}" for k in range(len(inputs))] +
                       [f"o{j}" for j in range(1 if reduce else 0, len(outputs))] +
                       [f"T{t}" for t in range(len(tables))])
    lines += ["", "", f"def kernel(n, {params}):"] + ["    " + h for h in hoisted]
    if reduce:
        # float32 partial sums over blocks (the loop vectorises: a float64
        # accumulator fed by conversions does not), blocks summed in float64
        lines += ["    acc = 0.0", f"    for j in range(0, n, {_BLOCK}):", "        s = _zero",
                  f"        for i in range(j, min(j + {_BLOCK}, n)):"]
        lines += ["            " + b for b in body]
        lines += ["        acc += s", "    return acc"]
    elif tables:
        lines += _blocked(body, tables)
    else:
        lines += ["    for i in range(n):"]
        lines += ["        " + b for b in body]
    return "\n".join(lines) + "\n"


_TBLOCK = 128  # elements per block of a kernel with table lookups (512: ~25% slower)


def _blocked(body, tables):
    """The loop of a kernel with table lookups (``tables``: (node, input) pairs;
    ``body``'s lookups are ``@t@`` for table ``t``): whole blocks read the gathered
    block buffers, the tail indexes the tables."""
    import re

    from ..devices.cpu import GATHER_WIDTH

    def fill(how):
        return ["        " + re.sub(r"@(\d+)@", lambda m: how(int(m.group(1))), b) for b in body]
    lines = [f"    _t{t} = T{t}[0]" for t in range(len(tables))]
    lines += [f"    _g{t} = np.empty({_TBLOCK}, np.float32)" for t in range(len(tables))]
    lines += [f"    m = n - n % {_TBLOCK}", f"    for j in range(0, m, {_TBLOCK}):",
              f"        for k in range(0, {_TBLOCK}, {GATHER_WIDTH}):"]
    lines += [f"            _gather(_t{t}, a{k}, j + k, _g{t}, k)"
              for t, (_, k) in enumerate(tables)]
    lines += [f"        for i in range(j, j + {_TBLOCK}):"]
    lines += ["    " + b for b in fill(lambda t: f"_g{t}[i - j]")]
    lines += ["    for i in range(m, n):"]
    lines += fill(lambda t: f"_t{t}[a{tables[t][1]}[i]]")
    return lines


def _paired(body, nout):
    """The per-element loop body as one over pairs: each line twice, its names
    suffixed ``_0`` (the pair's first element) and ``_1``; a load ``_load(ak[i])``
    becomes ``_lo(ak[i])`` / ``_hi(ak[i])`` of the pair, and the two copies' writes
    of output ``j`` one ``oj[i] = _pair(first, second)``."""
    import re
    defined = {ln.split(" = ", 1)[0] for ln in body if not ln.startswith("o")}
    name = re.compile(r"\b(" + "|".join(sorted(defined, key=len, reverse=True)) + r")\b") \
        if defined else None
    halves = []
    for k, half in ((0, "_lo"), (1, "_hi")):
        lines, vals = [], {}
        for ln in body:
            if ln.startswith("o"):
                j, val = re.fullmatch(r"o(\d+)\[i\] = _store\((.*)\)", ln).groups()
                vals[int(j)] = name.sub(lambda m: f"{m.group(1)}_{k}", val) if name else val
                continue
            ln = ln.replace("_load(", half + "(")
            lines.append(name.sub(lambda m: f"{m.group(1)}_{k}", ln) if name else ln)
        halves.append((lines, vals))
    out = halves[0][0] + halves[1][0]
    return out + [f"o{j}[i] = _pair({halves[0][1][j]}, {halves[1][1][j]})" for j in range(nout)]


def module_globals(used_ops, use_approx, tname, consts):
    """Source lines of a generated kernel module's globals: the approximation helpers
    its ops call (``use_approx``), ``_one``/``_zero`` and each constant (``consts``:
    value -> name), all of the kernel's float type ``tname``."""
    need = approx.needed(sorted(used_ops)) if use_approx else []
    lines = []
    if need:
        lines += [f"from tapegrad.fusion.approx import helpers as _approx  # {approx.tag()}",
                  "_A = _approx()"] + [f"{h} = _A.{h}" for h in need]
    lines.append(f"_one, _zero = {tname}(1.0), {tname}(0.0)")
    for v, name in consts.items():
        lines.append(f"{name} = {tname}({_lit(v)})")
    return lines


def _lit(v):
    if v != v:
        return "np.nan"
    if v in (float("inf"), float("-inf")):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(v)


def _expr(n, a, use_approx, tname):
    op = n.op
    if op in _INFIX:
        return f"{a[0]} {_INFIX[op]} {a[1]}"
    if op == "neg":
        return f"-{a[0]}"
    if op == "not":
        return f"not {a[0]}"
    if op == "where":
        return f"{a[1]} if {a[0]} else {a[2]}"
    if op == "maximum":  # NaN propagates from either side, as np.maximum
        return f"{a[1]} if {a[1]} != {a[1]} else ({a[0]} if not {a[0]} <= {a[1]} else {a[1]})"
    if op == "minimum":
        return f"{a[1]} if {a[1]} != {a[1]} else ({a[0]} if not {a[0]} >= {a[1]} else {a[1]})"
    if op == "sign":
        return f"_one if {a[0]} > _zero else (-_one if {a[0]} < _zero else {a[0]})"
    if op == "pow":
        e = n.args[1]
        if e.op == "const" and e.value in (2.0, 3.0, 4.0, -1.0, 0.5, -0.5):
            return {2.0: f"{a[0]} * {a[0]}", 3.0: f"{a[0]} * {a[0]} * {a[0]}",
                    4.0: f"({a[0]} * {a[0]}) * ({a[0]} * {a[0]})", -1.0: f"_one / {a[0]}",
                    0.5: f"np.sqrt({a[0]})", -0.5: f"_one / np.sqrt({a[0]})"}[e.value]
        return f"{a[0]} ** {a[1]}"
    if op == "rsqrt":
        return f"_one / np.sqrt({a[0]})"
    if use_approx and op in approx.HELPERS:
        return f"{approx.HELPERS[op][0]}({', '.join(a)})"
    if op == "logaddexp":  # as NumPy's: x + log 2 where x == y, equal infinities included
        return (f"(({a[0]} + {tname}(0.6931471805599453)) if {a[0]} == {a[1]} else "
                f"(({a[0]} if {a[0]} > {a[1]} else {a[1]}) + "
                f"np.log1p(np.exp(-np.abs({a[0]} - {a[1]})))))")
    if op == "sigmoid":
        return f"_one / (_one + np.exp(-{a[0]}))"
    if op == "softplus":  # max(x, 0) + log1p(exp(-|x|)): no overflow; NaN stays NaN
        return f"(({a[0]} if {a[0]} > _zero else _zero) + np.log1p(np.exp(-np.abs({a[0]}))))"
    if op == "erf":  # float64 (or unapproximated float32): libm erf
        return f"{tname}(_math.erf({a[0]}))"
    return f"{_NP[op]}({a[0]})"
