"""Optimizers on the GPU: a few steps of every elementwise optimizer and option combination on
device parameters equal the same steps on CPU parameters (parameters, and the state
the optimizer keeps), for a small and a large parameter, float32 and float64. On the
GPU the fused update is one CuPy kernel per parameter (``Update._call_cuda``); the
array-module path each optimizer keeps for when no kernel runs is checked too, with
the kernels switched off (it must compute with CuPy on CuPy arrays, not NumPy)."""
import numpy as np
import pytest
from gpu_env import DEVICE, close, on_device, require

import tapegrad as tg
from tapegrad.fusion import update as fupdate

require()

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=1e-2, betas=(0.3, 0.99), maximize=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.05)),
    ("AdamW", dict(lr=1e-2, amsgrad=True)),
    ("RMSprop", dict(lr=1e-2)),
    ("RMSprop", dict(lr=1e-2, momentum=0.5, centered=True, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01)),
    ("Adadelta", dict(lr=1.0, weight_decay=0.01)),
    ("Adamax", dict(lr=1e-2, weight_decay=0.01)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.01)),
    ("NAdam", dict(lr=1e-2, decoupled_weight_decay=True, weight_decay=0.01)),
    ("RAdam", dict(lr=1e-2)),
    ("ASGD", dict(lr=1e-2, t0=2)),
    ("Rprop", dict(lr=1e-2)),
]
SHAPES = [(7, 3), (50, 61)]  # below and above the CPU kernels' min_numel
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}


def _ids(c):
    return c[0] + "-" + "-".join(f"{k}={v}" for k, v in c[1].items())


def _train(name, kw, device, dtype, steps=4):
    r = np.random.default_rng(0)
    params = [tg.nn.Parameter(tg.tensor(r.standard_normal(s).astype(dtype), device=device))
              for s in SHAPES]
    opt = getattr(tg.optim, name)(params, **kw)
    for _ in range(steps):
        for p in params:
            p.grad = tg.tensor(r.standard_normal(tuple(p.shape)).astype(dtype), device=device)
        opt.step()
    return params, opt


def _compare(name, kw, dtype):
    pc, oc = _train(name, kw, "cpu", dtype)
    pd, od = _train(name, kw, DEVICE, dtype)
    for k, (a, b) in enumerate(zip(pd, pc)):
        assert on_device(a), f"{name}: parameter {k} left {DEVICE}"
        close(a, b, f"{name} {kw} parameter {k} on {DEVICE}", **TOL[dtype])
    for k, (a, b) in enumerate(zip(pd, pc)):
        sa, sb = od.state.get(a, {}), oc.state.get(b, {})
        assert set(sa) == set(sb), f"{name}: state keys {set(sa)} vs {set(sb)}"
        for key in sb:
            if isinstance(sb[key], tg.Tensor):
                assert on_device(sa[key]), f"{name}: state {key} is not on {DEVICE}"
                close(sa[key], sb[key], f"{name} state {key} of parameter {k}", **TOL[dtype])
            else:
                assert sa[key] == sb[key], f"{name}: state {key}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,kw", [pytest.param(*c, id=_ids(c)) for c in CONFIGS])
def test_optimizer_steps_on_device_equal_cpu(name, kw, dtype):
    _compare(name, kw, dtype)


@pytest.mark.parametrize("name,kw", [pytest.param(*c, id=_ids(c)) for c in CONFIGS])
def test_array_module_path_on_device(name, kw, monkeypatch):
    """With the fused kernels off on the device, each optimizer's own path computes
    with the device's array module and still equals the CPU's fused result."""
    if DEVICE == "cuda":
        monkeypatch.setattr(fupdate.Update, "_call_cuda", lambda self, args: False)
    else:
        monkeypatch.setattr(fupdate.config, "use_numba", False)
    _compare(name, kw, np.float64)


def test_training_loop_on_device_reduces_the_loss():
    tg.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(8, 16), tg.nn.Tanh(), tg.nn.Linear(16, 1)).to(DEVICE)
    opt = tg.optim.AdamW(model.parameters(), lr=3e-2)
    r = np.random.default_rng(0)
    x = tg.tensor(r.standard_normal((64, 8)).astype(np.float32), device=DEVICE)
    y = tg.tensor(r.standard_normal((64, 1)).astype(np.float32), device=DEVICE)
    losses = []
    for _ in range(60):
        loss = tg.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(on_device(p) for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0]
