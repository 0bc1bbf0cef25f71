"""tg.compile's replay writes into planned memory: nothing result-sized is
allocated by a replay; results a caller keeps are never overwritten; a full sum or
mean ends a fused chain inside its kernel; a fused in-place update writes its tensor.

Every comparison is against the same program run eagerly (and PyTorch where a
gradient is checked)."""
import tracemalloc

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

from ._models import cross_entropy_step

torch = pytest.importorskip("torch")


def _replay_peak(fn, warm=10):
    """Bytes one call allocates above its starting point (tracemalloc's peak, the
    least of three calls), and the bytes left allocated by 10 more calls (the lesser
    of two such windows): a buffer every replay allocates, or one each keeps, shows in
    every call and window; a one-off (a cache filled, a dict resized) in one only."""
    for _ in range(warm):
        fn()
    tracemalloc.start()
    try:
        peaks = []
        for _ in range(3):
            fn()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            fn()
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        grown = []
        for _ in range(2):
            start = tracemalloc.get_traced_memory()[0]
            for _ in range(10):
                fn()
            grown.append(tracemalloc.get_traced_memory()[0] - start)
    finally:
        tracemalloc.stop()
    return min(peaks), min(grown)


def _mlp_step():
    tg.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                      nn.Linear(256, 10))
    opt = tg.optim.SGD(m.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((128, 64)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 10, 128))
    return m, cross_entropy_step(m, opt, x, y)


def _cnn_step():
    tg.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3),
                      nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 5 * 5, 10))
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.standard_normal((16, 1, 28, 28)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 10, 16))

    def step():
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        with tg.no_grad():
            for p in m.parameters():
                p -= 0.05 * p.grad
                p.grad = None
        return loss
    return m, step


@pytest.mark.parametrize("make", [_mlp_step, _cnn_step], ids=["mlp_sgd", "cnn_manual_sgd"])
def test_a_replay_allocates_nothing_result_sized(make):
    model, step = make()
    eager_model, eager_step = make()
    c = tg.compile(step)
    for _ in range(3):
        np.testing.assert_allclose(c().item(), eager_step().item(), rtol=1e-5)
    for a, b in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4,
                                   atol=1e-6)
    s = c.stats()
    assert s["allocating"] == [], s["allocating"]
    assert s["peak_bytes"] > 1 << 19
    peak, grown = _replay_peak(c)
    # views, the .grad/output Tensor objects and NumPy's iterator buffers remain:
    # well under one activation (128 x 256 float32 = 128 KB; the CNN's are larger)
    assert peak < 64 * 1024, (peak, s["peak_bytes"])
    assert grown < 32 * 1024, grown  # (Python's small-object pools settle: no buffer kept)


def test_results_kept_from_earlier_replays_are_not_overwritten():
    """An output and a .grad written into a reused buffer: one still held by the
    caller is never the buffer the next replay writes."""
    w = tg.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)

    def step(x):
        out = tg.relu(x @ w)
        (out * out).sum().backward()
        return out
    c = tg.compile(step)
    xs = [tg.tensor(np.random.default_rng(k).standard_normal((4, 2))) for k in range(6)]
    kept, grads = [], []
    for x in xs:
        kept.append(c(x))
        grads.append(w.grad)
        w.grad = None
    assert c.stats()["replays"] == 5
    for x, out, g in zip(xs, kept, grads):
        wt = torch.tensor(w.detach().numpy(), requires_grad=True)
        ot = torch.relu(torch.from_numpy(x.numpy()) @ wt)
        (ot * ot).sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), ot.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(g.numpy(), wt.grad.numpy(), rtol=1e-12)
    assert len({id(g._data) for g in grads}) == len(grads)


def test_a_full_reduction_ends_the_fused_chain_forward_and_backward():
    """mean((x * w - 1) ** 2): the forward chain and its mean are one kernel; the
    gradient of the broadcast w (a sum over every element) ends the backward's."""
    def f(x, w):
        loss = ((x * w - 1.0) ** 2).mean()
        loss.backward()
        g = w.grad
        w.grad = None
        return loss, g

    rng = np.random.default_rng(0)
    x0 = rng.random(5000)
    w0 = np.array([0.7])
    c = tg.compile(f)
    for k in range(3):
        x = tg.tensor(x0 + k)
        w = tg.tensor(w0, requires_grad=True)
        loss, g = c(x, w)
        xt, wt = torch.tensor(x0 + k), torch.tensor(w0, requires_grad=True)
        lt = ((xt * wt - 1.0) ** 2).mean()
        lt.backward()
        np.testing.assert_allclose(loss.item(), lt.item(), rtol=1e-12)
        np.testing.assert_allclose(g.numpy(), wt.grad.numpy(), rtol=1e-12)
    steps = c._last.steps
    names = [st.name for st in steps]
    assert not {"sum", "mean", "sum_to"} & set(names), names
    reduced = [st.attrs["reduce"][0] for st in steps if st.kind == "fused"
               and "reduce" in st.attrs]
    assert sorted(reduced) == ["mean", "sum_to"], names


def test_a_reduced_value_used_elsewhere_is_written_too():
    def f(x):
        y = tg.exp(x) * 0.5 + x
        return y.sum(), y

    x0 = np.random.default_rng(2).standard_normal((300, 7)).astype(np.float32)
    c = tg.compile(f)
    for _ in range(3):
        s, y = c(tg.tensor(x0))
    ref = np.exp(x0.astype(np.float64)) * 0.5 + x0
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5)
    np.testing.assert_allclose(s.item(), ref.sum(), rtol=1e-5)
    assert [st.kind for st in c._last.steps] == ["fused"]
    assert c.stats()["fused_groups"] == 1


def test_a_fused_inplace_update_writes_the_parameter_directly():
    def make():
        tg.manual_seed(3)
        return nn.Linear(5, 3)

    def step(m, x):
        (m(x) ** 2).mean().backward()
        with tg.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
                p.grad = None
    me, mc = make(), make()
    c = tg.compile(lambda x: step(mc, x))
    for k in range(4):
        x = tg.tensor(np.random.default_rng(k).standard_normal((6, 5)).astype(np.float32))
        c(x)
        step(me, x)
        for a, b in zip(mc.parameters(), me.parameters()):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5,
                                       atol=1e-7)
    kinds = [st.kind for st in c._last.steps]
    assert "write" not in kinds, kinds
    assert any(st.attrs.get("direct") for st in c._last.steps if st.kind == "fused")
