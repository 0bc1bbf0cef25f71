"""Tensor methods of the method table (``ops/methods.py``): hardshrink, prelu, slice_inverse against
PyTorch (values and gradients), and ``x.bfloat16()`` (ml_dtypes' NumPy bfloat16)."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def test_hardshrink_prelu_slice_inverse_like_pytorch():
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4))
    src = np.random.default_rng(1).uniform(-1, 1, (3, 6))
    res = []
    for L in (tg, torch):
        a = L.tensor(x, requires_grad=True)
        w = L.tensor([0.25], dtype=L.float64, requires_grad=True)
        s = L.tensor(src, requires_grad=True)
        # (PyTorch's slice_inverse is a view op: self must be a slice of src's memory)
        outs = [a.hardshrink(0.3), a.prelu(w), (s[:, 1:3] * 1).slice_inverse(s, 1, 1, 3)
                if L is tg else s[:, 1:3].slice_inverse(s, 1, 1, 3)]
        sum((o * (k + 1)).sum() for k, o in enumerate(outs)).backward()
        res.append([o.detach().numpy() for o in outs] + [a.grad.numpy(), w.grad.numpy(),
                                                         s.grad.numpy()])
    for p, q in zip(*res):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)


def test_bfloat16_method_rounds_as_pytorch():
    import torch
    v = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    t = tg.tensor(v).bfloat16()
    assert t.dtype == tg.bfloat16
    np.testing.assert_array_equal(t.float().numpy(), torch.tensor(v).bfloat16().float().numpy())
