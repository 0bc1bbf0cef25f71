"""Fused kernels keep IEEE's special values: a chain run by ``@tg.fuse`` or a
``tg.compile`` program gives what the ops give one by one at 0, inf, NaN, a
negative and a float32 subnormal (the compiled kernels' fastmath flags may not turn
``1 / sqrt(x)`` into an estimate, which gave NaN at 0 and inf and -inf at 1e-40)."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

# (not -0.0: the kernels' nsz flag leaves the sign of a zero unspecified)
SPECIAL = [-1.5, 0.0, 2.0, np.inf, -np.inf, np.nan, 1e-40, 3.0e38, 89.2, -89.2, 100.0, 25.0]
CHAINS = {
    "rsqrt": lambda x: tg.rsqrt(x * 1.0),
    "rsqrt of relu": lambda x: tg.rsqrt(tg.relu(x)),
    "divided by sqrt": lambda x: (x + 1.0) / tg.sqrt(x * 1.0),
    "pow -0.5": lambda x: (x * 1.0) ** -0.5,
    "pow 0.5": lambda x: (x * 1.0) ** 0.5,
    "reciprocal": lambda x: 1.0 / (x * 1.0),
    "divided by a sum": lambda x: x / (x + x),
    "sqrt": lambda x: tg.sqrt(x * 1.0) * 2.0,
    # float32 sinh(89.2) and cosh(89.2) are 2.7e38, short of overflow (e^x is not)
    "sinh": lambda x: tg.sinh(x) * 1.0,
    "cosh": lambda x: tg.cosh(x) * 1.0,
    # NumPy: two equal infinities give that infinity
    "logaddexp of equals": lambda x: tg.logaddexp(x, x * 1.0),
    "logaddexp": lambda x: tg.logaddexp(x, 1.0 - x),
    # no reassociation: NaN at inf and NaN, not -1 and x
    "x - (x + 1)": lambda x: x - (x + 1.0),
    "x - x * 0": lambda x: x - x * 0.0,
    "sum of x - (x + 1)": lambda x: tg.sum(x - (x + 1.0), dim=0, keepdim=True),
}


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fused_chains_keep_special_values(name, dtype):
    fn = CHAINS[name]
    # long enough for the compiled kernels (not the small-array path)
    x = tg.tensor(np.tile(np.array(SPECIAL), 512), dtype=dtype)
    want = fn(x).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = tg.fuse(fn)(x).numpy()
        c = tg.compile(fn)
        c(x)
        compiled = c(x).numpy()
        assert c.stats()["replays"] == 1
    for got in (fused, compiled):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_array_equal(np.signbit(got[np.isinf(want)]),
                                      np.signbit(want[np.isinf(want)]))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=4e-7 if dtype == tg.float32
                                   else 1e-15)


EXACT = {  # (chain, inputs, its exact results): what the ops give one by one, and fused
    "floor of log2": (lambda x: tg.floor(tg.log2(x * 1.0)), 2.0 ** np.arange(-60, 60),
                      np.arange(-60.0, 60.0)),
    "exp2 of integers": (lambda x: tg.exp2(x * 1.0) - 0.0, np.arange(-60.0, 60.0),
                         2.0 ** np.arange(-60, 60)),
    # powers of ten that float32 holds exactly
    "log10 of powers of ten": (lambda x: tg.log10(x * 1.0) * 1.0, 10.0 ** np.arange(0, 11),
                               np.arange(0.0, 11.0)),
}


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(EXACT))
def test_fused_exp2_log2_log10_are_exact_where_the_ops_are(name, dtype):
    fn, values, exact = EXACT[name]
    x = tg.tensor(np.tile(values, 64), dtype=dtype)
    want = fn(x).numpy()
    np.testing.assert_array_equal(want, np.tile(exact, 64).astype(want.dtype))
    c = tg.compile(fn)
    c(x)
    for got in (tg.fuse(fn)(x).numpy(), c(x).numpy()):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64], ids=["float32", "float64"])
def test_fused_logaddexp_gradient_is_the_ops(dtype):
    """sigmoid(x - y), the op's own adjoint: near x == -y the derivative of max + log1p(..)
    lost digits (6e-5 relative in float32 at 1e-3), and at equal infinities it is NaN as
    PyTorch's."""
    x0 = np.tile([-1e-3, 1e-3, 0.5, -2.0, 30.0, np.inf, -np.inf, np.nan], 512)

    def grad(fn):
        x = tg.tensor(x0, dtype=dtype, requires_grad=True)
        fn(x).sum().backward()
        return x.grad.numpy()

    for fn in (lambda x: tg.logaddexp(x, -x), lambda x: tg.logaddexp(x, x + 1.0)):
        want = grad(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = grad(tg.fuse(fn))
        np.testing.assert_allclose(got, want, rtol=2e-7 if dtype == tg.float32 else 1e-15)
