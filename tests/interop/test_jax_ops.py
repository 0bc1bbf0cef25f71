"""``tapegrad.interop.jax_ops()``: registry ops as JAX functions. A representative
set (every family: elementwise, broadcasting, reductions, shapes, indexing, linear
algebra, convolution and pooling, activations, softmax) passes
``jax.test_util.check_grads`` to second order, under ``jax.jit``; forwards agree with
tapegrad's; ``jax.vmap`` and nested ``jax.grad`` work; bad input raises the op's error.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.dispatch import bind

jax = pytest.importorskip("jax")
from jax.test_util import check_grads  # noqa: E402

F64 = np.dtype(np.float64)
# across the families (one sample each, the smallest); all 130 differentiable ops were
# checked so too, outside CI (about 9 minutes); CI keeps this set
REPRESENTATIVE = ["add", "mul", "div", "pow", "maximum", "exp", "tanh", "sigmoid", "where",
                  "sum", "mean", "amax", "logsumexp", "var", "cumsum", "prod",
                  "reshape", "permute", "cat", "pad", "flip",
                  "getitem", "gather", "index_select", "masked_fill",
                  "matmul", "einsum", "linalg_inv", "linalg_det",
                  "conv2d", "max_pool2d", "avg_pool2d", "linear",
                  "softmax", "log_softmax", "gelu", "softplus", "embedding",
                  # adjoints once built from host copies (scatter_reduce's weights, the
                  # LU pivots' permutation), and composites (made of exported ops: their
                  # gradients and jvps are those ops')
                  "scatter_reduce", "index_reduce", "linalg_lu_factor", "lu", "mse_loss"]
# the second-order checks of one op per family run in the main suite, the rest of the
# set's in the exhaustive tier (marked slow)
MAIN_SECOND_ORDER = {"add", "exp", "sum", "permute", "getitem", "matmul", "conv2d",
                     "softmax", "lu", "mse_loss"}


def _tiered(names, main):
    return [pytest.param(n, marks=() if n in main else pytest.mark.slow) for n in names]


@pytest.fixture(scope="module", autouse=True)
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


@pytest.fixture(scope="module")
def ns(x64):
    from tapegrad.interop import jax_ops
    return jax_ops()


def _is_array(a):
    return isinstance(a, np.ndarray)


def _sample(op):
    cands = [s for s in op.samples(F64) if s.grad and any(
        _is_array(a) and a.dtype.kind == "f" for a in s.args)
        and all(a.size for a in s.args if _is_array(a))]
    return min(cands, key=lambda s: sum(a.size for a in s.args if _is_array(a)))


def _fn(ns, op, s):
    jnp = jax.numpy
    args = [jnp.asarray(a) if _is_array(a) else a for a in s.args]
    pos = [i for i, a in enumerate(s.args) if _is_array(a) and a.dtype.kind == "f"]

    def fn(*ts):
        full = list(args)
        for i, t in zip(pos, ts):
            full[i] = t
        outs = getattr(ns, op.name)(*full, **s.attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        outs = tuple(o for o in outs if jnp.issubdtype(o.dtype, jnp.floating))
        return outs[0] if len(outs) == 1 else outs

    return fn, tuple(args[i] for i in pos)


def test_representative_set_covers_every_family():
    mods = {tg.ops_registry.get(n).kernel.__module__.split(".")[-1] for n in REPRESENTATIVE
            if hasattr(tg.ops_registry.get(n).kernel, "__module__")}
    assert len(REPRESENTATIVE) >= 30 and len(mods) >= 4


@pytest.mark.parametrize("name", _tiered(REPRESENTATIVE, MAIN_SECOND_ORDER))
def test_check_grads_order_2_under_jit(ns, name):
    op = tg.ops_registry.get(name)
    s = _sample(op)
    fn, primals = _fn(ns, op, s)
    expected = bind(op, *[tg.tensor(a) if _is_array(a) else a for a in s.args], **s.attrs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = fn(*primals)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, [e for e in expected if e.dtype.is_floating_point]):
        np.testing.assert_allclose(np.asarray(g), e.detach().numpy(), rtol=1e-10, atol=1e-12)
    check_grads(jax.jit(fn), primals, order=2, modes=["rev"], atol=1e-5, rtol=1e-3)


def test_grad_nests_and_vmap(ns):
    jnp = jax.numpy
    x = jnp.array([0.3, -0.7, 1.1])

    def f(s):  # sum(sin(x s) x s), through the export
        v = ns.mul(x, s)
        return ns.sum(ns.mul(ns.sin(v), v), dim=None, keepdim=False)

    d3 = jax.grad(jax.grad(jax.grad(f)))(0.4)
    ref = jax.grad(jax.grad(jax.grad(lambda s: jnp.sum(jnp.sin(x * s) * x * s))))(0.4)
    np.testing.assert_allclose(d3, ref, rtol=1e-10)
    xs = jnp.asarray(np.random.default_rng(0).random((4, 3, 5)))
    w = jnp.asarray(np.random.default_rng(1).random((5, 2)))
    got = jax.vmap(lambda a: ns.matmul(a, w))(xs)
    np.testing.assert_allclose(got, np.einsum("bij,jk->bik", np.asarray(xs), np.asarray(w)),
                               rtol=1e-12)
    gv = jax.vmap(jax.grad(lambda a: ns.sum(ns.tanh(a), dim=None, keepdim=False)))(xs)
    np.testing.assert_allclose(gv, 1 - np.tanh(np.asarray(xs)) ** 2, rtol=1e-12)


def test_bad_input_and_dynamic_ops(ns):
    jnp = jax.numpy
    with pytest.raises(RuntimeError, match="matmul: shapes"):
        ns.matmul(jnp.ones((2, 3)), jnp.ones((2, 3)))
    with pytest.raises(TypeError, match="add: argument 'other' must be a JAX array"):
        ns.add(jnp.ones(3), object())
    with pytest.raises(RuntimeError, match="nonzero: its output size depends on the data"):
        ns.nonzero(jnp.ones(3))


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_forward_mode_jvp_under_jit(ns, name):
    """``jax.jvp`` through the export runs the registry's jvp rule (with the exported
    ops): under ``jax.jit`` it agrees with tapegrad's own forward mode on the sample."""
    op = tg.ops_registry.get(name)
    s = _sample(op)
    fn, primals = _fn(ns, op, s)
    rng = np.random.default_rng(0)
    tangents = tuple(jax.numpy.asarray(rng.standard_normal(p.shape)) for p in primals)
    _, got = jax.jit(lambda p, t: jax.jvp(fn, p, t))(primals, tangents)
    got = got if isinstance(got, tuple) else (got,)

    targs = [tg.tensor(a) if _is_array(a) else a for a in s.args]
    pos = [i for i, a in enumerate(s.args) if _is_array(a) and a.dtype.kind == "f"]

    def tfn(*ts):
        full = list(targs)
        for i, t in zip(pos, ts):
            full[i] = t
        outs = bind(op, *full, **s.attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(o for o in outs if o.dtype.is_floating_point)

    _, expected = tg.functional.jvp(tfn, tuple(targs[i] for i in pos),
                                    tuple(tg.tensor(np.asarray(t)) for t in tangents))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e.detach().numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{name}: jax.jvp through the export")


# forward-over-forward, forward-over-reverse: slow (JAX's numerical checks call back to
# the host many times); one op of each kind of rule keeps CI time reasonable (exp and
# sum in the main suite, mul and softmax in the exhaustive tier)
FWD_CHECKED = ["mul", "exp", "sum", "softmax"]


@pytest.mark.parametrize("name", _tiered(FWD_CHECKED, {"exp", "sum"}))
def test_check_grads_fwd_and_rev_order_2(ns, name):
    op = tg.ops_registry.get(name)
    fn, primals = _fn(ns, op, _sample(op))
    check_grads(fn, primals, order=2, modes=["fwd", "rev"], atol=1e-5, rtol=1e-3)


def test_jacfwd_hessian_and_vmapped_jvp(ns):
    jnp = jax.numpy
    x = jnp.array([0.3, -0.7, 1.1])

    def f(v):  # sin(v * v) * v, through the export
        return ns.mul(ns.sin(ns.mul(v, v)), v)

    def ref(v):
        return jnp.sin(v * v) * v

    np.testing.assert_allclose(jax.jacfwd(f)(x), jax.jacfwd(ref)(x), rtol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(f)(x), jax.jacrev(f)(x), rtol=1e-12)
    np.testing.assert_allclose(jax.hessian(lambda v: ns.sum(f(v), dim=None, keepdim=False))(x),
                               jax.hessian(lambda v: jnp.sum(ref(v)))(x), rtol=1e-10)
    xs = jnp.stack([x, 2 * x])
    got = jax.jit(jax.vmap(lambda v: jax.jvp(f, (v,), (jnp.ones(3),))[1]))(xs)
    np.testing.assert_allclose(got, jax.vmap(lambda v: jax.jvp(ref, (v,), (jnp.ones(3),))[1])(xs),
                               rtol=1e-12)


class _FakeCuda:
    """A DLPack producer that says it lives on a CUDA device (none is needed)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):  # pragma: no cover - never reached: refused first
        raise AssertionError("the export read a CUDA array")


def test_bad_device_and_refused_dtype(ns):
    jnp = jax.numpy
    with pytest.raises(RuntimeError, match="mul: input 'other' is on cuda.*CPU"):
        ns.mul(jnp.ones(3), _FakeCuda())
    with pytest.raises(TypeError, match="conv2d"):  # integer input: the op refuses the dtype
        ns.conv2d(jnp.ones((1, 1, 3, 3), jnp.int32), jnp.ones((1, 1, 1, 1), jnp.int32), None)
    with pytest.raises(TypeError, match="conv2d"):  # and inside jax.jit, at trace time
        jax.jit(lambda a: ns.conv2d(a, jnp.ones((1, 1, 1, 1), jnp.int32), None))(
            jnp.ones((1, 1, 3, 3), jnp.int32))


def test_composite_reading_traced_values_runs_as_one_callback(ns):
    """A composite that reads its input's values on the host (binary_cross_entropy
    checks its range) cannot be traced through its ops (jax.jit, jax.grad): it runs
    as one host callback, with the right values, and a gradient says why it has none."""
    jnp = jax.numpy
    p = np.array([0.2, 0.7, 0.9])
    t = np.array([0.0, 1.0, 1.0])
    want = tg.nn.functional.binary_cross_entropy(tg.tensor(p), tg.tensor(t)).item()
    got = jax.jit(lambda a, b: ns.binary_cross_entropy(a, b))(jnp.asarray(p), jnp.asarray(t))
    np.testing.assert_allclose(float(got), want, rtol=1e-12)
    np.testing.assert_allclose(float(ns.binary_cross_entropy(jnp.asarray(p), jnp.asarray(t))),
                               want, rtol=1e-12)
    with pytest.raises(NotImplementedError, match="binary_cross_entropy: no gradient"):
        jax.grad(lambda a: ns.binary_cross_entropy(a, jnp.asarray(t)))(jnp.asarray(p))


def test_random_composite_draws_anew_under_jit(ns):
    """A composite that draws random numbers (dropout) runs as one host callback, so a
    jitted function draws afresh per call (a draw made while tracing would repeat)."""
    f = jax.jit(lambda a: ns.dropout(a, p=0.5, training=True))
    x = jax.numpy.ones(64)
    a, b = np.asarray(f(x)), np.asarray(f(x))
    assert set(np.unique(a)) <= {0.0, 2.0} and not np.array_equal(a, b)


def test_composite_whose_ops_depend_on_values_is_right_under_jit(ns):
    """matrix_exp picks its number of squarings from its input's norm: traced through
    its ops under jax.jit it would pick them from stand-in values (a silently wrong
    result); dry runs on other values see the ops differ, so it runs as one callback,
    exact. Index arithmetic on a concrete index (index_reduce spreading its index) and
    a traced index (median's, from a sort) do not stop a composite being traced."""
    jnp = jax.numpy
    a = np.random.default_rng(0).standard_normal((3, 3)) * 2
    want = tg.matrix_exp(tg.tensor(a)).numpy()
    np.testing.assert_allclose(np.asarray(jax.jit(ns.matrix_exp)(jnp.asarray(a))), want,
                               rtol=1e-13, atol=1e-13)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((3, 5)))
    g = jax.jit(jax.grad(lambda v: ns.sum(ns.median(v, dim=1).values ** 2)))(x)
    xv = np.asarray(x)
    want = np.zeros_like(xv)
    k = np.argsort(xv, axis=1)[:, 2]
    want[np.arange(3), k] = 2 * xv[np.arange(3), k]
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-12)
