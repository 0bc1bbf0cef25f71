"""API.md "Compile and export": nothing replays silently wrong. A compiled function that
leaves a tensor it computed in Python state (appends it to a list, stores it in a dict
or as an attribute of an object or of a module, as a script keeps losses or a layer
keeps its last attention map) must leave after every call what the eager call
leaves: a replay cannot rebuild that state, so such a function runs eagerly (with a
warning). A function that keeps nothing, or fills only its own local lists, still
replays."""
import warnings

import numpy as np
import pytest

import tapegrad as tg


class _Box:
    pass


def _kept_in_list():
    kept = []

    def f(x):
        y = x * 2
        kept.append(y.detach())
        return y + 1
    return f, lambda: [t.tolist() for t in kept]


def _kept_in_dict():
    kept = {}

    def f(x):
        y = x * 2
        kept["last"] = y
        return y + 1
    return f, lambda: kept["last"].tolist()


def _kept_as_attribute():
    box = _Box()

    def f(x):
        y = x * 2
        box.last = y.detach()
        return y + 1
    return f, lambda: box.last.tolist()


class _Keeps(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(2, 2)

    def forward(self, x):
        y = self.lin(x)
        self.last = y.detach()
        return y.relu()


def _kept_by_module():
    m = _Keeps()
    return tg.compile(m), m, lambda: m.last.tolist()


@pytest.mark.parametrize("make", [_kept_in_list, _kept_in_dict, _kept_as_attribute])
def test_tensor_kept_in_python_state(make):
    f, state = make()
    g, state_e = make()
    cf = tg.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(4):
            x = tg.full((2,), float(i))
            np.testing.assert_array_equal(cf(x).numpy(), g(x).numpy())
            assert state() == state_e()


def test_tensor_kept_by_a_module():
    cm, m, state = _kept_by_module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with tg.no_grad():
            for i in range(4):
                x = tg.full((3, 2), float(i))
                cm(x)
                np.testing.assert_allclose(state(), m.lin(x).tolist(), rtol=1e-6)


def test_a_function_that_keeps_nothing_still_replays():
    lin = tg.nn.Linear(2, 2)
    tensors = [tg.ones(2)]  # (a list of tensors it reads, not one it fills)

    def f(x):
        return lin(x).relu() * tensors[0]
    cf = tg.compile(f)
    with tg.no_grad():
        for _ in range(3):
            cf(tg.ones(3, 2))
    assert cf.stats()["replays"] == 2, cf.stats()


def test_local_containers_do_not_stop_replays():
    cell = tg.nn.Linear(3, 3)

    def unrolled(x):
        outs, h = [], x
        for _ in range(3):
            h = cell(h).tanh()
            outs.append(h)
        return tg.stack(outs).sum()
    cf = tg.compile(unrolled)
    with tg.no_grad():
        for _ in range(3):
            cf(tg.ones(2, 3))
    assert cf.stats()["replays"] == 2 and cf.stats()["eager_calls"] == 0, cf.stats()


# Python side effects that are not tensors: output (print) and changes to containers and
# objects that outlive the call. torch.compile graph-breaks and runs them on every call;
# a replay cannot, so such a function runs eagerly for that signature, with a warning at
# the capture naming the side effect, and every call has the eager call's effects.
CALLS = []
COUNTS = {"n": 0}


class _Config:
    pass


CFG = _Config()
CFG.steps = 0


def _appends_to_a_global(x):
    CALLS.append(1)
    return x * 2


def _adds_to_a_dict_item(x):
    COUNTS["n"] += 1
    return x * 2


def _adds_to_an_attribute(x):
    CFG.steps += 1
    return x * 2


def _closure_appends():
    seen = []

    def f(x):
        seen.append(float(x.sum()))
        return x * 2
    return f


def _closure_item():
    box = [0]

    def f(x):
        box[0] += 1
        return x * 2
    return f


class _Logs(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(2, 2)
        self.log = []

    def forward(self, x):
        self.log.append(x.shape[0])
        return self.lin(x).relu()


def _state():
    return (len(CALLS), COUNTS["n"], CFG.steps)


@pytest.mark.parametrize("make", [lambda: _appends_to_a_global, lambda: _adds_to_a_dict_item,
                                  lambda: _adds_to_an_attribute, _closure_appends,
                                  _closure_item],
                         ids=["global list", "dict item", "attribute", "closure list",
                              "closure list item"])
def test_python_side_effects_happen_on_every_call(make):
    f = make()
    cf = tg.compile(f)
    before = _state()
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        cf(tg.ones(2))
    for i in range(3):
        x = tg.full((2,), float(i))
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    after = _state()
    cells = [c.cell_contents for c in f.__closure__ or ()]
    if cells:  # the closure's container: 4 compiled calls and 3 eager ones
        assert len(cells[0]) == 7 or cells[0][0] == 7, cells
    else:
        assert sum(after) - sum(before) == 7
    assert cf.stats()["captures"] == 1 and cf.stats()["replays"] == 0


def test_print_runs_on_every_call_and_is_named(capsys):
    def f(x):
        print("step", float(x.sum()) > 0)
        return x * 2
    cf = tg.compile(f)
    with pytest.warns(RuntimeWarning, match=r"print\(\)"):
        cf(tg.ones(2))
    cf(tg.ones(2))
    cf(tg.ones(2))
    assert capsys.readouterr().out.count("step True") == 3


def test_module_appending_to_its_own_list():
    m = _Logs()
    cm = tg.compile(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for n in (3, 3, 3):
            cm(tg.ones(n, 2)).sum().backward()
        with tg.no_grad():
            cm(tg.ones(4, 2))
    assert m.log == [3, 3, 3, 4]


HISTORY = []


def _rebinds_a_global_list(x):
    global HISTORY
    HISTORY = HISTORY + [float(x.sum())]
    return x * 2


class _RebindsItsList(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tg.nn.Linear(2, 2)
        self.seen = []

    def forward(self, x):
        self.seen = self.seen + [x.shape[0]]
        return self.lin(x)


def test_containers_rebound_by_the_call():
    global HISTORY
    HISTORY = []
    cf = tg.compile(_rebinds_a_global_list)
    m = _RebindsItsList()
    cm = tg.compile(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for v in range(3):
            cf(tg.full((2,), float(v)))
            with tg.no_grad():
                cm(tg.ones(3, 2))
        cm(tg.ones(4, 2)).sum().backward()
    assert HISTORY == [0.0, 2.0, 4.0]
    assert m.seen == [3, 3, 3, 4]


LOSSES = []
BY_STEP = {}


def _extends_in_place(x):
    global LOSSES
    LOSSES += [float(x.sum())]
    return x * 2


def _sets_a_new_key(x):
    BY_STEP[len(BY_STEP)] = float(x.sum())
    return x * 2


@pytest.mark.parametrize("fn", [_extends_in_place, _sets_a_new_key])
def test_containers_changed_in_place_without_a_method_call(fn):
    LOSSES.clear()
    BY_STEP.clear()
    cf = tg.compile(fn)
    with pytest.warns(RuntimeWarning, match="changed in place"):
        cf(tg.ones(2))
    for v in (2.0, 3.0):
        cf(tg.full((2,), v))
    assert LOSSES == [2.0, 4.0, 6.0] or list(BY_STEP.values()) == [2.0, 4.0, 6.0]
