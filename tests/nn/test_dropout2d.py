"""nn.Dropout2d / F.dropout2d against PyTorch: whole channels dropped at the rate p, the
gradient is the mask, seeded draws repeat, inplace, argument errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg


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
