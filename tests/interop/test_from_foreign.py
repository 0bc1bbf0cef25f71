"""``from_torch`` / ``from_jax``: a PyTorch or JAX function as a registered tapegrad
op: its values, its shape rule (abstract evaluation, no data), tapegrad's gradients of
first and second order against central differences (float64), multiple outputs,
integer inputs, and the op exported again through ``torch_ops()``."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.interop import from_jax, from_torch, torch_ops
from tapegrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


@pytest.fixture
def names():
    made = []
    yield made
    for n in made:
        tg.ops_registry.unregister(n)


@pytest.fixture
def x64():
    jax = pytest.importorskip("jax")
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", old)


def _t(shape, seed, grad=True):
    return tg.tensor(np.random.default_rng(seed).uniform(-1, 1, shape), requires_grad=grad)


def test_from_torch_values_shapes_and_gradients(names):
    seen = []

    def fn(x, w, *, scale=1.0):
        seen.append(x.device.type)
        return torch.tanh(x @ w) * scale + x.sum() ** 2

    f = from_torch(fn, name="it_tanh_mm")
    names.append("it_tanh_mm")
    assert tg.ops_registry.get("it_tanh_mm") in tg.ops_registry.list_ops()
    x, w = _t((2, 3), 0), _t((3, 4), 1)
    y = f(x, w, scale=0.5)
    assert "meta" in seen, "the shape rule did not run the function on meta tensors"
    expected = fn(torch.from_numpy(x.detach().numpy()), torch.from_numpy(w.detach().numpy()),
                  scale=0.5)
    np.testing.assert_allclose(y.detach().numpy(), expected.numpy(), rtol=1e-12)
    assert gradcheck(lambda a, b: f(a, b, scale=0.5), [x, w])
    assert gradgradcheck(lambda a, b: f(a, b, scale=0.5), [x, w])
    with pytest.raises(RuntimeError, match="it_tanh_mm"):  # the shape rule, from meta
        f(x, _t((4, 4), 2))


def test_from_torch_several_outputs_and_integer_input(names):
    def fn(x, idx):
        return torch.gather(torch.sin(x), 1, idx), x.cumsum(0)

    f = from_torch(fn, name="it_gather2", nout=2)
    names.append("it_gather2")
    x = _t((3, 4), 3)
    idx = tg.tensor(np.array([[0, 3], [1, 1], [2, 0]]))
    a, b = f(x, idx)
    assert tuple(a.shape) == (3, 2) and tuple(b.shape) == (3, 4)
    assert gradcheck(lambda v: f(v, idx), [x])
    assert gradgradcheck(lambda v: f(v, idx), [x])
    (g,) = tg.grad(f(x, idx)[0].sum(), [x])  # the unused output: no gradient
    expected = np.zeros((3, 4))
    for i, row in enumerate(idx.numpy()):
        for j in row:
            expected[i, j] += np.cos(x.detach().numpy()[i, j])
    np.testing.assert_allclose(g.numpy(), expected, rtol=1e-12)


def test_from_torch_op_exported_again_to_pytorch(names):
    from_torch(lambda x: torch.exp(-x * x), name="it_gauss")
    names.append("it_gauss")
    ns = torch_ops()
    x = torch.rand(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ns.it_gauss, (x,))
    assert torch.autograd.gradgradcheck(ns.it_gauss, (x,))


def test_from_torch_refuses_builtin_names_and_star_args():
    with pytest.raises(ValueError, match="built-in"):
        from_torch(lambda x: x, name="add")
    with pytest.raises(TypeError, match=r"\*args"):
        from_torch(lambda *xs: xs[0], name="it_star")


def test_from_jax_values_and_gradients(names, x64):
    jnp = x64.numpy
    seen = []

    def fn(x, w):
        seen.append(type(x).__name__)
        return jnp.tanh(x @ w) + jnp.sin(x).sum()

    f = from_jax(fn, name="it_jax_mm")
    names.append("it_jax_mm")
    x, w = _t((2, 3), 4), _t((3, 2), 5)
    y = f(x, w)
    assert any("Tracer" in s for s in seen), "the shape rule did not use jax.eval_shape"
    np.testing.assert_allclose(y.detach().numpy(),
                               np.asarray(fn(x.detach().numpy(), w.detach().numpy())),
                               rtol=1e-12)
    assert y.detach().numpy().dtype == np.float64
    assert gradcheck(f, [x, w])
    assert gradgradcheck(f, [x, w])
    y.sum().backward()
    assert x.grad is not None and w.grad is not None


def test_from_jax_several_outputs(names, x64):
    jnp = x64.numpy
    f = from_jax(lambda x: (jnp.sin(x) * x, jnp.cumsum(x ** 2)), name="it_jax2", nout=2)
    names.append("it_jax2")
    x = _t((4,), 6)
    assert gradcheck(f, [x])
    assert gradgradcheck(f, [x])


def test_from_torch_third_order(names):
    """Each order's vjp differentiates the one below (PyTorch's autograd with
    create_graph when an enclosing vjp records): d3/ds3 of sum(sin(x s)^2) agrees."""
    f = from_torch(lambda v: torch.sin(v) ** 2, name="it_sin2")
    names.append("it_sin2")
    x = np.array([0.3, -0.7, 1.1])
    s = tg.tensor(np.float64(0.4), requires_grad=True)
    (d1,) = tg.grad(f(tg.tensor(x) * s).sum(), [s], create_graph=True)
    (d2,) = tg.grad(d1, [s], create_graph=True)
    (d3,) = tg.grad(d2, [s])
    st = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    (e1,) = torch.autograd.grad((torch.sin(torch.from_numpy(x) * st) ** 2).sum(), st,
                                create_graph=True)
    (e2,) = torch.autograd.grad(e1, st, create_graph=True)
    (e3,) = torch.autograd.grad(e2, st)
    np.testing.assert_allclose(d3.item(), e3.item(), rtol=1e-10)


def _central_jvp(f, xs, ts, eps=1e-6):
    plus = f(*[tg.tensor(x.detach().numpy() + eps * t.numpy()) for x, t in zip(xs, ts)])
    minus = f(*[tg.tensor(x.detach().numpy() - eps * t.numpy()) for x, t in zip(xs, ts)])
    return (plus.detach().numpy() - minus.detach().numpy()) / (2 * eps)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_forward_mode_through_a_foreign_op(names, framework, request):
    """tapegrad's forward mode through a from_torch / from_jax op (its jvp rule is the
    framework's jvp, itself an op): jvp against central differences, a tangent on one
    input only, grad of jvp and jvp of grad (Hessian-vector products) against the
    same computed by PyTorch, and the op exported again under torch.func.jvp."""
    from tapegrad.functional import grad, jvp
    if framework == "torch":
        op = from_torch(lambda a, b: torch.tanh(a) * b + a * a, name="fwd_mode_t")
    else:
        request.getfixturevalue("x64")
        import jax.numpy as jnp
        op = from_jax(lambda a, b: jnp.tanh(a) * b + a * a, name="fwd_mode_j")
    names.append(op.__name__)
    a, b, ta, tb = (_t((5,), s, grad=False) for s in range(4))
    out, t = jvp(op, (a, b), (ta, tb))
    np.testing.assert_allclose(t.numpy(), _central_jvp(op, (a, b), (ta, tb)), rtol=1e-7,
                               atol=1e-8)
    _, t1 = jvp(lambda y: op(a, y), (b,), (tb,))
    np.testing.assert_allclose(t1.numpy(), np.tanh(a.numpy()) * tb.numpy(), rtol=1e-12)

    def ref(x, y):
        return torch.tanh(x) * y + x * x
    A, B, TA = (torch.tensor(v.numpy()) for v in (a, b, ta))
    hvp = torch.func.jvp(torch.func.grad(lambda x: ref(x, B).sum()), (A,), (TA,))[1]
    _, h1 = jvp(grad(lambda x: op(x, b).sum()), (a,), (ta,))
    h2 = grad(lambda x: jvp(lambda y: op(y, b), (x,), (ta,))[1].sum())(a)
    np.testing.assert_allclose(h1.numpy(), hvp.numpy(), rtol=1e-10)
    np.testing.assert_allclose(h2.numpy(), hvp.numpy(), rtol=1e-10)
    exported = getattr(torch_ops(), op.__name__)
    te = torch.func.jvp(lambda x: exported(x, B), (A,), (TA,))[1]
    np.testing.assert_allclose(te.numpy(), torch.func.jvp(lambda x: ref(x, B), (A,), (TA,))[1],
                               rtol=1e-12)
