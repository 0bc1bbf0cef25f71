"""The PyTorch-compatible functions of ``ops/compat.py`` against PyTorch.

smooth_l1_loss / huber_loss and their modules against PyTorch: values, gradients,
finite differences, argument errors.

nn.Dropout2d / F.dropout2d against PyTorch: whole channels dropped at the rate p, the
gradient is the mask, seeded draws repeat, inplace, argument errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck


# ---------------------------------------------------------------- smooth_l1_loss, huber_loss
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


# ---------------------------------------------------------------- dropout2d
def _channels(y, shape):
    """Each (n, c) channel of y: all zero or all equal to the kept value."""
    ch = y.reshape(shape[0] * shape[1], -1)
    return ch


@pytest.mark.parametrize("shape", [(8, 64, 3, 3), (16, 32, 5)])
@pytest.mark.filterwarnings("ignore:dropout2d")
def test_dropout2d_drops_whole_channels_like_torch(shape):
    p = 0.3
    tg.manual_seed(0)
    y = tg.nn.Dropout2d(p)(tg.ones(*shape)).numpy()
    ty = torch.nn.Dropout2d(p)(torch.ones(*shape)).numpy()
    for out in (y, ty):
        ch = _channels(out, shape)
        assert set(np.unique(ch)) <= {0.0, np.float32(1 / (1 - p))}
        assert (ch.min(axis=1) == ch.max(axis=1)).all()  # whole channels
        frac = (ch[:, 0] == 0).mean()
        assert abs(frac - p) < 0.08
    m = tg.nn.Dropout2d(p).eval()
    x = tg.ones(*shape)
    assert m(x) is x


def test_dropout2d_gradient_is_the_mask_and_seeded():
    tg.manual_seed(1)
    x = tg.tensor(np.random.default_rng(0).standard_normal((4, 6, 2, 2)), requires_grad=True)
    y = tg.nn.functional.dropout2d(x, 0.5)
    y.sum().backward()
    mask = y.detach().numpy() / x.detach().numpy()
    np.testing.assert_allclose(x.grad.numpy(), mask, rtol=1e-12)
    tg.manual_seed(1)
    y2 = tg.nn.functional.dropout2d(x.detach(), 0.5)
    np.testing.assert_array_equal(y2.numpy(), y.detach().numpy())
    z = tg.ones(2, 3, 4, 4)
    assert tg.nn.functional.dropout2d(z, 0.5, inplace=True) is z
    with pytest.raises(ValueError, match="between 0 and 1"):
        tg.nn.functional.dropout2d(z, 1.5)
    assert (tg.nn.functional.dropout2d(z, 1.0).numpy() == 0).all()
