"""``tg.autograd.functional`` (values at a point) and ``tg.func`` (transforms over
pytrees) against ``torch.autograd.functional`` and ``torch.func``, in float64."""
import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.autograd import functional as AF

torch_AF = torch.autograd.functional
RNG = np.random.default_rng(0)


def arr(*shape):
    return RNG.standard_normal(shape[0] if shape and shape[0] == () else shape)


def pair(a, requires_grad=False):
    return (tg.tensor(a, dtype=tg.float64, requires_grad=requires_grad),
            torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad))


def check(ours, theirs, rtol=1e-10, atol=1e-10):
    """Same nesting (tuples/lists/dicts) and values."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tg.Tensor), type(ours)
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol,
                                   atol=atol)
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for k in theirs:
            check(ours[k], theirs[k], rtol, atol)
    else:
        assert type(ours) is type(theirs), (type(ours), type(theirs))
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            check(a, b, rtol, atol)


# functions written once for both libraries (``m`` is tapegrad or torch)
def f_single(m):
    return lambda x: (m.sin(x) * x ** 2).sum(-1)


def f_scalar(m):
    return lambda x: (m.tanh(x) ** 3).sum() + (x[0] * x[1]) ** 2


def f_two(m):
    return lambda x, y: (m.exp(x) * y.sum(), x @ y)


def f_scalar_two(m):
    return lambda x, y: (m.sin(x) * (y ** 2).sum()).sum() + (x * x).sum() * y[0]


X = arr(3, 4)
V = arr(4)
XS = (arr(3), arr(3))


@pytest.mark.parametrize("create_graph", [False, True])
def test_vjp_single_and_tuple(create_graph):
    (x, xt), (v, vt) = pair(X), pair(arr(3))
    check(AF.vjp(f_single(tg), x, v, create_graph=create_graph),
          torch_AF.vjp(f_single(torch), xt, vt, create_graph=create_graph))
    xs, xst = zip(*(pair(a) for a in XS))
    v2 = (pair(arr(3)), pair(arr(())))
    ours = AF.vjp(f_two(tg), tuple(xs), tuple(p[0] for p in v2), create_graph=create_graph)
    theirs = torch_AF.vjp(f_two(torch), tuple(xst), tuple(p[1] for p in v2),
                          create_graph=create_graph)
    check(ours, theirs)


def test_vjp_v_none_for_a_scalar_and_errors():
    (x, xt) = pair(arr(2))
    check(AF.vjp(f_scalar(tg), x), torch_AF.vjp(f_scalar(torch), xt))
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.vjp(f_single(tg), pair(X)[0])
    with pytest.raises(RuntimeError, match="v has invalid size"):
        AF.vjp(f_single(tg), pair(X)[0], pair(arr(4))[0])
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        AF.vjp(f_single(tg), [pair(X)[0]], pair(arr(3))[0])


def test_vjp_strict_and_unused_input():
    (x, _), (y, _) = pair(arr(3)), pair(arr(3))
    _, (gx, gy) = AF.vjp(lambda a, b: (a * 2).sum(), (x, y))
    np.testing.assert_allclose(gy.numpy(), 0)
    np.testing.assert_allclose(gx.numpy(), 2)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.vjp(lambda a, b: (a * 2).sum(), (x, y), strict=True)
    with pytest.raises(RuntimeError, match="does not require gradients"):
        AF.vjp(lambda a: tg.ones(()), x, strict=True)


def test_create_graph_results_differentiate_to_the_caller_inputs():
    x, xt = pair(X, requires_grad=True)
    v, vt = pair(arr(3))
    out, res = AF.vjp(f_single(tg), x, v, create_graph=True)
    out_t, res_t = torch_AF.vjp(f_single(torch), xt, vt, create_graph=True)
    assert res.requires_grad and out.requires_grad
    g, = tg.grad((res ** 2).sum() + out.sum(), x)
    gt, = torch.autograd.grad((res_t ** 2).sum() + out_t.sum(), xt)
    check(g, gt)
    # without create_graph the results are detached even for an input requiring grad
    out, res = AF.vjp(f_single(tg), x, v)
    assert not out.requires_grad and not res.requires_grad


@pytest.mark.parametrize("create_graph", [False, True])
def test_jvp(create_graph):
    (x, xt), (v, vt) = pair(X), pair(arr(3, 4))
    check(AF.jvp(f_single(tg), x, v, create_graph=create_graph),
          torch_AF.jvp(f_single(torch), xt, vt, create_graph=create_graph))
    xs, xst = zip(*(pair(a) for a in XS))
    vs = [pair(arr(3)) for _ in range(2)]
    check(AF.jvp(f_two(tg), tuple(xs), tuple(p[0] for p in vs)),
          torch_AF.jvp(f_two(torch), tuple(xst), tuple(p[1] for p in vs)))
    with pytest.raises(RuntimeError, match="v can only be None"):
        AF.jvp(f_single(tg), x)


@pytest.mark.parametrize("vectorize", [False, True])
@pytest.mark.parametrize("create_graph", [False, True])
def test_jacobian(vectorize, create_graph):
    x, xt = pair(X)
    kw = dict(create_graph=create_graph, vectorize=vectorize)
    check(AF.jacobian(f_single(tg), x, **kw), torch_AF.jacobian(f_single(torch), xt, **kw))
    xs, xst = zip(*(pair(a) for a in XS))
    check(AF.jacobian(f_two(tg), tuple(xs), **kw),
          torch_AF.jacobian(f_two(torch), tuple(xst), **kw))
    # one input given as a tuple, several outputs
    check(AF.jacobian(lambda a: (a * 2, a.sum()), (xs[0],), **kw),
          torch_AF.jacobian(lambda a: (a * 2, a.sum()), (xst[0],), **kw))


def test_jacobian_forward_mode_and_strict():
    xs, xst = zip(*(pair(a) for a in XS))
    check(AF.jacobian(f_two(tg), tuple(xs), vectorize=True, strategy="forward-mode"),
          torch_AF.jacobian(f_two(torch), tuple(xst), vectorize=True, strategy="forward-mode"))
    with pytest.raises(NotImplementedError):
        AF.jacobian(f_two(tg), tuple(xs), strategy="forward-mode")
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda a, b: a * 2, tuple(xs), strict=True)
    with pytest.raises(RuntimeError, match="not supported together"):
        AF.jacobian(f_two(tg), tuple(xs), strict=True, vectorize=True)
    # not strict: the block of an unused input is zeros
    J = AF.jacobian(lambda a, b: a * 2, tuple(xs))
    np.testing.assert_allclose(J[1].numpy(), 0)


def test_jacobian_create_graph_differentiates_again():
    x, xt = pair(arr(3), requires_grad=True)
    J = AF.jacobian(lambda a: tg.sin(a) * a.sum(), x, create_graph=True)
    Jt = torch_AF.jacobian(lambda a: torch.sin(a) * a.sum(), xt, create_graph=True)
    check(tg.grad(J.sum(), x), torch.autograd.grad(Jt.sum(), xt))


# (PyTorch computes a forward-mode outer Jacobian only vectorized)
@pytest.mark.parametrize("vectorize,strategy", [(False, "reverse-mode"), (True, "reverse-mode"),
                                                (True, "forward-mode")])
def test_hessian(vectorize, strategy):
    kw = dict(vectorize=vectorize, outer_jacobian_strategy=strategy)
    x, xt = pair(arr(2))
    check(AF.hessian(f_scalar(tg), x, **kw), torch_AF.hessian(f_scalar(torch), xt, **kw))
    xs, xst = zip(*(pair(a) for a in XS))
    check(AF.hessian(f_scalar_two(tg), tuple(xs), **kw),
          torch_AF.hessian(f_scalar_two(torch), tuple(xst), **kw))


def test_hessian_create_graph_and_errors():
    x, xt = pair(arr(3), requires_grad=True)
    H = AF.hessian(lambda a: (a ** 4).sum(), x, create_graph=True)
    Ht = torch_AF.hessian(lambda a: (a ** 4).sum(), xt, create_graph=True)
    check(H, Ht)
    check(tg.grad(H.sum(), x), torch.autograd.grad(Ht.sum(), xt))
    with pytest.raises(RuntimeError, match="should contain a single element"):
        AF.hessian(lambda a: a ** 2, x)
    with pytest.raises(RuntimeError, match="should return a single Tensor"):
        AF.hessian(lambda a: (a.sum(), a.sum()), x)


@pytest.mark.parametrize("fn", ["vhp", "hvp"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_vhp_hvp(fn, create_graph):
    x, xt = pair(arr(2))
    v, vt = pair(arr(2))
    check(getattr(AF, fn)(f_scalar(tg), x, v, create_graph=create_graph),
          getattr(torch_AF, fn)(f_scalar(torch), xt, vt, create_graph=create_graph))
    xs, xst = zip(*(pair(a) for a in XS))
    vs = [pair(arr(3)) for _ in range(2)]
    check(getattr(AF, fn)(f_scalar_two(tg), tuple(xs), tuple(p[0] for p in vs)),
          getattr(torch_AF, fn)(f_scalar_two(torch), tuple(xst), tuple(p[1] for p in vs)))
    with pytest.raises(RuntimeError, match="should contain a single element"):
        getattr(AF, fn)(lambda a: a * 2, x, v)


def test_vhp_strict_linear_function():
    x, _ = pair(arr(3))
    with pytest.raises(RuntimeError, match="strict mode"):
        AF.vhp(lambda a: (a * 2).sum(), x, x, strict=True)
    _, res = AF.vhp(lambda a: (a * 2).sum(), x, x)
    np.testing.assert_allclose(res.numpy(), 0)


@pytest.mark.parametrize("fn", ["hessian", "vhp", "hvp"])
def test_strict_linear_function_message_as_torch(fn):
    """A linear function's Jacobian does not depend on the input: strict mode refuses it
    with PyTorch's message, for hessian (the outer Jacobian of the gradient) as for the
    double-backward products."""
    x, xt = pair(arr(3))
    args = (x,) if fn == "hessian" else (x, x)
    targs = (xt,) if fn == "hessian" else (xt, xt.detach())
    with pytest.raises(RuntimeError) as theirs:
        getattr(torch_AF, fn)(lambda a: (a * 2).sum(), *targs, strict=True)
    with pytest.raises(RuntimeError) as ours:
        getattr(AF, fn)(lambda a: (a * 2).sum(), *args, strict=True)
    assert str(ours.value) == str(theirs.value)


# ------------------------------------------------------------------ tg.func: pytrees
def test_func_is_the_transform_namespace():
    import tapegrad.func as func_mod
    from tapegrad.func import jacrev
    assert tg.func is tg.functional is func_mod
    assert jacrev is tg.functional.jacrev
    assert tg.autograd.functional is AF and tg.autograd.functional is not tg.func


def test_hessian_with_argnums_tuple():
    (a, at), (b, bt) = pair(arr(3, 2)), pair(arr(2))

    def f(m):
        return lambda w1, w2: (m.tanh(w1 @ w2) ** 2).sum()
    check(tg.func.hessian(f(tg), argnums=(0, 1))(a, b),
          torch.func.hessian(f(torch), argnums=(0, 1))(at, bt))
    check(tg.func.jacrev(f(tg), argnums=(0, 1))(a, b),
          torch.func.jacrev(f(torch), argnums=(0, 1))(at, bt))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobian_over_a_dict_of_parameters(transform):
    tg.manual_seed(0)
    m = tg.nn.Linear(3, 2).double()
    mt = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        mt.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        mt.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    x, xt = pair(arr(4, 3))
    params = {k: v.detach() for k, v in m.named_parameters()}
    params_t = {k: v.detach() for k, v in mt.named_parameters()}
    ours = getattr(tg.func, transform)(
        lambda p: tg.func.functional_call(m, p, (x,)))(params)
    theirs = getattr(torch.func, transform)(
        lambda p: torch.func.functional_call(mt, p, (xt,)))(params_t)
    check(ours, theirs)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobian_nested_pytrees_in_and_out(transform):
    (a, at), (b, bt), (c, ct) = pair(arr(2)), pair(arr(3)), pair(arr(2, 2))

    def f(m):
        def g(tree, scale):
            x, (y, z) = tree["x"], tree["rest"]
            return {"u": m.sin(x) * y.sum() * scale, "v": [z @ x, (z * z).sum()]}
        return g
    ours = getattr(tg.func, transform)(f(tg), argnums=(0, 1))(
        {"x": a, "rest": [b, c]}, tg.tensor(1.5, dtype=tg.float64))
    theirs = getattr(torch.func, transform)(f(torch), argnums=(0, 1))(
        {"x": at, "rest": [bt, ct]}, torch.tensor(1.5, dtype=torch.float64))
    check(ours, theirs)


def test_func_vjp_and_jvp_over_pytrees():
    (a, at), (b, bt) = pair(arr(3)), pair(arr(3))

    def f(m):
        return lambda d: {"s": (d["a"] * d["b"]).sum(), "t": m.cos(d["a"])}
    out, fn = tg.func.vjp(f(tg), {"a": a, "b": b})
    out_t, fn_t = torch.func.vjp(f(torch), {"a": at, "b": bt})
    check(out, out_t)
    (ct, ctt) = pair(arr(3))
    check(fn({"s": tg.tensor(2.0, dtype=tg.float64), "t": ct}),
          fn_t({"s": torch.tensor(2.0, dtype=torch.float64), "t": ctt}))
    (ta, tat), (tb, tbt) = pair(arr(3)), pair(arr(3))
    check(tg.func.jvp(f(tg), ({"a": a, "b": b},), ({"a": ta, "b": tb},)),
          torch.func.jvp(f(torch), ({"a": at, "b": bt},), ({"a": tat, "b": tbt},)))


def test_func_grad_over_a_dict():
    (a, at), (b, bt) = pair(arr(3)), pair(arr(3))

    def f(m):
        return lambda d, k: (m.exp(d["a"]) * d["b"] * k).sum()
    check(tg.func.grad(f(tg))({"a": a, "b": b}, 2.0),
          torch.func.grad(f(torch))({"a": at, "b": bt}, 2.0))
