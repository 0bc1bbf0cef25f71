"""bernoulli, multinomial, normal, poisson, randint_like: seeded by tg.manual_seed (the
same seed gives the same draws, another seed others), distributions right (moments
and frequencies within 5 standard errors of a large sample: a false alarm about once
in 3 million runs), normal's reparameterised gradient, multinomial without
replacement as PyTorch's (distinct indices, zero-probability categories last)."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")

N = 40000


def _draws():
    p = tg.tensor([0.1, 0.5, 0.9], dtype=tg.float64)
    return [tg.bernoulli(p), tg.multinomial(p, 2), tg.normal(p, p), tg.poisson(p * 3),
            tg.randint_like(p, 10), tg.normal(0.0, 1.0, (3,)), p.bernoulli(0.5)]


def test_manual_seed_repeats_the_draws_and_another_seed_changes_them():
    tg.manual_seed(123)
    a = [t.detach().numpy() for t in _draws()]
    tg.manual_seed(123)
    b = [t.detach().numpy() for t in _draws()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    tg.manual_seed(124)
    c = np.concatenate([t.detach().numpy().astype(float).ravel() for t in _draws()])
    assert not np.array_equal(np.concatenate([x.astype(float).ravel() for x in a]), c)
    state = tg.get_rng_state()
    d = tg.normal(tg.zeros(4, dtype=tg.float64), 1.0)
    tg.set_rng_state(state)
    np.testing.assert_array_equal(d.numpy(), tg.normal(tg.zeros(4, dtype=tg.float64), 1.0).numpy())


def _within(sample_mean, mean, sd, n=N, k=5.0):
    assert abs(sample_mean - mean) < k * sd / np.sqrt(n), (sample_mean, mean)


def test_bernoulli_and_poisson_moments():
    tg.manual_seed(1)
    p = tg.full((N,), 0.3, dtype=tg.float32)
    b = tg.bernoulli(p)
    assert b.dtype == tg.float32 and set(np.unique(b.numpy())) <= {0.0, 1.0}
    _within(b.numpy().mean(), 0.3, np.sqrt(0.21))
    _within(tg.bernoulli(tg.zeros(N), p=0.7).numpy().mean(), 0.7, np.sqrt(0.21))
    r = tg.poisson(tg.full((N,), 4.0, dtype=tg.float64)).numpy()
    _within(r.mean(), 4.0, 2.0)
    assert abs(r.var() / 4.0 - 1) < 0.05
    assert (r == np.round(r)).all() and r.min() >= 0


def test_multinomial_frequencies_and_without_replacement():
    tg.manual_seed(2)
    w = np.array([1.0, 0.0, 3.0, 6.0])
    p = w / w.sum()
    d = tg.multinomial(tg.tensor(w), N, replacement=True).numpy()
    assert d.dtype == np.int64 and d.shape == (N,)
    for k in range(4):
        _within((d == k).mean(), p[k], np.sqrt(p[k] * (1 - p[k])) + 1e-12)
    # without replacement: distinct; the zero-probability category only after the others
    rows = tg.multinomial(tg.tensor(np.tile(w, (2000, 1))), 4).numpy()
    assert all(len(set(r)) == 4 for r in rows) and (rows[:, 3] == 1).all()
    # the first pick is distributed as p
    _within((rows[:, 0] == 3).mean(), p[3], np.sqrt(p[3] * (1 - p[3])), n=2000)
    with pytest.raises(RuntimeError, match="multinomial"):
        tg.multinomial(tg.tensor([1.0, 2.0]), 3)
    with pytest.raises(RuntimeError, match="multinomial"):
        tg.multinomial(tg.tensor([1.0, -2.0]), 1)


def test_normal_forms_moments_and_gradient():
    tg.manual_seed(3)
    mean = tg.full((N,), 2.0, dtype=tg.float64, requires_grad=True)
    std = tg.full((N,), 0.5, dtype=tg.float64, requires_grad=True)
    out = tg.normal(mean, std)
    x = out.detach().numpy()
    _within(x.mean(), 2.0, 0.5)
    assert abs(x.std() / 0.5 - 1) < 0.03
    out.sum().backward()
    np.testing.assert_allclose(mean.grad.numpy(), 1.0)
    np.testing.assert_allclose(std.grad.numpy(), (x - 2.0) / 0.5, rtol=1e-12, atol=1e-12)
    # the other forms: shapes and dtypes as PyTorch's
    for args in [(tg.zeros(2, 1), tg.ones(3)), (tg.zeros(3), 0.5), (0.5, tg.ones(2, 2)),
                 (0.0, 1.0, (2, 5))]:
        targs = [torch.tensor(a.numpy()) if isinstance(a, tg.Tensor) else a for a in args]
        ours, theirs = tg.normal(*args), torch.normal(*targs)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    with pytest.raises(RuntimeError, match="std >= 0"):
        tg.normal(tg.zeros(2), -tg.ones(2))


def test_randint_like_range_and_dtype():
    tg.manual_seed(4)
    x = tg.zeros(N, dtype=tg.float32)
    a = tg.randint_like(x, 3, 7)
    assert a.dtype == tg.float32
    v = a.numpy()
    assert v.min() == 3 and v.max() == 6 and (v == np.round(v)).all()
    _within(v.mean(), 4.5, np.sqrt(1.25))
    b = tg.randint_like(tg.zeros(5, dtype=tg.int32), 4)
    assert b.dtype == tg.int32 and b.numpy().max() < 4
