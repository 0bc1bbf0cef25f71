"""``tg.functional`` transforms against torch.func / torch.autograd.functional,
the Hessian of a small MLP loss, ``checkpoint`` and ``detect_anomaly``."""
import contextlib
import gc
import os
import weakref

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.functional as F

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(7)


def _both(a):
    return tg.tensor(a), torch.tensor(a)


def _close(a, b, rtol=1e-9, atol=1e-11):
    a = a.detach().numpy() if isinstance(a, tg.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def f_tg(x):
    return (tg.sin(x) * tg.exp(x * 0.5)).sum()


def f_t(x):
    return (torch.sin(x) * torch.exp(x * 0.5)).sum()


def g_tg(x, y):
    return tg.tanh(x @ y).sum() + (x * x).sum()


def g_t(x, y):
    return torch.tanh(x @ y).sum() + (x * x).sum()


# ---------------------------------------------------------------- transforms
def test_grad_and_value_and_grad():
    a = RNG.standard_normal(5)
    x, xt = _both(a)
    _close(F.grad(f_tg)(x), torch.func.grad(f_t)(xt))
    val, g = F.value_and_grad(f_tg)(x)
    tval, tgr = torch.func.grad_and_value(f_t)(xt)[::-1]
    _close(val, tval)
    _close(g, tgr)


def test_grad_argnums_tuple():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 2))
    (x, xt), (y, yt) = _both(a), _both(b)
    gs = F.grad(g_tg, argnums=(0, 1))(x, y)
    ts = torch.func.grad(g_t, argnums=(0, 1))(xt, yt)
    assert isinstance(gs, tuple) and len(gs) == 2
    for g, t in zip(gs, ts):
        _close(g, t)
    _close(F.grad(g_tg, argnums=1)(x, y), ts[1])


def test_grad_of_grad():
    x = tg.tensor(0.8, dtype=tg.float64)
    d2 = F.grad(F.grad(lambda v: tg.sin(v) * v))(x)
    np.testing.assert_allclose(d2.item(), 2 * np.cos(0.8) - 0.8 * np.sin(0.8), rtol=1e-12)


def test_vjp():
    a = RNG.standard_normal((2, 3))
    v = RNG.standard_normal((2, 3))
    x, xt = _both(a)
    out, fn = F.vjp(lambda z: tg.exp(z) * z, x)
    tout, tfn = torch.func.vjp(lambda z: torch.exp(z) * z, xt)
    _close(out, tout)
    (g,) = fn(tg.tensor(v))
    (tg_,) = tfn(torch.tensor(v))
    _close(g, tg_)


def _vjp_flags(lib, func_vjp, primal_grad, cot_grad, closure, no_grad_at, fn_name):
    """(out.requires_grad, cotangent.requires_grad) of a vjp in one library."""
    x = lib.ones(3, dtype=lib.float64, requires_grad=primal_grad)
    w = lib.full((3,), 2.0, dtype=lib.float64, requires_grad=closure)
    v = lib.ones(3, dtype=lib.float64, requires_grad=cot_grad)
    f = getattr(lib, fn_name)
    plain, off = contextlib.nullcontext, lib.no_grad
    with off() if no_grad_at == "vjp" else plain():
        out, fn = func_vjp(lambda z: f(z) * w, x)
    with off() if no_grad_at == "vjp_fn" else plain():
        (g,) = fn(v)
    return out.requires_grad, g.requires_grad


@pytest.mark.parametrize("primal_grad, cot_grad, closure, no_grad_at", [
    (False, False, False, None), (True, False, False, None), (False, True, False, None),
    (False, False, True, None), (True, False, False, "vjp"), (True, False, False, "vjp_fn"),
    (False, True, False, "vjp_fn")])
def test_vjp_results_require_grad_as_torch(primal_grad, cot_grad, closure, no_grad_at):
    args = (primal_grad, cot_grad, closure, no_grad_at, "sin")
    assert _vjp_flags(tg, F.vjp, *args) == _vjp_flags(torch, torch.func.vjp, *args)


def test_vjp_under_grad_stays_differentiable():
    a = RNG.standard_normal(3)
    x, xt = _both(a)

    def inner(lib, func):
        return lambda z: func.vjp(lib.sin, z)[1](lib.ones_like(z))[0].sum()
    _close(F.grad(inner(tg, F))(x), torch.func.grad(inner(torch, torch.func))(xt))


def test_jvp():
    a, t = RNG.standard_normal(4), RNG.standard_normal(4)
    x, xt = _both(a)
    out, tan = F.jvp(lambda z: tg.tanh(z) * z, (x,), (tg.tensor(t),))
    tout, ttan = torch.func.jvp(lambda z: torch.tanh(z) * z, (xt,), (torch.tensor(t),))
    _close(out, tout)
    _close(tan, ttan)


def test_jacobian():
    a = RNG.standard_normal(3)
    x, xt = _both(a)
    J = F.jacobian(lambda z: tg.sin(z) * z.sum())(x)
    Jt = torch.func.jacrev(lambda z: torch.sin(z) * z.sum())(xt)
    assert J.shape == (3, 3)
    _close(J, Jt)


def test_hessian():
    a = RNG.standard_normal(4)
    x, xt = _both(a)
    H = F.hessian(f_tg)(x)
    Ht = torch.autograd.functional.hessian(f_t, xt)
    _close(H, Ht)


def test_hvp():
    a, v = RNG.standard_normal(4), RNG.standard_normal(4)
    x, xt = _both(a)
    val, prod = F.hvp(f_tg, (x,), (tg.tensor(v),))
    tval, tprod = torch.autograd.functional.hvp(f_t, (xt,), (torch.tensor(v),))
    _close(val, tval)
    _close(prod, tprod[0] if isinstance(tprod, tuple) else tprod)


def test_transforms_do_not_touch_inputs():
    x = tg.tensor(RNG.standard_normal(3))
    F.grad(f_tg)(x)
    F.hessian(f_tg)(x)
    assert not x.requires_grad and x.grad is None


# ---------------------------------------------------------------- MLP hessian
def _mlp_problem():
    X = RNG.standard_normal((5, 3))
    Y = RNG.standard_normal((5, 2))
    w1, b1 = RNG.standard_normal((3, 4)) * 0.5, RNG.standard_normal(4) * 0.1
    w2, b2 = RNG.standard_normal((4, 2)) * 0.5, RNG.standard_normal(2) * 0.1
    sizes = [w1.size, b1.size, w2.size, b2.size]
    shapes = [w1.shape, b1.shape, w2.shape, b2.shape]
    theta = np.concatenate([w1.ravel(), b1, w2.ravel(), b2])

    def unpack(p, lib):
        out, k = [], 0
        for n, s in zip(sizes, shapes):
            out.append(p[k:k + n].reshape(s))
            k += n
        return out

    def loss_tg(p):
        a1, c1, a2, c2 = unpack(p, tg)
        h = tg.tanh(tg.tensor(X) @ a1 + c1)
        r = h @ a2 + c2 - tg.tensor(Y)
        return (r * r).mean()

    def loss_t(p):
        a1, c1, a2, c2 = unpack(p, torch)
        h = torch.tanh(torch.tensor(X) @ a1 + c1)
        r = h @ a2 + c2 - torch.tensor(Y)
        return (r * r).mean()

    return theta, loss_tg, loss_t


def test_hessian_of_two_layer_mlp_loss_matches_torch():
    theta, loss_tg, loss_t = _mlp_problem()
    H = F.hessian(loss_tg)(tg.tensor(theta))
    Ht = torch.autograd.functional.hessian(loss_t, torch.tensor(theta))
    assert H.shape == (theta.size, theta.size)
    _close(H, Ht, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(H.numpy(), H.numpy().T, atol=1e-12)


def test_mlp_hessian_by_double_backward_matches_torch():
    """The same Hessian, row by row with tg.grad(create_graph=True)."""
    theta, loss_tg, loss_t = _mlp_problem()
    p = tg.tensor(theta, requires_grad=True)
    g, = tg.grad(loss_tg(p), p, create_graph=True)
    rows = []
    for k in range(theta.size):
        r, = tg.grad(g[k], p, retain_graph=True)
        rows.append(r.numpy())
    Ht = torch.autograd.functional.hessian(loss_t, torch.tensor(theta))
    _close(np.stack(rows), Ht, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- checkpoint
def _block(x, w):
    return tg.tanh(x @ w) * tg.sigmoid(x @ w)


def test_checkpoint_same_gradients():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 4))
    x1, w1 = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    x2, w2 = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    _block(_block(x1, w1), w1).sum().backward()
    y = tg.checkpoint(_block, tg.checkpoint(_block, x2, w2), w2)
    y.sum().backward()
    _close(x1.grad, x2.grad.numpy())
    _close(w1.grad, w2.grad.numpy())


def test_checkpoint_second_order():
    a = RNG.standard_normal(3)
    x1 = tg.tensor(a, requires_grad=True)
    x2 = tg.tensor(a, requires_grad=True)
    w = tg.tensor(np.eye(3) * 0.7)
    g1, = tg.grad(_block(x1, w).sum(), x1, create_graph=True)
    h1, = tg.grad(g1.sum(), x1)
    g2, = tg.grad(tg.checkpoint(_block, x2, w).sum(), x2, create_graph=True)
    h2, = tg.grad(g2.sum(), x2)
    _close(g1, g2.detach().numpy())
    _close(h1, h2.numpy())


def test_checkpoint_frees_intermediates():
    """Inside a checkpointed function no record is kept: weakrefs to its
    intermediates die at once; without checkpoint the record keeps them."""
    refs = []

    def fn(x):
        h = tg.exp(x)
        refs.append(weakref.ref(h))
        return tg.sin(h)

    x = tg.tensor(RNG.standard_normal(8), requires_grad=True)
    y = fn(x)
    # plain recording: exp's output array is saved by the record (exp saves out)
    y_ck = tg.checkpoint(fn, x)
    gc.collect()
    intermediates_alive = refs[1]() is not None
    assert not intermediates_alive, "checkpoint kept its intermediate tensor alive"
    y_ck.sum().backward()
    g_ck = x.grad.numpy().copy()
    x.grad = None
    y.sum().backward()
    np.testing.assert_allclose(g_ck, x.grad.numpy(), rtol=1e-12)


def test_checkpoint_saves_less_memory():
    import tracemalloc
    w = tg.tensor(RNG.standard_normal((200, 200)) * 0.05)

    def deep(x):
        for _ in range(10):
            x = tg.tanh(x @ w)
        return x

    def held(use_ck):
        x = tg.tensor(RNG.standard_normal((50, 200)), requires_grad=True)
        gc.collect()
        tracemalloc.start()
        y = tg.checkpoint(deep, x) if use_ck else deep(x)
        cur, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del y
        return cur

    assert held(True) * 3 < held(False)


# ---------------------------------------------------------------- anomaly
THIS_FILE = os.path.basename(__file__)


def test_detect_anomaly_forward_names_op_and_line():
    x = tg.tensor([-1.0, 2.0], requires_grad=True)
    with tg.detect_anomaly():
        with pytest.raises(RuntimeError) as info:
            tg.log(x)  # the offending line
    msg = str(info.value)
    assert "log" in msg
    assert THIS_FILE in msg, f"the message should name the user's file:line: {msg}"
    assert "tg.log(x)" in msg or ":" in msg


def test_detect_anomaly_backward_names_op():
    x = tg.tensor([0.0, 4.0], requires_grad=True)
    with tg.detect_anomaly():
        y = tg.sqrt(x).sum()  # forward is finite, the adjoint at 0 is inf
        with pytest.raises(RuntimeError) as info:
            y.backward()
    msg = str(info.value)
    assert "sqrt" in msg
    assert THIS_FILE in msg, f"the message should name where sqrt was called: {msg}"


def test_detect_anomaly_off_lets_nan_through():
    x = tg.tensor([-1.0], requires_grad=True)
    with np.errstate(invalid="ignore"):
        y = tg.log(x)
    assert np.isnan(y.detach().numpy()[0])


def test_detect_anomaly_as_decorator_restores_mode():
    @tg.detect_anomaly()
    def f(x):
        return tg.log(x)
    with pytest.raises(RuntimeError):
        f(tg.tensor([-1.0], requires_grad=True))
    assert not tg.tape.state.anomaly


def test_functional_call_strict_and_tied_weights_as_torch():
    torch = pytest.importorskip("torch")
    for lib in (tg, torch):
        m = lib.nn.Linear(3, 2)
        fc = lib.func.functional_call
        msgs = []
        for d in ({"weight": lib.zeros(2, 3)},
                  {"weight": lib.zeros(2, 3), "bias": lib.zeros(2), "foo": lib.zeros(1)}):
            with pytest.raises(RuntimeError) as e:
                fc(m, d, (lib.ones(1, 3),), strict=True)
            msgs.append(str(e.value))
        if lib is tg:
            got = msgs
        else:
            assert got == msgs
    class Tied(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = tg.nn.Linear(2, 2, bias=False)
            self.b = tg.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))
    t = Tied()
    x = tg.ones(1, 2)
    two = {"a.weight": tg.eye(2) * 2}
    np.testing.assert_array_equal(tg.func.functional_call(t, two, (x,)).numpy(), [[4, 4]])
    np.testing.assert_array_equal(tg.func.functional_call(t, two, (x,), strict=True).numpy(),
                                  [[4, 4]])
    untied = tg.func.functional_call(t, two, (x,), tie_weights=False)
    np.testing.assert_allclose(untied.detach().numpy(), (x @ t.b.weight.T * 2).detach().numpy(),
                               rtol=1e-6)


def test_transform_argument_errors_and_aux_as_torch():
    torch = pytest.importorskip("torch")
    calls = {
        "argnum out of range": lambda m: m.func.grad(lambda x, y: (x * y).sum(), argnums=2)(
            m.ones(2), m.ones(2)),
        "argnums a list": lambda m: m.func.grad(lambda x, y: (x * y).sum(), argnums=[0, 1])(
            m.ones(2), m.ones(2)),
        "aux not a pair": lambda m: m.func.grad(lambda x: (x * 2).sum(), has_aux=True)(
            m.ones(2)),
        "tangent shape": lambda m: m.func.jvp(lambda x: x * 2, (m.ones(2),), (m.ones(3),)),
        "materialize without allow_unused": lambda m: m.autograd.grad(
            (m.ones(2, requires_grad=True) * 2).sum(), [m.ones(2, requires_grad=True)],
            allow_unused=False, materialize_grads=True),
    }
    for what, call in calls.items():
        with pytest.raises(Exception) as want:
            call(torch)
        with pytest.raises(type(want.value)):
            call(tg)
    g, aux = tg.func.grad(lambda x: ((x * 2).sum(), {"a": x * 3}), has_aux=True)(tg.ones(2))
    assert not aux["a"].requires_grad     # the aux leaves the transform, as PyTorch's
    np.testing.assert_array_equal(aux["a"].numpy(), [3, 3])
    np.testing.assert_array_equal(
        tg.func.grad(lambda x, y: (x * y * 2).sum(), argnums=-1)(tg.ones(2), tg.ones(2)).numpy(),
        [2, 2])
