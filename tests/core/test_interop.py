"""DLPack and NumPy interop: zero-copy both ways with NumPy, PyTorch and JAX,
the DLPack 1.x keywords, read-only export and read-only import."""
import ctypes

import numpy as np
import pytest

import tapegrad as tg


def _addr(t):
    """Address of a tapegrad CPU tensor's first element."""
    return t.detach().numpy().ctypes.data


def _capsule_name(capsule):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype = ctypes.c_char_p
    get.argtypes = [ctypes.py_object]
    return get(capsule).decode()


# ---------------------------------------------------------------- NumPy
def test_numpy_from_tapegrad_is_zero_copy():
    x = tg.tensor(np.arange(6.0).reshape(2, 3))
    a = np.from_dlpack(x)
    assert a.ctypes.data == _addr(x)
    a[0, 0] = 42
    assert x[0, 0].item() == 42


def test_tapegrad_from_numpy_is_zero_copy_and_keeps_strides():
    a = np.arange(12.0).reshape(3, 4)
    for src in (a, a.T, a[:, ::2]):
        t = tg.from_dlpack(src)
        assert t.shape == src.shape
        assert _addr(t) == src.ctypes.data
        np.testing.assert_array_equal(t.numpy(), src)
    t = tg.from_dlpack(a)
    t[1, 1] = -1.0
    assert a[1, 1] == -1.0


def test_dlpack_device_and_versions():
    x = tg.ones(3)
    assert tuple(x.__dlpack_device__()) == (1, 0)
    assert _capsule_name(x.__dlpack__()) == "dltensor"
    assert _capsule_name(x.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    # dl_device naming the CPU is accepted
    np.from_dlpack(x, device="cpu")


def test_dlpack_copy_keyword():
    x = tg.tensor(np.arange(4.0))
    c = np.from_dlpack(x, copy=True)
    assert c.ctypes.data != _addr(x)
    c[0] = 99
    assert x[0].item() == 0
    a = np.from_dlpack(x, copy=False)
    assert a.ctypes.data == _addr(x)


def test_requires_grad_exports_read_only():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    a = np.from_dlpack(x)  # not refused
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, [1.0, 2.0])
    with pytest.raises(ValueError):
        a[0] = 5
    # the tensor itself is unchanged and still trains
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_read_only_import_refuses_in_place_writes():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = tg.from_dlpack(a)
    assert _addr(t) == a.ctypes.data
    for write in (lambda: t.add_(1), lambda: t.__setitem__(0, 5.0), lambda: t.mul_(2)):
        with pytest.raises(RuntimeError):
            write()
    with pytest.raises(RuntimeError):
        t += 1
    np.testing.assert_array_equal(a, np.arange(4.0))
    # out-of-place use is fine, and clone() gives a writable tensor
    np.testing.assert_array_equal((t + 1).numpy(), np.arange(4.0) + 1)
    c = t.clone()
    c += 1
    np.testing.assert_array_equal(c.numpy(), np.arange(4.0) + 1)


# ---------------------------------------------------------------- PyTorch
def test_torch_from_tapegrad_is_zero_copy():
    torch = pytest.importorskip("torch")
    x = tg.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    tt = torch.from_dlpack(x)
    assert tt.data_ptr() == _addr(x)
    assert tt.dtype == torch.float32 and tuple(tt.shape) == (2, 3)
    tt[1, 2] = -7
    assert x[1, 2].item() == -7
    xt = tg.tensor(np.arange(12.0).reshape(3, 4)).T  # a strided view
    tv = torch.from_dlpack(xt)
    np.testing.assert_array_equal(tv.numpy(), xt.numpy())
    assert tv.data_ptr() == _addr(xt)


def test_tapegrad_from_torch_is_zero_copy():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bool):
        tt = torch.ones(2, 3, dtype=dtype)
        x = tg.from_dlpack(tt)
        assert _addr(x) == tt.data_ptr()
        assert x.shape == (2, 3)
    tt = torch.zeros(3)
    x = tg.from_dlpack(tt)
    x[0] = 5.0
    x.add_(1)
    assert tt.tolist() == [6.0, 1.0, 1.0]
    # a non-contiguous torch tensor keeps its strides
    tt = torch.arange(12.0).reshape(3, 4).t()
    x = tg.from_dlpack(tt)
    np.testing.assert_array_equal(x.numpy(), tt.numpy())
    assert _addr(x) == tt.data_ptr()


def test_tensor_factory_accepts_dlpack_producers():
    torch = pytest.importorskip("torch")
    tt = torch.arange(3.0)
    x = tg.tensor(tt)
    assert x.tolist() == [0.0, 1.0, 2.0]
    assert _addr(x) != tt.data_ptr()  # tensor() copies
    y = tg.as_tensor(tt)
    assert _addr(y) == tt.data_ptr()  # as_tensor shares


def test_gradients_flow_on_imported_torch_data():
    torch = pytest.importorskip("torch")
    tt = torch.linspace(-1, 1, 5, dtype=torch.float64)
    x = tg.from_dlpack(tt).requires_grad_()
    tg.tanh(x).sum().backward()
    ref = torch.linspace(-1, 1, 5, dtype=torch.float64).requires_grad_()
    torch.tanh(ref).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-12)


# ---------------------------------------------------------------- JAX
def test_jax_both_ways():
    jnp = pytest.importorskip("jax.numpy")
    x = tg.tensor(np.arange(8.0, dtype=np.float32))
    j = jnp.from_dlpack(x)
    np.testing.assert_array_equal(np.asarray(j), np.arange(8.0))
    ja = jnp.arange(8.0, dtype=jnp.float32) * 2
    t = tg.from_dlpack(ja)
    np.testing.assert_array_equal(t.numpy(), np.arange(8.0) * 2)
    assert _addr(t) == ja.unsafe_buffer_pointer(), "import from JAX should be zero-copy"


def test_jax_import_is_read_only():
    jnp = pytest.importorskip("jax.numpy")
    ja = jnp.ones(4, dtype=jnp.float32)
    t = tg.from_dlpack(ja)
    with pytest.raises(RuntimeError):
        t.add_(1)
    with pytest.raises(RuntimeError):
        t[0] = 3.0
    np.testing.assert_array_equal(np.asarray(ja), np.ones(4))
    # reading and differentiating the values is fine
    y = t.clone().requires_grad_()
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), 2 * np.ones(4))


def test_jax_from_tapegrad_zero_copy_when_aligned():
    jnp = pytest.importorskip("jax.numpy")
    base = np.zeros(64 + 16, dtype=np.float32)
    off = (-base.ctypes.data % 64) // 4
    a = base[off:off + 16]
    assert a.ctypes.data % 64 == 0
    x = tg.from_numpy(a)
    j = jnp.from_dlpack(x)
    assert j.unsafe_buffer_pointer() == a.ctypes.data
