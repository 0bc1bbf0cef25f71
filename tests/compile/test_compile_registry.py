"""Registry-driven: every op's float64 samples, compiled (forward and backward, the
sample's gradient flag permitting), captured on the sample and replayed on the same
and on perturbed values, equal eager, values and gradients (every sample of every op
in the exhaustive tier; in the main suite, the first sample of one op of each kind of
declaration, REPRESENTATIVES)."""
import os
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind

OPS = tg.ops_registry.list_ops()
PACKAGE = os.path.dirname(tg.__file__)
# whatever memory held (as torch.empty): compared by shape only
VALUES_UNSPECIFIED = {"empty", "empty_like"}
# composites whose programs tg.compile runs eagerly (correct, not compiled): the
# factories that make their tensor from data (tensor, as_tensor, from_numpy, ...) or
# leave its values unspecified (empty, empty_like). The set is exact: one that starts
# replaying must leave it. (The second replay gets new values: floats scaled, integer
# and bool arrays reversed; a guard that fails there, as matrix_exp's on the norm that
# picks its squarings, captures again.) (The random factories and sampling ops,
# dropouts and rrelu replay: each draw is a step of the program that draws from the
# global generator again.)
EAGER = set("""empty empty_like
tensor as_tensor asarray from_numpy from_dlpack
""".split())
# (Constants a composite makes
# from Python values (class ranges, position tables, adaptive pooling's bin matrices)
# are marked so (``creation._constant``), and its checks on argument values read
# through ops under a capture (``ops/_checks.py``), so those replay. A factory
# of Python values alone (zeros, ones, full and their _like forms, arange, range,
# linspace, logspace, eye, tril_indices, triu_indices; sdpa's causal mask,
# affine_grid's base grid) is a constant of the program, copied afresh by each replay
# where the program returns it or writes into it.)


def _tensors(args, scale, grad):
    """The sample's arrays as tensors; ``scale`` != 1: floats scaled, integer and bool
    arrays reversed (an index, a mask, a length: a replay that kept the captured
    values shows)."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            if a.dtype.kind == "f":
                v = a * scale
            elif scale != 1.0 and a.size > 1:
                v = a.reshape(-1)[::-1].reshape(a.shape).copy()
            else:
                v = a.copy()
            t = tg.tensor(v)
            if grad and a.dtype.kind == "f":
                t.requires_grad_()
            out.append(t)
        else:
            out.append(a)
    return out


def _program(op, attrs, grad):
    def fn(*ts):
        out = bind(op, *ts, **attrs)
        outs = out if isinstance(out, tuple) else (out,)
        if grad:
            loss = None
            for k, o in enumerate(outs):
                if isinstance(o, tg.Tensor) and o.requires_grad:
                    term = (o * (1.0 + 0.25 * k)).sum()
                    loss = term if loss is None else loss + term
            if loss is not None:
                loss.backward()
        return tuple(o.detach() if isinstance(o, tg.Tensor) else o for o in outs)
    return fn


def _run(f, args, scale, grad):
    ts = _tensors(args, scale, grad)
    outs = f(*ts)
    grads = [t.grad.numpy() if isinstance(t, tg.Tensor) and t.grad is not None else None
             for t in ts]
    return [o.numpy() if isinstance(o, tg.Tensor) else o for o in outs] + grads




def _declaration_kind(op):
    """What the compiler tells ops apart by (kind, outputs, takes_out, elementwise, an
    expression for the fuser), with the declaring module, composite and differentiable:
    one op of each is the main suite's sample of the registry."""
    return (os.path.relpath(op.declared_at[0], PACKAGE), op.kind, op.nout, bool(op.composite),
            bool(op.differentiable), bool(op.takes_out), bool(op.elementwise),
            op.expr is not None)


def _representatives():
    first = {}
    for op in OPS:
        if op.samples:
            first.setdefault(_declaration_kind(op), op)
    return list(first.values())


# the main suite compiles the first sample of REPRESENTATIVES (the first op of each
# declaration kind, in the registry's order: the same ops every run), in SHARDS parts
# that the xdist workers share; the exhaustive tier (marked slow) every sample of every
# op (most of the sweep's cost is the first-call compile of the ops' kernels), and
# checks that EAGER is exact
REPRESENTATIVES = _representatives()
SHARDS = 2


@pytest.mark.parametrize("every_sample, shard",
                         [(False, k) for k in range(SHARDS)]
                         + [pytest.param(True, None, marks=pytest.mark.slow)],
                         ids=[f"representatives-{k}" for k in range(SHARDS)]
                         + ["every-sample"])
def test_every_op_sample_compiles_and_replays_equal_to_eager(every_sample, shard):
    mismatched, not_replayed, total, eager = [], [], 0, set()
    for op in (OPS if shard is None else REPRESENTATIVES[shard::SHARDS]):
        samples = list(op.samples(np.float64)) if op.samples else []
        for k, s in enumerate(samples if every_sample else samples[:1]):
            total += 1
            grad = op.differentiable and s.grad and any(
                isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in s.args)
            fn = _program(op, dict(s.attrs), grad)
            c = tg.compile(fn, fuse=False)
            replayed = None
            try:
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    _run(c, s.args, 1.0, grad)  # the capture
                for scale in (1.0, 1.01):
                    rng = tg.get_rng_state()  # a random op: the same draw in both runs
                    try:
                        got, err = _run(c, s.args, scale, grad), None
                    except Exception as e:  # noqa: BLE001
                        got, err = None, e
                    if replayed is None:
                        replayed = c.stats()["replays"]
                    tg.set_rng_state(rng)
                    try:
                        want = _run(fn, s.args, scale, grad)
                    except Exception:  # noqa: BLE001
                        if scale == 1.0:
                            raise
                        continue  # (reversed integers this op refuses eagerly too)
                    if err is not None:
                        raise err
                    for a, b in zip(got, want):
                        assert (a is None) == (b is None)
                        if a is not None and op.name in VALUES_UNSPECIFIED:
                            assert np.shape(a) == np.shape(b)
                        elif a is not None:
                            np.testing.assert_allclose(np.asarray(a, float),
                                                       np.asarray(b, float), rtol=1e-10,
                                                       atol=1e-12, equal_nan=True)
            except AssertionError as e:
                mismatched.append(f"{op.name} sample {k}: {str(e)[:300]}")
                continue
            if replayed != 1:
                eager.add(op.name)
                if op.name not in EAGER:
                    not_replayed.append(f"{op.name} sample {k}: "
                                        f"{[str(m.message)[:200] for m in w]}")
    assert not mismatched, "\n".join(mismatched)
    # a program that cannot be replayed runs eagerly (correct, but not compiled)
    assert not not_replayed, "\n".join(not_replayed)
    if every_sample:
        assert EAGER <= eager, f"these replay now, take them off EAGER: {sorted(EAGER - eager)}"
    assert total > (500 if every_sample else len(REPRESENTATIVES) // SHARDS - 1)
