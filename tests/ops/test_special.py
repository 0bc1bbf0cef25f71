"""erfinv to float64 rounding (against PyTorch, into both tails), its gradients at
every order through ops; gradient() against PyTorch's with spacing and edge_order and
its own gradient; mvlgamma and frexp against PyTorch."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def test_erfinv_full_precision_into_the_tails():
    y = np.concatenate([np.linspace(-1, 1, 20001), 1 - np.logspace(-16, -1, 200),
                        -1 + np.logspace(-16, -1, 200), np.logspace(-300, -1, 50),
                        [1.5, -2.0, np.nan, 0.0, -0.0]])
    ours = tg.erfinv(tg.tensor(y)).numpy()
    theirs = torch.erfinv(torch.tensor(y)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=4e-15, atol=0)
    f32 = tg.erfinv(tg.tensor(y.astype(np.float32)))
    assert f32.dtype == tg.float32
    np.testing.assert_allclose(f32.numpy(), torch.erfinv(torch.tensor(y.astype(np.float32))),
                               rtol=2e-6, atol=1e-7)
    x = tg.tensor([0.3, -0.7])
    x.erfinv_()
    np.testing.assert_allclose(x.numpy(), torch.erfinv(torch.tensor([0.3, -0.7])).numpy())


def test_erfinv_second_derivative_like_pytorch():
    y = np.array([-0.9, -0.2, 0.4, 0.99])
    res = []
    for L in (tg, torch):
        t = L.tensor(y, requires_grad=True)
        g, = (tg.grad if L is tg else torch.autograd.grad)(L.erfinv(t).sum(), [t],
                                                          create_graph=True)
        gg, = (tg.grad if L is tg else torch.autograd.grad)(g.sum(), [t])
        res.append((g.detach().numpy(), gg.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("kw", [{}, {"spacing": 0.5}, {"spacing": [2.0, 0.25]},
                                {"dim": 1, "edge_order": 2}, {"dim": [0], "spacing": [3.0]}])
def test_gradient_like_pytorch_values_and_backward(kw):
    x = np.random.default_rng(0).standard_normal((4, 5))
    g = [np.random.default_rng(k).standard_normal((4, 5)) for k in range(2)]
    res = []
    for L in (tg, torch):
        t = L.tensor(x, requires_grad=True)
        outs = L.gradient(t, **kw)
        sum(L.tensor(g[k]) * o for k, o in enumerate(outs)).sum().backward()
        res.append([o.detach().numpy() for o in outs] + [t.grad.numpy()])
    assert len(res[0]) == len(res[1])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_mvlgamma_and_frexp_like_pytorch():
    x = np.random.default_rng(1).uniform(2.0, 6.0, (3, 4))
    for p in (1, 3):
        ours = tg.tensor(x, requires_grad=True)
        theirs = torch.tensor(x, requires_grad=True)
        a, b = tg.mvlgamma(ours, p), torch.mvlgamma(theirs, p)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)
        a.sum().backward()
        b.sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="mvlgamma"):
        tg.mvlgamma(tg.tensor([True]), 3)
    v = np.array([0.0, -3.5, 1e-310, 7.0, np.inf], np.float32)
    (m, e), (tm, te) = tg.frexp(tg.tensor(v)), torch.frexp(torch.tensor(v))
    np.testing.assert_array_equal(m.numpy(), tm.numpy())
    np.testing.assert_array_equal(e.numpy(), te.numpy())
    assert e.dtype == tg.int32


def test_i0_to_rounding_and_its_derivatives_like_pytorch():
    x = np.array([-30.0, -2.5, -1e-3, 0.0, 0.7, 4.0, 100.0])
    res = []
    for L in (tg, torch):
        t = L.tensor(x, requires_grad=True)
        y = L.i0(t)
        g, = (tg.grad if L is tg else torch.autograd.grad)(y.sum(), [t], create_graph=True)
        gg, = (tg.grad if L is tg else torch.autograd.grad)(g.sum(), [t])
        res.append((y.detach().numpy(), g.detach().numpy(), gg.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    z = tg.tensor([0.5, 1.5])
    z.i0_()
    np.testing.assert_allclose(z.numpy(), torch.i0(torch.tensor([0.5, 1.5])).numpy())


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_igamma_values_and_x_derivatives_like_pytorch(name):
    r = np.random.default_rng(5)
    a, x = r.uniform(0.3, 6.0, (3, 4)), r.uniform(0.05, 8.0, (3, 4))
    res = []
    for L in (tg, torch):
        ta, tx = L.tensor(a), L.tensor(x, requires_grad=True)
        y = getattr(L, name)(ta, tx)
        g, = (tg.grad if L is tg else torch.autograd.grad)(y.sum(), [tx], create_graph=True)
        gg, = (tg.grad if L is tg else torch.autograd.grad)(g.sum(), [tx])
        res.append((y.detach().numpy(), g.detach().numpy(), gg.numpy()))
    for p, q in zip(*res):
        np.testing.assert_allclose(p, q, rtol=1e-8, atol=1e-12)
    with pytest.raises(NotImplementedError, match=name):
        ta = tg.tensor(a, requires_grad=True)
        getattr(tg, name)(ta, tg.tensor(x)).sum().backward()
