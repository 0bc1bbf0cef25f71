"""tg.compile's guards on Python state: globals, closure cells, module attributes and
``training`` flags the captured call read, numbers read from tensors that only feed
comparisons, and how the guards are explained (stats()["guards"], ["recaptures"],
TAPEGRAD_LOGS=recompiles). Every compiled call is compared with the eager call."""
import collections
import math
import types
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

FLAG = False
SCALE = 2.0
MODE = ("a", 1)
cfg = types.SimpleNamespace(power=2)
config = types.ModuleType("config")
config.offset = 1.0


def _flagged(x):
    return x * 10 if FLAG else x * 1


def _helper(x):
    return x * SCALE


def _calls_helper(x):
    return _helper(x) + 1


def test_a_global_flag_rebound_between_calls_captures_again():
    global FLAG
    FLAG = False
    try:
        cf = tg.compile(_flagged)
        x = tg.ones(2)
        cf(x)
        cf(x)
        FLAG = True
        assert cf(x).tolist() == _flagged(x).tolist() == [10.0, 10.0]
        FLAG = False
        assert cf(x).tolist() == [1.0, 1.0]
        s = cf.stats()
        assert s["captures"] == 2 and s["replays"] >= 2
        assert s["recaptures"] == ["FLAG == False (global of _flagged)"]
        assert "FLAG == False (global of _flagged)" in s["guards"]
        assert "x: float32[2]" in s["guards"]
    finally:
        FLAG = False


def test_a_global_read_by_a_called_function_is_guarded():
    global SCALE
    cf = tg.compile(_calls_helper)
    x = tg.ones(3)
    try:
        cf(x)
        cf(x)
        SCALE = 5.0
        assert cf(x).tolist() == [6.0, 6.0, 6.0]
    finally:
        SCALE = 2.0
    assert cf(x).tolist() == [3.0, 3.0, 3.0]


class _Base:
    scale = 1.0


class Settings(_Base):
    """A class used as a namespace of settings (its attributes read by the function)."""
    shift = 0.0


def test_class_attributes_read_from_a_global_class_are_guarded():
    def f(x):
        return x * Settings.scale + Settings.shift
    cf = tg.compile(f)
    x = tg.tensor([1.0, 2.0])
    try:
        for change in (None, "base", "shift", "shadow"):
            if change == "base":      # on the class the attribute comes from
                _Base.scale = 3.0
            elif change == "shift":
                Settings.shift = 1.0
            elif change == "shadow":  # set on the class itself, before the base in the MRO
                Settings.scale = 5.0
            np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
            np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
        assert "Settings.scale == 5.0 (global of " \
            "test_class_attributes_read_from_a_global_class_are_guarded.<locals>.f)" \
            in cf.stats()["guards"]
    finally:
        _Base.scale, Settings.shift = 1.0, 0.0
        del Settings.scale


class _Slotted:
    __slots__ = ("lr", "inner")

    def __init__(self):
        self.lr = 1.0
        self.inner = types.SimpleNamespace(shift=0.0)


SLOTTED = _Slotted()


def test_attributes_of_an_object_with_slots_are_guarded():
    def f(x):
        return x * SLOTTED.lr + SLOTTED.inner.shift
    cf = tg.compile(f)
    x = tg.tensor([1.0, 2.0])
    for change in (None, "lr", "inner", "rebind"):
        if change == "lr":
            SLOTTED.lr = 3.0
        elif change == "inner":
            SLOTTED.inner.shift = 1.0
        elif change == "rebind":
            SLOTTED.inner = types.SimpleNamespace(shift=-1.0)
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())


def test_environment_variables_read_by_name_are_guarded(monkeypatch):
    import os
    monkeypatch.setenv("TAPEGRAD_TEST_SCALE", "1")
    monkeypatch.delenv("TAPEGRAD_TEST_SHIFT", raising=False)

    def f(x):
        return x * float(os.environ["TAPEGRAD_TEST_SCALE"]) + \
            float(os.environ.get("TAPEGRAD_TEST_SHIFT", "0"))
    cf = tg.compile(f)
    x = tg.tensor([1.0, 2.0])
    for change in (None, "scale", "shift"):
        if change == "scale":
            monkeypatch.setenv("TAPEGRAD_TEST_SCALE", "3")
        elif change == "shift":
            monkeypatch.setenv("TAPEGRAD_TEST_SHIFT", "1")
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())


def test_a_partials_keywords_and_a_mutable_defaults_contents_are_guarded():
    import functools
    scaled = functools.partial(lambda x, s: x * s, s=1.0)

    def f(x, shift=[0.0]):  # noqa: B006  (the mutable default is the point)
        return scaled(x) + shift[0]
    cf = tg.compile(f)
    x = tg.tensor([1.0, 2.0])
    for change in (None, "keywords", "default"):
        if change == "keywords":
            scaled.keywords["s"] = 3.0
        elif change == "default":
            f.__defaults__[0][0] = 1.0
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())


def test_an_object_whose_getattr_raises_runs_eagerly_with_the_reason():
    class Lookup:  # (raises KeyError, not AttributeError, for a name it lacks)
        def __init__(self):
            self.d = {"lr": 2.0}

        def __getattr__(self, name):
            return self.d[name]
    cfg_ = Lookup()
    cf = tg.compile(lambda x: x * cfg_.lr)
    x = tg.tensor([1.0, 2.0])
    with pytest.warns(RuntimeWarning, match="finding the Python values it reads raised"):
        assert cf(x).tolist() == [2.0, 4.0]
    cfg_.d["lr"] = 3.0
    assert cf(x).tolist() == [3.0, 6.0]


def test_tuples_strings_and_attributes_of_objects_and_python_modules():
    global MODE

    def f(x):
        y = x ** cfg.power + config.offset
        return y * 2 if MODE[0] == "a" else y
    cf = tg.compile(f)
    x = tg.tensor([1.0, 2.0])
    try:
        for change in (None, "power", "offset", "mode"):
            if change == "power":
                cfg.power = 3
            elif change == "offset":
                config.offset = -1.0
            elif change == "mode":
                MODE = ("b", 1)
            np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
            np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    finally:
        cfg.power, config.offset, MODE = 2, 1.0, ("a", 1)
    assert cf.stats()["captures"] == 4


def test_a_closure_cell_rebound_between_calls_captures_again():
    scale = 2.0

    def f(x):
        return x * scale
    cf = tg.compile(f)
    x = tg.ones(2)
    assert cf(x).tolist() == [2.0, 2.0]
    assert cf(x).tolist() == [2.0, 2.0]
    scale = 3.0
    assert cf(x).tolist() == f(x).tolist() == [3.0, 3.0]
    assert cf.stats()["recaptures"] == ["scale == 2.0 (closure of test_a_closure_cell_"
                                        "rebound_between_calls_captures_again.<locals>.f)"]


def test_batchnorm_eval_after_capture_uses_running_statistics():
    tg.manual_seed(0)
    bn = nn.BatchNorm1d(3)
    x = tg.randn(8, 3) * 5 + 2
    f = tg.compile(lambda x: bn(x))
    with tg.no_grad():
        f(x)
        f(x)
        bn.eval()
        mean = bn.running_mean.numpy().copy()
        out = f(x)
        np.testing.assert_allclose(out.numpy(), bn(x).numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(bn.running_mean.numpy(), mean)  # not updated
        f(x)
        bn.train()
        np.testing.assert_allclose(f(x).numpy(), bn(x).numpy(), rtol=1e-5, atol=1e-5)
    s = f.stats()
    assert s["captures"] == 2 and "bn.training == True" in s["recaptures"]
    assert "bn.training == True" in s["guards"]


def test_dropout_captured_in_eval_mode_drops_after_train():
    d = nn.Dropout(0.5)
    d.eval()
    f = tg.compile(lambda x: d(x) * 1)
    x = tg.ones(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert f(x).tolist() == f(x).tolist() == [1.0] * 1000
        d.train()
        tg.manual_seed(3)
        a = f(x).numpy()
        tg.manual_seed(3)
        b = (d(x) * 1).numpy()
    np.testing.assert_array_equal(a, b)
    assert (a == 0).sum() > 300
    d.eval()
    assert f(x).tolist() == [1.0] * 1000  # the eval program again, replayed
    assert f.stats()["replays"] >= 2


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.scale = 1.0
        self.act = "relu"

    def forward(self, x):
        y = self.lin(x) * self.scale
        return y.relu() if self.act == "relu" else y.tanh()


def test_module_attributes_are_guarded():
    tg.manual_seed(0)
    m = _Scaled()
    f = tg.compile(lambda x: m(x))
    x = tg.randn(4, 3)
    with tg.no_grad():
        for change in (None, "scale", "act"):
            if change == "scale":
                m.scale = -2.0
            elif change == "act":
                m.act = "tanh"
            np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
            np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert f.stats()["captures"] == 3
    assert f.stats()["recaptures"] == ["m.scale == 1.0", "m.act == 'relu'"]


def test_a_function_that_rebinds_what_it_reads_runs_eagerly():
    def f(x):
        global COUNTER
        COUNTER = COUNTER + 1
        return x * COUNTER
    globals()["COUNTER"] = 0
    cf = tg.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outs = [cf(tg.ones(1)).item() for _ in range(3)]
    assert outs == [1.0, 2.0, 3.0]
    assert any("assigns COUNTER" in str(x.message) for x in w)


def _branchy(x):
    s = (x * x).sum()
    if s.item() > 1.0:
        return x * 2
    return x * 3


def test_a_number_only_compared_is_guarded_on_the_outcome():
    cf = tg.compile(_branchy)
    for v in [1.0, 2.0, 3.0, 0.1, 0.2, 0.3, 4.0]:
        x = tg.full((2,), v)
        np.testing.assert_array_equal(cf(x).numpy(), _branchy(x).numpy())
    s = cf.stats()
    assert s["captures"] == 2 and s["replays"] == 5
    assert s["recaptures"] == ["(sum(...).item() > 1.0) is True"]
    assert "(sum(...).item() > 1.0) is True" in s["guards"]


def test_bool_of_a_tensor_is_guarded_on_its_truth_value():
    def f(x):
        return x * 2 if (x.sum() > 0) else x * 3
    cf = tg.compile(f)
    for v in [1.0, 2.0, -1.0, -2.0, 5.0]:
        x = tg.full((3,), v)
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    assert cf.stats()["captures"] == 2 and cf.stats()["replays"] == 3


def test_a_number_used_otherwise_is_guarded_on_its_value():
    def f(x):
        s = x.sum().item()
        if s > 0:
            return x * (s + 1.0)  # arithmetic: the value itself matters
        return x

    def g(x):
        return x * x.sum().item()  # passed to an op: the value itself matters
    for fn in (f, g):
        cf = tg.compile(fn)
        for v in [1.0, 2.0, 2.0, 3.0]:
            x = tg.full((2,), v)
            np.testing.assert_array_equal(cf(x).numpy(), fn(x).numpy())
        assert cf.stats()["captures"] == 3


def test_formatting_and_numpy_use_the_exact_value():
    def f(x):
        v = x.sum().item()
        label = f"{v:.1f}"
        return x * float(np.float32(v) > 2) + len(label)
    cf = tg.compile(f)
    for v in [1.0, 2.0, 2.0]:
        x = tg.full((2,), v)
        assert cf(x).tolist() == f(x).tolist()
    assert (cf.stats()["captures"], cf.stats()["replays"]) == (2, 1)
    assert any("4.0" in g for g in cf.stats()["guards"]), cf.stats()["guards"]


def test_item_outside_a_capture_is_a_plain_number():
    x = tg.tensor([1.5])
    assert type(x.item()) is float and type(bool(x)) is bool
    assert type(tg.tensor(3).item()) is int


@pytest.mark.parametrize("setting", ["recompiles", "+recompiles", "graph_breaks, recompiles"])
def test_recompiles_log(capsys, monkeypatch, setting):
    monkeypatch.setenv("TAPEGRAD_LOGS", setting)
    cf = tg.compile(_branchy)
    cf(tg.full((2,), 2.0))
    cf(tg.full((2,), 0.1))
    err = capsys.readouterr().err
    assert "recapturing _branchy (capture 2): (sum(...).item() > 1.0) is True" in err
    assert err.startswith("[recompiles]")


@pytest.mark.parametrize("train", [True, False])
def test_a_training_step_with_a_loss_branch_replays(train):
    tg.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    ref = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    ref.load_state_dict(m.state_dict())
    opts = [tg.optim.SGD(mm.parameters(), lr=0.05) for mm in (m, ref)]
    x, y = tg.randn(16, 4), tg.randn(16, 1)

    def make(model, opt):
        def step():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            if loss.item() > 0.5:
                opt.step()
            return loss
        return step
    cstep, estep = tg.compile(make(m, opts[0])), make(ref, opts[1])
    if not train:
        m.eval()
        ref.eval()
    for _ in range(6):
        np.testing.assert_allclose(cstep().item(), estep().item(), rtol=1e-5)
    for a, b in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5)
    assert cstep.stats()["replays"] >= 4


_USES = {
    "tensor": lambda x, v: x * tg.tensor([v]),
    "full": lambda x, v: x + tg.full((2,), v),
    "np.float32": lambda x, v: x * float(np.float32(v)),
    "math.exp": lambda x, v: x * math.exp(v),
    "x*v": lambda x, v: x * v,
    "v*x": lambda x, v: v * x,
    "format": lambda x, v: x * float(f"{v:.3f}"),
    "round": lambda x, v: x * round(v, 2),
    "np.mean": lambda x, v: x * float(np.mean([v, v])),
    "max": lambda x, v: x * max(v, 0.5),
    "compared": lambda x, v: x * (2 if v > 1.0 else 3),
}


@pytest.mark.parametrize("use", sorted(_USES))
def test_every_use_of_a_read_number_replays_right(use):
    def f(x):
        return _USES[use](x, x.sum().item())
    cf = tg.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in [0.4, 0.6, 0.6, 0.9, 3.0, 0.4]:
            x = tg.full((2,), s)
            np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    if use == "compared":
        assert cf.stats()["captures"] == 2


def test_replay_under_inference_mode_returns_inference_tensors():
    """A replayed call inside inference_mode returns inference tensors, as eager."""
    lin = tg.nn.Linear(3, 2)
    cf = tg.compile(lambda x: lin(x))
    x = tg.randn(4, 3)
    with tg.inference_mode():
        got = [cf(x).is_inference() for _ in range(3)]
        assert lin(x).is_inference()
    assert got == [True, True, True]
    assert cf.stats()["replays"] >= 2
    with tg.no_grad():
        assert not any(cf(x).is_inference() for _ in range(2))


def _float_vs_const(x):
    return x * 2 if float(x.sum()) > 1.0 else x * 3


def _float_vs_local(x):
    limit = 1.0
    if float(x.sum()) <= limit:
        return x * 3
    return x * 2


def _int_of_int_tensor(x):
    n = int((x > 0.5).sum())
    return x * 2 if n >= 2 else x * 3


def _float_in_arithmetic(x):  # (not only compared: the exact value is the guard)
    return x * (float(x.sum()) > 1.0) + float(x.sum()) * 0


@pytest.mark.parametrize("fn,captures", [(_float_vs_const, 2), (_float_vs_local, 2),
                                         (_int_of_int_tensor, 2), (_float_in_arithmetic, 6)])
def test_float_and_int_compared_guard_the_outcome(fn, captures):
    cf = tg.compile(fn)
    for v in (1.0, 2.0, 3.0, 4.0, 0.1, 5.0):
        x = tg.full((2,), v)
        assert cf(x).tolist() == fn(x).tolist()
    s = cf.stats()
    assert (s["captures"], s["replays"]) == (captures, 6 - captures), s["recaptures"]
    assert type(float(tg.ones(()))) is float and type(int(tg.ones((), dtype=tg.int64))) is int


SCALES = [1.0, 2.0]
WEIGHTS = {"a": 1.0, "b": 2.0}
BLOCKS = [{"scale": 1.0}, {"scale": 2.0}]
KEY = "a"


class _Scales(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = [1.0, 2.0]

    def forward(self, x):
        for s in self.scales:
            x = x * s
        return x


_SCALER = _Scales()


def _iterated(x):
    for s in SCALES:
        x = x * s
    return x


def _per_block(x):
    for b in BLOCKS:
        x = x * b["scale"]
    return x


READ_WHOLE = {  # fn, the change made in place (every container read in full)
    "iterated": (_iterated, lambda: SCALES.__setitem__(1, 5.0)),
    "summed": (lambda x: x * sum(SCALES), lambda: SCALES.__setitem__(0, 3.0)),
    "len_after_append": (lambda x: x * len(SCALES), lambda: SCALES.append(1.0)),
    "dict_items": (lambda x: x * math.prod(v for _, v in WEIGHTS.items()),
                   lambda: WEIGHTS.__setitem__("b", 7.0)),
    "dict_max": (lambda x: x * max(WEIGHTS.values()), lambda: WEIGHTS.__setitem__("b", 7.0)),
    "computed_key": (lambda x: x * WEIGHTS[KEY], lambda: WEIGHTS.__setitem__("a", 9.0)),
    "module_attribute": (lambda x: _SCALER(x), lambda: _SCALER.scales.__setitem__(0, 4.0)),
    "item_of_each_item": (_per_block, lambda: BLOCKS[1].__setitem__("scale", 3.0)),
    "float_becomes_int": (lambda x: x * SCALES[int(x.shape[0] > 0)],
                          lambda: SCALES.__setitem__(1, 2)),
}


@pytest.mark.parametrize("case", sorted(READ_WHOLE))
def test_a_container_read_whole_and_changed_in_place_captures_again(case):
    fn, change = READ_WHOLE[case]
    x = tg.tensor([1, 2, 3]) if case == "float_becomes_int" else tg.ones(3)
    cf = tg.compile(fn)
    try:
        for _ in range(2):
            np.testing.assert_array_equal(cf(x).numpy(), fn(x).numpy())
        change()
        for _ in range(2):
            got, want = cf(x).numpy(), fn(x).numpy()
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    finally:
        SCALES[:] = [1.0, 2.0]
        WEIGHTS.clear()
        WEIGHTS.update(a=1.0, b=2.0)
        BLOCKS[:] = [{"scale": 1.0}, {"scale": 2.0}]
        _SCALER.scales = [1.0, 2.0]
    s = cf.stats()
    assert s["captures"] == 2, s
    assert s["recaptures"][0].startswith(("SCALES holds", "WEIGHTS holds", "BLOCKS[1] holds",
                                          "_SCALER.scales holds")), s["recaptures"]
    if case != "float_becomes_int":  # (an int tensor times a float: not replayed)
        assert s["replays"] >= 2, s


def test_a_container_given_equal_values_again_replays():
    cf = tg.compile(_iterated)
    x = tg.ones(2)
    cf(x)
    SCALES[0] = float("1.0")  # (a new float object, equal)
    SCALES[1] = 1.0 + 1.0
    assert cf(x).tolist() == [2.0, 2.0]
    assert cf.stats()["captures"] == 1


TABLE = np.array([2.0, 3.0, 4.0])


@pytest.mark.parametrize("read", [
    lambda x: x * TABLE[0], lambda x: x * float(TABLE[1]), lambda x: x * TABLE.sum(),
    lambda x: x * 2 if TABLE[0] > 5 else x, lambda x: x * TABLE.tolist()[0]],
    ids=["item", "float", "sum", "compared", "tolist"])
def test_a_numpy_array_written_in_place_between_calls_captures_again(read):
    cf = tg.compile(read)
    x = tg.ones(3)
    try:
        for value in (2.0, 7.0, 2.0):
            TABLE[:] = [value, 3.0, 4.0]
            for _ in range(2):
                np.testing.assert_array_equal(cf(x).numpy(), read(x).numpy())
    finally:
        TABLE[:] = [2.0, 3.0, 4.0]
    s = cf.stats()
    assert s["captures"] == 2 and s["replays"] == 4  # (the first program serves again)
    assert s["recaptures"][0] == "TABLE holds the same values (global of <lambda>)"


class _TwoStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def scale(self, h):
        return h * 2

    def forward(self, x):
        return self.scale(self.fc(x))


def _doubled(self, x):
    return self.fc(x) * 4


@pytest.mark.parametrize("compiled", ["model", "function_no_grad"])
@pytest.mark.parametrize("change", ["class_forward", "class_helper", "instance_forward",
                                    "library_instance_forward"])
def test_a_method_replaced_between_calls_captures_again(change, compiled):
    cls = type("Net", (_TwoStep,), {})  # (a class of its own: its methods are replaced)
    tg.manual_seed(0)
    model = cls()
    run = tg.compile(model) if compiled == "model" else tg.compile(lambda x: model(x))
    x = tg.ones(2, 3)

    def both():
        if compiled == "model":
            return run(x), model(x)
        with tg.no_grad():
            return run(x), model(x)
    for _ in range(2):
        got, want = both()
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    if change == "class_forward":
        cls.forward = _doubled
    elif change == "class_helper":
        cls.scale = lambda self, h: h * 3
    elif change == "instance_forward":
        model.forward = types.MethodType(_doubled, model)
    else:
        model.fc.forward = lambda h: h.tanh()
    for _ in range(2):
        got, want = both()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert run.stats()["captures"] == 2


@pytest.mark.parametrize("fn", [lambda x: x * 2 + tg.zeros(3), lambda x: x + tg.arange(3.0),
                                lambda x: (x > 0) * 0.5],
                         ids=["zeros", "arange", "python_float"])
def test_the_default_dtype_changed_between_calls_captures_again(fn):
    cf = tg.compile(fn)
    x = tg.ones(3)
    for dtype in (tg.float32, tg.float64, tg.float32):
        tg.set_default_dtype(dtype)
        try:
            for _ in range(2):
                got, want = cf(x), fn(x)
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got.numpy(), want.numpy())
        finally:
            tg.set_default_dtype(tg.float32)
    s = cf.stats()
    assert s["captures"] == 2 and s["replays"] == 4 and s["eager_calls"] == 0


class _Term:
    def __init__(self, scale):
        self.scale = scale


TERMS = [_Term(1.0), _Term(2.0), _Term(3.0)]


def _generator_sum(x):
    return x * sum(t.scale for t in TERMS)


def _comprehension_sum(x):
    return x * sum([t.scale for t in TERMS])


@pytest.mark.parametrize("fn", [_generator_sum, _comprehension_sum],
                         ids=["generator", "list_comprehension"])
def test_attributes_a_comprehension_reads_from_a_global_lists_items_are_guarded(fn):
    cf = tg.compile(fn)
    x = tg.ones(2)
    try:
        for scale in (2.0, 5.0):
            TERMS[1].scale = scale
            for _ in range(2):
                assert cf(x).tolist() == fn(x).tolist() == [4.0 + scale] * 2
        assert cf.stats()["captures"] == 2 and cf.stats()["replays"] == 2
    finally:
        TERMS[1].scale = 2.0


LONG = [1.0] * 300
BIG_ARRAY = np.ones(20000)
DEEP = [[[[1.0, 2.0]]]]


def _long_sum(x):
    return x * sum(LONG)


def _big_array_item(x):
    return x * float(BIG_ARRAY[0])


def _deep_sum(x):
    return x * sum(DEEP[0][0][0])


# (each sets its item to the value given, or back to the one it had for None)
@pytest.mark.parametrize("fn, what, change", [
    (_long_sum, "LONG (global of _long_sum): 300 items",
     lambda v: LONG.__setitem__(5, v or 1.0)),
    (_big_array_item, "BIG_ARRAY (global of _big_array_item): 160000 bytes",
     lambda v: BIG_ARRAY.__setitem__(0, v or 1.0)),
    (_deep_sum, "DEEP[0][0][0] (global of _deep_sum): more than 3 steps in",
     lambda v: DEEP[0][0][0].__setitem__(1, v or 2.0))], ids=["long_list", "big_array", "deep"])
def test_a_container_too_large_or_deep_to_guard_is_named_in_a_warning(fn, what, change):
    """A list or dict over 256 items, an array over 64 KiB or a container more than
    three steps in is guarded by identity only: changed in place, the replay gives the
    captured value. The capture says so once, naming it."""
    cf = tg.compile(fn)
    x = tg.ones(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        first = cf(x).tolist()
        cf(x)
    told = [str(m.message) for m in w if "does not guard" in str(m.message)]
    assert len(told) == 1 and what in told[0]
    change(10.0)
    try:
        assert fn(x).tolist() != first
        assert cf(x).tolist() == first  # (the stale replay the warning told of)
        assert cf.stats()["captures"] == 1 and cf.stats()["replays"] == 2
    finally:
        change(None)


DEEP_INNER = DEEP[0][0][0]


def _deep_and_near_sum(x):
    return x * (sum(DEEP[0][0][0]) + sum(DEEP_INNER))


def test_a_container_reached_deep_and_by_name_is_guarded_whole():
    cf = tg.compile(_deep_and_near_sum)
    x = tg.ones(2)
    try:
        for v in (2.0, 4.0):
            DEEP_INNER[1] = v
            for _ in range(2):
                assert cf(x).tolist() == _deep_and_near_sum(x).tolist() == [2 + 2 * v] * 2
        assert cf.stats()["captures"] == 2
    finally:
        DEEP_INNER[1] = 2.0


TALLIES = {
    "set": {1.0, 2.0},
    "frozenset_in_list": [frozenset((1.0, 2.0))],
    "deque": collections.deque([1.0, 2.0]),
    "ordered_dict": collections.OrderedDict(a=1.0, b=2.0),
    "default_dict": collections.defaultdict(float, a=1.0, b=2.0),
    "counter": collections.Counter(a=1, b=2),
}
CHANGES = {
    "set": lambda c: c.add(5.0),
    "frozenset_in_list": lambda c: c.__setitem__(0, frozenset((5.0,))),
    "deque": lambda c: c.append(5.0),
    "ordered_dict": lambda c: c.__setitem__("a", 5.0),
    "default_dict": lambda c: c.__setitem__("a", 5.0),
    "counter": lambda c: c.update("a"),
}


def _total(c):
    if isinstance(c, dict):
        return sum(c.values())
    if isinstance(c, list):
        return sum(c[0])
    return sum(c)


@pytest.mark.parametrize("kind", list(TALLIES))
def test_a_standard_container_read_whole_and_changed_in_place_captures_again(kind):
    tally = TALLIES[kind]

    def scaled(x):
        return x * _total(tally)

    cf = tg.compile(scaled)
    x = tg.ones(2)
    for _ in range(2):
        assert cf(x).tolist() == [3.0, 3.0]
    CHANGES[kind](tally)
    for _ in range(2):
        assert cf(x).tolist() == scaled(x).tolist() != [3.0, 3.0]
    s = cf.stats()
    assert s["captures"] == 2 and s["replays"] == 2
    assert any("holds the same items" in g for g in s["guards"])


ORDERED = collections.OrderedDict(scale=2.0)


def _ordered_scaled(x):
    return x * ORDERED["scale"]


def test_an_ordered_dicts_item_read_by_a_constant_key_is_guarded():
    cf = tg.compile(_ordered_scaled)
    x = tg.ones(2)
    try:
        for scale in (2.0, 3.0):
            ORDERED["scale"] = scale
            for _ in range(2):
                assert cf(x).tolist() == [scale] * 2
        assert cf.stats()["captures"] == 2
        assert "ORDERED['scale'] == 3.0 (global of _ordered_scaled)" in cf.stats()["guards"]
    finally:
        ORDERED["scale"] = 2.0


COUNTS = {"ordered_dict": collections.OrderedDict(n=0),
          "default_dict": collections.defaultdict(int, n=0),
          "counter": collections.Counter(n=0), "deque": collections.deque([0])}


@pytest.mark.parametrize("kind", list(COUNTS))
def test_a_standard_container_written_in_place_by_the_call_runs_eagerly(kind):
    """``C[k] += 1`` stores no C call the hook sees: the container's copy from before
    the call shows the change, and every call makes it (a replay would not)."""
    counts = COUNTS[kind]
    key = 0 if kind == "deque" else "n"
    counts[key] = 0

    def counted(x):
        counts[key] += 1
        return x * 2

    cf = tg.compile(counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(4):
            assert cf(tg.ones(2)).tolist() == [2.0, 2.0]
    assert counts[key] == 4
    assert cf.stats()["replays"] == 0
    assert "changed in place" in cf.stats()["eager_reason"]


def _counted_by_default(x, counts={"n": 0}):  # noqa: B006 (the state under test)
    counts["n"] += 1
    return x * 2


def _counted_by_keyword_default(x, *, seen=[]):  # noqa: B006 (the state under test)
    seen.append(1)
    return x * 2


@pytest.mark.parametrize("fn, count", [
    (_counted_by_default, lambda: _counted_by_default.__defaults__[0]["n"]),
    (_counted_by_keyword_default, lambda: len(_counted_by_keyword_default.__kwdefaults__[
        "seen"]))], ids=["default", "keyword_default"])
def test_a_mutable_default_the_call_writes_in_place_runs_eagerly(fn, count):
    cf = tg.compile(fn)
    start = count()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(4):
            assert cf(tg.ones(2)).tolist() == [2.0, 2.0]
    assert count() == start + 4
    assert cf.stats()["replays"] == 0


def _scaled(x, k=2.0):
    return (x * k).sum()


def _tripled(x, k=2.0):
    return (x * 3.0 + k).sum()


def _helper_scaled(x):
    return _scaled(x)


@pytest.mark.parametrize("top", [True, False], ids=["compiled function", "called function"])
@pytest.mark.parametrize("change", ["__code__", "__defaults__"])
def test_a_function_whose_code_or_defaults_are_replaced_captures_again(top, change):
    """``f.__code__ = g.__code__`` or ``f.__defaults__ = (...)`` between calls, on the
    compiled function or on one it calls: the next call runs the new code (before the
    code object was guarded, a replay ran the old program)."""
    code, defaults = _scaled.__code__, _scaled.__defaults__
    cf = tg.compile(_scaled if top else _helper_scaled)
    x = tg.tensor([1.0, 2.0])
    try:
        assert float(cf(x)) == 6.0
        assert float(cf(x)) == 6.0
        if change == "__code__":
            _scaled.__code__ = _tripled.__code__
            want = float(_tripled(x))
        else:
            _scaled.__defaults__ = (5.0,)
            want = 15.0
        assert float(cf(x)) == want
        assert float(cf(x)) == want
        s = cf.stats()
        assert s["captures"] == 2 and s["replays"] == 2
        assert any(change in r for r in s["recaptures"]), s["recaptures"]
    finally:
        _scaled.__code__, _scaled.__defaults__ = code, defaults


FACTORS = [1.0, 2.0, 3.0]


def _accumulated(x, w):
    total = tg.tensor(0.0)  # PyTorch's idiom for a sum built in a loop
    for k in range(2):
        total = total + (x * w).sum() * (k + 1)
    return total + (x * tg.tensor(FACTORS)).sum()


def test_a_tensor_made_from_python_numbers_is_a_constant_of_the_program():
    """``tg.tensor(0.0)`` or ``tg.tensor(a_global_list)`` inside the step: a constant
    the program holds (each Python value it came from guarded), not an eager call
    (before, the step ran eagerly for good); values and gradients as eager's."""
    w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    cf = tg.compile(lambda x: _accumulated(x, w))
    x = tg.tensor([1.0, 2.0, 3.0])
    try:
        for i in range(6):
            if i == 3:
                FACTORS[1] = -4.0
            w.grad = None
            got = cf(x)
            got.backward()
            g = w.grad.numpy().copy()
            w.grad = None
            want = _accumulated(x, w)
            want.backward()
            np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
            np.testing.assert_allclose(g, w.grad.numpy(), rtol=1e-6)
    finally:
        FACTORS[1] = 2.0
    s = cf.stats()
    assert s["eager_calls"] == 0 and s["replays"] >= 2, s
    assert any("FACTORS" in r for r in s["recaptures"]), s["recaptures"]


def test_a_tensor_made_from_a_tensors_values_stays_guarded():
    """``tg.tensor(x.tolist())``: the numbers came from a tensor, whose values are
    guarded, so new values capture again (never a stale constant)."""
    def f(x):
        return x * tg.tensor(x.tolist())
    cf = tg.compile(f)
    for v in ([1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [3.0, 4.0], [1.0, 2.0]):
        x = tg.tensor(v)
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())


def _train_step(m, opt):
    def step(x, y):
        opt.zero_grad()
        loss = tg.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        with tg.no_grad():
            acc = (m(x).argmax(1) == y).float().mean()
        return loss.item(), {"acc": acc.item(), "high": loss.item() > 1.0}
    return step


def test_a_returned_item_is_read_again_each_replay():
    """``return loss.item()`` (PyTorch's training-step idiom, here with an accuracy
    read after the optimizer step): the number is an output of the program, read from
    its tensor each replay, not a guard on its value (before, every call captured again,
    then ran eagerly for good); a returned comparison stays guarded on its outcome; the
    capture call returns plain numbers too."""
    tg.manual_seed(0)
    m, m2 = tg.nn.Linear(4, 3), tg.nn.Linear(4, 3)
    m2.load_state_dict(m.state_dict())
    cf = tg.compile(_train_step(m, tg.optim.SGD(m.parameters(), lr=0.5)))
    eager = _train_step(m2, tg.optim.SGD(m2.parameters(), lr=0.5))
    rng = np.random.default_rng(0)
    for i in range(12):
        x = tg.tensor(rng.standard_normal((6, 4)).astype(np.float32))
        y = tg.tensor(rng.integers(0, 3, 6))
        got, want = cf(x, y), eager(x, y)
        assert type(got[0]) is float and type(got[1]["acc"]) is float
        assert type(got[1]["high"]) is bool and got[1]["high"] == want[1]["high"]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        assert got[1]["acc"] == want[1]["acc"]
    s = cf.stats()
    assert s["eager_calls"] == 0 and s["replays"] >= 8, s
    assert all("item() ==" not in r for r in s["recaptures"]), s["recaptures"]
    assert any("returned" in w or "> 1.0" in w for w in s["guards"]), s["guards"]


def test_a_returned_item_whose_tensor_is_written_later_keeps_its_value():
    """The number is the value when read: a returned ``item()`` of a tensor the step
    then writes in place (``s.add_``), or of a view of a parameter the optimizer then
    updates, stays guarded on its value instead of being read again at the end (which
    would give the written value)."""
    w = tg.ones(3)

    def f(x):
        s = (x * w).sum()
        v = s.item()
        s.add_(100.0)
        return v, s
    cf = tg.compile(f)
    for i in range(5):
        x = tg.tensor([1.0, 2.0, float(i)])
        got, want = cf(x), f(x)
        assert got[0] == want[0] and float(got[1]) == float(want[1])

    def make():
        p = tg.nn.Parameter(tg.ones(3))
        opt = tg.optim.SGD([p], lr=0.1)

        def h(x):
            opt.zero_grad()
            v = p[0].item()
            (p * x).sum().backward()
            opt.step()
            return v
        return h
    ch, h = tg.compile(make()), make()
    for _ in range(6):
        x = tg.tensor([1.0, 2.0, 3.0])
        np.testing.assert_allclose(ch(x), h(x), rtol=1e-6)


class _Doubler(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = tg.nn.Parameter(tg.tensor([0.5, -1.0, 2.0]))

    def forward(self, x):
        x.mul_(2.0)  # an in-place write into the argument
        return (x * self.w).sum()


@pytest.mark.parametrize("how", ["function", "batch", "module"])
def test_an_argument_written_in_place_is_written_once_per_call(how):
    """A step whose outputs are differentiated outside (a compiled module, or a
    function run as one) and that writes its argument in place: the call that captures
    writes it once, as eager does (before, the capture's run and the replay after it
    both wrote it: the second call's result and argument were doubled twice)."""
    w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)

    def wrap(t):
        return {"x": t} if how == "batch" else t
    if how == "module":
        m = _Doubler()
        cf, eager, leaf = tg.compile(m), m, m.w
    else:
        def f(a):
            x = a["x"] if how == "batch" else a
            x.mul_(2.0)
            return (x * w).sum()
        cf, eager, leaf = tg.compile(f), f, w
    rng = np.random.default_rng(1)
    for i in range(5):
        a = tg.tensor(rng.standard_normal(3).astype(np.float32))
        b = a.clone()
        got = cf(wrap(a))
        got.backward()
        g = leaf.grad.numpy().copy()
        leaf.grad = None
        want = eager(wrap(b))
        want.backward()
        np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_allclose(g, leaf.grad.numpy(), rtol=1e-6)
        leaf.grad = None
    assert cf.stats()["replays"] >= 2


_COUNT = tg.zeros(1)


class _Counting(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = tg.nn.Parameter(tg.ones(3))

    def forward(self, x):
        _COUNT.add_(1.0)  # a global tensor written in place
        return (x * self.w).sum() + _COUNT.sum()


def test_a_global_tensor_a_compiled_forward_writes_in_place_is_written_once():
    """The capturing call of a compiled module writes a global tensor once, as eager
    (before: twice, and the first result was off by one)."""
    _COUNT.zero_()
    cm = tg.compile(_Counting())
    for i in range(5):
        loss = cm(tg.ones(3))
        loss.backward()
        assert float(_COUNT) == i + 1 and float(loss) == 3.0 + i + 1
    assert cm.stats()["replays"] >= 3


# ---------------------------------------------------------------- layouts and aliasing
def _writes_a_reads_b(a, b):
    a.mul_(2)
    return b + 1


@pytest.mark.parametrize("views", ["disjoint", "overlapping", "same"])
def test_arguments_sharing_memory_replay_only_for_the_same_overlap(views):
    c = tg.compile(_writes_a_reads_b)
    for _ in range(2):  # captured (and replayed) for one tensor passed twice
        x = tg.ones(4)
        c(x, x)
    pick = {"disjoint": lambda b: (b[:4], b[4:]), "overlapping": lambda b: (b[:4], b[2:6]),
            "same": lambda b: (b[:4], b[:4])}[views]
    for _ in range(2):
        base, ref = tg.ones(8), tg.ones(8)
        got = c(*pick(base))
        want = _writes_a_reads_b(*pick(ref))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(base.numpy(), ref.numpy())
    if views != "same":
        assert any("shares memory" in r for r in c.stats()["recaptures"])


def _by_layout(x):
    return x.view(-1) * 2 if x.is_contiguous() else x.reshape(-1) * 0


def test_an_arguments_strides_are_guarded():
    c = tg.compile(_by_layout)
    a = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    c(a)
    c(a)
    for _ in range(2):
        np.testing.assert_array_equal(c(a.T).numpy(), [0, 0, 0, 0])
        np.testing.assert_array_equal(c(a).numpy(), [2, 4, 6, 8])
    s = c.stats()
    assert s["replays"] >= 3 and any("strides (1, 2)" in r for r in s["recaptures"]), s
    f = tg.compile(lambda x: x * x.stride()[0])
    f(a)
    f(a)
    np.testing.assert_array_equal(f(a.T).numpy(), (a.T * 1).numpy())


def test_values_read_through_dlpack_are_guarded():
    def f(x):
        return x * float(np.from_dlpack(x)[0])
    c = tg.compile(f)
    c(tg.ones(3))
    c(tg.ones(3))
    x = tg.tensor([5.0, 2.0, 3.0])
    np.testing.assert_array_equal(c(x).numpy(), f(x).numpy())
