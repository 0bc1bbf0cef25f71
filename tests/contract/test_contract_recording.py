"""API.md "Recording and differentiation": tg.backward / tg.grad with PyTorch's
signatures, defaults, accumulation and errors; grad-mode context managers and
decorators; tensor hooks; tg.Tape; the torch.func-style transforms against torch.func;
forward mode; checkpoint; detect_anomaly."""
import inspect
import weakref

import numpy as np
import pytest
from contract_compare import same

import tapegrad as tg

torch = pytest.importorskip("torch")
TF = torch.func


def _cases(**cases):
    return pytest.mark.parametrize("case", list(cases.values()), ids=list(cases))


def _defaults(f):
    return {k: p.default for k, p in inspect.signature(f).parameters.items()}


def test_backward_and_grad_signatures():
    assert _defaults(tg.backward) == {"tensors": inspect.Parameter.empty, "grad_tensors": None,
                                      "retain_graph": None, "create_graph": False,
                                      "inputs": None}
    ours = _defaults(tg.grad)
    for name in ["grad_outputs", "retain_graph", "create_graph", "materialize_grads",
                 "is_grads_batched"]:
        assert ours[name] == _defaults(torch.autograd.grad)[name], name
    assert not ours["allow_unused"]
    assert tg.autograd.grad is tg.grad and tg.autograd.backward is tg.backward


def BACKWARD(M):
    return torch.autograd.backward if M is torch else M.backward


def GRAD(M):
    return torch.autograd.grad if M is torch else M.grad


def XY(M):
    return M.tensor([1.0, 2.0], requires_grad=True), M.tensor([3.0], requires_grad=True)


def _accumulate(M):
    x, _ = XY(M)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    return x.grad


def _backward_list(M):
    x, y = XY(M)
    BACKWARD(M)([(x * y).sum(), (x ** 2).sum()], grad_tensors=[M.tensor(2.0), M.tensor(1.0)])
    return x.grad, y.grad


def _backward_inputs(M):
    x, y = XY(M)
    BACKWARD(M)((x * y).sum(), inputs=[x])
    return x.grad, y.grad


def _backward_twice(M):
    x, _ = XY(M)
    y = x.exp().sum()
    BACKWARD(M)(y)
    BACKWARD(M)(y)


def _retain_graph(M):
    x, _ = XY(M)
    y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    return x.grad


def _grad_unused(M, **kw):
    x, y = XY(M)
    return GRAD(M)((x * 2).sum(), [x, y], **kw)


def _grad_create_graph(M):
    x, _ = XY(M)
    g, = GRAD(M)((x ** 3).sum(), x, create_graph=True)
    return GRAD(M)(g.sum(), x)


def _grad_leaves_grad_alone(M):
    x, _ = XY(M)
    g, = GRAD(M)((x ** 3).sum(), x)
    return g.requires_grad, x.grad


@_cases(
    accumulates=_accumulate,
    backward_list=_backward_list,
    backward_inputs=_backward_inputs,
    backward_tensor_gradient=lambda M: (BACKWARD(M)(XY(M)[0] * 2, M.ones(2)), None)[1],
    backward_twice=_backward_twice,
    retain_graph=_retain_graph,
    grad_tuple=lambda M: GRAD(M)((XY(M)[0] ** 3).sum(), XY(M)[0]),
    grad_list_inputs=lambda M: (lambda x, y: GRAD(M)([(x * y).sum()], [x, y]))(*XY(M)),
    grad_unused=_grad_unused,
    grad_allow_unused=lambda M: _grad_unused(M, allow_unused=True),
    grad_materialize=lambda M: _grad_unused(M, allow_unused=True, materialize_grads=True),
    grad_create_graph=_grad_create_graph,
    grad_leaves_grad_alone=_grad_leaves_grad_alone,
    grad_no_requires_grad=lambda M: GRAD(M)((M.ones(2) ** 3).sum(), M.ones(2)),
    grad_non_scalar=lambda M: (lambda x: GRAD(M)(x ** 3, x))(XY(M)[0]),
    grad_outputs=lambda M: (lambda x: GRAD(M)(x ** 3, x, grad_outputs=M.ones(2)))(XY(M)[0]),
    grads_batched=lambda M: (lambda x: GRAD(M)(x ** 3, x, grad_outputs=M.eye(2),
                                               is_grads_batched=True))(XY(M)[0]),
)
def test_backward_and_grad_as_torch(case):
    same(case)


def test_backward_through_freed_graph_says_retain_graph():
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        _backward_twice(tg)


# ---------------------------------------------------------------- grad mode
def _no_grad(M):
    x = M.ones(2, requires_grad=True)
    with M.no_grad():
        y = x * 2
        inside = M.is_grad_enabled()
    return y.requires_grad, y.grad_fn is None, inside, M.is_grad_enabled()


def _no_grad_decorators(M):
    @M.no_grad()
    def f(x):
        return x * 2

    @M.no_grad
    def g(x):
        return x * 2
    x = M.ones(2, requires_grad=True)
    return f(x).requires_grad, g(x).requires_grad


def _enable_grad(M):
    x = M.ones(2, requires_grad=True)

    @M.enable_grad()
    def f(x):
        return x * 2
    with M.no_grad():
        with M.enable_grad():
            y = x * 2
        z = x * 2
        w = f(x)
    return y.requires_grad, z.requires_grad, w.requires_grad


def _set_grad_enabled(M):
    x = M.ones(2, requires_grad=True)
    with M.set_grad_enabled(False):
        a = (x * 2).requires_grad, M.is_grad_enabled()

    @M.set_grad_enabled(False)
    def f(x):
        return x * 2
    b = f(x).requires_grad, M.is_grad_enabled()
    M.set_grad_enabled(False)
    c = M.is_grad_enabled()
    M.set_grad_enabled(True)
    return a, b, c, M.is_grad_enabled()


def _inference_mode(M):
    x = M.ones(2, requires_grad=True)
    with M.inference_mode():
        y = x * 2
        inside = M.is_grad_enabled(), M.is_inference_mode_enabled()
    with M.inference_mode(False):
        off = M.is_grad_enabled()
    with M.autograd.inference_mode():
        z = x * 2
    return y.requires_grad, inside, y.is_inference(), off, z.requires_grad


@_cases(no_grad=_no_grad, no_grad_decorators=_no_grad_decorators, enable_grad=_enable_grad,
        set_grad_enabled=_set_grad_enabled, inference_mode=_inference_mode)
def test_grad_mode_as_torch(case):
    same(case)


# ---------------------------------------------------------------- hooks and .grad
def _hook_non_leaf(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    seen = []
    y.register_hook(lambda g: seen.append(g.clone()))
    (y * 3).sum().backward()
    return seen


def _retain_grad(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y ** 2).sum().backward()
    return y.grad, y.retains_grad


def _grad_assigned(M):
    x = M.ones(2, requires_grad=True)
    x.grad = M.ones(2) * 5
    (x * 2).sum().backward()
    return x.grad


def _zero_grad_in_place(M):
    x = M.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    x.grad.zero_()
    return x.grad


def _detach_(M):
    y = M.ones(2, requires_grad=True) * 2
    y.detach_()
    return y.requires_grad, y.is_leaf


def _data(M):
    x = M.ones(2, requires_grad=True)
    x.data.mul_(3)
    return x.detach(), x.data.requires_grad, x.requires_grad


@_cases(hook_non_leaf=_hook_non_leaf,
        hook_without_grad=lambda M: M.ones(2).register_hook(lambda g: g),
        retain_grad=_retain_grad, grad_assigned=_grad_assigned,
        zero_grad_in_place=_zero_grad_in_place, detach_=_detach_, data=_data)
def test_hooks_and_grad_fields_as_torch(case):
    same(case)


# ---------------------------------------------------------------- Tape
def test_tape_signature_and_structure():
    assert _defaults(tg.Tape)["persistent"] is False
    x, w = tg.tensor([1.0, 2.0]), tg.tensor(3.0)
    with tg.Tape() as tape:
        tape.watch(x)
        tape.watch(w)
        y = (x * w).sum()
    g = tape.gradient(y, {"a": x, "b": (w,), "c": [x]})
    assert type(g) is dict and type(g["b"]) is tuple and type(g["c"]) is list
    assert g["a"].tolist() == [3.0, 3.0] and g["b"][0].item() == 3.0


def test_tape_gradient_once_unless_persistent():
    x = tg.tensor([1.0, 2.0])
    with tg.Tape() as tape:
        tape.watch(x)
        y = x ** 2
    assert tape.gradient(y, x).tolist() == [2.0, 4.0]  # a non-scalar target: its sum
    with pytest.raises(RuntimeError):
        tape.gradient(y, x)
    with tg.Tape(persistent=True) as tape:
        tape.watch(x)
        y = x ** 2
    assert tape.gradient(y, x).tolist() == tape.gradient(y, x).tolist() == [2.0, 4.0]


def test_tape_nesting_stop_recording_and_output_gradients():
    x = tg.tensor(2.0)
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = x ** 3
        g = inner.gradient(y, x)
    assert outer.gradient(g, x).item() == 12.0
    with tg.Tape() as tape:
        tape.watch(x)
        y = x ** 2
        with tape.stop_recording():
            z = x ** 3
        w = y + z
    assert tape.gradient(w, x).item() == 4.0
    with tg.Tape() as tape:
        tape.watch(x)
        y = x * 3
    assert tape.gradient(y, x, output_gradients=tg.tensor(2.0)).item() == 6.0
    with tg.Tape() as tape:
        tape.watch(x)
    assert tape.gradient(x ** 2, x) is None  # nothing after the block is recorded


# ---------------------------------------------------------------- transforms
def FN(M):
    return TF if M is torch else tg.func


def V(M):
    return M.tensor([0.3, -1.2, 2.0], dtype=M.float64)


def ONES(M):
    return M.ones(3, dtype=M.float64)


def _scalar(a):
    return (a.sin() * a).sum()


def _per_sample(M):
    f = FN(M).grad(lambda w, x: (w * x).sum().sin())
    return FN(M).vmap(f, in_dims=(None, 0))(V(M), M.ones(4, 3, dtype=M.float64))


def _no_perturbation_confusion(M):
    g = FN(M).grad
    return g(lambda x: g(lambda y: x * y)(M.tensor(1.0, dtype=M.float64)) * x)(
        M.tensor(2.0, dtype=M.float64))


@_cases(
    grad=lambda M: FN(M).grad(_scalar)(V(M)),
    grad_argnums=lambda M: FN(M).grad(lambda a, b: (a * b.exp()).sum(), argnums=1)(V(M), V(M)),
    grad_argnums_tuple=lambda M: FN(M).grad(lambda a, b: (a * b.exp()).sum(),
                                            argnums=(0, 1))(V(M), V(M)),
    grad_has_aux=lambda M: FN(M).grad(lambda a: ((a ** 2).sum(), a * 3), has_aux=True)(V(M)),
    grad_non_scalar=lambda M: FN(M).grad(lambda a: a ** 2)(V(M)),
    grad_grad=lambda M: FN(M).grad(FN(M).grad(lambda a: a.sin() * a ** 3))(
        M.tensor(0.7, dtype=M.float64)),
    vjp=lambda M: (lambda out, fn: (out, fn(ONES(M))))(*FN(M).vjp(lambda a: a.sin() * a, V(M))),
    vjp_two=lambda M: (lambda out, fn: (out, fn(ONES(M))))(
        *FN(M).vjp(lambda a, b: a.sin() * b, V(M), V(M))),
    vjp_has_aux=lambda M: (lambda out, fn, aux: (out, fn(ONES(M)), aux))(
        *FN(M).vjp(lambda a: (a.sin(), a.cos()), V(M), has_aux=True)),
    jvp=lambda M: FN(M).jvp(lambda a: a.sin() * a, (V(M),), (ONES(M),)),
    jvp_has_aux=lambda M: FN(M).jvp(lambda a: (a.sin(), a * 2), (V(M),), (ONES(M),),
                                    has_aux=True),
    jacrev=lambda M: FN(M).jacrev(lambda a: a.sin() * a.sum())(V(M)),
    jacrev_argnums=lambda M: FN(M).jacrev(lambda a, b: a.sin() * b.sum(),
                                          argnums=(0, 1))(V(M), V(M)),
    jacrev_has_aux=lambda M: FN(M).jacrev(lambda a: (a.sin(), a), has_aux=True)(V(M)),
    jacrev_outputs=lambda M: FN(M).jacrev(lambda a: (a.sin(), a.sum()))(V(M)),
    jacfwd=lambda M: FN(M).jacfwd(lambda a: a.sin() * a.sum())(V(M)),
    jacfwd_argnums=lambda M: FN(M).jacfwd(lambda a, b: a.sin() * b.sum(), argnums=1)(V(M), V(M)),
    hessian=lambda M: FN(M).hessian(lambda a: (a.sin() * a ** 2).sum())(V(M)),
    hessian_argnums=lambda M: FN(M).hessian(lambda a, b: (a.sin() * b ** 2).sum(),
                                            argnums=1)(V(M), V(M)),
    vmap=lambda M: FN(M).vmap(lambda a: a.sum())(M.ones(3, 4)),
    vmap_in_dims=lambda M: FN(M).vmap(lambda a, b: a * b, in_dims=(1, None))(M.ones(3, 4),
                                                                             M.ones(3)),
    vmap_out_dims=lambda M: FN(M).vmap(lambda a: a * 2, out_dims=1)(M.arange(12.0).reshape(3, 4)),
    vmap_tuple_out=lambda M: FN(M).vmap(lambda a: (a * 2, a.sum()))(M.ones(3, 4)),
    vmap_chunks=lambda M: FN(M).vmap(lambda a: a.sum(), chunk_size=2)(M.ones(5, 4)),
    vmap_randomness_error=lambda M: FN(M).vmap(lambda a: a + M.rand(4))(M.ones(3, 4)),
    vmap_sizes_differ=lambda M: FN(M).vmap(lambda a, b: a + b)(M.ones(3, 4), M.ones(2, 4)),
    vmap_grad=_per_sample,
    grad_of_jvp=lambda M: FN(M).grad(lambda x: FN(M).jvp(_scalar, (x,), (ONES(M),))[1])(V(M)),
    jacrev_of_grad=lambda M: FN(M).jacrev(FN(M).grad(lambda a: (a.sin() * a ** 2).sum()))(V(M)),
    closure=_no_perturbation_confusion,
)
def test_transforms_as_torch_func(case):
    same(case, rtol=1e-10, atol=1e-12)


def test_transform_names_and_defaults():
    assert tg.vmap is tg.func.vmap and tg.func is tg.functional
    for name in ["grad", "jacrev", "jacfwd", "hessian"]:
        assert _defaults(getattr(tg.func, name))["argnums"] == 0, name
    assert _defaults(tg.func.grad)["has_aux"] is False
    v = _defaults(tg.func.vmap)
    assert (v["in_dims"], v["out_dims"], v["randomness"], v["chunk_size"]) == (0, 0, "error", None)
    assert _defaults(tg.func.functional_call)["kwargs"] is None


def test_value_and_grad_and_hvp():
    value, g = tg.func.value_and_grad(_scalar)(V(tg))
    tv = V(torch)
    tg_, tvalue = TF.grad_and_value(_scalar)(tv)
    np.testing.assert_allclose(value.item(), tvalue.item(), rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), tg_.numpy(), rtol=1e-12)
    f = lambda a: (a.sin() * a ** 2).sum()  # noqa: E731
    value, prod = tg.func.hvp(f, (V(tg),), (ONES(tg),))
    tvalue, tprod = torch.autograd.functional.hvp(f, tv, ONES(torch))
    np.testing.assert_allclose(value.item(), tvalue.item(), rtol=1e-12)
    np.testing.assert_allclose(prod.numpy(), tprod.numpy(), rtol=1e-10)


def test_functional_call_and_its_gradient():
    lin = tg.nn.Linear(3, 2).double()
    p = {k: v.detach() * 2 for k, v in lin.named_parameters()}
    x = V(tg)
    want = x @ p["weight"].T + p["bias"]
    np.testing.assert_allclose(tg.func.functional_call(lin, p, (x,)).numpy(), want.numpy())
    np.testing.assert_allclose(tg.func.functional_call(lin, p, x).numpy(), want.numpy())
    np.testing.assert_allclose(
        tg.func.functional_call(lin, p, (), {"input": x}).numpy(), want.numpy())
    g = tg.func.grad(lambda p, x: tg.func.functional_call(lin, p, (x,)).sum())(p, x)
    assert type(g) is dict and sorted(g) == ["bias", "weight"]
    np.testing.assert_allclose(g["weight"].numpy(), np.stack([x.numpy()] * 2))
    assert lin.weight.grad is None


def test_forward_ad_as_torch():
    import torch.autograd.forward_ad as tfa

    def run(M, fa):
        with fa.dual_level():
            d = fa.make_dual(V(M), ONES(M))
            u = fa.unpack_dual(d.sin() * d)
            return u.primal, u.tangent, u._fields, fa.unpack_dual(V(M)).tangent
    ours, theirs = run(tg, tg.forward_ad), run(torch, tfa)
    np.testing.assert_allclose(ours[0].numpy(), theirs[0].numpy())
    np.testing.assert_allclose(ours[1].numpy(), theirs[1].numpy())
    assert ours[2] == theirs[2] == ("primal", "tangent") and ours[3] is None


def test_checkpoint_replays_the_same_dropout_mask():
    assert _defaults(tg.checkpoint)["preserve_rng_state"] is True
    tg.manual_seed(0)
    x = tg.ones(50, requires_grad=True)
    y = tg.checkpoint(lambda a: tg.nn.functional.dropout(a * 2, 0.5, training=True), x)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (y.detach().numpy() != 0) * 4.0)


def test_detect_anomaly_names_the_op():
    with pytest.raises(RuntimeError, match="sqrt"):
        with tg.detect_anomaly():
            tg.sqrt(tg.tensor([-1.0], requires_grad=True))
    with pytest.raises(RuntimeError, match="log"):
        with tg.autograd.detect_anomaly():
            x = tg.tensor([0.0, 1.0], requires_grad=True)
            (tg.log(x) * 0).sum().backward()


def test_a_recording_is_freed_by_reference_counting():
    import gc
    gc.disable()
    try:
        x = tg.ones(10, requires_grad=True)
        y = (x * 2).exp().sum()
        ref = weakref.ref(y.grad_fn)
        del y
        assert ref() is None
    finally:
        gc.enable()
