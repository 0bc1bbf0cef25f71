"""tg.compile and the Python state inside the arguments the key holds by identity (a
user object, a NumPy array): what the call reads there is guarded as what it reads
through a global (a changed attribute, item or array value captures again), and what
it changes there is a side effect (the call runs eagerly). Each call is compared with
the eager call."""
import dataclasses
import warnings

import numpy as np
import pytest

import tapegrad as tg


class _Cfg:
    def __init__(self):
        self.scale = 2.0
        self.sizes = [1.0, 2.0]
        self.calls = 0
        self.log = []


@dataclasses.dataclass(eq=False)
class _Options:
    scale: float = 2.0


READS = {  # fn, the argument, its change
    "attribute": (lambda x, c: x * c.scale, _Cfg, lambda c: setattr(c, "scale", 3.0)),
    "list_in_an_attribute": (lambda x, c: x * sum(c.sizes), _Cfg,
                             lambda c: c.sizes.append(4.0)),
    "dataclass": (lambda x, c: x * c.scale, _Options, lambda c: setattr(c, "scale", 5.0)),
    "numpy_values": (lambda x, a: x * float(a[0]), lambda: np.array([2.0, 1.0]),
                     lambda a: a.__setitem__(0, 7.0)),
}


@pytest.mark.parametrize("case", sorted(READS))
def test_what_the_call_reads_inside_an_argument_is_guarded(case):
    fn, make, change = READS[case]
    arg = make()
    cf = tg.compile(fn)
    x = tg.ones(3)
    for _ in range(2):
        np.testing.assert_array_equal(cf(x, arg).numpy(), fn(x, arg).numpy())
    change(arg)
    for _ in range(2):
        np.testing.assert_array_equal(cf(x, arg).numpy(), fn(x, arg).numpy())
    s = cf.stats()
    assert s["captures"] == 2 and s["replays"] == 2, s
    assert "(argument of <lambda>)" in s["recaptures"][0]


def _counts(x, c):
    c.calls += 1
    return x * 2


def _logs(x, c):
    c.log.append(1)
    return x * 2


def _writes(x, a):
    a[0] += 1
    return x * 2


CHANGES = {"counter": (_counts, _Cfg, lambda c: c.calls),
           "list_append": (_logs, _Cfg, lambda c: len(c.log)),
           "numpy_write": (_writes, lambda: np.zeros(2), lambda a: float(a[0]))}


@pytest.mark.parametrize("case", sorted(CHANGES))
def test_what_the_call_changes_inside_an_argument_happens_on_every_call(case):
    fn, make, state = CHANGES[case]
    a, b = make(), make()
    cf = tg.compile(fn)
    x = tg.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (runs eagerly, with a warning)
        for _ in range(4):
            np.testing.assert_array_equal(cf(x, a).numpy(), fn(x, b).numpy())
    assert state(a) == state(b) == 4
    assert cf.stats()["replays"] == 0
