"""fractional_max_pool2d/3d (and their modules) against PyTorch in float64: with the same
``_random_samples`` the windows, values, indices and gradients equal PyTorch's; without
them the samples come from tapegrad's generator (``tg.manual_seed`` repeats a call)."""
import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.testing import gradcheck, gradgradcheck

TF = torch.nn.functional


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


CASES = [
    (2, (2, 3, 11, 9), 2, (5, 4), None),
    (2, (1, 2, 8, 8), 3, None, (0.5, 0.5)),
    (2, (3, 10, 7), (2, 3), (6, 3), None),
    (2, (2, 2, 50, 32), 3, (13, 12), None),
    (3, (2, 3, 7, 9, 8), 2, (3, 5, 4), None),
    (3, (1, 2, 8, 8, 6), (3, 2, 2), None, (0.5, 0.5, 0.5)),
    (3, (3, 6, 7, 5), 2, (4, 3, 3), None),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nd,shape,k,out,ratio", CASES)
def test_fractional_max_pool_matches_torch(nd, shape, k, out, ratio, dtype):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = rng.standard_normal(shape).astype(dtype)
    n = 1 if len(shape) == nd + 1 else shape[0]
    s = rng.random((n, shape[-nd - 1], nd)).astype(dtype)
    xt, xg = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    a, ia = getattr(TF, f"fractional_max_pool{nd}d")(xt, k, out, ratio, True,
                                                   _random_samples=torch.tensor(s))
    b, ib = getattr(F, f"fractional_max_pool{nd}d")(xg, k, out, ratio, True,
                                                  _random_samples=tg.tensor(s))
    np.testing.assert_array_equal(_np(b), a.detach().numpy())
    np.testing.assert_array_equal(ib.numpy(), ia.numpy())
    w = rng.standard_normal(tuple(a.shape)).astype(dtype)
    (a * torch.tensor(w)).sum().backward()
    (b * tg.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(xg.grad), xt.grad.numpy(), rtol=1e-6)


def test_fractional_max_pool_gradients_by_finite_differences():
    x = tg.tensor(np.random.default_rng(0).permutation(63).reshape(1, 1, 7, 9) / 9.0,
                  requires_grad=True)
    s = tg.tensor(np.array([[[0.3, 0.8]]]))

    def fn(x):
        return F.fractional_max_pool2d(x, 2, output_size=(4, 5), _random_samples=s)
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


def test_fractional_max_pool_draws_from_tapegrads_generator():
    x = tg.tensor(np.random.default_rng(1).standard_normal((2, 3, 9, 9)))
    tg.manual_seed(7)
    a = F.fractional_max_pool2d(x, 2, output_size=4)
    tg.manual_seed(7)
    s = tg.rand(2, 3, 2, dtype=tg.float64)
    b = F.fractional_max_pool2d(x, 2, output_size=4, _random_samples=s)
    np.testing.assert_array_equal(_np(a), _np(b))
    c = F.fractional_max_pool2d(x, 2, output_size=4)  # the next draw: other windows
    assert c.shape == a.shape
    tg.manual_seed(7)
    m = tg.nn.FractionalMaxPool2d(2, output_size=4)
    np.testing.assert_array_equal(_np(m(x)), _np(a))
    m3 = tg.nn.FractionalMaxPool3d(2, output_ratio=0.5, return_indices=True)
    v, i = m3(tg.tensor(np.random.default_rng(2).standard_normal((1, 2, 6, 8, 6))))
    assert v.shape == (1, 2, 3, 4, 3) and i.shape == v.shape and i.dtype == tg.int64


@pytest.mark.parametrize("kw,exc", [({}, ValueError), ({"output_size": 8}, RuntimeError),
                                    ({"output_ratio": (1.5, 0.5)}, RuntimeError)])
def test_fractional_max_pool_errors_like_torch(kw, exc):
    x = np.zeros((1, 2, 6, 6))
    s = np.full((1, 2, 2), 0.5)
    with pytest.raises(exc):
        TF.fractional_max_pool2d(torch.tensor(x), 2, _random_samples=torch.tensor(s), **kw)
    with pytest.raises(exc, match="fractional_max_pool2d"):
        F.fractional_max_pool2d(tg.tensor(x), 2, _random_samples=tg.tensor(s), **kw)
    with pytest.raises(ValueError):
        tg.nn.FractionalMaxPool2d(2)
    with pytest.raises(ValueError):
        tg.nn.FractionalMaxPool2d(2, output_ratio=1.5)
