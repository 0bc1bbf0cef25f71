"""API.md "Tensors": creation and its default dtypes, memory sharing, factories,
dtypes and promotion, attributes, methods, protocols and operators, each compared with
PyTorch (values, dtypes, result types, exception classes)."""
import inspect
import threading

import numpy as np
import pytest
from contract_compare import same

import tapegrad as tg

torch = pytest.importorskip("torch")


def _cases(**cases):
    return pytest.mark.parametrize("case", list(cases.values()), ids=list(cases))


# ---------------------------------------------------------------- creation
def test_creation_signatures():
    assert str(inspect.signature(tg.tensor)) == \
        "(data, dtype=None, device=None, requires_grad=False)"
    assert str(inspect.signature(tg.as_tensor)) == "(data, dtype=None, device=None)"


@_cases(
    float_scalar=lambda M: M.tensor(1.5),
    int_list=lambda M: M.tensor([1, 2]),
    bool_list=lambda M: M.tensor([True, False]),
    nested=lambda M: M.tensor([[1, 2.5], [3, 4]]),
    from_tensor=lambda M: M.tensor(M.ones(2, dtype=M.float64)),
    numpy_int32=lambda M: M.tensor(np.arange(3, dtype=np.int32)),
    numpy_float16=lambda M: M.tensor(np.ones(2, np.float16)),
    numpy_float64=lambda M: M.tensor(np.ones(2)),
    dtype_kw=lambda M: M.tensor([1, 2], dtype=M.float64),
    int_requires_grad=lambda M: M.tensor([1, 2], requires_grad=True),
)
def test_tensor_default_dtypes(case):
    same(case)


def test_tensor_from_dlpack_producers():
    assert tg.tensor(torch.ones(2, dtype=torch.float64)).dtype == tg.float64
    assert tg.from_dlpack(torch.arange(3)).tolist() == [0, 1, 2]


def test_tensor_copies_while_as_tensor_and_from_numpy_share():
    a = np.ones(3)
    tg.tensor(a).numpy()[0] = 5
    assert a[0] == 1
    tg.as_tensor(a).numpy()[0] = 5
    assert a[0] == 5
    tg.from_numpy(a).numpy()[1] = 6
    assert a[1] == 6
    t = torch.zeros(2)
    tg.from_dlpack(t)[0] = 7
    assert t[0].item() == 7


def test_default_dtype_drives_float_creation():
    assert tg.get_default_dtype() == tg.float32
    tg.set_default_dtype(tg.float64)
    try:
        got = [tg.tensor(1.0).dtype, tg.zeros(2).dtype, tg.arange(3.0).dtype,
               tg.rand(2).dtype, tg.tensor(1).dtype, (tg.tensor([1]) / 2).dtype]
    finally:
        tg.set_default_dtype(tg.float32)
    assert got == [tg.float64] * 4 + [tg.int64, tg.float64]
    with pytest.raises(TypeError):
        tg.set_default_dtype(tg.int64)


def test_python_types_as_dtypes_as_torch():
    """``dtype=float`` is float64 whatever the default float dtype (Python's float is a
    double, in PyTorch and NumPy alike); ``int`` int64; ``bool`` bool."""
    for default in (tg.float32, tg.float64):
        tg.set_default_dtype(default)
        try:
            for py, want in ((float, torch.float64), (int, torch.int64),
                             (bool, torch.bool)):
                got = [tg.ones(2, dtype=py).dtype, tg.tensor([1, 0], dtype=py).dtype,
                       tg.zeros(2).to(py).dtype, tg.arange(2, dtype=py).dtype]
                assert [str(d).split(".")[-1] for d in got] == \
                    [str(want).split(".")[-1]] * 4, (default, py)
                assert torch.ones(2, dtype=py).dtype == want
        finally:
            tg.set_default_dtype(tg.float32)


# ---------------------------------------------------------------- factories
@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_factory_shapes_and_keywords(name):
    f = getattr(tg, name)
    assert f(2, 3).shape == f((2, 3)).shape == f([2, 3]).shape == (2, 3)
    assert f().shape == ()
    t = f(2, dtype=tg.float64, device="cpu", requires_grad=True)
    assert (t.dtype, t.requires_grad, t.device.type, t.is_leaf) == (tg.float64, True, "cpu", True)
    assert f(2).dtype == tg.float32


@_cases(
    full_float=lambda M: M.full((2, 3), 1.5),
    full_int=lambda M: M.full((2,), 3),
    full_bool=lambda M: M.full((2,), True),
    zeros_like=lambda M: M.zeros_like(M.ones(2, dtype=M.int32)),
    ones_like_dtype=lambda M: M.ones_like(M.ones(2), dtype=M.float64),
    full_like=lambda M: M.full_like(M.ones(2, 2), 7),
    full_like_int=lambda M: M.full_like(M.ones(2, dtype=M.int64), 2.7),
    arange_int=lambda M: M.arange(5),
    arange_float=lambda M: M.arange(0, 1, 0.25),
    arange_start_end=lambda M: M.arange(2, 5),
    arange_keywords=lambda M: M.arange(start=1, end=4, step=1),
    linspace=lambda M: M.linspace(0, 1, 5),
    linspace_steps=lambda M: M.linspace(-1, 1, steps=3),
    eye=lambda M: M.eye(3),
    eye_rect=lambda M: M.eye(2, 3),
    eye_m=lambda M: M.eye(2, m=3),
)
def test_factories_as_torch(case):
    same(case)


def test_randint_and_manual_seed():
    t = tg.randint(0, 5, (3, 4))
    assert t.dtype == tg.int64 and t.shape == (3, 4)
    assert 0 <= int(t.min()) and int(t.max()) < 5
    assert tg.randint(5, (3,)).shape == (3,) and tg.randint(0, 5, size=(2,)).shape == (2,)
    tg.manual_seed(0)
    a, b, c = tg.rand(3).tolist(), tg.randn(2).tolist(), tg.randint(0, 100, (4,)).tolist()
    tg.manual_seed(0)
    again = tg.rand(3).tolist(), tg.randn(2).tolist(), tg.randint(0, 100, (4,)).tolist()
    assert list(again) == [a, b, c]


# ---------------------------------------------------------------- dtypes and promotion
DTYPES = ["bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "bool"]


@pytest.mark.parametrize("name", DTYPES)
def test_dtype_objects(name):
    d = getattr(tg, name)
    assert isinstance(d, tg.dtype)
    assert repr(d) == f"tapegrad.{name}"
    assert tg.zeros(2, dtype=d).dtype == d
    assert d.is_floating_point == getattr(torch, name).is_floating_point
    assert d.itemsize == getattr(torch, name).itemsize


@_cases(
    weak_float_scalar=lambda M: M.ones(2) * 2.0,
    weak_int_scalar=lambda M: M.ones(2, dtype=M.int32) * 2,
    int_times_float_scalar=lambda M: M.ones(2, dtype=M.int32) * 2.5,
    f32_f64=lambda M: M.ones(2) + M.ones(2, dtype=M.float64),
    int_float=lambda M: M.ones(2, dtype=M.int64) + M.ones(2),
    int_div_int=lambda M: M.tensor([1, 2]) / M.tensor([2, 2]),
    int_div_scalar=lambda M: M.tensor([1, 2]) / 2,
    int8_uint8=lambda M: M.ones(2, dtype=M.int8) + M.ones(2, dtype=M.uint8),
    bf16_f16=lambda M: M.ones(2, dtype=M.bfloat16) + M.ones(2, dtype=M.float16),
    bool_bool=lambda M: M.tensor([True]) + M.tensor([True]),
    bool_int_scalar=lambda M: M.tensor([True]) * 2,
    int32_int64_0d=lambda M: M.tensor([1], dtype=M.int32) + M.tensor(1),
    f16_f32_0d=lambda M: M.tensor([1], dtype=M.float16) + M.tensor(1.0),
    int_f64_0d=lambda M: M.tensor([1]) + M.tensor(1.0, dtype=M.float64),
    int_floordiv_float=lambda M: M.tensor([7, 3]) // 2.0,
    rpow_float=lambda M: 2.0 ** M.tensor([2, 3]),
)
def test_promotion_as_torch(case):
    same(case)


def test_dtype_info_as_torch():
    for name in ["bfloat16", "float16", "float32", "float64"]:
        a, b = tg.finfo(getattr(tg, name)), torch.finfo(getattr(torch, name))
        for f in ["bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"]:
            assert getattr(a, f) == getattr(b, f), (name, f)
        assert repr(a) == repr(b)
    assert tg.finfo().dtype == "float32"
    for name in ["uint8", "int8", "int16", "int32", "int64"]:
        a, b = tg.iinfo(getattr(tg, name)), torch.iinfo(getattr(torch, name))
        assert (a.bits, a.min, a.max, a.dtype) == (b.bits, b.min, b.max, b.dtype)
        assert repr(a) == repr(b)
    for bad in (lambda: tg.finfo(tg.int32), lambda: tg.iinfo(tg.float32),
                lambda: tg.iinfo(tg.bool)):
        with pytest.raises(TypeError):
            bad()


def test_promote_types_result_type_can_cast():
    assert tg.promote_types(tg.int32, tg.float16) == tg.float16
    assert tg.promote_types(tg.bfloat16, tg.float16) == tg.float32
    assert tg.result_type(tg.ones(2), 2.0) == tg.float32
    assert tg.can_cast(tg.float32, tg.int32) is False and tg.can_cast(tg.int32, tg.float32)


# ---------------------------------------------------------------- attributes and methods
def test_attributes():
    x = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    assert isinstance(x.shape, tuple) and x.shape == (2, 2)
    assert x.ndim == x.dim() == 2 and x.dtype == tg.float32
    assert x.device == tg.device("cpu") and x.device.type == "cpu"
    assert x.requires_grad and x.is_leaf and x.grad_fn is None and x.grad is None
    y = x * 2
    assert not y.is_leaf and y.grad_fn is not None
    assert x.T.tolist() == [[1, 3], [2, 4]]
    assert tg.ones(2, 3, 4).mT.shape == (2, 4, 3)


def test_size_numel_item_tolist():
    x = tg.ones(2, 3)
    assert x.size() == (2, 3) and isinstance(x.size(), tuple)
    assert x.size(0) == 2 and x.size(-1) == 3 and x.size(dim=1) == 3
    assert x.numel() == 6 and type(x.numel()) is int
    assert type(tg.tensor(2.5).item()) is float and type(tg.tensor(2).item()) is int
    assert type(tg.tensor(True).item()) is bool and tg.tensor([7]).item() == 7
    assert tg.tensor([[1, 2]]).tolist() == [[1, 2]] and type(tg.tensor([1.0]).tolist()[0]) is float
    assert tg.tensor(3).tolist() == 3


def test_numpy_shares_memory_and_refuses_grad():
    t = tg.zeros(2)
    t.numpy()[0] = 9
    assert t.tolist() == [9, 0]
    same(lambda M: M.ones(2, requires_grad=True).numpy())


def test_detach_clone_requires_grad_():
    x = tg.ones(2, requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf
    c = x.clone()
    assert c.requires_grad and c.grad_fn is not None and c.data_ptr() != x.data_ptr()
    t = tg.zeros(2)
    assert t.requires_grad_() is t and t.requires_grad
    assert t.requires_grad_(False) is t and not t.requires_grad
    same(lambda M: M.ones(2, dtype=M.int64).requires_grad_())
    same(lambda M: M.ones(2, dtype=M.int64, requires_grad=True))


def test_retain_grad_and_register_hook():
    x = tg.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    seen = []
    h = x.register_hook(lambda g: seen.append(g.tolist()) or g * 10)
    (y * 3).sum().backward()
    assert y.grad.tolist() == [3, 3] and seen == [[6, 6]] and x.grad.tolist() == [60, 60]
    h.remove()
    x.grad = None
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3, 3]


def test_backward_signature_and_gradient():
    params = inspect.signature(tg.Tensor.backward).parameters
    assert [(p, params[p].default) for p in ["gradient", "retain_graph", "create_graph"]] == \
        [("gradient", None), ("retain_graph", None), ("create_graph", False)]
    x = tg.ones(2, 2, requires_grad=True)
    (x * 2).backward(tg.ones(2, 2) * 3)
    assert x.grad.tolist() == [[6, 6], [6, 6]]
    same(lambda M: (M.ones(2, requires_grad=True) * 2).backward())
    same(lambda M: M.ones(2).sum().backward())


@_cases(
    to_dtype=lambda M: M.ones(2).to(M.float64),
    to_dtype_kw=lambda M: M.ones(2).to(dtype=M.int32),
    to_device_dtype=lambda M: M.ones(2).to("cpu", M.float16),
    to_other=lambda M: M.ones(2).to(M.ones(1, dtype=M.float64)),
    float=lambda M: M.tensor([1, 2]).float(),
    double=lambda M: M.ones(2).double(),
    half=lambda M: M.ones(2).half(),
    bfloat16=lambda M: M.ones(2).bfloat16(),
    long=lambda M: M.tensor([1.7, -1.7]).long(),
    int=lambda M: M.tensor([1.7, -1.7]).int(),
    bool=lambda M: M.tensor([0.0, 2.0]).bool(),
    cpu=lambda M: M.ones(2).cpu(),
)
def test_conversions_as_torch(case):
    same(case)


def test_to_same_returns_self_and_casts_record():
    x = tg.ones(2, requires_grad=True)
    assert x.to("cpu") is x and x.cpu() is x and x.to(tg.float32) is x
    x.double().sum().backward()
    assert x.grad.dtype == tg.float32
    assert x.astype(tg.int32).dtype == tg.int32
    with pytest.raises(RuntimeError):
        tg.ones(2).cuda() if not tg.cuda.is_available() else tg.ones(2).to("cuda:99")


# ---------------------------------------------------------------- protocols
def test_array_and_dlpack_protocols():
    x = tg.arange(3.0)
    assert np.asarray(x).dtype == np.float32
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    params = inspect.signature(tg.Tensor.__dlpack__).parameters
    assert [(n, params[n].kind, params[n].default) for n in list(params)[1:]] == \
        [(n, inspect.Parameter.KEYWORD_ONLY, None)
         for n in ["stream", "max_version", "dl_device", "copy"]]
    assert tuple(x.__dlpack_device__()) == (1, 0)
    t = torch.from_dlpack(x)
    t[0] = 5
    assert x[0].item() == 5
    assert np.from_dlpack(x).tolist() == [5, 1, 2]


@_cases(
    len=lambda M: len(M.ones(3, 2)),
    len_0d=lambda M: len(M.tensor(1.0)),
    iter=lambda M: list(M.tensor([[1, 2], [3, 4]])),
    iter_0d=lambda M: list(M.tensor(1.0)),
    bool_one=lambda M: (bool(M.tensor([1.0])), bool(M.tensor(0.0))),
    bool_many=lambda M: bool(M.ones(2)),
    float_one=lambda M: float(M.tensor([2.5])),
    float_many=lambda M: float(M.ones(2)),
    int_one=lambda M: int(M.tensor(2.7)),
    int_many=lambda M: int(M.ones(2)),
    item_many=lambda M: M.ones(2).item(),
    index=lambda M: [10, 20, 30][M.tensor(1)],
    index_float=lambda M: [10, 20, 30][M.tensor(1.0)],
    index_many=lambda M: [10, 20, 30][M.tensor([1, 2])],
)
def test_python_protocols_as_torch(case):
    same(case)


@_cases(
    float_grad=lambda M: repr(M.tensor([1.0, 2.0], requires_grad=True)),
    int=lambda M: repr(M.tensor([1, 2])),
    zero_d=lambda M: repr(M.tensor(1.5)),
    str=lambda M: str(M.tensor([1.5, -2.0])),
    bool=lambda M: repr(M.tensor([True, False])),
    matrix=lambda M: repr(M.arange(6.0).reshape(2, 3)),
)
def test_repr_as_torch(case):
    same(case)


def test_repr_names_the_dtype_in_tapegrads_namespace():
    assert repr(tg.tensor([1.0, 2.0], dtype=tg.float64)) == \
        "tensor([1., 2.], dtype=tapegrad.float64)"


# ---------------------------------------------------------------- operators
A = [5.0, -3.0, 7.0]
B = [2.0, 2.0, -2.0]


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "**"])
def test_binary_operators_as_torch(op):
    same(lambda M: eval(f"M.tensor(A) {op} M.tensor(B)"))
    same(lambda M: eval(f"M.tensor([5, -3, 7]) {op} M.tensor([2, 2, 3])"))
    same(lambda M: eval(f"3 {op} M.tensor(A)"))
    same(lambda M: eval(f"M.tensor(A) {op} 2"))


@_cases(
    matmul=lambda M: M.ones(2, 3) @ M.ones(3, 4),
    matmul_vec=lambda M: M.ones(3) @ M.ones(3),
    matmul_bad=lambda M: M.ones(2, 3) @ M.ones(4, 4),
    neg=lambda M: -M.tensor([1, 2]),
    neg_bool=lambda M: -M.tensor([True]),
    abs=lambda M: abs(M.tensor([-1.0, 2.0])),
    lt=lambda M: M.tensor([1.0, 2.0]) < M.tensor([2.0, 2.0]),
    eq_scalar=lambda M: M.tensor([1.0, 2.0]) == 2,
    ge_int_float=lambda M: M.tensor([1, 2]) >= 1.5,
    compare_no_grad=lambda M: (M.ones(2, requires_grad=True) > 0).requires_grad,
    and_bool=lambda M: M.tensor([True, False]) & M.tensor([True, True]),
    or_int=lambda M: M.tensor([1, 2]) | M.tensor([4, 4]),
    xor_scalar=lambda M: M.tensor([1, 2]) ^ 3,
    invert_bool=lambda M: ~M.tensor([True, False]),
    invert_int=lambda M: ~M.tensor([1, 2]),
    invert_float=lambda M: ~M.tensor([1.0]),
    add_bad_shapes=lambda M: M.ones(2) + M.ones(3),
    int_floordiv_zero=lambda M: M.tensor([5]) // M.tensor([0]),
)
def test_other_operators_as_torch(case):
    same(case)


@_cases(
    ints=lambda M: M.arange(12.0).reshape(3, 4)[1, -1],
    slices=lambda M: M.arange(24.0).reshape(2, 3, 4)[None, ..., 1:3],
    int_array=lambda M: M.arange(12.0).reshape(3, 4)[M.tensor([0, 2])],
    lists=lambda M: M.arange(12.0).reshape(3, 4)[[0, 2], [1, 3]],
    mask=lambda M: M.arange(12.0).reshape(3, 4)[M.arange(12.0).reshape(3, 4) > 5],
    out_of_range=lambda M: M.arange(12.0).reshape(3, 4)[5],
    out_of_range_array=lambda M: M.arange(12.0).reshape(3, 4)[M.tensor([5])],
    too_many=lambda M: M.arange(12.0).reshape(3, 4)[1, 1, 1],
)
def test_getitem_as_torch(case):
    same(case)


def _getitem_grad(M):
    x = M.arange(12.0, requires_grad=True)
    x.reshape(3, 4)[M.tensor([0, 0, 2])][:, 1:3].sum().backward()
    return x.grad


def _setitem(M):
    x = M.zeros(3, 4)
    x[M.tensor([0, 2]), 1] = 5.0
    x[x == 0] = 1
    x[1] += 2
    return x


def _setitem_grad(M):
    w = M.ones(3, requires_grad=True)
    x = M.zeros(3)
    x[1:] = w[:2] * 2
    x.sum().backward()
    return w.grad


def _inplace(M):
    x = M.ones(3)
    x += 1
    x -= M.tensor([0.5, 0.5, 0.5])
    x *= 4
    x /= 2
    return x


def _view_of_non_leaf(M):
    x = M.ones(3, requires_grad=True)
    y = x * 1
    y[1:].mul_(3)
    y.sum().backward()
    return x.grad


def _saved_modified(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    z = y.sin()
    y.add_(1)
    z.sum().backward()


@_cases(
    getitem_grad=_getitem_grad,
    setitem=_setitem,
    setitem_grad=_setitem_grad,
    inplace=_inplace,
    inplace_int_truediv=lambda M: M.ones(3, dtype=M.int64).__itruediv__(2),
    inplace_int_add_float=lambda M: M.ones(3, dtype=M.int64).__iadd__(1.5),
    inplace_bad_broadcast=lambda M: M.ones(3).__iadd__(M.ones(2, 3)),
    inplace_leaf=lambda M: M.ones(2, requires_grad=True).add_(1),
    inplace_view_of_leaf=lambda M: M.ones(2, requires_grad=True)[0].mul_(1),
    setitem_leaf=lambda M: M.ones(2, requires_grad=True).__setitem__(0, 1.0),
    view_of_non_leaf=_view_of_non_leaf,
    saved_value_modified=_saved_modified,
)
def test_indexing_and_inplace_as_torch(case):
    same(case)


def test_saved_value_error_names_the_op():
    with pytest.raises(RuntimeError, match="sin"):
        _saved_modified(tg)


def test_grad_mode_is_thread_local():
    seen = []
    with tg.no_grad():
        t = threading.Thread(target=lambda: seen.append(tg.is_grad_enabled()))
        t.start()
        t.join()
        assert not tg.is_grad_enabled()
    assert seen == [True]
