"""``tg.accelerator``, as ``torch.accelerator``: the current accelerator (CUDA through
CuPy, tapegrad's only one) if there is one."""
from . import cuda as _cuda
from .devices import device as _device

__all__ = ["is_available", "current_accelerator", "device_count", "synchronize"]


def is_available():
    """True when an accelerator (a CUDA GPU with CuPy) can be used."""
    return _cuda.is_available()


def current_accelerator(check_available=False):
    """``tg.device('cuda')`` when there is a GPU, else None (as PyTorch)."""
    return _device("cuda") if _cuda.is_available() else None


def device_count():
    return _cuda.device_count() if _cuda.is_available() else 0


def synchronize(device=None):
    if _cuda.is_available():
        _cuda.synchronize()
