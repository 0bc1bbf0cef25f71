"""``tg.Generator`` and ``generator=`` on every random function: a generator's stream
is its own (reproducible from its seed or saved state) and leaves the global one alone,
as ``torch.Generator``."""
import numpy as np
import pytest

import tapegrad as tg

DRAWS = {
    "rand": lambda g: tg.rand(3, 2, generator=g),
    "randn": lambda g: tg.randn(4, generator=g),
    "randint": lambda g: tg.randint(0, 100, (5,), generator=g),
    "randperm": lambda g: tg.randperm(7, generator=g),
    "bernoulli": lambda g: tg.bernoulli(tg.full((6,), 0.5), generator=g),
    "multinomial": lambda g: tg.multinomial(tg.ones(2, 6), 3, generator=g),
    "poisson": lambda g: tg.poisson(tg.full((4,), 3.0), generator=g),
    "normal_tensors": lambda g: tg.normal(tg.zeros(3), tg.ones(3), generator=g),
    "normal_numbers": lambda g: tg.normal(0.0, 2.0, (3,), generator=g),
    "uniform_": lambda g: tg.empty(4).uniform_(-1, 1, generator=g),
    "normal_": lambda g: tg.empty(4).normal_(generator=g),
    "exponential_": lambda g: tg.empty(4).exponential_(generator=g),
    "bernoulli_": lambda g: tg.empty(4).bernoulli_(0.3, generator=g),
    "random_": lambda g: tg.empty(4).random_(0, 10, generator=g),
    "init.uniform_": lambda g: tg.nn.init.uniform_(tg.empty(3), generator=g),
    "init.kaiming_normal_": lambda g: tg.nn.init.kaiming_normal_(tg.empty(3, 4), generator=g),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_each_random_function_draws_from_the_generator(name):
    draw = DRAWS[name]
    a = draw(tg.Generator().manual_seed(123))
    b = draw(tg.Generator().manual_seed(123))
    c = draw(tg.Generator().manual_seed(124))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy()) or a.numel() <= 1
    # the global stream is not advanced by draws from a generator
    tg.manual_seed(7)
    expected = tg.rand(5).numpy()
    tg.manual_seed(7)
    draw(tg.Generator().manual_seed(1))
    np.testing.assert_array_equal(tg.rand(5).numpy(), expected)


def test_state_round_trip_and_seeds():
    g = tg.Generator()
    assert g.manual_seed(42) is g and g.initial_seed() == 42
    state = g.get_state()
    assert isinstance(state, tg.Tensor) and state.dtype == tg.uint8
    first = [d(g).numpy() for d in DRAWS.values()]
    assert g.set_state(state) is g
    again = [d(g).numpy() for d in DRAWS.values()]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    s = g.seed()
    assert g.initial_seed() == s
    assert g.device == tg.device("cpu")


def test_bad_generators_and_states():
    with pytest.raises(TypeError, match="tg.Generator"):
        tg.rand(2, generator="seed")
    with pytest.raises(RuntimeError, match="get_state"):
        tg.Generator().set_state(tg.zeros(3, dtype=tg.uint8))
    with pytest.raises(TypeError):
        tg.Generator().manual_seed(1.5)


def test_data_loading_takes_a_generator():
    ds = tg.utils.data.TensorDataset(tg.arange(10.0))

    def order(seed):
        dl = tg.utils.data.DataLoader(ds, batch_size=10, shuffle=True,
                                      generator=tg.Generator().manual_seed(seed))
        return next(iter(dl))[0].tolist()
    assert order(3) == order(3) and sorted(order(3)) == list(range(10))


def _states():
    torch = pytest.importorskip("torch")
    return [(torch.get_rng_state(), tg.get_rng_state()),
            (torch.Generator().get_state(), tg.Generator().get_state()),
            (torch.default_generator.get_state(), tg.default_generator.get_state())]


def test_states_are_uint8_tensors_as_torch():
    torch = pytest.importorskip("torch")
    for theirs, ours in _states():
        assert isinstance(theirs, torch.Tensor) and isinstance(ours, tg.Tensor)
        assert ours.dtype == tg.uint8 and theirs.dtype == torch.uint8
        assert ours.ndim == theirs.ndim == 1
        assert ours.device == tg.device("cpu") and theirs.device == torch.device("cpu")


def test_global_state_round_trip_draws_the_same_numbers():
    tg.manual_seed(11)
    tg.default_generator.integers(0, 7, size=1, dtype=np.uint32)  # a buffered half-word
    state = tg.get_rng_state()
    first = [d(None).numpy() for d in DRAWS.values()]
    half = tg.default_generator.integers(0, 2 ** 31, size=3, dtype=np.uint32)
    assert tg.set_rng_state(state) is None
    again = [d(None).numpy() for d in DRAWS.values()]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        tg.default_generator.integers(0, 2 ** 31, size=3, dtype=np.uint32), half)
    # the global stream's state and default_generator's are one
    assert tg.equal(tg.default_generator.get_state(), tg.get_rng_state())
    g = tg.Generator().set_state(tg.get_rng_state())
    np.testing.assert_array_equal(tg.rand(5, generator=g).numpy(), tg.rand(5).numpy())


def test_bad_states_raise_as_torch():
    torch = pytest.importorskip("torch")
    good = tg.get_rng_state()
    bad = {"a dict": (tg.default_generator.bit_generator.state, {}),
           "a NumPy array": (good.numpy(), torch.get_rng_state().numpy()),
           "a list": (good.tolist(), torch.get_rng_state().tolist()),
           "a float tensor": (good.float(), torch.get_rng_state().float())}
    for what, (ours, theirs) in bad.items():
        with pytest.raises(TypeError):
            torch.set_rng_state(theirs)
        with pytest.raises(TypeError, match="set_rng_state"):
            tg.set_rng_state(ours)
        with pytest.raises(TypeError, match="Generator.set_state"):
            tg.Generator().set_state(ours)
    with pytest.raises(RuntimeError):
        torch.set_rng_state(torch.get_rng_state()[:10])
    with pytest.raises(RuntimeError, match="get_rng_state"):
        tg.set_rng_state(good[:10])
    assert tg.equal(tg.get_rng_state(), good)  # a refused state leaves the generator alone
