"""What every registered op supports, read from the registry and from the code that
uses it: the op reference of the documentation and ``python -m tapegrad.ops_registry``.

One row per op (``rows()``), with these columns:

``kind``
    the OpDef's kind (basic, workspace, dynamic, view).
``dtypes``
    the input dtypes its samples exercise: the float64 samples and, for an op with a
    floating input, the float32 ones (the registry tests run both), and bfloat16 and
    float16 for one with a PyTorch oracle too (the low-precision registry tests run its
    float32 samples in both against PyTorch in the same dtype).
``grad``
    gradient orders the registry tests check against finite differences: ``-`` not
    differentiable, ``1`` (gradcheck), ``2`` (gradcheck and gradgradcheck: a sample
    small enough for the second order), ``0`` differentiable but no sample with a
    gradient. Adjoints are written with ops and record like any call, so orders above
    the second take the path the second does (not checked here).
``saves``
    what a recorded call keeps for its adjoint (``OpDef.saves``): ``per input`` (only
    what the gradients of the inputs that require grad read: declared, or derived
    from an elementwise op's expression), ``all`` (the default: what every input's
    gradient reads, kept whichever inputs require grad), ``one input`` (the same, for
    an op with one input), ``nothing``, ``-`` (not differentiable, or a composite:
    its ops keep their own).
``jvp``
    forward mode: ``rule`` (declared), ``derived`` (an elementwise op's, from its vjp),
    ``composite`` (its ops' rules), ``none`` (forward mode raises), ``-`` (not
    differentiable).
``vmap``
    batching: ``rule`` (declared), ``derived`` (elementwise and broadcasting),
    ``composite`` (its ops' rules), ``loop`` (a loop over the batch, with a warning).
``out``
    whether the kernel takes ``out=`` (writes into the caller's memory).
``compile``
    ``replays`` when ``tg.compile`` replays a program of the op (its first float64
    sample, forward and backward), ``eager`` when such a program runs eagerly (it draws
    random numbers, makes tensors outside the ops...); ``?`` when not probed.
``onnx``
    ``tg.onnx.support()``'s word for it: ``lowered`` (its ``OpDef.onnx`` lowering),
    ``decomposed`` (a composite: exported as the ops it is made of), ``no`` (it cannot
    export; ``onnx_reason`` says why).
``export``
    the frameworks ``tapegrad.interop`` exports it to: ``torch_ops`` exports every op,
    ``jax_ops`` all but the dynamic ones.
``declared``
    ``file:line`` (relative to the repository) of its declaration: the statement that
    registered it (``OpDef.declared_at``).
"""
import inspect
import os
import warnings

import numpy as np

from .. import dtypes as _dt
from ..compiler import compile as tg_compile
from ..dispatch import bind
from ..onnx import support as onnx_support
from ..ops import tensor
from ..ops_registry import list_ops
from ..ops_registry.rules import diagonal
from ..tensor import Tensor
from ..vmap import batching_rule_of

__all__ = ["COLUMNS", "rows", "compile_replays", "markdown_table", "text_table",
           "summary", "markdown_summary"]

COLUMNS = ("op", "kind", "dtypes", "grad", "saves", "jvp", "vmap", "out", "compile", "onnx",
           "export", "declared")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# gradgradcheck's size limit in tests/ops/test_registry.py (GRADGRAD_MAX_ELEMENTS)
GRADGRAD_MAX_ELEMENTS = 64


def _arrays(args):
    return [a for a in args if isinstance(a, np.ndarray)]


def _dtypes(op, f64):
    seen = {a.dtype for s in f64 for a in _arrays(s.args)}
    if any(a.dtype.kind == "f" for s in f64 for a in _arrays(s.args)):
        seen |= {a.dtype for s in op.samples(np.float32) for a in _arrays(s.args)}
        if op.torch is not None:
            seen |= {_dt.bfloat16.np, _dt.F16}
    return ", ".join(sorted(str(d) for d in seen)) or "-"


def _grad_sample(op, s):
    return op.differentiable and s.grad and any(a.dtype.kind == "f" for a in _arrays(s.args))


def _grad_orders(op, f64):
    if not op.differentiable:
        return "-"
    grads = [s for s in f64 if _grad_sample(op, s)]
    if not grads:
        return "0"
    small = any(sum(a.size for a in _arrays(s.args)) <= GRADGRAD_MAX_ELEMENTS for s in grads)
    return "2" if small else "1"


def _saves(op):
    if not op.differentiable or op.composite is not None:
        return "-"
    if op.save_for is not None:
        return "per input"
    if not op.save_idx and not op.save_out:
        return "nothing"
    return "one input" if len(op.args) == 1 else "all"


def _jvp(op):
    if not op.differentiable:
        return "-"
    if op.composite is not None:
        return "composite"
    if op.jvp is None:
        return "none"
    return "derived" if op.jvp is diagonal else "rule"


def _vmap(op):
    if op.vmap is not None:
        return "rule"
    if op.composite is not None:
        return "composite"
    return "derived" if batching_rule_of(op) is not None else "loop"


def _declared(op):
    if op.declared_at is not None:
        path, line = op.declared_at
    else:  # an OpDef put together without register(): where its functions are
        fn = op.composite or op.infer or op.kernel
        try:
            path = inspect.getsourcefile(inspect.unwrap(fn))
            line = inspect.getsourcelines(inspect.unwrap(fn))[1]
        except (TypeError, OSError):  # a builtin (np.add...)
            return "-"
    path = os.path.relpath(path, _ROOT) if path.startswith(_ROOT + os.sep) else path
    return f"{path}:{line}"


def compile_replays(op, sample):
    """Whether ``tg.compile`` replays a program calling ``op`` on ``sample`` (forward,
    and backward where the sample takes a gradient), as tests/compile's registry test
    runs it: captured on the first call, replayed on the second."""
    grad = _grad_sample(op, sample)

    def fn(*ts):
        out = bind(op, *ts, **sample.attrs)
        outs = out if isinstance(out, tuple) else (out,)
        if grad:
            loss = None
            for o in outs:
                if isinstance(o, Tensor) and o.requires_grad:
                    loss = o.sum() if loss is None else loss + o.sum()
            if loss is not None:
                loss.backward()
        return tuple(o.detach() if isinstance(o, Tensor) else o for o in outs)

    def args():
        out = []
        for a in sample.args:
            if isinstance(a, np.ndarray):
                t = tensor(a.copy())
                if grad and a.dtype.kind == "f":
                    t.requires_grad_()
                out.append(t)
            else:
                out.append(a)
        return out

    c = tg_compile(fn, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c(*args())
        c(*args())
    return c.stats()["replays"] == 1


def rows(ops=None, probe_compile=True):
    """One dict per op (``COLUMNS``, and ``onnx_reason``: why it cannot export, or
    ``""``), in registration order; ``ops``: the OpDefs (all
    registered ones by default); ``probe_compile=False`` leaves the compile column
    ``?`` (the probe captures one program per op: tens of seconds for the registry)."""
    out = []
    onnx = onnx_support()
    for op in (list_ops() if ops is None else ops):
        f64 = list(op.samples(np.float64)) if op.samples is not None else []
        if not probe_compile or not f64:
            comp = "?"
        else:
            try:
                comp = "replays" if compile_replays(op, f64[0]) else "eager"
            except Exception:  # the probe itself failed: not claimed either way
                comp = "?"
        out.append({
            "op": op.name, "kind": op.kind, "dtypes": _dtypes(op, f64),
            "grad": _grad_orders(op, f64), "saves": _saves(op), "jvp": _jvp(op), "vmap": _vmap(op),
            "out": "yes" if op.takes_out else "no", "compile": comp,
            "onnx": onnx[op.name] if onnx[op.name] in ("lowered", "decomposed") else "no",
            "export": "torch" if op.kind == "dynamic" else "torch, jax",
            "declared": _declared(op), "onnx_reason": _reason(onnx[op.name])})
    return out


def _reason(word):
    return "" if word in ("lowered", "decomposed") else word


def markdown_table(table):
    """The rows as a Markdown table (the op reference page)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in table:
        cells = [f"`{r[c]}`" if c in ("op", "declared") else r[c] for c in COLUMNS]
        if r.get("onnx_reason"):  # why it cannot export: shown on hover
            cells[COLUMNS.index("onnx")] = f'<span title="{_html(r["onnx_reason"])}">no</span>'
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _html(text):
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def text_table(table):
    """The rows as aligned plain text (``python -m tapegrad.ops_registry``)."""
    widths = [max(len(c), *(len(r[c]) for r in table)) for c in COLUMNS]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*COLUMNS), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*(r[c] for c in COLUMNS)) for r in table]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def summary(table):
    """{column: {value: number of ops}} for the columns with few values (the
    capability matrix)."""
    out = {}
    for c in ("kind", "grad", "saves", "jvp", "vmap", "out", "compile", "onnx", "export"):
        counts = {}
        for r in table:
            counts[r[c]] = counts.get(r[c], 0) + 1
        out[c] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def markdown_summary(table):
    """The capability matrix as Markdown: per column, how many ops have each value."""
    lines = [f"{len(table)} ops in the table.", ""]
    for c, counts in summary(table).items():
        lines += [f"### {c}", "", "| value | ops | share |", "| --- | --- | --- |"]
        lines += [f"| {v} | {n} | {100 * n / len(table):.0f}% |" for v, n in counts.items()]
        lines.append("")
    reasons = {}
    for r in table:
        if r.get("onnx_reason"):
            reasons.setdefault(r["onnx_reason"], []).append(r["op"])
    if reasons:
        lines += ["### Why an op cannot export to ONNX", "", "| reason | ops |", "| --- | --- |"]
        lines += [f"| {why} | {', '.join(f'`{n}`' for n in names)} |"
                  for why, names in sorted(reasons.items(), key=lambda kv: -len(kv[1]))]
        lines.append("")
    return "\n".join(lines)
