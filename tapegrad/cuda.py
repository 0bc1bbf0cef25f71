"""``tg.cuda``: is a GPU usable here?"""
from .devices import cuda as _cuda


def is_available():
    """True when CuPy imports and sees at least one GPU."""
    return _cuda.available()


def device_count():
    return _cuda.device_count()


def synchronize():
    if _cuda.available():
        _cuda.cupy().cuda.Device().synchronize()
