"""Hooks registered or removed between calls of a compiled training step: a module's
forward, forward pre- and full backward hooks, a leaf's gradient hook and its
post-accumulate-grad hook change what the step computes, so a replay must not run
the program captured without them (or with them). Each call is compared with an
eager twin, in float64."""
import copy
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn


def _twin():
    tg.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).to(tg.float64)
    return a, copy.deepcopy(a)


def _step(model, opt):
    crit = nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


HOOKS = {
    "forward": lambda m: m[0].register_forward_hook(lambda mod, args, out: out * 2.0),
    "forward_pre": lambda m: m[2].register_forward_pre_hook(
        lambda mod, args: (args[0] * 0.5,)),
    "full_backward": lambda m: m[2].register_full_backward_hook(
        lambda mod, gin, gout: (gin[0] * 3.0,)),
    "tensor": lambda m: m[0].weight.register_hook(lambda g: g * 3.0),
    "post_accumulate_grad": lambda m: m[0].weight.register_post_accumulate_grad_hook(
        lambda p: p.grad.mul_(3.0)),
}
# hooks every module runs (registered once, for both twins; each acts on one layer kind)
GLOBAL = {
    "global_forward": lambda: tg.nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: out * 2.0 if isinstance(mod, nn.Tanh) else None),
    "global_forward_pre": lambda: tg.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, args: (args[0] * 0.5,) if isinstance(mod, nn.Tanh) else None),
    "global_full_backward": lambda: tg.nn.modules.module.register_module_full_backward_hook(
        lambda mod, gin, gout: (gin[0] * 3.0,) if isinstance(mod, nn.Tanh) else None),
}


def _run(hook, order, compiled, calls=3):
    """``calls`` calls in each phase of ``order`` (``"none"``: no hook, ``"hook"``: the
    hook registered); the compiled step's losses and parameters against eager."""
    mc, me = _twin()
    oc, oe = (tg.optim.SGD(m.parameters(), lr=0.1, momentum=0.5) for m in (mc, me))
    cstep, estep = _step(mc, oc), _step(me, oe)
    if compiled == "step":
        cstep = tg.compile(cstep)
    else:
        cstep = _step(tg.compile(mc), oc)
    rng = np.random.default_rng(0)
    held = []  # (removed whatever happens: a global hook would reach the other tests)
    try:
        _phases(hook, order, calls, mc, me, cstep, estep, rng, held)
    finally:
        for h in held:
            h.remove()


def _phases(hook, order, calls, mc, me, cstep, estep, rng, held):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a step that cannot be replayed: eager)
        for phase in order:
            if phase == "hook" and not held:
                held[:] = [GLOBAL[hook]()] if hook in GLOBAL else \
                    [HOOKS[hook](m) for m in (mc, me)]
            elif phase == "none" and held:
                for h in held:
                    h.remove()
                held.clear()
            for _ in range(calls):
                x = tg.tensor(rng.standard_normal((6, 4)))
                y = tg.tensor(rng.integers(0, 3, 6))
                lc, le = cstep(x, y).item(), estep(x, y).item()
                np.testing.assert_allclose(lc, le, rtol=1e-12, err_msg=f"{hook} {phase}")
                for a, b in zip(mc.parameters(), me.parameters()):
                    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                               rtol=1e-12, atol=1e-14, err_msg=f"{hook} {phase}")


@pytest.mark.parametrize("calls", [1, 3], ids=["after_the_capture", "after_replays"])
@pytest.mark.parametrize("compiled", ["step", "model"])
@pytest.mark.parametrize("hook", sorted(HOOKS) + sorted(GLOBAL))
def test_a_hook_registered_between_calls_is_run(hook, compiled, calls):
    _run(hook, ("none", "hook"), compiled, calls)


@pytest.mark.parametrize("compiled", ["step", "model"])
@pytest.mark.parametrize("hook", sorted(HOOKS) + sorted(GLOBAL))
def test_a_hook_removed_between_calls_is_not_run(hook, compiled):
    _run(hook, ("hook", "none", "hook"), compiled)


def test_a_gradient_hook_registered_on_an_argument_leaf_between_calls_is_run():
    def step(w):
        loss = (w * w).sum()
        loss.backward()
        return loss

    cf = tg.compile(step)
    w = tg.ones(3, requires_grad=True)
    for _ in range(2):
        w.grad = None
        cf(w)
    assert w.grad.tolist() == [2.0] * 3 and cf.stats()["replays"] == 1
    seen = []
    w.register_hook(lambda g: seen.append(1) or g * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w.grad = None
        cf(w)
    assert seen == [1] and w.grad.tolist() == [4.0] * 3
    assert cf.stats()["replays"] == 1
