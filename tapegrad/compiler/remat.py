"""Rematerialization: which elementwise values a fused kernel recomputes instead of
reading them from memory.

A training step's forward computes elementwise values (``tanh(u)``, ``sigmoid(x)``)
that its backward reads again. Stored, each costs a write in the forward kernel and a
read in the backward one; recomputed inside the backward kernel from the forward
group's own inputs, it costs reading those inputs (often already read there, as the
``x`` of ``gelu(x) * sigmoid(x)``) and some arithmetic. ``choose`` decides by bytes
moved, the measure AOTAutograd's min-cut partitioner minimises, with a greedy rule:
for each fused group (the consumer) and each value it reads from another elementwise
group of its shape and dtype (the source), recomputing the value saves its read, and
its write too when no other reader keeps it stored (and it does not escape); it costs
the full-size inputs of the source's steps it needs that the consumer does not read
yet. The best positive saving is taken, then the savings are counted again, until
none is left. Elementwise arithmetic is cheap next to memory traffic at the sizes
where the difference shows (arrays larger than the caches).

A value is recomputed only where the inputs it needs still hold what the source read:
no step between them writes into their memory.
"""

__all__ = ["choose", "MAX_MEMBERS", "ENABLED"]

MAX_MEMBERS = 256   # steps in one kernel, recomputed ones included
ENABLED = True      # False: every value a kernel reads from another is stored


def choose(g, steps, groups, member_of, home, full, escapes, reads_all):
    """Steps each consumer group recomputes: ``{gid: set of step indices}``.

    ``groups``: gid -> sorted member indices of each fusable group (a single step
    included: any of them can be a source); ``member_of``: step index -> gid of the
    groups that become kernels (the consumers; a reduction ending a group counts as
    its member); ``home``: value -> gid of the group that computes it; ``full``: the
    (shape, dtype) key of each gid; ``escapes``: values the program returns."""
    if not ENABLED:
        return {}
    made = {}
    for gid, ms in groups.items():
        for m in ms:
            made[steps[m].outs[0]] = m
    consumers = {}
    for i, gid in member_of.items():
        consumers.setdefault(gid, []).append(i)
    readers = {}   # value -> the readers outside its group (gid, or ("step", i))
    for i, st in enumerate(steps):
        for v in reads_all(st):
            if v in home:
                r = member_of.get(i, ("step", i))
                if r != home[v]:
                    readers.setdefault(v, set()).add(r)
    extra = {gid: set() for gid in consumers}

    def subgraph(v):
        """The source's steps ``v`` needs and the values they read from outside it."""
        gid = home[v]
        need, todo = set(), [made[v]]
        while todo:
            m = todo.pop()
            if m in need:
                continue
            need.add(m)
            for u in steps[m].reads():
                if home.get(u) == gid and u in made:
                    todo.append(made[u])
        produced = {steps[m].outs[0] for m in need}
        leaves = {u for m in need for u in steps[m].reads() if u not in produced}
        return need, produced, leaves

    def written_between(lo, hi, leaves):
        roots = {g.root(u) for u in leaves}
        outside = any(g.source[r] in ("ext", "arg") for r in roots)
        for st in steps[lo:hi + 1]:
            if not st.mutates():
                continue
            if st.into is None:
                if outside:
                    return True
                continue
            r = g.root(st.into)
            if r in roots or (g.source[r] in ("ext", "arg") and outside):
                return True
        return False

    def state(gid):
        ms = set(consumers[gid]) | extra[gid]
        produced = {steps[m].outs[0] for m in ms if steps[m].outs}
        reads = {u for m in ms for u in reads_all(steps[m])} - produced
        return ms, produced, reads

    def nbytes(u):
        return g.nbytes(u)

    def kept(u, gid):
        """Would ``u`` still be stored if ``gid`` recomputed it?"""
        if u in escapes:
            return True
        for r in readers.get(u, ()):
            if r == gid or (type(r) is not tuple and made[u] in extra.get(r, ())):
                continue
            return True
        return False

    while True:
        best = None
        for gid in consumers:
            ms, produced, reads = state(gid)
            key = full[gid]
            pos = max(consumers[gid])
            for v in reads:
                src = home.get(v)
                if src is None or src == gid or full.get(src) != key or v not in made:
                    continue
                need, made_here, leaves = subgraph(v)
                new = need - ms
                if len(ms) + len(new) > MAX_MEMBERS:
                    continue
                cost = sum(nbytes(u) for u in leaves - reads - produced
                           if g.shapes[u] == key[0])
                saved = 0
                for u in made_here & reads:
                    saved += nbytes(u)
                    if not kept(u, gid):
                        saved += nbytes(u)
                if saved <= cost:
                    continue
                if written_between(min(need), pos, leaves):
                    continue
                if best is None or saved - cost > best[0]:
                    best = (saved - cost, gid, new)
        if best is None:
            return {gid: s for gid, s in extra.items() if s}
        extra[best[1]] |= best[2]


def siblings(steps, kernels, keys, ins, avail):
    """Kernels over the same elements that do not read each other's results, with no
    state change between them, run as one pass (both read ``x``: one read): ``{gid:
    the gid of the kernel it joins}``, a later kernel joining an earlier one (it then
    runs there, so everything it reads must be ready by then).

    ``kernels``: gid -> (position, whether it ends in a reduction: one per pass);
    ``keys``: gid -> (shape, dtype); ``ins``: gid -> the values it reads; ``avail(v,
    joined)``: the position at which ``v`` is ready (None: from outside the program),
    given the joins made so far."""
    joined = {}
    clusters = []   # [position, key, has a reduction, gid]
    for gid in sorted(kernels, key=lambda k: kernels[k][0]):
        pos, red = kernels[gid]
        target = None
        for c in reversed(clusters):
            if any(steps[k].mutates() for k in range(c[0] + 1, pos)):
                break
            if c[1] != keys[gid] or (red and c[2]):
                continue
            ready = [avail(v, joined) for v in ins[gid]]
            if all(r is None or r < c[0] for r in ready):
                target = c
                break
        if target is None:
            clusters.append([pos, keys[gid], red, gid])
        else:
            target[2] = target[2] or red
            joined[gid] = target[3]
    return joined
