"""``assert_close``: tensors (tapegrad's, PyTorch's or array-likes) equal within
PyTorch's default tolerances for their dtype."""
import numpy as np

from ..tensor import Tensor
from .gradcheck import _host

__all__ = ["assert_close"]


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, check_dtype=True,
                 msg=None):
    """Raise AssertionError unless ``actual`` and ``expected`` are close (PyTorch's
    default tolerances per dtype)."""
    a = _np(actual)
    e = _np(expected)
    if a.shape != e.shape:
        raise AssertionError(msg or f"assert_close: shapes differ: {a.shape} vs {e.shape}")
    if check_dtype and isinstance(actual, Tensor) and isinstance(expected, Tensor) \
            and actual.dtype != expected.dtype:
        raise AssertionError(msg or f"assert_close: dtypes differ: {actual.dtype} vs "
                                    f"{expected.dtype}")
    if rtol is None or atol is None:
        dt = np.result_type(a.dtype, e.dtype)
        rtol, atol = {np.dtype(np.float16): (1e-3, 1e-5), np.dtype(np.float32): (1.3e-6, 1e-5),
                      np.dtype(np.float64): (1e-7, 1e-7)}.get(np.dtype(dt), (0.0, 0.0))
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        ok = np.array_equal(a, e)
    else:
        ok = np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if not ok:
        with np.errstate(invalid="ignore"):
            err = np.abs(a.astype(np.float64) - e.astype(np.float64))
        worst = np.nanmax(err) if err.size else 0
        raise AssertionError(msg or f"assert_close: tensors are not close: greatest absolute "
                                    f"difference {worst} (rtol={rtol}, atol={atol})")


def _np(x):
    if isinstance(x, Tensor):
        return _host(x)
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        return x.detach().cpu().numpy()
    return np.asarray(x)
