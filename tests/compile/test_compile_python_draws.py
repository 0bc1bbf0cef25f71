"""tg.compile and the Python values a call takes from objects that change with each
read: an iterator (``next(it)``, a ``for`` loop over it) and a random generator that
is not tapegrad's (``random.random()``, ``random.uniform``, ``np.random.rand()``, a
NumPy ``Generator`` or ``RandomState`` reached as a global, a closure cell or an
attribute). A replay would repeat the captured value; such a call runs eagerly, so
every call gets the value the eager call gets."""
import itertools
import random
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

BATCHES = [tg.tensor([float(i)] * 3) for i in range(8)]
IT = iter(BATCHES)
COUNT = itertools.count()
RNG = np.random.default_rng(0)


class _Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.rng = np.random.RandomState(0)

    def forward(self, x):
        return x * self.rng.uniform()


def _gen():
    yield from range(100)


GEN = _gen()


def _noisy():
    m = _Noisy()
    return lambda x: m(x)


def _reset():
    global IT, COUNT, RNG, GEN
    IT, COUNT, RNG, GEN = iter(BATCHES), itertools.count(), np.random.default_rng(0), _gen()
    random.seed(0)
    np.random.seed(0)


CASES = {
    "next_of_a_global_iterator": lambda: lambda x: x * next(IT),
    "for_over_a_global_generator": lambda: lambda x: x * [v for v, _ in zip(GEN, range(2))][1],
    "itertools_count": lambda: lambda x: x * next(COUNT),
    "random_random": lambda: lambda x: x * random.random(),
    "random_uniform": lambda: lambda x: x * random.uniform(0.0, 1.0),
    "numpy_global": lambda: lambda x: x * np.random.rand(),
    "numpy_generator": lambda: lambda x: x * RNG.standard_normal(),
    "randomstate_attribute": _noisy,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_drawn_from_python_state_is_drawn_by_every_call(case):
    _reset()
    fn = CASES[case]()
    cf = tg.compile(fn)
    x = tg.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (runs eagerly, with a warning)
        got = [cf(x).numpy() for _ in range(4)]
    _reset()
    fn = CASES[case]()
    want = [fn(x).numpy() for _ in range(4)]
    np.testing.assert_array_equal(np.array(got), np.array(want))
    assert len({float(w[0]) for w in want}) == 4  # (each call drew another value)
    s = cf.stats()
    assert s["replays"] == 0 and "side effects" in s["eager_reason"], s


def test_a_local_iterator_still_replays():
    lin = nn.Linear(3, 3)

    def f(x):
        w = next(iter(lin.parameters()))  # (a common idiom: the first parameter)
        return lin(x) * float(w.shape[0])
    cf = tg.compile(f)
    x = tg.ones(2, 3)
    with tg.no_grad():
        for _ in range(3):
            np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
    assert cf.stats()["replays"] == 2
