"""tg.amp.GradScaler stepped side by side with torch.amp.GradScaler on the same
gradients (Inf and NaN ones among them): scale, growth tracker, skipped steps,
parameters and state dicts agree at every step."""
import math

import numpy as np
import pytest
import torch

import tapegrad as tg


def _pair(shapes, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    vals = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    tp = [torch.tensor(v).to(getattr(torch, dtype)).requires_grad_() for v in vals]
    gp = [tg.tensor(v).to(getattr(tg, dtype)).requires_grad_() for v in vals]
    return tp, gp


def _same(a, b):
    np.testing.assert_array_equal(a.detach().float().numpy(), b.detach().float().numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_steps_side_by_side_with_torch(dtype):
    shapes = [(3, 4), (4,)]
    tp, gp = _pair(shapes, dtype)
    kw = dict(init_scale=2.0 ** 4, growth_factor=3.0, backoff_factor=0.25, growth_interval=3)
    ts = torch.amp.GradScaler("cpu", **kw)
    gs = tg.amp.GradScaler("cpu", **kw)
    topt = torch.optim.SGD(tp, lr=0.125)  # (a power of two: the update rounds once)
    gopt = tg.optim.SGD(gp, lr=0.125)
    rng = np.random.default_rng(1)
    bad_steps = {2, 7, 8}
    for step in range(14):
        topt.zero_grad()
        gopt.zero_grad()
        w = rng.standard_normal(3).astype(np.float32)
        tl = ts.scale((tp[0].float().sum(1) * torch.tensor(w)).sum() + tp[1].float().pow(2).sum())
        gl = gs.scale((gp[0].float().sum(1) * tg.tensor(w)).sum() + gp[1].float().pow(2).sum())
        _same(tl, gl)
        tl.backward()
        gl.backward()
        if step in bad_steps:
            bad = math.inf if step != 7 else math.nan
            with torch.no_grad():
                tp[0].grad[1, 2] = bad
            with tg.no_grad():
                gp[0].grad[1, 2] = bad
        if step % 4 == 1:  # unscale_ first (for clipping), then step
            ts.unscale_(topt)
            gs.unscale_(gopt)
            for a, b in zip(tp, gp):
                _same(a.grad, b.grad)
        assert (ts.step(topt) is None) == (gs.step(gopt) is None)
        ts.update()
        gs.update()
        assert gs.get_scale() == ts.get_scale(), step
        assert gs._get_growth_tracker() == ts._get_growth_tracker(), step
        assert gs.state_dict() == ts.state_dict()
        for a, b in zip(tp, gp):
            _same(a, b)


def test_scale_grows_to_a_finite_limit_and_update_new_scale():
    ts = torch.amp.GradScaler("cpu", init_scale=2.0 ** 126, growth_interval=1)
    gs = tg.amp.GradScaler("cpu", init_scale=2.0 ** 126, growth_interval=1)
    tp, gp = _pair([(2,)])
    to, go = torch.optim.SGD(tp, lr=0.0), tg.optim.SGD(gp, lr=0.0)
    for _ in range(4):
        ts.scale(tp[0].sum()).backward()
        gs.scale(gp[0].sum()).backward()
        ts.step(to)
        gs.step(go)
        ts.update()
        gs.update()
        assert gs.get_scale() == ts.get_scale()
    ts.update(3.0)
    gs.update(3.0)
    assert gs.get_scale() == ts.get_scale() == 3.0
    gs.update(tg.tensor([5.0]))
    assert gs.get_scale() == 5.0
    with pytest.raises(AssertionError):
        gs.update(tg.tensor([1.0, 2.0]))


def test_stage_errors_and_state_dict_as_torch():
    for S, L, opt in ((torch.amp.GradScaler, torch, torch.optim.SGD),
                      (tg.amp.GradScaler, tg, tg.optim.SGD)):
        p = L.ones(2, requires_grad=True)
        o = opt([p], lr=0.1)
        s = S("cpu")
        with pytest.raises(AssertionError, match="_scale is None"):
            s.unscale_(o)
        s.scale(p.sum()).backward()
        s.unscale_(o)
        with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
            s.unscale_(o)
        s.step(o)
        with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
            s.step(o)
        with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step"):
            s.unscale_(o)
        with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
            s.step(o, closure=lambda: 0)
        s.update()
        h = L.ones(2, dtype=L.float16, requires_grad=True)
        oh = opt([h], lr=0.1)
        s.scale(h.sum()).backward()
        with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
            s.unscale_(oh)
        with pytest.raises(AssertionError, match="growth factor"):
            S("cpu", growth_factor=0.9)
        d = S("cpu", enabled=False)
        assert d.state_dict() == {} and d.get_scale() == 1.0 and not d.is_enabled()
        x = L.ones(2)
        assert d.scale(x) is x
        with pytest.raises(RuntimeError, match="source state dict is empty"):
            S("cpu").load_state_dict({})
    ts, gs = torch.amp.GradScaler("cpu"), tg.amp.GradScaler("cpu")
    sd = {"scale": 8.0, "growth_factor": 4.0, "backoff_factor": 0.125, "growth_interval": 7,
          "_growth_tracker": 5}
    ts.load_state_dict(sd)
    gs.load_state_dict(sd)
    assert gs.state_dict() == ts.state_dict() == sd
    assert gs.get_scale() == 8.0
    outs = gs.scale([tg.ones(2), (tg.ones(1), tg.ones(3))])
    assert isinstance(outs, list) and isinstance(outs[1], tuple)
    assert outs[1][1].tolist() == [8.0] * 3
    h = gs.scale(tg.ones(2, dtype=tg.float16))
    assert h.dtype == tg.float16
    assert ts.scale(torch.ones(2, dtype=torch.float16)).dtype == torch.float16


def test_step_without_gradients_is_refused_as_torch():
    p = tg.nn.Parameter(tg.ones(2))
    opt = tg.optim.SGD([p], lr=0.1)
    sc = tg.amp.GradScaler()
    sc.scale(tg.ones(1))
    with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
        sc.step(opt)
    np.testing.assert_array_equal(p.detach().numpy(), [1, 1])   # not stepped
    with pytest.raises(AssertionError, match="No inf checks were recorded prior to update"):
        sc.update()
