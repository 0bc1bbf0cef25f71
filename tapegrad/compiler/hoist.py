"""Loop-invariant hoisting: steps that depend only on small external arrays the
program never writes (class targets, masks) and on constants.

A training step re-derives the same values from its targets on every call
(``cross_entropy``'s mask, one-hot rows, their count). ``hoist_invariants`` computes
such steps once when the program is built and keeps their results; each replay
first compares the external arrays they came from with a snapshot of the bytes the
results were computed from (a ``bytes`` comparison: ~1 us for a batch of targets)
and recomputes the hoisted steps when one differs (an in-place change of the
targets between calls). The replay's results are those of running every step.

Hoisted: registry op steps (``basic`` or ``view`` kernels) and plain NumPy ufunc
steps whose inputs are hoisted values, constants, literals, or external arrays of
at most ``MAX_BYTES`` that no step of the program writes (nor a ``.grad`` buffer);
not a value the program returns or sets as a ``.grad``, nor one an opaque adjoint
reads. Their values get the source ``"hoist"``: the code generator reads them as
globals (``H<v>``) that the recomputation rebinds.
"""
import numpy as np

from .graph import draws as _draws

__all__ = ["hoist_invariants", "Hoisted", "MAX_BYTES"]

MAX_BYTES = 1 << 16


class Hoisted:
    """The hoisted steps of a program, their external inputs and the snapshot."""

    def __init__(self, g, steps, sources):
        self.g, self.steps, self.sources = g, steps, sources  # sources: ext values
        self.snap = [None] * len(sources)
        self.values = {}

    def compute(self, glb=None):
        """Run the hoisted steps on the external arrays as they are now; rebind the
        replay's globals (``glb``) to the new values."""
        g = self.g
        env = {}

        def val(i):
            if type(i) is not int:
                return i[1]
            src = g.source[i]
            if src == "ext":
                return g.externals[i]
            if src == "const":
                return g.consts[i]
            return env[i]
        for k, v in enumerate(self.sources):
            self.snap[k] = g.externals[v].tobytes()
        for st in self.steps:
            args = [val(i) for i in st.ins]
            if st.kind == "op":
                res = st.op.kernel(*args, **st.attrs)
            else:
                kw = dict(st.attrs)
                res = getattr(st.op, kw.pop("method", "__call__"))(*args, **kw)
            res = res if isinstance(res, tuple) else (res,)
            for o, r in zip(st.outs, res):
                if o is not None:
                    env[o] = np.asarray(r)
        self.values = env
        if glb is not None:
            for v, a in env.items():
                glb[f"H{v}"] = a

    def stale(self):
        """Whether an external input differs from the bytes the values came from."""
        ext = self.g.externals
        for k, v in enumerate(self.sources):
            if ext[v].tobytes() != self.snap[k]:
                return True
        return False


def hoist_invariants(g, steps, reads_all):
    """(steps without the hoisted ones, ``Hoisted`` or None)."""
    written = set()
    for st in steps:
        if st.into is not None:
            written.add(g.root(st.into))
    wrote_arrays = [g.externals[r] for r in written if g.source[r] == "ext"]

    def small_ext(v):
        if g.source[v] != "ext" or v in g.ext_grad or v in g.alias or v in written:
            return False
        a = g.externals[v]
        if type(a) is not np.ndarray or a.nbytes > MAX_BYTES or not a.flags.c_contiguous:
            return False
        return not any(np.may_share_memory(a, b) for b in wrote_arrays)

    escapes = set(g.output_values())
    ctx_reads = set()
    for st in steps:
        if st.kind == "setgrad":
            escapes.update(st.reads())
        if st.ctx is not None:
            ctx_reads.update(reads_all(st))
    inv = set()
    sources = []
    hoisted = []
    for st in steps:
        if st.into is not None or not st.outs or any(o is None for o in st.outs):
            continue
        if st.kind == "op":
            if st.op.kind not in ("basic", "view") or _draws(st.op):
                continue
        elif st.kind != "ufunc":
            continue
        ok = True
        srcs = []
        for i in st.ins:
            if type(i) is not int:
                continue
            if i in inv or g.source[i] == "const":
                continue
            if small_ext(i):
                srcs.append(i)
                continue
            ok = False
            break
        if not ok or not any(type(i) is int for i in st.ins):
            continue
        if any(o in escapes or o in ctx_reads for o in st.outs):
            continue
        hoisted.append(st)
        inv.update(st.outs)
        for s in srcs:
            if s not in sources:
                sources.append(s)
    # only worth it when some step depends on an external array (not constants alone)
    if not hoisted or not sources:
        return steps, None
    # a hoisted value written in place later (an into) would be changed: keep all
    if any(st.into is not None and g.root(st.into) in inv for st in steps):
        return steps, None
    h = Hoisted(g, hoisted, sources)
    try:
        h.compute()
    except Exception:  # leave them to the replay (and its error)
        return steps, None
    for v in inv:
        g.source[v] = "hoist"
    keep = set(map(id, hoisted))
    return [st for st in steps if id(st) not in keep], h
