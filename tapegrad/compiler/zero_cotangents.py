"""The backward program of a compiled module for outputs whose gradient is None.

A compiled module's backward program (``partition``) takes a cotangent for each output
that requires grad. A backward that reaches only some of them (an LSTM's ``(h_n,
c_n)`` unused by the loss) gives None for the others: the general program would read
zeros for them and carry the zeros through its steps (the final state's adjoint
scatters them into a ``(T, B, H)`` array of zeros, added to the output's gradient; the
recurrence's adjoint reads the cells' zero gradient at every step), where eager never
computes them. ``specialize`` makes, once per pattern of None cotangents, the backward
program with those cotangents known zero:

- a step whose tensor inputs are all zero, of an op that maps zeros to zeros (views,
  reshapes, a slice's adjoint, sums, negation, casts), is left out: its result is
  zero too;
- ``a + z`` with ``z`` zero (same shape and dtype as the result) is ``a`` itself;
- an adjoint replayed whole (a ``vjp`` step), or a step of an op that reads None
  as zeros (``lstm_layer_rows_backward``), gets None for a zero cotangent, as the
  eager walk gives it (the recurrence's adjoint then skips the cells' gradient);
- any other step reading a zero value reads a constant array of zeros.

Where a zero value would be a gradient the program returns or a step would write into
one, the general program serves (None is returned).
"""
import copy

import numpy as np

from .graph import Graph

__all__ = ["snapshot", "specialize", "backward_for"]

ENABLED = True

# ops whose result is zero when every tensor input is zero
_ZERO_KEEPING = frozenset((
    "reshape", "view", "permute", "transpose", "movedim", "squeeze", "unsqueeze",
    "expand", "broadcast_to", "getitem", "index_add_into", "sum", "neg", "cast",
    "contiguous", "clone", "flatten", "unflatten", "mT", "select_backward",
    "slice_backward", "cat", "stack"))
# ops whose tensor inputs may be None for zeros (a gradient that does not reach them)
_NONE_FOR_ZEROS = frozenset(("lstm_layer_rows_backward",))


def snapshot(g):
    """A copy of backward graph ``g`` (its lists, maps and steps) that the passes of the
    ``Program`` built from ``g`` do not change: what ``specialize`` starts from."""
    h = Graph()
    h.steps = [copy.copy(st) for st in g.steps]
    h.shapes, h.dtypes = list(g.shapes), list(g.dtypes)
    h.source, h.producer = list(g.source), list(g.producer)
    h.args, h.externals, h.consts = dict(g.args), dict(g.externals), dict(g.consts)
    h.alias, h.ext_grad = dict(g.alias), dict(g.ext_grad)
    h.owners, h.entry_guards = list(g.owners), list(g.entry_guards)
    h.output, h.stats_opaque = g.output, g.stats_opaque
    return h


def specialize(g, zero):
    """A copy of backward graph ``g`` (a ``snapshot``) with the argument values in
    ``zero`` known zero (see the module docstring), or None where that does not
    apply."""
    g = snapshot(g)
    zero = set(zero)
    rename = {}
    steps = []

    def ren(i):
        return rename.get(i, i) if type(i) is int else i
    for st in g.steps:
        if st.ctx is not None or st.members is not None:
            if any(v in zero or v in rename for v in _ctx_reads(st)):
                return None
        st.ins = [ren(i) for i in st.ins]
        if st.into is not None:
            st.into = ren(st.into)
            if st.into in zero or g.root(st.into) in zero:
                return None
        reads = [i for i in st.ins if type(i) is int]
        zin = [i for i in reads if i in zero]
        if not zin:
            steps.append(st)
            continue
        if st.kind == "op" and st.op.name in _ZERO_KEEPING and len(zin) == len(reads) \
                and st.outs and all(o is not None for o in st.outs):
            zero.update(st.outs)
            continue
        if _is_add(st) and len(reads) == 2 and len(st.outs) == 1:
            (o,) = st.outs
            if len(zin) == 2:
                zero.add(o)
                continue
            (a,) = [i for i in reads if i not in zero]
            if g.shapes[a] == g.shapes[o] and g.dtypes[a] == g.dtypes[o]:
                rename[o] = a
                continue
        if st.kind == "vjp" or (st.kind == "op" and st.op.name in _NONE_FOR_ZEROS):
            st.ins = [("lit", None) if type(i) is int and i in zero else i for i in st.ins]
            steps.append(st)
            continue
        for v in zin:  # any other reader: a constant of zeros
            if g.source[v] != "const":
                g.source[v] = "const"
                g.consts[v] = np.zeros(g.shapes[v], g.dtypes[v])
                g.alias.pop(v, None)
                g.producer[v] = None
        steps.append(st)
    outs = g.output_values()
    if any(v in zero or v in rename for v in outs):
        return None
    for v in zero:  # (an argument known zero that nothing reads any more stays one)
        if g.source[v] == "node":
            g.orphan(v)
    g.steps = steps
    return g


def _ctx_reads(st):
    vals = []
    if st.ctx is not None:
        ins, out = st.ctx[0], st.ctx[1]
        vals += [v for v in (ins or []) if type(v) is int]
        vals += [v for v in (out if isinstance(out, tuple) else (out,)) if type(v) is int]
    for m in st.members or ():
        vals += [i for i in m.ins if type(i) is int]
    return vals


def _is_add(st):
    if st.kind == "ufunc":
        return st.op is np.add and st.into is None and not st.attrs
    return st.kind == "op" and st.op.name == "add" and st.attrs.get("alpha", 1) == 1


def backward_for(prog, zero):
    """The backward program of compiled-module program ``prog`` for a call whose
    cotangents ``zero`` (a flag per cotangent argument) are None: made once per
    pattern, the general one where nothing is None or ``specialize`` does not
    apply."""
    if not ENABLED or not any(zero):
        return prog.backward
    made = prog.__dict__.setdefault("zero_backwards", {})
    back = made.get(zero)
    if back is None:
        from .program import Program
        g = specialize(prog.backward_graph, [c for c, z in zip(prog.cot_values, zero) if z])
        back = made[zero] = prog.backward if g is None else Program(g, fuse=prog.fuse)
    return back
