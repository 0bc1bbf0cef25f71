"""API.md "Low precision" (promotion follows PyTorch's table) and "Operations": the
result dtype of `where` and of the binary elementwise ops for every pair of dtypes,
bfloat16 and float16 included, each operand dimensioned or 0-d, and with Python
numbers, equals `torch`'s for the same operands (where once promoted as NumPy does:
int32 with float16 gave float64)."""
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64"]

OPS = {
    "where": lambda L, a, b: L.where(L.ones(2, dtype=L.bool), a, b),
    "mul": lambda L, a, b: L.mul(a, b),
    "maximum": lambda L, a, b: L.maximum(a, b),
    "div": lambda L, a, b: L.div(a, b),
}


def _dtype(L, op, a, b, b_shape):
    x = L.ones(2, dtype=getattr(L, a))
    y = b if not isinstance(b, str) else L.ones(b_shape, dtype=getattr(L, b))
    try:
        return str(OPS[op](L, x, y).dtype).rsplit(".", 1)[-1]
    except Exception as e:  # noqa: BLE001 (PyTorch's refusal is the oracle too)
        return type(e).__name__


@pytest.mark.parametrize("op", list(OPS))
def test_result_dtypes_as_torch(op):
    diff = {}
    for a in DTYPES:
        for b in DTYPES + [2, 2.5, True]:
            for shape in ((2,), ()):
                if not isinstance(b, str) and (shape == () or op == "maximum"):
                    continue  # (torch.maximum takes no Python number)
                got, want = _dtype(tg, op, a, b, shape), _dtype(torch, op, a, b, shape)
                if got != want:
                    diff[(a, b, shape)] = (got, want)
    assert diff == {}


def test_where_values_and_gradient_across_dtypes():
    x = tg.tensor([1.5, -2.0, 3.0], dtype=tg.bfloat16, requires_grad=True)
    other = tg.tensor([7, 8, 9], dtype=tg.int32)
    y = tg.where(tg.tensor([True, False, True]), x, other)
    assert y.dtype == tg.bfloat16
    assert y.tolist() == [1.5, 8.0, 3.0]
    y.float().sum().backward()
    assert x.grad.dtype == tg.bfloat16 and x.grad.tolist() == [1.0, 0.0, 1.0]
