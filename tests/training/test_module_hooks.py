"""Module hooks against PyTorch: forward pre-hooks and forward hooks (kwargs,
prepend, removal), full backward hooks and backward pre-hooks with PyTorch's
grad_input / grad_output (values, None positions, replacement, call order)."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _pair_linear(i=3, o=2, seed=0):
    rng = np.random.default_rng(seed)
    w, b = rng.standard_normal((o, i)), rng.standard_normal(o)
    a = tg.nn.Linear(i, o).double()
    t = torch.nn.Linear(i, o).double()
    a.load_state_dict({"weight": tg.tensor(w), "bias": tg.tensor(b)})
    t.load_state_dict({"weight": torch.tensor(w), "bias": torch.tensor(b)})
    return a, t


def _np(x):
    if x is None:
        return None
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _same(ours, theirs):
    assert len(ours) == len(theirs)
    for u, v in zip(ours, theirs):
        assert (u is None) == (v is None)
        if u is not None:
            assert isinstance(u, tg.Tensor)
            np.testing.assert_allclose(_np(u), _np(v), rtol=1e-12, atol=1e-12)


def test_full_backward_hook_linear_matches_torch():
    a, t = _pair_linear()
    x = np.random.default_rng(1).standard_normal((4, 3))
    seen = {"tg": [], "torch": []}
    a.register_full_backward_hook(lambda m, gi, go: seen["tg"].append((m, gi, go)))
    t.register_full_backward_hook(lambda m, gi, go: seen["torch"].append((m, gi, go)))
    xa, xt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (a(xa) ** 2).sum().backward()
    (t(xt) ** 2).sum().backward()
    assert len(seen["tg"]) == len(seen["torch"]) == 1
    m, gi, go = seen["tg"][0]
    assert m is a
    _same(gi, seen["torch"][0][1])
    _same(go, seen["torch"][0][2])
    np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


class _Two(tg.nn.Module):
    """Two tensor inputs and a flag; two outputs (a tuple)."""
    def __init__(self, lib):
        super().__init__()
        self.lib = lib

    def forward(self, x, y, flag, z):
        u = x * y + z
        return u.sin(), (x * 3 if flag else x)


class _TwoT(torch.nn.Module):
    def forward(self, x, y, flag, z):
        u = x * y + z
        return u.sin(), (x * 3 if flag else x)


@pytest.mark.parametrize("use_second", [True, False])
def test_none_positions_and_replaced_grad_input(use_second):
    rng = np.random.default_rng(2)
    x, y, z = (rng.standard_normal((2, 3)) for _ in range(3))
    out = {}
    for lib, mod, mk in (("tg", _Two(None), lambda a, r: tg.tensor(a, requires_grad=r)),
                         ("torch", _TwoT(), lambda a, r: torch.tensor(a, requires_grad=r))):
        calls = []

        def hook(m, gi, go, calls=calls):
            calls.append((gi, go))
            return tuple(None if g is None else g * 2 for g in gi)
        mod.register_full_backward_hook(hook)
        xs = mk(x, True), mk(y, False), mk(z, True)
        o1, o2 = mod(xs[0], xs[1], True, xs[2])
        loss = (o1 * o1).sum() + ((o2 * o2).sum() if use_second else 0)
        loss.backward()
        out[lib] = calls, xs
    (c1, xs1), (c2, xs2) = out["tg"], out["torch"]
    assert len(c1) == len(c2) == 1
    _same(c1[0][0], c2[0][0])   # grad_input: (gx, None, None, gz)
    _same(c1[0][1], c2[0][1])   # grad_output: (g1, g2 or None)
    for a, b in ((xs1[0], xs2[0]), (xs1[2], xs2[2])):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_no_input_requires_grad_and_pre_hook_replaces_grad_output():
    a, t = _pair_linear(seed=3)
    x = np.random.default_rng(4).standard_normal((5, 3))
    res = {}
    for lib, mod, X in (("tg", a, tg.tensor(x)), ("torch", t, torch.tensor(x))):
        calls = []
        mod.register_full_backward_pre_hook(lambda m, go: (go[0] * 3,))
        mod.register_full_backward_hook(lambda m, gi, go, c=calls: c.append((gi, go)))
        mod(X).sum().backward()
        res[lib] = calls, mod.weight.grad
    (c1, w1), (c2, w2) = res["tg"], res["torch"]
    assert len(c1) == len(c2) == 1
    _same(c1[0][0], c2[0][0])    # (None,)
    _same(c1[0][1], c2[0][1])    # the replaced grad_output (3s)
    np.testing.assert_allclose(w1.numpy(), w2.numpy(), rtol=1e-12)


def test_no_input_requires_grad_hook_must_return_none():
    a, _ = _pair_linear()
    a.register_full_backward_hook(lambda m, gi, go: (tg.ones(1),))
    with pytest.raises(RuntimeError, match="no input requires"):
        a(tg.ones(2, 3, dtype=tg.float64)).sum().backward()


def test_backward_hook_call_order_in_sequential_matches_torch():
    order = {"tg": [], "torch": []}
    for lib, nn in (("tg", tg.nn), ("torch", torch.nn)):
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        for name, m in model.named_modules():
            m.register_full_backward_pre_hook(
                lambda mod, go, n=name, lib=lib: order[lib].append(("pre", n)))
            m.register_full_backward_hook(
                lambda mod, gi, go, n=name, lib=lib: order[lib].append(("hook", n)))
        x = (tg if lib == "tg" else torch).ones(2, 3, requires_grad=True)
        model(x).sum().backward()
    assert order["tg"] == order["torch"]


def test_backward_hook_under_create_graph_and_no_grad():
    a, t = _pair_linear(seed=5)
    got, got_t = [], []
    a.register_full_backward_hook(lambda m, gi, go: got.append(gi[0]))
    t.register_full_backward_hook(lambda m, gi, go: got_t.append(gi[0]))
    x = tg.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    y = (a(x) ** 3).sum()
    (gx,) = tg.grad(y, x, create_graph=True)
    assert got[0].requires_grad
    (ggx,) = tg.grad(gx.sum(), x)
    xt = torch.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    (gt,) = torch.autograd.grad((t(xt) ** 3).sum(), xt, create_graph=True)
    (ggt,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(ggx.numpy(), ggt.numpy(), rtol=1e-10)
    assert len(got) == len(got_t)      # the second backward passes the hooks again
    for u, v in zip(got, got_t):
        np.testing.assert_allclose(u.detach().numpy(), v.detach().numpy(), rtol=1e-10)
    n = len(got)
    with tg.no_grad():
        out = a(x)
    assert out.grad_fn is None and len(got) == n


def test_removed_hook_does_not_run():
    a, _ = _pair_linear()
    got = []
    h = a.register_full_backward_hook(lambda m, gi, go: got.append(1))
    h.remove()
    with a.register_forward_hook(lambda m, i, o: got.append(2)):
        a(tg.ones(1, 3, dtype=tg.float64, requires_grad=True)).sum().backward()
    a(tg.ones(1, 3, dtype=tg.float64)).sum()
    assert got == [2]


# ---------------------------------------------------------------- forward hooks
def test_forward_hooks_match_torch():
    log = {"tg": [], "torch": []}
    for lib, nn, T in (("tg", tg.nn, tg.tensor), ("torch", torch.nn, torch.tensor)):
        m = nn.Linear(2, 2)
        L = log[lib]
        m.register_forward_pre_hook(lambda mod, args: L.append("pre1"))
        m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,), prepend=True)
        m.register_forward_pre_hook(lambda mod, args, kw: L.append(("kw", sorted(kw))) or
                                    None, with_kwargs=True)
        h = m.register_forward_hook(lambda mod, args, out: L.append("post-removed"))
        h.remove()
        m.register_forward_hook(lambda mod, args, out: out + 1)
        m.register_forward_hook(lambda mod, args, kw, out: L.append(float(out.detach().sum())),
                                with_kwargs=True)
        m.register_forward_hook(lambda mod, args, out: L.append("first"), prepend=True)
        with torch.no_grad() if lib == "torch" else tg.no_grad():
            m.weight.copy_(T([[1.0, 2.0], [3.0, 4.0]]))
            m.bias.copy_(T([0.5, -0.5]))
        out = m(T([[1.0, 1.0]]))
        L.append(out.tolist())
    assert log["tg"] == log["torch"]


def test_forward_pre_hook_with_kwargs_replaces_both():
    class M(tg.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale
    m = M()
    m.register_forward_pre_hook(lambda mod, args, kw: ((args[0] + 1,), {"scale": 10.0}),
                                with_kwargs=True)
    assert m(tg.tensor([1.0]), scale=2.0).tolist() == [20.0]


def test_always_call_forward_hook_runs_on_error():
    class Boom(tg.nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    m = Boom()
    got = []
    m.register_forward_hook(lambda mod, a, o: got.append(o), always_call=True)
    with pytest.raises(ValueError, match="boom"):
        m(tg.ones(1))
    assert got == [None]


def _global(lib):
    return tg.nn.modules.module if lib is tg else torch.nn.modules.module


@pytest.mark.parametrize("lib", ["tg", "torch"])
def test_global_hooks_run_for_every_module_before_its_own(lib):
    """``register_module_forward_pre_hook``/``forward_hook``/``full_backward_pre_hook``/
    ``full_backward_hook``: every module runs them, before its own hooks; a result
    replaces the args, output, grad_output or grad_input; removing the handle stops
    them. The calls and values are PyTorch's."""
    calls, results = {}, {}
    for name, L in (("tg", tg), ("torch", torch)):
        if name != lib and lib != "torch":
            continue
        G = _global(L)
        log = calls[name] = []
        L.manual_seed(0)
        m = L.nn.Sequential(L.nn.Linear(3, 4), L.nn.Tanh(), L.nn.Linear(4, 2)).double()
        with L.no_grad():
            for k, p in enumerate(m.parameters()):
                p.copy_(L.tensor(np.random.default_rng(k).standard_normal(tuple(p.shape))))
        m[1].register_forward_pre_hook(lambda mod, a: log.append("own pre"))
        m[1].register_forward_hook(lambda mod, a, o: log.append("own post"))
        m[1].register_full_backward_hook(lambda mod, gi, go: log.append("own bwd"))
        hs = [G.register_module_forward_pre_hook(
                  lambda mod, a: (log.append(f"pre {type(mod).__name__}"),
                                  (a[0] * 2,) if isinstance(mod, L.nn.Tanh) else None)[1]),
              G.register_module_forward_hook(
                  lambda mod, a, o: (log.append(f"post {type(mod).__name__}"),
                                     o + 1 if isinstance(mod, L.nn.Tanh) else None)[1]),
              G.register_module_full_backward_pre_hook(
                  lambda mod, go: (log.append(f"bpre {type(mod).__name__}"),
                                   (go[0] * 3,) if isinstance(mod, L.nn.Linear) else None)[1]),
              G.register_module_full_backward_hook(
                  lambda mod, gi, go: log.append(f"bwd {type(mod).__name__}"))]
        try:
            x = L.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
            out = m(x)
            out.sum().backward()
            results[name] = (out.detach().numpy().copy(), x.grad.numpy().copy())
            for h in hs:
                h.remove()
            log.append("removed")
            m(x)
        finally:
            for h in hs:
                h.remove()
    if lib == "torch":
        assert calls["tg"] == calls["torch"]
        for a, b in zip(results["tg"], results["torch"]):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_global_forward_hook_with_kwargs_and_always_call_as_torch():
    out = {}
    for name, L in (("tg", tg), ("torch", torch)):
        log = out[name] = []
        G = _global(L)

        class Boom(L.nn.Module):
            def forward(self, x, scale=1.0):
                if scale < 0:
                    raise ValueError("negative")
                return x * scale

        hs = [G.register_module_forward_hook(
                  lambda mod, a, kw, o: log.append((dict(kw), float(o.sum()))),
                  with_kwargs=True),
              G.register_module_forward_hook(
                  lambda mod, a, o: log.append(None if o is None else float(o.sum())),
                  always_call=True)]
        try:
            b = Boom()
            b(L.ones(2), scale=2.0)
            with pytest.raises(ValueError):
                b(L.ones(2), scale=-1.0)  # (the always_call hook still runs, output None)
        finally:
            for h in hs:
                h.remove()
    assert out["tg"] == out["torch"]


def test_global_registration_hooks_as_torch():
    """Parameter, buffer and submodule registration hooks run for every registration
    (attribute assignment, ``register_*``, ``add_module``); a result is registered
    instead."""
    out = {}
    for name, L in (("tg", tg), ("torch", torch)):
        log = out[name] = []
        G = _global(L)
        hs = [G.register_module_parameter_registration_hook(
                  lambda mod, n, p: log.append(("param", type(mod).__name__, n))),
              G.register_module_buffer_registration_hook(
                  lambda mod, n, b: (log.append(("buffer", n)),
                                     None if b is None else b * 2)[1]),
              G.register_module_module_registration_hook(
                  lambda mod, n, sub: log.append(("module", n, type(sub).__name__)))]
        try:
            m = L.nn.Module()
            m.lin = L.nn.Linear(2, 1)
            m.register_buffer("b", L.ones(2))
            m.add_module("act", L.nn.ReLU())
            m.register_parameter("p", L.nn.Parameter(L.zeros(1)))
            log.append(("b doubled", m.b.tolist()))
        finally:
            for h in hs:
                h.remove()
        m.register_buffer("c", L.ones(1))
        log.append("removed")
    assert out["tg"] == out["torch"]
