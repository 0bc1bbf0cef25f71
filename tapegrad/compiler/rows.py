"""Row fusion: runs of steps over the rows of one ``(..., C)`` value as one kernel.

The elementwise pass fuses steps over one shape; a layer norm, a masked softmax or
their backwards mix full values with per-row ones (a sum over the last axis with
``keepdim``, its broadcast back), per-column ones (a weight, its gradient's sum over
the rows) and values repeating along the leading dims (a mask, position
embeddings). ``fuse_rows`` takes a run of such steps in program order (steps in
between that read none of its values may stay out of it; a step that changes state
or reads one of its values ends it) and writes one Numba kernel that goes over the
rows once: per row, a few passes over its ``C`` elements, sums held as scalars, the
values nothing outside reads never stored. Members:

- elementwise steps (registry ops with an expression, NumPy's add/subtract/multiply/
  divide/negative) whose inputs are full, per-row, per-column, repeating or single
  values, and whose result is full or per-row;
- ``sum``/``mean`` over the last axis with ``keepdim`` and ``sum_to`` the per-row
  shape (a scalar per row, added in the value's dtype, in vector lanes as a
  BLAS GEMV adds), ``sum_to`` the per-column shape
  (float64 partial sums per chunk of rows, added in chunk order);
- ``softmax`` over the last axis; ``broadcast_to`` of a per-row value to the full
  shape (read as the row's scalar).

The kernel runs over chunks of rows on every thread (``devices.cpu.run_chunked``).
Sums are rounded in another order than eager's (as ``_last_axis_sum`` already is);
float32 transcendental functions use the elementwise kernels' approximations.
The fused step is an ``op`` step whose op is an ``Epilogue`` (it writes into the
planned buffers as any registry kernel).
"""
import math

import numpy as np

from ..devices import cpu as _cpu
from ..fusion import codegen_numba, expr as E
from ..fusion.op import config as _fusion_config
from .epilogue import Epilogue
from .graph import Step, splice

__all__ = ["fuse_rows"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_ELEMENTWISE_UFUNCS = ("add", "subtract", "multiply", "true_divide", "divide", "negative")
ENABLED = True
# runs over fewer elements stay as they are (the ops' own kernels are as fast there,
# and a kernel costs ~0.5 s of Numba compilation in a new process); kernels over at
# least _SPECIALIZE elements have the row length in their source (a constant: ~1.5x
# faster loops), smaller ones share one kernel per structure, whatever the shape
MIN_ELEMENTS = 1 << 12
_SPECIALIZE = 1 << 16


def fuse_rows(g, steps, reads_all, expr_of):
    """``steps`` with each row-fused run in place of its members; the number of runs.
    ``reads_all(st)``: every value a step reads; ``expr_of(st, g, env)``: an
    elementwise step's expression over ``env`` (value -> expression node)."""
    if not ENABLED:
        return steps, 0
    escapes = set(g.output_values())
    readers = {}
    for k, st in enumerate(steps):
        for v in reads_all(st):
            readers.setdefault(v, []).append(k)
        if st.kind == "setgrad":
            escapes.update(st.reads())
    runs, cur = [], None
    for k, st in enumerate(steps):
        if cur is not None:
            role = _role(st, g, cur["base"])
            if role is not None and role[1] == cur["base"]:
                cur["members"].append(k)
                cur["made"].update(o for o in st.outs if o is not None)
                continue
            if role is None and st.kind in ("op", "ufunc") and not st.mutates() \
                    and st.into is None and _role(st, g, None) is None \
                    and not any(v in cur["made"] for v in reads_all(st)):
                continue  # stays out of the run, which runs after it
            runs.append(cur)
            cur = None
        role = _role(st, g, None)
        if role is not None and role[0] != "bcast":
            cur = {"base": role[1], "members": [k],
                   "made": {o for o in st.outs if o is not None}}
    if cur is not None:
        runs.append(cur)
    at, drop = {}, set()
    for run in runs:
        ms = run["members"]
        kinds = {_role(steps[m], g, run["base"])[0] for m in ms}
        if len(ms) < 2 and "softmax" not in kinds or math.prod(run["base"]) < MIN_ELEMENTS:
            continue
        if kinds == {"ew"} and not any(
                _cls(g.shapes[v], run["base"]) in ("R", "P") for m in ms
                for v in steps[m].reads()):
            continue  # one shape throughout: the elementwise pass's (flat loops)
        built = _build(g, [steps[m] for m in ms], run["base"], escapes, readers, set(ms),
                       expr_of)
        if built is None:
            continue
        at[ms[-1]] = built
        drop.update(ms)
    return splice(steps, at, drop), len(at)


def _last_dim(attrs, nd):
    dim = attrs.get("dim")
    dims = (dim,) if isinstance(dim, int) else dim
    try:
        return dims is not None and len(dims) == 1 and int(dims[0]) % nd == nd - 1
    except (TypeError, ValueError):
        return False


def _role(st, g, base):
    """(what the step is in a run, the run's full shape), or None."""
    if len(st.outs) != 1 or st.outs[0] is None or st.into is not None:
        return None
    o = st.outs[0]
    dt = g.dtypes[o]
    if dt not in _FLOATS:
        return None
    if any(type(i) is int and g.dtypes[i] != dt for i in st.ins):
        return None
    if st.kind == "ufunc":
        if st.op.__name__ not in _ELEMENTWISE_UFUNCS or st.attrs or o in g.alias:
            return None
        kind = "ew"
    elif st.kind == "op":
        op = st.op
        name = getattr(op, "name", None)
        if op.kind == "view" and name == "broadcast_to":
            x = st.ins[0]
            if base is None or type(x) is not int or g.shapes[o] != base \
                    or _cls(g.shapes[x], base) != "R":
                return None
            return "bcast", base
        if op.kind != "basic" or o in g.alias:
            return None
        ins = st.ins
        if name in ("sum", "mean", "sum_to") and len(ins) == 1 and type(ins[0]) is int:
            s = g.shapes[ins[0]]
            if len(s) < 2 or s[-1] < 2:
                return None
            if name == "sum_to":
                if set(st.attrs) != {"shape"}:
                    return None
                if g.shapes[o] == s[:-1] + (1,):
                    return "rsum", s
                if g.shapes[o] == (s[-1],):
                    return "csum", s
                return None
            if set(st.attrs) - {"dim", "keepdim"} or not st.attrs.get("keepdim") \
                    or not _last_dim(st.attrs, len(s)):
                return None
            return ("rmean" if name == "mean" else "rsum"), s
        if name == "softmax" and len(ins) == 1 and type(ins[0]) is int:
            s = g.shapes[ins[0]]
            if set(st.attrs) != {"dim"} or len(s) < 2 or s[-1] < 2 \
                    or not _last_dim(st.attrs, len(s)) or g.shapes[o] != s:
                return None
            return "softmax", s
        if not op.elementwise or op.nout != 1:
            return None
        kind = "ew"
    else:
        return None
    shape = g.shapes[o]
    full = base if base is not None else shape
    if len(full) < 2 or full[-1] < 2:
        return None
    c = _cls(shape, full)
    if c not in ("F", "R"):
        return None
    for i in st.ins:
        if type(i) is int:
            ci = _cls(g.shapes[i], full)
            if ci is None or (c == "R" and ci not in ("R", "S")):
                return None
        elif type(i[1]) not in (int, float) and not isinstance(i[1], np.floating):
            return None
    return kind, full


def _cls(shape, full):
    """How a value of ``shape`` is read over rows of ``full``: "F" (the full value),
    "R" (one per row), "S" (one value), "P" (repeating along the leading dims: its
    trailing dims are ``full``'s), or None."""
    if shape == full:
        return "F"
    if math.prod(shape) == 1:
        return "S"
    if shape == full[:-1] + (1,):
        return "R"
    s = tuple(shape)
    while s and s[0] == 1:
        s = s[1:]
    if s and len(s) <= len(full) and s == full[len(full) - len(s):]:
        return "P"
    return None


class _Loop:
    def __init__(self):
        self.pre, self.body, self.post = [], [], []
        self.pending = set()   # per-row sums this pass is still adding up
        self.made = set()      # full values computed in this pass (as locals)


def _build(g, members, base, escapes, readers, member_idx, expr_of):
    """The fused step of a run, or None (Numba missing, or something it cannot do)."""
    C = base[-1]
    R = math.prod(base[:-1])
    dt = g.dtypes[members[-1].outs[0]]
    if any(g.dtypes[st.outs[0]] != dt for st in members):
        return None
    tname = "np.float32" if dt == np.float32 else "np.float64"
    made = {st.outs[0] for st in members}
    pos = {}
    for st in members:
        pos[st.outs[0]] = st
    # values read after the run (or escaping) are stored
    outside = [v for v in made if v in escapes or any(
        k not in member_idx for k in readers.get(v, ()))]
    for st in members:
        if st.kind == "op" and st.op.name == "broadcast_to" and st.outs[0] in outside:
            return None
    ins, in_cls = [], {}
    for st in members:
        for v in st.reads():
            if v not in made and v not in in_cls:
                c = _cls(g.shapes[v], base)
                if c is None:
                    return None
                ins.append(v)
                in_cls[v] = c
    cls = {}
    for st in members:
        role = _role(st, g, base)[0]
        cls[st.outs[0]] = {"rsum": "R", "rmean": "R", "csum": "C", "bcast": "B",
                           "softmax": "F"}.get(role) or _cls(g.shapes[st.outs[0]], base)
    out_vals = [v for v in [st.outs[0] for st in members] if v in outside]
    # per value: how the kernel reads it
    arg_of = {v: f"a{k}" for k, v in enumerate(ins)}
    out_of = {v: f"o{k}" for k, v in enumerate(out_vals)}
    scalar = {}       # R/S value -> local name (valid after its pass)
    stored = {}       # F value -> row expression prefix, e.g. "o0[i, " or "s5["
    consts = {}
    used_ops = set()
    periods = []      # rows per period of each repeating input (kernel arguments)
    # a large value: the row length and periods constants of the source (loops
    # unrolled); a small one: arguments (one kernel per structure, any shape)
    special = R * C >= _SPECIALIZE
    CN = str(C) if special else "C"
    need_rows = any(c == "P" and math.prod(g.shapes[v]) > C for v, c in in_cls.items())
    hoisted, row_pre, scratch = [], [], []
    for v, c in in_cls.items():
        a = arg_of[v]
        if c == "S":
            hoisted.append(f"x{v} = {a}[0]")
            scalar[v] = f"x{v}"
        elif c == "R":
            row_pre.append(f"x{v} = {a}[i]")
            scalar[v] = f"x{v}"
        elif c == "F":
            stored[v] = f"{a}[i, "
        else:
            p = math.prod(g.shapes[v])
            if p > C:
                periods.append(p // C)
                per = str(p // C) if special else f"pp{len(periods) - 1}"
                row_pre.append(f"p{v} = (ri % {per}) * {CN}")
                stored[v] = f"{a}[0, p{v} + "
            else:
                stored[v] = f"{a}[0, "
    csums = [v for v in out_vals if cls[v] == "C"]
    loops = [_Loop()]
    local = {}        # full value -> the local holding it in the current pass
    needstore = set()

    def cur():
        return loops[-1]

    def close():
        for v in local:
            stored[v] = f"o{out_vals.index(v)}[i, " if v in out_of else f"s{v}["
        local.clear()
        if cur().body or cur().pre or cur().post:
            loops.append(_Loop())

    def read(v):
        """The code that reads value ``v`` inside the current pass."""
        c = cls.get(v) or in_cls[v]
        if c in ("S", "R"):
            return scalar[v]
        if c == "B":
            return read(pos[v].ins[0])
        if c == "C":
            raise _Fail
        if v in local:
            return local[v]
        if v in made:
            needstore.add(v)
        return stored[v] + "j]"

    def lit(x):
        x = float(x)
        if x not in consts:
            consts[x] = f"_c{len(consts)}"
        return consts[x]

    use_approx = dt == np.float32 and _fusion_config.approximate

    def emit_expr(st, into):
        env = {}
        names = {}
        for j, i in enumerate(st.ins):
            if type(i) is int:
                n = E.var(f"__r{j}")
                env[i] = n
                names[n] = read(i)
        e = expr_of(st, g, env)
        if e is None:
            raise _Fail
        code = []
        for n in E.topo([e]):
            if n in names:
                continue
            if n.op == "const":
                names[n] = lit(n.value)
                continue
            if n.op == "var":
                raise _Fail
            t = f"t{st.outs[0]}_{len(code)}"
            used_ops.add(n.op)
            code.append(f"{t} = " + codegen_numba._expr(n, [names[a] for a in n.args],
                                                         use_approx, tname))
            names[n] = t
        code.append(f"{into} = {names[e]}")
        return code

    def waits(v):  # a per-row sum the current pass is still adding up
        if cls.get(v) == "B":
            v = pos[v].ins[0]
        return v in cur().pending

    try:
        for st in members:
            o = st.outs[0]
            role = _role(st, g, base)[0]
            if role == "bcast":
                continue
            reads = st.reads()
            if any(waits(v) for v in reads):
                close()
            if role == "ew" and cls[o] == "R":
                cur().pre += emit_expr(st, f"x{o}")
                scalar[o] = f"x{o}"
            elif role == "ew":
                cur().body += emit_expr(st, f"y{o}")
                local[o] = f"y{o}"
                cur().made.add(o)
            elif role in ("rsum", "rmean"):
                cur().pre.append(f"q{o} = _zero")
                cur().body.append(f"q{o} += {read(st.ins[0])}")
                div = " / fC" if role == "rmean" else ""
                cur().post.append(f"x{o} = q{o}{div}")
                cur().pending.add(o)
                scalar[o] = f"x{o}"
            elif role == "csum":
                cur().body.append(f"c{csums.index(o)}[j] += {read(st.ins[0])}")
            else:  # softmax: three passes of its own over a stored row
                if cls.get(st.ins[0]) == "B":
                    raise _Fail
                close()
                src = read(st.ins[0])
                dst = f"o{out_vals.index(o)}[i, " if o in out_of else f"s{o}["
                if o not in out_of:
                    scratch.append(f"s{o} = np.empty({CN}, {tname})")
                lp = cur()
                lp.pre.append(f"m{o} = {src[:-2]}0]")
                lp.body.append(f"m{o} = {src} if {src} > m{o} else m{o}")
                loops.append(_Loop())
                lp = cur()
                lp.pre.append(f"q{o} = _zero")
                used_ops.add("exp")
                ex = codegen_numba._expr(E.unary("exp", E.var("__x")), [f"d{o}"],
                                         use_approx, tname)
                lp.body += [f"d{o} = {src} - m{o}", f"e{o} = {ex}", f"{dst}j] = e{o}",
                            f"q{o} += e{o}"]
                lp.post.append(f"r{o} = _one / q{o}")
                loops.append(_Loop())
                cur().body.append(f"{dst}j] = {dst}j] * r{o}")
                loops.append(_Loop())
                stored[o] = dst
    except (_Fail, KeyError):
        return None
    close()
    body = []
    for lp in loops:
        inner = list(lp.body)
        for v in sorted(lp.made):
            if v in out_of:
                inner.append(f"o{out_vals.index(v)}[i, j] = y{v}")
            elif v in needstore:
                inner.append(f"s{v}[j] = y{v}")
                scratch.append(f"s{v} = np.empty({CN}, {tname})")
        body += lp.pre
        if inner:
            body.append(f"for j in range({CN}):")
            body += ["    " + x for x in inner]
        body += lp.post
    for v in out_vals:
        if cls[v] == "R":
            body.append(f"o{out_vals.index(v)}[i] = x{v}")
    src = ["import math as _math", "import numpy as np"]
    src += codegen_numba.module_globals(used_ops, use_approx, tname, consts)
    params = ", ".join(["rows", "C"] + [f"pp{k}" for k in range(len(periods))] +
                       [arg_of[v] for v in ins] + [out_of[v] for v in out_vals])
    src += ["", "", f"def kernel(n, {params}):"]
    src += ["    " + h for h in hoisted]
    src += ["    " + s for s in dict.fromkeys(scratch)]
    src.append(f"    fC = {tname}({CN})")
    src.append(f"    cs = np.zeros(({max(len(csums), 1)}, {CN}))")
    src += [f"    c{k} = cs[{k}]" for k in range(len(csums))]
    src.append("    for i in range(n):")
    if need_rows:
        src.append("        ri = rows[i]")
    src += ["        " + x for x in row_pre + body]
    src.append("    return cs")
    text = "\n".join(src) + "\n"
    try:
        fn = _cpu.compile_source(("rows", text), text, "kernel", parallel=False,
                                 fastmath=_cpu.FASTMATH_SUM, error_model="numpy")
    except Exception:  # Numba missing or failing: the members run as they are
        return None
    shapes = [g.shapes[v] for v in out_vals]
    op = Epilogue(f"rows[{','.join(st.name for st in members)}]",
                  _runner(fn, R, C, periods, dt, [in_cls[v] for v in ins],
                          [g.shapes[v] for v in ins], [cls[v] for v in out_vals], shapes,
                          csums, out_vals),
                  len(out_vals))
    st = Step("op", op, list(ins), {})
    st.outs = list(out_vals)
    st.members = members
    op.source = text
    return st


class _Fail(Exception):
    pass


def _runner(fn, R, C, periods, dt, in_cls, in_shapes, out_cls, out_shapes, csums, out_vals):
    rows = np.arange(R, dtype=np.int64)
    min_rows = max(1, _cpu.CHUNK_MIN // (4 * C))
    nout = len(out_cls)
    col = [out_vals.index(v) for v in csums]

    def prep(a, c):
        a = np.asarray(a)
        if a.dtype != dt:
            a = a.astype(dt)
        if c == "F":
            return np.ascontiguousarray(a).reshape(R, C)
        if c == "R":
            return np.ascontiguousarray(a).reshape(R)
        if c == "S":
            return np.ascontiguousarray(a.reshape(-1)[:1])
        return np.ascontiguousarray(a).reshape(1, -1)

    def kernel(*ins, out=None):
        outs = (out,) if nout == 1 else tuple(out)
        args = [prep(a, c) for a, c in zip(ins, in_cls)]
        views = []
        for o, c in zip(outs, out_cls):
            views.append(o.reshape(R, C) if c == "F" else o.reshape(R) if c == "R"
                         else np.empty((1, 1), dt))
        parts = _cpu.run_chunked(fn, R, rows, C, *periods, *args, *views, min_chunk=min_rows,
                                 collect=bool(col))
        for k, j in enumerate(col):
            total = parts[0][k].copy()
            for p in parts[1:]:
                total += p[k]
            outs[j][...] = total
        return out
    return kernel
