"""tg.compile and Python state: what a call does to objects it made and dropped (a
helper that appends to its own list, a counter it bumps) is no side effect, so the
call replays with the eager values; the same methods on an object that outlives the
call (a global, an argument) and a logger's records still make it run eagerly, so
every call has the eager call's effects."""
import logging
import warnings

import numpy as np
import pytest

import tapegrad as tg


class _Acc:
    def __init__(self):
        self.items = []
        self.n = 0

    def add(self, v):
        self.items.append(v)
        self.n += 1

    def total(self):
        return self.items[0] + self.items[1]


def _calls(f, *args, n=4):
    c = tg.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outs = [c(*args) for _ in range(n)]
    msgs = [str(m.message) for m in w if "tg.compile" in str(m.message)]
    return c.stats(), outs, msgs


def test_a_helper_object_made_and_dropped_in_the_call_replays():
    def f(x):
        a = _Acc()
        a.add(x * 2)
        a.add(x + 1)
        return (a.total() * a.n).sum()

    x = tg.tensor(np.linspace(-1, 1, 6).reshape(2, 3))
    s, outs, msgs = _calls(f, x)
    assert s["replays"] > 0 and s["eager_calls"] == 0 and not msgs, msgs
    want = float(f(x))
    assert np.allclose([float(o) for o in outs], want, rtol=1e-12)


def test_the_same_methods_on_an_object_that_outlives_the_call_run_eagerly():
    kept = _Acc()

    def on_global(x):
        kept.add(1.0)
        return (x * 2).sum()

    def on_argument(x, acc):
        acc.add(1.0)
        return (x * 2).sum()

    x = tg.ones(3)
    s, _, msgs = _calls(on_global, x)
    assert s["replays"] == 0 and s["eager_calls"] > 0 and kept.n == 4, msgs
    arg = _Acc()
    s, _, msgs = _calls(on_argument, x, arg)
    assert s["replays"] == 0 and s["eager_calls"] > 0 and arg.n == 4, msgs
    assert "runs eagerly" in msgs[0]


def test_a_logger_record_in_the_call_is_made_by_every_call(caplog):
    log = logging.getLogger("tapegrad.tests.compiled_step")

    def f(x):
        y = (x * 2).sum()
        log.info("loss %s", 1)
        log.debug("not emitted at INFO")
        return y

    def quiet(x):
        log.debug("not emitted at INFO")
        return (x * 2).sum()

    x = tg.ones(3)
    with caplog.at_level(logging.INFO, logger=log.name):
        s, _, msgs = _calls(f, x)
        assert [r.getMessage() for r in caplog.records].count("loss 1") == 4
        assert s["eager_calls"] > 0 and "logging" in msgs[0], msgs
        s, _, msgs = _calls(quiet, x)  # (a level that emits nothing: nothing to repeat)
        assert s["replays"] > 0 and s["eager_calls"] == 0 and not msgs, msgs


@pytest.mark.parametrize("kind", ["step_lr", "plateau"])
def test_an_lr_scheduler_stepped_in_the_call_steps_on_every_call(kind):
    def make():
        tg.manual_seed(0)
        m = tg.nn.Linear(3, 1)
        opt = tg.optim.SGD(m.parameters(), lr=0.1)
        sched = tg.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5) if kind == "step_lr" else \
            tg.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0)

        def step(x, y):
            opt.zero_grad()
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            if kind == "step_lr":
                sched.step()
            else:
                sched.step(1.0)  # (a metric that never improves: the lr halves)
            return loss
        return m, opt, step
    mc, oc, cstep = make()
    me, oe, estep = make()
    cstep = tg.compile(cstep)
    x, y = tg.ones(4, 3), tg.zeros(4, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (runs eagerly, with a warning)
        for _ in range(5):
            assert cstep(x, y).item() == estep(x, y).item()
    assert oc.param_groups[0]["lr"] == oe.param_groups[0]["lr"] < 0.01
    np.testing.assert_array_equal(mc.weight.detach().numpy(), me.weight.detach().numpy())
    assert "lr scheduler" in cstep.stats()["eager_reason"]
