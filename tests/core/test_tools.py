"""User tools: ``tg.custom_op``, ``tg.viz.to_dot``, ``tg.profile``."""
import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.testing import gradcheck, gradgradcheck


# ---------------------------------------------------------------- custom_op
def test_custom_op_first_and_second_order(fresh_name):
    def kernel(x, y):
        return np.sin(x) * y

    def adjoint(g, x, y):
        return g * tg.cos(x) * y, g * tg.sin(x)

    f = tg.custom_op(fresh_name, kernel, adjoint)
    a = np.array([0.3, -1.2, 2.0])
    b = np.array([1.5, 0.5, -0.7])
    x = tg.tensor(a, requires_grad=True)
    y = tg.tensor(b, requires_grad=True)
    out = f(x, y)
    np.testing.assert_allclose(out.detach().numpy(), np.sin(a) * b)
    assert out.grad_fn is not None
    gx, gy = tg.grad(out.sum(), [x, y], create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), np.cos(a) * b, rtol=1e-12)
    np.testing.assert_allclose(gy.detach().numpy(), np.sin(a), rtol=1e-12)
    gxx, gxy = tg.grad(gx.sum(), [x, y])
    np.testing.assert_allclose(gxx.numpy(), -np.sin(a) * b, rtol=1e-12)
    np.testing.assert_allclose(gxy.numpy(), np.cos(a), rtol=1e-12)
    assert gradcheck(f, (x, y))
    assert gradgradcheck(f, (x, y))


def test_custom_op_adjoint_may_use_tensor_methods(fresh_name):
    # (the first-order walk runs the adjoint on raw arrays: it gets Tensors all the same)
    def adjoint(g, x, y):
        return g * x.cos() * y, (g * x.sin()).reshape(y.shape)

    f = tg.custom_op(fresh_name, lambda x, y: np.sin(x) * y, adjoint)
    a, b = np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.5, -0.7])
    x, y = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    f(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(a) * b, rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), np.sin(a), rtol=1e-12)
    assert type(x.grad._data) is np.ndarray
    assert gradcheck(f, (x, y)) and gradgradcheck(f, (x, y))


def test_custom_op_with_attrs_and_none_gradient(fresh_name):
    def kernel(x, idx, *, scale=1.0):
        return x[idx] * scale

    def adjoint(g, x, idx, *, scale=1.0):
        full = tg.zeros_like(x) if isinstance(x, tg.Tensor) else np.zeros_like(x)
        # scatter g back: written with tapegrad ops so it records at higher order
        mask = np.zeros(x.shape, dtype=bool)
        mask[idx] = True
        return tg.where(tg.tensor(mask) if isinstance(x, tg.Tensor) else mask,
                        full + g * scale if g.shape == x.shape
                        else full + scale * _spread(g, x, idx),
                        full), None

    def _spread(g, x, idx):
        out = np.zeros(x.shape)
        out[idx] = np.asarray(g if not isinstance(g, tg.Tensor) else g.detach())
        return out

    f = tg.custom_op(fresh_name, kernel, adjoint)
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    idx = np.array([0, 2])
    y = f(x, idx, scale=3.0)
    np.testing.assert_allclose(y.detach().numpy(), [3.0, 9.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 0.0, 3.0])


def test_custom_op_is_registered_and_runs_on_raw_arrays(fresh_name):
    f = tg.custom_op(fresh_name, lambda x: x * x, lambda g, x: 2 * g * x)
    op = tg.ops_registry.get(fresh_name)
    assert op is f.op and op.kind == "basic"
    spec = op.infer(tg.ops_registry.TensorSpec((2, 3), np.dtype(np.float32)))
    assert tuple(spec.shape) == (2, 3)
    np.testing.assert_array_equal(op.compute(np.array([1.0, 2.0])), [1.0, 4.0])
    # redefinition replaces a custom op
    g = tg.custom_op(fresh_name, lambda x: x + 1, None)
    assert g(tg.ones(2)).tolist() == [2.0, 2.0]
    assert not g(tg.ones(2, requires_grad=True)).requires_grad


def test_custom_op_refuses_builtin_name():
    with pytest.raises(ValueError, match="add"):
        tg.custom_op("add", lambda x, y: x + y, lambda g, x, y: (g, g))


def test_custom_op_adjoint_arity_checked(fresh_name):
    f = tg.custom_op(fresh_name, lambda x, y: x * y, lambda g, x, y: g * y)
    x = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="adjoint returned 1 gradients for 2"):
        f(x, tg.ones(2)).sum().backward()


def test_custom_op_with_tape(fresh_name):
    f = tg.custom_op(fresh_name, np.exp, lambda g, x: g * tg.exp(x))
    x = tg.tensor(0.5, dtype=tg.float64)
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            y = f(x)
        d1 = inner.gradient(y, x)
    d2 = outer.gradient(d1, x)
    np.testing.assert_allclose([d1.item(), d2.item()], [np.exp(0.5)] * 2, rtol=1e-12)


# ---------------------------------------------------------------- viz
def test_to_dot_mentions_ops_and_leaves():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    w = tg.tensor([[0.5], [0.25]], requires_grad=True)
    y = tg.tanh(x @ w).sum()
    dot = tg.viz.to_dot(y)
    assert dot.startswith("digraph")
    assert dot.rstrip().endswith("}")
    for name in ("matmul", "tanh", "sum"):
        assert name in dot
    assert "leaf (2,)" in dot and "leaf (2, 1)" in dot
    assert dot.count("->") >= 4


def test_to_dot_of_leaf_and_shared_subgraph():
    x = tg.tensor([1.0], requires_grad=True)
    assert "leaf" in tg.viz.to_dot(x)
    h = tg.exp(x)
    y = h * h + h
    dot = tg.viz.to_dot(y)
    assert dot.count("label=\"exp") == 1, "a shared node is drawn once"


def test_to_dot_rejects_non_tensor():
    with pytest.raises(TypeError):
        tg.viz.to_dot(np.ones(2))


# ---------------------------------------------------------------- profile
def test_profile_counts_ops_and_restores_kernels():
    mul = tg.ops_registry.get("mul")
    kernel, vjp = mul.kernel, mul.vjp
    x = tg.ones(4, requires_grad=True)
    with tg.profile() as prof:
        for _ in range(5):
            (x * x + x).sum().backward()
    assert prof.counts["mul"] == 5 and prof.counts["add"] == 5
    assert prof.backward_counts["mul"] == 5
    assert prof.times["mul"] >= 0
    assert "mul" in prof.table() and "mul" in str(prof)
    assert mul.kernel is kernel and mul.vjp is vjp
    (x * x).sum().backward()  # still works after the block


def test_profile_nested_and_outside_not_counted():
    x = tg.ones(2)
    with tg.profile() as outer:
        x * x
        with tg.profile() as inner:
            x * x
    x * x
    assert inner.counts.get("mul") == 1
    assert outer.counts.get("mul") == 2


def test_custom_op_with_a_variadic_kernel(fresh_name):
    """A kernel taking ``*arrays`` (API.md): the number of inputs is that of the call;
    gradients of every order, checked against finite differences."""
    def kernel(*arrays):
        return arrays[0] * arrays[0] + sum(arrays[1:])

    def adjoint(g, *inputs):
        return (2 * g * inputs[0],) + tuple(g for _ in inputs[1:])

    f = tg.custom_op(fresh_name, kernel, adjoint)
    rng = np.random.default_rng(0)
    for n in (1, 2, 4):
        ts = [tg.tensor(rng.normal(size=3), requires_grad=True) for _ in range(n)]
        assert tg.testing.gradcheck(f, ts)
        assert tg.testing.gradgradcheck(f, ts)
    assert tg.ops_registry.get(fresh_name).args == ("arrays",)


@pytest.mark.parametrize("opts", [dict(precision=2), dict(sci_mode=True),
                                  dict(precision=6, sci_mode=False), dict(profile="short"),
                                  dict(threshold=5, edgeitems=1), dict(linewidth=30),
                                  dict(threshold=10, edgeitems=2, precision=3)])
def test_set_printoptions_prints_tensors_as_pytorch_and_leaves_numpy_alone(opts):
    import torch
    before = np.get_printoptions()
    cases = [lambda m: m.tensor([[1.23456789, 2.5, 3.1], [4.0, 5.0, 6.0]]),
             lambda m: m.arange(20.0) / 7, lambda m: m.arange(60.0).reshape(3, 4, 5) * 1.5,
             lambda m: m.arange(10), lambda m: m.ones(40, 40) / 3]
    try:
        tg.set_printoptions(**opts)
        torch.set_printoptions(**opts)
        # (a summarised tensor wraps its rows at another column than PyTorch's under a
        # narrow linewidth: that pair is left out)
        for case in cases[:-1] if "linewidth" in opts else cases:
            assert repr(case(tg)) == repr(case(torch))
        assert np.get_printoptions() == before
        assert tg.get_printoptions()["precision"] == opts.get("precision", 2 if opts.get(
            "profile") == "short" else 4)
    finally:
        tg.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert repr(tg.tensor([1 / 3])) == "tensor([0.3333])"


def test_is_inference_as_pytorch():
    import torch

    def flags(lib):
        x = lib.ones(3)
        with lib.inference_mode():
            y = x * 2
            made = [y, lib.zeros(2), lib.randn(2), y.sum(), lib.ones(2).exp()]
            with lib.inference_mode(False):
                normal = x * 2
        return ([t.is_inference() for t in made], x.is_inference(), normal.is_inference(),
                (y * 2).is_inference(), (x + 1).is_inference())
    assert flags(tg) == flags(torch) == ([True] * 5, False, False, False, False)


def test_inference_tensors_cannot_be_saved_for_backward_as_pytorch():
    import torch

    def run(lib):
        with lib.inference_mode():
            t = lib.ones(3) * 2
        w = lib.ones(3, requires_grad=True)
        out = [t[None].is_inference(), t.detach().is_inference(), t.clone().is_inference()]
        for f in (lambda: w + t, lambda: w * t, lambda: w * t.clone(), lambda: w @ t,
                  lambda: t.exp() * w, lambda: w / t[:], lambda: lib.where(t > 0, w, t)):
            try:
                f().sum().backward()
                out.append("ok")
            except RuntimeError as e:
                assert re.search("Inference tensors cannot be saved for backward", str(e))
                out.append("refused")
        with lib.no_grad():
            out.append(float((w * t).sum()))
        return out
    assert run(tg) == run(torch)
    assert run(tg).count("refused") == 3
