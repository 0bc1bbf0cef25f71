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


@pytest.mark.parametrize("qdt", ["bfloat16", "float16", "float64"])
def test_sdpa_float32_mask_takes_the_query_dtype_as_torch(qdt):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    m = rng.standard_normal((4, 4)).astype(np.float32)
    tq = tg.tensor(q).to(getattr(tg, qdt))
    got = tg.nn.functional.scaled_dot_product_attention(tq, tq, tq, attn_mask=tg.tensor(m))
    Q = torch.tensor(q).to(getattr(torch, qdt))
    want = torch.nn.functional.scaled_dot_product_attention(Q, Q, Q, attn_mask=torch.tensor(m))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    tol = 1e-12 if qdt == "float64" else 2e-2
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=tol, atol=tol)
    for mdt in ("float64", "int64"):   # neither bool, float32 nor the query's: refused
        if mdt == qdt:
            continue
        with pytest.raises(RuntimeError, match="attn_mask dtype"):
            tg.nn.functional.scaled_dot_product_attention(
                tq, tq, tq, attn_mask=tg.tensor(m).to(getattr(tg, mdt)))


def test_sdpa_grouped_query_attention_as_torch():
    """``enable_gqa=True``: key and value with fewer heads than the query (each serving
    a group of query heads): values and gradients as PyTorch's; heads that do not
    divide the query's raise its RuntimeError; without the flag the shapes must match."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in ((2, 8, 5, 4), (2, 2, 6, 4), (2, 4, 6, 3)))
    res = []
    for L in (tg, torch):
        Q, K, V = (L.tensor(a, requires_grad=True) for a in (q, k, v))
        o = L.nn.functional.scaled_dot_product_attention(Q, K, V, enable_gqa=True,
                                                         is_causal=True)
        (o * o).sum().backward()
        res.append([o.detach().numpy(), Q.grad.numpy(), K.grad.numpy(), V.grad.numpy()])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    Q = tg.tensor(q)
    with pytest.raises(RuntimeError, match="must divide"):
        tg.nn.functional.scaled_dot_product_attention(
            Q, tg.tensor(rng.standard_normal((2, 3, 6, 4))),
            tg.tensor(rng.standard_normal((2, 3, 6, 3))), enable_gqa=True)
    with pytest.raises(RuntimeError):
        tg.nn.functional.scaled_dot_product_attention(Q, tg.tensor(k), tg.tensor(v))
