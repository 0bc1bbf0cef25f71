"""smooth_l1_loss / huber_loss and their modules against PyTorch: values, gradients,
finite differences, argument errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0, 0.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_smooth_l1_loss_vs_torch(beta, reduction):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((4, 5)) * 2, rng.standard_normal((4, 5))
    x, tx = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    r = tg.nn.functional.smooth_l1_loss(x, tg.tensor(b), reduction=reduction, beta=beta)
    tr = torch.nn.functional.smooth_l1_loss(tx, torch.tensor(b), reduction=reduction, beta=beta)
    np.testing.assert_allclose(r.detach().numpy(), tr.detach().numpy(), rtol=1e-12)
    r.sum().backward()
    tr.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-15)
    m = tg.nn.SmoothL1Loss(reduction=reduction, beta=beta)
    tm = torch.nn.SmoothL1Loss(reduction=reduction, beta=beta)
    np.testing.assert_allclose(m(tg.tensor(a), tg.tensor(b)).numpy(),
                               tm(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("delta", [1.0, 0.3])
def test_huber_loss_vs_torch(delta):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((6,)), rng.standard_normal((6,))
    x, tx = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    r = tg.nn.functional.huber_loss(x, tg.tensor(b), delta=delta)
    tr = torch.nn.functional.huber_loss(tx, torch.tensor(b), delta=delta)
    np.testing.assert_allclose(r.item(), tr.item(), rtol=1e-12)
    r.backward()
    tr.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tg.nn.HuberLoss(delta=delta)(tg.tensor(a), tg.tensor(b)).item(),
                               torch.nn.HuberLoss(delta=delta)(torch.tensor(a),
                                                               torch.tensor(b)).item())


def test_smooth_l1_finite_differences_and_errors():
    rng = np.random.default_rng(4)
    x = tg.tensor(rng.standard_normal((3, 4)) * 2, requires_grad=True)
    y = tg.tensor(rng.standard_normal((3, 4)))
    assert gradcheck(lambda v: tg.nn.functional.smooth_l1_loss(v, y, beta=0.7), (x,))
    assert gradgradcheck(lambda v: tg.nn.functional.smooth_l1_loss(v, y, beta=0.7), (x,))
    with pytest.raises(RuntimeError, match="negative values for beta"):
        tg.nn.functional.smooth_l1_loss(x, y, beta=-1.0)
    with pytest.raises(ValueError, match="reduction"):
        tg.nn.functional.smooth_l1_loss(x, y, reduction="avg")
    with pytest.raises(ValueError):
        tg.nn.functional.smooth_l1_loss(x, tg.ones(2, 5))
