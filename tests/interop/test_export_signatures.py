"""``torch_ops()``'s functions are called as PyTorch's functions of the same names:
``ns.max_pool2d(x, 2)`` as ``torch.nn.functional.max_pool2d(x, 2)``, positional and
keyword arguments with PyTorch's defaults, PyTorch's return structure.

Each op's samples are turned into PyTorch's call by the op's own PyTorch oracle
(``op.torch(torch, *args, **attrs)``, which calls PyTorch's function of that name),
run once with PyTorch and once with a ``torch`` whose function of that name is the
export; both results must agree (values, shapes, dtypes, the number of outputs). An
oracle that reaches PyTorch some other way (a formula, a Tensor method) calls PyTorch's
function by the sample's keywords instead, as does a random op (shapes and dtypes
compared). Ops whose name no PyTorch function has are listed with the reason.
"""
import importlib
import os
import types

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.interop import torch_ops
from tapegrad.interop._torch import torch_counterpart

torch = pytest.importorskip("torch")

F64 = np.dtype(np.float64)
_LIBRARY = os.path.dirname(tg.__file__)
# the library's ops (not those other test modules register, e.g. tests/fusion's chains)
OPS = [op for op in tg.ops_registry.list_ops()
       if op.declared_at is None or op.declared_at[0].startswith(_LIBRARY)]
NS = torch_ops()

_TENSOR_METHOD = "a Tensor method in PyTorch (x.{}), not a function"
_INTERNAL = "a step of another op's adjoint or forward ({}), not a PyTorch function"
# every op whose name no PyTorch function (torch.nn.functional, torch, torch.linalg)
# has, with the reason; exported in the registry's own convention (inputs, keyword
# attributes, a tuple of outputs). The set is exact.
NO_COUNTERPART = {
    "cast": _TENSOR_METHOD.format("to(dtype)"),
    "to_device": _TENSOR_METHOD.format("to(device)"),
    "contiguous": _TENSOR_METHOD.format("contiguous()"),
    "to": _TENSOR_METHOD.format("to()"),
    "view": _TENSOR_METHOD.format("view()"),
    "expand": _TENSOR_METHOD.format("expand()"),
    "mT": _TENSOR_METHOD.format("mT"),
    "repeat": _TENSOR_METHOD.format("repeat()"),
    "getitem": _TENSOR_METHOD.format("__getitem__"),
    "index": _TENSOR_METHOD.format("__getitem__ with tensor indices"),
    "masked_index": _TENSOR_METHOD.format("__getitem__ with a boolean mask"),
    "index_put": "torch.index_put exists, but tapegrad has it as Tensor.index_put and "
                 "index_put_ only (no tg.index_put of that signature)",
    "index_put_zero": _INTERNAL.format("index_put's adjoint"),
    "index_add_into": _INTERNAL.format("index_add's in-place form"),
    "diagonal_into": _INTERNAL.format("diagonal's adjoint"),
    "restride": _INTERNAL.format("as_strided's adjoint and tangent"),
    "relu_backward": _INTERNAL.format("relu's adjoint"),
    "tanh_backward": _INTERNAL.format("tanh's adjoint"),
    "sigmoid_backward": _INTERNAL.format("sigmoid's adjoint"),
    "clamp_tensor": _INTERNAL.format("clamp with tensor bounds"),
    "sum_to": _INTERNAL.format("a broadcast's adjoint"),
    "index_onehot": _INTERNAL.format("cross_entropy's"),
    "reverse_cumsum": _INTERNAL.format("cumsum's adjoint"),
    "_mode_index": _INTERNAL.format("mode's"),
    "einsum1": _INTERNAL.format("einsum of one operand"),
    "einsum3": _INTERNAL.format("einsum of three operands"),
    "_lu_pivots_to_permutation": _INTERNAL.format("lu_unpack's"),
    "conv2d_input_grad": _INTERNAL.format("conv2d's adjoint"),
    "conv2d_weight_grad": _INTERNAL.format("conv2d's adjoint"),
    "max_pool2d_input_grad": _INTERNAL.format("max_pool2d's adjoint"),
    "max_pool2d_gather": _INTERNAL.format("max_pool2d's second-order adjoint"),
    "avg_pool2d_input_grad": _INTERNAL.format("avg_pool2d's adjoint"),
    "embedding_backward": _INTERNAL.format("embedding's adjoint"),
    "gelu_tanh": _INTERNAL.format("gelu(approximate='tanh')"),
    "swish": "tapegrad's name of silu (torch.nn.functional.silu is exported as silu)",
    "lstm_layer": _INTERNAL.format("nn.LSTM's layer"),
    "gru_layer": _INTERNAL.format("nn.GRU's layer"),
    "rnn_layer": _INTERNAL.format("nn.RNN's layer"),
    "sparse_mm": "torch.sparse.mm (a namespace the export does not mirror)",
    "sparse_coo_to_dense": _TENSOR_METHOD.format("to_dense()"),
    "special_i1": "torch.special.i1 (tapegrad has no torch.special namespace)",
}

# ops whose values are draws or whatever memory held: shapes and dtypes only
UNSPECIFIED = {"empty", "empty_like", "rand", "randn", "randint", "rand_like", "randn_like",
               "randperm", "_standard_gamma", "bernoulli", "multinomial", "poisson",
               "normal", "randint_like", "dropout", "dropout1d", "dropout2d", "dropout3d",
               "alpha_dropout", "feature_alpha_dropout", "_standard_gamma_grad", "rrelu"}
# results defined up to a gauge (the singular vectors' signs; lobpcg's eigenvectors):
# the outputs compared are the gauge-free ones
GAUGE_FREE_OUTPUTS = {"svd": (1,), "lobpcg": (0,)}


# ops whose samples give by keyword what PyTorch's call gives by position
# (``randint(4, (5,))``: ``high`` is then the size)
POSITIONAL = {"randint": ("low", "high", "size")}


class _Torch:
    """``torch`` (and its ``nn``, ``nn.functional``, ``linalg``) with the function
    ``qualified`` (``torch.nn.functional.max_pool2d``) replaced by ``fn``; counts the
    calls that reach it."""

    def __init__(self, module, qualified, fn, calls):
        self._module, self._qualified, self._fn, self._calls = module, qualified, fn, calls

    def __getattr__(self, name):
        full = f"{self._module.__name__}.{name}"
        if full == self._qualified:
            def call(*args, **kwargs):
                self._calls.append(name)
                return self._fn(*args, **kwargs)
            return call
        v = getattr(self._module, name)
        if isinstance(v, types.ModuleType) and self._qualified.startswith(full + "."):
            return _Torch(v, self._qualified, self._fn, self._calls)
        return v


def _t(a):
    return torch.from_numpy(np.array(a, copy=True)) if isinstance(a, np.ndarray) else a


def _torch_dtype(v):
    if isinstance(v, np.dtype) or isinstance(v, type) and issubclass(v, np.generic):
        return torch.from_numpy(np.empty(0, v)).dtype
    return v


def _outs(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _compare(name, got, want):
    assert type(got) is not tuple or type(want) is tuple, f"{name}: a tuple for one result"
    assert isinstance(got, (tuple, list)) == isinstance(want, (tuple, list)), (
        f"{name}: returned {type(got).__name__}, PyTorch {type(want).__name__}")
    g, w = _outs(got), _outs(want)
    assert len(g) == len(w), f"{name}: {len(g)} outputs, PyTorch's {len(w)}"
    if hasattr(want, "_fields"):
        assert getattr(got, "_fields", None) == want._fields, f"{name}: fields"
    keep = GAUGE_FREE_OUTPUTS.get(name, range(len(w)))
    for k, (a, e) in enumerate(zip(g, w)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"{name} output {k}: {a!r} vs PyTorch's {e!r}"
            continue
        assert isinstance(a, torch.Tensor), f"{name} output {k}: {type(a).__name__}"
        assert a.shape == e.shape, f"{name} output {k}: shape {a.shape} vs {e.shape}"
        assert a.dtype == e.dtype, f"{name} output {k}: dtype {a.dtype} vs {e.dtype}"
        if name in UNSPECIFIED or k not in keep:
            continue
        torch.testing.assert_close(a.detach(), e.detach(), rtol=1e-6, atol=1e-9,
                                   equal_nan=True, msg=lambda m: f"{name} output {k}: {m}")


def _function(qualified):
    module, short = qualified.rsplit(".", 1)
    return getattr(importlib.import_module(module), short)


# the main suite's subset of the sweep (the sweep itself is in the slow tier): each
# kind of signature change (argument order, defaults, return structure, sequences,
# factories, random ops)
QUICK = {"avg_pool2d", "gather", "scatter_add", "index_select", "sort", "max",
         "unique", "softmax", "conv2d", "layer_norm", "hstack", "cat", "cross_entropy",
         "linalg_qr", "einsum", "reshape", "permute", "sum", "where", "clamp", "topk",
         "embedding", "interpolate", "norm", "dropout", "randint", "zeros", "lu", "svd",
         "polygamma", "group_norm", "one_hot", "pad"}


# max_pool2d's float64 samples compile generated window kernels that no other test of the
# main suite needs (seconds of Numba each on a cold cache): its case of the sweep is in the
# exhaustive tier (test_max_pool2d_as_pytorchs checks its signature in the main suite,
# avg_pool2d's case the sweep's sequences of ints), on the worker of that test
MAX_POOL2D_WORKER = pytest.mark.xdist_group("max_pool2d_float64")


def _cases(quick):
    out = []
    for op in OPS:
        pair = torch_counterpart(op.name)
        if pair is None or quick != (op.name in QUICK):
            continue
        marks = () if quick else (pytest.mark.slow,)
        if op.name == "max_pool2d":
            marks += (MAX_POOL2D_WORKER,)
        out.append(pytest.param(op, pair[0], id=op.name, marks=marks))
    return out


CASES = _cases(True) + _cases(False)


def test_the_quick_subset_names_exported_ops():
    assert QUICK <= {op.name for op in OPS if torch_counterpart(op.name) is not None}


def test_ops_without_a_pytorch_function_are_the_listed_ones():
    missing = {op.name for op in OPS if torch_counterpart(op.name) is None}
    assert missing == set(NO_COUNTERPART)
    for name in missing:  # they keep the registry's call
        f = getattr(NS, name)
        assert f is f.raw


@pytest.mark.parametrize("op,qualified", CASES)
def test_called_as_pytorchs_function(op, qualified):
    """Each of the op's first three samples, called as PyTorch's function is."""
    for sample in op.samples(F64)[:3]:
        _check_sample(op, sample, qualified)


def _check_sample(op, sample, qualified):
    f = getattr(NS, op.name)
    args = [_t(a) for a in sample.args]
    calls = []
    if op.torch is not None:
        want = op.torch(torch, *args, **sample.attrs)
        got = op.torch(_Torch(torch, qualified, f, calls), *args, **sample.attrs)
        again = op.torch(_Torch(torch, qualified, f, calls), *args, **sample.attrs)
    if not calls:  # the oracle reaches PyTorch otherwise: PyTorch's function by keywords
        kw = {k: _torch_dtype(v) for k, v in sample.attrs.items()}
        if op.name in POSITIONAL:  # its samples name what PyTorch takes by position
            args += [kw.pop(k) for k in POSITIONAL[op.name] if k in kw]
        want = _function(qualified)(*args, **kw)
        got = f(*args, **kw)
        again = f(*args, **kw)
    _compare(op.name, got, want)
    _compare(op.name, again, want)  # a call like one made before (replayed, where it can)


@MAX_POOL2D_WORKER
def test_max_pool2d_as_pytorchs():
    """The issue's example: PyTorch's defaults (stride = kernel_size) and one result
    unless ``return_indices``; gradients as PyTorch's."""
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    y = NS.max_pool2d(x, 2)
    ref = torch.nn.functional.max_pool2d(x, 2)
    torch.testing.assert_close(y, ref)
    v, i = NS.max_pool2d(x, 3, 1, 1, return_indices=True)
    rv, ri = torch.nn.functional.max_pool2d(x, 3, 1, 1, return_indices=True)
    torch.testing.assert_close(v, rv)
    assert torch.equal(i, ri)
    g = torch.randn_like(ref)
    torch.testing.assert_close(torch.autograd.grad(y, x, g)[0], torch.autograd.grad(ref, x, g)[0])
    assert torch.autograd.gradcheck(lambda a: NS.max_pool2d(a, 2, ceil_mode=True),
                                    (x[:1, :1, :5, :5].detach().requires_grad_(),))


def test_argument_order_and_return_types_follow_pytorch():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, 2], [1, 1], [3, 0]])
    torch.testing.assert_close(NS.gather(x, 1, idx), torch.gather(x, 1, idx))
    torch.testing.assert_close(NS.index_select(x, 0, torch.tensor([2, 0])),
                               torch.index_select(x, 0, torch.tensor([2, 0])))
    m = NS.max(x, dim=1)
    assert m._fields == ("values", "indices")
    torch.testing.assert_close(m.values, torch.max(x, 1).values)
    torch.testing.assert_close(NS.max(x), torch.max(x))
    torch.testing.assert_close(NS.softmax(x, -1), torch.softmax(x, -1))
    torch.testing.assert_close(NS.layer_norm(x, (4,)), torch.nn.functional.layer_norm(x, (4,)))
    torch.testing.assert_close(NS.hstack([x, x]), torch.hstack([x, x]))
    torch.testing.assert_close(NS.polygamma(1, x.detach().abs() + 1),
                               torch.polygamma(1, x.detach().abs() + 1))
    torch.testing.assert_close(NS.einsum("ij,kj->ik", x, x), torch.einsum("ij,kj->ik", x, x))
    o = torch.empty(0, dtype=torch.float64)
    r = NS.sum(x.detach(), 1, out=o)
    assert r is o
    torch.testing.assert_close(o, x.detach().sum(1))
    with pytest.raises(TypeError):
        NS.gather(x, idx, 1)  # the registry's order is not PyTorch's: refused, not misread


def test_the_registry_call_stays_available():
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    v, i = NS.max_pool2d.raw(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0),
                             dilation=(1, 1))
    rv, ri = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    torch.testing.assert_close(v, rv)
    assert torch.equal(i, ri)


def test_a_call_like_an_earlier_one_replays_its_registry_call(monkeypatch):
    """A second call of the same kind (tensors of the same shapes, strides and dtype,
    the same other arguments) runs the registry op the first one reached without the
    public function; new values, gradients and another kind of call as PyTorch's."""
    from tapegrad.interop import _bridge
    ns = torch_ops()
    runs = []
    real = _bridge.run_function
    monkeypatch.setattr(_bridge, "run_function", lambda *a, **k: runs.append(1) or real(*a, **k))
    for k in range(3):
        x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
        for got, want in [(ns.sum(x, dim=1), x.sum(dim=1)),
                          (ns.softmax(x, -1), torch.softmax(x, -1)),
                          (ns.transpose(x, 0, 1), torch.transpose(x, 0, 1)),
                          (ns.mul(x, 2.5), torch.mul(x, 2.5)),
                          (ns.sum(x, 0, True), x.sum(0, True))]:
            torch.testing.assert_close(got, want)
            g = torch.randn_like(want)
            torch.testing.assert_close(torch.autograd.grad(got, x, g)[0],
                                       torch.autograd.grad(want, x, g)[0])
        assert len(runs) == 5, "a call like an earlier one ran the public function again"
    torch.testing.assert_close(ns.sum(x.detach(), dim=0), x.detach().sum(dim=0))
    torch.testing.assert_close(ns.sum(x.detach().T, dim=1), x.detach().T.sum(dim=1))
    assert len(runs) == 7
    with pytest.raises(IndexError):  # the public function's own check, not replayed
        ns.sum(x, dim=2)
    with pytest.raises(IndexError):
        ns.sum(x, dim=2)
