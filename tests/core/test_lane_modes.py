"""Dispatch's lane inside tg.autocast and inference_mode: an op without an autocast
policy runs in the lane (its result as on the general path: dtype, recording,
inference marking); an op with one takes the general path, where it is cast."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import dispatch


@pytest.fixture
def general_calls(monkeypatch):
    calls = []
    real = dispatch._general

    def counted(op, args, attrs):
        calls.append(op.name)
        return real(op, args, attrs)
    monkeypatch.setattr(dispatch, "_general", counted)
    return calls


def test_autocast_region_keeps_the_lane_for_ops_without_a_policy(general_calls):
    r = np.random.default_rng(0)
    x = tg.tensor(r.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    w = tg.tensor(r.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
    with tg.autocast("cpu", dtype=tg.bfloat16):
        y = x * 2.0 + x  # mul, add: no CPU policy, the lane
        assert general_calls == []
        z = y @ w  # matmul: cast to bfloat16 on the general path
        assert "matmul" in general_calls
    assert y.dtype == tg.float32 and z.dtype == tg.bfloat16
    tg.sum(z.float()).backward()
    torch = pytest.importorskip("torch")
    px = torch.tensor(x.detach().numpy(), requires_grad=True)
    pw = torch.tensor(w.detach().numpy(), requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pz = (px * 2.0 + px) @ pw
    pz.float().sum().backward()
    assert w.grad.dtype == tg.float32 and x.grad.dtype == tg.float32
    np.testing.assert_allclose(z.float().detach().numpy(), pz.float().detach().numpy(),
                               rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(x.grad.numpy(), px.grad.numpy(), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(w.grad.numpy(), pw.grad.numpy(), rtol=1e-2, atol=1e-2)


def test_inference_mode_runs_in_the_lane_and_marks_outputs(general_calls):
    x = tg.tensor(np.arange(6, dtype=np.float32), requires_grad=True)
    with tg.inference_mode():
        y = x * 2.0
        z = -y
    assert general_calls == []
    assert y.is_inference() and z.is_inference() and not z.requires_grad
    np.testing.assert_array_equal(z.numpy(), -2 * np.arange(6, dtype=np.float32))
    w = x * 2.0  # outside: a normal, recorded tensor
    assert not w.is_inference() and w.requires_grad
