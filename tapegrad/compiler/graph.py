"""The captured program: a small graph IR.

``Graph.steps`` is the program in the order it ran. A ``Step`` is a registry op call
(``kind="op"``: ``op``, ``attrs``, inputs, outputs), one of the walker's own NumPy
steps (``ufunc``, ``astype``, ``copy``), an adjoint replayed whole (``vjp``: one
whose body computed outside the ops), a fused group (``fused``, made by the fusion
pass), or an effect: ``write`` (an in-place op's result into its tensor), ``update``
(an optimizer's step of one parameter), ``cleargrad``/``zerograd``/``setgrad`` (a
leaf's ``.grad``), ``guard`` (Python read these values: they must be the same).

Values are numbered; ``shapes``/``dtypes`` give each one's spec (the spec the
op's ``infer`` gives, observed on the captured arrays); ``source`` says where a value
comes from: ``"arg"`` (``args``: value -> argument position), ``"ext"`` (an array
living outside the function, ``externals``, read live), ``"const"`` (``consts``),
``"node"`` (the step ``producer[v]``). ``alias[v]`` is the value whose memory ``v``
shares (a view, or a step writing into its input).
"""

__all__ = ["Step", "Graph", "draws"]

EFFECTS = ("write", "update", "cleargrad", "zerograd", "setgrad", "guard")


def draws(op):
    """Whether a step's op draws from the global generator (an OpDef's ``draws``)."""
    return getattr(op, "draws", False)


def _sequence(tag):
    """Whether an output tag is a tuple, list or named tuple type."""
    return isinstance(tag, type) and issubclass(tag, (tuple, list))


class Step:
    __slots__ = ("kind", "op", "ins", "attrs", "outs", "into", "target", "workspace",
                 "expected", "ctx", "members", "fused")

    def __init__(self, kind, op, ins, attrs):
        self.kind, self.op, self.ins, self.attrs = kind, op, ins, attrs
        self.outs = []
        self.into = None       # the value a step writes into (write, ufunc out=, update)
        self.target = None     # the Tensor / (optimizer, group, param) of an effect
        self.workspace = 0     # scratch bytes (workspace ops)
        self.expected = None   # a guard's values
        self.ctx = None        # an opaque vjp's context (value ids)
        self.members = None    # a fused group's steps
        self.fused = None      # a fused group's kernel

    @property
    def name(self):
        if self.kind == "op" or self.kind == "vjp":
            return self.op.name + ("" if self.kind == "op" else ".vjp")
        if self.kind == "ufunc":
            return "np." + self.op.__name__
        return self.kind

    def reads(self):
        return [i for i in self.ins if type(i) is int]

    def mutates(self):
        return self.kind in ("write", "update", "cleargrad", "zerograd") or (
            self.kind == "ufunc" and self.into is not None)

    def __repr__(self):
        return f"Step({self.name}, ins={self.ins}, outs={self.outs})"


def splice(steps, at, gone):
    """``steps`` with each group's new step at the index of its last member (``at``:
    index -> step) and the other members (indices in ``gone``) left out."""
    return [at[k] if k in at else st for k, st in enumerate(steps)
            if k in at or k not in gone]


class Graph:
    def __init__(self):
        self.steps = []
        self.shapes, self.dtypes, self.source, self.producer = [], [], [], []
        self.args = {}         # value -> (argument position, keyword or None)
        self.externals = {}    # value -> array
        self.owners = []       # (weakref to a Tensor, the external array it held, its
                               # requires_grad)
        self.ext_grad = {}     # value -> the leaf whose .grad buffer it is
        self.consts = {}       # value -> array
        self.alias = {}        # value -> value whose memory it shares
        self.entry_guards = []
        self.output = None
        self.stats_opaque = 0
        self.layout_free = frozenset()  # escaping values read only by steps that take
        #                                 any order (values a forward saves: partition)

    def add_value(self, shape, dtype, src, producer=None):
        self.shapes.append(shape)
        self.dtypes.append(dtype)
        self.source.append(src)
        self.producer.append(producer)
        return len(self.shapes) - 1

    def orphan(self, vid):
        self.source[vid] = "orphan"

    def output_values(self):
        out = []

        def walk(o):
            tag, v = o
            if tag == "tensor" or tag == "item":  # (item: its number, read again)
                out.append(v)
            elif _sequence(tag):
                for x in v:
                    walk(x)
            elif tag is dict:
                for _, x in v:
                    walk(x)
        walk(self.output)
        return out

    def rename_outputs(self, rename):
        """The outputs with each value ``v`` in ``rename`` read as ``rename[v]``."""
        def walk(o):
            tag, v = o
            if tag == "tensor":
                return tag, rename.get(v, v)
            if _sequence(tag):
                return tag, [walk(x) for x in v]
            if tag is dict:
                return tag, [(k, walk(x)) for k, x in v]
            return o
        if rename and self.output is not None:
            self.output = walk(self.output)

    def check(self):
        """Every value a step reads is produced before it (or comes from outside)."""
        from .capture import Unsupported
        ready = {v for v, s in enumerate(self.source) if s in ("arg", "ext", "const")}
        for st in self.steps:
            for v in st.reads() + ([st.into] if st.into is not None else []):
                if v not in ready:
                    raise Unsupported(f"{st.name} reads a value the capture did not see "
                                      f"produced")
            if st.ctx is not None:
                ins, out = st.ctx[0], st.ctx[1]
                for v in (ins or []) + (list(out) if isinstance(out, tuple) else [out]):
                    if type(v) is int and v not in ready:
                        raise Unsupported(f"{st.name} reads a value the capture did not "
                                          f"see produced")
            ready.update(o for o in st.outs if o is not None)
        for v in self.output_values():
            if v not in ready:
                raise Unsupported("an output the capture did not see produced")

    def nbytes(self, v):
        n = self.dtypes[v].itemsize
        for s in self.shapes[v]:
            n *= s
        return n

    def root(self, v):
        seen = 0
        while v in self.alias and seen < 1000:
            v = self.alias[v]
            seen += 1
        return v
