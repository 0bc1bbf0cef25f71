"""pow with the scalar exponents computed by multiplications and roots (1, 2, 3, -1, -2,
0.5, -0.5), on every rank including 0-d (a NumPy scalar mid-kernel), forward and the
gradient (whose exponent - 1 lands on another of them), against PyTorch.

relu and its gradient on the threaded (large) and the NumPy (small) paths, against
PyTorch."""
import numpy as np
import pytest
import torch

import tapegrad as tg

EXPONENTS = [1, 2, 3, -1, -2, 0.5, -0.5, 1.5, 4]


@pytest.mark.parametrize("shape", [(), (1,), (2, 3)])
@pytest.mark.parametrize("p", EXPONENTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_scalar_exponent_value_and_gradient(shape, p, dtype):
    a = (np.random.default_rng(0).uniform(0.5, 2.0, shape)).astype(dtype)
    x = tg.tensor(a, requires_grad=True)
    y = tg.sum(x ** p)
    y.backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = (tx ** p).sum()
    ty.backward()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y.item(), ty.item(), rtol=tol)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol)
    assert x.grad.dtype == x.dtype


def test_pow_of_a_0d_sum_to_a_half():  # found by tests/core/test_fuzz.py
    x = tg.tensor(np.array([2.0, 3.0]), requires_grad=True)
    (tg.sum(x) ** 0.5).backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5 / np.sqrt(5.0)] * 2, rtol=1e-14)


@pytest.mark.parametrize("shape", [(7,), (300, 300), (2, 70000)])
def test_relu_and_its_gradient_large_and_small_equal_torch(shape):
    """Above 65536 elements relu and its gradient run as threaded loops: same
    values (NaN passes) and gradients as PyTorch."""
    r = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        x0 = r.standard_normal(shape).astype(dtype)
        x0.flat[3] = np.nan
        g0 = r.standard_normal(shape).astype(dtype)
        x = tg.tensor(x0, requires_grad=True)
        tx = torch.tensor(x0, requires_grad=True)
        y, ty = tg.relu(x), torch.relu(tx)
        np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
        y.backward(tg.tensor(g0))
        ty.backward(torch.tensor(g0))
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


_LAYOUT_UNARY = ["neg", "tanh", "sigmoid", "sin", "exp", "square", "erf", "log", "sqrt",
                 "rsqrt", "reciprocal", "log1p", "abs", "relu"]
_LAYOUT_F = ["softplus", "silu", "gelu", "logsigmoid", "leaky_relu", "elu", "mish",
             "hardtanh", "softmax", "log_softmax"]


@pytest.mark.parametrize("size", [(2, 3, 4), (20, 30, 40)])  # (NumPy's passes; a loop)
@pytest.mark.parametrize("view", ["mT", "permute", "step"])
def test_results_have_torchs_layout(view, size):
    """Each result's strides are PyTorch's: elementwise ops keep a transposed or permuted
    input's layout (at every size: the compiled loop runs in the input's memory order),
    clone too; softmax, log_softmax and logsigmoid write row-major. A ``reshape`` of the
    result then copies, or is a view, where PyTorch's is: what a later in-place write
    changes (the differential fuzzer found clone, logsigmoid and sigmoid apart)."""
    import tapegrad.nn.functional as F
    a = np.abs(np.random.default_rng(0).standard_normal(size)) + 0.1
    x, t = tg.tensor(a), torch.tensor(a)
    x, t = {"mT": (x.mT, t.mT), "permute": (x.permute(2, 0, 1), t.permute(2, 0, 1)),
            "step": (x[:, :, ::2], t[:, :, ::2])}[view]

    def strides(v):  # (a dim of size 1 may have any stride)
        return tuple(s for s, d in zip(v.stride(), v.shape) if d > 1)
    pairs = [(getattr(tg, n)(x), getattr(torch, n)(t), n) for n in _LAYOUT_UNARY]
    pairs += [(getattr(F, n)(x, **({"dim": -1} if "softmax" in n else {})),
               getattr(torch.nn.functional, n)(t, **({"dim": -1} if "softmax" in n else {})),
               "F." + n) for n in _LAYOUT_F]
    pairs += [(x.clone(), t.clone(), "clone"), (x.contiguous(), t.contiguous(), "contiguous"),
              (x * x, t * t, "mul"),
              (x + 2.0, t + 2.0, "add"), (tg.pow(x, x), torch.pow(t, t), "pow")]
    for got, want, name in pairs:
        assert strides(got) == strides(want), name
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, err_msg=name)
