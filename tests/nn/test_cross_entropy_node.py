"""cross_entropy's one-node eager path (logits (N, C), class indices, mean or sum)
against PyTorch: values, gradients, second derivatives, ignored targets."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")
F = tg.nn.functional

CASES = [([0, 3, 1, 2, 3], -100), ([0, -100, 1, 2, 3], -100), ([2, 0, 1, 2, 3], 2),
         ([-100] * 5, -100)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("target,ignore", CASES)
def test_against_torch(dtype, reduction, target, ignore):
    x = np.random.default_rng(abs(ignore) + target[0] % 7).standard_normal((5, 4)).astype(dtype)
    t = np.array(target)
    a = tg.tensor(x, requires_grad=True)
    loss = F.cross_entropy(a, tg.tensor(t), ignore_index=ignore, reduction=reduction)
    loss.backward()
    b = torch.tensor(x, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(b, torch.tensor(t), ignore_index=ignore,
                                            reduction=reduction)
    ref.backward()
    tol = 1e-6 if dtype == np.float32 else 1e-12
    assert loss.dtype == (tg.float32 if dtype == np.float32 else tg.float64)
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=tol, atol=tol, equal_nan=True)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("target", [[0, 3, 1, 2, 3], [0, -100, 1, 2, 3]])
def test_second_derivative(target):
    x = np.random.default_rng(1).standard_normal((5, 4))
    t = np.array(target)
    a = tg.tensor(x, requires_grad=True)
    (ga,) = tg.grad(F.cross_entropy(a, tg.tensor(t)), [a], create_graph=True)
    (gga,) = tg.grad((ga * ga).sum(), [a])
    b = torch.tensor(x, requires_grad=True)
    (gb,) = torch.autograd.grad(torch.nn.functional.cross_entropy(b, torch.tensor(t)), [b],
                                create_graph=True)
    (ggb,) = torch.autograd.grad((gb * gb).sum(), [b])
    np.testing.assert_allclose(ga.detach().numpy(), gb.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(gga.numpy(), ggb.numpy(), atol=1e-12)


def test_target_written_after_forward():
    x = tg.randn(4, 3, requires_grad=True)
    t = tg.tensor([0, 2, 1, 2])
    loss = F.cross_entropy(x, t)
    with tg.no_grad():
        t.copy_(tg.tensor([1, 1, 1, 1]))
    loss.backward()
    b = torch.tensor(x.detach().numpy(), requires_grad=True)
    torch.nn.functional.cross_entropy(b, torch.tensor([0, 2, 1, 2])).backward()
    np.testing.assert_allclose(x.grad.numpy(), b.grad.numpy(), atol=1e-6)


def test_out_of_range_target():
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(tg.randn(2, 3), tg.tensor([0, 3]))
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(tg.randn(2, 3), tg.tensor([-100, -1]))
