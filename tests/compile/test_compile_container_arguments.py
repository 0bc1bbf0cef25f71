"""tg.compile and an argument that is a dict or a list of plain values (a config, the
scales of a step): a replay must not take one whose numbers changed, or a new one
created at a freed one's address, for the one captured (its program holds the
captured numbers): each call's result is the eager call's."""
import warnings

import numpy as np
import pytest

import tapegrad as tg


class _Cfg:
    def __init__(self, s):
        self.s = s

    def scale(self, x):
        return x * self.s


def _results(c, calls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [float(c(*args)) for args in calls]


def test_a_dict_of_numbers_per_call_and_the_same_dict_changed():
    def f(x, d):
        return (x * d["s"]).sum()

    x = tg.ones(3)
    values = (2.0, 2.0, 3.0, 3.0, 5.0, -0.0, 0.0)
    want = [3 * v for v in values]
    assert _results(tg.compile(f), [(x, {"s": v}) for v in values]) == want
    d = {"s": 0.0}

    def calls():
        for v in values:
            d["s"] = v
            yield x, d
    assert _results(tg.compile(f), calls()) == want


def test_a_list_and_an_object_in_a_dict():
    def f(x, scales, d):
        return d["cfg"].scale(x * scales[0]).sum()

    x = tg.tensor(np.arange(3.0))
    cases = [(2.0, 1.0), (2.0, 1.0), (3.0, 1.0), (3.0, 4.0), (3.0, 4.0)]
    got = _results(tg.compile(f), [(x, [a], {"cfg": _Cfg(b)}) for a, b in cases])
    assert got == [3.0 * a * b for a, b in cases]


# ---------------------------------------------------------------- batches of tensors
def _dict_step(w):
    def step(batch):
        return ((batch["x"] * w).sum() * batch["scale"] + batch["y"].sum()).mean()
    return step


def _pair_step(w):
    def step(pair):
        x, y = pair
        return (x @ w).sum() - y.sum()
    return step


@pytest.mark.parametrize("kind", ["dict", "tuple", "list", "nested"])
def test_a_new_batch_container_each_call_replays(kind):
    """What a DataLoader yields, a new tuple, list or dict of tensors each call (a
    number beside them): its tensors are inputs of the program, so a new container of
    the same structure and specs replays (before, each was a new signature: 8
    captures, then eager for good); values and gradients as eager's."""
    rng = np.random.default_rng(0)
    w = tg.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    step = _dict_step(w) if kind == "dict" else _pair_step(tg.tensor(
        rng.standard_normal((3, 2)).astype(np.float32), requires_grad=True)) \
        if kind != "nested" else (lambda b: _dict_step(w)(b[0]) + b[1][0].sum())
    cf = tg.compile(step)

    def batch(i):
        x = tg.tensor(rng.standard_normal(3).astype(np.float32))
        y = tg.tensor(rng.standard_normal(2).astype(np.float32))
        if kind == "dict":
            return {"x": x, "y": y, "scale": 2.0}
        if kind == "nested":
            return ({"x": x, "y": y, "scale": 2.0}, [y])
        return (x, y) if kind == "tuple" else [x, y]
    leaves = [w] if kind in ("dict", "nested") else \
        [c.cell_contents for c in step.__closure__]
    for i in range(6):
        b = batch(i)
        for t in leaves:
            t.grad = None
        got = cf(b)
        got.backward()
        gg = [t.grad.numpy().copy() for t in leaves]
        for t in leaves:
            t.grad = None
        want = step(b)
        want.backward()
        np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
        for a, t in zip(gg, leaves):
            np.testing.assert_allclose(a, t.grad.numpy(), rtol=1e-6)
    s = cf.stats()
    assert s["eager_calls"] == 0 and s["replays"] >= 4 and not s["recaptures"], s


def test_a_batch_changed_in_shape_or_number_captures_again():
    w = tg.ones(3, requires_grad=True)
    cf = tg.compile(_dict_step(w))
    step = _dict_step(w)
    calls = [({"x": tg.ones(3), "y": tg.ones(2), "scale": 2.0}),
             ({"x": tg.ones(3), "y": tg.ones(4), "scale": 2.0}),
             ({"x": tg.ones(3), "y": tg.ones(4), "scale": 3.0})]
    for b in calls + calls:
        assert float(cf(b)) == float(step(b))
    s = cf.stats()
    assert s["captures"] >= 3 and any("scale" in r or "batch" in r for r in s["recaptures"])


def test_a_batch_holding_a_tensor_that_requires_grad_is_one_object():
    """A container of tensors that require grad (parameters) is not a batch: it is
    keyed by identity as before (its tensors are leaves whose .grad the step sets)."""
    from tapegrad.compiler.api import _batch_key
    assert _batch_key({"x": tg.ones(2)}) is not None
    assert _batch_key({"x": tg.ones(2, requires_grad=True)}) is None
    assert _batch_key([tg.ones(2), np.ones(2)]) is None
    assert _batch_key((1, 2.0, "a")) is None  # (no tensor: a plain value)


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_a_program_keeps_no_batch_alive(kind):
    """A batch argument is found by its structure and specs, never by identity: once
    the caller drops it, its container and tensors are freed, though the program that
    captured on it lives on (before, a guard "batch holds the same items" kept the
    capturing call's batch, and what it held, alive as long as the program)."""
    import gc
    import weakref
    w = tg.ones(3, requires_grad=True)
    step = _dict_step(w) if kind == "dict" else _pair_step(tg.ones((3, 2), requires_grad=True))
    cf = tg.compile(step)
    refs = []
    for i in range(4):
        x, y = tg.ones(3) * i, tg.ones(2)
        b = {"x": x, "y": y, "scale": 2.0} if kind == "dict" else [x, y]
        refs.append(weakref.ref(x._data))
        float(cf(b))
        del b, x, y
    gc.collect()
    assert cf.stats()["replays"] >= 2
    assert all(r() is None for r in refs), [r() is None for r in refs]
    assert not any("(argument of step)" in g for g in cf.stats()["guards"])
