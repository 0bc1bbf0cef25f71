"""``tg.testing.pair_test``: every op with a PyTorch oracle, paired with it on its
first sample (forward, vjp, jvp, vjp of vjp; every fourth op in the main suite, all
in the exhaustive tier); a wrong reference is reported, per
sample and check; a custom op paired with its PyTorch version, and with JAX's."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import pair_test

torch = pytest.importorskip("torch")

# empty and empty_like hold whatever memory held (torch.empty's too): no values to pair
OPS = [op for op in tg.ops_registry.list_ops() if op.torch is not None
       and op.name not in ("empty", "empty_like")]
# (op, check) pairs left out, each for a reason of the reference, not of the op:
# cholesky's input is symmetric; PyTorch's jvp reads a non-symmetric tangent's lower
# triangle only, tapegrad's the whole tangent, so a random tangent has no one answer
EXCLUDED = {("linalg_cholesky", "jvp"), ("cholesky", "jvp"),
            # PyTorch has no forward-mode formula for index_reduce (NotImplementedError);
            # tests/ops/test_jvp.py checks ours against central differences
            ("index_reduce", "jvp"),
            # likewise none for ormqr and segment_reduce, and no double backward for
            # segment_reduce (_segment_reduce_backward has no derivative); ours are checked
            # against central differences (test_jvp.py, the registry's gradgradcheck)
            ("ormqr", "jvp"), ("segment_reduce", "jvp"), ("segment_reduce", "vjp_of_vjp"),
            # sparse COO tensors have no forward mode in PyTorch ("Cannot access data
            # pointer of Tensor that doesn't have storage"), and PyTorch's double backward
            # of sparse.mm drops the values gradient's dependence on mat2 and on the
            # cotangent (None / a constant where the derivative of the sampled product
            # g[r] . mat2[c] is not); ours are checked against central differences
            ("sparse_mm", "jvp"), ("sparse_coo_to_dense", "jvp"), ("sparse_mm", "vjp_of_vjp")}


def _differentiable_oracle(op, s):
    """Whether PyTorch differentiates the op's oracle (not so for an oracle that calls
    one of PyTorch's backward functions): else only the forward is paired."""
    args = [torch.from_numpy(np.array(a, copy=True)).requires_grad_(a.dtype.kind == "f")
            if isinstance(a, np.ndarray) else a for a in s.args]
    outs = op.torch(torch, *args, **s.attrs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    return any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs)


# every fourth op runs in the main suite (test_registry and test_jvp compare every op
# with PyTorch there already), the others in the exhaustive tier (marked slow)
@pytest.mark.parametrize("op", [pytest.param(op, id=op.name,
                                             marks=() if k % 4 == 0 else pytest.mark.slow)
                                for k, op in enumerate(OPS)])
def test_every_op_pairs_with_pytorch(op):
    s = op.samples(np.float64)[:1]
    checks = [c for c in ("forward", "vjp", "jvp", "vjp_of_vjp")
              if (op.name, c) not in EXCLUDED]
    if not _differentiable_oracle(op, s[0]):
        checks = ["forward"]
    report = pair_test(op, lambda *a, **k: op.torch(torch, *a, **k), samples=s,
                       checks=checks)
    assert report.rows and report.ok


def test_a_wrong_reference_is_reported_per_sample_and_check():
    report = pair_test("sin", torch.cos, raise_on_error=False)
    assert not report.ok
    bad = {(k, c) for k, c, _, _, ok, _ in report.rows if not ok}
    assert (0, "forward") in bad and (0, "vjp") in bad
    with pytest.raises(AssertionError, match="pair_test sin vs torch"):
        pair_test("sin", torch.cos)


def test_custom_op_pairs_with_torch_and_jax():
    cube = tg.custom_op("pair_cube", lambda x: x ** 3, lambda g, x: g * 3 * x * x,
                        jvp=lambda ts, x: (ts[0] * 3 * x * x,))
    try:
        samples = [((np.linspace(-1, 1, 5),), {}), ((np.ones((2, 3)) * 0.5,), {})]
        r = pair_test(cube.op, lambda x: x ** 3, samples=samples)
        assert len(r.rows) == 8 and r.ok
        jax = pytest.importorskip("jax")
        old = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            assert pair_test(cube.op, lambda x: x ** 3, framework="jax", samples=samples).ok
        finally:
            jax.config.update("jax_enable_x64", old)
        wrong = pair_test(cube.op, lambda x: x ** 3 + 1e-3 * x, samples=samples,
                          raise_on_error=False)
        assert not wrong.ok and "BAD" in str(wrong)
    finally:
        tg.ops_registry.unregister("pair_cube")


def test_an_op_without_samples_is_refused_not_passed():
    """A custom or imported op declares no samples by default: pairing nothing must
    not read as a pass."""
    from tapegrad.interop import from_torch
    f = from_torch(lambda a: torch.tanh(a) * 2, name="pair_no_samples")
    try:
        with pytest.raises(ValueError, match="pair_test pair_no_samples: the op declares no "
                                             "samples; pass samples="):
            pair_test(f.op, lambda a: torch.tanh(a) * 2)
        r = pair_test(f.op, lambda a: torch.tanh(a) * 2, samples=[((np.linspace(-1, 1, 4),), {})])
        assert [c for _, c, *_ in r.rows] == ["forward", "vjp", "jvp", "vjp_of_vjp"] and r.ok
    finally:
        tg.ops_registry.unregister("pair_no_samples")
