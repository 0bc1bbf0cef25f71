"""The joint forward+backward graph of a compiled module, split in two programs.

``tg.compile(module)`` captures the module's forward and, right after it, the
backward of its outputs (``tg.autograd.grad`` with placeholder cotangents, arguments
of the program) in one ``Graph``: the *joint* graph, as AOTAutograd traces it.
``partition`` splits it where the backward began:

- the forward program runs the forward's steps and returns the outputs followed by
  the *saved values*: each value of the forward (or argument) that a step of the
  backward reads. They escape the program, so they live in its rings (a buffer is
  reused only once nothing outside holds it: the node that keeps them lets go after
  its backward), never in the arena a second forward would overwrite;
- the backward program takes the saved values and the cotangents as its arguments
  and returns the gradients; it never recomputes the forward.

A backward that Python reads values from (a guard), whose shapes depend on the
values, or that changes state outside itself cannot be split (a failed check could
not undo the forward that already ran): ``Unsupported`` says why.
"""
from .capture import Unsupported
from .embedding_projection import fold_embedding_projections
from .epilogue import fuse_pool_relu_grads, layout_free
from .graph import Graph
from .program import Program, _reads_all
from .zero_cotangents import snapshot

__all__ = ["partition"]


def partition(g, mark, cots, fuse=True):
    """The forward ``Program`` of joint graph ``g`` (steps before ``mark`` are the
    forward's), with ``backward`` (the backward ``Program``), ``n_out`` (the number of
    outputs before the saved values), ``n_saved`` and ``grad_slots`` (for each
    gradient, its index in the backward's results, or None for an unused input).
    ``cots`` are the cotangent arguments' values, in order; ``g.output`` is
    ``(tuple, [(tuple, outputs), (tuple, gradients)])``."""
    if g.ext_grad:
        raise Unsupported("the program reads a .grad being accumulated into")
    steps, mark, folded = fold_embedding_projections(g, g.steps, _reads_all, mark)
    if fuse:  # (the backward's pooling gradients then read the pooled values, not the
        #       ReLU's results: those are not saved)
        steps, _ = fuse_pool_relu_grads(g, steps, _reads_all, start=mark)
    fwd, bwd = steps[:mark], steps[mark:]
    outs_o, grads_o = g.output[1]
    out_vals = [v for _, v in outs_o[1]]
    made_f = {o for st in fwd for o in st.outs if o is not None}
    cot_set = set(cots)
    made_b, saved, seen, ext_read = set(), [], set(), []

    def need(v, what):
        if g.source[v] == "ext" and v not in ext_read:
            ext_read.append(v)
        if v in made_b or v in cot_set or g.source[v] in ("ext", "const"):
            return
        if v in made_f or g.source[v] == "arg":
            if v not in seen:
                seen.add(v)
                saved.append(v)
            return
        raise Unsupported(f"{what} reads a value the capture did not see produced")

    for st in bwd:
        if st.kind in ("guard", "update", "cleargrad", "zerograd", "setgrad"):
            raise Unsupported(f"the backward has a {st.kind} step (Python reads a value, or "
                              f"it changes state): it cannot run apart from its forward")
        if st.kind == "op" and st.op.kind == "dynamic":
            raise Unsupported(f"{st.op.name} in the backward has a data-dependent shape")
        if st.into is not None and g.root(st.into) not in made_b:
            raise Unsupported(f"{st.name} in the backward writes into a value of the forward")
        for v in _reads_all(st):
            need(v, st.name)
        made_b.update(o for o in st.outs if o is not None)
    slots, k = [], 0
    for tag, v in grads_o[1]:
        if tag != "tensor":
            slots.append(None)
            continue
        if v not in cot_set and g.root(v) not in made_b and g.root(v) not in cot_set:
            raise Unsupported("a gradient is a value of the forward (or a parameter) "
                              "itself, not one the backward computed")
        slots.append(k)
        k += 1

    gf = _copy(g, fwd)
    for c in cots:
        gf.args.pop(c, None)
    gf.entry_guards = [gd for gd in g.entry_guards if gd[0] == "buffer_is"]
    gf.output = (tuple, [("tensor", v) for v in out_vals + saved])
    out_roots = {g.root(v) for v in out_vals}
    gf.layout_free = frozenset(  # (saved values the backward reads in any order)
        v for v in saved if g.source[v] == "node" and g.root(v) == v and
        v not in out_roots and layout_free(g, v, bwd, _reads_all))
    gf.check()

    gb = _copy(g, bwd)
    gb.args = {}
    for i, v in enumerate(saved):
        gb.source[v] = "arg"
        gb.producer[v] = None
        gb.alias.pop(v, None)
        gb.args[v] = (i, None)
    for j, c in enumerate(cots):
        gb.args[c] = (len(saved) + j, None)
    gb.entry_guards, gb.owners = [], []
    gb.output = (tuple, list(grads_o[1]))
    gb.check()

    prog = Program(gf, fuse=fuse)
    prog.backward_graph, prog.fuse = snapshot(gb), fuse  # (zero_cotangents starts there)
    prog.backward = Program(gb, fuse=fuse)
    prog.n_out, prog.n_saved, prog.grad_slots = len(out_vals), len(saved), slots
    prog.projections_folded += folded
    # what the backward reads of the node's inputs and outputs (the node stamps their
    # versions: one written in place before the backward raises, as eager's would)
    prog.saved_args = {g.args[v][0] for v in saved if g.source[v] == "arg"}
    prog.saved_ext = [g.externals[v] for v in ext_read]
    roots = {g.root(v) for v in saved}
    prog.saves_out = any(g.root(v) in roots for v in out_vals)
    return prog


def _copy(g, steps):
    """A Graph over the same values as ``g`` (lists and maps copied: the passes add
    values and change sources) running ``steps``."""
    h = Graph()
    h.steps = list(steps)
    h.shapes, h.dtypes = list(g.shapes), list(g.dtypes)
    h.source, h.producer = list(g.source), list(g.producer)
    h.args, h.externals, h.consts = dict(g.args), dict(g.externals), dict(g.consts)
    h.alias, h.ext_grad = dict(g.alias), dict(g.ext_grad)
    h.owners, h.entry_guards = list(g.owners), list(g.entry_guards)
    h.stats_opaque = g.stats_opaque
    return h
