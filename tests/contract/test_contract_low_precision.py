"""API.md "Low precision": tg.bfloat16/float16 creation, casts, promotion, printing,
DLPack with PyTorch and JAX, save/load, gradients; tg.autocast against torch.autocast
(signature, per-op output dtypes on CPU, nesting, decorator, gradient dtypes); and
tg.amp.GradScaler's state transitions against torch.amp.GradScaler."""
import inspect

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

PAIRS = [(tg.bfloat16, torch.bfloat16), (tg.float16, torch.float16)]


def _tdt(dt):
    return getattr(torch, str(dt).split(".")[-1])


def test_dtype_names_and_casts():
    assert tg.half is tg.float16
    assert tg.bfloat16.is_floating_point and tg.bfloat16.itemsize == 2
    x = tg.randn(3, 4)
    assert x.bfloat16().dtype == tg.bfloat16
    assert x.half().dtype == tg.float16
    assert x.to(tg.bfloat16).dtype == tg.bfloat16
    assert tg.tensor([1.0, 2.5], dtype=tg.bfloat16).dtype == tg.bfloat16
    for dt in (tg.bfloat16, tg.float16):
        assert all(p.dtype == dt for p in tg.nn.Linear(2, 3).to(dt).parameters())
        assert all(p.dtype == dt for p in tg.nn.Linear(2, 3).to(dtype=dt).parameters())
    assert all(p.dtype == tg.bfloat16 for p in tg.nn.Linear(2, 3).bfloat16().parameters())
    assert all(p.dtype == tg.float16 for p in tg.nn.Linear(2, 3).half().parameters())


def test_values_round_as_torch():
    v = np.random.RandomState(0).randn(64).astype(np.float32) * 100
    for dt, tdt in PAIRS:
        got = tg.tensor(v).to(dt).float().numpy()
        want = torch.tensor(v).to(tdt).float().numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a, b", [("bfloat16", "float16"), ("bfloat16", "float32"),
                                  ("float16", "int64"), ("bfloat16", "int32"),
                                  ("float16", "float64"), ("bfloat16", "bool")])
def test_promotion_as_torch(a, b):
    ta = tg.ones(2, dtype=getattr(tg, a))
    tb = tg.ones(2, dtype=getattr(tg, b))
    pa = torch.ones(2, dtype=getattr(torch, a))
    pb = torch.ones(2, dtype=getattr(torch, b))
    assert str((ta + tb).dtype).split(".")[-1] == str((pa + pb).dtype).split(".")[-1]
    assert tg.promote_types(getattr(tg, a), getattr(tg, b)) == (ta + tb).dtype
    assert str((ta * 2.5).dtype).split(".")[-1] == str((pa * 2.5).dtype).split(".")[-1]


def test_printing_as_torch():
    for dt, tdt in PAIRS:
        for data in ([1.0, 2.5], [[0.1, -3.0], [1e4, 7.0]]):
            got = repr(tg.tensor(data, dtype=dt)).replace("tapegrad", "torch")
            assert got == repr(torch.tensor(data, dtype=tdt))


def test_dlpack_with_torch_and_jax():
    x = tg.randn(3, 4)
    for dt, tdt in PAIRS:
        y = x.to(dt)
        t = torch.from_dlpack(y)
        assert t.dtype == tdt
        np.testing.assert_array_equal(t.float().numpy(), y.float().numpy())
        back = tg.from_dlpack(torch.ones(2, 3, dtype=tdt) * 1.5)
        assert back.dtype == dt and back.float().tolist() == [[1.5] * 3] * 2
    jnp = pytest.importorskip("jax.numpy")
    for dt, name in ((tg.bfloat16, "bfloat16"), (tg.float16, "float16")):
        j = jnp.from_dlpack(x.to(dt))
        assert str(j.dtype) == name
        back = tg.from_dlpack(jnp.ones(3, dtype=getattr(jnp, name)))
        assert back.dtype == dt


def test_save_load_half_widths(tmp_path):
    x = tg.randn(5)
    path = tmp_path / "h.pt"
    tg.save({"a": x.bfloat16(), "b": x.half()}, str(path))
    r = tg.load(str(path))
    assert r["a"].dtype == tg.bfloat16 and r["b"].dtype == tg.float16
    np.testing.assert_array_equal(r["a"].float().numpy(), x.bfloat16().float().numpy())
    np.testing.assert_array_equal(r["b"].float().numpy(), x.half().float().numpy())


def test_gradients_in_half_widths_match_torch():
    v = np.random.RandomState(1).randn(6).astype(np.float32)
    for dt, tdt in PAIRS:
        a = tg.tensor(v).to(dt).requires_grad_(True)
        (a.sin() * a).sum().backward()
        t = torch.tensor(v).to(tdt).requires_grad_(True)
        (t.sin() * t).sum().backward()
        assert a.grad.dtype == dt
        np.testing.assert_allclose(a.grad.float().numpy(), t.grad.float().numpy(),
                                   rtol=1e-2, atol=1e-2)


def test_float16_gelu_and_cumsum_as_torch():
    got = tg.nn.functional.gelu(tg.tensor([-3.75], dtype=tg.float16)).item()
    want = torch.nn.functional.gelu(torch.tensor([-3.75], dtype=torch.float16)).item()
    assert got == pytest.approx(want, rel=1e-3)
    got = (tg.ones(1024, dtype=tg.float16) * 0.1).cumsum(0).float().numpy()
    want = (torch.ones(1024, dtype=torch.float16) * 0.1).cumsum(0).float().numpy()
    np.testing.assert_allclose(got, want, rtol=2e-3)


def test_autocast_signature_and_aliases():
    params = inspect.signature(tg.autocast).parameters
    assert list(params) == ["device_type", "dtype", "enabled", "cache_enabled"]
    assert params["dtype"].default is None and params["enabled"].default is True
    assert tg.amp.autocast is tg.autocast
    assert not tg.is_autocast_enabled("cpu")
    with tg.autocast("cpu"):
        assert tg.is_autocast_enabled("cpu")
    assert not tg.is_autocast_enabled("cpu")


def _autocast_dtypes(lib, lin, a, target, **kw):
    F = lib.nn.functional
    with lib.autocast("cpu", **kw):
        y = lin(a)
        out = {
            "linear": y, "matmul": a @ a.T, "softmax": lib.softmax(y, -1), "exp": y.exp(),
            "mse_loss": F.mse_loss(y, target), "add_mixed": y + a[:, :3].float(),
            "cat": lib.cat([y, a[:, :3]], 1), "relu": lib.relu(y),
        }
        with lib.autocast("cpu", enabled=False):
            out["inner_disabled"] = lin(a)
    return {k: str(v.dtype).split(".")[-1] for k, v in out.items()}


@pytest.mark.parametrize("dtype", [None, "float16"])
def test_autocast_output_dtypes_match_torch(dtype):
    w = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    b = np.zeros(3, np.float32)
    av = np.random.RandomState(1).randn(2, 4).astype(np.float32)
    tv = np.random.RandomState(2).randn(2, 3).astype(np.float32)
    lin = tg.nn.Linear(4, 3)
    lin.weight.data = tg.tensor(w)
    lin.bias.data = tg.tensor(b)
    tlin = torch.nn.Linear(4, 3)
    with torch.no_grad():
        tlin.weight.copy_(torch.tensor(w))
        tlin.bias.copy_(torch.tensor(b))
    kw_tg = {} if dtype is None else {"dtype": getattr(tg, dtype)}
    kw_t = {} if dtype is None else {"dtype": getattr(torch, dtype)}
    got = _autocast_dtypes(tg, lin, tg.tensor(av), tg.tensor(tv), **kw_tg)
    want = _autocast_dtypes(torch, tlin, torch.tensor(av), torch.tensor(tv), **kw_t)
    assert got == want


def test_autocast_decorator_nesting_and_gradient_dtypes():
    @tg.autocast("cpu")
    def f(a, b):
        return a @ b

    assert f(tg.randn(2, 2), tg.randn(2, 2)).dtype == tg.bfloat16
    lin = tg.nn.Linear(4, 3)
    with tg.autocast("cpu", dtype=tg.bfloat16):
        with tg.autocast("cpu", dtype=tg.bfloat16):
            y = lin(tg.randn(2, 4))
        z = lin(tg.randn(2, 4))
    assert y.dtype == z.dtype == tg.bfloat16
    (y.float().sum() + z.float().sum()).backward()
    assert lin.weight.grad.dtype == tg.float32 and lin.bias.grad.dtype == tg.float32


def test_grad_scaler_signature():
    params = inspect.signature(tg.amp.GradScaler).parameters
    want = {"device": "cpu", "init_scale": 2.0 ** 16, "growth_factor": 2.0,
            "backoff_factor": 0.5, "growth_interval": 2000, "enabled": True}
    assert {k: params[k].default for k in want} == want
    s = tg.amp.GradScaler()
    assert s.get_scale() == 2.0 ** 16 and s.is_enabled()


def _scaler_run(lib, pattern):
    p = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
    opt = lib.optim.SGD([p], lr=0.1)
    sc = lib.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    log = []
    for bad in pattern:
        opt.zero_grad()
        loss = (p * p).sum()
        if bad:
            loss = loss * float("inf")
        scaled = sc.scale(loss)
        log.append(float(scaled.detach()))
        scaled.backward()
        sc.unscale_(opt)
        log.append(p.grad.detach().numpy().tolist())
        sc.step(opt)
        sc.update()
        log.append(sc.get_scale())
        log.append(p.detach().numpy().tolist())
    return log, sc.state_dict()


def test_grad_scaler_transitions_match_torch():
    pattern = [0, 0, 1, 0, 0, 0, 1, 1, 0]
    got, got_sd = _scaler_run(tg, pattern)
    want, want_sd = _scaler_run(torch, pattern)
    assert repr(got) == repr(want)
    assert got_sd == want_sd
    s = tg.amp.GradScaler()
    s.load_state_dict(got_sd)
    assert s.state_dict() == got_sd


def test_grad_scaler_errors_and_disabled():
    p = tg.ones(2, requires_grad=True)
    opt = tg.optim.SGD([p], lr=0.1)
    sc = tg.amp.GradScaler()
    sc.scale(p.sum()).backward()
    sc.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_"):
        sc.unscale_(opt)
    off = tg.amp.GradScaler(enabled=False)
    loss = tg.ones(1) * 3
    assert off.scale(loss) is loss and not off.is_enabled()
    sc = tg.amp.GradScaler(init_scale=2.0)
    out = sc.scale([tg.ones(1), (tg.ones(1) * 2,)])
    assert out[0].tolist() == [2.0] and out[1][0].tolist() == [4.0]


@pytest.mark.skipif(tg.cuda.is_available(), reason="CUDA is available here")
def test_cuda_autocast_and_scaler_without_cuda_warn_and_disable():
    with pytest.warns(UserWarning, match="CUDA is not available"):
        region = tg.autocast("cuda")
    with region:
        assert not tg.is_autocast_enabled("cuda")
        a = tg.randn(3, 3)
        assert (a @ a).dtype == tg.float32
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = tg.amp.GradScaler("cuda")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        ref = torch.amp.GradScaler("cuda")
    res = []
    for lib, s in ((tg, scaler), (torch, ref)):
        w = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        loss = s.scale((w * 2).sum())
        loss.backward()
        s.step(opt)
        s.update()
        res.append((float(loss.detach()), w.tolist(), s.get_scale(), s.is_enabled(),
                    s.state_dict()))
    assert res[0] == res[1]


def test_grad_scaler_inside_a_compiled_step_replays_with_eager_values():
    """A whole float16 training step compiled with its GradScaler inside: the scaler
    works in ops (no value read but the skip decision), so the step replays (one
    program for clean steps, one for a step skipped on an overflow) and every loss,
    scale and parameter equals the eager twin's and torch's."""
    def make(lib):
        torch.manual_seed(0)
        tm = torch.nn.Linear(4, 2)
        m = lib.nn.Linear(4, 2)
        if lib is tg:
            m.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in
                               tm.state_dict().items()})
        else:
            m = tm
        opt = lib.optim.SGD(m.parameters(), lr=0.1)
        sc = lib.amp.GradScaler("cpu", init_scale=2.0 ** 4, growth_interval=2)

        def step(x, y):
            opt.zero_grad()
            with lib.autocast("cpu", dtype=lib.float16):
                loss = lib.nn.functional.mse_loss(m(x), y)
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
            return loss
        return m, sc, step
    runs = {"compiled": make(tg), "eager": make(tg), "torch": make(torch)}
    compiled = tg.compile(runs["compiled"][2])
    rng = np.random.default_rng(0)
    for i in range(7):
        x = rng.standard_normal((3, 4)).astype(np.float32) * (1e6 if i == 3 else 1)
        y = rng.standard_normal((3, 2)).astype(np.float32)
        res = {}
        for name, (m, sc, step) in runs.items():
            lib = torch if name == "torch" else tg
            f = compiled if name == "compiled" else step
            loss = float(f(lib.tensor(x), lib.tensor(y)).detach())
            res[name] = (loss, sc.get_scale(), m.weight.detach().numpy().copy())
        for name in ("eager", "torch"):
            np.testing.assert_allclose(res["compiled"][0], res[name][0], rtol=2e-3)
            assert res["compiled"][1] == res[name][1]
            np.testing.assert_allclose(res["compiled"][2], res[name][2], rtol=2e-3,
                                       atol=1e-4)
        np.testing.assert_allclose(res["compiled"][0], res["eager"][0], rtol=1e-6)
    s = compiled.stats()
    assert s["captures"] == 2 and s["replays"] == 5 and s["eager_calls"] == 0, s
