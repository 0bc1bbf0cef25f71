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
