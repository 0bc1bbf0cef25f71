"""API.md "Compile and export": guards cover everything a replay depends on. Here, the
objects (not plain values) a compiled function reads by name and the way its tensor
arguments share memory: a global or closure function rebound (`ACT = tg.tanh`), a
module's activation attribute swapped, a config object or dict replaced by another
(then mutated), a `functools.partial` rebound, a function's defaults replaced, two
arguments that are one tensor (or a tensor and its view), and an argument that is the
tensor the function also reads as a global. Each compiled call is compared with the
eager call after the change: nothing may replay silently wrong."""
import functools

import numpy as np
import pytest

import tapegrad as tg


def _same(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


class _Cfg:
    def __init__(self, s):
        self.s = s


ACT = tg.relu
CFG_OBJ = _Cfg(2.0)
CFG_DICT = {"s": 2.0}
PARTIAL = functools.partial(tg.mul, other=2.0)
W = tg.ones(2)


def _by_act(x):
    return ACT(x) * 2


def _by_obj(x):
    return x * CFG_OBJ.s


def _by_dict(x):
    return x * CFG_DICT["s"]


def _by_partial(x):
    return PARTIAL(x)


@pytest.fixture
def globals_restored():
    saved = dict(ACT=ACT, CFG_OBJ=CFG_OBJ, CFG_DICT=CFG_DICT, PARTIAL=PARTIAL)
    yield
    globals().update(saved)


def _rebind(name, value):
    globals()[name] = value


REBINDINGS = {
    "global function": (_by_act, lambda: _rebind("ACT", tg.tanh), None),
    "global object, then its attribute": (
        _by_obj, lambda: _rebind("CFG_OBJ", _Cfg(5.0)), lambda: setattr(CFG_OBJ, "s", 7.0)),
    "global dict by an equal one, then its item": (
        _by_dict, lambda: _rebind("CFG_DICT", {"s": 2.0}),
        lambda: CFG_DICT.__setitem__("s", 7.0)),
    "global functools.partial": (
        _by_partial, lambda: _rebind("PARTIAL", functools.partial(tg.mul, other=3.0)), None),
}


@pytest.mark.parametrize("what", list(REBINDINGS))
def test_rebound_global_objects_capture_again(what, globals_restored):
    f, rebind, mutate = REBINDINGS[what]
    cf = tg.compile(f)
    x = tg.tensor([-1.0, 2.0])
    cf(x)
    cf(x)
    rebind()
    _same(cf(x), f(x))
    _same(cf(x), f(x))
    if mutate is not None:
        mutate()
        _same(cf(x), f(x))
    assert "is the same object" in cf.stats()["recaptures"][0], cf.stats()["recaptures"]


def test_rebound_closure_function_captures_again():
    act = tg.relu

    def f(x):
        return act(x)
    cf = tg.compile(f)
    x = tg.tensor([-1.0, 2.0])
    cf(x)
    cf(x)
    act = tg.tanh  # noqa: F841 (read by f through its closure)
    _same(cf(x), f(x))


def test_replaced_defaults_capture_again():
    def f(x, k=2.0):
        return x * k
    cf = tg.compile(f)
    x = tg.ones(2)
    cf(x)
    cf(x)
    f.__defaults__ = (5.0,)
    _same(cf(x), f(x))


class _WithActivation(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(2, 2)
        self.act = tg.relu

    def forward(self, x):
        return self.act(self.lin(x))


def test_module_activation_attribute_swapped():
    m = _WithActivation()
    cm = tg.compile(m)
    x = tg.randn(3, 2)
    with tg.no_grad():
        cm(x)
        cm(x)
        m.act = tg.tanh
        _same(cm(x), m(x))


def test_library_layer_activation_swapped():
    tg.manual_seed(0)
    layer = tg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    cm = tg.compile(layer)
    x = tg.randn(2, 3, 8)
    with tg.no_grad():
        cm(x)
        cm(x)
        layer.activation = tg.nn.functional.gelu
        _same(cm(x), layer(x))


def _add_then_read(a, b):
    a.add_(1)
    return b * 1


@pytest.mark.parametrize("view", [False, True])
def test_arguments_sharing_memory(view):
    cf = tg.compile(_add_then_read)
    cf(tg.ones(2, 2), tg.ones(2, 2)[0] if view else tg.ones(2, 2))
    cf(tg.ones(2, 2), tg.ones(2, 2)[0] if view else tg.ones(2, 2))
    for _ in range(2):
        x, xe = tg.ones(2, 2), tg.ones(2, 2)
        _same(cf(x, x[0] if view else x), _add_then_read(xe, xe[0] if view else xe))
        _same(x, xe)
    if not view:
        assert "b shares memory with a" in cf.stats()["guards"]


def _add_then_read_global(x):
    x.add_(1)
    return W * 1


def test_argument_that_is_a_tensor_read_as_a_global():
    global W
    W = tg.ones(2)
    cf = tg.compile(_add_then_read_global)
    cf(tg.ones(2))
    cf(tg.ones(2))
    np.testing.assert_array_equal(cf(W).numpy(), [2.0, 2.0])  # (eager: W += 1, W * 1)
    np.testing.assert_array_equal(W.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(cf(tg.ones(2)).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(cf(W).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(cf(tg.ones(2)).numpy(), [3.0, 3.0])


def test_negative_zero_argument_is_not_zero():
    cf = tg.compile(lambda x, s: x / s)
    cf(tg.ones(1), 0.0)
    cf(tg.ones(1), 0.0)
    assert cf(tg.ones(1), -0.0).item() == float("-inf")


def test_whole_step_follows_add_param_group():
    tg.manual_seed(0)
    a, b = tg.nn.Linear(4, 3), tg.nn.Linear(3, 2)
    ae, be = tg.nn.Linear(4, 3), tg.nn.Linear(3, 2)
    ae.load_state_dict(a.state_dict())
    be.load_state_dict(b.state_dict())
    opt, opte = tg.optim.SGD(a.parameters(), lr=0.1), tg.optim.SGD(ae.parameters(), lr=0.1)

    def step(a, b, opt, x):
        opt.zero_grad()
        loss = b(a(x)).pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    cs = tg.compile(step)
    for i in range(5):
        if i == 2:  # b's parameters join: zero_grad and step now reach them
            opt.add_param_group({"params": b.parameters(), "lr": 0.2})
            opte.add_param_group({"params": be.parameters(), "lr": 0.2})
        x = tg.randn(5, 4)
        _same(cs(a, b, opt, x), step(ae, be, opte, x))
        for p, q in zip(list(a.parameters()) + list(b.parameters()),
                        list(ae.parameters()) + list(be.parameters())):
            _same(p, q)
            _same(p.grad, q.grad)
    assert any("param_groups" in r for r in cs.stats()["recaptures"]), cs.stats()["recaptures"]
