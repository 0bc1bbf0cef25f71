"""Per-op argument checks, each case compared with PyTorch.

- A huge broadcast index (2**40 rows of stride 0, a few bytes of memory) must be
  refused or answered at once: shapes are checked first (the shape rule), index
  values after, over the index's distinct memory. These run in one child process
  under a watchdog, so a hang fails the test instead of stalling the suite; their
  expected classes are PyTorch's, written down (PyTorch itself tries to allocate
  terabytes on most of them, and spends hours on the scatter of a number).
- Dims of 0-d tensors (PyTorch: dim in [-1, 0] and nothing else), invalid
  attributes, and empty inputs (where PyTorch computes, so do we), run in this
  process against PyTorch: where PyTorch raises, tapegrad raises the same class (or a
  subclass) naming the op; where it returns, tapegrad returns the same values.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as tgF

try:
    import torch
    import torch.nn.functional as torchF
except ImportError:  # the hang tests need no PyTorch; the comparisons skip
    torch = torchF = None

# ================================================================ huge broadcast indices
WATCHDOG_S = 120  # for all the cases together; each answers in well under a second

_CHILD = textwrap.dedent("""
    import json, sys
    import tapegrad as tg
    import tapegrad.nn.functional as F

    def big(v, shape=(2 ** 40, 5)):
        return tg.broadcast_to(tg.tensor(v), shape)

    for name, expr in json.loads(sys.argv[1]):
        try:
            r = eval(expr)
            out = ["ok", [], float(r.sum())]
        except Exception as e:
            out = ["raised", [c.__name__ for c in type(e).__mro__], str(e)]
        print(json.dumps([name] + out), flush=True)
""")

# (id, call in the child, PyTorch's class, a word the message holds; for "ok": the
# sum of the result). big([0]) is a (2**40, 5) int64 index of zeros, big([0], (2**40,))
# its 1-D form.
HUGE = [
    ("gather-output", "tg.gather(tg.ones(3, 5), 0, big([0]))", RuntimeError, "gather"),
    ("gather-shape", "tg.gather(tg.ones(3, 5), 1, big([0]))", RuntimeError, "size of index"),
    ("scatter-shape", "tg.scatter(tg.ones(3, 5), 0, big([0]), tg.ones(3, 5))", RuntimeError,
     "src shape"),
    ("scatter_add-shape", "tg.scatter_add(tg.ones(3, 5), 0, big([0]), tg.ones(3, 5))",
     RuntimeError, "src shape"),
    ("scatter-number", "tg.scatter(tg.ones(3, 5), 0, big([0]), value=2.0)", "ok", 20.0),
    ("scatter-number-bounds", "tg.scatter(tg.ones(3, 5), 0, big([7]), value=2.0)",
     RuntimeError, "out of bounds"),
    ("index_select-not-a-vector", "tg.index_select(tg.ones(3, 5), 0, big([0]))", IndexError,
     "vector"),
    ("index_select-output", "tg.index_select(tg.ones(3, 5), 0, big([0], (2 ** 40,)))",
     RuntimeError, "index_select"),
    ("take_along_dim-output", "tg.take_along_dim(tg.ones(3, 5), big([0]), 0)", RuntimeError,
     "take_along_dim"),
    ("embedding-output", "F.embedding(big([0]), tg.ones(3, 2))", RuntimeError, "embedding"),
    ("one_hot-output", "F.one_hot(big([0]), 3)", RuntimeError, "one_hot"),
    ("one_hot-inferred-classes", "F.one_hot(big([0]))", RuntimeError, "one_hot"),
    ("repeat_interleave-repeats", "tg.repeat_interleave(tg.ones(3), big([0], (2 ** 40,)))",
     RuntimeError, "same size"),
    ("repeat_interleave-counts", "tg.repeat_interleave(big([1]))", RuntimeError, "1-D"),
    # a huge broadcast view of data: nonzero counts over its distinct memory (zeros: an
    # empty answer at once; non-zeros: a result too large, refused); split and unbind
    # refuse 2**39 pieces; random draws and dropout's mask refuse their size
    ("nonzero-zeros", "tg.nonzero(big(0.0, (2 ** 40, 4)))", "ok", 0.0),
    ("argwhere-zeros", "tg.argwhere(big(0.0, (2 ** 40, 4)))", "ok", 0.0),
    ("nonzero-ones", "tg.nonzero(big(1.0, (2 ** 40, 4)))", RuntimeError, "nonzero"),
    ("split-pieces", "tg.split(big(0.0, (2 ** 40, 4)), 2)", RuntimeError, "split"),
    ("unbind-pieces", "tg.unbind(big(0.0, (2 ** 40, 4)))", RuntimeError, "unbind"),
    ("chunk-empty-pieces", "tg.chunk(tg.zeros(0), 2 ** 50)", RuntimeError, "chunk"),
    ("rand_like-size", "tg.rand_like(big(0.0, (2 ** 40, 4)))", RuntimeError, "rand_like"),
    ("dropout-mask", "F.dropout(big(0.0, (2 ** 40, 4)))", RuntimeError, "dropout"),
]


@pytest.fixture(scope="module")
def huge_results():
    """Every HUGE case's answer from one child process; a case missing from it hung
    (or a case before it did: they run in order)."""
    cases = json.dumps([(name, expr) for name, expr, _, _ in HUGE])
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, cases], capture_output=True,
                              text=True, timeout=WATCHDOG_S)
        stdout = proc.stdout
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    return {r[0]: r[1:] for r in map(json.loads, stdout.splitlines())}


# one xdist worker: the child process (huge_results) runs once, not once per worker
@pytest.mark.xdist_group("huge_results")
@pytest.mark.parametrize("name,expr,expected,detail", HUGE, ids=[c[0] for c in HUGE])
def test_huge_broadcast_index_answers_at_once(huge_results, name, expr, expected, detail):
    if name not in huge_results:
        done = [c[0] for c in HUGE if c[0] in huge_results]
        pytest.fail(f"{expr} gave no answer within the {WATCHDOG_S} s watchdog: it hangs "
                    f"(answered before it: {done})")
    kind, classes, value = huge_results[name]
    if expected == "ok":
        assert kind == "ok", f"{expr} raised {classes[0]}: {value}"
        assert value == detail
        return
    assert kind == "raised", f"{expr} returned a result where PyTorch raises"
    assert expected.__name__ in classes, f"{expr}: {classes[0]} is not a {expected.__name__}"
    assert detail in value, f"{expr}: {value!r} does not say {detail!r}"


# ================================================================ compared with PyTorch
def _zero_d(L):
    return L.tensor(5.0)


def _idx(L, v):
    return L.tensor(v)


# (id, the op the message names, call(L, F) with L tapegrad or torch, F its functional)
ZERO_D_DIMS = [
    ("index_select-1", "index_select", lambda L, F: L.index_select(_zero_d(L), 1, _idx(L, [0]))),
    ("index_select-m2", "index_select",
     lambda L, F: L.index_select(_zero_d(L), -2, _idx(L, [0]))),
    ("index_select-two-values", "index_select",
     lambda L, F: L.index_select(_zero_d(L), 0, _idx(L, [0, 0]))),
    ("index_select-bounds", "index_select",
     lambda L, F: L.index_select(_zero_d(L), 0, _idx(L, [1]))),
    ("index_select-0", "", lambda L, F: L.index_select(_zero_d(L), -1, _idx(L, [0]))),
    ("sort-1", "sort", lambda L, F: L.sort(_zero_d(L), dim=1)),
    ("sort-m1", "", lambda L, F: L.sort(_zero_d(L), dim=-1)),
    ("argsort-m2", "argsort", lambda L, F: L.argsort(_zero_d(L), dim=-2)),
    ("topk-1", "topk", lambda L, F: L.topk(_zero_d(L), 1, dim=1)),
    ("topk-k2", "topk", lambda L, F: L.topk(_zero_d(L), 2)),
    ("gather-1", "gather", lambda L, F: L.gather(_zero_d(L), 1, _idx(L, 0))),
    ("gather-bounds", "gather", lambda L, F: L.gather(_zero_d(L), 0, _idx(L, 1))),
    ("scatter-1", "scatter",
     lambda L, F: L.scatter(_zero_d(L), 1, _idx(L, 0), L.tensor(1.0))),
    ("scatter-bounds", "scatter",
     lambda L, F: L.scatter(_zero_d(L), 0, _idx(L, 1), L.tensor(1.0))),
    ("scatter_add-m2", "scatter_add",
     lambda L, F: L.scatter_add(_zero_d(L), -2, _idx(L, 0), L.tensor(1.0))),
    ("take_along_dim-0", "take_along_dim",
     lambda L, F: L.take_along_dim(_zero_d(L), _idx(L, 0), 0)),
    ("flip-1", "flip", lambda L, F: L.flip(_zero_d(L), (1,))),
    ("flip-0", "", lambda L, F: L.flip(_zero_d(L), (0,))),
    ("flatten-1", "flatten", lambda L, F: L.flatten(_zero_d(L), 1)),
    ("flatten-0", "", lambda L, F: L.flatten(_zero_d(L), 0, -1)),
    ("transpose-1", "transpose", lambda L, F: L.transpose(_zero_d(L), 1, 0)),
    ("transpose-0", "", lambda L, F: L.transpose(_zero_d(L), -1, 0)),
    ("movedim-1", "movedim", lambda L, F: L.movedim(_zero_d(L), 1, 0)),
    ("movedim-0", "", lambda L, F: L.movedim(_zero_d(L), 0, -1)),
    ("squeeze-0", "", lambda L, F: L.squeeze(_zero_d(L), 0)),
    ("squeeze-repeated", "squeeze", lambda L, F: L.squeeze(_zero_d(L), (0, -1))),
    ("roll-0", "roll", lambda L, F: L.roll(_zero_d(L), 1, 0)),
    ("roll-flat", "", lambda L, F: L.roll(_zero_d(L), 1)),
    ("unflatten-0", "unflatten", lambda L, F: L.unflatten(_zero_d(L), 0, (1,))),
    ("split-0", "split", lambda L, F: L.split(_zero_d(L), 1, 0)),
    ("chunk-0", "chunk", lambda L, F: L.chunk(_zero_d(L), 1, 0)),
    ("tensor_split-0", "tensor_split", lambda L, F: L.tensor_split(_zero_d(L), 1, 0)),
    ("vector_norm-0", "", lambda L, F: L.linalg.vector_norm(_zero_d(L), dim=0)),
    ("vector_norm-1", "vector_norm", lambda L, F: L.linalg.vector_norm(_zero_d(L), dim=1)),
]

_X = (1, 2, 6, 6)
_W = (3, 2, 3, 3)

ATTRIBUTES = [
    ("conv2d-stride0", "stride", lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), stride=0)),
    ("conv2d-stride-pair", "stride",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), stride=(1, 0))),
    ("conv2d-stride-3", "stride",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), stride=(1, 1, 1))),
    ("conv2d-dilation0", "dilation", lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), dilation=0)),
    ("conv2d-padding-neg", "padding",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), padding=-1)),
    ("conv2d-padding-str", "padding",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), padding="full")),
    ("conv2d-same-strided", "same",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), padding="same", stride=2)),
    ("conv2d-groups0", "groups", lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), groups=0)),
    ("conv2d-groups-float", "groups",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(*_W), groups=1.5)),
    ("conv2d-no-output-channel", "weight",
     lambda L, F: F.conv2d(L.ones(*_X), L.ones(0, 2, 3, 3))),
    ("conv1d-stride0", "stride", lambda L, F: F.conv1d(L.ones(1, 2, 6), L.ones(3, 2, 3), stride=0)),
    ("max_pool2d-kernel0", "max_pool2d", lambda L, F: F.max_pool2d(L.ones(*_X), 0)),
    ("max_pool2d-stride0", "stride", lambda L, F: F.max_pool2d(L.ones(*_X), 2, stride=0)),
    ("max_pool2d-dilation0", "dilation", lambda L, F: F.max_pool2d(L.ones(*_X), 2, dilation=0)),
    ("max_pool2d-padding-over-half", "padding",
     lambda L, F: F.max_pool2d(L.ones(*_X), 2, padding=2)),
    ("max_pool2d-padding-neg", "padding", lambda L, F: F.max_pool2d(L.ones(*_X), 2, padding=-1)),
    ("max_pool2d-kernel-3", "kernel_size", lambda L, F: F.max_pool2d(L.ones(*_X), (2, 2, 2))),
    ("max_pool2d-no-channel", "max_pool2d", lambda L, F: F.max_pool2d(L.ones(1, 0, 4, 4), 2)),
    ("avg_pool2d-divisor0", "divisor_override",
     lambda L, F: F.avg_pool2d(L.ones(*_X), 2, divisor_override=0)),
    ("avg_pool2d-divisor-float", "divisor_override",
     lambda L, F: F.avg_pool2d(L.ones(*_X), 2, divisor_override=1.5)),
    ("avg_pool2d-padding-over-half", "padding",
     lambda L, F: F.avg_pool2d(L.ones(*_X), 2, padding=2)),
    ("adaptive_avg_pool2d-3", "output_size",
     lambda L, F: F.adaptive_avg_pool2d(L.ones(*_X), (2, 2, 2))),
    ("adaptive_avg_pool2d-neg", "output_size",
     lambda L, F: F.adaptive_avg_pool2d(L.ones(*_X), -1)),
    ("adaptive_avg_pool2d-empty-dim", "adaptive_avg_pool2d",
     lambda L, F: F.adaptive_avg_pool2d(L.ones(1, 2, 0, 4), 2)),
    ("one_hot-classes-m2", "one_hot", lambda L, F: F.one_hot(_idx(L, [0, 1]), -2)),
    ("one_hot-empty-infer", "one_hot", lambda L, F: F.one_hot(L.zeros(0, dtype=L.int64), -1)),
    ("one_hot-empty-0", "one_hot", lambda L, F: F.one_hot(L.zeros(0, dtype=L.int64), 0)),
    ("one_hot-bounds", "one_hot", lambda L, F: F.one_hot(_idx(L, [0, 3]), 3)),
    ("embedding-float", "embedding", lambda L, F: F.embedding(L.tensor([0.0]), L.ones(3, 2))),
    ("embedding-bounds", "embedding", lambda L, F: F.embedding(_idx(L, [3]), L.ones(3, 2))),
    ("topk-k-over", "topk", lambda L, F: L.topk(L.ones(3), 4)),
    ("topk-k-float", "topk", lambda L, F: L.topk(L.ones(3), 1.5)),
    ("linspace-neg", "linspace", lambda L, F: L.linspace(0, 1, -1)),
    ("linspace-float", "linspace", lambda L, F: L.linspace(0, 1, 2.5)),
    ("arange-step0", "arange", lambda L, F: L.arange(0, 5, 0)),
    ("arange-sign", "arange", lambda L, F: L.arange(0, 5, -1)),
    ("arange-inf", "arange", lambda L, F: L.arange(0, float("inf"))),
    ("zeros-neg", "zeros", lambda L, F: L.zeros(2, -1)),
    ("full-neg", "full", lambda L, F: L.full((-1,), 1.0)),
    ("eye-neg", "eye", lambda L, F: L.eye(2, -1)),
    ("randperm-neg", "randperm", lambda L, F: L.randperm(-1)),
    ("randint-empty-range", "randint", lambda L, F: L.randint(5, 5, (2,))),
    ("randint-float-high", "randint", lambda L, F: L.randint(0, 2.5, (3,))),
    ("full_like-str", "full_like", lambda L, F: L.full_like(L.ones(2), "a")),
    ("split-sizes", "split", lambda L, F: L.split(L.ones(5), [2, 2])),
    ("split-float", "split", lambda L, F: L.split(L.ones(5), 2.5)),
    ("chunk-0", "chunk", lambda L, F: L.chunk(L.ones(5), 0)),
    ("tensor_split-negative", "", lambda L, F: L.tensor_split(L.arange(5), [1, -1])),
    ("tensor_split-beyond", "", lambda L, F: L.tensor_split(L.arange(5), [-7, 7])),
    ("tensor_split-tensor-indices", "", lambda L, F: L.tensor_split(L.arange(5), _idx(L, [1, 3]))),
    ("tensor_split-tensor-sections", "", lambda L, F: L.tensor_split(L.arange(5), _idx(L, 2))),
    ("tensor_split-float-tensor", "tensor_split",
     lambda L, F: L.tensor_split(L.arange(5), L.tensor([1.0]))),
    ("repeat-neg", "repeat", lambda L, F: L.ones(2).repeat(2, -1)),
    ("repeat_interleave-neg", "repeat_interleave",
     lambda L, F: L.repeat_interleave(L.ones(3), _idx(L, [1, -1, 1]))),
    ("repeat_interleave-2d", "repeat_interleave",
     lambda L, F: L.repeat_interleave(L.ones(4), L.ones(2, 2, dtype=L.int64))),
    ("repeat_interleave-float", "repeat_interleave",
     lambda L, F: L.repeat_interleave(L.ones(2), L.tensor([1.0, 2.0]))),
    ("repeat_interleave-size", "repeat_interleave",
     lambda L, F: L.repeat_interleave(L.ones(3), _idx(L, [1, 2]))),
    ("roll-no-shifts", "roll", lambda L, F: L.roll(L.ones(3), (), ())),
    ("tril-float", "tril", lambda L, F: L.tril(L.ones(3, 3), 1.5)),
    ("pad-odd", "pad", lambda L, F: F.pad(L.ones(3), (1,))),
    ("pad-too-long", "pad", lambda L, F: F.pad(L.ones(3), (1, 1, 1, 1))),
    ("pad-float", "pad", lambda L, F: F.pad(L.ones(3), (1.5, 1))),
    ("pad-value-str", "pad", lambda L, F: F.pad(L.ones(3), (1, 1), value="a")),
    ("pad-mode-none", "pad", lambda L, F: F.pad(L.ones(3), (1, 1), mode=None)),
    ("tensordot-float-dims", "tensordot",
     lambda L, F: L.tensordot(L.ones(2, 3), L.ones(3, 2), dims=1.5)),
    ("clamp-no-bounds", "clamp", lambda L, F: L.clamp(L.ones(3))),
    ("round-float-decimals", "round", lambda L, F: L.round(L.ones(3), decimals=1.5)),
    ("leaky_relu-str", "leaky_relu", lambda L, F: F.leaky_relu(L.ones(3), "a")),
    ("cat-empty", "cat", lambda L, F: L.cat([])),
    ("stack-empty", "stack", lambda L, F: L.stack([])),
    ("permute-repeated", "permute", lambda L, F: L.permute(L.ones(3, 3), (0, 0))),
    ("movedim-repeated", "movedim", lambda L, F: L.movedim(L.ones(3, 3, 3), (0, 1), (1, 1))),
    ("flip-repeated", "flip", lambda L, F: L.flip(L.ones(3, 3), (0, 0))),
    ("sum-repeated", "sum", lambda L, F: L.sum(L.ones(3, 3), dim=(0, -2))),
    ("flatten-order", "flatten", lambda L, F: L.flatten(L.ones(3, 3, 3), 2, 1)),
    ("unique-other-empty-dim", "unique", lambda L, F: L.unique(L.zeros(0, 4), dim=1)),
    ("norm-inf-empty", "norm", lambda L, F: L.norm(L.zeros(0, 4), p=float("inf"), dim=0)),
    ("cross_entropy-smoothing", "label_smoothing",
     lambda L, F: F.cross_entropy(L.ones(2, 3), _idx(L, [0, 1]), label_smoothing=1.5)),
    ("sdpa-dropout", "dropout_p",
     lambda L, F: F.scaled_dot_product_attention(L.ones(1, 2, 3), L.ones(1, 2, 3),
                                                 L.ones(1, 2, 3), dropout_p=1.5)),
]

EMPTY = [
    ("conv2d-batch0", "", lambda L, F: F.conv2d(L.zeros(0, 2, 5, 5), L.ones(3, 2, 3, 3),
                                                L.ones(3), padding=1)),
    ("conv1d-batch0", "", lambda L, F: F.conv1d(L.zeros(0, 2, 5), L.ones(3, 2, 3))),
    ("max_pool2d-batch0", "", lambda L, F: F.max_pool2d(L.zeros(0, 2, 4, 4), 2)),
    ("avg_pool2d-batch0", "", lambda L, F: F.avg_pool2d(L.zeros(0, 2, 4, 4), 2, padding=1)),
    ("adaptive_avg_pool2d-0", "", lambda L, F: F.adaptive_avg_pool2d(L.ones(*_X), 0)),
    ("adaptive_avg_pool2d-0-by-2", "", lambda L, F: F.adaptive_avg_pool2d(L.ones(*_X), (0, 2))),
    ("argmax-nonempty-dim", "", lambda L, F: L.argmax(L.zeros(0, 4), dim=1)),
    ("argmin-keepdim", "", lambda L, F: L.argmin(L.zeros(2, 0), dim=0, keepdim=True)),
    ("argmax-empty-dim", "argmax", lambda L, F: L.argmax(L.zeros(0, 4), dim=0)),
    ("argmax-no-dim", "argmax", lambda L, F: L.argmax(L.zeros(0, 4))),
    ("amax-named-empty-dim", "amax", lambda L, F: L.amax(L.zeros(0, 4), dim=0)),
    ("amax-whole", "amax", lambda L, F: L.amax(L.zeros(0, 4))),
    ("amin-1d", "amin", lambda L, F: L.amin(L.zeros(0), -1)),
    ("batch_norm-train-batch0", "",
     lambda L, F: F.batch_norm(L.zeros(0, 3), L.zeros(3), L.ones(3), training=True)),
    ("repeat_interleave-no-counts", "",
     lambda L, F: L.repeat_interleave(L.zeros(0, dtype=L.int64))),
    ("one_hot-empty", "", lambda L, F: F.one_hot(L.zeros(0, dtype=L.int64), 3)),
]


# ================================================================ dtype rules
# Where PyTorch has no kernel for a dtype, or refuses to mix dtypes, tapegrad raises
# too (the same class, naming the op); the valid integer uses PyTorch accepts keep
# computing (the "-ok" cases). The rules live where each op states its checks:
# contractions (matmul, dot, tensordot, einsum, linear, conv2d) in their shape rule
# (no promotion: one dtype, no bool); elementwise kernels (relu, abs, floor/ceil/
# trunc/round) refuse the dtypes they lack, as they check broadcasting themselves;
# composites (activations, losses, norms, dropout, attention, adaptive pooling) in
# their public function.
def _i(L, v):
    return L.tensor(v)


def _b(L, v):
    return L.tensor(v) > 0


DTYPES = [
    ("gelu-int", "gelu", lambda L, F: F.gelu(_i(L, [1, 2]))),
    ("silu-bool", "silu", lambda L, F: F.silu(_b(L, [1, 0]))),
    ("softplus-int", "softplus", lambda L, F: F.softplus(_i(L, [1, 2]))),
    ("elu-int", "elu", lambda L, F: F.elu(_i(L, [1, -2]))),
    ("relu-bool", "relu", lambda L, F: F.relu(_b(L, [1, 0]))),
    ("relu-int-ok", "", lambda L, F: F.relu(_i(L, [1, -2]))),
    ("abs-bool", "abs", lambda L, F: L.abs(_b(L, [1, 0]))),
    ("abs-int-ok", "", lambda L, F: L.abs(_i(L, [1, -2]))),
    ("floor-bool", "floor", lambda L, F: L.floor(_b(L, [1, 0]))),
    ("ceil-int-ok", "", lambda L, F: L.ceil(_i(L, [1, -2]))),
    ("round-int-decimals", "round", lambda L, F: L.round(_i(L, [1, -2]), decimals=1)),
    ("round-int-ok", "", lambda L, F: L.round(_i(L, [1, -2]))),
    ("sub-bool-float", "sub", lambda L, F: L.sub(_b(L, [1, 0]), L.ones(2))),
    ("rsub-number-bool", "sub", lambda L, F: 1 - _b(L, [1, 0])),
    ("sub-int-ok", "", lambda L, F: L.sub(_i(L, [1, 2]), _i(L, [3, 1]))),
    ("argmax-bool", "argmax", lambda L, F: L.argmax(_b(L, [1, 0]))),
    ("topk-bool", "topk", lambda L, F: L.topk(_b(L, [1, 0]), 1)),
    ("trace-bool", "trace", lambda L, F: L.trace(_b(L, [[1, 0], [0, 1]]))),
    ("trace-int-ok", "", lambda L, F: L.trace(_i(L, [[1, 2], [3, 4]]))),
    ("matmul-float-int", "matmul", lambda L, F: L.matmul(L.ones(2, 2), _i(L, [[1, 2], [3, 4]]))),
    ("matmul-f32-f64", "matmul",
     lambda L, F: L.matmul(L.ones(2, 2), L.ones(2, 2, dtype=L.float64))),
    ("matmul-operator-mixed", "matmul", lambda L, F: L.ones(2, 2) @ _i(L, [[1, 2], [3, 4]])),
    ("matmul-bool", "matmul", lambda L, F: L.matmul(_b(L, [[1, 0]]), _b(L, [[1], [0]]))),
    ("matmul-int-ok", "", lambda L, F: L.matmul(_i(L, [[1, 2]]), _i(L, [[3], [4]]))),
    ("dot-mixed", "dot", lambda L, F: L.dot(L.ones(2), _i(L, [1, 2]))),
    ("tensordot-mixed", "tensordot", lambda L, F: L.tensordot(L.ones(2, 2), _i(L, [[1, 2]]).T, 1)),
    ("einsum-mixed", "einsum", lambda L, F: L.einsum("ij,jk->ik", L.ones(2, 2), _i(L, [[1], [2]]))),
    ("einsum-int-ok", "", lambda L, F: L.einsum("ij,jk->ik", _i(L, [[1, 2]]), _i(L, [[1], [2]]))),
    ("linear-int-bias", "linear",
     lambda L, F: F.linear(L.ones(2, 3), L.ones(4, 3), _i(L, [1] * 4))),
    ("conv2d-int-weight", "conv2d",
     lambda L, F: F.conv2d(L.ones(1, 1, 3, 3), L.ones(1, 1, 2, 2, dtype=L.int64))),
    ("batch_norm-int", "batch_norm",
     lambda L, F: F.batch_norm(_i(L, [[1, 2], [3, 4]]), L.zeros(2), L.ones(2))),
    ("batch_norm-int-stats", "batch_norm",
     lambda L, F: F.batch_norm(L.ones(2, 2), _i(L, [0, 0]), L.ones(2))),
    ("layer_norm-int", "layer_norm", lambda L, F: F.layer_norm(_i(L, [[1, 2]]), (2,))),
    ("bce-int-target", "binary_cross_entropy",
     lambda L, F: F.binary_cross_entropy(L.full((2,), 0.5), _i(L, [1, 0]))),
    ("bce-nan-target", "binary_cross_entropy",
     lambda L, F: F.binary_cross_entropy(L.full((2,), 0.5), L.tensor([float("nan"), 1.0]))),
    ("bce-target-2", "binary_cross_entropy",
     lambda L, F: F.binary_cross_entropy(L.full((2,), 0.5), L.tensor([2.0, 1.0]))),
    ("bce_logits-int", "binary_cross_entropy_with_logits",
     lambda L, F: F.binary_cross_entropy_with_logits(_i(L, [1, 0]), L.ones(2))),
    ("nll_loss-int-input", "nll_loss", lambda L, F: F.nll_loss(_i(L, [[0, 1]]), _i(L, [1]))),
    ("nll_loss-int32-target", "nll_loss",
     lambda L, F: F.nll_loss(L.zeros(1, 2), L.tensor([1], dtype=L.int32))),
    ("cross_entropy-uint8-ok", "",
     lambda L, F: F.cross_entropy(L.zeros(1, 2), L.tensor([1], dtype=L.uint8))),
    ("l1_loss-bool", "l1_loss", lambda L, F: F.l1_loss(_b(L, [1, 0]), _b(L, [0, 0]))),
    ("dropout-int", "dropout", lambda L, F: F.dropout(_i(L, [1, 2]), 0.5)),
    ("dropout-int-eval-ok", "", lambda L, F: F.dropout(_i(L, [1, 2]), 0.5, training=False)),
    ("sdpa-mixed", "scaled_dot_product_attention",
     lambda L, F: F.scaled_dot_product_attention(L.ones(1, 2, 3), L.ones(1, 2, 3),
                                                 L.ones(1, 2, 3, dtype=L.int64))),
    ("adaptive_avg_pool2d-int", "adaptive_avg_pool2d",
     lambda L, F: F.adaptive_avg_pool2d(L.ones(1, 1, 4, 4, dtype=L.int64), 2)),
]


def _nonfinite(*shape):
    a = np.random.default_rng(0).standard_normal(shape)
    a.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    return a


# both compute: the values must be PyTorch's (NaN equal to NaN)
VALUES = [
    ("adaptive_avg_pool2d-nonfinite", "",  # NaN/inf stay in their bins
     lambda L, F: F.adaptive_avg_pool2d(L.tensor(_nonfinite(1, 2, 6, 6)), 3)),
    ("adaptive_avg_pool2d-nonfinite-uneven", "",
     lambda L, F: F.adaptive_avg_pool2d(L.tensor(_nonfinite(2, 7, 5)), (3, 2))),
    ("slogdet-nan", "", lambda L, F: L.linalg.slogdet(L.tensor(_nonfinite(3, 3)))),
]


def _outcome(call, L, F):
    try:
        return "ok", call(L, F)
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return "raised", e


def _arrays(r):
    """A result as a list of NumPy arrays (a tuple result: one per entry)."""
    items = list(r) if isinstance(r, (tuple, list)) else [r]
    out = []
    for x in items:
        x = x.detach()
        out.append(x.numpy() if torch is not None and isinstance(x, torch.Tensor)
                   else np.asarray(x))
    return out


def _check_like_torch(call, word):
    kind, got = _outcome(call, tg, tgF)
    want_kind, want = _outcome(call, torch, torchF)
    if want_kind == "raised":
        assert kind == "raised", f"returned a result where PyTorch raises {want!r}"
        cls = type(want)
        if cls is NotImplementedError and "not implemented for" in str(want):
            cls = RuntimeError  # a dtype PyTorch's kernel lacks: its base class suffices
        assert isinstance(got, cls), \
            f"raised {type(got).__name__} ({got}) where PyTorch raises {type(want).__name__}"
        assert word in str(got), f"{got!r} does not name {word!r}"
        return
    assert kind == "ok", f"raised {got!r} where PyTorch returns a result"
    for a, b in zip(_arrays(got), _arrays(want), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b)


needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")


@needs_torch
@pytest.mark.parametrize("word,call", [c[1:] for c in ZERO_D_DIMS],
                         ids=[c[0] for c in ZERO_D_DIMS])
def test_dims_of_0d_tensors_like_torch(word, call):
    _check_like_torch(call, word)


@needs_torch
@pytest.mark.parametrize("word,call", [c[1:] for c in ATTRIBUTES],
                         ids=[c[0] for c in ATTRIBUTES])
def test_attributes_like_torch(word, call):
    _check_like_torch(call, word)


@needs_torch
@pytest.mark.parametrize("word,call", [c[1:] for c in DTYPES], ids=[c[0] for c in DTYPES])
def test_dtype_rules_like_torch(word, call):
    _check_like_torch(call, word)


@needs_torch
@pytest.mark.parametrize("word,call", [c[1:] for c in VALUES], ids=[c[0] for c in VALUES])
def test_nonfinite_values_like_torch(word, call):
    _check_like_torch(call, word)


def test_sign_of_nan_is_nan_by_design():
    """PyTorch's sign(NaN) is 0; tapegrad keeps NumPy's and JAX's NaN, so a NaN is
    never hidden (the sweep's VALUES_OK names this difference)."""
    r = tg.sign(tg.tensor([np.nan, -np.inf, np.inf, -2.0, 0.0]))
    np.testing.assert_array_equal(r.numpy(), [np.nan, -1.0, 1.0, -1.0, 0.0])


# ================================================================ tensor arguments
# Every tensor argument, not only the first, is checked by the public function
# (ops/guard.py): None, a string or a list where a Tensor belongs is PyTorch's
# TypeError naming the function and the argument; a complex array too.
ARGUMENTS = [
    ("linear-weight-None", "tg.linear(x, None)", "'weight'"),
    ("conv1d-weight-str", "tg.conv1d(tg.ones(1, 2, 5), 'abc')", "'weight'"),
    ("mse_loss-target-list", "F.mse_loss(x, ['a', 'b'])", "'target'"),
    ("cross_entropy-target-None", "F.cross_entropy(x, None)", "'target'"),
    ("cat-element-str", "tg.cat([x, 'abc'])", "element 1"),
    ("stack-None", "tg.stack(None)", "'tensors'"),
    ("split-None", "tg.split(None, 2)", "'tensor'"),
    ("tensordot-b-None", "tg.tensordot(x, None, 1)", "'b'"),
    ("sdpa-value-None", "F.scaled_dot_product_attention(x, x, None)", "'value'"),
    ("batch_norm-running_var-str", "F.batch_norm(x, tg.zeros(4), 'abc')", "'running_var'"),
    ("add-other-complex", "tg.add(x, np.ones((3, 4), complex))", "complex"),
    ("zeros_like-complex", "tg.zeros_like(np.ones(2, complex))", "complex"),
    ("transpose-complex", "tg.swapaxes(np.ones((2, 2), complex), 0, 1)", "complex"),
    ("from_dlpack-None", "tg.from_dlpack(None)", "DLPack"),
]


@pytest.mark.parametrize("expr,word", [c[1:] for c in ARGUMENTS], ids=[c[0] for c in ARGUMENTS])
def test_tensor_arguments_are_checked(expr, word):
    x = tg.ones(3, 4)
    with pytest.raises(TypeError) as e:
        eval(expr, {"tg": tg, "F": tgF, "np": np, "x": x})
    fn = expr.split("(")[0].split(".")[-1]
    assert str(e.value).startswith(fn.replace("swapaxes", "transpose") + ":"), str(e.value)
    assert word in str(e.value)


def test_numbers_and_arrays_next_to_tensors_still_work():
    x = tg.ones(3)
    assert tg.add(x, 2).tolist() == [3.0] * 3
    assert tg.add(np.float64(2.0), x).tolist() == [3.0] * 3
    assert tg.where(x > 0, 0.0, x).tolist() == [0.0] * 3
    assert tg.mul(x, np.full(3, 2.0)).tolist() == [2.0] * 3
    assert tg.sub(2, x).tolist() == [1.0] * 3
    # batch_norm's running statistics may be None (training), as PyTorch's
    assert tuple(tgF.batch_norm(tg.ones(2, 3), None, None, training=True).shape) == (2, 3)


@pytest.mark.parametrize("name,call,inner", [
    ("layer_norm", lambda: tgF.layer_norm(tg.broadcast_to(tg.zeros(1), (2 ** 40, 4)), (4,)),
     "not enough memory"),
    ("rand_like", lambda: tg.rand_like(tg.tensor([1, 2])), "floating"),
    ("contiguous", lambda: tg.contiguous(tg.broadcast_to(tg.zeros(1), (2 ** 40, 4))),
     "not enough memory"),
    ("conv1d", lambda: tgF.conv1d(tg.ones(1, 2, 5), tg.ones(3, 2, 3), tg.ones(6)), "bias"),
    ("conv1d", lambda: tgF.conv1d(tg.ones(1, 2, 5), tg.ones(3, 2, 3), padding=-1), "padding"),
])
def test_errors_inside_a_composite_name_the_function_called(name, call, inner):
    """A composite fails in the ops it is made of; the error names the function the
    user called first (the same class), and keeps what the inner op said."""
    with pytest.raises((RuntimeError, TypeError)) as e:
        call()
    assert str(e.value).startswith(name + ":"), str(e.value)
    assert inner in str(e.value)


@needs_torch
@pytest.mark.parametrize("word,call", [c[1:] for c in EMPTY], ids=[c[0] for c in EMPTY])
def test_empty_inputs_like_torch(word, call):
    _check_like_torch(call, word)


@needs_torch
@pytest.mark.parametrize("op", ["conv2d", "max_pool2d", "avg_pool2d"])
def test_empty_batch_gradients_like_torch(op):
    """An empty batch differentiates: zero weight and bias gradients, an empty input
    gradient (max_pool2d's backward raised)."""
    grads = []
    for L, F in ((tg, tgF), (torch, torchF)):
        x = L.zeros(0, 2, 5, 5, requires_grad=True)
        w, b = L.ones(3, 2, 3, 3, requires_grad=True), L.ones(3, requires_grad=True)
        if op == "conv2d":
            y = F.conv2d(x, w, b, padding=1)
        else:
            y = getattr(F, op)(x, 2)
        y.sum().backward()
        grads.append([t.grad for t in ((x, w, b) if op == "conv2d" else (x,))])
    for a, b in zip(*grads, strict=True):
        np.testing.assert_array_equal(_arrays(a)[0], _arrays(b)[0])


_BOOL_SUBS = {"a - b": lambda a, b: a - b, "b - a": lambda a, b: b - a,
              "1.0 - a": lambda a, b: 1.0 - a, "a - 1": lambda a, b: a - 1}


@pytest.mark.parametrize("expr", list(_BOOL_SUBS))
def test_bool_subtraction_by_operator_is_refused_like_torch(expr):
    """The `-` operator with a bool operand and another dtype: promotion would hide
    the bool, so dispatch runs sub's dtype rule on the mixed operands first."""
    import torch
    for mod in (tg, torch):
        a = mod.tensor([True, False])
        b = mod.tensor([1.0, 2.0])
        with pytest.raises(RuntimeError, match="[Ss]ubtraction.*bool"):
            _BOOL_SUBS[expr](a, b)
