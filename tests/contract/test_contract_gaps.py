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
