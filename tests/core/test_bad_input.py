"""The funnel's checks, shared by every op: a None where an input is required and a
complex array anywhere are refused with a TypeError naming the op and the argument
(PyTorch's class), never computed on. Driven by the registry: each op's first
sample, with one input replaced at a time."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.ops_registry import list_ops


def _cases():
    out = []
    for op in list_ops():
        samples = op.samples(np.float64)
        if not samples:
            continue
        sample = samples[0]
        for i, a in enumerate(sample.args[:len(op.args)]):
            if isinstance(a, np.ndarray):
                out.append(pytest.param(op, sample, i, id=f"{op.name}-{op.args[i]}"))
    return out


def _as_tensors(args):
    return [tg.tensor(a) if isinstance(a, np.ndarray) else a for a in args]


@pytest.mark.parametrize("op,sample,i", _cases())
def test_none_input_is_refused_unless_declared_optional(op, sample, i):
    args = _as_tensors(sample.args)
    args[i] = None
    if op.args[i] in op.optional:
        bind(op, *args, **sample.attrs)  # e.g. conv2d's bias: computes
        return
    with pytest.raises(TypeError, match=rf"^{op.name}: argument '{op.args[i]}' must be a "
                                        r"Tensor, not None"):
        bind(op, *args, **sample.attrs)


@pytest.mark.parametrize("op,sample,i", _cases())
def test_complex_input_is_refused(op, sample, i):
    args = _as_tensors(sample.args)
    args[i] = np.asarray(sample.args[i]) * (1 + 1j)
    with pytest.raises(TypeError, match=rf"^{op.name}: argument '{op.args[i]}' is complex"):
        bind(op, *args, **sample.attrs)


def test_public_functions_and_operators_refuse_none_and_complex_as_the_issue_lists():
    a, b = tg.ones(3), tg.zeros(3)
    for call, op in [(lambda: tg.eq(None, a), "eq"), (lambda: tg.where(None, a, b), "where"),
                     (lambda: tg.nn.functional.gelu(None), "gelu"),
                     (lambda: tg.sum(None), "sum"), (lambda: tg.exp(None), "exp"),
                     (lambda: tg.erf(None), "erf"), (lambda: a * None, "mul")]:
        with pytest.raises(TypeError, match=rf"^{op}: argument '\w+' must be a Tensor, not None"):
            call()
    for call, op in [(lambda: tg.add(tg.ones(2), np.array([1 + 5j, 2j])), "add"),
                     (lambda: tg.exp(np.array([1 + 2j])), "exp"),
                     (lambda: a + np.array([1j, 1j, 1j]), "add"),
                     (lambda: tg.nn.functional.max_pool2d(np.ones((1, 1, 4, 4), complex), 2),
                      "max_pool2d")]:
        with pytest.raises(TypeError, match=rf"^{op}: argument '\w+' is complex"):
            call()


HUGE = 2 ** 40


@pytest.mark.parametrize("call,op", [
    (lambda: tg.zeros(HUGE), "zeros"), (lambda: tg.ones(HUGE, 4), "ones"),
    (lambda: tg.empty(HUGE), "empty"), (lambda: tg.full((HUGE,), 1.0), "full"),
    (lambda: tg.exp(tg.broadcast_to(tg.zeros(1), (HUGE, 4))), "exp"),
    (lambda: tg.broadcast_to(tg.zeros(1), (HUGE, 4)) * 2.0, "mul"),
    (lambda: tg.nn.functional.one_hot(tg.tensor([0]), HUGE), "one_hot"),
    (lambda: tg.matmul(tg.broadcast_to(tg.zeros(1, 1), (2 ** 20, 1)),
                       tg.broadcast_to(tg.zeros(1, 1), (1, 2 ** 20))), "matmul"),
    (lambda: tg.zeros(5)[tg.broadcast_to(tg.tensor([0]), (HUGE, 5))], "index")])
def test_a_result_larger_than_memory_is_a_runtime_error_naming_the_op(call, op):
    """PyTorch raises RuntimeError naming the size; NumPy's bare MemoryError is not
    an answer in the user's terms."""
    with pytest.raises(RuntimeError, match=rf"^{op}: not enough memory"):
        call()


def test_a_huge_broadcast_view_is_free_and_prints():
    """A view allocates nothing, so it is not refused; its repr formats the edge items
    only, as PyTorch summarises, never a copy of the whole."""
    v = tg.broadcast_to(tg.tensor([1.5]), (HUGE, 4))
    assert v.shape == (HUGE, 4)
    text = repr(v)
    assert text.startswith("tensor([[1.5000, 1.5000, 1.5000, 1.5000],") and "..." in text


@pytest.mark.parametrize("call", [lambda lib: lib.tensor([3]) % lib.tensor([0]),
                                  lambda lib: lib.fmod(lib.tensor([3]), lib.tensor([0])),
                                  lambda lib: lib.tensor([3, 4]) // 0])
def test_integer_division_by_zero_is_a_runtime_error_as_torch(call):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(torch)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        call(tg)


def test_bool_squared_is_int64_and_bitwise_on_floats_names_the_dtype():
    torch = pytest.importorskip("torch")
    assert (torch.tensor([True, False]) ** 2).dtype == torch.int64
    out = tg.tensor([True, False]) ** 2
    assert out.dtype == tg.int64 and out.tolist() == [1, 0]
    with pytest.raises(TypeError, match="bitwise_and: .* got float32"):
        tg.tensor([1.5]) & tg.tensor([2.5])
