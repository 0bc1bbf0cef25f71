"""tg.compile and the checks on argument values: a composite whose eager call raises
on a value (a negative variance, a probability above 1, an index out of range, a
negative std) raises the same error on a replay's call, never returns a result; a
size that follows from values (one_hot's class count, a sparse tensor's inferred
size) follows each call's values. ``ops/_checks.py`` reads those values through ops
while a capture watches, so the read is a guarded one that each replay repeats."""
import warnings

import numpy as np
import pytest

import tapegrad as tg

F = tg.nn.functional


def _r(*shape, seed=0, low=-1.0, high=1.0):
    return tg.tensor(np.random.default_rng(seed).uniform(low, high, shape))


def _i(*v):
    return tg.tensor(np.array(v, np.int64))


W = _r(10, 3)
LP = tg.tensor(np.log(np.random.default_rng(3).dirichlet(np.ones(5), (6, 2))))
# name: (fn, arguments that pass the check, arguments that fail it, replays expected)
CASES = {
    "gaussian_nll_loss negative var": (
        lambda x, t, v: F.gaussian_nll_loss(x, t, v),
        (_r(4, 3), _r(4, 3, seed=1), _r(4, 3, low=0.1)),
        (_r(4, 3), _r(4, 3, seed=1), _r(4, 3, low=-1.0, high=-0.1)), True),
    "binary_cross_entropy input above 1": (
        lambda p, t: F.binary_cross_entropy(p, t),
        (_r(4, 3, low=0.1, high=0.9), _r(4, 3, low=0.0)),
        (_r(4, 3, low=1.1, high=2.0), _r(4, 3, low=0.0)), True),
    "binary_cross_entropy NaN target": (
        lambda p, t: F.binary_cross_entropy(p, t),
        (_r(3, low=0.1, high=0.9), _r(3, low=0.0)),
        (_r(3, low=0.1, high=0.9), tg.tensor([0.5, float("nan"), 0.5], dtype=tg.float64)),
        True),
    "cross_entropy target out of range": (
        lambda x, t: F.cross_entropy(x, t), (_r(3, 4), _i(0, 1, 2)), (_r(3, 4), _i(0, 1, 7)),
        True),
    "cross_entropy negative target": (
        lambda x, t: F.cross_entropy(x, t), (_r(3, 4), _i(0, 1, 2)), (_r(3, 4), _i(0, -3, 2)),
        True),
    "nll_loss target out of range": (
        lambda x, t: F.nll_loss(x, t), (_r(3, 4), _i(0, 1, 2)), (_r(3, 4), _i(0, 1, 4)), True),
    "take index out of range": (
        lambda x, i: tg.take(x, i), (_r(3), _i(0, -1)), (_r(3), _i(0, 9)), True),
    "normal negative std": (
        lambda m, s: tg.normal(m, s), (tg.zeros(3), tg.ones(3)), (tg.zeros(3), -tg.ones(3)),
        True),
    "bincount negative value": (
        lambda x: tg.bincount(x, minlength=5), (_i(0, 1, 2),), (_i(0, -1, 2),), True),
    "sparse_coo_tensor index beyond size": (
        lambda i, v: tg.sparse_coo_tensor(i, v, (3, 3)).to_dense(),
        (_i([0, 1], [1, 2]), tg.ones(2)), (_i([0, 5], [1, 2]), tg.ones(2)), True),
    "sparse_coo_tensor negative index": (
        lambda i, v: tg.sparse_coo_tensor(i, v, (3, 3)).to_dense(),
        (_i([0, 1], [1, 2]), tg.ones(2)), (_i([0, -1], [1, 2]), tg.ones(2)), True),
    "embedding_bag first offset not 0": (
        lambda i, o: F.embedding_bag(i, W, o),
        (_i(1, 2, 3, 4), _i(0, 2)), (_i(1, 2, 3, 4), _i(1, 2)), True),
    "index_reduce negative index": (
        lambda x, i, s: x.index_reduce(0, i, s, "prod"),
        (tg.ones(3), _i(0, 1), tg.ones(2) * 2), (tg.ones(3), _i(0, -1), tg.ones(2) * 2), True),
    "unravel_index out of range": (
        lambda i: tg.unravel_index(i, (2, 3))[0], (_i(0, 5),), (_i(0, 9),), True),
    "segment_reduce lengths not summing to the data": (
        lambda d, n: tg.segment_reduce(d, "sum", lengths=n),
        (tg.ones(5), _i(2, 3)), (tg.ones(5), _i(4, 3)), True),
    "segment_reduce negative length": (
        lambda d, n: tg.segment_reduce(d, "sum", lengths=n),
        (tg.ones(5), _i(2, 3)), (tg.ones(5), _i(6, -1)), True),
    "multi_margin_loss target out of range": (
        lambda x, t: F.multi_margin_loss(x, t), (_r(3, 4), _i(0, 1, 2)), (_r(3, 4), _i(0, 1, 7)),
        True),
    "ctc_loss new target lengths": (
        lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl), (LP, _i([1, 2], [3, 4]), _i(6, 6),
                                                          _i(2, 2)),
        (LP, _i([1, 2], [3, 4]), _i(6, 5), _i(2, 1)), True),
    "ctc_loss input length beyond the input": (
        lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl), (LP, _i([1, 2], [3, 4]), _i(6, 6),
                                                          _i(2, 2)),
        (LP, _i([1, 2], [3, 4]), _i(7, 6), _i(2, 2)), True),
    "ctc_loss label out of range": (
        lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl), (LP, _i([1, 2], [3, 4]), _i(6, 6),
                                                          _i(2, 2)),
        (LP, _i([1, 2], [3, 9]), _i(6, 6), _i(2, 2)), True),
    "ctc_loss concatenated targets, a longer one": (
        lambda lp, t, il, tl: F.ctc_loss(lp, t, il, tl), (LP, _i(1, 2, 3, 4), _i(6, 6),
                                                          _i(2, 2)),
        (LP, _i(1, 2, 3, 4), _i(6, 6), _i(3, 1)), True),
    # a branch on the values: adaptive pooling keeps NaN and inf in their own bins
    "adaptive_avg_pool2d with a NaN": (
        lambda x: F.adaptive_avg_pool2d(x, (4, 4)), (_r(1, 1, 6, 6),),
        (tg.tensor(np.where(np.arange(36).reshape(1, 1, 6, 6) == 7, np.nan, 1.0)),), True),
    # sizes that follow from values: a new value captures again
    "one_hot inferred classes": (
        lambda i: F.one_hot(i), (_i(0, 2, 1),), (_i(0, 3, 1),), True),
    "sparse_coo_tensor inferred size": (
        lambda i, v: tg.sparse_coo_tensor(i, v).to_dense(),
        (_i([0, 1], [1, 2]), tg.ones(2)), (_i([0, 4], [1, 2]), tg.ones(2)), True),
}


def _outcome(fn, args):
    try:
        return fn(*args), None
    except Exception as exc:  # noqa: BLE001  (the class is what is compared)
        return None, exc


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_replay_checks_the_values_the_eager_call_checks(name):
    fn, good, bad, replays = CASES[name]
    c = tg.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a call that runs eagerly says why)
        for _ in range(3):
            tg.manual_seed(0)
            c(*good)
        if replays:
            assert c.stats()["replays"] == 2, c.stats()["eager_reason"]
        tg.manual_seed(0)
        want, want_exc = _outcome(fn, bad)
        tg.manual_seed(0)
        got, got_exc = _outcome(c, bad)
    assert type(got_exc) is type(want_exc), (got_exc, want_exc)
    if want_exc is None:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        # and the good values again: the program for them still replays
        n = c.stats()["replays"]
        tg.manual_seed(0)
        np.testing.assert_array_equal(c(*good).numpy(), fn(*good).numpy())
        if replays:
            assert c.stats()["replays"] == n + 1


def test_eager_checks_read_the_array_and_captured_ones_the_tensor():
    """An eager check reads the raw array (no dispatch); under a capture (an observer)
    it reads through ops, the outcome a guard of the program."""
    from tapegrad.ops import _checks
    seen = []

    def test(v):
        seen.append(type(v))
        return v < 0
    x = _r(3)
    assert _checks.any_value(x, test) is True
    tg.compile(lambda x: x * _checks.any_value(x, test))(x)
    assert seen == [np.ndarray, tg.Tensor]
