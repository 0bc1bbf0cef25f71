"""PyTorch names and semantics checked one by one against the installed torch:
torch.func's ``func`` parameter, uint8 all/any, integer powers with negative
exponents, softmax and mse_loss of integer tensors, tril/triu_indices,
storage_offset, real, view(dtype) and as_strided."""
import inspect

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------- torch.func names
@pytest.mark.parametrize("name", ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd",
                                  "hessian", "vmap"])
def test_func_transforms_take_func_first(name):
    ours = list(inspect.signature(getattr(tg.func, name)).parameters)
    theirs = list(inspect.signature(getattr(torch.func, name)).parameters)
    assert ours[0] == theirs[0] == "func"


def test_func_transforms_accept_func_by_keyword_and_position():
    x = np.array([1.0, 2.0, 3.0])

    def f(a):
        return (a ** 3).sum()
    want = torch.func.grad(func=f)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(tg.func.grad(func=f)(tg.tensor(x)).numpy(), want)
    np.testing.assert_allclose(tg.func.grad(f)(tg.tensor(x)).numpy(), want)
    want_h = torch.func.hessian(func=f)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(tg.func.hessian(func=f)(tg.tensor(x)).numpy(), want_h)
    jt = torch.func.jacrev(func=torch.sin)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(tg.func.jacrev(func=tg.sin)(tg.tensor(x)).numpy(), jt)
    np.testing.assert_allclose(tg.func.jacfwd(func=tg.sin)(tg.tensor(x)).numpy(), jt)
    out, fn = tg.func.vjp(tg.sin, tg.tensor(x))
    np.testing.assert_allclose(fn(tg.ones(3))[0].detach().numpy(), np.cos(x))
    _, t = tg.func.jvp(func=tg.sin, primals=(tg.tensor(x),), tangents=(tg.ones(3),))
    np.testing.assert_allclose(t.numpy(), np.cos(x))


# ---------------------------------------------------------------- all / any
@pytest.mark.parametrize("dtype", ["uint8", "int64", "float32", "bool"])
@pytest.mark.parametrize("name", ["all", "any"])
def test_all_any_result_dtype(name, dtype):
    x = np.array([[1, 2, 0], [3, 4, 5]]).astype(dtype)
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        ours = getattr(tg, name)(tg.tensor(x), **kw)
        theirs = getattr(torch, name)(torch.tensor(x), **kw)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        method = getattr(tg.tensor(x), name)(**kw)
        assert method.dtype == ours.dtype


# ---------------------------------------------------------------- integer powers
@pytest.mark.parametrize("dtype,edtype", [("int64", "int64"), ("int32", "int64"),
                                          ("int8", "int32"), ("uint8", "int64")])
def test_integer_tensor_to_negative_integer_tensor_powers(dtype, edtype):
    base = np.array([-3, -2, -1, 0, 1, 2, 3]).astype(dtype)[:, None]
    exp = np.array([-3, -2, -1, 0, 1, 2]).astype(edtype)[None, :]
    want = torch.tensor(base) ** torch.tensor(exp)
    got = tg.tensor(base) ** tg.tensor(exp)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_python_int_base_to_negative_integer_tensor_powers():
    e = [-2, -1, 0, 3]
    for base in (-1, 0, 1, 2):
        want = torch.pow(base, torch.tensor(e))
        np.testing.assert_array_equal(tg.pow(base, tg.tensor(e)).numpy(), want.numpy())
        np.testing.assert_array_equal((base ** tg.tensor(e)).numpy(), want.numpy())


def test_integer_tensor_to_negative_python_int_raises_as_torch():
    with pytest.raises(RuntimeError, match="Integers to negative integer powers") as theirs:
        torch.tensor([2]) ** -1
    with pytest.raises(type(theirs.value), match="Integers to negative integer powers"):
        tg.tensor([2]) ** -1


# ---------------------------------------------------------------- integer softmax
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_softmax_of_integers_raises_as_torch(name, dtype):
    x = np.array([[1, 0, 2]]).astype(dtype)
    with pytest.raises(Exception) as theirs:
        getattr(torch.nn.functional, name)(torch.tensor(x), 1)
    with pytest.raises(type(theirs.value), match=name):
        getattr(F, name)(tg.tensor(x), 1)
    want = getattr(torch.nn.functional, name)(torch.tensor(x), 1, dtype=torch.float64)
    got = getattr(F, name)(tg.tensor(x), 1, dtype=tg.float64)
    np.testing.assert_allclose(got.numpy(), want.numpy())


# ---------------------------------------------------------------- tril / triu indices
@pytest.mark.parametrize("name", ["tril_indices", "triu_indices"])
def test_tri_indices_as_torch(name):
    for row, col, offset in [(3, 4, 0), (4, 3, -1), (3, 3, 2), (0, 2, 0), (2, 5, -4)]:
        want = getattr(torch, name)(row, col, offset)
        got = getattr(tg, name)(row, col, offset)
        assert got.dtype == tg.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    got = getattr(tg, name)(3, 3, dtype=tg.int32)
    assert got.dtype == tg.int32
    np.testing.assert_array_equal(got.numpy(), getattr(torch, name)(3, 3).numpy())
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        getattr(tg, name)(-1, 3)
    with pytest.raises(NotImplementedError):
        getattr(tg, name)(3, 3, dtype=tg.float32)


# ---------------------------------------------------------------- storage_offset, real
def test_storage_offset_of_slices_as_torch():
    views = [lambda t: t, lambda t: t[1:, 2:], lambda t: t[1], lambda t: t.T,
             lambda t: t[:, 1::2], lambda t: t.reshape(4, 3)[1:], lambda t: t[2][1:]]
    x, xt = tg.arange(12.0).reshape(3, 4), torch.arange(12.0).reshape(3, 4)
    for v in views:
        assert v(x).storage_offset() == v(xt).storage_offset()


def test_real_of_a_real_tensor_is_itself():
    x = tg.randn(3)
    assert x.real is x and tg.real(x) is x
    xt = torch.randn(3)
    assert xt.real is xt and torch.real(xt) is xt


# ---------------------------------------------------------------- view(dtype)
@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int64", "float64"),
                                     ("float32", "int16"), ("int16", "float32"),
                                     ("uint8", "bool"), ("float64", "uint8")])
def test_view_dtype_reinterprets_bits_as_torch(src, dst):
    x = np.arange(1, 13).reshape(3, 4).astype(src)
    got = tg.tensor(x).view(getattr(tg, dst))
    want = torch.tensor(x).view(getattr(torch, dst))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert not got.requires_grad


def test_view_dtype_shares_memory_and_version():
    a = tg.zeros(3)
    b = a.view(tg.int32)
    b[0] = 1
    want = torch.zeros(3)
    want.view(torch.int32)[0] = 1
    np.testing.assert_array_equal(a.numpy(), want.numpy())
    assert a._version_number == b._version_number > 0


@pytest.mark.parametrize("case", range(4))
def test_view_dtype_refuses_as_torch(case):
    def views(lib):
        x = lib.arange(12.0).reshape(3, 4)
        return [lambda: x[:, 1:].view(lib.float64), lambda: x[:, ::2].view(lib.int16),
                lambda: x[0, 0].view(lib.int16),
                lambda: x.to(lib.int16)[:, 1:3].view(lib.float32)][case]
    with pytest.raises(RuntimeError) as theirs:
        views(torch)()
    words = str(theirs.value).split(" must")[0].split(" cannot")[0]
    with pytest.raises(RuntimeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        views(tg)()


# ---------------------------------------------------------------- integer mse_loss
@pytest.mark.parametrize("dtypes", [("int64", "int64"), ("bool", "bool"), ("int32", "bool"),
                                    ("int64", "float32"), ("float32", "int64"),
                                    ("bool", "float64")])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_of_integers_as_torch(dtypes, reduction):
    a = np.array([1, 0, 1]).astype(dtypes[0])
    b = np.array([1, 1, 0]).astype(dtypes[1])
    try:
        want = torch.nn.functional.mse_loss(torch.tensor(a), torch.tensor(b),
                                            reduction=reduction)
    except Exception as e:  # noqa: BLE001  (the class torch raises is the expectation)
        with pytest.raises(type(e), match="mse_loss"):
            F.mse_loss(tg.tensor(a), tg.tensor(b), reduction=reduction)
        return
    got = F.mse_loss(tg.tensor(a), tg.tensor(b), reduction=reduction)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy())
