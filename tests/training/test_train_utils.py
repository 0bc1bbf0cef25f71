"""Training utilities against PyTorch step for step: gradient clipping, RMSprop and
Adagrad (fused and NumPy paths), ExponentialLR, OneCycleLR, ReduceLROnPlateau."""
import math

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

SHAPES = [(5, 3), (7,), (2, 3, 4)]



# ---------------------------------------------------------------- clipping
def _grads_pair(seed, scale=1.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    gs = [(rng.standard_normal(s) * scale).astype(dtype) for s in SHAPES]
    a = [tg.nn.Parameter(tg.zeros(s, dtype=tg.float64 if dtype == np.float64 else tg.float32))
         for s in SHAPES]
    b = [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64 if dtype == np.float64
                                        else torch.float32)) for s in SHAPES]
    for p, q, g in zip(a, b, gs):
        p.grad = tg.tensor(g.copy())
        q.grad = torch.tensor(g.copy())
    return a, b


@pytest.mark.parametrize("norm_type", [2.0, float("inf"), 1.0, 3])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    a, b = _grads_pair(0)
    t1 = tg.nn.utils.clip_grad_norm_(a, max_norm, norm_type=norm_type)
    t2 = torch.nn.utils.clip_grad_norm_(b, max_norm, norm_type=norm_type)
    assert isinstance(t1, tg.Tensor) and t1.shape == ()
    np.testing.assert_allclose(float(t1), float(t2), rtol=1e-6)
    for p, q in zip(a, b):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)
    if max_norm < float(t1):   # clipped: the new total norm is max_norm
        again = tg.nn.utils.clip_grad_norm_(a, 1e9, norm_type=norm_type)
        assert float(again) == pytest.approx(max_norm, rel=1e-4)


def test_clip_grad_norm_single_tensor_and_no_grads():
    p = tg.nn.Parameter(tg.zeros(2))
    p.grad = tg.tensor([3.0, 4.0])
    assert float(tg.nn.utils.clip_grad_norm_(p, 1.0)) == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)
    q = tg.nn.Parameter(tg.zeros(2))
    assert float(tg.nn.utils.clip_grad_norm_([q], 1.0)) == 0.0


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_clip_grad_norm_nonfinite():
    a, _ = _grads_pair(1)
    a[0].grad = tg.tensor(np.full(SHAPES[0], np.inf, np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        tg.nn.utils.clip_grad_norm_(a, 1.0, error_if_nonfinite=True)
    total = tg.nn.utils.clip_grad_norm_(a, 1.0)      # scales by the non-finite norm
    assert math.isinf(float(total))


def test_clip_grad_value_matches_torch():
    a, b = _grads_pair(2, scale=3.0)
    tg.nn.utils.clip_grad_value_(a, 1.5)
    torch.nn.utils.clip_grad_value_(b, 1.5)
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
        assert p.grad.numpy().max() <= 1.5


@pytest.mark.parametrize("max_norm", [1e-3, 1e9])
def test_clipping_records_nothing_and_bumps_versions(max_norm):
    lin = tg.nn.Linear(3, 2)
    lin(tg.ones(4, 3)).sum().backward()
    g = lin.weight.grad
    v = g._version
    tg.nn.utils.clip_grad_norm_(lin.parameters(), max_norm)
    assert lin.weight.grad is g and g._version > v and g.grad_fn is None


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("nan", [False, True])
def test_clip_grad_norm_array_path_equals_op_path(dtype, max_norm, nan, monkeypatch):
    """The 2-norm clipping on the gradients' NumPy arrays (plain float32/float64
    gradients) gives the op path's total and gradients bit for bit."""
    from tapegrad.nn import utils as U
    got = []
    for arrays in (True, False):
        if not arrays:
            monkeypatch.setattr(U, "_plain_arrays", lambda tensors: None)
        a, _ = _grads_pair(3, scale=2.0, dtype=dtype)
        if nan:
            a[1].grad._data[2] = np.nan
        assert (U._plain_arrays([p.grad for p in a]) is not None) == arrays
        total = tg.nn.utils.clip_grad_norm_(a, max_norm)
        assert total.dtype == a[0].grad.dtype and total.shape == ()
        got.append((total.numpy(), [p.grad.numpy() for p in a]))
    (t1, g1), (t2, g2) = got
    np.testing.assert_array_equal(t1, t2)
    for x, y in zip(g1, g2):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- optimizers
CONFIGS = [
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, alpha=0.3, centered=True, maximize=True)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-6, maximize=True)),
]


def _ids(cfg):
    name, kw = cfg
    return name + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("cfg", CONFIGS, ids=_ids)
def test_optimizer_matches_torch_after_10_steps(cfg, update_path):
    name, kw = cfg
    rng = np.random.default_rng(0)
    inits = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(10)]
    a = [tg.nn.Parameter(tg.tensor(x.copy())) for x in inits]
    b = [torch.nn.Parameter(torch.tensor(x.copy())) for x in inits]
    o1 = getattr(tg.optim, name)(a, **kw)
    o2 = getattr(torch.optim, name)(b, foreach=False, **kw)
    for step in grads:
        for p, q, g in zip(a, b, step):
            p.grad = tg.tensor(g.copy())
            q.grad = torch.tensor(g.copy())
        o1.step()
        o2.step()
    for p, q in zip(a, b):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-6, atol=2e-6)
    st = o1.state_dict()["state"][0]
    assert st["step"] == 10


def test_optimizer_arguments_checked():
    p = tg.nn.Parameter(tg.zeros(2))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        tg.optim.RMSprop([p], lr=-1)
    with pytest.raises(ValueError, match="Invalid alpha"):
        tg.optim.RMSprop([p], alpha=-0.1)
    with pytest.raises(ValueError, match="Invalid lr_decay"):
        tg.optim.Adagrad([p], lr_decay=-1)


# ---------------------------------------------------------------- schedulers
def _first(m):
    return m[0] if isinstance(m, tuple) else m


def _lr_sequences(make_tg, make_torch, opt="SGD", n=30, opt_kw=None):
    opt_kw = opt_kw or dict(lr=0.5)
    p = tg.nn.Parameter(tg.zeros(1))
    q = torch.nn.Parameter(torch.zeros(1))
    o1, o2 = getattr(tg.optim, opt)([p], **opt_kw), getattr(torch.optim, opt)([q], **opt_kw)
    s1, s2 = make_tg(o1), make_torch(o2)
    key = "betas" if opt == "Adam" else "momentum"
    a, b = [s1.get_last_lr()[0]], [s2.get_last_lr()[0]]
    ma, mb = [_first(o1.param_groups[0][key])], [_first(o2.param_groups[0][key])]
    for _ in range(n):
        o1.step()
        o2.step()
        s1.step()
        s2.step()
        a.append(s1.get_last_lr()[0])
        b.append(s2.get_last_lr()[0])
        ma.append(_first(o1.param_groups[0][key]))
        mb.append(_first(o2.param_groups[0][key]))
        assert o1.param_groups[0]["lr"] == a[-1]
    return a, b, ma, mb


@pytest.mark.parametrize("gamma", [0.9, 0.5])
def test_exponential_matches_torch(gamma):
    a, b, _, _ = _lr_sequences(lambda o: tg.optim.lr_scheduler.ExponentialLR(o, gamma),
                               lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma))
    assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("opt,kw", [
    ("SGD", dict(max_lr=1.0, total_steps=30)),
    ("SGD", dict(max_lr=0.3, epochs=3, steps_per_epoch=10, pct_start=0.25,
                 anneal_strategy="linear")),
    ("SGD", dict(max_lr=0.3, total_steps=30, three_phase=True, div_factor=10.0)),
    ("Adam", dict(max_lr=0.01, total_steps=30, final_div_factor=100.0)),
    ("SGD", dict(max_lr=0.1, total_steps=30, cycle_momentum=False)),
])
def test_onecycle_matches_torch(opt, kw):
    opt_kw = dict(lr=0.5, momentum=0.9) if opt == "SGD" else dict(lr=0.5)
    a, b, ma, mb = _lr_sequences(lambda o: tg.optim.lr_scheduler.OneCycleLR(o, **kw),
                                 lambda o: torch.optim.lr_scheduler.OneCycleLR(o, **kw),
                                 opt=opt, n=29, opt_kw=opt_kw)
    assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    assert ma == pytest.approx(mb, rel=1e-12)


def test_onecycle_past_the_end_and_bad_arguments():
    opt = tg.optim.SGD([tg.nn.Parameter(tg.zeros(1))], lr=0.1, momentum=0.9)
    s = tg.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        s.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        s.step()
    with pytest.raises(ValueError, match="total_steps OR"):
        tg.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="momentum or beta1"):
        tg.optim.lr_scheduler.OneCycleLR(tg.optim.Adagrad([tg.nn.Parameter(tg.zeros(1))]),
                                         max_lr=1.0, total_steps=3)


@pytest.mark.parametrize("kw", [dict(), dict(mode="max", factor=0.5, patience=2, cooldown=1),
                                dict(patience=0, threshold=0.1, threshold_mode="abs",
                                     min_lr=0.02)])
def test_plateau_matches_torch(kw):
    p = tg.nn.Parameter(tg.zeros(1))
    q = torch.nn.Parameter(torch.zeros(1))
    o1, o2 = tg.optim.SGD([p], lr=0.5), torch.optim.SGD([q], lr=0.5)
    s1 = tg.optim.lr_scheduler.ReduceLROnPlateau(o1, **kw)
    s2 = torch.optim.lr_scheduler.ReduceLROnPlateau(o2, **kw)
    rng = np.random.default_rng(0)
    metrics = np.concatenate([np.linspace(1, 0.5, 5), 0.5 + 0.05 * rng.standard_normal(40)])
    a, b = [], []
    for m in metrics:
        s1.step(tg.tensor(m))
        s2.step(torch.tensor(m))
        a.append(o1.param_groups[0]["lr"])
        b.append(o2.param_groups[0]["lr"])
        assert s1.get_last_lr() == s2.get_last_lr()
    assert a == b
    assert len(set(a)) > 1      # the schedule did reduce
    sd = s1.state_dict()
    s3 = tg.optim.lr_scheduler.ReduceLROnPlateau(o1)
    s3.load_state_dict(sd)
    assert s3.num_bad_epochs == s1.num_bad_epochs and s3.best == s1.best
