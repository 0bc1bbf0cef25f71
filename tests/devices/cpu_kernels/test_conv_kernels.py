"""The conv kernels' column copies (``devices/cpu_kernels/conv.py``) against NumPy slicing:
the dense im2col copies rows of at most 16 values as 16 (the extra values land where the
next row goes), so it must still write exactly the columns, and nothing past the chunk
of the batch it was given."""
import numpy as np
import pytest

from tapegrad.devices.cpu_kernels import conv as cpu_conv

SHAPES = [  # (N, C, H, W, kh, kw)
    (4, 16, 13, 13, 3, 3),  # the small CNN's second layer: 11-wide rows
    (3, 1, 28, 28, 3, 3),  # 26-wide rows: the plain loop
    (2, 3, 5, 17, 2, 2),  # 16-wide rows
    (3, 2, 9, 20, 3, 5),  # 16-wide rows, 5 taps a row
    (1, 1, 3, 3, 3, 3),  # one value per row: the last rows fall back to the loop
    (4, 5, 6, 18, 1, 2),
]


def _columns(x, kh, kw):
    N, C, H, W = x.shape
    Ho, Wo = H - kh + 1, W - kw + 1
    out = np.empty((N, C, kh, kw, Ho, Wo), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i, j] = x[:, :, i:i + Ho, j:j + Wo]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dense_im2col_writes_the_columns_and_nothing_past_its_chunk(shape, dtype):
    N, C, H, W, kh, kw = shape
    x = np.random.default_rng(1).standard_normal((N, C, H, W)).astype(dtype)
    want = _columns(x, kh, kw)
    big = np.full((N + 1,) + want.shape[1:], 7.0, dtype)  # the next chunk's rows after it
    cpu_conv._im2col_dense(x, big[:N])
    np.testing.assert_array_equal(big[:N], want)
    assert (big[N] == 7.0).all()
    # the first rows of a batch: its input ends where the chunk does
    first = np.full_like(big, 7.0)
    cpu_conv._im2col_dense(np.ascontiguousarray(x[:1]), first[:1])
    np.testing.assert_array_equal(first[0], want[0])
    assert (first[1:] == 7.0).all()
