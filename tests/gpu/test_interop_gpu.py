"""DLPack with PyTorch on the device: zero-copy both ways (one memory: the pointers
agree and a write on one side is seen on the other), a producer's side stream
respected by the consumer, gradients through an exchange; and the clear error when
an op mixes devices (it names the op and both devices)."""
import numpy as np
import pytest
from gpu_env import DEVICE, HAVE_GPU, host, on_device, require

import tapegrad as tg
from tapegrad.devices import check_same, device as tg_device
from tapegrad.tensor import buffer

require()
torch = pytest.importorskip("torch")
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA here (a CPU build next to CuPy)", allow_module_level=True)
TORCH_DEVICE = "cuda" if DEVICE == "cuda" else "cpu"


def _ptr(t):
    """The address of a tapegrad Tensor's first element."""
    b = buffer(t)
    return b.data.ptr if HAVE_GPU else b.ctypes.data


def test_torch_to_tapegrad_is_zero_copy():
    tt = torch.arange(12, dtype=torch.float32, device=TORCH_DEVICE).reshape(3, 4)
    t = tg.from_dlpack(tt)
    assert on_device(t) and tuple(t.shape) == (3, 4) and t.dtype == tg.float32
    assert _ptr(t) == tt.data_ptr()
    t.add_(1)                                   # a tapegrad write, seen by torch
    assert tt[0, 0].item() == 1.0
    tt.mul_(2)                                  # a torch write, seen by tapegrad
    np.testing.assert_array_equal(host(t), (np.arange(12).reshape(3, 4) + 1) * 2)


def test_tapegrad_to_torch_is_zero_copy():
    t = tg.tensor(np.arange(6, dtype=np.float64).reshape(2, 3), device=DEVICE)
    tt = torch.from_dlpack(t)
    assert tt.device.type == TORCH_DEVICE and tt.dtype == torch.float64
    assert tt.data_ptr() == _ptr(t)
    tt[1, 2] = -5.0
    assert host(t)[1, 2] == -5.0
    back = tg.from_dlpack(tt)
    assert _ptr(back) == _ptr(t)


def test_non_contiguous_and_integer_exchanges():
    tt = torch.arange(20, device=TORCH_DEVICE).reshape(4, 5)[:, ::2]
    t = tg.from_dlpack(tt)
    assert t.dtype == tg.int64 and tuple(t.shape) == (4, 3)
    np.testing.assert_array_equal(host(t), np.arange(20).reshape(4, 5)[:, ::2])
    np.testing.assert_array_equal(host(t.sum(dim=0)), tt.sum(dim=0).cpu().numpy())


@pytest.mark.skipif(not HAVE_GPU, reason="streams exist on the GPU only")
def test_producer_side_stream_is_respected():
    """torch fills a large tensor on a side stream and hands it over at once: the
    consumer passes its stream to ``__dlpack__`` and torch makes it wait, so the
    values read are the final ones. The other way, torch reading our tensor waits
    for CuPy's stream."""
    side = torch.cuda.Stream()
    n = 1 << 24
    with torch.cuda.stream(side):
        tt = torch.empty(n, device="cuda")
        for v in range(1, 6):
            tt.fill_(float(v))            # queued work on the side stream
        t = tg.from_dlpack(tt)            # no synchronisation by hand
    assert float(host(t.sum())) == 5.0 * n
    import cupy
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        g = tg.ones(n, device="cuda") * 3.0
        tt2 = torch.from_dlpack(g)
    assert tt2.sum().item() == 3.0 * n


def test_gradients_through_an_exchange():
    """A torch tensor enters tapegrad, is differentiated, and the gradient goes back."""
    tt = torch.linspace(-1, 1, 10, dtype=torch.float64, device=TORCH_DEVICE)
    x = tg.from_dlpack(tt).requires_grad_()
    y = (tg.sin(x) * x).sum()
    (g,) = tg.grad(y, x)
    gt = torch.from_dlpack(g.detach())
    xs = tt.cpu().numpy()
    np.testing.assert_allclose(gt.cpu().numpy(), np.cos(xs) * xs + np.sin(xs), rtol=1e-12)


def test_mixed_device_message_names_the_op_and_both_devices():
    """The check itself, on any machine: a RuntimeError naming the op and devices."""
    with pytest.raises(RuntimeError) as info:
        check_same("add", [tg_device("cpu"), tg_device("cuda:0")])
    msg = str(info.value)
    assert msg.startswith("add:") and "cpu" in msg and "cuda:0" in msg
    check_same("add", [tg_device("cuda:0"), tg_device("cuda")])  # one device, two spellings


MIXED = [
    ("add", lambda a, b: a + b),
    ("mul", lambda a, b: tg.mul(a, b)),
    ("matmul", lambda a, b: a @ b),
    ("cat", lambda a, b: tg.cat([a, b])),
    ("where", lambda a, b: tg.where(a > 0, a, b)),
    ("mse_loss", lambda a, b: tg.nn.functional.mse_loss(a, b)),
    ("linear", lambda a, b: tg.nn.functional.linear(a, b)),
]


@pytest.mark.skipif(not HAVE_GPU, reason="two devices exist only with a GPU")
@pytest.mark.parametrize("name,fn", [pytest.param(n, f, id=n) for n, f in MIXED])
def test_ops_mixing_devices_raise_naming_them(name, fn):
    a = tg.ones(3, 3)
    b = tg.ones(3, 3, device="cuda")
    for x, y in ((a, b), (b, a)):
        with pytest.raises(RuntimeError) as info:
            fn(x, y)
        msg = str(info.value)
        assert "cpu" in msg and "cuda" in msg, msg
    assert host(a + a).tolist() == [[2.0] * 3] * 3      # nothing corrupted


@pytest.mark.skipif(not HAVE_GPU, reason="two devices exist only with a GPU")
def test_module_and_input_on_different_devices():
    lin = tg.nn.Linear(3, 2).to("cuda")
    with pytest.raises(RuntimeError, match="cuda"):
        lin(tg.ones(4, 3))
    assert lin(tg.ones(4, 3, device="cuda")).device.type == "cuda"
