"""The interop examples' pieces, quickly (the scripts themselves train for seconds):
the digits CNN built on tapegrad's exported conv2d/max_pool2d gives PyTorch's own
loss and gradients; the example's from_torch mish matches tapegrad's mish."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def test_cnn_on_exported_ops_matches_pytorchs_own():
    from tapegrad.examples.interop_torch_cnn import DigitsCNN
    from tapegrad.interop import torch_ops
    torch.manual_seed(0)
    ours, theirs = DigitsCNN(torch_ops()), DigitsCNN()
    theirs.load_state_dict(ours.state_dict())
    x = torch.from_numpy(np.random.default_rng(0).random((16, 64), np.float32))
    y = torch.from_numpy(np.random.default_rng(1).integers(0, 10, 16))
    losses = []
    for m in (ours, theirs):
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        losses.append(loss.item())
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for (n, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=n)


def test_from_torch_mish_matches_tapegrads():
    from tapegrad.examples.interop_from_torch import torch_mish
    from tapegrad.interop import from_torch
    mish = from_torch(torch_mish, name="test_torch_mish")
    try:
        x = tg.tensor(np.linspace(-3, 3, 11), requires_grad=True)
        y = mish(x)
        (g,) = tg.grad(y.sum(), [x])
        x2 = tg.tensor(np.linspace(-3, 3, 11), requires_grad=True)
        y2 = tg.nn.functional.mish(x2)
        (g2,) = tg.grad(y2.sum(), [x2])
        np.testing.assert_allclose(y.detach().numpy(), y2.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(g.numpy(), g2.numpy(), rtol=1e-10)
    finally:
        tg.ops_registry.unregister("test_torch_mish")
