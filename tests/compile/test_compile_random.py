"""tg.compile and draws from tapegrad's global generator: each draw (a factory's,
a sampling op's, a dropout's mask, rrelu's slopes) is a step of the program that draws
again on every replay, in the program's order, so a compiled call consumes the
generator exactly as the eager call does (a seed repeats both); never folded to a
constant, merged with an equal draw, hoisted or dropped."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F


def _calls(fn, args, n=3, seed=5):
    """``fn(*args)`` ``n`` times from seed ``seed``: the results as arrays."""
    tg.manual_seed(seed)
    out = []
    for _ in range(n):
        r = fn(*args)
        out.append([np.asarray(t.numpy()) for t in (r if isinstance(r, tuple) else (r,))])
    return out


def _same_as_eager(fn, args, n=3):
    c = tg.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a call that runs eagerly warns: fail on it
        got = _calls(c, args, n)
    want = _calls(fn, args, n)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and a.shape == b.shape
            # (the same draws; a fused kernel may round the arithmetic on them apart)
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert c.stats()["replays"] == n - 1, c.stats()["eager_reason"]
    return got


X = tg.tensor(np.linspace(0.05, 0.95, 12).reshape(3, 4).astype(np.float32))

CASES = {
    "rand": lambda x: x + tg.rand(3, 4),
    "randn": lambda x: x * tg.randn(3, 4, dtype=tg.float64),
    "rand_like": lambda x: x - tg.rand_like(x),
    "randn_like": lambda x: tg.randn_like(x) * 2.0,
    "randint": lambda x: x + tg.randint(0, 7, (3, 4)),
    "randint_like": lambda x: tg.randint_like(x, 3, 9),
    "randperm": lambda x: x[:, tg.randperm(4)],
    "normal": lambda x: tg.normal(x, x * 0.5),
    "normal_numbers": lambda x: x + tg.normal(0.5, 2.0, (3, 4)),
    "bernoulli": lambda x: tg.bernoulli(x),
    "bernoulli_p": lambda x: tg.bernoulli(x, 0.3),
    "poisson": lambda x: tg.poisson(x * 4.0),
    "multinomial": lambda x: tg.multinomial(x, 3),
    "dropout": lambda x: F.dropout(x, 0.4),
    "dropout1d": lambda x: F.dropout1d(x.reshape(1, 12, 1), 0.5),
    "dropout2d": lambda x: F.dropout2d(x.reshape(1, 12, 1, 1), 0.5),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.3, True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.reshape(1, 12, 1), 0.5,
                                                               True),
    "rrelu": lambda x: F.rrelu(x - 0.5, training=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_draw_replays_the_eager_draws(name):
    got = _same_as_eager(CASES[name], (X,))
    if name not in ("bernoulli", "multinomial"):  # (few outcomes: repeats can happen)
        assert not np.array_equal(got[1][0], got[2][0])  # fresh draws, not frozen ones


def test_a_draw_with_no_inputs_is_not_a_constant():
    got = _same_as_eager(lambda: tg.rand(5), ())
    assert len({g[0].tobytes() for g in got}) == 3


def test_two_equal_draws_stay_two():
    got = _same_as_eager(lambda x: (tg.rand(4) + x, tg.rand(4) + x), (tg.zeros(4),))
    for a, b in got:
        assert not np.array_equal(a, b)


def test_an_unused_draw_still_advances_the_generator():
    # the eager call draws it: a replay must too, or every later draw shifts
    def f(x):
        tg.randn(3)
        return x * 2.0
    c = tg.compile(f)
    for _ in range(3):
        tg.manual_seed(1)
        c(X)
        after = tg.randn(2).numpy()
        tg.manual_seed(1)
        f(X)
        np.testing.assert_array_equal(after, tg.randn(2).numpy())
    assert c.stats()["replays"] == 2


def test_eager_draws_between_compiled_calls_keep_the_order():
    f = lambda x: x + tg.randn(4)  # noqa: E731
    c = tg.compile(f)

    def run(fn):
        tg.manual_seed(3)
        out = []
        for _ in range(4):
            out.append(fn(tg.zeros(4)).numpy())
            out.append(tg.rand(2).numpy())  # an eager draw between calls
        return out
    for a, b in zip(run(c), run(f)):
        np.testing.assert_array_equal(a, b)
    assert c.stats()["replays"] == 3


def test_reparameterised_gradients_through_a_compiled_step():
    # a VAE's sampling step, the whole training step compiled: values, gradients
    # and the parameters after each update equal eager's
    def make():
        tg.manual_seed(0)
        return nn.Linear(6, 4), nn.Linear(2, 6)

    def step_of(enc, dec, opt):
        def step(x):
            h = enc(x)
            mu, logvar = h[:, :2], h[:, 2:]
            z = mu + tg.randn_like(mu) * (0.5 * logvar).exp()
            rec = ((dec(z) - x) ** 2).mean()
            kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp()).mean()
            loss = rec + kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return step

    x = tg.tensor(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))
    runs = []
    for compiled in (False, True):
        enc, dec = make()
        opt = tg.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-2)
        step = step_of(enc, dec, opt)
        step = tg.compile(step) if compiled else step
        tg.manual_seed(9)
        losses = [step(x).item() for _ in range(4)]
        runs.append((losses, [p.detach().numpy().copy() for p in enc.parameters()]))
        if compiled:
            assert step.stats()["replays"] == 3, step.stats()["eager_reason"]
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    assert len(set(runs[1][0])) == 4
    for a, b in zip(runs[1][1], runs[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


class _Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        return h + 0.1 * tg.randn_like(h) * h


def test_compiled_module_with_a_draw_backward_outside():
    # model = tg.compile(model), backward outside: the backward reads the forward's
    # draws (the same noise), and each call draws fresh noise
    x = tg.tensor(np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32))
    res = []
    for compiled in (False, True):
        tg.manual_seed(0)
        m = _Noisy()
        run = tg.compile(m) if compiled else m
        tg.manual_seed(4)
        outs, grads = [], []
        for _ in range(3):
            m.zero_grad()
            y = run(x)
            (y ** 2).sum().backward()
            outs.append(y.detach().numpy().copy())
            grads.append(m.lin.weight.grad.numpy().copy())
        res.append((outs, grads))
        if compiled:
            assert run.stats()["eager_calls"] == 0, run.stats()["eager_reason"]
    for a, b in zip(res[1][0] + res[1][1], res[0][0] + res[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(res[1][0][1], res[1][0][2])


def test_named_tuple_results_replay():
    # (tg.max with a dim returns values and indices as a named tuple)
    c = tg.compile(lambda x: tg.max(x * 2.0, dim=0))
    x = tg.tensor([[1.0, 5.0], [3.0, 2.0]], requires_grad=True)
    for _ in range(3):
        x.grad = None
        r = c(x)
        assert type(r).__name__ == "max" and r.indices.tolist() == [1, 0]
        r.values.sum().backward()
        assert r.values.tolist() == [6.0, 10.0]
        assert x.grad.tolist() == [[0.0, 2.0], [2.0, 0.0]]
    assert c.stats()["eager_calls"] == 0


def test_named_tuple_results_of_a_compiled_module():
    class M(nn.Module):
        def forward(self, x):
            return tg.sort(x * 2.0, dim=1)
    c = tg.compile(M())
    x = tg.tensor([[3.0, 1.0, 2.0]], requires_grad=True)
    for _ in range(3):
        r = c(x)
        assert r.indices.tolist() == [[1, 2, 0]] and r.values.tolist() == [[2.0, 4.0, 6.0]]
    assert c.stats()["eager_calls"] == 0


def test_a_given_generator_runs_eagerly_with_its_own_draws():
    gen = tg.Generator().manual_seed(0)
    c = tg.compile(lambda x: tg.bernoulli(x, generator=gen))
    with pytest.warns(RuntimeWarning, match="generator it was given"):
        got = [c(X).numpy() for _ in range(3)]
    gen.manual_seed(0)
    want = [tg.bernoulli(X, generator=gen).numpy() for _ in range(3)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert c.stats()["replays"] == 0
