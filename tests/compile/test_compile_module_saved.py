"""``model = tg.compile(model)``: the forward program returns the values its backward
reads (the saved values), the node keeps them and its adjoint replays the backward
program on them, without recomputing the forward. Every gradient is compared with
the same eager model."""
import gc
import warnings
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

from ._models import close as _close, pair as _pair


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def _bn():
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _grads(model, ts):
    return [t.grad.numpy().copy() for t in ts] + \
        [p.grad.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("order", ["first-first", "second-first"])
@pytest.mark.parametrize("make", [_mlp, _bn], ids=["mlp", "batchnorm"])
def test_two_forwards_then_two_backwards_in_either_order(make, order):
    m, ref = _pair(make)
    cm = tg.compile(m)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(2)]
    ws = [rng.standard_normal((5, 3)).astype(np.float32) for _ in range(2)]
    cm(tg.tensor(xs[0], requires_grad=True))  # (the capture)
    ref(tg.tensor(xs[0], requires_grad=True))
    res = []
    for model in (cm, ref):
        model.zero_grad()
        ts = [tg.tensor(x, requires_grad=True) for x in xs]
        outs = [model(t) for t in ts]  # both forwards before any backward
        seq = (0, 1) if order == "first-first" else (1, 0)
        per = []
        for i in seq:
            (outs[i] * tg.tensor(ws[i])).sum().backward()
            per.append(ts[i].grad.numpy().copy())
        res.append([o.detach().numpy() for o in outs] + per + _grads(model, ts))
    for a, b in zip(*res):
        _close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(m.buffers(), ref.buffers()):  # running statistics updated once a call
        _close(a.numpy(), b.numpy())
    s = cm.stats()
    assert s["replays"] == 2 and s["backward_replays"] == 2 and s["eager_calls"] == 0
    assert s["saved_values"] > 0


def test_the_backward_does_not_recompute_the_forward():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return tg.tanh(self.lin(x)) * 2

    m, ref = Net(), Net()
    ref.load_state_dict(m.state_dict())
    cm = tg.compile(m)
    x = tg.randn(3, 4)
    for _ in range(4):
        m.zero_grad()
        cm(x).sum().backward()
    ref(x).sum().backward()
    s = cm.stats()  # (the forward's Python ran once: the capture of the joint program)
    assert (s["captures"], s["replays"], s["eager_calls"]) == (1, 3, 0), s
    for a, b in zip(m.parameters(), ref.parameters()):
        _close(a.grad.numpy(), b.grad.numpy())
    prog = cm._joint._last
    assert prog.backward.kernels > 0 and cm.stats()["backward_replays"] == 4
    assert "tanh" not in prog.backward.source  # (the forward's kernels are not in it)


def test_retain_graph_backward_twice_then_released():
    m, ref = _pair(_mlp)
    cm = tg.compile(m)
    x = tg.randn(4, 6)
    cm(x)
    res = []
    for model in (cm, ref):
        model.zero_grad()
        y = model(x).sum()
        y.backward(retain_graph=True)
        y.backward()
        res.append(_grads(model, []))
        with pytest.raises(RuntimeError):
            y.backward()
    for a, b in zip(*res):
        _close(a, b)


def test_saved_values_are_released_after_the_backward_and_when_the_output_dies():
    m = _mlp()
    cm = tg.compile(m)
    x = tg.randn(4, 6)
    cm(x)
    out = cm(x)
    saved = out.grad_fn.inputs
    assert saved and all(isinstance(a, np.ndarray) for a in saved)
    refs = [weakref.ref(a) for a in saved]
    del saved
    out.sum().backward()
    assert out.grad_fn.inputs is None  # let go by the backward
    out2 = cm(x)
    refs2 = [weakref.ref(a) for a in out2.grad_fn.inputs]
    del out2
    gc.collect()
    alive = [r() for r in refs + refs2 if r() is not None]
    assert all(a is x._data or a is out._data or _held_by_ring(a, cm) for a in alive)


def _held_by_ring(a, cm):
    """The array is one of the forward program's ring buffers (kept for reuse)."""
    prog = cm._joint._last
    return any(a is b for r in prog.plan.rings.values() for b in r.bufs)


def test_a_long_loop_does_not_grow():
    m, ref = _pair(_bn)
    cm = tg.compile(m)
    opt = tg.optim.SGD(cm.parameters(), lr=0.01)
    x, y = tg.randn(8, 6), tg.tensor(np.arange(8) % 3)
    crit = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        crit(cm(x), y).backward()
        opt.step()
    for _ in range(5):
        step()
    prog = cm._joint._last
    before = sum(len(r.bufs) for r in prog.plan.rings.values()) + \
        sum(len(r.bufs) for r in prog.backward.plan.rings.values())
    for _ in range(40):
        step()
    after = sum(len(r.bufs) for r in prog.plan.rings.values()) + \
        sum(len(r.bufs) for r in prog.backward.plan.rings.values())
    assert after == before and cm.stats()["captures"] == 1


def test_only_inputs_requiring_grad_and_outputs_without_gradient():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(5, 4)
            self.b = nn.Linear(5, 2)

        def forward(self, x, z):
            return self.a(x) * z, (tg.sigmoid(self.b(x)), x.sum())

    m, ref = _pair(Two)
    cm = tg.compile(m)
    rng = np.random.default_rng(3)
    for _ in range(3):
        xv = rng.standard_normal((3, 5)).astype(np.float32)
        zv = rng.standard_normal((3, 4)).astype(np.float32)
        res = []
        for model in (cm, ref):
            model.zero_grad()
            x, z = tg.tensor(xv), tg.tensor(zv, requires_grad=True)
            o1, (o2, o3) = model(x, z)
            (o1 ** 2).sum().backward()  # o2 and o3 get no gradient
            res.append([o1.detach().numpy(), o2.detach().numpy(), o3.detach().numpy(),
                        z.grad.numpy()] + [p.grad.numpy() if p.grad is not None else
                                           np.zeros(p.shape) for p in model.parameters()])
            assert x.grad is None
        for a, b in zip(*res):
            _close(a, b)
    assert cm.stats()["eager_calls"] == 0 and cm.stats()["backward_replays"] == 3


def test_dropout_replays_with_the_eager_masks():
    m, ref = _pair(lambda: nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.Linear(16, 2)))
    cm = tg.compile(m)
    x = tg.randn(5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(3):
            res = []
            for model in (cm, ref):
                model.zero_grad()
                tg.manual_seed(step)
                out = model(x)
                out.sum().backward()
                res.append([out.detach().numpy()] + _grads(model, []))
            for a, b in zip(*res):
                _close(a, b)
    assert cm.stats()["eager_calls"] == 0 and cm.stats()["backward_replays"] == 3


def test_a_saved_view_keeps_its_buffer_from_the_next_forward():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(6, 8)
            self.b = nn.Linear(4, 3)

        def forward(self, x):
            h = tg.tanh(self.a(x))  # saved through a view: its reshape
            return self.b(h.reshape(-1, 4))

    m, ref = _pair(Net)
    cm = tg.compile(m)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(3)]
    cm(tg.tensor(xs[0]))
    res = []
    for model in (cm, ref):
        model.zero_grad()
        outs = [model(tg.tensor(x)) for x in xs]
        for o in reversed(outs):
            (o * o).sum().backward()
        res.append([o.detach().numpy() for o in outs] + _grads(model, []))
    for a, b in zip(*res):
        _close(a, b, rtol=1e-4, atol=1e-5)
    assert cm.stats()["allocating"] == []


@pytest.mark.parametrize("what", ["output", "input", "weight"])
def test_a_saved_value_written_in_place_before_the_backward_raises_as_eager(what):
    m, ref = _pair(lambda: nn.Sequential(nn.Linear(6, 4), nn.Tanh()))
    cm = tg.compile(m)
    cm(tg.randn(3, 6, requires_grad=True))
    for model in (cm, ref):
        x = tg.randn(3, 6, requires_grad=True)
        xin = x * 1  # (a non-leaf: written in place below)
        out = model(xin)
        with tg.no_grad():
            target = {"output": out, "input": xin, "weight": model[0].weight}[what]
            target.mul_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_a_bias_written_in_place_before_the_backward_is_not_read_by_it():
    m, ref = _pair(lambda: nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)))
    cm = tg.compile(m)
    x = tg.randn(3, 6)
    cm(x)
    res = []
    for model in (cm, ref):
        model.zero_grad()
        out = model(x)
        with tg.no_grad():
            model[2].bias.add_(1.0)  # (neither backward reads the last bias)
        out.sum().backward()
        res.append(_grads(model, []))
    for a, b in zip(*res):
        _close(a, b)


def test_autocast_is_part_of_the_guard():
    m, ref = _pair(_mlp)
    cm = tg.compile(m)
    rng = np.random.default_rng(2)
    for on in (False, True, True, False, True):
        xv = rng.standard_normal((4, 6)).astype(np.float32)
        res = []
        for model in (cm, ref):
            model.zero_grad()
            x = tg.tensor(xv, requires_grad=True)
            with tg.autocast("cpu", dtype=tg.bfloat16, enabled=on):
                out = model(x)
            out.float().sum().backward()
            res.append([out.dtype, out.float().detach().numpy(), x.grad.numpy()]
                       + _grads(model, []))
        assert res[0][0] == res[1][0] == (tg.bfloat16 if on else tg.float32)
        for a, b in zip(res[0][1:], res[1][1:]):
            _close(a, b, rtol=2e-2, atol=2e-2)
    s = cm.stats()
    assert s["captures"] == 2 and s["eager_calls"] == 0
    assert "autocast == {'cpu': bfloat16}" in s["recaptures"][0]
    with tg.no_grad(), tg.autocast("cpu", dtype=tg.bfloat16):
        assert cm(tg.randn(4, 6)).dtype == tg.bfloat16


def test_each_program_checks_the_inputs_its_own_backward_reads():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.from_input = False

        def forward(self, x):
            return self.lin(x if self.from_input else tg.ones(4, 3) + 0 * x)

    m = Net()
    cm = tg.compile(m)
    x = tg.randn(4, 3, requires_grad=True)
    for flag in (False, True):
        m.from_input = flag
        cm(x * 1)
        xin = x * 1
        out = cm(xin)
        with tg.no_grad():
            xin.mul_(2.0)
        if flag:  # its backward reads x (the weight's gradient): written in place
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                out.sum().backward()
        else:
            out.sum().backward()


def test_a_backward_that_raises_raises_at_the_backward_as_eager():
    class NoGrad(tg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("no backward here")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return NoGrad.apply(self.lin(x))

    cm = tg.compile(Net())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            out = cm(tg.randn(2, 3))  # the forward works, as eager's does
            with pytest.raises(RuntimeError, match="no backward here"):
                out.sum().backward()
    assert "no backward here" in cm.stats()["eager_reason"]


def test_keyword_arguments_replay_and_get_their_gradients():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, scale=None, shift=0.0):
            h = tg.tanh(self.lin(x))
            if scale is not None:
                h = h * scale
            return h + shift

    m, ref = _pair(Net)
    cm = tg.compile(m)
    rng = np.random.default_rng(7)
    for kw in ({}, {"scale": True}, {"scale": True, "shift": 1.5}, {"scale": True}):
        xv = rng.standard_normal((3, 4)).astype(np.float32)
        sv = rng.standard_normal((3, 4)).astype(np.float32)
        res = []
        for model in (cm, ref):
            model.zero_grad()
            x = tg.tensor(xv, requires_grad=True)
            s = tg.tensor(sv, requires_grad=True)
            kws = {k: (s if k == "scale" else v) for k, v in kw.items()}
            out = model(x, **kws)
            (out ** 2).sum().backward()
            res.append([out.detach().numpy(), x.grad.numpy()] + _grads(model, [])
                       + ([s.grad.numpy()] if "scale" in kw else []))
        for a, b in zip(*res):
            _close(a, b)
    s = cm.stats()
    assert s["eager_calls"] == 0 and s["captures"] == 3 and s["backward_replays"] == 4
