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

    def jvp_of_grad(lib, fn, x):
        # forward over reverse: the Hessian-vector product
        w = _t(lib, [0.5, -1.5])
        v = _t(lib, [1.0, -2.0])
        f = fn.grad(lambda z: ((z * w).tanh() * z).sum())
        return fn.jvp(f, (x * _t(lib, [1.0, 2.0]),), (v,))[1]

    def grad_of_jvp_of_grad(lib, fn, x):
        # a reverse transform around forward over reverse: the inner walk is recorded
        w = _t(lib, [0.5, -1.5])
        v = _t(lib, [1.0, -2.0])
        f = fn.grad(lambda z: ((z * w).tanh() * z * z).sum())
        return fn.grad(lambda u: fn.jvp(f, (u,), (v,))[1].sum())(x * _t(lib, [1.0, 2.0]))

    def jvp_of_jvp_of_grad(lib, fn, x):
        v = _t(lib, [1.0, -2.0])
        u = _t(lib, [0.3, 0.7])
        f = fn.grad(lambda z: (z.sin() * z * z).sum())
        return fn.jvp(lambda a: fn.jvp(f, (a,), (v,))[1], (x * _t(lib, [1.0, 2.0]),), (u,))[1]

    return [closure_over_outer, inner_at_outer_variable, grad_of_grad_of_closure,
            jacobian_of_grad, grad_of_jvp, hessian_with_closure, jvp_of_grad,
            grad_of_jvp_of_grad, jvp_of_jvp_of_grad]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("x0", [1.0, -0.7])
def test_nested_transforms_match_torch_func(case, x0):
    ours = case("tg", F, _t("tg", x0))
    theirs = case("torch", TF, _t("torch", x0))
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10)
    assert not ours.requires_grad  # the outermost transform returns a detached result


def test_forward_over_reverse_records_no_walk():
    # inside a dual level alone, the gradient's walk carries tangents but nothing will
    # differentiate it by reverse mode, so it is not recorded; under an outer grad it is
    seen = []

    def f(z):
        g = F.grad(lambda y: (y.sin() * y).sum())(z)
        seen.append(g.requires_grad)
        return g
    x, v = tg.tensor([0.3, -1.2], dtype=tg.float64), tg.tensor([1.0, 2.0], dtype=tg.float64)
    F.jvp(f, (x,), (v,))
    F.grad(lambda u: F.jvp(f, (u,), (v,))[1].sum())(x)
    assert seen == [False, True]
