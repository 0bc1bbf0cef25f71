"""Registry-driven vmap: batching rules cover at least 90% of the ops, and every
rule agrees with running the op example by example.

For each op with a rule (declared ``OpDef.vmap`` or derived for elementwise and
broadcasting ops) and each of its samples, a batch of three examples is made from
the sample (float inputs perturbed per example, others repeated) and
``tg.vmap(op)`` is compared with the op applied to each example and stacked, with
every input batched, with only the first one batched, and with only the last one,
and with the batch at a dim other than 0. Random ops run with ``randomness="same"``,
each example of the loop and the vmapped call from one state of the generator (the
same draw for every example, as "same" means); ``empty``'s values are unspecified
(compared by shape only). The main suite checks each op's first sample; the
exhaustive tier (``-m slow``) the others.
"""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind
from tapegrad.vmap import batching_rule_of

OPS = tg.ops_registry.list_ops()
F64 = np.dtype(np.float64)
B = 3
VALUES_UNSPECIFIED = {"empty", "empty_like"}  # whatever memory held, as torch.empty


def test_rule_coverage_is_at_least_90_percent():
    missing = sorted(op.name for op in OPS if batching_rule_of(op) is None)
    covered = 1 - len(missing) / len(OPS)
    assert covered >= 0.9, f"{covered:.0%} of ops have a batching rule; missing: {missing}"


def _is_tensor_arg(a):
    return isinstance(a, np.ndarray)


def _examples(args, seed):
    """B examples of each array argument: floats perturbed, others repeated."""
    rng = np.random.default_rng(seed)
    out = []
    for a in args:
        if _is_tensor_arg(a) and a.dtype.kind == "f":
            out.append([a + 0.01 * k * rng.standard_normal(a.shape).astype(a.dtype)
                        for k in range(B)])
        elif _is_tensor_arg(a):
            out.append([a.copy() for _ in range(B)])
        else:
            out.append(None)
    return out


def _patterns(args):
    pos = [i for i, a in enumerate(args) if _is_tensor_arg(a)]
    pats = [tuple(pos)]
    if len(pos) > 1:
        pats += [(pos[0],), (pos[-1],)]
    return pats


def _params():
    """Each op's samples, each with its batched-argument patterns: the patterns of the
    op's first sample run in the main suite, the others in the exhaustive tier (marked
    slow)."""
    out = []
    for op in OPS:
        if batching_rule_of(op) is None or op.kind == "dynamic":
            continue
        first = None
        for k, s in enumerate(op.samples(F64) if op.samples else ()):
            if not any(_is_tensor_arg(a) and a.ndim >= 0 for a in s.args):
                continue
            first = k if first is None else first
            for pat in _patterns(s.args):
                tag = "all" if len(pat) > 1 or len(_patterns(s.args)) == 1 else f"arg{pat[0]}"
                out.append(pytest.param(op, s, pat, id=f"{op.name}-sample{k}-{tag}",
                                        marks=() if k == first else pytest.mark.slow))
    return out


def _np(t):
    return np.asarray(t.detach())


@pytest.mark.parametrize("op,sample,batched", _params())
def test_rule_matches_the_loop(op, sample, batched):
    args, attrs = list(sample.args), sample.attrs
    ex = _examples(args, 0)
    expected = []
    rng = tg.get_rng_state()
    for b in range(B):
        tg.set_rng_state(rng)
        call = [tg.tensor(ex[i][b]) if i in batched else
                (tg.tensor(a) if _is_tensor_arg(a) else a) for i, a in enumerate(args)]
        res = bind(op, *call, **attrs)
        expected.append([_np(r) for r in (res if isinstance(res, tuple) else (res,))])
    # the batch at dim 0 for the first batched input, at its last dim for the others
    in_dims, vals = [], []
    for i, a in enumerate(args):
        if i in batched:
            stacked = np.stack(ex[i])
            d = 0 if i == batched[0] or stacked.ndim == 1 else stacked.ndim - 1
            vals.append(tg.tensor(np.moveaxis(stacked, 0, d)))
            in_dims.append(d)
        else:
            vals.append(tg.tensor(a) if _is_tensor_arg(a) else a)
            in_dims.append(None)

    def f(*xs):
        return bind(op, *xs, **attrs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a loop fallback fails the test
        try:
            tg.set_rng_state(rng)
            got = tg.vmap(f, in_dims=tuple(in_dims), randomness="same")(*vals)
        except RuntimeWarning as w:
            if "loop over the batch" in str(w):
                pytest.fail(f"{op.name}'s rule fell back to a loop for this call: {w}")
            raise
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected[0])
    for k, g in enumerate(got):
        want = np.stack([e[k] for e in expected])
        assert tuple(g.shape) == want.shape, f"{op.name} output {k}"
        if op.name in VALUES_UNSPECIFIED:
            continue
        np.testing.assert_allclose(_np(g), want, rtol=1e-10, atol=1e-12)
