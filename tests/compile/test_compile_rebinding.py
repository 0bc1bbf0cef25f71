"""A compiled function reads tensors by name (globals, closures, modules): a replay
must never use a buffer the eager call would no longer read. Rebinding a name, giving
a module a new parameter or replacing a tensor's ``.data`` captures again."""
import numpy as np

import tapegrad as tg
import tapegrad.nn as nn

SCALE = tg.tensor([1.0, 2.0, 3.0])


def _helper(a):
    return a * SCALE  # a global read one call deep


def _check(f, eager, x):
    np.testing.assert_allclose(f(x).numpy(), eager(x).numpy(), rtol=1e-6)


def test_rebound_global_captures_again():
    global SCALE
    f = tg.compile(lambda a: _helper(a).sum())
    x = tg.tensor([1.0, 1.0, 1.0])
    eager = lambda a: _helper(a).sum()  # noqa: E731
    _check(f, eager, x)
    _check(f, eager, x)  # a replay
    old = SCALE
    try:
        SCALE = tg.tensor([5.0, 5.0, 5.0])
        _check(f, eager, x)
        assert f.stats()["captures"] == 2
    finally:
        SCALE = old


def test_rebound_closure_and_replaced_data():
    w = tg.tensor([1.0, -1.0, 2.0])

    def fn(a):
        return (a * w).relu()
    f = tg.compile(fn)
    x = tg.tensor([3.0, 3.0, 3.0])
    _check(f, fn, x)
    _check(f, fn, x)
    w.data = tg.tensor([-1.0, 1.0, 1.0])  # the same tensor, a new buffer
    _check(f, fn, x)
    w = tg.tensor([2.0, 2.0, 2.0])  # the closure's cell rebound
    _check(f, fn, x)
    assert f.stats()["captures"] == 3 and f.stats()["replays"] >= 1


def test_module_given_a_new_parameter():
    tg.manual_seed(0)
    m = nn.Linear(3, 2)

    def fn(a):
        with tg.no_grad():
            return m(a)
    f = tg.compile(fn)
    x = tg.randn(4, 3)
    _check(f, fn, x)
    _check(f, fn, x)
    m.weight = nn.Parameter(tg.ones(2, 3))
    _check(f, fn, x)
    assert f.stats()["captures"] == 2


def test_tensor_in_a_container_replaced():
    """A functional training loop: the parameters live in a dict (or an object's
    attributes) and each step puts new tensors there. The replay must follow them,
    as the eager call does: the tensor the capture read is gone, so it captures again."""
    params = {"w": tg.tensor([1.0, 2.0]), "b": tg.tensor([0.5, 0.5])}

    class Holder:
        pass
    h = Holder()
    h.scale = tg.tensor([2.0, 2.0])

    def fn(a):
        return ((a * params["w"] + params["b"]) * h.scale).sum()
    f = tg.compile(fn)
    x = tg.tensor([1.0, -1.0])
    for step in range(4):
        _check(f, fn, x)
        _check(f, fn, x)  # a replay, of the same tensors
        params["w"] = params["w"] * 0.5 + 1.0  # new tensors; the old ones die
        params["b"] = params["b"] - 0.25
        if step == 2:
            h.scale = tg.tensor([-1.0, 3.0])
    assert f.stats()["replays"] >= 4


def test_container_item_replaced_while_the_old_tensor_lives_on():
    """The same loop, but something else keeps each old tensor alive (a history, a
    second container, an optimizer's state): the tensor the capture read is not gone,
    yet the function now reads another through the dict, the list and the object.
    Replaying the old buffers would be a silently wrong result; it captures again."""
    params = {"w": tg.tensor([1.0, 2.0])}
    layers = [tg.tensor([0.5, -0.5])]

    class Holder:
        pass
    h = Holder()
    h.cfg = {"scale": tg.tensor([2.0, 2.0])}
    history = []

    def fn(a):
        return ((a * params["w"] + layers[0]) * h.cfg["scale"]).sum()
    f = tg.compile(fn)
    x = tg.tensor([1.0, -1.0])
    for step in range(4):
        _check(f, fn, x)
        _check(f, fn, x)
        history += [params["w"], layers[0], h.cfg["scale"]]  # the old ones live on
        params["w"] = params["w"] * 0.5 + 1.0
        if step % 2:
            layers[0] = layers[0] - 0.25
        if step == 2:
            h.cfg["scale"] = tg.tensor([-1.0, 3.0])
    assert f.stats()["captures"] == 4 and f.stats()["replays"] >= 4


def test_method_of_a_plain_object_reads_its_attributes():
    class Model:
        def __init__(self):
            self.w = tg.tensor([1.0, 3.0])

        def loss(self, a):
            return (a * self.w).sum()
    m = Model()
    f = tg.compile(m.loss)
    x = tg.tensor([2.0, 1.0])
    keep = []
    for _ in range(3):
        _check(f, m.loss, x)
        _check(f, m.loss, x)
        keep.append(m.w)
        m.w = m.w + 1.0
    assert f.stats()["captures"] == 3
