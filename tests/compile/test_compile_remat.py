"""tg.compile's rematerialization (compiler/remat.py): a fused backward kernel
recomputes the forward's elementwise values from the forward's inputs instead of
reading them from memory, when that moves fewer bytes; kernels over the same elements
that do not read each other's results run as one pass.

Values and gradients are compared with the same step run eagerly (and with PyTorch);
the saving is asserted on the memory plan, never on time."""
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.compiler import remat

torch = pytest.importorskip("torch")

K = math.sqrt(2.0 / math.pi)
N = 4096


def _chain(lib, x):
    g = 0.5 * x * (1 + lib.tanh(K * (x + 0.044715 * x * x * x)))
    return (g * lib.sigmoid(x) + x * x).sum()


def _step(x):
    loss = _chain(tg, x)
    loss.backward()
    gx = x.grad
    x.grad = None
    return loss, gx


def _compiled(x0, enabled, monkeypatch):
    monkeypatch.setattr(remat, "ENABLED", enabled)
    x = tg.tensor(x0, requires_grad=True)
    step = tg.compile(_step)
    for _ in range(3):
        loss, gx = step(x)
    assert step.stats()["replays"] == 2
    return step, float(loss), gx.numpy().copy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_recomputed_chain_equals_eager_and_torch(dtype, monkeypatch):
    x0 = np.random.default_rng(0).uniform(-3, 3, N).astype(dtype)
    step, loss, gx = _compiled(x0, True, monkeypatch)
    xe = tg.tensor(x0, requires_grad=True)
    le, ge = _step(xe)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(loss, float(le), rtol=tol)
    np.testing.assert_allclose(gx, ge.numpy(), rtol=tol, atol=tol)
    xt = torch.tensor(x0, requires_grad=True)
    lt = _chain(torch, xt)
    lt.backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=10 * tol, atol=10 * tol)


def test_recomputing_shrinks_the_plan(monkeypatch):
    """Stored, the backward reads eight forward values (the arena holds them); recomputed,
    the backward kernel reads x alone and the plan holds no array but the gradient."""
    x0 = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    stored, loss0, g0 = _compiled(x0, False, monkeypatch)
    again, loss1, g1 = _compiled(x0, True, monkeypatch)
    s0, s1 = stored.stats(), again.stats()
    nb = N * 4
    assert s0["arena_bytes"] >= 4 * nb
    assert s1["arena_bytes"] < nb
    assert s1["peak_bytes"] <= nb + 64 < s0["peak_bytes"]
    prog = again._last
    # the forward's sum and the gradient in one pass reading x (and the seed); the
    # copy of the gradient into its output elided
    assert [st.kind for st in prog.steps] == ["fused"]
    assert len(prog.steps[0].ins) <= 2 and prog.steps[0].attrs.get("reduce")
    assert [st.kind for st in stored._last.steps].count("fused") == 2
    np.testing.assert_allclose(g1, g0, rtol=1e-6, atol=1e-6)
    assert loss1 == pytest.approx(loss0, rel=1e-6)


def test_value_read_by_others_is_recomputed_only_where_it_saves(monkeypatch):
    """A value the program returns stays stored; a value needing three inputs the
    backward does not read is cheaper to read than to recompute."""
    rng = np.random.default_rng(2)
    a0, b0, c0 = (rng.standard_normal(N).astype(np.float64) for _ in range(3))

    def f(x, a, b, c):
        s = tg.sigmoid(a * b + c)          # three inputs the backward does not read
        t = tg.tanh(x) * 2.0               # returned: stored anyway
        loss = (s * t).sum()
        loss.backward()
        gx = x.grad
        x.grad = None
        return loss, gx, t

    x = tg.tensor(rng.standard_normal(N), requires_grad=True)
    a, b, c = (tg.tensor(v) for v in (a0, b0, c0))
    cf = tg.compile(f)
    for _ in range(3):
        got = cf(x, a, b, c)
    want = f(x, a, b, c)
    for u, w in zip(got, want):
        np.testing.assert_allclose(u.detach().numpy(), w.detach().numpy(), rtol=1e-12)
    back = [st for st in cf._last.steps if st.kind == "fused"][-1]
    reads = set(back.ins)
    g = cf._last.graph
    assert not any(g.source[v] == "arg" and g.args[v][0] in (1, 2, 3) for v in reads)
    assert cf.stats()["arena_bytes"] >= N * 8  # s, stored


def test_no_recompute_across_a_write_into_its_inputs():
    """The forward's inputs are written between the kernels: the backward must read the
    stored values, not recompute them from the changed inputs."""
    def f(x):
        a = tg.tanh(x * 3.0) + 1.0
        x.mul_(2.0)
        return a * x + a * a

    x0 = np.random.default_rng(3).standard_normal(N)
    cf = tg.compile(f)
    with tg.no_grad():
        for _ in range(3):
            xc, xe = tg.tensor(x0), tg.tensor(x0)
            got, want = cf(xc), f(xe)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-12)
            np.testing.assert_array_equal(xc.numpy(), xe.numpy())
    assert cf.stats()["replays"] == 2


def test_mlp_step_with_recompute_equals_eager():
    """A training step whose fused groups feed each other (GELU, a loss): parameters
    after three compiled steps equal three eager ones."""
    def make():
        tg.manual_seed(0)
        m = tg.nn.Sequential(tg.nn.Linear(16, 32), tg.nn.GELU(approximate="tanh"),
                             tg.nn.Linear(32, 32), tg.nn.Sigmoid(), tg.nn.Linear(32, 4))
        opt = tg.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = tg.nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            return loss
        return m, step

    rng = np.random.default_rng(4)
    x = tg.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    y = tg.tensor(rng.standard_normal((64, 4)).astype(np.float32))
    me, se = make()
    mc, sc = make()
    sc = tg.compile(sc)
    for _ in range(3):
        le, lc = se(x, y), sc(x, y)
        assert float(lc) == pytest.approx(float(le), rel=1e-5)
    for p, q in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert sc.stats()["replays"] == 2


def test_independent_kernels_do_not_cross_a_write():
    """Two kernels over the same elements, the second reading a tensor written between
    them: they stay two passes (one pass would read ``y`` before the write)."""
    def f(x, y):
        a = tg.tanh(x) * 2.0 + 1.0
        y.mul_(2.0)
        b = tg.sigmoid(y) * 3.0 - 1.0
        return a, b

    x0, y0 = np.random.default_rng(5).standard_normal((2, N))
    cf = tg.compile(f)
    with tg.no_grad():
        for _ in range(3):
            yc, ye = tg.tensor(y0), tg.tensor(y0)
            for u, w in zip(cf(tg.tensor(x0), yc), f(tg.tensor(x0), ye)):
                np.testing.assert_allclose(u.numpy(), w.numpy(), rtol=1e-12)
    assert cf.stats()["replays"] == 2


def test_independent_kernels_run_as_one_pass():
    def f(x):
        return tg.tanh(x) * 2.0 + 1.0, (tg.sigmoid(x) * 3.0 - 1.0).sum()

    x = tg.tensor(np.random.default_rng(6).standard_normal(N))
    cf = tg.compile(f)
    for _ in range(3):
        got = cf(x)
    for u, w in zip(got, f(x)):
        np.testing.assert_allclose(u.numpy(), w.numpy(), rtol=1e-12)
    assert [st.kind for st in cf._last.steps] == ["fused"]
