"""tg.compile of ops whose operands have different dtypes: the casts type promotion
makes are steps of the captured program (each call replays, none runs eagerly), and
the replays' values and gradients are the eager ones."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

W64 = tg.tensor(np.array([0.5, -1.5, 2.0]), dtype=tg.float64)
FILL = tg.tensor([1, 2, 3])

CASES = {
    "mask": lambda x: x * (x > 0),
    "bool_times_float": lambda x: (x > 0) * 0.5 + x,
    "float32_times_float64": lambda x: x * W64,
    "plus_a_float64_factory": lambda x: x + tg.zeros(3, dtype=tg.float64) + 1,
    "times_an_int_range": lambda x: x * tg.arange(3),
    "where_of_an_int": lambda x: tg.where(x > 0, x, FILL),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_mixed_dtype_op_replays_with_the_eager_values_and_gradients(name):
    fn = CASES[name]

    def step(x):
        y = fn(x)
        (y * y).sum().backward()
        return y

    cf = tg.compile(step)
    rs = np.random.RandomState(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an eager fallback warns)
        for _ in range(4):
            data = rs.randn(3).astype(np.float32)
            x = tg.tensor(data, requires_grad=True)
            xe = tg.tensor(data, requires_grad=True)
            got, want = cf(x), step(xe)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
            np.testing.assert_array_equal(x.grad.numpy(), xe.grad.numpy())
    s = cf.stats()
    assert s["captures"] == 1 and s["replays"] == 3 and s["eager_calls"] == 0


def test_a_promoted_product_has_the_finite_difference_gradient():
    """float32 times float64: the gradient flows back through the cast to float32,
    checked in float64 against central differences of the compiled function."""
    w = tg.tensor(np.array([0.3, -0.7, 1.1]), dtype=tg.float64)

    def loss(x):
        return ((x.float() * w) ** 2).sum()

    def step(x):
        out = loss(x)
        out.backward()
        return out

    cf = tg.compile(step)
    x0 = np.array([0.2, -0.4, 0.9])
    for _ in range(3):
        x = tg.tensor(x0, requires_grad=True)
        cf(x)
    assert cf.stats()["replays"] == 2
    eps = 1e-3
    fd = [(loss(tg.tensor(x0 + eps * e)).item() - loss(tg.tensor(x0 - eps * e)).item())
          / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-4, atol=1e-6)
