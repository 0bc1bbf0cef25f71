"""CUDA through CuPy: skipped cleanly where CuPy or a GPU is missing."""
import numpy as np
import pytest

import tapegrad as tg

if not tg.cuda.is_available():
    pytest.skip("CUDA is not available (no CuPy or no GPU)", allow_module_level=True)
cp = pytest.importorskip("cupy")

RNG = np.random.default_rng(0)


def _np(t):
    return t.detach().cpu().numpy()


def test_to_cuda_and_back():
    a = RNG.standard_normal((3, 4))
    x = tg.tensor(a)
    g = x.to("cuda")
    assert g.device == tg.device("cuda:0") and g.device.type == "cuda" and g.is_cuda
    assert isinstance(g._data, cp.ndarray)
    assert g.dtype == tg.float64 and g.shape == (3, 4)
    np.testing.assert_array_equal(_np(g), a)
    assert x.cuda().device.type == "cuda"
    assert g.cpu().device == tg.device("cpu")
    assert tg.ones(2, device="cuda").device.type == "cuda"
    assert tg.tensor([1.0, 2.0], device="cuda").tolist() == [1.0, 2.0]
    assert "device='cuda:0'" in repr(tg.ones(2, device="cuda"))


def test_numpy_of_cuda_tensor_refuses():
    with pytest.raises(TypeError, match="cpu"):
        tg.ones(2, device="cuda").numpy()
    with pytest.raises(TypeError):
        np.asarray(tg.ones(2, device="cuda"))


UNARY = ["exp", "log", "sin", "tanh", "sigmoid", "relu", "sqrt", "abs", "neg"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_match_cpu(name):
    a = np.abs(RNG.standard_normal((4, 5))) + 0.1
    fn = getattr(tg, name)
    np.testing.assert_allclose(_np(fn(tg.tensor(a, device="cuda"))), _np(fn(tg.tensor(a))),
                               rtol=1e-12)


def test_binary_reductions_shape_ops_match_cpu():
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((4,))
    for f in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x / (y * y + 1),
              lambda x, y: tg.maximum(x, y), lambda x, y: (x * y).sum(dim=1),
              lambda x, y: x.mean(dim=(0, 2), keepdim=True), lambda x, y: x.amax(dim=-1),
              lambda x, y: x.permute(2, 0, 1).reshape(4, 6), lambda x, y: x[1, :, ::2],
              lambda x, y: x @ y, lambda x, y: tg.where(x > 0, x, y)):
        got = f(tg.tensor(a, device="cuda"), tg.tensor(b, device="cuda"))
        exp = f(tg.tensor(a), tg.tensor(b))
        assert got.device.type == "cuda"
        np.testing.assert_allclose(_np(got), _np(exp), rtol=1e-12, atol=1e-12)


def test_gradients_match_cpu():
    a, w = RNG.standard_normal((5, 3)), RNG.standard_normal((3, 2))
    grads = []
    for dev in ("cpu", "cuda"):
        x = tg.tensor(a, device=dev, requires_grad=True)
        W = tg.tensor(w, device=dev, requires_grad=True)
        loss = (tg.tanh(x @ W) ** 2).mean()
        loss.backward()
        assert x.grad.device.type == dev
        grads.append((_np(x.grad), _np(W.grad)))
    for c, g in zip(*grads):
        np.testing.assert_allclose(g, c, rtol=1e-10)


def test_second_order_on_gpu():
    x = tg.tensor([0.3, 1.2], dtype=tg.float64, device="cuda", requires_grad=True)
    y = (tg.sin(x) * tg.exp(x)).sum()
    g1, = tg.grad(y, x, create_graph=True)
    g2, = tg.grad(g1.sum(), x)
    xs = np.array([0.3, 1.2])
    np.testing.assert_allclose(_np(g2), 2 * np.exp(xs) * np.cos(xs), rtol=1e-12)


def test_gradient_through_device_transfer():
    x = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    y = (x.to("cuda") * 3).sum()
    y.backward()
    assert x.grad.device.type == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_device_mixing_error_names_both_devices():
    x, y = tg.ones(3), tg.ones(3, device="cuda")
    with pytest.raises(RuntimeError) as info:
        x + y
    msg = str(info.value)
    assert "add" in msg and "cpu" in msg and "cuda" in msg
    with pytest.raises(RuntimeError, match="cuda"):
        tg.matmul(tg.ones(2, 2), tg.ones(2, 2, device="cuda"))
    # nothing corrupted
    assert (x + x).tolist() == [2.0, 2.0, 2.0]


def test_dlpack_with_cupy_zero_copy():
    c = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    t = tg.from_dlpack(c)
    assert t.device.type == "cuda"
    assert t._data.data.ptr == c.data.ptr
    t.add_(1)
    np.testing.assert_array_equal(cp.asnumpy(c), np.arange(6).reshape(2, 3) + 1)
    back = cp.from_dlpack(t)
    assert back.data.ptr == c.data.ptr
    assert tuple(t.__dlpack_device__())[0] == 2  # kDLCUDA


def test_dlpack_with_torch_cuda_if_available():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    tt = torch.arange(4.0, device="cuda")
    t = tg.from_dlpack(tt)
    assert t._data.data.ptr == tt.data_ptr()


def test_float32_training_step_on_gpu():
    tg.manual_seed(0)
    w = tg.randn(4, 1, device="cuda", requires_grad=True)
    x = tg.randn(32, 4, device="cuda")
    y = x @ tg.tensor([[1.0], [-2.0], [0.5], [3.0]], device="cuda")
    first = None
    for _ in range(100):
        loss = ((x @ w - y) ** 2).mean()
        if first is None:
            first = loss.item()
        loss.backward()
        with tg.no_grad():
            w -= 0.1 * w.grad
            w.grad = None
    assert loss.item() < first * 1e-3
