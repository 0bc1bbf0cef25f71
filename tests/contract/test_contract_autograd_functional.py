"""API.md "PyTorch compatibility, continued": tg.autograd.functional evaluates and
returns values with torch.autograd.functional's signatures and results (create_graph,
strict, vectorize, tuple inputs); tg.func is tg.functional, the torch.func namespace,
with argnums tuples and pytree inputs and outputs."""
import inspect

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")
TAF = torch.autograd.functional
TF = torch.func
AF = tg.autograd.functional

XN = np.array([0.3, -1.2, 2.0])
VN = np.array([0.5, 1.5, -0.7])


def _close(a, b):
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            _close(a[k], b[k])
        return
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for i, j in zip(a, b):
            _close(i, j)
        return
    assert isinstance(a, tg.Tensor), type(a)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def _scalar(a):
    return (a.sin() * a).sum()


def _vector(a):
    return a.exp() * a[0]


def _pair(a, b):
    return (a * b).sin().sum()


def _both(lib):
    return lib.tensor(XN), lib.tensor(VN)


@pytest.mark.parametrize("name", ["jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"])
def test_signatures_as_torch(name):
    ours = inspect.signature(getattr(AF, name))
    theirs = inspect.signature(getattr(TAF, name))
    assert list(ours.parameters) == list(theirs.parameters)
    for p in theirs.parameters.values():
        assert ours.parameters[p.name].default == p.default, p.name


@pytest.mark.parametrize("call", [
    lambda L, F, x, v: F.jacobian(_vector, x),
    lambda L, F, x, v: F.jacobian(lambda a, b: a * b, (x, v)),
    lambda L, F, x, v: F.jacobian(lambda a: (a * 2, a.sum()), x),
    lambda L, F, x, v: F.jacobian(_vector, x, vectorize=True),
    lambda L, F, x, v: F.jacobian(_vector, x, vectorize=True, strategy="forward-mode"),
    lambda L, F, x, v: F.hessian(_scalar, x),
    lambda L, F, x, v: F.hessian(_pair, (x, v)),
    lambda L, F, x, v: F.vjp(_vector, x, v),
    lambda L, F, x, v: F.vjp(_scalar, x),
    lambda L, F, x, v: F.vjp(lambda a, b: a * b, (x, v), v),
    lambda L, F, x, v: F.jvp(_vector, x, v),
    lambda L, F, x, v: F.hvp(_scalar, x, v),
    lambda L, F, x, v: F.vhp(_scalar, x, v),
    lambda L, F, x, v: F.jacobian(lambda a: L.ones(3, dtype=L.float64), x),
])
def test_values_as_torch(call):
    x, v = _both(tg)
    xt, vt = _both(torch)
    _close(call(tg, AF, x, v), call(torch, TAF, xt, vt))


def test_create_graph_and_strict():
    x = tg.tensor(XN, requires_grad=True)
    assert not AF.jacobian(_vector, x).requires_grad
    J = AF.jacobian(_vector, x, create_graph=True)
    assert J.requires_grad
    J.sum().backward()
    xt = torch.tensor(XN, requires_grad=True)
    TAF.jacobian(_vector, xt, create_graph=True).sum().backward()
    _close(x.grad, xt.grad)
    with pytest.raises(RuntimeError):
        AF.jacobian(lambda a: tg.ones(3, dtype=tg.float64), tg.tensor(XN), strict=True)


def test_func_namespace():
    assert tg.func is tg.functional
    from tapegrad.func import jacrev  # noqa: F401  (importable as a module path)
    for name in ("grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd",
                 "hessian", "vmap", "functional_call", "stack_module_state", "functionalize",
                 "replace_all_batch_norm_modules_"):
        assert callable(getattr(tg.func, name)), name


@pytest.mark.parametrize("transform", ["grad", "jacrev", "jacfwd", "hessian"])
def test_argnums_tuple(transform):
    x, v = _both(tg)
    xt, vt = _both(torch)
    f = _pair if transform in ("grad", "hessian") else (lambda a, b: a * b.sin())
    _close(getattr(tg.func, transform)(f, argnums=(0, 1))(x, v),
           getattr(TF, transform)(f, argnums=(0, 1))(xt, vt))


def test_pytree_inputs_and_outputs():
    x, v = _both(tg)
    xt, vt = _both(torch)

    def on_dict(d):
        return (d["a"] * d["b"]).sin().sum()

    _close(tg.func.grad(on_dict)({"a": x, "b": v}), TF.grad(on_dict)({"a": xt, "b": vt}))
    _close(tg.func.hessian(on_dict)({"a": x, "b": v}), TF.hessian(on_dict)({"a": xt, "b": vt}))
    _close(tg.func.jacrev(lambda lst: lst[0] * lst[1])([x, v]),
           TF.jacrev(lambda lst: lst[0] * lst[1])([xt, vt]))
    _close(tg.func.jacfwd(lambda a: {"o": a * 2, "p": (a.sum(),)})(x),
           TF.jacfwd(lambda a: {"o": a * 2, "p": (a.sum(),)})(xt))


def test_jacrev_over_functional_call_with_a_dict_of_parameters():
    m = tg.nn.Linear(3, 2).double()
    mt = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        mt.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        mt.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    params = {k: p.detach() for k, p in m.named_parameters()}
    tparams = {k: p.detach() for k, p in mt.named_parameters()}
    x, _ = _both(tg)
    xt, _ = _both(torch)
    want = TF.jacrev(lambda p, a: TF.functional_call(mt, p, (a,)))(tparams, xt)
    for tr in ("jacrev", "jacfwd"):
        got = getattr(tg.func, tr)(lambda p, a: tg.func.functional_call(m, p, (a,)))(params, x)
        _close(got, want)


def test_grad_and_value_linearize_stack_module_state():
    x, v = _both(tg)
    xt, vt = _both(torch)
    _close(tg.func.grad_and_value(_scalar)(x), TF.grad_and_value(_scalar)(xt))
    g, (val, aux) = tg.func.grad_and_value(lambda a: (_scalar(a), a * 2), has_aux=True)(x)
    gt, (valt, auxt) = TF.grad_and_value(lambda a: (_scalar(a), a * 2), has_aux=True)(xt)
    _close((g, val, aux), (gt, valt, auxt))
    out, jvp_fn = tg.func.linearize(_vector, x)
    outt, jvp_fnt = TF.linearize(_vector, xt)
    _close(out, outt)
    _close(jvp_fn(v), jvp_fnt(vt))
    models = [tg.nn.Linear(3, 2) for _ in range(4)]
    params, buffers = tg.func.stack_module_state(models)
    assert sorted(params) == ["bias", "weight"] and buffers == {}
    assert tuple(params["weight"].shape) == (4, 2, 3)
    assert params["weight"].is_leaf and params["weight"].requires_grad
    np.testing.assert_array_equal(params["weight"][2].detach().numpy(),
                                  models[2].weight.detach().numpy())
    base = tg.nn.Linear(3, 2)
    inp = tg.randn(5, 3)
    out = tg.func.vmap(lambda p, a: tg.func.functional_call(base, p, (a,)),
                       in_dims=(0, None))(params, inp)
    with tg.no_grad():
        np.testing.assert_allclose(out[1].detach().numpy(), models[1](inp).numpy(), rtol=1e-5)


def test_functionalize_and_replace_all_batch_norm_modules():
    def f(a):
        a.add_(1)
        return a * 2

    x, xt = tg.ones(2), torch.ones(2)
    assert tg.func.functionalize(f)(x).tolist() == TF.functionalize(f)(xt).tolist()
    assert x.tolist() == xt.tolist()
    m = tg.nn.Sequential(tg.nn.Linear(3, 3), tg.nn.BatchNorm1d(3))
    mt = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    assert tg.func.replace_all_batch_norm_modules_(m) is m
    TF.replace_all_batch_norm_modules_(mt)
    assert m[1].running_mean is None and not m[1].track_running_stats
    assert list(m.state_dict()) == list(mt.state_dict())
    m.eval()  # batch statistics even in eval mode, as PyTorch's without running stats
    out = m(tg.randn(6, 3)).detach().numpy()
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-5)
