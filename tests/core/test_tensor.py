"""Tensor basics: factories, dtypes and promotion, repr, Python/NumPy conversions."""
import numpy as np
import pytest

import tapegrad as tg


# ---------------------------------------------------------------- factories
def test_tensor_default_dtypes():
    assert tg.tensor(1.5).dtype == tg.float32
    assert tg.tensor([1.0, 2.0]).dtype == tg.float32
    assert tg.tensor(3).dtype == tg.int64
    assert tg.tensor([1, 2]).dtype == tg.int64
    assert tg.tensor(True).dtype == tg.bool
    assert tg.tensor([[True, False]]).dtype == tg.bool
    assert tg.tensor(np.zeros(3, np.float64)).dtype == tg.float64
    assert tg.tensor(np.zeros(3, np.int32)).dtype == tg.int32
    assert tg.tensor([1.0], dtype=tg.float64).dtype == tg.float64


def test_set_default_dtype():
    tg.set_default_dtype(tg.float64)
    try:
        assert tg.get_default_dtype() == tg.float64
        assert tg.tensor(1.0).dtype == tg.float64
        assert tg.zeros(2).dtype == tg.float64
        assert (tg.tensor(1) / tg.tensor(2)).dtype == tg.float64
    finally:
        tg.set_default_dtype(tg.float32)
    with pytest.raises(TypeError):
        tg.set_default_dtype(tg.int64)
    assert tg.get_default_dtype() == tg.float32


def test_tensor_copies_but_from_numpy_shares():
    a = np.arange(4.0)
    t = tg.tensor(a)
    a[0] = 100
    assert t[0].item() == 0.0
    s = tg.from_numpy(a)
    assert np.shares_memory(s.numpy(), a)
    a[1] = 7
    assert s[1].item() == 7.0
    u = tg.as_tensor(a)
    assert np.shares_memory(u.numpy(), a)
    assert tg.as_tensor(a, dtype=tg.float32).dtype == tg.float32  # a converted copy


@pytest.mark.parametrize("factory", ["zeros", "ones", "empty", "rand", "randn"])
def test_shape_factories(factory):
    f = getattr(tg, factory)
    for t in (f(2, 3), f((2, 3)), f([2, 3])):
        assert t.shape == (2, 3)
        assert t.dtype == tg.float32
    t = f(2, dtype=tg.float64, requires_grad=True)
    assert t.dtype == tg.float64 and t.requires_grad and t.is_leaf
    assert f(()).shape == () and f(0, 3).shape == (0, 3)


def test_value_factories():
    np.testing.assert_array_equal(tg.zeros(2, 2).numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(tg.ones(3).numpy(), np.ones(3))
    np.testing.assert_array_equal(tg.full((2, 2), 7.0).numpy(), np.full((2, 2), 7.0))
    assert tg.full((2,), 7).dtype == tg.int64
    assert tg.full((2,), 7.0).dtype == tg.float32
    x = tg.ones(2, 3, dtype=tg.float64)
    assert tg.zeros_like(x).dtype == tg.float64 and tg.zeros_like(x).shape == (2, 3)
    np.testing.assert_array_equal(tg.ones_like(x).numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(tg.full_like(x, 3).numpy(), np.full((2, 3), 3.0))
    np.testing.assert_array_equal(tg.arange(5).numpy(), np.arange(5))
    assert tg.arange(5).dtype == tg.int64
    assert tg.arange(0.0, 1.0, 0.25).dtype == tg.float32
    np.testing.assert_allclose(tg.arange(0.0, 1.0, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(tg.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5))
    assert tg.linspace(0, 1, 5).dtype == tg.float32
    np.testing.assert_array_equal(tg.eye(3).numpy(), np.eye(3))
    r = tg.randint(0, 5, (100,))
    assert r.dtype == tg.int64 and r.numpy().min() >= 0 and r.numpy().max() < 5


def test_manual_seed_reproducible():
    tg.manual_seed(123)
    a = tg.randn(5).numpy().copy()
    b = tg.rand(3).numpy().copy()
    tg.manual_seed(123)
    np.testing.assert_array_equal(tg.randn(5).numpy(), a)
    np.testing.assert_array_equal(tg.rand(3).numpy(), b)
    assert not np.array_equal(tg.randn(5).numpy(), a)


def test_rand_ranges():
    tg.manual_seed(0)
    r = tg.rand(1000).numpy()
    assert r.min() >= 0 and r.max() < 1
    n = tg.randn(10000).numpy()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05


# ---------------------------------------------------------------- promotion
@pytest.mark.parametrize("a,b,expected", [
    (tg.float32, tg.float64, tg.float64),
    (tg.float16, tg.float32, tg.float32),
    (tg.int32, tg.int64, tg.int64),
    (tg.int8, tg.uint8, tg.int16),
    (tg.bool, tg.int32, tg.int32),
    (tg.bool, tg.float16, tg.float16),
    (tg.int64, tg.float32, tg.float32),   # ints with floats give the float
    (tg.int64, tg.float16, tg.float16),
    (tg.bool, tg.bool, tg.bool),
])
def test_tensor_tensor_promotion(a, b, expected):
    x = tg.ones(2, dtype=a)
    y = tg.ones(2, dtype=b)
    assert (x + y).dtype == expected
    assert (y + x).dtype == expected
    assert (x * y).dtype == expected


@pytest.mark.parametrize("dtype,scalar,expected", [
    (tg.float32, 2.0, tg.float32),   # weak Python float
    (tg.float16, 2.0, tg.float16),
    (tg.float32, 2, tg.float32),
    (tg.int32, 2, tg.int32),         # weak Python int
    (tg.int8, 2, tg.int8),
    (tg.int32, 2.5, tg.float32),     # int tensor * float -> default float
    (tg.bool, 1, tg.int64),          # bool + int -> int64
    (tg.bool, 1.5, tg.float32),
    (tg.bool, True, tg.bool),
])
def test_weak_scalar_promotion(dtype, scalar, expected):
    x = tg.ones(2, dtype=dtype)
    assert (x + scalar).dtype == expected
    assert (scalar + x).dtype == expected


def test_int_division_gives_default_float():
    a, b = tg.tensor([1, 2, 3]), tg.tensor([2, 2, 2])
    q = a / b
    assert q.dtype == tg.float32
    np.testing.assert_allclose(q.numpy(), [0.5, 1.0, 1.5])
    assert (a / 2).dtype == tg.float32
    assert (a // b).dtype == tg.int64
    assert (a * 1.5).dtype == tg.float32


def test_comparisons_are_bool_and_not_recorded():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    for r in (x < 1.5, x <= 1.5, x > 1.5, x >= 1.5, x == 1.0, x != 1.0):
        assert r.dtype == tg.bool
        assert not r.requires_grad and r.grad_fn is None


# ---------------------------------------------------------------- attributes
def test_attributes():
    x = tg.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and isinstance(x.shape, tuple)
    assert x.ndim == 3 and x.dim() == 3
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.numel() == 24 and len(x) == 2
    assert x.device == tg.device("cpu") and str(x.device) == "cpu"
    assert x.T.shape == (4, 3, 2)
    assert x.mT.shape == (2, 4, 3)
    assert x.is_leaf and x.grad_fn is None and x.grad is None and not x.requires_grad


def test_dtype_conversions():
    x = tg.tensor([1.7, -2.2])
    assert x.double().dtype == tg.float64
    assert x.half().dtype == tg.float16
    assert x.float().dtype == tg.float32
    assert x.long().dtype == tg.int64 and x.long().tolist() == [1, -2]
    assert x.int().dtype == tg.int32
    assert x.bool().dtype == tg.bool
    assert x.to(tg.float64).dtype == tg.float64
    assert x.astype(tg.int64).dtype == tg.int64
    assert x.to("cpu") is x or x.to("cpu").device == tg.device("cpu")


def test_requires_grad_only_for_floats():
    with pytest.raises(RuntimeError):
        tg.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError):
        tg.tensor([1, 2]).requires_grad_()
    x = tg.tensor([1.0]).requires_grad_()
    assert x.requires_grad


# ---------------------------------------------------------------- repr like torch
@pytest.mark.parametrize("make,expected", [
    (lambda: tg.tensor([1.0, 2.0]), "tensor([1., 2.])"),
    (lambda: tg.tensor([1.0, 2.0], requires_grad=True), "tensor([1., 2.], requires_grad=True)"),
    (lambda: tg.tensor([1.5, 2.25]), "tensor([1.5000, 2.2500])"),
    (lambda: tg.tensor([1, 2]), "tensor([1, 2])"),
    (lambda: tg.tensor(3.0), "tensor(3.)"),
    (lambda: tg.tensor([True, False]), "tensor([ True, False])"),
    (lambda: tg.tensor([1.0, 2.0], dtype=tg.float64), "tensor([1., 2.], dtype=tapegrad.float64)"),
    (lambda: tg.tensor([1, 2], dtype=tg.int32), "tensor([1, 2], dtype=tapegrad.int32)"),
    (lambda: tg.tensor([[1.0, 2.0], [3.0, 4.0]]), "tensor([[1., 2.],\n        [3., 4.]])"),
])
def test_repr_like_torch(make, expected):
    assert repr(make()) == expected


def test_repr_grad_fn():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<MulBackward0>)"
    assert repr((x * 2).sum()) == "tensor(6., grad_fn=<SumBackward0>)"


def test_repr_matches_torch_bodies():
    torch = pytest.importorskip("torch")
    for data in ([0.1, 2.5, -3.0], [[1e-5, 1.0]], [1e9, 1.0], [float("nan"), 1.0, float("inf")]):
        assert repr(tg.tensor(data)) == repr(torch.tensor(data)), data


# ---------------------------------------------------------------- conversions
def test_item_tolist_python_protocols():
    assert tg.tensor(2.5).item() == 2.5 and isinstance(tg.tensor(2.5).item(), float)
    assert tg.tensor([7]).item() == 7 and isinstance(tg.tensor([7]).item(), int)
    assert tg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert tg.tensor(True).item() is True
    assert float(tg.tensor([1.5])) == 1.5 and int(tg.tensor(3.7)) == 3
    assert bool(tg.tensor([1.0])) is True
    assert [t.item() for t in tg.tensor([1, 2, 3])] == [1, 2, 3]
    assert [1, 2, 3][tg.tensor(1)] == 2  # __index__


def test_item_and_bool_on_many_elements_raise():
    x = tg.ones(2, 3)
    with pytest.raises(RuntimeError, match="6"):
        x.item()
    with pytest.raises(RuntimeError):
        bool(x)
    with pytest.raises(TypeError):
        len(tg.tensor(1.0))
    assert x.sum().item() == 6.0


def test_numpy_shares_memory_and_refuses_requires_grad():
    x = tg.zeros(3)
    a = x.numpy()
    a[0] = 5
    assert x[0].item() == 5
    y = tg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        y.numpy()
    d = y.detach().numpy()
    assert np.shares_memory(d, y.detach().numpy())


def test_array_protocol():
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = np.asarray(x)
    assert a.dtype == np.float32 and np.shares_memory(a, x.numpy())
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.array(x), [[1, 2], [3, 4]])
    assert not np.shares_memory(np.array(x, copy=True), x.numpy())


def test_numpy_ufunc_and_operators_with_numpy_on_left():
    x = tg.tensor([1.0, 2.0])
    r = np.float32(2.0) * x
    assert isinstance(r, tg.Tensor)
    r2 = np.ones(2, np.float32) + x
    assert isinstance(r2, tg.Tensor), "NumPy array + Tensor should defer to the Tensor"


def test_detach_and_clone():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None
    assert np.shares_memory(d.numpy(), y.detach().numpy())
    c = y.clone()
    assert c.requires_grad and c.grad_fn is not None
    assert not np.shares_memory(c.detach().numpy(), y.detach().numpy())
    c.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_no_private_helpers_leak_into_namespace():
    leaked = [n for n in ("np", "math", "namedtuple", "register", "away_from",
                          "unary_samples", "binary_samples", "bad_broadcast",
                          "elementwise_infer", "op_error", "m_floor")
              if hasattr(tg, n)]
    assert not leaked, f"helpers leak into tg.*: {leaked}"
    # the public factory is the random tensor factory, not the sample helper
    assert isinstance(tg.rand(2), tg.Tensor)


# ---------------------------------------------------------------- grad / requires_grad setters
_SETTER_CASES = {
    "grad_ok": lambda M, x, y: setattr(x, "grad", M.ones(3)),
    "grad_none": lambda M, x, y: setattr(x, "grad", None),
    "grad_size": lambda M, x, y: setattr(x, "grad", M.ones(2)),
    "grad_size_2d": lambda M, x, y: setattr(x, "grad", M.ones(3, 1)),
    "grad_dtype": lambda M, x, y: setattr(x, "grad", M.ones(3, dtype=M.float64)),
    "grad_int": lambda M, x, y: setattr(x, "grad", M.ones(3, dtype=M.int64)),
    "grad_not_tensor": lambda M, x, y: setattr(x, "grad", 3),
    "grad_itself": lambda M, x, y: setattr(x, "grad", x),
    "grad_of_non_leaf": lambda M, x, y: setattr(y, "grad", M.ones(3)),
    "rg_non_leaf_false": lambda M, x, y: setattr(y, "requires_grad", False),
    "rg_non_leaf_true": lambda M, x, y: setattr(y, "requires_grad", True),
    "rg_non_leaf_method_true": lambda M, x, y: y.requires_grad_(True),
    "rg_non_leaf_method_false": lambda M, x, y: y.requires_grad_(False),
    "rg_leaf_false": lambda M, x, y: setattr(x, "requires_grad", False),
    "rg_int_true": lambda M, x, y: setattr(M.ones(3, dtype=M.int64), "requires_grad", True),
    "rg_int_false": lambda M, x, y: setattr(M.ones(3, dtype=M.int64), "requires_grad", False),
    "rg_not_bool": lambda M, x, y: setattr(x, "requires_grad", 1),
}


def _setter_outcome(M, case):
    x = M.ones(3, requires_grad=True)
    y = x * 2
    try:
        _SETTER_CASES[case](M, x, y)
    except Exception as e:  # noqa: BLE001 (the class is what is compared)
        return type(e).__name__, str(e)
    return None, (x.grad is None, x.requires_grad, y.requires_grad)


@pytest.mark.parametrize("case", sorted(_SETTER_CASES))
def test_grad_and_requires_grad_setters_as_torch(case):
    torch = pytest.importorskip("torch")
    ours, theirs = _setter_outcome(tg, case), _setter_outcome(torch, case)
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] is None:
        assert ours[1] == theirs[1]
    elif "size" in case:
        assert "to a tensor of size '[3]'" in ours[1] and "to a tensor of size '[3]'" in theirs[1]
    elif "rg_non_leaf" in case:
        assert "only change requires_grad flags of leaf variables" in ours[1]


def test_assigned_grad_is_the_tensor_given_and_accumulates():
    x = tg.ones(3, requires_grad=True)
    g = tg.full((3,), 2.0)
    x.grad = g
    assert x.grad is g
    (x * 3).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0, 5.0]
