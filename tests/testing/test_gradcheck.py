"""``tg.testing.gradcheck`` and ``gradgradcheck`` catch what they are for.

Each check is run on a correct op (it passes) and on an op that is wrong in the way
the check exists to find (it fails, by raising or by returning False): a wrong first
derivative for ``gradcheck``; for ``gradgradcheck`` an adjoint computed on detached
raw arrays (no second-order path at all) and an adjoint that is connected to the
cotangent but not to the input (a wrong second derivative).
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck


def _raw(a):
    return a.detach().numpy() if isinstance(a, tg.Tensor) else np.asarray(a)


def _like(value, template):
    """``value`` as a Tensor when the adjoint was handed Tensors, else a raw array."""
    return tg.tensor(value) if isinstance(template, tg.Tensor) else value


def _inputs():
    x = tg.tensor(np.array([0.3, -1.2, 2.0, 0.7]), requires_grad=True)
    y = tg.tensor(np.array([1.5, 0.5, -0.7, 0.2]), requires_grad=True)
    return x, y


def test_correct_op_passes_both(fresh_name):
    f = tg.custom_op(fresh_name, lambda x, y: np.sin(x) * y,
                     lambda g, x, y: (g * tg.cos(x) * y, g * tg.sin(x)))
    assert gradcheck(f, _inputs())
    assert gradgradcheck(f, _inputs())


def test_gradcheck_catches_a_wrong_first_derivative(fresh_name):
    f = tg.custom_op(fresh_name, np.sin, lambda g, x: g * tg.cos(x) * 1.01)
    x, _ = _inputs()
    with pytest.raises(AssertionError, match="Jacobian mismatch for input 0"):
        gradcheck(f, (x,))
    assert gradcheck(f, (x,), raise_exception=False) is False


def test_gradgradcheck_catches_an_adjoint_on_detached_arrays(fresh_name):
    # first order is right, but the gradient is rebuilt from raw arrays, so nothing
    # records it: the second-order path is missing
    f = tg.custom_op(fresh_name, np.sin,
                     lambda g, x: _like(np.cos(_raw(x)) * _raw(g), x))
    x, _ = _inputs()
    assert gradcheck(f, (x,))
    gx, = tg.grad(f(x), [x], grad_outputs=[tg.ones(4, dtype=tg.float64)], create_graph=True)
    assert not gx.requires_grad  # the defect under test: a detached first-order gradient
    with pytest.raises(AssertionError, match="not connected to the inputs"):
        gradgradcheck(f, (x,))
    assert gradgradcheck(f, (x,), raise_exception=False) is False


def test_gradgradcheck_catches_a_wrong_second_derivative(fresh_name):
    # connected to the cotangent g, but x is detached: d/dx of the gradient is lost
    f = tg.custom_op(fresh_name, np.sin, lambda g, x: g * tg.cos(x.detach())
                     if isinstance(x, tg.Tensor) else g * np.cos(x))
    x, _ = _inputs()
    assert gradcheck(f, (x,))
    with pytest.raises(AssertionError, match="second-order mismatch.*against input 0"):
        gradgradcheck(f, (x,))
    assert gradgradcheck(f, (x,), raise_exception=False) is False


def test_gradgradcheck_accepts_an_unused_input_and_a_linear_op(fresh_name):
    # x * 3 ignores y: the first-order gradient of y is None (zero everywhere), and the
    # gradient of x, 3 * v, has no x-dependence: both are right, and must pass
    f = tg.custom_op(fresh_name, lambda x, y: x * 3.0, lambda g, x, y: (g * 3.0, None))
    assert gradgradcheck(f, _inputs())


def test_gradgradcheck_given_grad_outputs(fresh_name):
    f = tg.custom_op(fresh_name, np.sin, lambda g, x: g * tg.cos(x))
    x, _ = _inputs()
    v = tg.tensor(np.array([0.5, -2.0, 1.0, 3.0]), requires_grad=True)
    assert gradgradcheck(f, (x,), grad_outputs=(v,))
    with pytest.raises(ValueError, match="2 grad_outputs for 1 outputs"):
        gradgradcheck(f, (x,), grad_outputs=(v, v))


def test_torch_arguments_and_checks():
    x = tg.tensor([0.3, -1.2, 2.0], dtype=tg.float64, requires_grad=True)
    f = lambda x: (x * x).sin()  # noqa: E731
    assert tg.autograd.gradcheck is tg.testing.gradcheck
    assert tg.testing.gradcheck(f, (x,), check_forward_ad=True, check_grad_dtypes=True,
                                fast_mode=True, check_undefined_grad=True)
    assert tg.testing.gradcheck(f, (x,), check_forward_ad=True, check_backward_ad=False)
    assert tg.autograd.gradgradcheck(f, (x,), check_rev_over_rev=True, fast_mode=True,
                                     gen_non_contig_grad_outputs=False)
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        tg.testing.gradcheck(f, (tg.ones(2, dtype=tg.float64),))
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        tg.testing.gradgradcheck(f, (tg.ones(2, dtype=tg.float64),))
    with pytest.raises(NotImplementedError, match="check_batched_grad"):
        tg.testing.gradcheck(f, (x,), check_batched_grad=True)


def test_forward_mode_check_catches_a_wrong_jvp():
    class Bad(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, g):
            return g * 3

        @staticmethod
        def jvp(ctx, t):
            return t * 2   # wrong: the derivative is 3
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    assert tg.testing.gradcheck(Bad.apply, (x,))
    with pytest.raises(tg.testing.GradcheckError, match="forward-mode"):
        tg.testing.gradcheck(Bad.apply, (x,), check_forward_ad=True)
