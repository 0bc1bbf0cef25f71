"""API.md "Compile and export", `model = tg.compile(model)`: each call of the compiled
module has the eager call's effects once. A forward the capture finds it cannot replay
(it counts its calls in a Python attribute, draws from the generator outside the ops)
runs once on the capture call, not once captured and once more eagerly: the module's
attributes, running statistics and the generator's state after every call are the
eager twin's. `stats()["replays"]` counts the calls after the capture, as for a
compiled function."""
import copy
import warnings

import numpy as np
import pytest

import tapegrad as tg


class _Counting(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(3, 3)
        self.bn = tg.nn.BatchNorm1d(3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.bn(self.lin(x)).tanh()


class _Drawing(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(3, 3)
        self.bn = tg.nn.BatchNorm1d(3)

    def forward(self, x):
        scale = float(tg.rand(()))  # a draw a replay would repeat
        return self.bn(self.lin(x)) * (1.0 + scale)


def _run(model, xs, seed=0):
    tg.manual_seed(seed)
    out = []
    for x in xs:
        model.zero_grad()
        y = model(x)
        (y * y).sum().backward()
        out.append((y.detach().numpy().copy(),
                    [p.grad.numpy().copy() for p in model.parameters()],
                    [b.numpy().copy() for b in model.buffers()], tg.get_rng_state()))
    return out


@pytest.mark.parametrize("cls", [_Counting, _Drawing])
def test_unreplayable_forward_runs_once_per_call(cls):
    tg.manual_seed(0)
    m = cls()
    ref = copy.deepcopy(m)
    cm = tg.compile(m)
    xs = [tg.randn(5, 3) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = _run(cm, xs)
    want = _run(ref, xs)
    for (ya, ga, ba, sa), (yb, gb, bb, sb) in zip(got, want):
        np.testing.assert_allclose(ya, yb, rtol=1e-6, atol=1e-6)
        for a, b in zip(ga + ba, gb + bb):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert tg.equal(sa, sb)
    assert int(m.bn.num_batches_tracked) == 3
    if cls is _Counting:
        assert m.calls == ref.calls == 3
    s = cm.stats()
    assert s["replays"] == 0 and s["eager_calls"] == 3, s


def test_module_replays_count_the_calls_after_the_capture():
    model = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.Tanh(), tg.nn.Linear(8, 1))
    cm = tg.compile(model)
    x = tg.randn(6, 4)
    for n in range(1, 4):
        cm(x).sum().backward()
        s = cm.stats()
        assert (s["captures"], s["replays"], s["eager_calls"]) == (1, n - 1, 0), s
    with tg.no_grad():  # the forward alone: a capture of its own, then replays
        for _ in range(2):
            cm(x)
    s = cm.stats()
    assert (s["captures"], s["replays"]) == (2, 3), s


SCALE = tg.ones(3, 3, requires_grad=True)  # a global leaf the forward reads


class _ReadsAGlobalLeaf(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(3, 3)
        self.extra = [tg.ones(3, requires_grad=True)]  # (a list: not a parameter)

    def forward(self, x):
        return (self.lin(x) @ SCALE) * self.extra[0]


def test_gradients_reach_leaves_that_are_not_parameters():
    tg.manual_seed(0)
    m = _ReadsAGlobalLeaf()
    cm = tg.compile(m)
    x = tg.randn(2, 3)
    want = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for model in (m, cm, cm, cm):
            for t in [SCALE, m.extra[0]] + list(m.parameters()):
                t.grad = None
            model(x).sum().backward()
            got = [t.grad.numpy().copy() for t in [SCALE, m.extra[0]] + list(m.parameters())]
            if want is None:
                want = got
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=1e-6)


def test_compiled_function_differentiated_outside_replays_as_one_node():
    """`loss = cf(x, y); loss.backward(); opt.step()` with `cf = tg.compile(fn)` over a
    model fn names: gradients equal eager, no warning, and after the first call (run
    eagerly: it finds the graph is differentiated outside) the forward replays."""
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.Tanh(), tg.nn.Linear(8, 3))
    ref = copy.deepcopy(model)

    def loss_of(x, y):
        return tg.nn.functional.cross_entropy(model(x), y)

    def loss_ref(x, y):
        return tg.nn.functional.cross_entropy(ref(x), y)
    cf = tg.compile(loss_of)
    opts = [tg.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(5):
            x, y = tg.randn(6, 4), tg.tensor(np.arange(6) % 3)
            for f, opt in ((cf, opts[0]), (loss_ref, opts[1])):
                opt.zero_grad()
                f(x, y).backward()
                opt.step()
            for a, b in zip(model.parameters(), ref.parameters()):
                np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                           rtol=1e-5, atol=1e-6)
    s = cf.stats()
    assert (s["captures"], s["replays"], s["eager_calls"]) == (2, 3, 0), s
    assert s["backward_replays"] == 4


def test_fullgraph_function_differentiated_outside_and_side_effects():
    lin = tg.nn.Linear(3, 2)
    cf = tg.compile(lambda x: lin(x).sum(), fullgraph=True)  # (as torch.compile: fine)
    for _ in range(3):
        cf(tg.randn(4, 3)).backward()
    assert cf.stats()["replays"] == 1
    cg = tg.compile(lambda x: print("side effect") or x * 2, fullgraph=True)
    with pytest.raises(RuntimeError, match="side effects"):
        cg(tg.ones(2))


def test_methods_returning_the_module_return_the_compiled_one():
    m = tg.nn.Sequential(tg.nn.Linear(2, 3), tg.nn.Tanh())
    cm = tg.compile(m)
    for name, args in [("to", (tg.float64,)), ("double", ()), ("float", ()), ("cpu", ()),
                       ("requires_grad_", (True,)), ("apply", (lambda mod: None,)),
                       ("train", ()), ("eval", ())]:
        assert getattr(cm, name)(*args) is cm, name
    cm = cm.to(tg.float64)  # still compiled, the module's parameters converted
    assert m[0].weight.dtype == tg.float64
    x = tg.randn(4, 2, dtype=tg.float64)
    for _ in range(3):
        np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy())
    assert cm.stats()["replays"] == 2
