"""Nested transforms with closures, against torch.func: each transform differentiates
with respect to its own variables only (no perturbation confusion) and records its
result for the transform around it."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import functional as F

torch = pytest.importorskip("torch")
TF = pytest.importorskip("torch.func")


def _t(lib, v):
    return (tg if lib == "tg" else torch).tensor(v, dtype=(tg.float64 if lib == "tg"
                                                           else torch.float64))


def _cases():
    def closure_over_outer(lib, fn, x):
        g = fn.grad
        return g(lambda x: x * g(lambda y: x * y)(_t(lib, 2.0)))(x)

    def inner_at_outer_variable(lib, fn, x):
        g = fn.grad
        return g(lambda x: g(lambda y: x * y * y)(x))(x)

    def grad_of_grad_of_closure(lib, fn, x):
        c = _t(lib, 2.0)
        return fn.grad(fn.grad(lambda x: c * x ** 3 + (x * c).sin()))(x)

    def jacobian_of_grad(lib, fn, x):
        jac = fn.jacobian if lib == "tg" else fn.jacrev
        xs = x * _t(lib, [1.0, 2.0, 3.0])
        return jac(fn.grad(lambda v: (v ** 3).sum() * v.sin().sum()))(xs)

    def grad_of_jvp(lib, fn, x):
        ones = _t(lib, [1.0, 1.0])
        xs = x * _t(lib, [1.0, -2.0])
        return fn.grad(lambda v: fn.jvp(lambda z: z.sin() * z, (v,), (ones,))[1].sum())(xs)

    def hessian_with_closure(lib, fn, x):
        w = _t(lib, [0.5, -1.5])
        return fn.hessian(lambda v: ((v * w).tanh() * v).sum())(x * _t(lib, [1.0, 2.0]))

    return [closure_over_outer, inner_at_outer_variable, grad_of_grad_of_closure,
            jacobian_of_grad, grad_of_jvp, hessian_with_closure]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("x0", [1.0, -0.7])
def test_nested_transforms_match_torch_func(case, x0):
    ours = case("tg", F, _t("tg", x0))
    theirs = case("torch", TF, _t("torch", x0))
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10)
    assert not ours.requires_grad  # the outermost transform returns a detached result
