"""Every public op against a shared catalogue of bad inputs, each case compared with PyTorch.

Every public op function (`tapegrad.ops.__all__`, plus the names of
`tg.nn.functional` that are not the same function) gets one valid call (the `VALID`
table below, written for both libraries) and its PyTorch counterpart (`torch.X`, or
`torch.nn.functional.X` for the nn names, else the Tensor method `torch.Tensor.X`, else
an explicit entry in `COUNTERPART`; names with none are listed in `SKIP`, with a
reason). From the valid call, the catalogue builds cases with one argument replaced:

- at each tensor argument: `None`, a complex NumPy array, a string, a list of strings,
  a bool and an int64 tensor where a float one is expected, NaN/Inf values (these
  must compute where PyTorch computes), a shape that does not broadcast (ops with
  several tensor inputs), and the huge broadcast view
  `tg.broadcast_to(tg.zeros(1), (2**40, 4))`;
- at a dim argument: a dim out of range, and a dim of 1 on a 0-d input;
- at an integer (or tuple of integers) argument: -3 and 0; at a float one: -1.0.

Each case runs in PyTorch first, then in tapegrad, and is classified:

- ok: both raise, and tapegrad's exception is a ValueError/TypeError/IndexError/
  RuntimeError/NotImplementedError whose message names the op (or the op it is an
  alias of); or both compute the same values (`assert_allclose`, NaN equal to NaN;
  random ops: the same shape);
- "garbage" (silent garbage): PyTorch raises but tapegrad returns a value, or both
  compute but the values (or shapes) differ;
- "weak" (weak error): tapegrad raises another class (bare MemoryError,
  AttributeError, ZeroDivisionError, KeyError, a Numba error...), or a clean class
  whose message does not name the op;
- "refused": tapegrad raises where PyTorch computes (ok only where `REFUSAL_OK` lists
  the case with its reason: a refusal by design; likewise `VALUES_OK` lists the values
  that differ by design, with the rule tapegrad follows);
- "hang": a huge-size case that gave no answer within `HUGE_TIMEOUT_S` (or killed
  its process). The huge cases run in tapegrad only (PyTorch would try to compute
  2**42 elements), each in a forked child under a watchdog; a clean error or a
  result is ok.

One test per op (every fourth op in the main suite, all of them in the exhaustive
tier) collects every case's outcome; the test asserts that the set of
failing cases equals `KNOWN.get(op)`, so a case that starts passing must leave the
list too. `python tests/ops/test_sweep_bad_input.py` prints the totals (and `--known`
prints a fresh `KNOWN` table).
"""
import inspect
import multiprocessing
import resource
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as tgF
import tapegrad.ops as tg_ops

torch = pytest.importorskip("torch")
import torch.nn.functional as torchF  # noqa: E402

HUGE_TIMEOUT_S = 4.0  # a huge case answers in milliseconds; no answer by then is a hang
CLEAN = (ValueError, TypeError, IndexError, RuntimeError, NotImplementedError)


# ================================================================ neutral arguments
class Raw:
    """An argument passed to both libraries as it is (a NumPy array, a list)."""

    def __init__(self, value):
        self.value = value


class DT:
    """A dtype, by name, in either library."""

    def __init__(self, name):
        self.name = name


class Huge:
    """The huge broadcast view (tapegrad only)."""


def _rng():
    return np.random.default_rng(0)


def A(*shape):
    return _rng().standard_normal(shape)


def U(*shape):
    return _rng().uniform(0.1, 0.9, shape)


def I(values):  # noqa: E743 - a short name for the table
    return np.array(values, dtype=np.int64)


def B(*shape):
    return _rng().standard_normal(shape) > 0


def _convert(v, L):
    """A neutral argument as library L's (tapegrad or torch) value."""
    if isinstance(v, Raw):
        return v.value
    if isinstance(v, DT):
        return getattr(L, v.name)
    if isinstance(v, Huge):
        return tg.broadcast_to(tg.zeros(1), (2 ** 40, 4))
    if isinstance(v, np.ndarray):
        return L.tensor(v)
    if isinstance(v, list) and v and all(isinstance(e, np.ndarray) for e in v):
        return [L.tensor(e) for e in v]
    if isinstance(v, list):
        return [_convert(e, L) for e in v]
    return v


# ================================================================ valid calls
UNARY = """neg negative abs absolute sign exp exp2 expm1 log log2 log10 log1p sqrt rsqrt
square reciprocal sin cos tan arcsin arccos arctan asin acos atan sinh cosh tanh sigmoid
relu erf floor ceil trunc fix isnan isinf isfinite fliplr flipud trace clone detach
contiguous zeros_like ones_like empty_like rand_like randn_like from_dlpack nonzero
argwhere gelu silu logsigmoid mish swish mT""".split()
BINARY = """add sub subtract mul multiply div divide true_divide fmod floor_divide remainder
maximum minimum arctan2 atan2 logaddexp eq ne lt le gt ge less less_equal greater
greater_equal not_equal mse_loss l1_loss""".split()
REDUCE = "sum mean amax amin prod max min argmax argmin var std logsumexp cumsum cumprod"
_IDX = [[0, 1], [2, 3], [1, 1]]

VALID = {n: ((A(3, 4),), {}) for n in UNARY}
VALID.update({n: ((A(3, 4), A(3, 4)), {}) for n in BINARY})
VALID.update({n: ((A(3, 4),), {"dim": 1}) for n in REDUCE.split() + ["softmax", "log_softmax"]})
VALID.update({
    "pow": ((U(3, 4), A(3, 4)), {}),
    "trace": ((A(3, 3),), {}),
    "mT": ((A(2, 3, 4),), {}),
    "clamp": ((A(3, 4),), {"min": -0.5, "max": 0.5}),
    "clip": ((A(3, 4),), {"min": -0.5, "max": 0.5}),
    "clamp_min": ((A(3, 4), -0.5), {}),
    "clamp_max": ((A(3, 4), 0.5), {}),
    "round": ((A(3, 4),), {"decimals": 1}),
    "logical_not": ((B(3, 4),), {}),
    "logical_and": ((B(3, 4), B(3, 4)), {}),
    "logical_or": ((B(3, 4), B(3, 4)), {}),
    "logical_xor": ((B(3, 4), B(3, 4)), {}),
    "bitwise_not": ((I([[1, 2], [3, 4]]),), {}),
    "bitwise_and": ((I([[1, 2], [3, 4]]), I([[5, 6], [7, 0]])), {}),
    "bitwise_or": ((I([[1, 2], [3, 4]]), I([[5, 6], [7, 0]])), {}),
    "bitwise_xor": ((I([[1, 2], [3, 4]]), I([[5, 6], [7, 0]])), {}),
    "where": ((B(3, 4), A(3, 4), A(3, 4)), {}),
    "norm": ((A(3, 4),), {"p": 2, "dim": 1}),
    "all": ((B(3, 4),), {"dim": 1}),
    "any": ((B(3, 4),), {"dim": 1}),
    "reshape": ((A(3, 4), (2, 6)), {}),
    "view": ((A(3, 4), (2, 6)), {}),
    "flatten": ((A(2, 3, 4),), {"start_dim": 1}),
    "permute": ((A(2, 3, 4), (2, 0, 1)), {}),
    "transpose": ((A(3, 4), 0, 1), {}),
    "swapaxes": ((A(3, 4), 0, 1), {}),
    "swapdims": ((A(3, 4), 0, 1), {}),
    "movedim": ((A(2, 3, 4), 0, 2), {}),
    "moveaxis": ((A(2, 3, 4), 0, 2), {}),
    "broadcast_to": ((A(1, 4), (3, 4)), {}),
    "expand": ((A(1, 4), 3, 4), {}),
    "squeeze": ((A(3, 1, 4),), {"dim": 1}),
    "unsqueeze": ((A(3, 4),), {"dim": 1}),
    "unflatten": ((A(3, 4), 1, (2, 2)), {}),
    "flip": ((A(3, 4),), {"dims": (0,)}),
    "roll": ((A(3, 4),), {"shifts": 1, "dims": 0}),
    "repeat": ((A(3, 4), 2, 1), {}),
    "tile": ((A(3, 4), (2, 1)), {}),
    "cat": (([A(2, 4), A(3, 4)],), {"dim": 0}),
    "concatenate": (([A(2, 4), A(3, 4)],), {"dim": 0}),
    "concat": (([A(2, 4), A(3, 4)],), {"dim": 0}),
    "stack": (([A(3, 4), A(3, 4)],), {"dim": 0}),
    "hstack": (([A(3, 4), A(3, 4)],), {}),
    "vstack": (([A(3, 4), A(3, 4)],), {}),
    "pad": ((A(3, 4), (1, 1)), {}),
    "tril": ((A(4, 4),), {"diagonal": 1}),
    "triu": ((A(4, 4),), {"diagonal": 1}),
    "diagonal": ((A(3, 4),), {"offset": 1}),
    "as_strided": ((A(3, 4), (2, 2), (1, 2)), {"storage_offset": 1}),
    "diag": ((A(4),), {}),
    "diag_embed": ((A(2, 3),), {}),
    "repeat_interleave": ((A(3),), {"repeats": 2}),
    "split": ((A(5, 4), 2), {"dim": 0}),
    "chunk": ((A(5, 4), 2), {"dim": 0}),
    "tensor_split": ((A(5, 4), 2), {"dim": 0}),
    "unbind": ((A(3, 4),), {"dim": 0}),
    "gather": ((A(3, 4), 1, I(_IDX)), {}),
    "scatter_add": ((A(3, 4), 1, I(_IDX), A(3, 2)), {}),
    "scatter": ((A(3, 4), 1, I(_IDX), A(3, 2)), {}),
    "scatter_add_": ((A(3, 4), 1, I(_IDX), A(3, 2)), {}),
    "scatter_": ((A(3, 4), 1, I(_IDX), A(3, 2)), {}),
    "index_select": ((A(3, 4), 0, I([0, 2])), {}),
    "take_along_dim": ((A(3, 4), I([[0], [1], [2]])), {"dim": 1}),
    "masked_fill": ((A(3, 4), B(3, 4), 0.5), {}),
    "masked_fill_": ((A(3, 4), B(3, 4), 0.5), {}),
    "masked_select": ((A(3, 4), B(3, 4)), {}),
    "unique": ((I([3, 1, 2, 3, 1]),), {}),
    "sort": ((A(3, 4),), {"dim": 1}),
    "argsort": ((A(3, 4),), {"dim": 1}),
    "topk": ((A(3, 4),), {"k": 2, "dim": 1}),
    "matmul": ((A(3, 4), A(4, 2)), {}),
    "mm": ((A(3, 4), A(4, 2)), {}),
    "t": ((A(3, 4),), {}),
    "narrow": ((A(3, 4), 1, 1, 2), {}),
    "dot": ((A(4), A(4)), {}),
    "outer": ((A(3), A(4)), {}),
    "ger": ((A(3), A(4)), {}),
    "tensordot": ((A(3, 4), A(4, 2)), {"dims": 1}),
    "einsum": (("ij,jk->ik", A(3, 4), A(4, 2)), {}),
    "det": ((A(3, 3),), {}),
    "inverse": ((A(3, 3),), {}),
    "slogdet": ((A(3, 3),), {}),
    "tensor": ((Raw([[1.0, 2.0], [3.0, 4.0]]),), {}),
    "as_tensor": ((Raw([[1.0, 2.0], [3.0, 4.0]]),), {}),
    "asarray": ((Raw([[1.0, 2.0], [3.0, 4.0]]),), {}),
    "from_numpy": ((Raw(A(3, 4)),), {}),
    "zeros": ((2, 3), {}),
    "ones": ((2, 3), {}),
    "empty": ((2, 3), {}),
    "full": (((2, 3), 1.5), {}),
    "full_like": ((A(3, 4), 1.5), {}),
    "arange": ((0, 10, 2), {}),
    "linspace": ((0.0, 1.0, 5), {}),
    "eye": ((3, 4), {}),
    "tril_indices": ((3, 4, 1), {}),
    "triu_indices": ((4, 3, -1), {}),
    "real": ((A(3, 4),), {}),
    "rand": ((2, 3), {}),
    "randn": ((2, 3), {}),
    "randint": ((0, 5, (3,)), {}),
    "randperm": ((5,), {}),
    "to": ((A(3, 4),), {"dtype": DT("float32")}),
    "lgamma": ((U(3, 4),), {}),
    "digamma": ((U(3, 4),), {}),
    "polygamma": ((1, U(3, 4)), {}),
    "_standard_gamma": ((U(3, 4),), {}),
    "_standard_gamma_grad": ((U(3, 4), U(3, 4)), {}),
    "linear": ((A(2, 4), A(3, 4), A(3)), {}),
    "conv1d": ((A(1, 2, 6), A(3, 2, 3), A(3)), {"stride": 1, "padding": 1}),
    "conv2d": ((A(1, 2, 6, 6), A(3, 2, 3, 3), A(3)),
               {"stride": 1, "padding": 1, "dilation": 1, "groups": 1}),
    "max_pool2d": ((A(1, 2, 6, 6), 2), {"stride": 2, "padding": 1}),
    "avg_pool2d": ((A(1, 2, 6, 6), 2), {"stride": 2, "padding": 1}),
    "adaptive_avg_pool2d": ((A(1, 2, 6, 6), 3), {}),
    "cross_entropy": ((A(3, 5), I([0, 2, 4])), {}),
    "nll_loss": ((A(3, 5), I([0, 2, 4])), {}),
    "binary_cross_entropy": ((U(3, 4), U(3, 4)), {}),
    "binary_cross_entropy_with_logits": ((A(3, 4), U(3, 4)), {}),
    "layer_norm": ((A(3, 4), (4,)), {}),
    "batch_norm": ((A(3, 4), A(4), U(4)), {}),
    "dropout": ((A(3, 4),), {"p": 0.5}),
    "dropout2d": ((A(2, 3, 4, 4),), {"p": 0.5}),
    "smooth_l1_loss": ((A(3, 4), A(3, 4)), {}),
    "huber_loss": ((A(3, 4), A(3, 4)), {}),
    "embedding": ((I([0, 2, 1]), A(4, 3)), {}),
    "scaled_dot_product_attention": ((A(1, 2, 3), A(1, 2, 3), A(1, 2, 3)), {}),
    "one_hot": ((I([0, 2, 1]),), {"num_classes": 3}),
    "softplus": ((A(3, 4),), {"beta": 2.0}),
    "elu": ((A(3, 4),), {"alpha": 1.0}),
    "leaky_relu": ((A(3, 4),), {"negative_slope": 0.1}),
    "conv_transpose2d": ((A(1, 2, 4, 4), A(2, 3, 3, 3), A(3)),
                         {"stride": 2, "padding": 1, "output_padding": 1, "groups": 1,
                          "dilation": 1}),
    "group_norm": ((A(2, 4, 3), 2, A(4), A(4)), {"eps": 1e-5}),
    "interpolate": ((A(1, 2, 3, 4),), {"size": (5, 6), "mode": "bilinear",
                                       "align_corners": False}),
    "unfold": ((A(1, 2, 5, 5), 2), {"dilation": 1, "padding": 1, "stride": 2}),
    "fold": ((A(1, 8, 9), (4, 4), 2), {"stride": 1}),
})

# the composites declared with ops/_decl.decl and their neighbours (tests/ops/bad_input_cases.py)
sys.path.insert(0, __import__("os").path.dirname(__file__))
import bad_input_cases  # noqa: E402
import sweep_nn_functional  # noqa: E402

bad_input_cases.extend(VALID, A, U, I, B, Raw, DT)
bad_input_cases.extend_special(VALID, A, U, I)
sweep_nn_functional.extend(VALID, A, U, I, B, Raw, DT)

# Names with no PyTorch counterpart to compare with: skipped, with the reason.
SKIP = {
    "manual_seed": "RNG state, not an op on tensors (returns a Generator in PyTorch)",
    "seed": "RNG state: no argument, a non-deterministic seed",
    "initial_seed": "RNG state: no argument",
    "get_rng_state": "RNG state: the two libraries' state formats differ",
    "set_rng_state": "RNG state: the two libraries' state formats differ",
    "svd": "the singular vectors' signs are each library's LAPACK's (tapegrad fixes them); "
           "its bad inputs are linalg_svd's, swept through qr/pinverse's shapes, and "
           "tests/ops/test_linalg_decomp.py",
}

# Counterparts that are not torch.X / torch.nn.functional.X / torch.Tensor.X by name.
COUNTERPART = {
    "swish": torchF.silu,  # PyTorch's name for the same function
    "mT": lambda x: x.mT,  # a property in PyTorch
}

# Cases where tapegrad refuses what PyTorch computes, by design: (op, case) -> reason.
REFUSAL_OK = {
    ("lu_unpack", "LU_pivots:shape"): "pivots of another length than min(m, n) do not "
                                      "describe this factorization (PyTorch reads them)",
    ("tensor", "data:complex"): "tapegrad has no complex dtype (API.md: complex refused)",
    ("as_tensor", "data:complex"): "tapegrad has no complex dtype (API.md: complex refused)",
    ("asarray", "data:complex"): "tapegrad has no complex dtype (API.md: complex refused)",
    ("from_numpy", "a:complex"): "tapegrad has no complex dtype (API.md: complex refused)",
    # PyTorch's counterpart of mT is the attribute x.mT, which a NumPy array also has:
    # the oracle computes in NumPy on the raw complex array; tapegrad refuses complex
    ("mT", "input:complex"): "tapegrad has no complex dtype (API.md: complex refused)",
    # PyTorch pools integer tensors (avg_pool2d with an integer division that
    # truncates each average); tapegrad's pooling kernels are floating point only and
    # refuse an integer input with a TypeError naming the op (cast with .float())
    ("max_pool2d", "input:int"): "pooling kernels are floating point only (a clean TypeError)",
    ("avg_pool2d", "input:int"): "pooling kernels are floating point only (a clean TypeError); "
                                 "PyTorch's integer average truncates",
    # the nn.functional composites built on those kernels (tests/ops/sweep_nn_functional.py)
    ("F.avg_pool1d", "input:int"): "pooling kernels are floating point only (a clean TypeError)",
    ("F.avg_pool3d", "input:int"): "pooling kernels are floating point only (a clean TypeError)",
    ("F.max_pool3d", "input:int"): "pooling kernels are floating point only (a clean TypeError)",
    ("F.local_response_norm", "input:int"): "its window average is avg_pool2d's kernel, floating "
                                          "point only (a clean TypeError)",
    # PyTorch's F.hardtanh raises ValueError for min_val > max_val, but its hardtanh_
    # skips that check and clamps; tapegrad's hardtanh_ checks as hardtanh does
    ("F.hardtanh_", "max_val:-1.0"): "hardtanh_ checks min_val <= max_val as hardtanh does",
    # kernel_size 0 makes the output empty, so the indices point outside it: tapegrad
    # refuses them (IndexError naming the op); PyTorch returns the empty tensor unchecked
    ("F.max_unpool1d", "kernel_size:0"): "indices outside an empty output are refused",
    ("F.max_unpool2d", "kernel_size:0"): "indices outside an empty output are refused",
    # conv_tbc is conv1d over the (B, C, T) view: its bias must have the input's dtype,
    # as conv1d's and conv2d's (PyTorch's conv_tbc kernel casts an integer bias)
    ("F.conv_tbc", "bias:bool"): "the bias must have the input's dtype, as conv1d's",
    ("F.conv_tbc", "bias:int"): "the bias must have the input's dtype, as conv1d's",
    # a window of no elements has no maximum: PyTorch's fractional max pooling computes
    # with a non-positive kernel_size unchecked
    ("F.fractional_max_pool2d", "kernel_size:0"): "a window must hold an element",
    ("F.fractional_max_pool2d", "kernel_size:-3"): "a window must hold an element",
    ("F.fractional_max_pool3d", "kernel_size:0"): "a window must hold an element",
    ("F.fractional_max_pool3d", "kernel_size:-3"): "a window must hold an element",
}

# Cases where both compute but tapegrad's values differ from PyTorch's by design:
# (op, case) -> the rule tapegrad follows instead.
VALUES_OK = {
    # QR of a matrix holding NaN/inf: NaN-filled in both, where LAPACK puts them differs
    ("qr", "input:nan-inf"): "QR of non-finite input: NaNs, placed as NumPy's LAPACK does",
    ("geqrf", "input:nan-inf"): "QR of non-finite input: NaNs, placed as NumPy's LAPACK does",
    # an inf in other: the compact WY form Q = I - V T V^T multiplies every column of
    # other into each entry at once (inf - inf = NaN where LAPACK's reflector-by-reflector
    # ormqr keeps some inf)
    ("ormqr", "other:nan-inf"): "inf through the WY product: NaN where LAPACK keeps inf",
    # PyTorch's mode of a slice with NaNs follows its sort's comparisons: [nan, 1, 2]
    # gives NaN (index 0) but [1, nan, 2] gives 1, and [2, 1, nan, nan] gives 1
    ("mode", "input:nan-inf"): "NaNs count as one value (sorted last), as in sort",
    # torch.sign(nan) is 0 (its sign is (0 < x) - (x < 0)); NumPy, JAX and IEEE-754
    # propagate NaN, and a 0 would hide a NaN from every check downstream
    ("sign", "input:nan-inf"): "sign(NaN) is NaN, as NumPy and JAX (PyTorch: 0)",
    # the int case holds -1 and -3, poles of polygamma: PyTorch's float rounding gives
    # 1.3e15 and 1.7e16 there, tapegrad the pole's value
    ("polygamma", "input:int"): "polygamma at a pole (a non-positive integer) is inf",
    # the finite entries: tapegrad's implicit Gamma gradient is exact to float64
    # rounding (checked against SciPy's gammaincinv in tests/distributions), PyTorch's
    # a rational approximation within about 1e-3 of it (the NaNs agree)
    ("_standard_gamma_grad", "input:nan-inf"): "exact gradient; PyTorch's is approximate",
    ("_standard_gamma_grad", "output:nan-inf"): "exact gradient; PyTorch's is approximate",
    ("bucketize", "boundaries:nan-inf"): "boundaries with NaN are not sorted: the result is "
                                         "unspecified (the binary searches differ)",
    ("searchsorted", "sorted_sequence:nan-inf"): "a sequence with NaN is not sorted: the result "
                                                 "is unspecified (the binary searches differ)",
    ("cholesky_inverse", "input:nan-inf"): "NaN spreads through inv(L L^T) (LAPACK's potri "
                                           "keeps some entries finite)",
    ("triangular_solve", "A:nan-inf"): "NaN spreads through a general solve (LAPACK's trtrs "
                                       "by substitution keeps some entries finite)",
    ("triangular_solve", "b:nan-inf"): "NaN spreads through a general solve (LAPACK's trtrs "
                                       "by substitution keeps some entries finite)",
    ("sgn", "input:nan-inf"): "sgn is sign for real tensors: sgn(NaN) is NaN (PyTorch: 0)",
    # an infinite weight times the normalised value is +-inf (NaN only where that value
    # is 0 or NaN); PyTorch's fused kernel folds the mean into a shift, w x + (b - w mu),
    # and gives inf - inf = NaN
    ("F.instance_norm", "weight:nan-inf"): "x_hat * inf is +-inf (PyTorch's fused shift: NaN)",
    # the first step's padded tap: 0 * inf is NaN in conv1d over the zero-padded input;
    # PyTorch's conv_tbc kernel skips the padded taps (the other steps agree)
    ("F.conv_tbc", "weight:nan-inf"): "padding taps are multiplied in: 0 * inf = NaN, as conv1d",
}

# Ops whose results are random: compared by shape only.
RANDOM = {"_standard_gamma", "rand", "randn", "randint", "rand_like", "randn_like", "randperm",
          "dropout", "dropout2d",
          "F.dropout", "F.dropout2d", "empty", "empty_like"}
RANDOM |= sweep_nn_functional.RANDOM | {"F." + n for n in sweep_nn_functional.RANDOM}
RANDOM |= bad_input_cases.RANDOM

# The op an alias's messages may name instead of its own.
ALIASES = {
    "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
    "atan2": "arctan2", "negative": "neg", "absolute": "abs", "asin": "arcsin",
    "acos": "arccos", "atan": "arctan", "fix": "trunc", "clip": "clamp",
    "clamp_min": "clamp", "clamp_max": "clamp", "less": "lt", "less_equal": "le",
    "greater": "gt", "greater_equal": "ge", "not_equal": "ne", "swapaxes": "transpose",
    "swapdims": "transpose", "moveaxis": "movedim", "concatenate": "cat", "concat": "cat",
    "hstack": "cat", "vstack": "cat", "view": "reshape", "expand": "broadcast_to",
    "scatter_add_": "scatter_add", "scatter_": "scatter", "masked_fill_": "masked_fill",
    "argwhere": "nonzero", "ger": "outer", "inverse": "inv", "mT": "transpose",
    "fliplr": "flip", "flipud": "flip", "tile": "repeat", "swish": "silu",
    "as_tensor": "tensor", "asarray": "tensor",
}

DIM_NAMES = {"dim", "dim0", "dim1", "dim2", "dims", "start_dim", "end_dim", "source",
             "destination", "axis"}


# ================================================================ ops and counterparts
def _public_ops():
    # the functions users call: tg.X (tapegrad.ops.X is the adjoints' namespace)
    ops = {n: getattr(tg, n) for n in tg_ops.__all__}
    for n in tgF.__all__:
        f = getattr(tgF, n)
        if ops.get(n) is not f:
            ops["F." + n] = f
    return ops


OPS = _public_ops()


def _base(op):
    return op[2:] if op.startswith("F.") else op


def _counterpart(op):
    name = _base(op)
    if name in COUNTERPART:
        return COUNTERPART[name]
    if (op.startswith("F.") or name in tgF.__all__) and hasattr(torchF, name):
        return getattr(torchF, name)
    if hasattr(torch, name):
        return getattr(torch, name)
    method = getattr(torch.Tensor, name, None)
    if callable(method):
        return lambda x, *a, **k: method(x, *a, **k)
    return None


# ================================================================ the catalogue
def _param_names(fn, nargs):
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(nargs):
        if i < len(params) and params[i].kind is not inspect.Parameter.VAR_POSITIONAL:
            names.append(params[i].name)
        else:
            names.append(f"arg{i}")
    return names


def _set(args, kwargs, where, value):
    args, kwargs = list(args), dict(kwargs)
    kind, key = where
    if kind == "a":
        args[key] = value
    elif kind == "k":
        kwargs[key] = value
    else:  # ("l", i): the first tensor of the list at position i
        args[key] = [value] + list(args[key][1:])
    return tuple(args), kwargs


def _get(args, kwargs, where):
    kind, key = where
    return args[key] if kind == "a" else kwargs[key] if kind == "k" else args[key][0]


def _odd_shape(a):
    if a.ndim == 0:
        return np.ones((7,), a.dtype)
    return np.ones(a.shape[:-1] + (a.shape[-1] + 3,), a.dtype)


def _with_nonfinite(a):
    a = a.copy()
    flat = a.reshape(-1)
    for i, v in enumerate((np.nan, np.inf, -np.inf)[:flat.size]):
        flat[i] = v
    return a


def cases(op):
    """{case name: (args, kwargs, huge)} for one op, built from its valid call."""
    args, kwargs = VALID[_base(op)]
    names = _param_names(OPS[op], len(args))
    slots = [(("a", i), names[i], v) for i, v in enumerate(args)]
    slots += [(("k", k), k, v) for k, v in kwargs.items()]
    tensor_slots = []
    for where, name, v in slots:
        if isinstance(v, np.ndarray):
            tensor_slots.append((where, name, v))
        elif isinstance(v, list) and v and isinstance(v[0], np.ndarray):
            tensor_slots.append((("l", where[1]), name, v[0]))
        elif isinstance(v, Raw):
            tensor_slots.append((where, name, None))
    out = {}

    def add(case, where, value, huge=False):
        out[case] = (*_set(args, kwargs, where, value), huge)

    for where, name, a in tensor_slots:
        add(f"{name}:None", where, None)
        add(f"{name}:complex", where, Raw(np.array([[1 + 5j, 2j], [3.0, 1j]])))
        add(f"{name}:str", where, "abc")
        add(f"{name}:strlist", where, ["a", "b"])
        if a is None:
            continue
        if a.dtype.kind == "f":
            add(f"{name}:bool", where, a > 0)
            # distinct integers (ties would make sort/topk indices differ legitimately)
            ranks = np.argsort(np.argsort(a.reshape(-1))).reshape(a.shape) - a.size // 2
            add(f"{name}:int", where, ranks.astype(np.int64))
            if a.size:
                add(f"{name}:nan-inf", where, _with_nonfinite(a))
            add(f"{name}:huge", where, Huge(), huge=True)
        if len(tensor_slots) > 1:
            add(f"{name}:shape", where, _odd_shape(a))
    first_tensor = tensor_slots[0] if tensor_slots else None
    for where, name, v in slots:
        if name in DIM_NAMES:
            if isinstance(v, int) and not isinstance(v, bool):
                add(f"{name}:out-of-range", where, 7)
            elif isinstance(v, tuple):
                add(f"{name}:out-of-range", where, (7,) + v[1:])
            else:
                continue
            if first_tensor is not None and first_tensor[2] is not None:
                a2, k2 = _set(args, kwargs, first_tensor[0], np.array(5.0))
                a2, k2 = _set(a2, k2, where, 1 if isinstance(v, int) else (1,))
                out[f"{name}:on-0d"] = (a2, k2, False)
        elif isinstance(v, bool):
            continue
        elif isinstance(v, int):
            add(f"{name}:-3", where, -3)
            add(f"{name}:0", where, 0)
        elif isinstance(v, tuple) and v and all(isinstance(e, int) for e in v):
            add(f"{name}:-3", where, (-3,) + v[1:])
            add(f"{name}:0", where, (0,) + v[1:])
        elif isinstance(v, float):
            add(f"{name}:-1.0", where, -1.0)
    return out


# ================================================================ running and classifying
def _call(fn, L, args, kwargs):
    cargs = [_convert(a, L) for a in args]
    ckwargs = {k: _convert(v, L) for k, v in kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", fn(*cargs, **ckwargs)
        except Exception as e:  # noqa: BLE001 - the class is what is classified
            return "raised", e


def _arrays(r):
    if isinstance(r, (tuple, list)):
        return [a for x in r for a in _arrays(x)]
    if isinstance(r, torch.Tensor):
        return [r.detach().cpu().numpy()]
    if isinstance(r, tg.Tensor):
        return [np.asarray(r.detach())]
    return [np.asarray(r)]


def _compare(got, want, shapes_only):
    a_list, b_list = _arrays(got), _arrays(want)
    if len(a_list) != len(b_list):
        return f"{len(a_list)} results, PyTorch {len(b_list)}"
    for a, b in zip(a_list, b_list):
        if a.shape != b.shape:
            return f"shape {a.shape}, PyTorch {b.shape}"
        if shapes_only:
            continue
        as_type = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
        try:
            np.testing.assert_allclose(a.astype(as_type), b.astype(as_type),
                                       rtol=1e-5, atol=1e-6, equal_nan=True)
        except (AssertionError, TypeError, ValueError) as e:
            return "values differ: " + str(e).strip().splitlines()[-1][:80]
    return None


def _names_op(op, msg):
    name = _base(op)
    msg = msg.lower()
    return name.lower() in msg or ALIASES.get(name, "\0") in msg


def _judge_error(op, cls_names, msg):
    """None when tapegrad's error is clean, else the weak-error description."""
    if not any(c.__name__ in cls_names for c in CLEAN):
        return f"weak: {cls_names[0]}: {msg[:80]}"
    if not _names_op(op, msg):
        return f"weak: {cls_names[0]} not naming the op: {msg[:80]}"
    return None


def _huge_child(conn, fn, args, kwargs):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vsize = int(f.read().split()[0]) * resource.getpagesize()
    limit = vsize + 2 * 2 ** 30
    if hard == resource.RLIM_INFINITY or hard > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    kind, r = _call(fn, tg, args, kwargs)
    if kind == "ok":
        conn.send(("ok", [], ""))
    else:
        conn.send(("raised", [c.__name__ for c in type(r).__mro__], str(r)[:300]))


def _run_huge(fn, args, kwargs):
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_huge_child, args=(send, fn, args, kwargs), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(HUGE_TIMEOUT_S):
            return recv.recv()
        return ("hang", [], f"no answer within {HUGE_TIMEOUT_S:.0f} s")
    except EOFError:
        return ("hang", [], f"the process died (exit code {proc.exitcode})")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()


def classify(op, args, kwargs, huge, case=None):
    """('ok' | 'garbage' | 'weak' | 'refused' | 'hang', detail) for one case."""
    fn = OPS[op]
    if huge:
        kind, classes, msg = _run_huge(fn, args, kwargs)
        if kind == "hang":
            return "hang", msg
        if kind == "ok":
            return "ok", "a result"
        weak = _judge_error(op, classes, msg)
        return ("weak", weak[6:]) if weak else ("ok", f"{classes[0]}")
    want_kind, want = _call(_counterpart(op), torch, args, kwargs)
    kind, got = _call(fn, tg, args, kwargs)
    if kind == "raised":
        classes = [c.__name__ for c in type(got).__mro__]
        weak = _judge_error(op, classes, str(got))
        if weak:
            return "weak", weak[6:]
        if want_kind == "ok" and (op, case) in REFUSAL_OK:
            return "ok", "refused by design: " + REFUSAL_OK[op, case]
        if want_kind == "ok":
            return "refused", f"{type(got).__name__}: {str(got)[:80]}"
        return "ok", f"both raise ({type(got).__name__}, PyTorch {type(want).__name__})"
    if want_kind == "raised":
        return "garbage", f"returns a value where PyTorch raises {type(want).__name__}"
    diff = _compare(got, want, op in RANDOM)
    if diff and (op, case) in VALUES_OK:
        return "ok", "differs by design: " + VALUES_OK[op, case]
    if diff:
        return "garbage", diff
    return "ok", "both compute"


def sweep(op):
    """{case: (kind, detail)} for every case of one op."""
    return {case: classify(op, *spec, case=case) for case, spec in cases(op).items()}


# ================================================================ expected failures
# op -> {case: reason} for the cases that fail today. The test asserts that exactly
# these fail, so fixing one means deleting its line (and a regression adds one). None
# fails today: 5254 of 5254 cases clean; the by-design differences are REFUSAL_OK and
# VALUES_OK above, each with its reason.
KNOWN = {}

SWEPT = sorted(op for op in OPS if _base(op) not in SKIP)


def test_every_public_op_is_swept_or_skipped():
    missing = [op for op in SWEPT if _base(op) not in VALID]
    assert not missing, f"no valid call in VALID for {missing}"
    no_torch = [op for op in SWEPT if _counterpart(op) is None]
    assert not no_torch, f"no PyTorch counterpart for {no_torch}: add to COUNTERPART or SKIP"
    assert set(KNOWN) <= set(SWEPT), set(KNOWN) - set(SWEPT)


# every fourth op (by name) runs in the main suite, the others in the exhaustive tier
# (marked slow): each op's cases take tens of milliseconds, a fork for each huge case
@pytest.mark.parametrize("op", [pytest.param(op, marks=() if k % 4 == 0 else pytest.mark.slow)
                                for k, op in enumerate(SWEPT)])
def test_bad_input_like_torch(op):
    results = sweep(op)
    failing = {c for c, (kind, _) in results.items() if kind != "ok"}
    known = set(KNOWN.get(op, {}))
    lines = []
    for c in sorted(failing - known):
        lines.append(f"  {c} -> {results[c][0]}: {results[c][1]}")
    for c in sorted(known - failing):
        lines.append(f"  {c} -> now {results[c][0] if c in results else 'gone'}: "
                     f"remove it from KNOWN[{op!r}]")
    assert failing == known, f"{op}:\n" + "\n".join(lines)


# ================================================================ totals for the issue
def main(argv):
    kinds = ["ok", "garbage", "weak", "refused", "hang"]
    totals = dict.fromkeys(kinds, 0)
    fresh = {}
    for op in SWEPT:
        for case, (kind, detail) in sweep(op).items():
            totals[kind] += 1
            if kind != "ok":
                fresh.setdefault(op, {})[case] = f"{kind}: {detail}"[:100]
    if "--known" in argv:
        print("KNOWN = {")
        for op, cs in fresh.items():
            print(f"    {op!r}: {{")
            for c, reason in sorted(cs.items()):
                print(f"        {c!r}: {reason!r},".replace("weak: weak: ", "weak: "))
            print("    },")
        print("}")
    n = sum(totals.values())
    print(f"{len(SWEPT)} ops, {n} cases: {totals['ok']} ok, {totals['garbage']} silent garbage, "
          f"{totals['weak']} weak errors, {totals['refused']} refused where PyTorch computes, "
          f"{totals['hang']} hangs")


if __name__ == "__main__":
    main(sys.argv[1:])
