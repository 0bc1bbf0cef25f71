"""Ops are silent about floating-point exceptions, as PyTorch's: log(0) is -inf, 1/0
inf, sqrt(-1) nan, exp(1000) inf, with no RuntimeWarning, forward and backward, eager
and compiled; NumPy's own error state outside tapegrad is left as the user set it."""
import warnings

import numpy as np
import pytest
import torch

import tapegrad as tg

CASES = [
    ("log", lambda m, x: m.log(x), [0.0, 1.0]),
    ("reciprocal", lambda m, x: 1 / x, [0.0, 2.0]),
    ("sqrt", lambda m, x: m.sqrt(x), [-1.0, 4.0]),
    ("exp", lambda m, x: m.exp(x), [1000.0, 0.0]),
    ("sub inf", lambda m, x: m.exp(x) - m.exp(x), [1000.0, 1.0]),
]


@pytest.mark.parametrize("name,f,vals", CASES, ids=[c[0] for c in CASES])
def test_forward_and_backward_silent_and_as_pytorch(name, f, vals):
    x = tg.tensor(vals, requires_grad=True)
    tx = torch.tensor(vals, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = f(tg, x)
        y.sum().backward()
        g, = tg.autograd.grad(f(tg, x).sum(), x, create_graph=True)
    ty = f(torch, tx)
    ty.sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(g.detach().numpy(), tx.grad.numpy())


def test_compiled_silent():
    f = tg.compile(lambda x: tg.log(x) * 2 + 1 / x)
    x = tg.tensor([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = [f(x).numpy() for _ in range(3)]
    want = torch.log(torch.tensor([0.0, 1.0])) * 2 + 1 / torch.tensor([0.0, 1.0])
    for o in outs:
        np.testing.assert_array_equal(o, want.numpy())


def test_numpy_error_state_is_the_users():
    with np.errstate(divide="raise"):
        tg.log(tg.zeros(2))  # silent inside tapegrad
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(1))  # the user's setting, outside
    assert np.geterr()["divide"] == "warn"


def test_half_width_overflow_and_compiled_module_silent():
    """A float16 result that overflows to inf (rounded from float32) and a compiled
    module's forward and backward replays on inf/nan values are silent too."""
    big = tg.full((2, 2), 6e4, dtype=tg.float16)
    lin = tg.nn.Linear(2, 2)
    cm = tg.compile(lin)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isinf((big * 10).float().numpy()).all()
        assert np.isinf((big @ big).float().numpy()).all()
        for v in (1.0, 1.0, np.inf, np.nan):
            out = cm(tg.full((3, 2), v))
            out.sum().backward()
        assert np.isnan(lin.weight.grad.numpy()).any()
