"""API.md "Operators registry", "Sharing operators with other frameworks", "Fusion",
"Devices and interop" and the rest of "Tools": OpDef lookups, infer/workspace/compute
on raw arrays, custom ops to second order, torch_ops/jax_ops/from_torch/from_jax,
elementwise and fuse against PyTorch's gradients, devices, DLPack both ways,
tg.profile, gradcheck's failure class, assert_close and to_dot."""
import inspect

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")
R = tg.ops_registry


@pytest.fixture(autouse=True)
def _forget_declared_ops():
    """The ops a test declares leave the registry with it."""
    before = {op.name for op in R.list_ops()}
    yield
    for op in R.list_ops():
        if op.name not in before:
            R.unregister(op.name)


# ---------------------------------------------------------------- registry
def test_list_ops_and_get():
    ops = R.list_ops()
    assert len(ops) > 400
    assert {op.kind for op in ops} == {"basic", "workspace", "dynamic", "view"}
    views = R.list_ops(kind="view")
    assert views and all(op.kind == "view" for op in views)
    for name in ["conv2d", "transpose", "matmul", "cross_entropy", "where", "einsum", "cat"]:
        op = R.get(name)
        assert op.name == name and type(op.kind) is str
    with pytest.raises(KeyError, match="nonexistent_op"):
        R.get("nonexistent_op")


def test_infer_and_workspace_touch_no_data():
    spec = R.TensorSpec((2, 3), np.float32)
    assert spec._fields == ("shape", "dtype") and spec.shape == (2, 3)
    out = R.get("matmul").infer(spec, R.TensorSpec((3, 4), np.float32))
    assert isinstance(out, R.TensorSpec) and out.shape == (2, 4) and out.dtype == np.float32
    x, w = R.TensorSpec((1, 3, 8, 8), np.float32), R.TensorSpec((4, 3, 3, 3), np.float32)
    conv = R.get("conv2d")
    assert conv.infer(x, w, stride=2, padding=1, dilation=1, groups=1).shape == (1, 4, 4, 4)
    assert type(conv.workspace(x, w, padding=1)) is int
    assert R.get("nonzero").infer(R.TensorSpec((3, 4), np.float32)).shape == (None, 2)


def test_compute_on_raw_arrays():
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    out = np.empty((2, 4), np.float32)
    R.get("matmul").compute(a, b, out=out)
    assert (out == 3).all()
    np.testing.assert_array_equal(np.asarray(R.get("add").compute(torch.ones(2), torch.ones(2))),
                                  [2, 2])
    specs = []

    def alloc(spec):
        specs.append(spec)
        return np.empty(spec.shape, spec.dtype)
    r = R.get("nonzero").compute(np.array([[0, 1], [1, 1]]), alloc=alloc)
    assert len(specs) == 1 and np.asarray(r).tolist() == [[0, 1], [1, 0], [1, 1]]


def test_custom_op_records_to_second_order():
    params = inspect.signature(tg.custom_op).parameters
    assert [(k, params[k].default) for k in ["infer", "kind", "workspace", "jvp", "vmap"]] == \
        [("infer", None), ("kind", "basic"), ("workspace", None), ("jvp", None), ("vmap", None)]
    cube = tg.custom_op("contract_cube", lambda x: x ** 3, lambda g, x: (g * 3 * x * x,))
    x = tg.tensor([2.0], dtype=tg.float64, requires_grad=True)
    y = cube(x)
    g, = tg.grad(y.sum(), x, create_graph=True)
    gg, = tg.grad(g.sum(), x)
    assert (y.item(), g.item(), gg.item()) == (8.0, 12.0, 12.0)
    assert R.get("contract_cube").name == "contract_cube"
    add3 = tg.custom_op("contract_add3", lambda *a: a[0] + a[1] + a[2],
                        lambda g, *xs: tuple(g for _ in xs))
    assert add3(tg.ones(2), tg.ones(2), tg.ones(2)).tolist() == [3, 3]
    scale = tg.custom_op("contract_scale", lambda x, k=1.0: x * k, lambda g, x, k=1.0: (g * k,))
    x = tg.ones(2, requires_grad=True)
    scale(x, k=3.0).sum().backward()
    assert x.grad.tolist() == [3, 3]


# ---------------------------------------------------------------- interop
def test_torch_ops_differentiate_in_pytorch():
    from tapegrad.interop import torch_ops
    ns = torch_ops()
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(ns.conv2d(x, w, padding=1),
                               torch.nn.functional.conv2d(x, w, padding=1))
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ns.sin, (a,))
    assert torch.autograd.gradgradcheck(ns.sin, (a,))


def test_jax_ops_grad_jit_vmap():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from tapegrad.interop import jax_ops
    ns = jax_ops()
    g = jax.grad(lambda a: ns.sin(a).sum())(jnp.array([0.3, 1.1]))
    np.testing.assert_allclose(np.asarray(g), np.cos([0.3, 1.1]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(ns.sin))(jnp.ones((2, 3)))),
                               np.sin(np.ones((2, 3))), rtol=1e-6)


def test_from_torch_and_from_jax_to_second_order():
    from tapegrad.interop import from_jax, from_torch
    f = from_torch(lambda a: torch.sin(a) * a, name="contract_tsin")
    x = tg.tensor([0.3], dtype=tg.float64, requires_grad=True)
    g, = tg.grad(f(x).sum(), x, create_graph=True)
    gg, = tg.grad(g.sum(), x)
    np.testing.assert_allclose(g.item(), np.cos(0.3) * 0.3 + np.sin(0.3), rtol=1e-12)
    np.testing.assert_allclose(gg.item(), -np.sin(0.3) * 0.3 + 2 * np.cos(0.3), rtol=1e-12)
    pytest.importorskip("jax")
    import jax.numpy as jnp
    h = from_jax(lambda a: jnp.sin(a) * a, name="contract_jsin")
    x = tg.tensor([0.3], requires_grad=True)
    h(x).sum().backward()
    np.testing.assert_allclose(x.grad.item(), np.cos(0.3) * 0.3 + np.sin(0.3), rtol=1e-5)


# ---------------------------------------------------------------- fusion
def _torch_grads(fn, *values):
    ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    out = fn(*ts)
    gs = torch.autograd.grad(out.sum(), ts, create_graph=True)
    ggs = torch.autograd.grad(sum(g.sum() for g in gs), ts)
    return out, gs, ggs


def test_elementwise_value_and_gradients_as_torch():
    params = inspect.signature(tg.elementwise).parameters
    assert list(params)[:3] == ["name", "expr", "inputs"] and params["inputs"].default is None
    swish = tg.elementwise("contract_swish", "x * sigmoid(x)")
    x = tg.tensor([0.5, -1.0, 2.0], dtype=tg.float64, requires_grad=True)
    y = swish(x)
    g, = tg.grad(y.sum(), x, create_graph=True)
    gg, = tg.grad(g.sum(), x)
    ty, (tg1,), (tgg,) = _torch_grads(lambda a: a * torch.sigmoid(a), [0.5, -1.0, 2.0])
    for a, b in [(y, ty), (g, tg1), (gg, tgg)]:
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10)
    axpb = tg.elementwise("contract_axpb", "a * x + b", inputs=["x", "a", "b"])
    assert axpb(tg.tensor([1.0, 2.0]), tg.tensor(3.0), tg.tensor(1.0)).tolist() == [4.0, 7.0]


def test_fuse_value_and_gradients_as_torch():
    @tg.fuse
    def f(x, y):
        return tg.tanh(x) * y + tg.exp(-x)
    xs, ys = [0.5, -1.0], [2.0, 3.0]
    x = tg.tensor(xs, dtype=tg.float64, requires_grad=True)
    y = tg.tensor(ys, dtype=tg.float64, requires_grad=True)
    out = f(x, y)
    out.sum().backward()
    t_out, t_grads, _ = _torch_grads(lambda a, b: torch.tanh(a) * b + torch.exp(-a), xs, ys)
    np.testing.assert_allclose(out.detach().numpy(), t_out.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), t_grads[0].detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), t_grads[1].detach().numpy(), rtol=1e-12)


# ---------------------------------------------------------------- devices and DLPack
def test_devices():
    cpu = tg.device("cpu")
    assert str(cpu) == "cpu" and cpu.type == "cpu" and cpu == tg.device("cpu")
    assert repr(cpu) == repr(torch.device("cpu")).replace("torch.", "")
    d = tg.device("cuda:1")
    assert (str(d), d.type, d.index) == ("cuda:1", "cuda", 1)
    assert tg.device("cuda").type == "cuda"
    with pytest.raises((ValueError, RuntimeError)):
        tg.device("tpu")
    assert isinstance(tg.cuda.is_available(), bool)
    assert tg.ones(2, device=cpu).device == cpu and tg.ones(2, device="cpu").device.type == "cpu"


def test_dlpack_both_ways_zero_copy():
    t = torch.arange(4.0)
    tg.from_dlpack(t)[0] = 9
    assert t[0].item() == 9
    x = tg.arange(4.0)
    torch.from_dlpack(x)[1] = 8
    np.from_dlpack(x)[2] = 7
    assert x.tolist() == [0, 8, 7, 3]
    a = np.from_dlpack(x, copy=True)
    a[0] = 5
    assert x[0].item() == 0
    assert np.from_dlpack(x, device="cpu").tolist() == [0, 8, 7, 3]
    assert type(x.__dlpack__(max_version=(1, 0))).__name__ == "PyCapsule"


def test_dlpack_read_only_flags():
    x = tg.arange(4.0, requires_grad=True)
    assert np.from_dlpack(x).flags.writeable is False
    a = np.arange(4.0)
    a.flags.writeable = False
    t = tg.from_dlpack(a)
    with pytest.raises(RuntimeError, match="read-only"):
        t[0] = 1
    with pytest.raises(RuntimeError, match="read-only"):
        t.add_(1)


def test_dlpack_with_jax():
    pytest.importorskip("jax")
    import jax.numpy as jnp
    assert tg.from_dlpack(jnp.arange(4.0)).tolist() == [0, 1, 2, 3]
    assert jnp.from_dlpack(tg.arange(4.0)).tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------- tools
def test_profile_counts_ops():
    with tg.profile() as prof:
        x = tg.ones(10, requires_grad=True)
        (x * 2).exp().sum().backward()
    counts = prof.counts() if callable(prof.counts) else prof.counts
    assert counts["mul"] == 1 and counts["exp"] == 1
    assert "exp" in prof.table()


def test_gradcheck_failure_is_pytorchs_class():
    bad = tg.custom_op("contract_bad_sin", lambda x: np.sin(x), lambda g, x: (g * 2,))
    x = tg.tensor([0.3], dtype=tg.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        tg.testing.gradcheck(bad, (x,))
    with pytest.raises(AssertionError):
        tg.testing.gradcheck(bad, (x,))
    assert tg.testing.gradcheck(bad, (x,), raise_exception=False) is False
    assert tg.testing.gradcheck(lambda a: a.sin(), x) is True
    assert tg.testing.gradgradcheck(lambda a: a.sin() * a, (x,)) is True


def test_assert_close_and_to_dot():
    tg.testing.assert_close(tg.ones(2), tg.ones(2))
    with pytest.raises(AssertionError):
        tg.testing.assert_close(tg.ones(2), tg.ones(2) * 2)
    with pytest.raises(AssertionError, match="dtype"):
        tg.testing.assert_close(tg.ones(2), tg.ones(2, dtype=tg.float64))
    tg.testing.assert_close(tg.ones(2), tg.ones(2, dtype=tg.float64), check_dtype=False)
    dot = tg.viz.to_dot((tg.ones(2, requires_grad=True) * 2).sum())
    assert dot.startswith("digraph") and "mul" in dot and "sum" in dot
