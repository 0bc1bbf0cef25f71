"""The exports called as users call PyTorch's and JAX's functions: inputs by keyword
(``conv2d(x, w, bias=b)``, ``add(a, other=b)``) and optional inputs left out
(``conv2d(x, w)``) reach the adjoint where they belong (gradients of every order
against PyTorch's own op); forward mode through an op without a jvp rule says so."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.fixture(scope="module")
def ns():
    from tapegrad.interop import torch_ops
    return torch_ops()


def _conv_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64, generator=g)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, generator=g)
    b = torch.randn(4, dtype=torch.float64, generator=g)
    return x, w, b


def test_conv2d_without_bias_differentiates_to_second_order(ns):
    x, w, _ = _conv_inputs()
    x, w = x[:1, :, :4, :4].clone().requires_grad_(), w[:2].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, k: ns.conv2d(a, k, padding=1), (x, w))
    assert torch.autograd.gradgradcheck(lambda a, k: ns.conv2d(a, k, padding=1), (x, w))


@pytest.mark.parametrize("call", ["keyword", "positional", "omitted"])
def test_conv2d_bias_by_keyword_gets_its_gradient(ns, call):
    x, w, b = _conv_inputs(1)
    mine = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    if call == "keyword":
        y = ns.conv2d(mine[0], mine[1], bias=mine[2], stride=2, padding=1)
        r = F.conv2d(ref[0], ref[1], bias=ref[2], stride=2, padding=1)
    elif call == "positional":
        y = ns.conv2d(mine[0], mine[1], mine[2], stride=2, padding=1)
        r = F.conv2d(ref[0], ref[1], ref[2], stride=2, padding=1)
    else:
        y = ns.conv2d(mine[0], mine[1], stride=2, padding=1)
        r = F.conv2d(ref[0], ref[1], stride=2, padding=1)
    torch.testing.assert_close(y, r)
    gy = torch.randn_like(r)
    (y * gy).sum().backward()
    (r * gy).sum().backward()
    for k, (a, e) in enumerate(zip(mine, ref)):
        if call == "omitted" and k == 2:
            assert a.grad is None and e.grad is None
            continue
        assert a.grad is not None, f"input {k} got no gradient"
        torch.testing.assert_close(a.grad, e.grad)


def test_other_by_keyword(ns):
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = ns.mul(a, other=b)
    torch.testing.assert_close(y, a * b)
    ga, gb = torch.autograd.grad(y.sum(), (a, b))
    torch.testing.assert_close(gb, a.detach().sum(0))
    torch.testing.assert_close(ga, b.detach().expand(3, 4))


def test_an_input_given_twice_is_refused(ns):
    a = torch.ones(3)
    with pytest.raises(TypeError, match="mul.*multiple values for argument 'other'"):
        ns.mul(a, a, other=a)
    with pytest.raises(TypeError, match="conv2d.*missing.*required.*argument.*'weight'"):
        ns.conv2d(torch.ones(1, 1, 3, 3), bias=torch.ones(1))


def test_forward_mode_without_a_rule_says_so(ns):
    name = "audit_triple_no_jvp"
    tg.custom_op(name, lambda x: np.asarray(x) * 3, lambda g, x: (g * 3,))
    from tapegrad.interop import torch_ops
    f = getattr(torch_ops(), name)
    x = torch.randn(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=f"{name}: no forward-mode rule"):
        torch.func.jvp(f, (x,), (torch.ones_like(x),))
    assert torch.autograd.gradcheck(f, (x.clone().requires_grad_(),))  # reverse mode works
    tg.ops_registry.unregister(name)


def test_jax_conv2d_bias_by_keyword_and_omitted():
    jax = pytest.importorskip("jax")
    from jax.test_util import check_grads

    from tapegrad.interop import jax_ops
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        J = jax_ops()
        x, w, b = (t.numpy() for t in _conv_inputs(2))
        xs, ws = x[:1, :2, :4, :4], w[:2, :2]
        check_grads(lambda a, k: J.conv2d(a, k, padding=1), (xs, ws), order=2, modes=("rev",))
        ref = [torch.tensor(t, requires_grad=True) for t in (x, w, b)]
        F.conv2d(*ref, padding=1).sum().backward()
        gx, gw, gb = jax.grad(lambda a, k, c: J.conv2d(a, k, bias=c, padding=1).sum(),
                              argnums=(0, 1, 2))(x, w, b)
        for got, r in zip((gx, gw, gb), ref):
            np.testing.assert_allclose(np.asarray(got), r.grad.numpy(), rtol=1e-10, atol=1e-10)
    finally:
        jax.config.update("jax_enable_x64", old)


def test_torch_func_transforms_made_of_vmap(ns):
    """torch.func.vmap, jacrev, jacfwd and hessian over exported ops (the export runs
    once per example, results stacked): as PyTorch's own ops give."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, dtype=torch.float64, generator=g)
    w = torch.randn(3, 5, 2, dtype=torch.float64, generator=g)
    func = torch.func
    torch.testing.assert_close(func.vmap(ns.sin)(x), torch.sin(x))
    torch.testing.assert_close(func.vmap(ns.matmul, in_dims=(None, 1))(x, w),
                               func.vmap(torch.matmul, in_dims=(None, 1))(x, w))
    torch.testing.assert_close(func.jacrev(ns.tanh)(x[0]), func.jacrev(torch.tanh)(x[0]))
    torch.testing.assert_close(func.jacfwd(ns.exp)(x[1]), func.jacfwd(torch.exp)(x[1]))
    torch.testing.assert_close(func.hessian(lambda v: ns.tanh(v).sum())(x[2]),
                               func.hessian(lambda v: torch.tanh(v).sum())(x[2]))
    got = func.vmap(lambda a: ns.max(a, dim=0))(x)  # two outputs, one integer
    want = func.vmap(lambda a: torch.max(a, dim=0))(x)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])


def test_jax_export_refuses_out_and_workspace():
    jax = pytest.importorskip("jax")
    from tapegrad.interop import jax_ops
    J = jax_ops()
    x = jax.numpy.ones((1, 1, 3, 3))
    with pytest.raises(TypeError, match="sin: out= has no meaning on JAX arrays"):
        J.sin(x, out=x)
    with pytest.raises(TypeError, match="conv2d: workspace= has no meaning on JAX arrays"):
        J.conv2d(x, x, workspace=np.empty(100, np.uint8))
