"""A guard fuzzer: between calls of a compiled training step, Hypothesis mutates what a
user's script mutates (a global flag, a closure value, a module attribute,
``train()``/``eval()``, a parameter's ``.data`` rebound, ``requires_grad_``, the batch
size and dtype, the optimizer's ``lr``, ``momentum``, ``weight_decay`` (SGD) and
``betas`` (Adam) in ``param_groups``, a parameter written in place under ``no_grad``, a
parameter replaced by a new one, the optimizer's and the model's ``load_state_dict``,
an lr scheduler's ``step()``, a forward hook and a gradient hook registered or
removed, an item of a list attribute the forward iterates and of a dict attribute, a
tensor attribute rebound or written in place, BatchNorm's running statistics written
in place and its ``momentum``, a function-valued attribute swapped) on a compiled and
an eager twin alike; every call's loss and every parameter
afterwards must match eager. Both ways of compiling are fuzzed: the whole step, and
``tg.compile(model)`` (or a function calling it) with the backward and the update
outside."""
import collections
import copy
import os
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

DOUBLE = False  # a global the step reads
FUZZ_EXAMPLES = int(os.environ.get("TG_FUZZ_EXAMPLES", "6"))

MUTATIONS = ("flag", "alpha", "train", "eval", "dropout_p", "data", "requires_grad",
             "batch", "dtype", "lr", "momentum", "weight_decay", "betas", "inplace",
             "replace", "opt_reload", "model_reload", "shift", "scheduler", "hook",
             "unhook", "grad_hook", "scales", "gain", "offset", "offset_inplace",
             "running_stats", "bn_momentum", "activation", "term", "weights", "none")


class _Term:
    def __init__(self, w):
        self.w = w


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        # (no bias: one feeding BatchNorm gets a gradient of rounding noise alone, which
        # Adam turns into steps of about lr, apart in fused kernels and eager ones)
        self.fc1 = nn.Linear(4, 8, bias=False)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.0)
        self.fc2 = nn.Linear(8, 3)
        self.shift = 0.0
        self.scales = [1.0, 1.0]  # (iterated: read whole)
        self.cfg = {"gain": 1.0}
        self.offset = tg.zeros(3)  # (a tensor attribute: neither parameter nor buffer)
        self.act = tg.nn.functional.relu
        self.terms = [_Term(1.0)]  # (an attribute a generator expression reads)
        self.weights = collections.deque([1.0])  # (a deque read whole)

    def forward(self, x):
        h = self.act(self.bn(self.fc1(x)))
        for s in self.scales:
            h = h * s
        h = h * sum(t.w for t in self.terms) * sum(self.weights)
        return self.fc2(self.drop(h)) * self.cfg["gain"] + self.shift + self.offset


def _twin():
    tg.manual_seed(0)
    a = Net()
    b = Net()
    b.load_state_dict(a.state_dict())
    return a, b


def _maker(model, opt, compiled_model):
    alpha = 1.0
    crit = nn.CrossEntropyLoss()
    run = tg.compile(model) if compiled_model == "model" else \
        tg.compile(lambda x: model(x)) if compiled_model == "forward" else model

    def step(x, y):
        opt.zero_grad()
        loss = crit(run(x), y) * alpha * (2.0 if DOUBLE else 1.0)
        loss.backward()
        opt.step()
        return loss

    def set_alpha(v):
        nonlocal alpha
        alpha = v
    return step, set_alpha


def _apply(mut, value, models, opts, setters, state):
    global DOUBLE
    if mut == "flag":
        DOUBLE = not DOUBLE
    elif mut == "alpha":
        for s in setters:
            s(value)
    elif mut == "train":
        for m in models:
            m.train()
    elif mut == "eval":
        for m in models:
            m.eval()
    elif mut == "dropout_p":
        for m in models:
            m.drop.p = value
    elif mut == "data":
        new = np.random.default_rng(int(value * 1000)).standard_normal((8, 4))
        for m in models:
            m.fc1.weight.data = tg.tensor(new.astype(state.get("dtype", np.float32)))
    elif mut == "requires_grad":
        for m in models:
            m.fc2.bias.requires_grad_(not m.fc2.bias.requires_grad)
    elif mut == "batch":
        state["batch"] = 4 + int(value * 8)
    elif mut == "dtype":
        state["dtype"] = np.float64 if state.get("dtype", np.float32) == np.float32 \
            else np.float32
        for m in models:
            m.to(tg.float64 if state["dtype"] == np.float64 else tg.float32)
            m.offset = m.offset.to(m.fc2.weight.dtype)
    elif mut == "shift":
        state["shift"] = value
    elif mut == "lr":
        for o in opts:
            o.param_groups[0]["lr"] = value / 10
    elif mut == "momentum":
        for o in opts:
            if "momentum" in o.param_groups[0]:
                o.param_groups[0]["momentum"] = value
    elif mut == "weight_decay":
        for o in opts:
            o.param_groups[0]["weight_decay"] = value / 10
    elif mut == "betas":
        for o in opts:
            if "betas" in o.param_groups[0]:
                o.param_groups[0]["betas"] = (value, 0.999)
    elif mut == "inplace":
        with tg.no_grad():
            for m in models:
                m.fc2.weight.mul_(1.0 - value / 2)
    elif mut == "opt_reload":  # the optimizer's state: new tensors, the same values
        for o in opts:
            o.load_state_dict(copy.deepcopy(o.state_dict()))
    elif mut == "model_reload":  # copied into the parameters and buffers
        for m in models:
            m.load_state_dict(copy.deepcopy(m.state_dict()))
    elif mut == "replace":  # a new Parameter, which the optimizer does not hold
        new = np.random.default_rng(int(value * 1000)).standard_normal(3)
        for m in models:
            m.fc2.bias = nn.Parameter(tg.tensor(new.astype(state.get("dtype", np.float32))))
    elif mut == "scheduler":  # an lr scheduler stepped between calls
        if "schedulers" not in state:
            state["schedulers"] = [tg.optim.lr_scheduler.StepLR(o, 1, gamma=0.5 + value / 2)
                                   for o in opts]
        for sch in state["schedulers"]:
            sch.step()
    elif mut == "hook":  # a forward hook (a second one: on top of the first)
        state.setdefault("hooks", []).extend(
            m.fc1.register_forward_hook(lambda mod, args, out, v=value: out * (1.0 + v))
            for m in models)
    elif mut == "unhook":
        for h in state.pop("hooks", ()):
            h.remove()
    elif mut == "grad_hook":  # a gradient hook on a parameter, or its removal
        if "grad_hooks" in state:
            for h in state.pop("grad_hooks"):
                h.remove()
        else:
            state["grad_hooks"] = [m.fc2.weight.register_hook(lambda g, v=value: g * (1 + v))
                                   for m in models]
    elif mut == "scales":  # an item of a list attribute the forward iterates
        for m in models:
            m.scales[1] = 1.0 + value
    elif mut == "gain":  # an item of a dict attribute
        for m in models:
            m.cfg["gain"] = 1.0 + value
    elif mut == "offset":  # a tensor attribute rebound
        for m in models:
            m.offset = tg.full((3,), value, dtype=m.fc2.weight.dtype)
    elif mut == "offset_inplace":
        with tg.no_grad():
            for m in models:
                m.offset.add_(value)
    elif mut == "running_stats":  # a buffer written in place (read in eval mode)
        with tg.no_grad():
            for m in models:
                m.bn.running_mean.fill_(value)
                m.bn.running_var.fill_(1.0 + value)
    elif mut == "bn_momentum":
        for m in models:
            m.bn.momentum = value if value > 0.1 else None  # (None: a cumulative average)
    elif mut == "activation":  # a function-valued attribute swapped
        for m in models:
            m.act = tg.nn.functional.relu if m.act is tg.tanh else tg.tanh
    elif mut == "term":  # an attribute of an item of a list attribute
        for m in models:
            m.terms[0].w = 1.0 + value
    elif mut == "weights":  # an item of a deque attribute
        for m in models:
            m.weights[0] = 1.0 + value
    for m in models:
        m.shift = state.get("shift", 0.0)


@pytest.mark.parametrize("optim", ["sgd", "adam"])
@pytest.mark.parametrize("compiled_model", [False, "model", "forward"],
                         ids=["whole_step", "model", "forward"])
@hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(muts=st.lists(st.tuples(st.sampled_from(MUTATIONS),
                                          st.floats(0.0, 0.9, allow_nan=False)),
                                min_size=2, max_size=5))
def test_fuzzed_mutations_between_calls_match_eager(compiled_model, optim, muts):
    global DOUBLE
    DOUBLE = False
    mc, me = _twin()
    # (Adam's eps raised: a gradient near rounding noise takes no steps of about lr)
    opts = [tg.optim.SGD(m.parameters(), lr=0.05, momentum=0.5) if optim == "sgd" else
            tg.optim.Adam(m.parameters(), lr=0.01, eps=1e-3) for m in (mc, me)]
    (cstep, cset), (estep, eset) = _maker(mc, opts[0], compiled_model), \
        _maker(me, opts[1], False)
    if not compiled_model:
        cstep = tg.compile(cstep)
    state = {"batch": 6}
    rng = np.random.default_rng(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (dropout in training: eager, with a warning)
            for i, (mut, value) in enumerate([("none", 0.0)] + muts):
                _apply(mut, value, (mc, me), opts, (cset, eset), state)
                n = state["batch"]
                x = tg.tensor(rng.standard_normal((n, 4)).astype(state.get("dtype",
                                                                           np.float32)))
                y = tg.tensor(rng.integers(0, 3, n))
                for _ in range(2):  # a capture, then a replay
                    tg.manual_seed(i)
                    lc = cstep(x, y).item()
                    tg.manual_seed(i)
                    le = estep(x, y).item()
                    np.testing.assert_allclose(lc, le, rtol=1e-5, atol=1e-6,
                                               err_msg=f"after {mut}")
                for a, b in zip(mc.state_dict().values(), me.state_dict().values()):
                    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5,
                                               err_msg=f"after {mut}")
    finally:
        DOUBLE = False
