"""Where the GPU tests run, and the helpers they share.

On a machine where ``tg.cuda.is_available()`` (CuPy and a GPU), ``DEVICE`` is
``"cuda"`` and the tests compare CuPy results with the NumPy ones. Elsewhere every
module skips, unless ``TAPEGRAD_GPU_TESTS_ON_CPU=1``: then ``DEVICE`` is ``"cpu"``
and the same tests run against the CPU backend, which checks their logic (moving
inputs to the device, the comparisons, the gradients of every order) without a GPU.
The flag wins over a GPU, so the CPU mode can be checked anywhere.

``require()`` at the top of a module skips it cleanly when neither applies.
"""
import os

import numpy as np
import pytest

import tapegrad as tg

ON_CPU = os.environ.get("TAPEGRAD_GPU_TESTS_ON_CPU", "") not in ("", "0")
HAVE_GPU = (not ON_CPU) and tg.cuda.is_available()
DEVICE = "cuda" if HAVE_GPU else "cpu"
ACTIVE = HAVE_GPU or ON_CPU


def require():
    """Skip the calling module when there is no GPU and the CPU flag is off."""
    if not ACTIVE:
        pytest.skip("CUDA is not available (no CuPy or no GPU); set "
                    "TAPEGRAD_GPU_TESTS_ON_CPU=1 to run these tests on the CPU backend",
                    allow_module_level=True)


def xp():
    """The array module of ``DEVICE``: cupy, or numpy in the CPU mode."""
    if HAVE_GPU:
        import cupy
        return cupy
    return np


def to_device(a):
    """A NumPy array as a Tensor on ``DEVICE`` (its own copy); other values as given."""
    if isinstance(a, np.ndarray):
        return tg.tensor(np.array(a, copy=True), device=DEVICE)
    return a


def raw_to_device(a):
    """A NumPy array (or a tuple/list of them, as an index) as a raw array of
    ``DEVICE``; other values as given."""
    if isinstance(a, np.ndarray):
        return xp().asarray(a)
    if isinstance(a, (tuple, list)):
        return type(a)(raw_to_device(x) for x in a)
    return a


def host(x):
    """A NumPy array from a Tensor on any device, a CuPy or a NumPy array."""
    if isinstance(x, tg.Tensor):
        return np.asarray(x.detach().cpu().numpy())
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def on_device(t):
    """True when Tensor ``t`` lives on ``DEVICE``, its buffer included (a CuPy array
    on the GPU, a NumPy array in the CPU mode)."""
    from tapegrad.tensor import buffer
    is_cupy = type(buffer(t)).__module__.startswith("cupy")
    return t.device.type == DEVICE and is_cupy == HAVE_GPU


def close(actual, expected, what, rtol, atol):
    a, e = host(actual), host(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != expected {e.dtype}"
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e, err_msg=what)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True, err_msg=what)
