"""``tg.viz.to_dot``: the recorded graph behind a tensor, as Graphviz DOT.

>>> import tapegrad as tg
>>> x = tg.tensor([1.0, 2.0], requires_grad=True)
>>> print(tg.viz.to_dot((x * x).sum()))  # doctest: +ELLIPSIS
digraph tapegrad {
...
"""
from .tensor import Tensor

__all__ = ["to_dot"]


def _q(s):
    """A quoted DOT string; newlines become DOT's line breaks."""
    s = str(s).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + s.replace("\n", "\\n") + '"'


def _fmt_shape(shape):
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _fmt_attrs(attrs, limit=40):
    if not attrs:
        return ""
    s = ", ".join(f"{k}={v!r}" for k, v in attrs.items())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def to_dot(tensor, name="tapegrad", show_attrs=True):
    """Graphviz DOT source of the record that produced ``tensor`` (or a list of them).

    One box per recorded op (its name, backward name, attrs), one ellipse per leaf
    tensor (shape, dtype), arrows in the forward direction. Render with
    ``dot -Tsvg``. A tensor without a record gives a graph with just that tensor.
    """
    roots = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    for r in roots:
        if not isinstance(r, Tensor):
            raise TypeError(f"to_dot: expected a Tensor, got {type(r).__name__}")
    lines = [f"digraph {name} {{", "  rankdir=TB;", '  node [fontname="monospace"];']
    ids = {}

    def ident(obj, prefix):
        key = id(obj)
        if key not in ids:
            ids[key] = f"{prefix}{len(ids)}"
        return ids[key]

    keep = []  # hold objects so their ids stay unique while we walk
    seen = set()
    stack = []
    for k, r in enumerate(roots):
        out_id = f"out{k}"
        label = _q("output " + _fmt_shape(r.shape) + " " + r.dtype.name)
        lines.append(f"  {out_id} [shape=note, label={label}];")
        if r.grad_fn is not None:
            nid = ident(r.grad_fn, "op")
            lines.append(f"  {nid} -> {out_id};")
            stack.append(r.grad_fn)
        else:
            lid = ident(r, "leaf")
            lines.append(f"  {lid} [shape=ellipse, label={_q(_leaf_label(r))}];")
            lines.append(f"  {lid} -> {out_id};")
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        nid = ident(node, "op")
        label = f"{node.op.name}\n{node.name()}"
        attrs = _fmt_attrs(node.attrs) if show_attrs else ""
        if attrs:
            label += "\n" + attrs
        lines.append(f"  {nid} [shape=box, style=filled, fillcolor=lightblue, label={_q(label)}];")
        for i, e in enumerate(node.edges):
            argname = node.op.args[i] if i < len(node.op.args) else f"#{i}"
            if e is None:
                continue
            if type(e) is tuple:
                src, idx = e
                sid = ident(src, "op")
                keep.append(src)
                lbl = argname if src.op.nout == 1 else f"{argname} <- out{idx}"
                lines.append(f"  {sid} -> {nid} [label={_q(lbl)}];")
                if id(src) not in seen:
                    stack.append(src)
            else:
                lid = ident(e, "leaf")
                keep.append(e)
                if isinstance(e, Tensor) and id(e) not in seen:
                    seen.add(id(e))
                    lines.append(f"  {lid} [shape=ellipse, label={_q(_leaf_label(e))}];")
                lines.append(f"  {lid} -> {nid} [label={_q(argname)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _leaf_label(t):
    kind = "leaf" if t.requires_grad else "tensor"
    return f"{kind} {_fmt_shape(t.shape)} {t.dtype.name}"

