"""tg.vmap and the transforms built on it, against torch.func."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import functional as F

torch = pytest.importorskip("torch")
tf = torch.func


def _np(t):
    return np.asarray(t.detach()) if isinstance(t, tg.Tensor) else t.detach().numpy()


def _rand(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


def _both(a):
    return tg.tensor(a), torch.tensor(a)


def _close(ours, theirs, **kw):
    kw = {"rtol": 1e-10, "atol": 1e-12, **kw}
    if isinstance(theirs, (tuple, list)):
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _close(o, t, **kw)
    elif isinstance(theirs, dict):
        assert set(ours) == set(theirs)
        for k in theirs:
            _close(ours[k], theirs[k], **kw)
    else:
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(_np(ours), _np(theirs), **kw)


@pytest.mark.parametrize("in_dims,out_dims", [(0, 0), (1, 0), ((0, None), 1), ((None, 1), -1),
                                              ((1, 0), 0)])
def test_in_dims_and_out_dims(in_dims, out_dims):
    a, b = _rand(0, 4, 3, 5), _rand(1, 4, 3, 5)
    if in_dims == (0, None):
        b = _rand(1, 3, 5)
    if in_dims == (None, 1):
        a, b = _rand(0, 3, 5), _rand(1, 3, 4, 5)
    if in_dims == (1, 0):
        a = _rand(0, 3, 4, 5)
    if in_dims == 1:
        a, b = _rand(0, 3, 4, 5), _rand(1, 3, 4, 5)

    def f(m):
        return lambda x, y: (m.tanh(x) * y).sum(-1) + (x @ y.transpose(0, 1)).sum()
    ours = tg.vmap(f(tg), in_dims, out_dims)(*map(tg.tensor, (a, b)))
    theirs = tf.vmap(f(torch), in_dims, out_dims)(*map(torch.tensor, (a, b)))
    _close(ours, theirs)


def test_nested_vmap_and_closures():
    x, y = _rand(2, 3, 4), _rand(3, 5, 4)

    def f(m, vm):
        return vm(lambda a: vm(lambda b: (m.sin(a) * b).sum() + a.max())(m_y(m)))
    m_y = lambda m: tg.tensor(y) if m is tg else torch.tensor(y)  # noqa: E731
    _close(f(tg, tg.vmap)(tg.tensor(x)), f(torch, tf.vmap)(torch.tensor(x)))


def test_pytrees_in_and_out():
    xs = {"a": _rand(4, 6, 2), "b": [_rand(5, 6), _rand(6, 6, 3)]}

    def f(m):
        def g(d):
            return {"s": d["a"].sum() * d["b"][0], "t": (d["b"][1] ** 2, d["a"].exp())}
        return g
    ours = tg.vmap(f(tg))({"a": tg.tensor(xs["a"]), "b": [tg.tensor(v) for v in xs["b"]]})
    theirs = tf.vmap(f(torch))({"a": torch.tensor(xs["a"]),
                                "b": [torch.tensor(v) for v in xs["b"]]})
    _close(ours, theirs)


def test_per_sample_gradients_with_functional_call_match_torch():
    rng = np.random.default_rng(7)
    tnet = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 4)).double()
    net = tg.nn.Sequential(tg.nn.Linear(5, 16), tg.nn.Tanh(), tg.nn.Linear(16, 4))
    net.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    x, y = rng.standard_normal((8, 5)), rng.integers(0, 4, 8)

    def loss(m, mod, F_):
        def f(p, xi, yi):
            out = F_.functional_call(mod, p, (xi[None],))
            return m.nn.functional.cross_entropy(out, yi[None])
        return f
    tp = {k: v.detach() for k, v in tnet.named_parameters()}
    p = {k: tg.tensor(v.numpy()) for k, v in tp.items()}
    ours = tg.vmap(F.grad(loss(tg, net, F)), in_dims=(None, 0, 0))(p, tg.tensor(x),
                                                                    tg.tensor(y))
    theirs = tf.vmap(tf.grad(loss(torch, tnet, tf)), in_dims=(None, 0, 0))(
        tp, torch.tensor(x), torch.tensor(y))
    _close(ours, theirs, rtol=1e-9)
    assert not any(v.requires_grad for v in ours.values())
    # the module's own parameters are untouched
    assert all(a is b for a, b in zip(net.parameters(), net.parameters()))


def test_grad_of_vmap_and_vmap_of_jvp():
    x, w = _rand(8, 5, 3), _rand(9, 3)

    def g(m, vm):
        return lambda w: vm(lambda xi: m.tanh(xi @ w))(m_x(m)).sum()
    m_x = lambda m: tg.tensor(x) if m is tg else torch.tensor(x)  # noqa: E731
    _close(F.grad(g(tg, tg.vmap))(tg.tensor(w)), tf.grad(g(torch, tf.vmap))(torch.tensor(w)))

    def h(m, vm, jvp):
        return vm(lambda t: jvp(lambda v: m.sin(v) * v.sum(), (m_w(m),), (t,))[1])
    m_w = lambda m: tg.tensor(w) if m is tg else torch.tensor(w)  # noqa: E731
    ts = _rand(10, 4, 3)
    _close(h(tg, tg.vmap, F.jvp)(tg.tensor(ts)), h(torch, tf.vmap, tf.jvp)(torch.tensor(ts)))


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_jacobians_use_vmap_and_match_torch(jac, monkeypatch):
    W, x = _rand(11, 30, 20), _rand(12, 20)
    calls = []
    real = tg.vmap

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(F, "vmap", spy)
    ours = getattr(F, jac)(lambda v: tg.tanh(tg.tensor(W) @ v))(tg.tensor(x))
    theirs = getattr(tf, jac)(lambda v: torch.tanh(torch.tensor(W) @ v))(torch.tensor(x))
    _close(ours, theirs)
    assert calls, f"{jac} did not use vmap"


def test_hessian_matches_torch_and_jacobian_of_tuple_outputs():
    x = _rand(13, 6)
    f = lambda m: (lambda v: (m.sin(v) * v.exp()).sum() * (v ** 2).sum())  # noqa: E731
    _close(F.hessian(f(tg))(tg.tensor(x)), tf.hessian(f(torch))(torch.tensor(x)), rtol=1e-9)
    g = lambda m: (lambda v: (v.exp(), v.sum() * v))  # noqa: E731
    _close(F.jacrev(g(tg))(tg.tensor(x)), tf.jacrev(g(torch))(torch.tensor(x)))


def test_chunk_size_gives_the_same_result():
    x = _rand(14, 10, 4)
    f = lambda v: tg.softmax(v, 0) * v.sum()  # noqa: E731
    _close(tg.vmap(f, chunk_size=3)(tg.tensor(x)), tg.vmap(f)(tg.tensor(x)))


def test_randomness_flags():
    x = tg.zeros(5, 3)
    with pytest.raises(RuntimeError, match="randomness"):
        tg.vmap(lambda v: v + tg.rand(3))(x)
    same = tg.vmap(lambda v: v + tg.rand(3), randomness="same")(x)
    assert np.allclose(_np(same), _np(same)[0])
    diff = tg.vmap(lambda v: v + tg.randn(3), randomness="different")(x)
    assert not np.allclose(_np(diff), _np(diff)[0])
    with pytest.raises(ValueError, match="randomness"):
        tg.vmap(lambda v: v, randomness="sometimes")


def test_errors_are_clear():
    with pytest.raises(ValueError, match="same batch size"):
        tg.vmap(lambda a, b: a + b)(tg.ones(3, 2), tg.ones(4, 2))
    with pytest.raises(ValueError, match="out of range"):
        tg.vmap(lambda a: a, in_dims=2)(tg.ones(3, 2))
    with pytest.raises(RuntimeError, match="data-dependent|item"):
        tg.vmap(lambda a: a * float(a.sum()))(tg.ones(3, 2))
    with pytest.raises(RuntimeError, match="in-place"):
        tg.vmap(lambda a: a.add_(1))(tg.ones(3, 2))


def test_a_batched_index_is_per_example():
    x, idx = _rand(15, 4, 6), np.array([5, 0, 3, 2])
    with pytest.warns(RuntimeWarning, match="loop"):
        ours = tg.vmap(lambda v, i: v[i] * 2)(tg.tensor(x), tg.tensor(idx))
    theirs = tf.vmap(lambda v, i: v[i] * 2)(torch.tensor(x), torch.tensor(idx))
    _close(ours, theirs)


def test_is_grads_batched():
    x = tg.tensor(_rand(16, 4), requires_grad=True)
    tx = torch.tensor(_rand(16, 4), requires_grad=True)
    v = _rand(17, 3, 4)
    ours = tg.grad((x.exp() * x), x, grad_outputs=tg.tensor(v), is_grads_batched=True)
    theirs = torch.autograd.grad(tx.exp() * tx, tx, grad_outputs=torch.tensor(v),
                                 is_grads_batched=True)
    _close(ours, theirs)


def test_inplace_write_of_a_batch_into_an_unbatched_tensor_is_refused():
    """PyTorch refuses it; the stand-in must never be written (it once gave zeros)."""
    x = tg.zeros(5)
    idx, src = tg.tensor([[0, 1], [2, 3]]), tg.ones(2, 2)
    with pytest.raises(RuntimeError, match="vmap"):
        tg.vmap(lambda i, s: x.scatter_add_(0, i, s))(idx, src)
    with pytest.raises(RuntimeError, match="vmap"):
        tg.vmap(lambda v: x.add_(v))(tg.ones(3, 5))
    with pytest.raises(RuntimeError, match="vmap"):
        tg.vmap(lambda m: x.masked_fill_(m, 1.0))(tg.ones(3, 5) > 0)
    with pytest.raises(RuntimeError, match="vmap"):
        tg.vmap(lambda v: x.fill_(v))(tg.ones(3))
    assert x.tolist() == [0.0] * 5


def test_a_raw_array_operand_under_vmap():
    w = np.ones((3, 2))
    ours = tg.vmap(lambda v: tg.matmul(v, w))(tg.tensor(_rand(20, 4, 3)))  # w stays raw
    assert tuple(ours.shape) == (4, 2)


def test_custom_op_batching_rule_and_loop_fallback():
    calls = []

    def rule(ctx, x):
        calls.append(ctx.batched)
        return cube(x)  # the kernel maps over the leading batch dim as it is
    cube = tg.custom_op("test_vmap_cube", lambda x: x ** 3, lambda g, x: (3 * x * x * g,),
                        vmap=rule)
    square = tg.custom_op("test_vmap_square", lambda x: x * x, lambda g, x: (2 * x * g,))
    try:
        x = tg.tensor(_rand(21, 4, 3))
        np.testing.assert_allclose(_np(tg.vmap(cube)(x)), _np(x) ** 3)
        assert calls == [(True,)]
        with pytest.warns(RuntimeWarning, match="test_vmap_square"):
            np.testing.assert_allclose(_np(tg.vmap(square)(x)), _np(x) ** 2)
    finally:
        tg.ops_registry.unregister("test_vmap_cube")
        tg.ops_registry.unregister("test_vmap_square")


@pytest.mark.parametrize("case", ["first", "second", "pair", "ellipsis", "grad", "grad_basic"])
def test_integer_array_indexing_has_a_rule(case):
    """x[idx] with an unbatched integer index, and its adjoint, batch without a loop."""
    X = _rand(22, 3, 4, 5)

    def f(m, fx):
        g = F.grad if m is tg else tf.grad
        return {"first": lambda x: x[m.tensor([0, 2])],
                "second": lambda x: x[:, m.tensor([4, 1, 1])],
                "pair": lambda x: x[m.tensor([0, 3]), m.tensor([1, 2])],
                "ellipsis": lambda x: x[..., m.tensor([0, 1])],
                "grad": g(lambda v: (v[m.tensor([1, 1, 3])] ** 2).sum()),
                "grad_basic": g(lambda v: (v[1:3, 2] ** 2).sum())}[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ours = tg.vmap(f(tg, None))(tg.tensor(X))
    _close(ours, tf.vmap(f(torch, None))(torch.tensor(X)))
