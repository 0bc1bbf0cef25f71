"""The CNN ops' fast kernels equal PyTorch: max_pool2d and avg_pool2d over generated
geometries, with NaNs and ties in the input (values, the chosen indices: first
maximum, last NaN; windows that hang over the padding with ceil_mode; what is
refused), conv2d's attribute spellings (ints, pairs, 'valid', 'same') on the public
function and on the registry op, and relu with its gradient on the threaded and the
NumPy paths."""
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


CONV_SPELLINGS = [dict(), dict(stride=2, padding=1), dict(stride=(1, 2), padding=(2, 0)),
                  dict(padding="valid"), dict(padding="same"), dict(padding="same", dilation=2),
                  dict(padding="same", dilation=(1, 3)), dict(padding=[1], dilation=[2, 1])]


@pytest.mark.parametrize("attrs", CONV_SPELLINGS, ids=str)
def test_conv2d_attribute_spellings_equal_torch(attrs):
    """Every public spelling of conv2d's attributes, through the public function and
    through the registry op (which takes the same keywords), against PyTorch; 'same'
    with an even kernel pads the extra row and column at the end, as PyTorch."""
    r = np.random.default_rng(3)
    x, w = r.standard_normal((2, 2, 7, 8)), r.standard_normal((3, 2, 2, 3))
    ref = F.conv2d(torch.tensor(x), torch.tensor(w), **attrs).numpy()
    out = tg.conv2d(tg.tensor(x), tg.tensor(w), **attrs)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-12)
    op = tg.ops_registry.get("conv2d")
    np.testing.assert_allclose(op.compute(x, w, None, **attrs), ref, rtol=1e-10, atol=1e-12)


def test_conv2d_registry_op_takes_canonical_attrs_and_public_refuses_them():
    """((top, bottom), (left, right)) padding is the op's canonical attribute: the
    registry op takes it (asymmetric padding), the public function refuses it, as
    PyTorch's does."""
    r = np.random.default_rng(4)
    x, w = r.standard_normal((1, 1, 4, 5)), r.standard_normal((1, 1, 2, 2))
    attrs = dict(stride=(1, 1), padding=((0, 1), (1, 0)), dilation=(1, 1), groups=1)
    got = tg.ops_registry.get("conv2d").compute(x, w, None, **attrs)
    ref = F.conv2d(F.pad(torch.tensor(x), (1, 0, 0, 1)), torch.tensor(w)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(TypeError, match="conv2d: padding must be an int or a pair"):
        tg.conv2d(tg.tensor(x), tg.tensor(w), padding=((0, 1), (1, 0)))


@pytest.mark.parametrize("shape", [(7,), (300, 300), (2, 70000)])
def test_relu_and_its_gradient_large_and_small_equal_torch(shape):
    """Above 65536 elements relu and its gradient run as threaded loops: same
    values (NaN passes) and gradients as PyTorch."""
    r = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        x0 = r.standard_normal(shape).astype(dtype)
        x0.flat[3] = np.nan
        g0 = r.standard_normal(shape).astype(dtype)
        x = tg.tensor(x0, requires_grad=True)
        tx = torch.tensor(x0, requires_grad=True)
        y, ty = tg.relu(x), torch.relu(tx)
        np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
        y.backward(tg.tensor(g0))
        ty.backward(torch.tensor(g0))
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
