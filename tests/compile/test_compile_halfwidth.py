"""tg.compile of bfloat16/float16 elementwise chains (compiler/program.py's fusion).

The capture records a half-width op as eager runs it: a cast of its operands to
float32, the float32 op and a cast back (one rounding per op). The fusion runs such a
chain as one kernel over the 16-bit elements that keeps every captured rounding
(float16: a kernel per rounding), so the compiled values equal eager's bit for bit
(and PyTorch's op-by-op rounding for operations float32 computes exactly)."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")


def _bits(t):
    a = t.detach().numpy()
    return a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(np.uint32)


def _fused_patterns(c):
    return [st.fused[1] for st in c._last.steps if st.kind == "fused"]


def _chain(h):
    return h * 0.5 + h * h - 1.0


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
def test_half_chain_is_one_kernel_equal_to_eager_and_torch(dtype):
    tg.manual_seed(0)
    x = tg.randn(33, 65).to(dtype)

    def step(inp):
        return _chain(inp)

    c = tg.compile(step)
    with tg.no_grad():
        want = step(x)
        for _ in range(3):
            got = c(x)
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))
    tdt = torch.bfloat16 if dtype == tg.bfloat16 else torch.float16
    ref = _chain(torch.from_numpy(x.float().numpy()).to(tdt))
    np.testing.assert_array_equal(_bits(got), ref.view(torch.int16).numpy().view(np.uint16))
    s = c.stats()
    if dtype == tg.bfloat16:
        assert s["fused_groups"] == 1 and s["kernels"] == 1, s
        assert _fused_patterns(c) == ["h"]  # the 16-bit elements read as they are
    else:  # a float16 rounding ends its kernel (the two products of h: one pass)
        assert s["fused_groups"] == s["kernels"] == 3, s
        assert all(set(p) == {"h"} for p in _fused_patterns(c))


def test_bf16_gelu_chain_and_sum_equal_eager():
    tg.manual_seed(1)
    x = tg.randn(64, 48)

    def step(inp):
        h = inp.bfloat16()
        y = F.gelu(h) * 0.5 + h * h - 1.0
        return (y * y).sum(1)

    c = tg.compile(step)
    with tg.no_grad():
        want = step(x)
        c(x)
        got = c(x)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert c.stats()["fused_groups"] == 1


def test_float32_and_half_values_escaping_one_kernel():
    tg.manual_seed(2)
    x = tg.randn(40, 30)

    def step(inp):
        h = (inp * 3.0).bfloat16()      # a float32 value rounded into the chain
        w = h.float() * 0.25 + 1.0      # float32 from the half-width one
        return w, h * w.bfloat16(), (w * h.float()).sum()

    c = tg.compile(step)
    with tg.no_grad():
        want = step(x)
        c(x)
        got = c(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    np.testing.assert_allclose(got[2].numpy(), want[2].numpy(), rtol=1e-5)
    assert c.stats()["fused_groups"] >= 1


def test_autocast_linear_chain_training_step_equals_eager():
    def model():
        tg.manual_seed(3)
        return nn.Linear(24, 16)

    def step(m, inp):
        with tg.autocast("cpu"):
            h = m(inp)
            y = F.gelu(h) * 0.5 + h * h - 1.0
        loss = (y.float() * y.float()).mean()
        loss.backward()
        return loss

    x = tg.randn(20, 24)
    eager = model()
    comp = model()
    c = tg.compile(lambda inp: step(comp, inp))
    for _ in range(3):
        for p in eager.parameters():
            p.grad = None
        for p in comp.parameters():
            p.grad = None
        want = step(eager, x)
        got = c(x)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        for p, q in zip(comp.parameters(), eager.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert c.stats()["fused_groups"] >= 1
