"""optim.Adadelta step for step, nn.Dropout2d, smooth_l1_loss / huber_loss, vs PyTorch."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.fusion import update as fused_update
from tapegrad.testing import gradcheck, gradgradcheck

SHAPES = [(5, 3), (7,), (2, 3, 4)]


@pytest.fixture(params=["fused", "numpy"])
def update_path(request, monkeypatch):
    if request.param == "fused":
        pytest.importorskip("numba")
        monkeypatch.setattr(fused_update.config, "min_numel", 0)
    else:
        monkeypatch.setattr(fused_update.config, "use_numba", False)
    return request.param


@pytest.mark.parametrize("kw", [dict(), dict(lr=0.5, rho=0.8, weight_decay=0.1),
                                dict(eps=1e-4, maximize=True), dict(rho=0.0, lr=0.1)],
                         ids=["defaults", "wd", "maximize", "rho0"])
def test_adadelta_matches_torch_after_10_steps(kw, update_path):
    rng = np.random.default_rng(0)
    inits = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(10)]
    a = [tg.nn.Parameter(tg.tensor(x.copy())) for x in inits]
    b = [torch.nn.Parameter(torch.tensor(x.copy())) for x in inits]
    o1 = tg.optim.Adadelta(a, **kw)
    o2 = torch.optim.Adadelta(b, foreach=False, **kw)
    for step in grads:
        for p, q, g in zip(a, b, step):
            p.grad = tg.tensor(g.copy())
            q.grad = torch.tensor(g.copy())
        o1.step()
        o2.step()
    for p, q in zip(a, b):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-6, atol=2e-6)
    st = o1.state_dict()["state"][0]
    assert st["step"] == 10
    np.testing.assert_allclose(np.asarray(st["square_avg"].numpy()),
                               o2.state_dict()["state"][0]["square_avg"].numpy(), rtol=2e-6)


def test_adadelta_fused_equals_numpy_float64():
    pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    init = rng.standard_normal(5000)
    grads = [rng.standard_normal(5000) for _ in range(3)]
    out = []
    for use in (True, False):
        fused_update.config.use_numba = use
        try:
            p = tg.nn.Parameter(tg.tensor(init.copy()))
            opt = tg.optim.Adadelta([p], lr=0.7, weight_decay=0.1)
            for g in grads:
                p.grad = tg.tensor(g)
                opt.step()
        finally:
            fused_update.config.use_numba = True
        out.append(p.detach().numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-13, atol=1e-15)


def test_adadelta_arguments_checked():
    p = tg.nn.Parameter(tg.zeros(2))
    for kw, msg in [(dict(lr=-1), "Invalid learning rate"), (dict(rho=1.5), "Invalid rho"),
                    (dict(eps=-1), "Invalid epsilon"), (dict(weight_decay=-1), "weight_decay")]:
        with pytest.raises(ValueError, match=msg):
            tg.optim.Adadelta([p], **kw)
        with pytest.raises(ValueError, match=msg):
            torch.optim.Adadelta([torch.nn.Parameter(torch.zeros(2))], **kw)


# ---------------------------------------------------------------- losses
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


# ---------------------------------------------------------------- Dropout2d
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
