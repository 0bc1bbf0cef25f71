"""Per-op argument checks (issue 16), each case compared with PyTorch.

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
    ("repeat_interleave-no-counts", "", lambda L, F: L.repeat_interleave(L.zeros(0, dtype=L.int64))),
    ("one_hot-empty", "", lambda L, F: F.one_hot(L.zeros(0, dtype=L.int64), 3)),
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
