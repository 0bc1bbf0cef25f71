"""scaled_dot_product_attention with a query whose every key is masked: PyTorch's safe
softmax gives that row zeros and zero gradients (not NaN), for bool and float masks,
and the other rows' values and gradients are untouched."""
import numpy as np
import pytest
import torch

import tapegrad as tg


@pytest.mark.parametrize("float_mask", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fully_masked_rows_match_pytorch(float_mask, dtype):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 4)))
    keep = np.ones((3, 5), bool)
    keep[1] = False  # every key masked for query 1
    keep[2, :3] = False
    mask = np.where(keep, 0.0, -np.inf).astype(dtype) if float_mask else keep
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                            attn_mask=torch.tensor(mask))
    (want * want).sum().backward()
    gq, gk, gv = (tg.tensor(a, requires_grad=True) for a in (q, k, v))
    got = tg.nn.functional.scaled_dot_product_attention(gq, gk, gv, attn_mask=tg.tensor(mask))
    (got * got).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    assert np.all(got.detach().numpy()[:, 1] == 0)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **tol)
    for a, b in ((gq, tq), (gk, tk), (gv, tv)):
        assert np.isfinite(a.grad.numpy()).all()
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **tol)
