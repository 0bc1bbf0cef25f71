"""tg.compile and an argument that is a dict or a list of plain values (a config, the
scales of a step): a replay must not take one whose numbers changed, or a new one
created at a freed one's address, for the one captured (its program holds the
captured numbers): each call's result is the eager call's."""
import warnings

import numpy as np

import tapegrad as tg


class _Cfg:
    def __init__(self, s):
        self.s = s

    def scale(self, x):
        return x * self.s


def _results(c, calls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [float(c(*args)) for args in calls]


def test_a_dict_of_numbers_per_call_and_the_same_dict_changed():
    def f(x, d):
        return (x * d["s"]).sum()

    x = tg.ones(3)
    values = (2.0, 2.0, 3.0, 3.0, 5.0, -0.0, 0.0)
    want = [3 * v for v in values]
    assert _results(tg.compile(f), [(x, {"s": v}) for v in values]) == want
    d = {"s": 0.0}

    def calls():
        for v in values:
            d["s"] = v
            yield x, d
    assert _results(tg.compile(f), calls()) == want


def test_a_list_and_an_object_in_a_dict():
    def f(x, scales, d):
        return d["cfg"].scale(x * scales[0]).sum()

    x = tg.tensor(np.arange(3.0))
    cases = [(2.0, 1.0), (2.0, 1.0), (3.0, 1.0), (3.0, 4.0), (3.0, 4.0)]
    got = _results(tg.compile(f), [(x, [a], {"cfg": _Cfg(b)}) for a, b in cases])
    assert got == [3.0 * a * b for a, b in cases]
