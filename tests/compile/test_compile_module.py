"""``model = tg.compile(model)`` with the backward and the optimizer step outside: the
forward replays and records one node whose adjoint replays the captured backward.
Every value, gradient and parameter is compared with the same eager model."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

from ._models import close as _close, pair as _pair


def _mlp():
    return nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24), nn.Tanh(),
                         nn.Linear(24, 5))


def _cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def _bn():
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _drop():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))


@pytest.mark.parametrize("make,shape,nclass", [(_mlp, (16, 12), 5), (_cnn, (4, 1, 8, 8), 3),
                                               (_bn, (10, 6), 2), (_drop, (10, 6), 2)],
                         ids=["mlp", "cnn", "batchnorm", "dropout"])
def test_training_with_backward_and_step_outside_matches_eager(make, shape, nclass):
    m, ref = _pair(make)
    cm = tg.compile(m)
    opts = [tg.optim.SGD(cm.parameters(), lr=0.1, momentum=0.9),
            tg.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)]
    crit = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(5):
            x = tg.tensor(rng.standard_normal(shape).astype(np.float32))
            y = tg.tensor(rng.integers(0, nclass, shape[0]))
            losses = []
            for model, opt in zip((cm, ref), opts):
                tg.manual_seed(step)
                opt.zero_grad()
                loss = crit(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            _close(losses[0], losses[1])
    for a, b in zip(m.parameters(), ref.parameters()):
        _close(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)
    for a, b in zip(m.buffers(), ref.buffers()):
        _close(a.numpy(), b.numpy(), rtol=1e-5)
    s = cm.stats()
    assert s["replays"] >= 3 and s["backward_replays"] >= 3 and s["eager_calls"] == 0


def test_the_forward_records_one_node():
    m = _mlp()
    cm = tg.compile(m)
    x = tg.randn(4, 12)
    cm(x)
    out = cm(x)
    assert out.grad_fn is not None
    assert out.grad_fn.op.name.startswith("compiled[")


def test_input_gradients_and_two_forwards_before_one_backward():
    m, ref = _pair(_mlp)
    cm = tg.compile(m)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((8, 12)).astype(np.float32) for _ in range(4)]
    for model in (cm, ref):
        model.zero_grad()
    grads = []
    for model in (cm, ref):
        ts = [tg.tensor(v, requires_grad=True) for v in xs]
        outs = [model(t) for t in ts]  # forwards before any backward
        loss = sum(((o - i) ** 2).sum() for i, o in enumerate(outs))
        loss.backward()
        grads.append([t.grad.numpy() for t in ts] + [p.grad.numpy() for p in model.parameters()])
    for a, b in zip(*grads):
        _close(a, b, rtol=1e-4, atol=1e-5)
    assert cm.stats()["replays"] >= 3


def test_backward_of_the_first_output_after_a_second_forward():
    m, ref = _pair(_mlp)
    cm = tg.compile(m)
    x1, x2 = tg.randn(5, 12), tg.randn(5, 12)
    res = []
    for model in (cm, ref):
        model.zero_grad()
        model(x1)
        o1 = model(x1)
        o2 = model(x2)  # must not overwrite what o1's backward needs
        o1.sum().backward()
        res.append([o1.detach().numpy(), o2.detach().numpy()]
                   + [p.grad.numpy() for p in model.parameters()])
    for a, b in zip(*res):
        _close(a, b)


def test_create_graph_through_the_compiled_node():
    m, ref = _pair(lambda: nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)))
    cm = tg.compile(m)
    res = []
    for model in (cm, ref):
        x = tg.tensor(np.linspace(-1, 1, 12).reshape(4, 3).astype(np.float64),
                      requires_grad=True)
        model.to(tg.float64)
        model(x)
        y = model(x).sum()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            (gx,) = tg.autograd.grad(y, [x], create_graph=True)
            (ggx,) = tg.autograd.grad((gx ** 2).sum(), [x])
        assert (model is cm) == any("create_graph" in str(x.message) for x in w)
        res.append((gx.detach().numpy(), ggx.numpy()))
    _close(res[0][0], res[1][0], rtol=1e-10)
    _close(res[0][1], res[1][1], rtol=1e-10)


def test_behaves_as_the_module():
    m = _bn()
    cm = tg.compile(m)
    assert list(cm.parameters()) == list(m.parameters())
    assert list(cm.state_dict()) == list(m.state_dict())
    assert cm.eval() is cm and not m.training and not m[1].training
    assert cm.train() is cm and m.training
    cm.foo = 3
    assert m.foo == 3 and cm.foo == 3
    assert cm[0] is m[0]
    sd = {k: v * 0 for k, v in m.state_dict().items()}
    cm.load_state_dict(sd)
    assert float(m[0].weight.abs().sum()) == 0.0


def test_eval_mode_and_no_grad_replay_and_match():
    m, ref = _pair(_bn)
    cm = tg.compile(m)
    x = tg.randn(10, 6)
    for model in (cm, ref):
        model(x).sum().backward()
    cm.eval()
    ref.eval()
    with tg.no_grad():
        for _ in range(3):
            _close(cm(x).numpy(), ref(x).numpy())
    assert "model.training == False" in cm.stats()["guards"]


def test_hooks_run_every_call():
    m, ref = _pair(_mlp)
    cm = tg.compile(m)
    seen = []
    m[0].register_forward_hook(lambda mod, i, o: seen.append(o.shape))
    x = tg.randn(3, 12)
    for _ in range(3):
        _close(cm(x).detach().numpy(), ref(x).detach().numpy())
    assert len(seen) == 3


class _PosNet(nn.Module):
    """Token and position embeddings (positions from tg.arange in the forward)."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(11, 8)
        self.pos = nn.Embedding(6, 8)
        self.head = nn.Linear(8, 11)

    def forward(self, x):
        h = self.tok(x) + self.pos(tg.arange(x.shape[1]))
        return self.head(tg.relu(h) * tg.ones(8))


def test_factories_in_the_forward_are_constants_of_the_program():
    m, ref = _pair(_PosNet)
    cm = tg.compile(m)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            x = tg.tensor(rng.integers(0, 11, (4, 6)))
            res = []
            for model in (cm, ref):
                model.zero_grad()
                model(x).sum().backward()
                res.append([p.grad.numpy() for p in model.parameters()])
            for a, b in zip(*res):
                _close(a, b)
    # (the first call captures, then replays what it captured: counted as a capture)
    assert cm.stats()["replays"] == 2 and cm.stats()["eager_calls"] == 0


def test_a_factory_result_written_in_place_or_returned_is_copied_by_each_replay():
    def g(x):
        z = tg.zeros(3)
        z += x
        return z * 2
    cg = tg.compile(g)
    h = tg.compile(lambda: tg.zeros(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(4):  # (the in-place sum starts from zeros on every call)
            x = tg.full((3,), float(i))
            assert cg(x).tolist() == g(x).tolist()
        kept = [h() for _ in range(3)]
        for a in kept:  # each call's result its own buffer, zeros however it is written
            a += 1
        assert h().tolist() == [0.0, 0.0]
        assert [a.tolist() for a in kept] == [[1.0, 1.0]] * 3
    assert cg.stats()["replays"] == 3 and h.stats()["replays"] == 3
    assert cg.stats()["eager_reason"] is None


def test_compiled_module_is_a_module_wrapping_the_original():
    # as PyTorch's OptimizedModule: an nn.Module, the wrapped module in _orig_mod, the
    # module's own parameters, state, mode and hooks
    m = tg.nn.Sequential(tg.nn.Linear(4, 3), tg.nn.ReLU())
    c = tg.compile(m)
    assert isinstance(c, tg.nn.Module) and c._orig_mod is m
    assert [id(p) for p in c.parameters()] == [id(p) for p in m.parameters()]
    assert list(c.state_dict()) == list(m.state_dict()) == ["0.weight", "0.bias"]
    c.eval()
    assert not m.training and not c.training
    c.train()
    assert m.training
    seen = []
    h = c.register_forward_hook(lambda mod, args, out: seen.append(mod))
    x = tg.randn(2, 4, requires_grad=True)
    c(x)
    assert seen == [m]
    h.remove()
    # a child of another module: registered, its parameters reach the parent's
    parent = tg.nn.Sequential(c)
    assert parent[0] is c
    assert [id(p) for p in parent.parameters()] == [id(p) for p in m.parameters()]
    out = parent(x)
    np.testing.assert_allclose(out.detach().numpy(), m(x).detach().numpy(), rtol=1e-6)


# ---------------------------------------------------------------- dropout in training mode
def _two_dropouts():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4),
                         nn.Dropout(0.5))


def test_dropout_in_training_mode_replays_the_eager_draws():
    # the same seed: the replayed forward draws the masks the eager forward draws (the
    # same outputs, gradients and generator state after each call); no eager call
    m, ref = _pair(_two_dropouts)
    cm = tg.compile(m)
    x = tg.tensor(np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32))
    got = []
    for model in (cm, ref):
        tg.manual_seed(3)
        runs = []
        for _ in range(4):
            out = model(x)
            (out * out).sum().backward()
            runs.append((out.detach().numpy().copy(), [p.grad.numpy().copy() for p in
                                                       model.parameters()],
                         tg.get_rng_state()))
            model.zero_grad()
        got.append(runs)
    for (oa, ga, sa), (ob, gb, sb) in zip(*got):
        np.testing.assert_array_equal(oa, ob)
        for a, b in zip(ga, gb):
            _close(a, b, rtol=1e-6, atol=1e-7)
        assert tg.equal(sa, sb)
    outs = [r[0] for r in got[0]]
    assert not np.array_equal(outs[0], outs[1])  # a new mask each call
    s = cm.stats()
    assert s["eager_calls"] == 0 and s["replays"] == 3 and s["backward_replays"] == 4


def test_dropout_masks_of_two_forwards_before_their_backwards():
    # each forward keeps its own mask for its backward (a saved value of the node)
    m, ref = _pair(_two_dropouts)
    cm = tg.compile(m)
    xs = [tg.randn(3, 6) for _ in range(3)]
    grads = []
    for model in (cm, ref):
        tg.manual_seed(5)
        outs = [model(x) for x in xs]
        for k, o in enumerate(reversed(outs)):
            ((k + 1.0) * o).sum().backward()
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
    for a, b in zip(*grads):
        _close(a, b, rtol=1e-5, atol=1e-6)
    assert cm.stats()["eager_calls"] == 0


def test_dropout_with_create_graph_recomputes_with_the_same_masks():
    m, ref = _pair(_two_dropouts)
    cm = tg.compile(m)
    x = tg.randn(4, 6)
    res = []
    for model in (cm, ref):
        tg.manual_seed(9)
        model(x)  # (the capture, then one replay)
        out = model(x)
        w = model[0].weight
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the compiled module: recomputed eagerly)
            (g,) = tg.autograd.grad((out ** 2).sum(), [w], create_graph=True)
        (gg,) = tg.autograd.grad((g ** 2).sum(), [w])
        res.append((g.detach().numpy(), gg.numpy(), tg.get_rng_state()))
    _close(res[0][0], res[1][0], rtol=1e-5, atol=1e-6)
    _close(res[0][1], res[1][1], rtol=1e-4, atol=1e-5)
    assert tg.equal(res[0][2], res[1][2])


def test_dropout_in_a_compiled_step_function_replays():
    # the whole step in one tg.compile: each replay draws the next mask, as eager
    lin = nn.Linear(5, 5)
    lin_ref = nn.Linear(5, 5)
    lin_ref.load_state_dict(lin.state_dict())

    def step(lin, x):
        lin.zero_grad()
        loss = (tg.nn.functional.dropout(lin(x), 0.4, True) ** 2).sum()
        loss.backward()
        return loss
    c = tg.compile(step)
    x = tg.randn(3, 5)
    res = []
    for f, model in ((c, lin), (step, lin_ref)):
        tg.manual_seed(2)
        res.append([(f(model, x).item(), model.weight.grad.numpy().copy(), tg.get_rng_state())
                    for _ in range(3)])
    for (la, ga, sa), (lb, gb, sb) in zip(*res):
        _close(la, lb)
        _close(ga, gb)
        assert tg.equal(sa, sb)
    assert c.stats()["replays"] >= 2 and c.stats()["eager_calls"] == 0


def test_compiled_module_is_true_and_deep_copies():
    m = tg.compile(nn.Linear(2, 2))   # (no __len__ on a Linear: still true)
    assert bool(m) and (m or None) is m
    x = tg.randn(3, 2)
    m(x)
    m(x)
    import copy
    c = copy.deepcopy(m)
    assert type(c) is type(m) and c.weight is not m.weight
    np.testing.assert_array_equal(c(x).detach().numpy(), m(x).detach().numpy())
    with tg.no_grad():
        c.weight.add_(1.0)   # the copy's programs read the copy's parameters
    np.testing.assert_allclose((c(x) - m(x)).detach().numpy(),
                               np.broadcast_to(x.sum(1, keepdim=True).numpy(), (3, 2)),
                               rtol=1e-5, atol=1e-6)
