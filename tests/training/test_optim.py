"""Optimizers and schedulers against PyTorch: same initial weights and gradients,
parameters equal after 10 steps (float32, 1e-6)."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.fusion import update as fused_update

torch = pytest.importorskip("torch")


SHAPES = [(5, 3), (7,), (2, 3, 4)]

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, weight_decay=0.1, maximize=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, maximize=True, weight_decay=0.01)),
    ("AdamW", dict()),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
]


def _ids(cfg):
    name, kw = cfg
    return name + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


def _run_both(name, kw, steps=10, seed=0):
    rng = np.random.default_rng(seed)
    inits = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
    tg_params = [tg.nn.Parameter(tg.tensor(a.copy())) for a in inits]
    th_params = [torch.nn.Parameter(torch.tensor(a.copy())) for a in inits]
    tg_opt = getattr(tg.optim, name)(tg_params, **kw)
    th_opt = getattr(torch.optim, name)(th_params, foreach=False, **kw)
    for step in grads:
        for p, q, g in zip(tg_params, th_params, step):
            p.grad = tg.tensor(g.copy())
            q.grad = torch.tensor(g.copy())
        tg_opt.step()
        th_opt.step()
    return tg_params, th_params, tg_opt


@pytest.mark.parametrize("cfg", CONFIGS, ids=_ids)
def test_matches_torch_after_10_steps(cfg, update_path):
    tg_params, th_params, _ = _run_both(*cfg)
    for p, q in zip(tg_params, th_params):
        assert p.dtype == tg.float32
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_update_is_in_place_and_bumps_version(update_path):
    p = tg.nn.Parameter(tg.ones(3))
    buf, v0 = p._data, p._version
    opt = tg.optim.Adam([p], lr=0.1)
    p.grad = tg.ones(3)
    opt.step()
    assert p._data is buf and p._version == v0 + 1
    assert p.is_leaf and p.requires_grad


def test_param_groups_and_skip_none_grads():
    a, b = tg.nn.Parameter(tg.ones(2)), tg.nn.Parameter(tg.ones(2))
    opt = tg.optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad = tg.ones(2)
    opt.step()
    assert np.allclose(a.detach().numpy(), 0.9) and np.allclose(b.detach().numpy(), 1.0)
    b.grad = tg.ones(2)
    opt.step()
    assert np.allclose(b.detach().numpy(), 0.0)
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(ValueError, match="more than one parameter group"):
        tg.optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)
    # within one group, a warning and each occurrence stepped, as PyTorch
    w = tg.nn.Parameter(tg.ones(2))
    with pytest.warns(UserWarning, match="duplicate parameters"):
        dup = tg.optim.SGD([w, w], lr=0.1)
    w.grad = tg.ones(2)
    dup.step()
    np.testing.assert_allclose(w.detach().numpy(), [0.8, 0.8], rtol=1e-6)
    with pytest.raises(ValueError, match="empty parameter list"):
        tg.optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        tg.optim.Adam([a], lr=-1)


def test_state_dict_resume_matches_uninterrupted(tmp_path, update_path):
    full, _, _ = _run_both("Adam", dict(lr=0.01, amsgrad=True), steps=10, seed=3)
    # 5 steps, save, new optimizer from the checkpoint, 5 more steps
    rng = np.random.default_rng(3)
    inits = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(10)]
    params = [tg.nn.Parameter(tg.tensor(a)) for a in inits]
    opt = tg.optim.Adam(params, lr=0.01, amsgrad=True)
    for step in grads[:5]:
        for p, g in zip(params, step):
            p.grad = tg.tensor(g)
        opt.step()
    tg.save(opt.state_dict(), tmp_path / "opt.tg")
    opt2 = tg.optim.Adam(params, lr=0.5)
    opt2.load_state_dict(tg.load(tmp_path / "opt.tg"))
    assert opt2.param_groups[0]["lr"] == 0.01
    for step in grads[5:]:
        for p, g in zip(params, step):
            p.grad = tg.tensor(g)
        opt2.step()
    for p, q in zip(params, full):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


@pytest.mark.parametrize("name, kw, numel, rtol, atol", [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1), 20000, 1e-13, 1e-13),
    ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True), 20000, 1e-13, 1e-13),
    ("RMSprop", dict(centered=True, momentum=0.9, weight_decay=0.1), 5000, 1e-12, 1e-13),
    ("Adagrad", dict(lr_decay=0.1, weight_decay=0.1), 5000, 1e-12, 1e-13),
    ("Adadelta", dict(lr=0.7, weight_decay=0.1), 5000, 1e-13, 1e-15),
], ids=["SGD", "AdamW", "RMSprop", "Adagrad", "Adadelta"])
def test_fused_matches_numpy_path_in_float64(name, kw, numel, rtol, atol):
    """The two paths of each optimizer agree to rounding on a float64 parameter (the
    largest ones big enough to take the fused path at the default thresholds)."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    init = rng.standard_normal(numel)
    grads = [rng.standard_normal(numel) for _ in range(3)]
    out = []
    for use in (True, False):
        fused_update.config.use_numba = use
        try:
            p = tg.nn.Parameter(tg.tensor(init.copy()))
            opt = getattr(tg.optim, name)([p], **kw)
            for g in grads:
                p.grad = tg.tensor(g)
                opt.step()
        finally:
            fused_update.config.use_numba = True
        out.append(p.detach().numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=rtol, atol=atol)


def test_update_kernel_reads_new_values_and_temporaries(monkeypatch):
    """Statements run in order (a later one sees what an earlier one assigned),
    temporaries are not written, scalars are runtime arguments (no recompile)."""
    pytest.importorskip("numba")
    upd = fused_update.Update("t", [("d", "g * 2"), ("m", "m + d"), ("p", "p - lr * m")],
                              ("p", "g", "m"), ("lr",))
    rng = np.random.default_rng(0)
    p, g, m = (rng.standard_normal(50) for _ in range(3))
    ref_p, ref_m = p.copy(), m.copy()
    assert upd(p, g, m, 0.5)
    assert upd(p, g, m, 0.25)                     # a new lr: the same compiled kernel
    assert len(upd._kernels) == 1
    monkeypatch.setattr(fused_update.config, "parallel_min_numel", 0)
    assert upd(p, g, m, 0.125)                    # the prange variant
    assert len(upd._kernels) == 2
    for lr in (0.5, 0.25, 0.125):
        ref_m += 2 * g
        ref_p -= lr * ref_m
    np.testing.assert_allclose(p, ref_p, rtol=1e-14)
    np.testing.assert_allclose(m, ref_m, rtol=1e-14)
    assert not upd(p.astype(np.float32), g, m, 0.5)   # mixed dtypes: caller's path
    with pytest.raises(ValueError, match="neither an array nor a scalar"):
        fused_update.Update("bad", [("p", "p - lr * q")], ("p",), ("lr",))


def _lr_sequences(make_tg, make_torch, n=25):
    p = tg.nn.Parameter(tg.zeros(1))
    q = torch.nn.Parameter(torch.zeros(1))
    o1, o2 = tg.optim.SGD([p], lr=0.5), torch.optim.SGD([q], lr=0.5)
    s1, s2 = make_tg(o1), make_torch(o2)
    a, b = [s1.get_last_lr()[0]], [s2.get_last_lr()[0]]
    for _ in range(n):
        o1.step()
        o2.step()
        s1.step()
        s2.step()
        a.append(s1.get_last_lr()[0])
        b.append(s2.get_last_lr()[0])
    return a, b


@pytest.mark.parametrize("kw", [dict(step_size=3), dict(step_size=5, gamma=0.5)])
def test_steplr_matches_torch(kw):
    a, b = _lr_sequences(lambda o: tg.optim.lr_scheduler.StepLR(o, **kw),
                         lambda o: torch.optim.lr_scheduler.StepLR(o, **kw))
    assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("kw", [dict(T_max=10), dict(T_max=7, eta_min=0.01)])
def test_cosine_matches_torch(kw):
    a, b = _lr_sequences(lambda o: tg.optim.lr_scheduler.CosineAnnealingLR(o, **kw),
                         lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, **kw))
    assert a == pytest.approx(b, rel=1e-12, abs=1e-15)


def test_scheduler_state_dict_round_trip():
    p = tg.nn.Parameter(tg.zeros(1))
    opt = tg.optim.SGD([p], lr=1.0)
    s = tg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    for _ in range(3):
        opt.step()
        s.step()
    sd = s.state_dict()
    s2 = tg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=99)
    s2.load_state_dict(sd)
    assert s2.T_max == 10 and s2.last_epoch == 3


@pytest.mark.parametrize("owner", ["module", "optimizer"])
def test_zero_grad_in_place_counts_a_version_and_none_clears(owner):
    lin = tg.nn.Linear(3, 2)
    opt = tg.optim.SGD(lin.parameters(), lr=0.1)
    zero = lin.zero_grad if owner == "module" else opt.zero_grad
    lin(tg.ones(4, 3)).sum().backward()
    g = lin.weight.grad
    v = g._version
    zero(set_to_none=False)
    assert lin.weight.grad is g and g._version == v + 1
    np.testing.assert_array_equal(g.numpy(), np.zeros((2, 3), np.float32))
    zero()
    assert lin.weight.grad is None and lin.bias.grad is None
