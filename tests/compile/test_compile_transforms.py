"""tg.compile around function transforms: forward over reverse (a Hessian-vector
product, ``jvp`` of ``grad``) captures the forward, the walk on Tensors and every
forward-mode rule's ops, and replays them equal to eager."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import functional as F
from tapegrad.nn import functional as NF


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    X = tg.tensor(rng.standard_normal((8, 6)))
    Y = tg.tensor(rng.integers(0, 3, 8))
    w2 = tg.tensor(rng.standard_normal((3, 5)))

    def loss(w1):
        return NF.cross_entropy(NF.linear(tg.tanh(NF.linear(X, w1)), w2), Y)
    return loss, tg.tensor(rng.standard_normal((5, 6))), tg.tensor(rng.standard_normal((5, 6)))


def test_hvp_forward_over_reverse_compiles_and_replays():
    loss, w1, v = _problem()

    def hvp(w, t):
        return F.jvp(F.grad(loss), (w,), (t,))[1]
    c = tg.compile(hvp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager fallback
        for k in range(3):
            t = v * (k + 1)
            np.testing.assert_allclose(c(w1, t).numpy(), hvp(w1, t).numpy(), rtol=1e-12)
    st = c.stats()
    assert st["captures"] == 1 and st["replays"] == 2 and st["eager_calls"] == 0


def test_hvp_matches_double_backward_in_torch():
    torch = pytest.importorskip("torch")
    loss, w1, v = _problem(1)
    ours = tg.compile(lambda w, t: F.jvp(F.grad(loss), (w,), (t,))[1])
    ours(w1, v)
    got = ours(w1, v).numpy()  # a replay
    rng = np.random.default_rng(1)
    X = torch.tensor(rng.standard_normal((8, 6)))
    Y = torch.tensor(rng.integers(0, 3, 8))
    w2 = torch.tensor(rng.standard_normal((3, 5)))
    w = torch.tensor(w1.numpy(), requires_grad=True)
    L = torch.nn.functional.cross_entropy(torch.tanh(X @ w.T) @ w2.T, Y)
    g, = torch.autograd.grad(L, w, create_graph=True)
    want, = torch.autograd.grad(g, w, grad_outputs=torch.tensor(v.numpy()))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


def test_a_reverse_transform_around_it_still_falls_back():
    # grad of an HVP records the inner walk (create_graph): eager, with the warning
    loss, w1, v = _problem(2)
    f = tg.compile(lambda w: F.grad(lambda u: F.jvp(F.grad(loss), (u,), (v,))[1].sum())(w))
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        out = f(w1)
    want = F.grad(lambda u: F.jvp(F.grad(loss), (u,), (v,))[1].sum())(w1)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12)


# ---------------------------------------------------------------- a compiled call inside
# a transform: vmap, forward mode and tg.Tape act on each op as it runs, which a replay
# does not do; the call runs the function as written, equal to eager
def _sin3(x):
    return (x * 3).sin()


def _compiled_and_replayed(fn, *args):
    c = tg.compile(fn)
    c(*args)
    c(*args)  # (a program captured and replayed)
    assert c.stats()["replays"] == 1
    return c


def test_vmap_of_a_compiled_function_is_eager_vmap():
    c = _compiled_and_replayed(_sin3, tg.ones(3))
    x = tg.tensor([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]])
    for _ in range(2):
        np.testing.assert_allclose(tg.vmap(c)(x).numpy(), tg.vmap(_sin3)(x).numpy())
        np.testing.assert_allclose(F.vmap(F.grad(lambda v: c(v).sum()))(x).numpy(),
                                   F.vmap(F.grad(lambda v: _sin3(v).sum()))(x).numpy())


def test_forward_mode_through_a_compiled_function_carries_tangents():
    import tapegrad.forward_ad as fwAD
    c = _compiled_and_replayed(_sin3, tg.ones(3))
    x, t = tg.tensor([0.1, 0.5, 2.0]), tg.tensor([1.0, -2.0, 0.5])
    want = (3 * (3 * x).cos() * t).numpy()
    for _ in range(2):
        np.testing.assert_allclose(F.jvp(c, (x,), (t,))[1].numpy(), want, rtol=1e-6)
        with fwAD.dual_level():
            out = c(fwAD.make_dual(x, t))
            np.testing.assert_allclose(fwAD.unpack_dual(out).tangent.numpy(), want,
                                       rtol=1e-6)
        np.testing.assert_allclose(F.jacfwd(c)(x).numpy(), np.diag(3 * (3 * x).cos().numpy()),
                                   rtol=1e-6)


def test_a_tape_around_a_compiled_function_records_it():
    c = _compiled_and_replayed(lambda x: (x * 3).sin().sum(), tg.ones(3))
    x = tg.tensor([0.1, 0.5, 2.0])
    for _ in range(2):
        with tg.Tape() as tape:
            tape.watch(x)
            y = c(x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), 3 * (3 * x).cos().numpy(),
                                   rtol=1e-6)


def test_a_compiled_module_inside_vmap_and_forward_mode():
    lin = tg.nn.Linear(3, 2)
    cm = tg.compile(lin)
    x = tg.randn(4, 3)
    with tg.no_grad():
        cm(x)
        cm(x)
    want = tg.vmap(lin)(x).detach().numpy()
    np.testing.assert_allclose(tg.vmap(cm)(x).detach().numpy(), want, rtol=1e-6)
    t = tg.randn(4, 3)
    got = F.jvp(lambda v: cm(v), (x,), (t,))[1]
    np.testing.assert_allclose(got.detach().numpy(), (t @ lin.weight.T).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
