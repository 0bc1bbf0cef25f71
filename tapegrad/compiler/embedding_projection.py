"""An embedding followed by a linear map, as a gather from the projected table.

``x = embedding(idx, E)`` (optionally ``permute``d over its leading dims, as a
``batch_first`` LSTM does) read only by ``linear(x, W, b)``: every row of the result
is a row of ``T = linear(E, W, b)`` (``num_embeddings x out_features``), so the
program computes ``T`` once and gathers ``embedding(idx', T)`` (``idx'`` the indices
permuted the same way, a view). When the vocabulary is smaller than the number of
indices, the ``rows x in x out`` GEMM becomes a ``vocab x in x out`` one.

The backward of the pattern, where the same graph has it (the joint graph of a
compiled module, or a whole training step), is rewritten with it: for ``G`` the
gradient of the linear's result, ``gT = embedding_backward(G, idx')`` (the rows of
``G`` added per index), then ``E``'s gradient ``gT @ W``, ``W``'s ``gT^T @ E`` and
``b``'s ``sum(gT, 0)``, in place of two ``rows x in x out`` GEMMs. These are the same
sums in another order (float rounding apart, the gradients are eager's).

A gather read only by an ``lstm_layer`` (the LSTM's input gates) then goes into the
recurrence: one ``lstm_layer_rows`` step (ops/nn/rnn.py) whose loop reads each step's
rows of the table where it reads the input gates, instead of a ``(T, B, 4H)`` gather
written before the loop and read back by it. Where the same graph has that LSTM's
adjoint and its input-gate gradient is read only by the table's
``embedding_backward``, the two are one ``lstm_layer_rows_backward`` step, whose
reverse loop adds each step's input-gate gradients into the table's gradient while
they are in cache (the same sums, the steps in reverse order).

Left as it is: an embedding with ``padding_idx`` (its row gets no gradient, which
the table's gradient would give it), an embedding or projected value read by
anything else (a residual, an output), a backward of another shape than the one
``linear``'s and ``permute``'s adjoints record, a step between the pattern's steps
that writes into ``E``, ``W``, ``b`` or the indices, and a vocabulary larger than
the number of indices.
"""
from ..ops_registry import get as _op
from .graph import Step

__all__ = ["fold_embedding_projections"]

ENABLED = True
GATHER_IN_RECURRENCE = True  # (lstm_layer_rows in place of the gather and lstm_layer)
# (lstm_layer_rows_backward in place of the LSTM's adjoint and the table's
# embedding_backward)
GRADIENT_IN_RECURRENCE = True


def fold_embedding_projections(g, steps, reads_all, mark=None):
    """``(steps, mark, n)``: ``steps`` with each embedding-projection pattern (see the
    module docstring) rewritten, the old steps nothing reads any more left out;
    ``mark`` (the number of leading steps that are a joint graph's forward, or None)
    updated; ``n`` the number rewritten."""
    if not ENABLED:
        return steps, mark, 0
    n = 0
    while True:
        found = _find(g, steps, reads_all)
        if found is None:
            break
        steps, mark = _rewrite(g, steps, mark, found, reads_all)
        n += 1
    if n and GATHER_IN_RECURRENCE:
        steps, mark = _gather_into_recurrence(g, steps, mark, reads_all)
    return steps, mark, n


def _gather_into_recurrence(g, steps, mark, reads_all):
    """``xg = embedding(idx, T)`` read only by ``lstm_layer(xg, ...)``: one
    ``lstm_layer_rows(idx, T, ...)`` step, whose loop reads each step's rows of ``T``
    (no ``(T, B, 4H)`` gather written and read back)."""
    from ..ops.nn.rnn import LSTM_ROWS
    readers = _readers(steps, reads_all)
    escapes = _escapes(g, steps)
    at, gone = {}, set()
    for k, st in enumerate(steps):
        if not (_is(st, "embedding") and st.attrs.get("padding_idx") is None
                and not st.attrs.get("mask_padding") and len(g.shapes[st.ins[0]]) == 2
                and g.dtypes[st.ins[1]].kind == "f"):
            continue
        j = _only(readers, st.outs[0], escapes)
        if j is None or not _is(steps[j], "lstm_layer") or steps[j].ins[0] != st.outs[0] \
                or j in at:
            continue
        lstm = steps[j]
        new = Step("op", LSTM_ROWS, list(st.ins) + list(lstm.ins[1:]), dict(lstm.attrs))
        new.outs = list(lstm.outs)
        at[j] = new
        gone.add(k)
    if not at:
        return steps, mark
    out, new_mark = [], None
    for k, st in enumerate(steps):
        if k == mark:
            new_mark = len(out)
        if k not in gone:
            out.append(at.get(k, st))
    if mark is not None and new_mark is None:
        new_mark = len(out)
    if GRADIENT_IN_RECURRENCE:
        out = _gradient_into_recurrence(g, out, new_mark, list(at.values()), reads_all)
    return out, new_mark


def _gradient_into_recurrence(g, steps, mark, rows, reads_all):
    """``steps`` with each adjoint of an LSTM that became one of the ``rows`` steps
    (``lstm_layer_rows``), whose input-gate gradient only the ``embedding_backward``
    of that step's indices and table reads, replaced by one
    ``lstm_layer_rows_backward`` step giving the table's gradient (the backward
    steps only: indices at or after ``mark``; the number of steps before it is
    unchanged)."""
    from ..ops.nn.rnn import LSTM_ROWS_GRAD, _seq_kernels
    made = {tuple(st.outs): st for st in rows}
    readers = _readers(steps, reads_all)
    escapes = _escapes(g, steps)
    at, gone = {}, set()
    for k, st in enumerate(steps):
        if st.kind != "vjp" or st.op.name != "lstm_layer" or st.ctx is None \
                or (mark is not None and k < mark):
            continue
        ins, out = st.ctx[0], st.ctx[1]
        fwd = made.get(out) if isinstance(out, tuple) else None
        if fwd is None or len(st.ins) != 3 or st.ins[2] != ("lit", None) \
                or len(st.outs) != 4 or st.outs[0] is None or ins is None \
                or any(type(v) is not int for v in ins[1:4]):
            continue
        idx, table = fwd.ins[0], fwd.ins[1]
        j = _only(readers, st.outs[0], escapes)
        if j is None or j <= k or not _is(steps[j], "embedding_backward"):
            continue
        eb = steps[j]
        if eb.ins[0] != st.outs[0] or eb.ins[1] != idx or eb.outs[0] is None \
                or eb.attrs.get("padding_idx") is not None \
                or eb.attrs.get("num_weights") != g.shapes[table][0] \
                or _seq_kernels("lstm_rows", g.dtypes[table]) is None:
            continue
        new = Step("op", LSTM_ROWS_GRAD, [st.ins[0], st.ins[1], idx] + list(ins[1:4]) +
                   list(out), {"reverse": fwd.attrs.get("reverse", False),
                               "num_weights": g.shapes[table][0],
                               "needs": tuple(o is not None for o in st.outs[1:])})
        new.outs = [eb.outs[0]] + list(st.outs[1:])
        at[k] = new
        gone.add(j)
    if not at:
        return steps
    return [at.get(k, st) for k, st in enumerate(steps) if k not in gone]


class _Match:
    __slots__ = ("emb", "perm", "lin", "dims", "bwd", "gT_at", "old", "grads")

    def __init__(self):
        self.perm = self.dims = None
        self.bwd = []        # the backward steps' indices that may go
        self.gT_at = None    # where the backward's new steps go
        self.old = set()     # indices of old steps that may go once unread
        self.grads = {}      # "E"/"W"/"b" -> the gradient value; "G" -> the cotangent


def _find(g, steps, reads_all):
    readers = _readers(steps, reads_all)
    escapes = _escapes(g, steps)
    for k, st in enumerate(steps):
        if not (st.kind == "op" and st.op.name == "embedding" and len(st.outs) == 1
                and st.attrs.get("padding_idx") is None):
            continue
        m = _match(g, steps, readers, escapes, k)
        if m is not None:
            return m
    return None


def _readers(steps, reads_all):
    out = {}
    for k, st in enumerate(steps):
        for v in reads_all(st):
            out.setdefault(v, []).append(k)
    return out


def _escapes(g, steps):
    esc = set(g.output_values())
    for st in steps:
        if st.kind == "setgrad":
            esc.update(st.reads())
    return esc


def _only(readers, v, escapes):
    """The one step reading ``v``, or None."""
    r = readers.get(v, [])
    return r[0] if len(r) == 1 and v not in escapes and v is not None else None


def _is(st, name):
    return st.kind == "op" and st.op.name == name


def _match(g, steps, readers, escapes, k):
    emb = steps[k]
    idx, E = emb.ins[0], emb.ins[1]
    e = emb.outs[0]
    if type(idx) is not int or type(E) is not int or e in escapes:
        return None
    m = _Match()
    m.emb = k
    x = e
    r = readers.get(e, [])
    perms = [j for j in r if _is(steps[j], "permute")]
    if len(perms) == 1 and len(r) == 1:
        p = steps[perms[0]]
        dims = tuple(p.attrs.get("dims", ()))
        nd = len(g.shapes[e])
        if len(dims) != nd or tuple(sorted(dims)) != tuple(range(nd)) or dims[-1] != nd - 1:
            return None
        m.perm, m.dims = perms[0], dims
        x = p.outs[0]
        if x in escapes:
            return None
        r = readers.get(x, [])
    lins = [j for j in r if _is(steps[j], "linear") and steps[j].ins[0] == x]
    if len(lins) != 1:
        return None
    m.lin = lins[0]
    lin = steps[m.lin]
    W, b = lin.ins[1], (lin.ins[2] if len(lin.ins) > 2 else ("lit", None))
    if type(W) is not int or not (type(b) is int or b == ("lit", None)):
        return None
    if len(g.shapes[x]) < 2 or len(g.shapes[E]) != 2:
        return None
    V, n_in = g.shapes[E]
    rows = 1
    for s in g.shapes[idx]:
        rows *= s
    if V > rows or len(g.shapes[W]) != 2 or g.shapes[W][1] != n_in \
            or g.dtypes[W] != g.dtypes[E] or (type(b) is int and (
                g.shapes[b] != (g.shapes[W][0],) or g.dtypes[b] != g.dtypes[E])):
        return None
    # every other reader of x: the linear's adjoint computing W's gradient
    others = [j for j in r if j != m.lin]
    if not _match_backward(g, steps, readers, escapes, m, x, W, idx, others):
        return None
    m.old = {m.emb, m.lin} | ({m.perm} if m.perm is not None else set()) | set(m.bwd)
    # nothing in between writes into the pattern's inputs
    last = max(m.old)
    roots = {g.root(v) for v in (idx, E, W, b) if type(v) is int}
    for j in range(m.emb, last + 1):
        st = steps[j]
        if st.into is not None and g.root(st.into) in roots:
            return None
    return m


def _match_backward(g, steps, readers, escapes, m, x, W, idx, x_readers):
    """The linear's and permute's adjoints as ``linear``'s vjp records them (``g2`` the
    output gradient as rows; ``gx = matmul(g2, W)``, ``gW = matmul(permute(g2),
    rows(x))``, ``gb = sum(g2, 0)``), the permute's inverse and ``embedding_backward``.
    Fills ``m.grads``/``m.bwd``; False when what reads the values is anything else."""
    nd = len(g.shapes[x])
    n_out = g.shapes[W][0]
    g2 = None
    bwd = []

    def rows_of(v):
        """(``v`` as (rows, C): itself when 2-D, else its reshape's value, step)."""
        if nd == 2:
            return v, None
        j = _only(readers, v, escapes)
        if j is None or not _is(steps[j], "reshape") or len(g.shapes[steps[j].outs[0]]) != 2:
            return None, None
        return steps[j].outs[0], j

    ebs = [j for j in readers.get(idx, []) if _is(steps[j], "embedding_backward")]
    if not x_readers and not ebs:
        return True   # no backward here (a forward-only program)
    # W's gradient: x's other reader (its reshape, or the matmul itself)
    if len(x_readers) > 1:
        return False
    if x_readers:
        j = x_readers[0]
        if nd == 2:
            x2, mm = x, j
        else:
            st = steps[j]
            if not _is(st, "reshape") or _only(readers, st.outs[0], escapes) is None:
                return False
            x2, mm = st.outs[0], _only(readers, st.outs[0], escapes)
            bwd.append(j)
        st = steps[mm]
        if not _is(st, "matmul") or st.ins[1] != x2:
            return False
        tj = _producer(steps, st.ins[0], mm)
        if tj is None or not _is(steps[tj], "permute") or tuple(steps[tj].attrs["dims"]) != (1, 0) \
                or _only(readers, st.ins[0], escapes) != mm:
            return False
        g2 = steps[tj].ins[0]
        bwd += [tj]
        m.grads["W"] = st.outs[0]
        m.gT_at = mm
        bwd.append(mm)
    # E's gradient: embedding_backward of the indices, of the permute's inverse ...
    ebs = [j for j in ebs if steps[j].ins[1] == idx
           and steps[j].attrs.get("padding_idx") is None]
    gE_src = None
    for j in ebs:
        v = steps[j].ins[0]
        if m.perm is not None:
            pj = _producer(steps, v, j)
            if pj is None or not _is(steps[pj], "permute") or _only(readers, v, escapes) != j:
                continue
            inv = tuple(steps[pj].attrs["dims"])
            if tuple(inv[d] for d in m.dims) != tuple(range(nd)):
                continue
            chain = [pj, j]
            v = steps[pj].ins[0]
        else:
            chain = [j]
        # ... of the rows' matmul with W, reshaped back
        if nd != 2:
            rj = _producer(steps, v, chain[0])
            if rj is None or not _is(steps[rj], "reshape") \
                    or _only(readers, v, escapes) != chain[0]:
                continue
            chain.insert(0, rj)
            v = steps[rj].ins[0]
        mj = _producer(steps, v, chain[0])
        if mj is None or not _is(steps[mj], "matmul") or steps[mj].ins[1] != W \
                or _only(readers, v, escapes) != chain[0]:
            continue
        if g2 is not None and steps[mj].ins[0] != g2:
            continue
        g2 = steps[mj].ins[0]
        gE_src = [mj] + chain
        break
    if gE_src is None and g2 is None:
        return False
    if gE_src is not None:
        bwd += gE_src
        m.grads["E"] = steps[gE_src[-1]].outs[0]
        m.gT_at = gE_src[0] if m.gT_at is None else min(m.gT_at, gE_src[0])
    # g2: the output gradient as rows (a reshape of G unless 2-D); its readers all here
    if g.shapes[g2] != (_numel(g.shapes[x][:-1]), n_out):
        return False
    if nd == 2:
        G = g2
    else:
        rj = _producer(steps, g2, m.gT_at)
        if rj is None or not _is(steps[rj], "reshape"):
            return False
        G = steps[rj].ins[0]
        bwd.append(rj)
    if g.shapes[G] != g.shapes[x][:-1] + (n_out,):
        return False
    for j in readers.get(g2, []):
        if j in bwd:
            continue
        st = steps[j]
        if _is(st, "sum") and tuple(st.attrs.get("dim") or ()) == (0,) \
                and not st.attrs.get("keepdim") and "b" not in m.grads and nd != 2 \
                and len(st.ins) == 1 and st.attrs.get("dtype") is None:
            m.grads["b"] = st.outs[0]
            bwd.append(j)
            m.gT_at = min(m.gT_at, j)
        elif nd != 2:
            return False  # (2-D: g2 is G, which others may read)
    if nd == 2:
        for j in readers.get(g2, []):
            st = steps[j]
            if j not in bwd and _is(st, "sum") and tuple(st.attrs.get("dim") or ()) == (0,) \
                    and not st.attrs.get("keepdim") and len(st.ins) == 1 \
                    and st.attrs.get("dtype") is None and "b" not in m.grads:
                m.grads["b"] = st.outs[0]
                bwd.append(j)
                m.gT_at = min(m.gT_at, j)
    m.grads["G"] = G
    m.bwd = bwd
    return True


def _producer(steps, v, before):
    for j in range(before - 1, -1, -1):
        if v in steps[j].outs:
            return j
    return None


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _new(g, shape, dtype, alias=None):
    v = g.add_value(tuple(shape), dtype, "node")
    if alias is not None:
        g.alias[v] = g.root(alias)
    return v


def _step(name, ins, attrs, outs):
    st = Step("op", _op(name), list(ins), dict(attrs))
    st.outs = list(outs)
    return st


def _rewrite(g, steps, mark, m, reads_all):
    emb, lin = steps[m.emb], steps[m.lin]
    idx, E = emb.ins
    W = lin.ins[1]
    b = lin.ins[2] if len(lin.ins) > 2 else ("lit", None)
    xg = lin.outs[0]
    V = g.shapes[E][0]
    n_out = g.shapes[W][0]
    dt = g.dtypes[E]
    # forward: the table, the indices in the gather's order, the gather into xg
    table = _new(g, (V, n_out), dt)
    fwd = [_step("linear", (E, W, b), {}, [table])]
    ix = idx
    if m.perm is not None:
        ishape = g.shapes[idx]
        ix = _new(g, tuple(ishape[d] for d in m.dims[:-1]), g.dtypes[idx], alias=idx)
        fwd.append(_step("permute", (idx,), {"dims": tuple(m.dims[:-1])}, [ix]))
    fwd.append(_step("embedding", (ix, table), {"padding_idx": None, "mask_padding": False},
                     [xg]))
    at = {m.lin: fwd}
    gone = {m.lin}
    if m.bwd:
        G = m.grads["G"]
        gT = _new(g, (V, n_out), dt)
        bwd = [_step("embedding_backward", (G, ix), {"num_weights": V, "padding_idx": None},
                     [gT])]
        if "E" in m.grads:
            bwd.append(_step("matmul", (gT, W), {}, [m.grads["E"]]))
        if "W" in m.grads:
            gTt = _new(g, (n_out, V), dt, alias=gT)
            bwd += [_step("permute", (gT,), {"dims": (1, 0)}, [gTt]),
                    _step("matmul", (gTt, E), {}, [m.grads["W"]])]
        if "b" in m.grads:
            bwd.append(_step("sum", (gT,), {"dim": (0,), "keepdim": False}, [m.grads["b"]]))
        made = {m.grads[k] for k in ("E", "W", "b") if k in m.grads}
        producers = [j for j in m.bwd if made & set(steps[j].outs)]
        at[m.gT_at] = bwd
        gone.update(producers)
    out, new_mark = [], None
    for j, st in enumerate(steps):
        if mark is not None and j == mark:
            new_mark = len(out)
        if j in at:
            if j not in gone:
                out.append(st)   # (a step the new ones go after, kept)
            out += at[j]
        elif j not in gone:
            out.append(st)
    if mark is not None and new_mark is None:
        new_mark = len(out)
    # the old steps nothing reads any more
    old = [st for j, st in enumerate(steps) if j in m.old and j not in gone]
    out, new_mark = _drop_unread(g, out, new_mark, old, reads_all)
    return out, new_mark


def _drop_unread(g, steps, mark, candidates, reads_all):
    cand = {id(st) for st in candidates}
    escapes = _escapes(g, steps)
    while True:
        read = set(escapes)
        for st in steps:
            read.update(reads_all(st))
        drop = [k for k, st in enumerate(steps) if id(st) in cand
                and not any(o is not None and o in read for o in st.outs)]
        if not drop:
            return steps, mark
        ds = set(drop)
        if mark is not None:
            mark -= sum(1 for k in drop if k < mark)
        steps = [st for k, st in enumerate(steps) if k not in ds]
