"""The op reference (``tapegrad.testing.capabilities``, ``python -m
tapegrad.ops_registry``): each column says what the code does.

The claims are checked against the code they describe: the ONNX column is
``tg.onnx.support()`` (tests/compile/test_onnx_registry.py runs the lowerings), the
compile probe agrees with tg.compile's stats, ``loop`` ops have no
batching rule, ops without a forward-mode rule refuse forward mode, declarations point
at the line that registers the op."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import functional as F
from tapegrad.dispatch import bind
from tapegrad.testing import capabilities as cap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = tg.ops_registry.list_ops()
TABLE = {r["op"]: r for r in cap.rows(probe_compile=False)}


def _first(op, dtype=np.float64):
    return list(op.samples(dtype))[0]


def test_one_row_per_op_with_every_column():
    assert list(TABLE) == [op.name for op in OPS]
    for r in TABLE.values():
        assert tuple(r) == cap.COLUMNS + ("onnx_reason",)
        assert all(isinstance(r[c], str) and r[c] for c in cap.COLUMNS)


def test_columns_follow_the_registry():
    for op in OPS:
        r = TABLE[op.name]
        assert r["kind"] == op.kind
        assert r["out"] == ("yes" if op.takes_out else "no")
        assert (r["grad"] == "-") == (not op.differentiable)
        assert (r["jvp"] == "-") == (not op.differentiable)
        assert (r["export"] == "torch") == (op.kind == "dynamic")


def test_known_rows():
    assert TABLE["add"]["onnx"] == "lowered" and TABLE["add"]["jvp"] == "rule"
    assert TABLE["gelu"]["jvp"] == "derived"
    assert TABLE["cross_entropy"]["onnx"] == "decomposed"
    assert TABLE["randn"]["onnx"] == "no" and "random" in TABLE["randn"]["onnx_reason"]
    assert TABLE["cross_entropy"]["vmap"] == "composite"
    assert TABLE["eq"]["grad"] == "-"
    assert "int64" in TABLE["cross_entropy"]["dtypes"]
    assert TABLE["matmul"]["dtypes"] == "bfloat16, float16, float32, float64"


@pytest.mark.parametrize("name", ["add", "conv2d", "eq", "cross_entropy", "nonzero"])
def test_declared_is_the_registering_line(name):
    path, line = TABLE[name]["declared"].rsplit(":", 1)
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    text = lines[int(line) - 1]
    # the statement that registers it names it
    assert name in text.lower(), text


def test_grad_orders_follow_the_samples():
    small = cap.GRADGRAD_MAX_ELEMENTS
    for op in OPS:
        g = TABLE[op.name]["grad"]
        if g == "2":
            assert any(s.grad and sum(a.size for a in s.args if isinstance(a, np.ndarray))
                       <= small for s in op.samples(np.float64))
    # the constant agrees with the registry test's gradgradcheck limit
    sys.path.insert(0, os.path.join(ROOT, "tests", "ops"))
    try:
        import test_registry
    finally:
        sys.path.pop(0)
    assert test_registry.GRADGRAD_MAX_ELEMENTS == small


def test_loop_ops_have_no_batching_rule():
    from tapegrad.vmap import batching_rule_of
    for op in OPS:
        assert (TABLE[op.name]["vmap"] == "loop") == (batching_rule_of(op) is None)


def _refuses_forward_mode(op):
    s = next(s for s in op.samples(np.float64)
             if any(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in s.args))
    args = [tg.tensor(a) if isinstance(a, np.ndarray) else a for a in s.args]
    k = next(i for i, a in enumerate(s.args) if isinstance(a, np.ndarray) and a.dtype.kind == "f")

    def f(x):
        full = list(args)
        full[k] = x
        out = bind(op, *full, **s.attrs)
        return out[0] if isinstance(out, tuple) else out
    try:
        F.jvp(f, (args[k],), (tg.ones_like(args[k]),))
    except RuntimeError as e:
        return "forward-mode" in str(e)
    return False


def test_ops_without_forward_mode_refuse_it():
    for name in [n for n, r in TABLE.items() if r["jvp"] == "none"]:
        assert _refuses_forward_mode(tg.ops_registry.get(name)), name
    # an op declared without a jvp (not elementwise): the row says so, and it refuses
    from tapegrad.ops_registry import Sample, TensorSpec, register, unregister
    op = register(name="docs_test_no_jvp", kernel=lambda x: x[::-1].copy(),
                  infer=lambda x: TensorSpec(x.shape, x.dtype),
                  vjp=lambda ctx, g: (g.flip(0),),
                  samples=lambda dtype=np.float64: [Sample((np.arange(3.0, dtype=dtype),))],
                  reference=lambda x: x[::-1].copy())
    try:
        assert cap.rows([op], probe_compile=False)[0]["jvp"] == "none"
        assert _refuses_forward_mode(op)
    finally:
        unregister("docs_test_no_jvp")


def test_compile_probe_agrees_with_compile():
    assert cap.compile_replays(tg.ops_registry.get("add"), _first(tg.ops_registry.get("add")))
    tensor = tg.ops_registry.get("tensor")  # (made from data: runs eagerly)
    assert not cap.compile_replays(tensor, _first(tensor))
    rows = {r["op"]: r for r in cap.rows([tg.ops_registry.get("tanh"), tensor])}
    assert rows["tanh"]["compile"] == "replays" and rows["tensor"]["compile"] == "eager"


def test_onnx_column_is_onnx_support():
    support = tg.onnx.support()
    for name, r in TABLE.items():
        word = support[name]
        if word in ("lowered", "decomposed"):
            assert r["onnx"] == word and r["onnx_reason"] == ""
        else:
            assert r["onnx"] == "no" and r["onnx_reason"] == word
    md = cap.markdown_table([TABLE["lgamma"]])
    assert 'title="no ONNX operator' in md
    assert "`lgamma`" in cap.markdown_summary([TABLE["lgamma"], TABLE["add"]])


def test_command_line():
    out = subprocess.run([sys.executable, "-m", "tapegrad.ops_registry", "--no-compile",
                          "add", "conv2d"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0].split() == list(cap.COLUMNS)
    assert [line.split()[0] for line in out[2:]] == ["add", "conv2d"]
    md = subprocess.run([sys.executable, "-m", "tapegrad.ops_registry", "--no-compile",
                         "--summary", "add"], cwd=ROOT, capture_output=True, text=True,
                        check=True).stdout
    assert md.startswith("1 ops in the table.") and "### onnx" in md


def test_summary_sums_the_columns():
    table = list(TABLE.values())
    for col, counts in cap.summary(table).items():
        assert sum(counts.values()) == len(table)
        for value, n in counts.items():
            assert n == sum(r[col] == value for r in table)
