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
