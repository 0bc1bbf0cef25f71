"""max_pool2d and avg_pool2d's fast kernels equal PyTorch over generated geometries, with
NaNs and ties in the input (values, the chosen indices: first maximum, last NaN; windows
that hang over the padding with ceil_mode; what is refused)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tapegrad as tg

torch = pytest.importorskip("torch")
F = torch.nn.functional


@st.composite
def geometry(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return dict(
        shape=(draw(st.integers(1, 2)), draw(st.integers(1, 3)),
               draw(st.integers(1, 11)), draw(st.integers(1, 11))),
        kernel_size=k,
        stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        padding=(draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2))),
        dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        ceil_mode=draw(st.booleans()))


def _input(shape, seed, specials):
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape)
    if specials:
        x[r.random(shape) < 0.15] = np.nan
        x[r.random(shape) < 0.2] = 0.5  # ties
        x[r.random(shape) < 0.05] = -np.inf
    return x


@settings(deadline=None, suppress_health_check=list(HealthCheck))  # examples: the profile's
@given(g=geometry(), seed=st.integers(0, 2**16), specials=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_max_pool2d_matches_torch(g, seed, specials, dtype):
    x = _input(g.pop("shape"), seed, specials).astype(dtype)
    try:
        tv, ti = F.max_pool2d(torch.tensor(x), return_indices=True, **g)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="max_pool2d"):
            tg.nn.functional.max_pool2d(tg.tensor(x), **g)
        return
    v, i = tg.nn.functional.max_pool2d(tg.tensor(x), return_indices=True, **g)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())  # NaN == NaN here
    # a window wholly in the padding picks nothing: PyTorch leaves its index
    # unspecified, ours is -1
    live = tv.numpy() != -np.inf
    np.testing.assert_array_equal(i.numpy()[live], ti.numpy()[live])
    assert (i.numpy()[~live] >= -1).all()


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(g=geometry(), seed=st.integers(0, 2**16), count_include_pad=st.booleans())
def test_avg_pool2d_matches_torch(g, seed, count_include_pad):
    x = _input(g.pop("shape"), seed, False)
    g.pop("dilation")
    try:
        ref = F.avg_pool2d(torch.tensor(x), count_include_pad=count_include_pad, **g)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="avg_pool2d"):
            tg.nn.functional.avg_pool2d(tg.tensor(x), count_include_pad=count_include_pad, **g)
        return
    out = tg.nn.functional.avg_pool2d(tg.tensor(x), count_include_pad=count_include_pad, **g)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)


def test_unrolled_and_loop_kernels_agree_with_torch():
    """2x2 and 3x3 windows run generated kernels, others the loop: same answers."""
    x = _input((2, 3, 19, 17), 5, True)
    x[0, 0] = np.random.default_rng(0).standard_normal((19, 17))  # a plane without NaN
    for g in [dict(kernel_size=(9, 8), stride=(2, 3), padding=(4, 3)),
              dict(kernel_size=(9, 9), stride=1, ceil_mode=True),
              dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
              dict(kernel_size=3, stride=2, ceil_mode=True)]:
        tv, ti = F.max_pool2d(torch.tensor(x), return_indices=True, **g)
        v, i = tg.nn.functional.max_pool2d(tg.tensor(x), return_indices=True, **g)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_max_pool2d_ties_take_the_first_in_row_major_order():
    """A 2x2 window whose maximum sits at (0, 1) and (1, 0): index 1, as PyTorch (the
    2x2 stride-2 kernel compares row pairs before column pairs)."""
    x = np.array([[1., 5.], [5., 0.]])[None, None].repeat(2, 1).astype(np.float32)
    x[0, 1] = [[5., 0.], [0., 5.]]  # (0, 0) and (1, 1): index 0
    v, i = tg.nn.functional.max_pool2d(tg.tensor(x), 2, return_indices=True)
    tv, ti = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
