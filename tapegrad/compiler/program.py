"""From a captured ``Graph`` to a replayable program: passes, memory plan, code.

Passes, in order:

- ``dce``: steps none of whose results is needed (by the outputs, an effect, or a
  step that is kept) are dropped.
- ``fold_embedding_projections`` (``embedding_projection.py``): an embedding read
  only by a linear map becomes a gather from the projected table (and its backward,
  where the graph has it, a scatter-add into the table's gradient).
- ``fuse_elementwise``: chains of elementwise steps (registry ops with an expression,
  expression ops and their derived adjoints, the walker's gradient sums) over one
  shape and float dtype, whose inputs have that shape or one element, become one
  Numba kernel made by ``fusion.codegen_numba`` (the generator ``@tg.fuse`` uses);
  values used only inside a group are never stored. A group runs where its last
  member ran; a step that mutates state, or a use of a group's value outside it,
  closes the group. A kernel recomputes values of another group when that moves
  fewer bytes than storing and reading them (``remat.choose``), and kernels over the
  same elements that do not depend on each other run as one pass
  (``remat.siblings``). bfloat16/float16 steps, and the casts the capture records
  around a half-width op (eager's one rounding per op), join float32 groups: the
  kernel computes in float32 over the 16-bit elements and rounds where the program
  did (``round_<dtype>`` nodes), so its values equal eager's.
- ``order_effects``: value guards move to right after their value is computed, so
  they are checked before the program changes any state (a failed guard then
  re-captures with nothing done); in a program with checks, clearing a ``.grad``
  moves to the end, before the gradients are set (without, it stays where it was, so
  the old gradient's memory is free for the new one). A guard that would still
  follow a state change is refused.
- ``plan_memory``: each value's bytes (its spec) and lifetime (first step to last
  use, a view keeping its base alive); values that escape (outputs, gradients) live
  to the end. The peak of the live bytes over the program is ``peak_bytes``, known
  before the first replay; the fused kernels' outputs and the workspaces get
  offsets in one arena, reused where lifetimes do not overlap, allocated once per
  program and reused by every replay.

``codegen`` writes the program as one Python function: a straight line of kernel
calls on local variables (``del`` at each value's last use), kernels, externals and
constants bound as globals. No Tensor, node or dispatch between kernels.
"""
import functools
import math
import operator
import sys

import numpy as np

from .. import devices as _devices, dtypes as _dt
from ..devices import cpu as _cpu
from ..devices.cpu_kernels.tiled_gemm import matmul as _gemm
from ..fusion import codegen_numba, expr as E, tables as _tables
from ..fusion.op import config as _fusion_config
from ..tensor import LEAF_HOOKS, mark_written, wrap
from .capture import Unsupported
from .embedding_projection import fold_embedding_projections
from .epilogue import fuse_epilogues, join_slice_grads
from .graph import Step, draws as _draws, splice
from .hoist import hoist_invariants
from .remat import choose as choose_recomputed, siblings
from .rows import fuse_rows

__all__ = ["Program", "GuardFailed"]


class GuardFailed(Exception):
    """A value read during the capture differs on replay: the program must be captured
    again (nothing was changed yet)."""


_UFUNCS = {"add": "add", "subtract": "sub", "multiply": "mul", "true_divide": "div",
           "divide": "div", "negative": "neg"}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)


def _compute_dtype(dt):
    """The dtype a fused kernel computes ``dt`` in: float32 for bfloat16/float16."""
    return _F32 if dt in _dt.LOW_SET else dt


# ---------------------------------------------------------------- DCE
def dce(g, steps):
    live = set(g.output_values())
    kept = []
    for st in reversed(steps):
        needed = st.kind in ("write", "update", "cleargrad", "zerograd", "setgrad", "guard") \
            or (st.kind == "ufunc" and st.into is not None) \
            or (st.kind == "op" and (st.op.kind == "dynamic" or _draws(st.op))) \
            or any(o is not None and o in live for o in st.outs)
        if not needed:
            continue
        kept.append(st)
        live.update(st.reads())
        if st.into is not None:
            live.add(st.into)
        if st.ctx is not None:
            live.update(_ctx_values(st.ctx))
    kept.reverse()
    return kept


def _ctx_values(ctx):
    ins, out = ctx[0], ctx[1]
    vals = [v for v in (ins or []) if type(v) is int]
    outs = out if isinstance(out, tuple) else (out,)
    return vals + [v for v in outs if type(v) is int]


def _reads_all(st):
    r = st.reads()
    if st.into is not None:
        r.append(st.into)
    if st.ctx is not None:
        r += _ctx_values(st.ctx)
    return r


# ---------------------------------------------------------------- small rewrites
def fold_constants(g, steps):
    """An op step on constants alone (the seed's broadcast) is computed once."""
    out = []
    escapes = set(g.output_values())
    for st in steps:
        if (st.kind == "op" and st.op.kind in ("basic", "view") and not _draws(st.op)
                and st.ins and all(type(i) is not int or g.source[i] == "const" for i in st.ins)
                and not any(o in escapes for o in st.outs)):
            args = [g.consts[i] if type(i) is int else i[1] for i in st.ins]
            try:
                res = st.op.kernel(*args, **st.attrs)
            except Exception:  # leave it to the replay (and its error)
                out.append(st)
                continue
            res = res if isinstance(res, tuple) else (res,)
            for o, r in zip(st.outs, res):
                g.source[o] = "const"
                g.consts[o] = np.asarray(r)
                g.alias.pop(o, None)
            continue
        out.append(st)
    return out


def elide_copies(g, steps):
    """``v.copy()`` where ``v`` is a fresh value read by nothing else (the walker copies
    a gradient before it becomes a ``.grad``): the copy's result is ``v`` itself."""
    readers = {}
    for st in steps:
        for v in _reads_all(st):
            readers[v] = readers.get(v, 0) + 1
    for v in g.output_values():
        readers[v] = readers.get(v, 0) + 1
    aliased = {g.root(v) for v in g.alias}
    rename = {}
    out = []
    for st in steps:
        if rename:
            st.ins = [rename.get(i, i) if type(i) is int else i for i in st.ins]
            if st.into is not None:
                st.into = rename.get(st.into, st.into)
        if st.kind == "copy" and type(st.ins[0]) is int:
            v = st.ins[0]
            if (g.source[v] == "node" and v not in g.alias and v not in aliased
                    and readers.get(v) == 1 and st.outs[0] not in aliased):
                rename[st.outs[0]] = v
                continue
        out.append(st)
    g.rename_outputs(rename)
    return out


# ---------------------------------------------------------------- fusion
def _expr_of(st, g, env):
    """The expression of elementwise step ``st`` over ``env`` (value -> E node), or
    None when it is not fusable."""
    nodes = []
    for i in st.ins:
        if type(i) is int:
            nodes.append(env[i])
        else:
            v = i[1]
            if type(v) not in (int, float) and not isinstance(v, np.floating):
                return None
            nodes.append(E.const(float(v)))
    if st.kind == "ufunc":
        name = _UFUNCS.get(st.op.__name__)
        if name is None or st.into is not None or st.attrs:
            return None
        return E.unary(name, nodes[0]) if len(nodes) == 1 else E.binary(name, *nodes)
    op = st.op
    fz = getattr(op, "fusion", None)
    if fz is not None:
        if getattr(fz, "nout", 0) != 1 or not hasattr(fz, "graph"):
            return None
        ins, outs = fz.graph(st.attrs)
        return E.substitute(outs, dict(zip(ins, nodes)))[0]
    if st.attrs or not op.expr or len(nodes) != len(op.args):
        return None
    try:
        return E.parse(op.expr, dict(zip(op.args, nodes)))
    except (ValueError, KeyError, TypeError, SyntaxError):
        return None


def _cast_of(st, g):
    """The input value of a ``cast`` between float32, bfloat16 and float16 of one
    shape, else None."""
    if st.kind != "op" or st.op.name != "cast" or len(st.ins) != 1 or \
            type(st.ins[0]) is not int or set(st.attrs) != {"dtype"} or len(st.outs) != 1:
        return None
    v, o = st.ins[0], st.outs[0]
    if _compute_dtype(g.dtypes[v]) != _F32 or _compute_dtype(g.dtypes[o]) != _F32 or \
            g.shapes[v] != g.shapes[o] or o in g.alias:
        return None
    return v


def _group_expr(st, g, env):
    """``_expr_of`` for a fused group's kernel, which computes bfloat16 and float16
    in float32: a half-width value is held widened, a cast to float32 is the value
    itself, and a cast or op into a half-width dtype rounds its float32 result
    (``round_<dtype>``), as eager's kernels do, once per op."""
    v = _cast_of(st, g)
    if v is not None:
        node = env[v]
    else:
        node = _expr_of(st, g, env)
    dt = g.dtypes[st.outs[0]]
    if node is not None and dt in _dt.LOW_SET:
        node = E.unary(f"round_{dt.name}", node)
    return node


def _fusable(st, g):
    """(shape, dtype) of an elementwise step that may join a group, else None; a
    bfloat16/float16 step (and a cast to or from one) joins a float32 group."""
    v = _cast_of(st, g)
    if v is not None:
        return g.shapes[v], _F32
    if st.kind == "op":
        op = st.op
        if not op.elementwise or op.nout != 1 or op.kind != "basic":
            return None
    elif st.kind != "ufunc" or st.into is not None or st.op.__name__ not in _UFUNCS \
            or st.attrs:
        return None
    out = st.outs[0]
    shape, dtype = g.shapes[out], _compute_dtype(g.dtypes[out])
    if dtype not in _FLOATS or out in g.alias:
        return None
    for i in st.ins:
        if type(i) is int:
            if g.dtypes[i] != g.dtypes[out] or (g.shapes[i] != shape and
                                                math.prod(g.shapes[i]) != 1):
                return None
        elif i[1] is not None and type(i[1]) not in (int, float) and \
                not isinstance(i[1], np.floating):
            return None
    # the expression must parse (checked on placeholders)
    probe = {i: E.var(f"__probe{i}") for i in st.reads()}
    if _expr_of(st, g, probe) is None:
        return None
    return shape, dtype


def _full_reduction(st, g):
    """The input value of a ``sum``/``mean`` over every element (any keepdim) of a
    float value into its own dtype (or a ``sum_to`` a one-element shape: a
    gradient's sum over a broadcast), else None."""
    if st.kind != "op" or st.op.name not in ("sum", "mean", "sum_to") or \
            len(st.outs) != 1 or not st.ins or type(st.ins[0]) is not int or \
            len(st.ins) != 1 or set(st.attrs) - {"dim", "keepdim", "shape"}:
        return None
    v = st.ins[0]
    nd = len(g.shapes[v])
    dim = st.attrs.get("dim")
    if st.op.name == "sum_to":
        if math.prod(g.shapes[st.outs[0]]) != 1:
            return None
    elif "shape" in st.attrs:
        return None
    elif dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        try:
            if sorted(d % nd for d in dims) != list(range(nd)) or len(dims) != nd:
                return None
        except (TypeError, ZeroDivisionError):
            return None
    o = st.outs[0]
    if g.dtypes[v] not in _FLOATS or g.dtypes[o] != g.dtypes[v] or o in g.alias:
        return None
    return v


class _Retry(Exception):
    """A kernel that recomputes values or joins another failed to build: fuse again
    without either (each value stored, each group its own kernel)."""


def fuse_elementwise(g, steps):
    """Steps with fused groups in place of their members; the number of groups.

    A full ``sum``/``mean`` of a group's value, while the group is open, joins it:
    the kernel accumulates the sum as it goes (``reduce``) and the value itself is
    stored only if something else reads it. A kernel recomputes values of another
    group where that moves fewer bytes (``remat.choose``), and kernels over the same
    elements that do not depend on each other run as one pass (``remat.siblings``)."""
    try:
        return _fuse(g, steps, True)
    except _Retry:
        return _fuse(g, steps, False)


def _fuse(g, steps, remat):
    groups = {}     # gid -> {"members": [...], "key": (shape, dtype), "open": bool}
    group_of = {}   # value -> gid
    parent = {}
    reduce_of = {}  # gid -> the index of the reduction step that ends the group

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, st in enumerate(steps):
        if st.mutates():
            for gr in groups.values():
                gr["open"] = False
        red = _full_reduction(st, g)
        if red is not None and red in group_of:
            gid = find(group_of[red])
            gr = groups[gid]
            if gr["open"] and gid not in reduce_of and gr["key"][1] == g.dtypes[red]:
                reduce_of[gid] = i
                gr["open"] = False
                continue
        key = _fusable(st, g)
        if key is None:
            for v in _reads_all(st):
                if v in group_of:
                    groups[find(group_of[v])]["open"] = False
            continue
        joined = set()
        for v in st.reads():
            if v in group_of:
                gid = find(group_of[v])
                gr = groups[gid]
                if gr["open"] and gr["key"] == key:
                    joined.add(gid)
                else:
                    gr["open"] = False
        if joined:
            gid = min(joined)
            for other in joined - {gid}:
                groups[gid]["members"] += groups[other]["members"]
                groups[other]["members"] = []
                parent[other] = gid
            groups[gid]["members"].append(i)
        else:
            gid = i
            parent[gid] = gid
            groups[gid] = {"members": [i], "key": key, "open": True}
        group_of[st.outs[0]] = gid
    outside = {}   # value -> read outside its group / escapes
    escapes = set(g.output_values())
    real = {gid: sorted(gr["members"]) for gid, gr in groups.items()
            if len(gr["members"]) >= 2 or (gr["members"] and gid in reduce_of)}
    member_gid = {m: gid for gid, ms in real.items() for m in ms}
    for gid, r in reduce_of.items():
        if gid in real:
            member_gid[r] = gid
    home = {v: find(gid) for v, gid in group_of.items()}
    sources = {gid: sorted(gr["members"]) for gid, gr in groups.items() if gr["members"]}
    recompute = choose_recomputed(g, steps, sources, member_gid, home,
                                  {gid: gr["key"] for gid, gr in groups.items()}, escapes,
                                  _reads_all) if remat else {}
    if recompute:
        recompute = _not_across_writes(g, steps, recompute, sources)
    made = {steps[m].outs[0]: m for ms in sources.values() for m in ms}
    for i, st in enumerate(steps):
        mg = member_gid.get(i)
        for v in _reads_all(st):
            if v in home and mg != home[v] and made[v] not in recompute.get(mg, ()):
                outside[v] = True
    kernels, ins, outs_of = {}, {}, {}
    for gid, ms in real.items():
        steps_in = set(ms) | recompute.get(gid, set())
        outs = {steps[m].outs[0] for m in ms if steps[m].outs[0] in escapes or
                steps[m].outs[0] in outside}
        if gid not in reduce_of and not outs:
            continue  # every value it made is recomputed where it is read: it goes
        made_in = {steps[m].outs[0] for m in steps_in}
        ins[gid] = {v for m in steps_in for v in steps[m].reads()} - made_in
        kernels[gid] = (ms[-1], gid in reduce_of)
        for v in outs | ({steps[reduce_of[gid]].outs[0]} if gid in reduce_of else set()):
            outs_of[v] = gid
    at = {o: i for i, st in enumerate(steps) for o in st.outs if o is not None}

    def avail(v, joined):
        gid = outs_of.get(v)
        if gid is not None:
            return kernels[joined.get(gid, gid)][0]
        return at.get(v)
    joined = siblings(steps, kernels, {gid: groups[gid]["key"] for gid in kernels}, ins,
                      avail) if remat else {}
    fused_at = {}
    for gid in kernels:
        if gid in joined:
            continue
        part = [gid] + [b for b, a in joined.items() if a == gid]
        own = sorted(m for p in part for m in real[p])
        again = sorted({m for p in part for m in recompute.get(p, ())} - set(own))
        members = [steps[m] for m in sorted(own + again)]
        again = [steps[m] for m in again]
        reds = [reduce_of[p] for p in part if p in reduce_of]
        red = steps[reds[0]] if reds else None
        fs = _make_fused(g, members, escapes, outside, groups[gid]["key"], red, again)
        if fs is None:
            if again or len(part) > 1:
                raise _Retry
            for m in own + reds:
                member_gid.pop(m, None)
        else:
            fused_at[real[gid][-1]] = fs
    out = splice(steps, fused_at, member_gid)
    if recompute:  # a single step whose value every reader recomputes is dead now
        out = dce(g, out)
    return out, len(fused_at)


def _not_across_writes(g, steps, recompute, sources):
    """``recompute`` less each step whose input or result some in-place write changes
    between the step and the kernel that would compute it again (which would read the
    written memory, or make the value from before the write, where the step saw the
    other): that value is stored where it is made."""
    writes = [(i, g.root(st.into)) for i, st in enumerate(steps)
              if type(getattr(st, "into", None)) is int]
    if not writes:
        return recompute
    out = {}
    for gid, ms in recompute.items():
        at = max(sources[gid])
        keep = set()
        for m in ms:
            st = steps[m]
            touched = {g.root(v) for v in st.reads()} | \
                {g.root(o) for o in st.outs if o is not None}
            if not any(m < w < at and r in touched for w, r in writes):
                keep.add(m)
        out[gid] = keep
    return out


def _make_fused(g, members, escapes, outside, key, red=None, again=()):
    """One kernel of ``members``; ``again``: those of them recomputed here (another
    kernel stores their values where they are needed)."""
    shape, dtype = key
    produced = {st.outs[0] for st in members}
    ins = []
    for st in members:
        for v in st.reads():
            if v not in produced and v not in ins:
                ins.append(v)
    outs = [st.outs[0] for st in members if (st.outs[0] in escapes or st.outs[0] in outside)
            and st not in again]
    if not outs and red is None:
        return None
    in_nodes = [E.var(f"__in{k}") for k in range(len(ins))]
    env = dict(zip(ins, in_nodes))
    for st in members:
        env[st.outs[0]] = _group_expr(st, g, env)
    half = {g.dtypes[v] for v in ins + [st.outs[0] for st in members]} & _dt.LOW_SET
    if len(half) > 1:
        return None
    half = half.pop().name if half else None
    for k, v in enumerate(ins):  # a broadcast constant (the seed): read as one value
        if g.source[v] == "const" and g.consts[v].size > 1 and 0 in g.consts[v].strides:
            one = np.ascontiguousarray(g.consts[v].reshape(-1)[:1])
            ins[k] = g.add_value((1,), one.dtype, "const")
            g.consts[ins[k]] = one
    # read once: a one-element input, or a broadcast of one (a reduction's gradient)
    pattern = "".join(("h" if g.dtypes[v] in _dt.LOW_SET else "f") if g.shapes[v] == shape and not (
        math.prod(shape) > 1 and math.prod(g.shapes[g.root(v)]) == 1) else "s" for v in ins)
    exprs = [env[v] for v in outs]
    if red is not None:  # the reduced value first: the kernel returns its sum
        exprs.insert(0, env[red.ins[0]])
    first = 1 if red is not None else 0
    wide = tuple(j + first for j, v in enumerate(outs) if g.dtypes[v] not in _dt.LOW_SET) \
        if half else ()
    try:
        looked, tabs = (), ()
        whole = _whole_input(g, ins, in_nodes, exprs, pattern, shape, half, red, wide)
        if half in _fusion_config.tables and red is None and whole is None:  # (fusion/tables.py)
            looked = _tables.plan(in_nodes, exprs, pattern, half)
            tabs = tuple(_tables.table(nd, in_nodes[k], half, _fusion_config.approximate)
                         for nd, k in looked)
        src = codegen_numba.kernel_source(in_nodes, exprs, dtype, pattern,
                                          _fusion_config.approximate, reduce=red is not None,
                                          store=half, wide=wide, tables=looked)
        fn = _cpu.compile_source(("compile", src), src, "kernel", parallel=False,
                                 fastmath=_cpu.FASTMATH, error_model="numpy")
    except Exception:  # Numba missing or failing: the members run as they are
        return None
    if tabs:  # the tables follow the outputs
        fn = functools.partial(_with_tables, fn, tabs)
    chunk = {}
    if whole is not None:  # one lookup an element instead of the kernel
        try:
            fn = _whole_lookup(g, ins, fn, src, pattern, dtype, whole, half, len(outs))
            chunk = {"min_chunk": _tables.WHOLE_CHUNK}  # (a thread's least share)
        except Exception:  # Numba failing: the kernel computes
            pass
    st = Step("fused", None, ins, chunk)
    st.outs = ([red.outs[0]] if red is not None else []) + outs
    st.members = members + ([red] if red is not None else [])
    st.fused = (fn, pattern, shape, dtype)
    if red is not None:
        st.attrs["reduce"] = (red.op.name, g.shapes[red.outs[0]])
    return st


def _with_tables(kernel, tabs, n, *args):
    return kernel(n, *args, *tabs)


def _whole_input(g, ins, in_nodes, exprs, pattern, shape, half, red, wide):
    """The index of the one input of a half-width group whose kernel a table of its
    outputs' patterns replaces (``fusion.tables.whole_input``; its other inputs
    constants of the program), None where none does: no reduction, every output of
    the half-width dtype, at least ``WHOLE_MIN_NUMEL`` elements."""
    if half not in _fusion_config.tables or red is not None or wide or \
            math.prod(shape) < _tables.WHOLE_MIN_NUMEL:
        return None
    k = _tables.whole_input(in_nodes, exprs, pattern, half)
    if k is None or any(g.source[v] != "const" for j, v in enumerate(ins) if j != k):
        return None
    return k


def _whole_lookup(g, ins, kernel, src, pattern, dtype, k, half, nout):
    """``run_whole`` over the table of ``kernel``'s outputs at every pattern of its
    input ``k`` (its other inputs, the program's constants, as the runner reads
    them), in the kernel's place."""
    consts = [None if j == k else _first(np.asarray(g.consts[v], dtype=dtype))
              for j, v in enumerate(ins)]

    def build():
        res = np.empty((nout, 1 << 16), np.uint16)
        args = [_tables.patterns().copy() if j == k else c for j, c in enumerate(consts)]
        kernel(1 << 16, *args, *res)
        return res
    key = (src, half, tuple(c.tobytes() for j, c in enumerate(consts) if j != k))
    return functools.partial(_tables.run_whole, _tables.whole(key, build), k, len(pattern))


# ---------------------------------------------------------------- effects order
def _state_change(g, st):
    """A step that changes state outside the program: an optimizer step, zeroing a
    .grad, a draw from the global generator (an op that ``draws``), a write into
    a buffer the program did not make (a parameter, a module's buffer, a .grad
    accumulated into, an argument)."""
    if st.kind in ("update", "zerograd") or (st.kind == "op" and _draws(st.op)):
        return True  # (a random step advances the global generator)
    return st.into is not None and g.source[g.root(st.into)] in ("ext", "arg")


def order_effects(g, steps):
    """State changes as late as their data allow, value guards right after their
    value, .grad clearing and setting at the end.

    A state change (see ``_state_change``) is deferred past every later step that
    neither reads nor writes the memory it writes (nor writes what it reads): a
    module's running statistics or an in-place write into a parameter then happens
    after the checks that follow it in the program. A value guard goes right after
    the step that made (or last wrote) its value; one that still follows a state
    change is refused (a failed check could not be undone), and so is an op with a
    data-dependent shape after a state change."""
    root = g.root
    groups = _memory_groups(g)
    # (a number the function only returns has a guard with no condition: dropped)
    steps = [st for st in steps if not (st.kind == "guard" and st.attrs.get("preds")
                                        and all(p[0] == "any" for p in st.attrs["preds"]))]

    def mem(v):
        r = root(v)
        return groups.get(r, r)

    # with nothing to check mid-replay (no value guards, no data-dependent shapes), a
    # .grad is cleared where the program cleared it: the old gradient's buffer is then
    # free for this replay's (the ring reuses it) rather than held to the end
    early = not any(st.kind == "guard" or (st.kind == "op" and st.op.kind == "dynamic")
                    for st in steps)
    body = [st for st in steps if st.kind not in ("guard", "setgrad") and
            (early or st.kind != "cleargrad")]
    clears = [] if early else [st for st in steps if st.kind == "cleargrad"]
    sets = [st for st in steps if st.kind == "setgrad"]
    anchor = {}   # guard -> the step after which its value is as it was read
    made = {}
    for st in steps:
        if st.kind == "guard":
            anchor[st] = made.get(mem(st.ins[0]))
            continue
        if st.kind in ("cleargrad", "setgrad"):
            continue
        for o in st.outs:
            if o is not None:
                made[mem(o)] = st
        if st.into is not None:
            made[mem(st.into)] = st
    out, deferred = [], []
    d_reads, d_writes, d_outs = set(), set(), set()
    for st in body:
        reads = {mem(v) for v in _reads_all(st) if type(v) is int and v != st.into}
        writes = {mem(st.into)} if st.into is not None else set()
        outs = {mem(o) for o in st.outs if o is not None}
        if _state_change(g, st) or reads & (d_writes | d_outs) or \
                writes & (d_reads | d_writes | d_outs):
            # a state change, or a step that depends on one: they run after the rest
            if st.kind == "op" and st.op.kind == "dynamic":
                raise Unsupported(f"{st.op.name}'s output shape depends on the values and "
                                  f"is computed after the program changed state: a "
                                  f"different shape on replay could not be undone")
            deferred.append(st)
            d_reads |= reads
            d_writes |= writes
            d_outs |= outs
            continue
        out.append(st)
    out.extend(deferred)
    # the guards, each right after its anchor
    after = {}
    for gd, a in anchor.items():
        after.setdefault(id(a) if a is not None else None, []).append(gd)
    final = list(after.get(None, []))
    changed = False
    for st in out:
        final.append(st)
        if _state_change(g, st):
            changed = True
        for gd in after.get(id(st), []):
            if changed:
                raise Unsupported("a tensor's value read by Python (item, bool, float) is "
                                  "computed after the program changed state (an in-place "
                                  "write or an optimizer step): a failed check could not "
                                  "be undone")
            final.append(gd)
    return final + clears + sets


def _memory_groups(g):
    """External buffers that share memory (a parameter and a view of it made outside
    the function): one key for all of them."""
    ext = [v for v in g.externals if g.root(v) == v]
    groups = {}
    for i, a in enumerate(ext):
        for b in ext[i + 1:]:
            if np.may_share_memory(g.externals[a], g.externals[b]):
                ga, gb = groups.get(a, a), groups.get(b, b)
                for k, val in list(groups.items()):
                    if val == gb:
                        groups[k] = ga
                groups[b] = ga
                groups.setdefault(a, ga)
    return groups


def direct_writes(g, steps):
    """``t[...] = v`` (an in-place op's result written into its tensor, e.g. ``p -= lr
    * p.grad``) where ``v`` comes from a fused kernel and is read by nothing else: the
    kernel writes into ``t`` itself (it reads ``t`` only at the index it writes) and
    the copy goes. Nothing between the kernel and the write may touch ``t``."""
    readers = {}
    for st in steps:
        for v in _reads_all(st):
            readers[v] = readers.get(v, 0) + 1
    for v in g.output_values():
        readers[v] = readers.get(v, 0) + 9
    for st in steps:
        if st.kind == "setgrad":
            for v in st.reads():
                readers[v] = readers.get(v, 0) + 9
    aliased = {g.root(v) for v in g.alias}
    where = {}
    for k, st in enumerate(steps):
        if st.kind == "fused":
            for o in st.outs:
                where[o] = k
    drop = set()
    for j, w in enumerate(steps):
        if w.kind != "write" or type(w.ins[0]) is not int:
            continue
        s, t = w.ins[0], w.into
        i = where.get(s)
        if i is None or readers.get(s) != 1 or s in aliased or t in g.alias \
                or g.source[t] != "ext" or t in g.ext_grad:
            continue
        f = steps[i]
        arr = g.externals[t]
        if f.attrs.get("reduce") and f.outs[0] == s or arr.shape != g.shapes[s] or \
                arr.dtype != g.dtypes[s] or not arr.flags.c_contiguous or \
                not arr.flags.writeable:
            continue

        def touches(v):
            r = g.root(v)
            if r == t:
                return True
            return g.source[r] == "ext" and np.may_share_memory(g.externals[r], arr)
        fn, pattern, shape, dtype = f.fused
        if any(touches(v) and (v != t or p != "f") for v, p in zip(f.ins, pattern)):
            continue
        if any(touches(v) for st in steps[i + 1:j] for v in _reads_all(st)):
            continue
        f.attrs.setdefault("direct", {})[s] = t
        drop.add(j)
    return [st for k, st in enumerate(steps) if k not in drop]


# ---------------------------------------------------------------- memory plan
class Plan:
    """Lifetimes, the arena offsets and the peak."""

    def __init__(self, g, steps):
        n = len(steps)
        last = {}
        first = {}
        escapes = set(g.output_values())
        for k, st in enumerate(steps):
            for v in _reads_all(st):
                last[v] = k
            if st.kind == "setgrad":
                escapes.update(st.reads())
            for o in st.outs:
                if o is not None:
                    first[o] = k
                    last.setdefault(o, k)
        # a view keeps its base alive; a value that escapes keeps its memory alive
        for v in list(first):
            r = g.root(v)
            if r != v and r in first:
                last[r] = max(last[r], last.get(v, first[v]))
                if v in escapes:
                    escapes.add(r)
        self.first, self.last, self.escapes = first, last, escapes
        owns = [v for v in first if g.root(v) == v]
        live = [0] * (n + 1)
        for v in owns:
            end = n if v in escapes else last[v]
            b = g.nbytes(v)
            for k in range(first[v], end + 1):
                live[k] += b
        for k, st in enumerate(steps):
            live[k] += st.workspace
        self.peak_bytes = max(live) if live else 0
        # arena: outputs of fused kernels and of kernels that write into a given
        # buffer (op.takes_out, NumPy ufuncs, casts and copies), when they do not
        # escape; workspaces. A value that escapes (an output, a .grad) gets a ring
        # of buffers instead (``Ring``): the user may keep it past the next replay.
        bufs = []
        self.rings = {}
        self.allocating = []  # steps whose results a replay allocates (and why)
        direct = set()
        for st in steps:
            if st.kind == "fused":
                direct.update(st.attrs.get("direct", {}))
        for k, st in enumerate(steps):
            if st.kind == "fused" or _writes_out(st, g):
                for o in st.outs:
                    if o is None or o in direct:
                        continue
                    if o not in escapes:
                        bufs.append((("v", o), g.nbytes(o), k, last[o]))
                    else:  # (a view of it that escapes holds the buffer: its count)
                        self.rings[o] = Ring(g.shapes[o], g.dtypes[o])
            elif st.kind in ("op", "ufunc", "vjp", "astype", "copy") and any(
                    o is not None and o not in g.alias for o in st.outs):
                why = ("its kernel has no out=" if st.kind == "op" and not st.op.takes_out
                       else "several outputs" if len([o for o in st.outs if o is not None]) > 1
                       else "an adjoint replayed whole" if st.kind == "vjp"
                       else "a data-dependent shape" if st.kind == "op" and
                       st.op.kind == "dynamic" else "an output that is a view")
                self.allocating.append((st.name, why))
            if st.workspace:
                bufs.append((("w", k), st.workspace, k, k))
        self.offsets, self.arena_bytes = _place(bufs)


def _into_arena(st, g):
    """An op step whose kernel writes its one output into a buffer it is handed."""
    op = st.op
    return (op.takes_out and len(st.outs) == op.nout and op.kind in ("basic", "workspace")
            and all(o is not None and o not in g.alias for o in st.outs)
            and "out" not in st.attrs)


def _writes_out(st, g):
    """A step (not fused) that writes its one result into a buffer it is handed."""
    if st.kind == "op":
        return _into_arena(st, g)
    if st.kind == "ufunc":
        return (st.into is None and "method" not in st.attrs and len(st.outs) == 1
                and st.outs[0] not in g.alias and "dtype" not in st.attrs)
    if st.kind in ("astype", "copy"):
        return len(st.outs) == 1 and st.outs[0] not in g.alias
    return False


class Ring:
    """Buffers for a value that escapes the program (an output, a ``.grad``): a replay
    writes into one nobody else holds (its reference count says so), so a result the
    caller kept from an earlier replay is never overwritten (nor one a view the caller
    kept was made of: a NumPy view holds its base); in a steady loop two buffers
    alternate and nothing is allocated."""
    __slots__ = ("shape", "dtype", "bufs")
    KEEP = 4

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.bufs = shape, dtype, []

    def get(self):
        bufs = self.bufs
        for i in range(len(bufs)):
            if _refcount(bufs[i]) == 2:  # (the list's reference and the argument's)
                return bufs[i]
        b = np.empty(self.shape, self.dtype)
        if len(bufs) < self.KEEP:
            bufs.append(b)
        return b


_refcount = sys.getrefcount


def _place(bufs):
    """First-fit offsets (64-byte aligned) for (key, bytes, start, end) intervals."""
    placed = []
    offsets = {}
    top = 0
    for key, nb, s, e in sorted(bufs, key=lambda b: -b[1]):
        size = -(-max(nb, 1) // 64) * 64
        busy = sorted((o, o + sz) for (o, sz, s2, e2) in placed if not (e2 < s or e < s2))
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        placed.append((off, size, s, e))
        offsets[key] = off
        top = max(top, off + size)
    return offsets, top


# ---------------------------------------------------------------- the program
class Program:
    """A captured graph made runnable (see the module docstring)."""

    def __init__(self, g, fuse=True):
        self.graph = g
        steps = dce(g, g.steps)
        steps, _, self.projections_folded = fold_embedding_projections(g, steps, _reads_all)
        steps = fold_constants(g, steps)
        steps = elide_copies(g, steps)
        self.n_captured = len(g.steps)
        self.fused_groups = 0
        self.epilogues = 0
        self.joined = 0
        self.row_runs = 0
        self.hoisted = None
        if fuse:
            steps, self.joined = join_slice_grads(g, steps, _reads_all)
            steps, self.hoisted = hoist_invariants(g, steps, _reads_all)
            steps, self.row_runs = fuse_rows(g, steps, _reads_all, _expr_of)
            steps, self.fused_groups = fuse_elementwise(g, steps)
            steps, self.epilogues = fuse_epilogues(g, steps, _reads_all)
        steps = order_effects(g, steps)
        steps = direct_writes(g, steps)
        self.steps = steps
        self.draws = sum(1 for st in steps if st.kind == "op" and _draws(st.op))
        self.plan = Plan(g, steps)
        self.arena = np.empty(max(self.plan.arena_bytes, 1), np.uint8)
        self.kernels = sum(1 for st in steps if st.kind not in
                           ("write", "cleargrad", "zerograd", "setgrad", "guard"))
        self.fn, self.source = _codegen(self, g, steps)

    @property
    def peak_bytes(self):
        return self.plan.peak_bytes

    # the count of leaf hooks registered in the process when the program was captured
    # (tensor.LEAF_HOOKS; -1: unknown): while it holds, no leaf has a hook
    leaf_hooks = -1

    def entry_ok(self, leaf_of):
        hooked = LEAF_HOOKS[0] != self.leaf_hooks
        for gd in self.graph.entry_guards:
            if gd[0] == "no_hooks" and not hooked:
                continue
            leaf = leaf_of(gd[1])
            if gd[0] == "grad_none":
                if leaf.grad is not None:
                    return False
            elif gd[0] == "buffer_is":
                if leaf._data is not gd[2]:
                    return False
            elif gd[0] == "no_hooks":
                if leaf._hooks or leaf._post_hooks:
                    return False
            else:
                gr = leaf.grad
                if gr is None or gr._node is not None or type(gr._data) is not np.ndarray \
                        or gr._data.shape != gd[2] or gr._data.dtype != gd[3] \
                        or not gr._data.flags.writeable:
                    return False
        return True

    def guard_words(self, failed):
        """The words of the guard step whose check raised ``failed`` (GuardFailed)."""
        st = self.steps[failed.args[0]]
        if st.kind == "guard":
            return guard_words(st)
        return f"the data-dependent shape of {st.name}'s result"

    def value_guard_words(self):
        return [guard_words(st) for st in self.steps if st.kind == "guard"] + \
            [f"the shape of {st.name}'s result (data-dependent)" for st in self.steps
             if st.kind == "op" and getattr(st.op, "kind", None) == "dynamic"]

    def run(self, arrays, args, kwargs):
        return self.fn(arrays, args, kwargs)

    def arena_view(self, key, shape, dtype):
        off = self.plan.offsets[key]
        n = math.prod(shape) * np.dtype(dtype).itemsize
        return self.arena[off:off + n].view(dtype).reshape(shape)


def _same(a, b):
    a = np.asarray(a)
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=b.dtype.kind in "fc"))


_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}


def _outcomes(a, preds):
    """Each recorded comparison of the number in ``a`` has its recorded outcome."""
    x = a.item()
    for op, other, outcome in preds:
        if op == "any":  # (a number the function only returns: no condition)
            continue
        r = bool(x) if op == "bool" else _COMPARE[op](x, other)
        if r is not outcome:
            return False
    return True


def guard_words(st):
    """A value guard step in words."""
    preds = st.attrs.get("preds")
    what = st.attrs.get("what", "a value Python read")
    if preds:
        return " and ".join(f"bool({what}) is {o}" if op == "bool" else
                            f"{what} returned, read again each call" if op == "any" else
                            f"({what} {op} {other!r}) is {o}" for op, other, o in preds)
    e = st.expected
    v = e.item() if e.size == 1 else f"{e.dtype.name}{list(e.shape)} as read"
    return f"{what} == {v!r}" if e.size == 1 else f"{what} == the {v}"


def _asarray(o):
    return o if type(o) is np.ndarray else np.asarray(o)


def _last_axis_sum(x, ones, keep, mean, out=None):
    """``x``'s sums (means) over its last axis, a contiguous float array's as one
    matrix-vector product (NumPy's reduction over short contiguous rows runs ~4x
    slower than the GEMV; the sums are rounded in another order)."""
    n = x.shape[-1]
    if type(x) is not np.ndarray or not x.flags.c_contiguous or (
            out is not None and (type(out) is not np.ndarray or not out.flags.c_contiguous
                                 or np.may_share_memory(out, x))):
        fn = np.mean if mean else np.sum
        if out is None:
            return np.asarray(fn(x, axis=-1, keepdims=keep))
        fn(x, axis=-1, keepdims=keep, out=out)
        return out
    shape = x.shape[:-1] + ((1,) if keep else ())
    if out is None:
        out = np.empty(shape, x.dtype)
    flat = out.reshape(-1)
    np.matmul(x.reshape(-1, n), ones, out=flat)
    if mean:
        np.divide(flat, n, out=flat)
    return out


def _direct(st, g):
    """(NumPy's function, its arguments after the inputs) for a registry op step
    whose kernel is that one call on this program's specs (a transpose, a reshape
    to the planned shape, a 2-D float matrix product, a float sum or mean over the
    last axis, ``_last_axis_sum``): the replay skips
    the kernel's wrapper (its argument checks, ~1-2 us a step). None otherwise."""
    name = st.op.name
    ins = st.ins
    if any(type(i) is not int for i in ins) or len(st.outs) != 1:
        return None
    shapes = [g.shapes[i] for i in ins]
    if name == "permute" and set(st.attrs) == {"dims"}:
        nd = len(shapes[0])
        try:
            perm = tuple(int(d) % nd for d in st.attrs["dims"]) if nd else ()
        except (TypeError, ValueError):
            return None
        if sorted(perm) != list(range(nd)):
            return None
        return np.transpose, (perm,)
    if name == "reshape" and set(st.attrs) == {"shape"}:
        return np.reshape, (tuple(g.shapes[st.outs[0]]),)
    if name in ("sum", "mean", "sum_to") and len(ins) == 1 and g.dtypes[ins[0]] in _FLOATS:
        shape = shapes[0]
        nd = len(shape)
        if nd < 2 or shape[-1] < 2 or g.dtypes[st.outs[0]] != g.dtypes[ins[0]]:
            return None
        if name == "sum_to":
            if set(st.attrs) != {"shape"} or \
                    tuple(st.attrs["shape"]) != tuple(shape[:-1]) + (1,):
                return None
            keep = True
        else:
            if set(st.attrs) - {"dim", "keepdim"}:
                return None
            dim = st.attrs.get("dim")
            dims = (dim,) if type(dim) is int else dim
            try:
                if dims is None or tuple(int(d) % nd for d in dims) != (nd - 1,):
                    return None
            except (TypeError, ValueError):
                return None
            keep = bool(st.attrs.get("keepdim", False))
        ones = np.ones(shape[-1], g.dtypes[ins[0]])
        return _last_axis_sum, (ones, keep, name == "mean")
    if name == "matmul" and not st.attrs and len(ins) == 2:
        a, b = shapes
        dts = {g.dtypes[i] for i in ins}
        if len(a) == 2 and len(b) == 2 and a[1] != 1 and len(dts) == 1 \
                and dts <= set(_FLOATS):
            return _gemm, ()
    return None


def _codegen(prog, g, steps):
    """The replay function ``replay(args) -> tuple of output arrays``."""
    glb = {"_same": _same, "_outcomes": _outcomes, "_GF": GuardFailed, "_aa": _asarray,
           "_np": np}
    lines = ["def replay(A, AR, KW):"]
    plan = prog.plan

    def name(v):
        src = g.source[v]
        if src == "ext" and v in g.ext_grad:
            return f"v{v}"
        if src == "ext":
            glb.setdefault(f"E{v}", g.externals[v])
            return f"E{v}"
        if src == "const":
            glb.setdefault(f"C{v}", g.consts[v])
            return f"C{v}"
        if src == "hoist":
            return f"H{v}"
        return f"v{v}"

    def arg(i, k, j):
        if type(i) is int:
            return name(i)
        glb[f"L{k}_{j}"] = i[1]
        return f"L{k}_{j}"

    def outbuf(k, o):
        """The buffer step ``k`` writes value ``o`` into (an expression), or None."""
        if ("v", o) in plan.offsets:
            glb[f"B{k}_{o}"] = prog.arena_view(("v", o), g.shapes[o], g.dtypes[o])
            return f"B{k}_{o}"
        if o in plan.rings:
            glb[f"O{k}_{o}"] = plan.rings[o]
            return f"O{k}_{o}.get()"
        return None

    h = prog.hoisted
    if h is not None:  # values derived from small external arrays: still current?
        for v, a in h.values.items():
            glb[f"H{v}"] = a
        glb["_HS"], glb["_HC"] = h.stale, (lambda: h.compute(glb))
        lines.append("    if _HS(): _HC()")
    for v, (pos, kw) in g.args.items():
        lines.append(f"    v{v} = A[{pos!r}]")
    for v, leaf in g.ext_grad.items():  # a gradient accumulated into, read live
        if isinstance(leaf, tuple):
            pos = leaf[1]
            lines.append(f"    v{v} = {'AR' if type(pos) is int else 'KW'}[{pos!r}].grad._data")
        else:
            glb[f"G{v}"] = leaf
            lines.append(f"    v{v} = G{v}.grad._data")
    dels = {}
    for v, k in plan.last.items():
        if g.source[v] in ("node", "arg") and v not in plan.escapes:
            dels.setdefault(k, []).append(v)
    for k, st in enumerate(steps):
        ins = ", ".join(arg(i, k, j) for j, i in enumerate(st.ins))
        outs = ", ".join(name(o) if o is not None else "_" for o in st.outs)
        if st.kind == "op":
            glb[f"K{k}"] = st.op.kernel
            extra = ""
            direct = _direct(st, g)
            if direct is not None:  # NumPy called directly, its arguments resolved now
                glb[f"K{k}"], pos = direct
                for j, a in enumerate(pos):
                    glb[f"P{k}_{j}"] = a
                    extra += f", P{k}_{j}"
            elif st.attrs:
                glb[f"T{k}"] = st.attrs
                extra += f", **T{k}"
            if st.op.kind == "workspace":
                off = plan.offsets.get(("w", k), 0)
                glb[f"W{k}"] = prog.arena[off:off + st.workspace]
                extra += f", workspace=W{k}"
            elif st.op.kind == "dynamic":
                glb["_alloc"] = _alloc
                extra += ", alloc=_alloc"
            if _into_arena(st, g):
                bufs = [outbuf(k, o) for o in st.outs]
                if len(bufs) == 1 and bufs[0] is not None:
                    extra += f", out={bufs[0]}"
                elif len(bufs) > 1:  # (a result with no planned buffer: one made here)
                    glb["_empty"] = np.empty
                    extra += ", out=(" + "".join(
                        (b if b is not None else f"_empty({g.shapes[o]!r}, "
                         f"_np.{g.dtypes[o].name})") + ", " for b, o in zip(bufs, st.outs)) + ")"
            call = f"K{k}({ins}{extra})" if ins else f"K{k}({extra[2:]})"  # (a factory)
            if st.op.kind == "view" and len(st.outs) == 1 and st.outs[0] not in g.alias \
                    and st.ins and type(st.ins[0]) is int:
                # a view op that copied when captured (a reshape of a value whose layout
                # was not row-major): a fresh array here too, where this replay's buffer
                # of its input (row-major) lets it come out a view, which a later write
                # into the input would reach
                glb["_fresh"] = _fresh
                call = f"_fresh({call}, {name(st.ins[0])})"
            if len(st.outs) == 1:
                lines.append(f"    {outs} = _aa({call})")
            else:
                lines.append(f"    {outs} = {call}")
            if st.op.kind == "dynamic":  # a data-dependent shape: the program's shapes hold?
                for o in st.outs:
                    lines.append(f"    if {name(o)}.shape != {g.shapes[o]!r}: raise _GF({k})")
        elif st.kind == "ufunc":
            kw = dict(st.attrs)
            glb[f"U{k}"] = getattr(st.op, kw.pop("method", "__call__"))
            extra = ""
            if kw:
                glb[f"T{k}"] = kw
                extra = f", **T{k}"
            if st.into is not None:
                lines.append(f"    U{k}({ins}, out={name(st.into)}{extra})")
                lines.append(f"    {outs} = {name(st.into)}")
            else:
                buf = outbuf(k, st.outs[0]) if _writes_out(st, g) else None
                extra = f", out={buf}{extra}" if buf is not None else extra
                lines.append(f"    {outs} = _aa(U{k}({ins}{extra}))")
        elif st.kind in ("astype", "copy"):
            buf = outbuf(k, st.outs[0]) if _writes_out(st, g) else None
            if buf is not None:
                lines.append(f"    {outs} = {buf}")
                lines.append(f"    _np.copyto({outs}, {ins}, casting='unsafe')")
            elif st.kind == "astype":
                glb[f"D{k}"] = st.attrs["dtype"]
                lines.append(f"    {outs} = {ins}.astype(D{k})")
            else:
                lines.append(f"    {outs} = {ins}.copy()")
        elif st.kind == "vjp":
            glb[f"J{k}"] = _opaque_vjp(g, st, name)
            lines.append(f"    {outs}, = J{k}(locals(), {ins})" if len(st.outs) == 1 else
                         f"    {outs} = J{k}(locals(), {ins})")
        elif st.kind == "fused":
            glb[f"F{k}"] = _fused_runner(prog, st, plan)
            lines.append(f"    {outs}, = F{k}({ins})" if len(st.outs) == 1 else
                         f"    {outs} = F{k}({ins})")
        elif st.kind == "write":
            lines.append(f"    {name(st.into)}[...] = {ins}")
        elif st.kind == "update":
            glb[f"P{k}"] = _updater(*st.target)
            lines.append(f"    P{k}({ins})")
        elif st.kind == "cleargrad":
            glb[f"Q{k}"] = st.target
            lines.append(f"    Q{k}.grad = None")
        elif st.kind == "zerograd":
            glb[f"Z{k}"] = _zeroer(st.target)
            lines.append(f"    Z{k}()")
        elif st.kind == "setgrad":
            glb[f"S{k}"] = _setter(g.source[st.ins[0]] != "node")
            if isinstance(st.target, tuple):
                pos = st.target[1]
                leaf = f"AR[{pos}]" if type(pos) is int else f"KW[{pos!r}]"
            else:
                glb[f"R{k}"] = st.target
                leaf = f"R{k}"
            lines.append(f"    S{k}({leaf}, {ins})")
        elif st.kind == "guard":
            preds = st.attrs.get("preds")
            if preds:  # only compared: the comparisons' outcomes must hold
                glb[f"X{k}"] = preds
                lines.append(f"    if not _outcomes({ins}, X{k}): raise _GF({k})")
            else:
                glb[f"X{k}"] = st.expected
                lines.append(f"    if not _same({ins}, X{k}): raise _GF({k})")
        else:
            raise Unsupported(f"no replay for a {st.kind} step")
        for v in dels.get(k, ()):
            lines.append(f"    del v{v}")
    outs = g.output_values()
    lines.append("    return (" + "".join(name(v) + ", " for v in outs) + ")")
    src = "\n".join(lines) + "\n"
    exec(compile(src, "<tg.compile replay>", "exec"), glb)
    return glb["replay"], src


def _fresh(res, x):
    """``res`` (a view op's result from input ``x``), copied if it shares ``x``'s
    memory."""
    return res.copy() if _devices.owner(res) is _devices.owner(x) else res


def _alloc(shape, dtype):
    return np.empty(shape, dtype=dtype)


def _updater(opt, group, p):
    upd = opt._update

    def run(grad):
        upd(p, grad, group)
        mark_written(p)
    return run


def _zeroer(p):
    def run():
        if p.grad is not None:
            p.grad._data[...] = 0
            mark_written(p.grad)
    return run


def _setter(copy):
    def run(leaf, arr):
        if copy or not arr.flags.owndata or not arr.flags.writeable:
            arr = arr.copy()
        leaf.grad = wrap(arr)
    return run


def _opaque_vjp(g, st, name):
    """An adjoint replayed whole: its context rebuilt from the replay's values."""
    from ..dispatch import raw_arrays
    from ..grad_mode import no_grad
    from ..walker import Ctx
    ins, out, shapes, dtypes, needs, m = st.ctx
    op, attrs = st.op, st.attrs

    def pick(env, v):
        if type(v) is not int:
            return v[1] if isinstance(v, tuple) and len(v) == 2 and v[0] == "lit" else v
        src = g.source[v]
        if src == "ext":
            return g.externals[v]
        if src == "const":
            return g.consts[v]
        return env[f"v{v}"]

    def run(env, *gs):
        ctx = Ctx()
        ctx.m, ctx.attrs, ctx.shapes, ctx.dtypes = m, attrs, shapes, dtypes
        ctx.needs_input_grad, ctx.node = needs, None
        ctx.inputs = None if ins is None else [None if v is None else pick(env, v)
                                               for v in ins]
        ctx.out = None if out is None else (tuple(pick(env, v) for v in out)
                                            if isinstance(out, tuple) else pick(env, out))
        with no_grad(), raw_arrays():
            res = op.vjp(ctx, gs if op.nout != 1 else gs[0])
        return [None if r is None else _asarray(r) for r in res]
    return run


def _fused_runner(prog, st, plan):
    fn, pattern, shape, dtype = st.fused
    n = math.prod(shape)
    bufs, rings = [], []
    direct = st.attrs.get("direct", {})
    dtypes = [prog.graph.dtypes[o] for o in st.outs]
    for o in st.outs:
        if ("v", o) in plan.offsets:
            bufs.append(prog.arena_view(("v", o), prog.graph.shapes[o], prog.graph.dtypes[o]))
        elif o in direct:  # written straight into the tensor an in-place op updates
            bufs.append(prog.graph.externals[direct[o]])
        else:
            bufs.append(None)
        rings.append(plan.rings.get(o))
    first = [True]

    red = st.attrs.get("reduce")
    if red is not None:
        return _reduce_runner(fn, pattern, n, dtype, red, bufs, rings, dtypes)
    min_chunk = st.attrs.get("min_chunk", _cpu.CHUNK_MIN)

    def run(*ins):
        flat = []
        for a, p in zip(ins, pattern):
            if p == "h":  # a bfloat16/float16 input: its 16-bit elements
                flat.append(np.ascontiguousarray(a).reshape(-1).view(np.uint16))
                continue
            a = np.asarray(a, dtype=dtype)
            flat.append(np.ascontiguousarray(a).reshape(-1) if p == "f" else _first(a))
        outs = [b if b is not None else r.get() if r is not None else np.empty(shape, dt)
                for b, r, dt in zip(bufs, rings, dtypes)]
        args = flat + [o.reshape(-1).view(np.uint16) if o.dtype in _dt.LOW_SET else o.reshape(-1)
                       for o in outs]
        if first[0]:
            first[0] = False
            fn(n, *args)
        else:
            _cpu.run_chunked(fn, n, *args, min_chunk=min_chunk)
        return outs
    return run


def _reduce_runner(fn, pattern, n, dtype, red, bufs, rings, dtypes):
    """A fused chain that ends in a full sum/mean: the kernel returns the sum (float64
    partials per chunk, added in chunk order) and writes the chain's other outputs."""
    how, rshape = red
    shape_of = [None] + [b.shape if b is not None else r.shape if r is not None else None
                         for b, r in zip(bufs[1:], rings[1:])]

    def run(*ins):
        flat = []
        for a, p in zip(ins, pattern):
            if p == "h":  # a bfloat16/float16 input: its 16-bit elements
                flat.append(np.ascontiguousarray(a).reshape(-1).view(np.uint16))
                continue
            a = np.asarray(a, dtype=dtype)
            flat.append(np.ascontiguousarray(a).reshape(-1) if p == "f" else _first(a))
        outs = []
        for j in range(1, len(bufs)):
            b, r = bufs[j], rings[j]
            outs.append(b if b is not None else r.get() if r is not None else
                        np.empty(shape_of[j] or (n,), dtypes[j]))
        total = math.fsum(_cpu.run_chunked(
            fn, n, *flat, *[o.reshape(-1).view(np.uint16) if o.dtype in _dt.LOW_SET else
                            o.reshape(-1) for o in outs], collect=True))
        if how == "mean":
            total = total / n if n else math.nan
        b, r = bufs[0], rings[0]
        res = b if b is not None else r.get() if r is not None else np.empty(rshape, dtype)
        res[...] = total
        return [res] + outs
    return run


def _first(a):
    """A one-element view of ``a``'s first element (no copy, even of a broadcast)."""
    return a[(slice(0, 1),) * a.ndim].reshape(1)
