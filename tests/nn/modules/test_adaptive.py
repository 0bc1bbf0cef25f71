"""AdaptiveLogSoftmaxWithLoss against PyTorch in float64: with PyTorch's weights it gives
PyTorch's output, loss, log_prob, predict and gradients; PyTorch's errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


@pytest.mark.parametrize("head_bias,batched", [(False, True), (True, True), (False, False)])
def test_adaptive_log_softmax_matches_torch(head_bias, batched):
    torch.manual_seed(0)
    mt = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 9, 15], div_value=2.0,
                                             head_bias=head_bias).double()
    mg = tg.nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 9, 15], div_value=2.0,
                                          head_bias=head_bias).double()
    st = mt.state_dict()
    assert list(st) == list(mg.state_dict())
    mg.load_state_dict({k: tg.tensor(v.numpy()) for k, v in st.items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 16))
    t = np.array([0, 3, 5, 19, 12, 9, 4])
    if not batched:
        x, t = x[1], t[1]
    xt, xg = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    ot, og = mt(xt, torch.tensor(t)), mg(xg, tg.tensor(t))
    np.testing.assert_allclose(_np(og.output), ot.output.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(_np(og.loss), ot.loss.detach().numpy(), rtol=1e-10)
    (ot.loss + ot.output.sum() * 0.5).backward()
    (og.loss + og.output.sum() * 0.5).backward()
    np.testing.assert_allclose(_np(xg.grad), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    for (k, pt), (k2, pg) in zip(mt.named_parameters(), mg.named_parameters()):
        assert k == k2
        gt = np.zeros(pt.shape) if pt.grad is None else pt.grad.numpy()
        gg = np.zeros(tuple(pg.shape)) if pg.grad is None else _np(pg.grad)
        np.testing.assert_allclose(gg, gt, rtol=1e-9, atol=1e-12, err_msg=k)
    if batched:
        np.testing.assert_allclose(_np(mg.log_prob(tg.tensor(x))),
                                   mt.log_prob(torch.tensor(x)).detach().numpy(), rtol=1e-10)
        np.testing.assert_array_equal(mg.predict(tg.tensor(x)).numpy(),
                                      mt.predict(torch.tensor(x)).numpy())


def test_adaptive_log_softmax_errors_like_torch():
    with pytest.raises(ValueError):
        tg.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 4])
    with pytest.raises(ValueError):
        tg.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [])
    m = tg.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4])
    with pytest.raises(RuntimeError, match="Target values"):
        m(tg.zeros(2, 8), tg.tensor([1, 10]))
    with pytest.raises(RuntimeError, match="batch"):
        m(tg.zeros(3, 8), tg.tensor([1, 2]))
