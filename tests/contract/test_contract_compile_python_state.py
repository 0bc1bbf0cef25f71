"""API.md "Compile and export", tg.compile as PyTorch users call it: methods of plain
objects (`tg.compile(obj.method)`), the decorator forms, keyword arguments, outputs that
are not tensors, nested compiled calls, and the Python state a training script changes
between calls (items of config dicts and lists, enum flags, attributes of config
objects held by modules, class attributes, optimizer hyperparameters in `param_groups`,
`train()`/`eval()`, `requires_grad_`, parameters' `.data`). Every compiled call is
compared with the eager call: nothing may replay silently wrong."""
import copy
import dataclasses
import enum
import inspect
import warnings

import numpy as np
import pytest

import tapegrad as tg


def _calls(cf, f, x, before=2):
    """Call the compiled ``cf`` ``before`` times (a capture, then replays); return a
    function that checks the next compiled call against the eager ``f``."""
    for _ in range(before):
        cf(x)

    def check():
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6, atol=1e-7)
    return check


# ---------------------------------------------------------------- Python state read
class Mode(enum.Enum):
    SUM = 1
    MAX = 2


@dataclasses.dataclass
class Config:
    scale: float = 2.0
    mode: Mode = Mode.SUM


class Scaler:
    factor = 2.0  # a class attribute, read through self

    def __init__(self):
        self.k = 2.0
        self.cfg = Config()

    def __call__(self, x):
        return x * self.k * self.factor

    def scale(self, x):
        return x * self.k

    def by_config(self, x):
        return x * self.cfg.scale


CONFIG = {"scale": 2.0, "act": "relu"}
SIZES = [2.0, 3.0]
MODE = Mode.SUM
scaler = Scaler()
holder = Scaler()


def _by_dict(x):
    y = x * CONFIG["scale"]
    return y.relu() if CONFIG["act"] == "relu" else y.tanh()


def _by_list(x):
    return x * SIZES[1]


def _by_enum(x):
    return x.sum(0) if MODE is Mode.SUM else x.amax(0)


def _by_helper_method(x):
    return holder.scale(x) + 1


def _by_nested_attr(x):
    return x * holder.cfg.scale


class _ModuleWithConfig(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Config()
        self.sizes = [1.0]
        self.lin = tg.nn.Linear(2, 2)

    def forward(self, x):
        y = self.lin(x) * self.cfg.scale * self.sizes[0]
        return y.sum(0) if self.cfg.mode is Mode.SUM else y.amax(0)


def _set_global(name, value):
    globals()[name] = value


MUTATIONS = {
    "dict item": (_by_dict, lambda: CONFIG.__setitem__("scale", 5.0)),
    "dict item (str)": (_by_dict, lambda: CONFIG.__setitem__("act", "tanh")),
    "list item": (_by_list, lambda: SIZES.__setitem__(1, 7.0)),
    "enum global": (_by_enum, lambda: _set_global("MODE", Mode.MAX)),
    "method of a global object": (_by_helper_method, lambda: setattr(holder, "k", 7.0)),
    "attribute of an attribute": (_by_nested_attr, lambda: setattr(holder.cfg, "scale", 4.0)),
    "object replaced": (_by_nested_attr, lambda: setattr(holder, "cfg", Config(scale=6.0))),
}


@pytest.fixture
def restore_state():
    global CONFIG, SIZES, MODE, holder
    saved = (dict(CONFIG), list(SIZES), MODE)
    holder = Scaler()
    yield
    CONFIG.clear()
    CONFIG.update(saved[0])
    SIZES[:] = saved[1]
    MODE = saved[2]


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_python_state_changed_between_calls(what, restore_state):
    f, mutate = MUTATIONS[what]
    cf = tg.compile(f)
    check = _calls(cf, f, tg.tensor([[1.0, -2.0], [3.0, 0.5]]))
    check()
    mutate()
    check()
    check()
    assert cf.stats()["captures"] == 2, cf.stats()["recaptures"]
    assert len(cf.stats()["recaptures"]) == 1


def test_method_of_a_plain_object_compiled_directly():
    s = Scaler()
    cf = tg.compile(s.scale)
    check = _calls(cf, s.scale, tg.ones(3))
    s.k = 5.0
    check()
    cc = tg.compile(s.by_config)
    check = _calls(cc, s.by_config, tg.ones(3))
    s.cfg.scale = 3.0
    check()
    s.cfg = Config(scale=-1.0)
    check()


def test_class_attribute_read_through_self():
    s = Scaler()
    cf = tg.compile(s)
    check = _calls(cf, s, tg.ones(2))
    Scaler.factor = 3.0
    try:
        check()
        s.factor = 4.0  # an instance attribute now shadows the class's
        check()
    finally:
        Scaler.factor = 2.0


def test_module_reading_a_config_object_and_a_list():
    tg.manual_seed(0)
    m = _ModuleWithConfig()
    cm = tg.compile(m)
    x = tg.randn(3, 2)
    with tg.no_grad():
        for change in (None, "scale", "sizes", "mode", "new cfg"):
            if change == "scale":
                m.cfg.scale = 3.0
            elif change == "sizes":
                m.sizes[0] = -2.0
            elif change == "mode":
                m.cfg.mode = Mode.MAX
            elif change == "new cfg":
                m.cfg = Config(scale=0.5)
            for _ in range(2):
                np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert cm.stats()["captures"] == 5


# ---------------------------------------------------------------- call forms
def test_decorator_forms():
    @tg.compile
    def f(x):
        return x.sin() * 2

    @tg.compile(fuse=False)
    def g(x):
        return x.sin() * 2

    x = tg.tensor([0.5, 1.0, 2.0])
    want = (x.sin() * 2).numpy()
    for _ in range(3):
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(g(x).numpy(), want, rtol=1e-6)
    assert f.stats()["replays"] == g.stats()["replays"] == 2
    assert g.stats()["fused_groups"] == 0
    assert f.__name__ == "f" and list(inspect.signature(f).parameters) == ["x"]


def test_keyword_arguments_and_defaults():
    def f(x, *, scale=1.0, shift=None):
        y = x * scale
        return y if shift is None else y + shift

    cf = tg.compile(f)
    x = tg.ones(2)
    calls = [{}, {}, {"scale": 2.0}, {"scale": 2.0}, {"shift": tg.full((2,), 3.0)},
             {"scale": 3.0, "shift": tg.full((2,), 5.0)}, {}]
    for kw in calls:
        assert cf(x, **kw).tolist() == f(x, **kw).tolist()


def test_outputs_that_are_not_tensors_keep_their_structure():
    def f(x):
        return {"double": x * 2, "pair": (x + 1, 3)}, [x.sum()], "tag", None

    cf = tg.compile(f)
    x = tg.tensor([1.0, 2.0])
    for _ in range(3):
        out = cf(x)
        d, lst, tag, none = out
        assert type(out) is tuple and type(d) is dict and type(lst) is list
        assert d["double"].tolist() == [2.0, 4.0] and d["pair"][1] == 3
        assert type(d["pair"]) is tuple and d["pair"][0].tolist() == [2.0, 3.0]
        assert lst[0].item() == 3.0 and tag == "tag" and none is None
    assert cf.stats()["replays"] == 2


def test_nested_compiled_calls():
    inner = tg.compile(lambda x: x.exp() - 1)
    outer = tg.compile(lambda x: inner(x) * 2 + inner(x * 0.5))
    x = tg.tensor([0.1, -0.3, 0.7])
    want = ((x.exp() - 1) * 2 + ((x * 0.5).exp() - 1)).numpy()
    for _ in range(3):
        np.testing.assert_allclose(outer(x).numpy(), want, rtol=1e-6)


def test_create_graph_through_a_compiled_module_reaches_the_parameters():
    tg.manual_seed(0)
    m = tg.nn.Sequential(tg.nn.Linear(3, 3), tg.nn.Tanh(), tg.nn.Linear(3, 1))
    cm = tg.compile(m)
    params = list(m.parameters())[:3]  # (the last bias does not reach dy/dx)
    x = tg.randn(5, 3, requires_grad=True)

    def second(model):
        g, = tg.grad(model(x).sum(), x, create_graph=True)
        return tg.grad(g.pow(2).sum(), params)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an eager recomputation is allowed
        for _ in range(2):
            cm(x.detach())
        got = second(cm)
    for a, b in zip(got, second(m)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- training scripts
def _step(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("make_opt", [
    lambda p: tg.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: tg.optim.Adam(p, lr=0.05),
], ids=["sgd", "adam"])
def test_whole_step_follows_param_groups_and_a_scheduler(make_opt):
    tg.manual_seed(0)
    model = tg.nn.Linear(3, 1)
    ref = copy.deepcopy(model)
    opt, opt_ref = make_opt(model.parameters()), make_opt(ref.parameters())
    sched = tg.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    sched_ref = tg.optim.lr_scheduler.StepLR(opt_ref, 2, gamma=0.5)
    cstep = tg.compile(_step)
    for i in range(7):
        if i == 5:
            for o in (opt, opt_ref):
                o.param_groups[0]["weight_decay"] = 0.1
        x, y = tg.randn(4, 3), tg.randn(4, 1)
        loss = cstep(model, opt, x, y)
        loss_ref = _step(ref, opt_ref, x, y)
        sched.step()
        sched_ref.step()
        assert float(loss) == pytest.approx(float(loss_ref), rel=1e-5)
        np.testing.assert_allclose(model.weight.detach().numpy(), ref.weight.detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert cstep.stats()["replays"] >= 1


@pytest.mark.filterwarnings("ignore:tg.compile")
def test_compiled_module_follows_train_eval_requires_grad_and_data():
    tg.manual_seed(0)
    m = tg.nn.Sequential(tg.nn.Linear(4, 4), tg.nn.Dropout(0.5), tg.nn.Linear(4, 2))
    cm = tg.compile(m)
    x = tg.randn(8, 4)
    with tg.no_grad():
        cm(x)
        cm(x)
        cm.eval()
        assert not m.training and not m[1].training
        np.testing.assert_array_equal(cm(x).numpy(), m(x).numpy())
        cm.train()
        assert m[1].training
        h = m[1](tg.ones(1000))
        assert (h == 0).any()
        cm.eval()
        m[0].weight.data = tg.full((4, 4), 0.5)
        np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-6)
        m[2].bias.fill_(3.0)
        np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-6)
    for i in range(3):
        if i == 1:
            m[0].weight.requires_grad_(False)
        m.zero_grad()
        cm(x).sum().backward()
        assert (m[0].weight.grad is None) == (i >= 1)
        assert m[0].bias.grad is not None and m[2].weight.grad is not None
