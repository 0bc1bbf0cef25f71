"""API.md "Compile and export", tg.compile part: the signature and stats() keys, guards
on Python values (globals, closure cells, module attributes, `training`), comparisons
of tensor-read numbers guarded on their outcome, `stats()["guards"]`/["recaptures"],
TAPEGRAD_LOGS=recompiles, and `model = tg.compile(model)` with the backward outside."""
import copy
import inspect

import numpy as np
import pytest

import tapegrad as tg

FLAG = False


def _flagged(x):
    return x * 10 if FLAG else x * 1


def test_signature_and_stats_keys():
    params = inspect.signature(tg.compile).parameters
    assert params["fuse"].default is True
    assert params["fuse"].kind is inspect.Parameter.KEYWORD_ONLY
    cf = tg.compile(lambda x: (x * 2).exp().sum())
    x = tg.ones(4)
    cf(x)
    cf(x)
    s = cf.stats()
    assert isinstance(s, dict)
    for key in ("captures", "replays", "kernels", "fused_groups", "peak_bytes", "guards",
                "recaptures"):
        assert key in s, key
    assert s["captures"] == 1 and s["replays"] == 1
    assert isinstance(s["guards"], list) and all(isinstance(g, str) for g in s["guards"])
    assert s["recaptures"] == []


def test_global_flag_is_guarded(monkeypatch, capsys):
    global FLAG
    monkeypatch.setenv("TAPEGRAD_LOGS", "recompiles")
    FLAG = False
    try:
        cf = tg.compile(_flagged)
        x = tg.ones(2)
        cf(x)
        cf(x)
        FLAG = True
        assert cf(x).tolist() == _flagged(x).tolist() == [10.0, 10.0]
        s = cf.stats()
        assert s["captures"] == 2
        assert len(s["recaptures"]) == 1 and "FLAG" in s["recaptures"][0]
        assert any("FLAG" in g for g in s["guards"])
        assert "recaptur" in capsys.readouterr().err
    finally:
        FLAG = False


def test_closure_cell_is_guarded():
    scale = 1.0

    def f(x):
        return x * scale

    cf = tg.compile(f)
    x = tg.ones(3)
    cf(x)
    cf(x)
    scale = 3.0  # noqa: F841  (read by f through its closure cell)
    assert cf(x).tolist() == [3.0, 3.0, 3.0]


def test_module_attribute_and_training_are_guarded():
    class M(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = tg.nn.Linear(4, 2)
            self.p = 2

        def forward(self, x):
            return self.lin(x) * self.p

    m = M()
    cm = tg.compile(m)
    x = tg.randn(5, 4)
    with tg.no_grad():
        cm(x)
        cm(x)
        m.p = 5
        np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert any("training" in g for g in cm.stats()["guards"])


def test_batchnorm_eval_after_capture_in_train():
    tg.manual_seed(0)
    bn = tg.nn.BatchNorm1d(3)
    x = tg.randn(8, 3) * 5 + 2
    f = tg.compile(lambda x: bn(x))
    with tg.no_grad():
        f(x)
        f(x)
        bn.eval()
        mean = bn.running_mean.numpy().copy()
        out = f(x).numpy()
        np.testing.assert_allclose(out, bn(x).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(bn.running_mean.numpy(), mean)  # eval: no update
    assert any("training" in r for r in f.stats()["recaptures"])


@pytest.mark.filterwarnings("ignore:tg.compile")
def test_dropout_train_after_capture_in_eval():
    drop = tg.nn.Dropout(0.5)
    drop.eval()
    f = tg.compile(lambda x: drop(x))
    x = tg.ones(1000)
    f(x)
    f(x)
    drop.train()
    y = f(x).numpy()
    assert (y == 0).any() and set(np.unique(y)) <= {0.0, 2.0}


def test_item_comparison_guards_outcome_not_value():
    def g(x):
        if x.sum().item() > 1.0:
            return x * 2
        return x * 3

    cg = tg.compile(g)
    for v in (1.0, 2.0, 3.0, 4.0):
        x = tg.full((2,), v)
        assert cg(x).tolist() == g(x).tolist()
    assert cg.stats()["captures"] == 1 and cg.stats()["replays"] == 3
    x = tg.full((2,), 0.1)  # the outcome flips: recapture, right value
    assert cg(x).tolist() == g(x).tolist()
    assert cg.stats()["captures"] == 2


def _mlp():
    tg.manual_seed(0)
    return tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.Tanh(), tg.nn.Linear(8, 1))


def test_compiled_module_backward_outside_matches_eager():
    model = _mlp()
    ref = copy.deepcopy(model)
    cmodel = tg.compile(model)
    assert isinstance(cmodel, tg.nn.Module)
    assert [n for n, _ in cmodel.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert list(cmodel.state_dict()) == list(model.state_dict())
    opt = tg.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = tg.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(4):
        x, y = tg.randn(6, 4), tg.randn(6, 1)
        loss = tg.nn.functional.mse_loss(cmodel(x), y)
        opt.zero_grad()
        loss.backward()
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        opt.step()
        loss_ref = tg.nn.functional.mse_loss(ref(x), y)
        opt_ref.zero_grad()
        loss_ref.backward()
        for g, p in zip(grads, ref.parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)
        opt_ref.step()
        assert float(loss) == pytest.approx(float(loss_ref), rel=1e-5)
    assert cmodel.stats()["replays"] >= 3


@pytest.mark.filterwarnings("ignore:tg.compile")
def test_compiled_module_create_graph_backward():
    model = _mlp()
    cmodel = tg.compile(model)
    x0 = tg.randn(6, 4)
    for _ in range(2):
        cmodel(x0)
    x = tg.tensor(x0.numpy(), requires_grad=True)
    out = cmodel(x).pow(2).sum()
    g1, = tg.autograd.grad(out, x, create_graph=True)
    g2, = tg.autograd.grad(g1.sum(), x)
    xr = tg.tensor(x0.numpy(), requires_grad=True)
    o = model(xr).pow(2).sum()
    h1, = tg.autograd.grad(o, xr, create_graph=True)
    h2, = tg.autograd.grad(h1.sum(), xr)
    np.testing.assert_allclose(g1.detach().numpy(), h1.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g2.numpy(), h2.numpy(), rtol=1e-5, atol=1e-6)



_MAIN_SRC = '''
MODE = "a"
SCALE = (1, 2)
def f(x):
    r = x * SCALE[0]
    if MODE == "b":
        r = r + 1
    return r
cf = tg.compile(f)
x = tg.ones(2)
cf(x)
cf(x)
MODE = "b"
after_mode = (cf(x).tolist(), f(x).tolist())
SCALE = (3, 2)
after_scale = (cf(x).tolist(), f(x).tolist())
'''


@pytest.mark.parametrize("filename", ["<stdin>", "<string>", "<ipython-input-1-0>"])
def test_globals_of_code_run_in_main_are_guarded(filename):
    # python -c, python - < script, a notebook cell: code with no file, in __main__
    ns = {"__name__": "__main__", "tg": tg}
    exec(compile(_MAIN_SRC, filename, "exec"), ns)
    assert ns["after_mode"] == ([2.0, 2.0], [2.0, 2.0])
    assert ns["after_scale"] == ([4.0, 4.0], [4.0, 4.0])
    assert any("MODE" in r for r in ns["cf"].stats()["recaptures"])


@pytest.mark.parametrize("make", [lambda x: tg.where(x > 0, x, tg.zeros_like(x)),
                                  lambda x: tg.ones_like(x) * x + tg.full_like(x, 2.0)])
def test_like_factories_are_constants_of_a_replay(make):
    cf = tg.compile(make)
    for v in (1.0, -1.0, 3.0):
        x = tg.tensor([v, -v])
        assert cf(x).tolist() == make(x).tolist()
    assert cf.stats()["replays"] == 2 and cf.stats()["eager_calls"] == 0, cf.stats()
