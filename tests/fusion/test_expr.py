"""The scalar IR: parsing, sharing, symbolic derivatives (no kernels involved)."""
import math

import numpy as np
import pytest

from tapegrad.fusion import expr as E
from tapegrad.fusion.op import evaluate


def test_parse_and_free_names():
    assert E.free_names("x * sigmoid(y) + where(x > 0, z, 1)") == ["x", "y", "z"]
    n = E.parse("-x + 2 ** 3")
    assert n.op == "add" and {a.op for a in n.args} == {"neg", "const"}
    assert E.parse("x if x > 0 else -x") is E.parse("where(x > 0, x, -x)")


def test_common_subexpressions_are_one_node():
    a = E.parse("tanh(x * 2) + tanh(x * 2) * y")
    order = E.topo([a])
    assert sum(1 for n in order if n.op == "tanh") == 1
    assert E.parse("x * y") is E.parse("y * x")


@pytest.mark.parametrize("src", ["x[0]", "x.sum()", "foo(x)", "lambda: x", "x @ y"])
def test_unsupported_syntax_is_a_clear_error(src):
    with pytest.raises(ValueError, match="elementwise"):
        E.parse(src)


FUNCS = ["exp(x)", "log(x)", "log1p(x)", "expm1(x)", "sqrt(x)", "rsqrt(x)", "tanh(x)",
         "sigmoid(x)", "erf(x)", "sin(x)", "cos(x)", "abs(x)", "x ** 3", "pow(x, 2.5)",
         "square(x)", "maximum(x, 0.7)", "minimum(x, 0.7)", "x / (1 + x)",
         "where(x > 1, x * x, -x)", "softplus(x)", "logaddexp(x, 2 * x)"]


@pytest.mark.parametrize("src", FUNCS)
def test_derivative_matches_finite_differences(src):
    x, g = E.var("x"), E.var("g")
    f = E.parse(src)
    (d,) = E.grad([f], [x], [g])
    (dd,) = E.grad([d], [x], [E.const(1.0)])  # second derivative, itself an expression
    xs = np.array([0.3, 0.9, 1.4, 2.2])
    dt = np.dtype(np.float64)
    h = 1e-6

    def val(n, v):
        return evaluate([n], {x: v, g: np.ones_like(v)}, dt)[0]

    num = (val(f, xs + h) - val(f, xs - h)) / (2 * h)
    np.testing.assert_allclose(val(d, xs), num, rtol=1e-6, atol=1e-8)
    if dd is not None:
        num2 = (val(d, xs + h) - val(d, xs - h)) / (2 * h)
        np.testing.assert_allclose(val(dd, xs), num2, rtol=1e-5, atol=1e-6)


def test_adjoint_shares_forward_nodes():
    x, g = E.var("x"), E.var("g")
    f = E.parse("tanh(x) * tanh(x)")
    (d,) = E.grad([f], [x], [g])
    tanh = next(n for n in E.topo([f]) if n.op == "tanh")
    assert tanh in E.topo([d])  # recomputed in the backward kernel, not stored


def test_constant_folding_keeps_nan_semantics():
    assert E.parse("0 * x").op == "mul"  # 0 * inf is nan: never folded away
    assert E.parse("2 * 3 + 1").value == 7.0
    assert math.isinf(E.parse("inf").value)
