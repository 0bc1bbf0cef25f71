"""conv2d's attribute spellings (ints, pairs, 'valid', 'same') on the public function and
on the registry op, against PyTorch."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")
F = torch.nn.functional


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


KERNEL_PATHS = [  # (input, weight, attrs): the CPU kernels' paths
    ((2, 16, 9, 8), (8, 16, 3, 3), dict()),  # dense im2col; weight grad channels-last
    ((2, 8, 7, 6), (5, 8, 3, 2), dict(padding=(1, 2))),  # padded, channels-last
    ((1, 8, 3, 3), (16, 8, 3, 3), dict()),  # channels-last, N * L < O
    ((2, 1, 10, 9), (4, 1, 3, 3), dict()),  # dense, K = 9: g used in place
    ((2, 4, 9, 8), (6, 4, 3, 3), dict(padding=1)),  # padded
    ((2, 16, 9, 8), (8, 8, 3, 3), dict(groups=2)),  # grouped: g transposed (K = 72)
    ((2, 4, 9, 10), (6, 2, 3, 2), dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2),
                                       groups=2)),
    ((2, 8, 7, 7), (8, 8, 2, 2), dict(stride=2, dilation=2, padding=2))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs, ws, attrs", KERNEL_PATHS, ids=str)
def test_conv2d_kernels_and_gradients_equal_torch(xs, ws, attrs, dtype):
    """conv2d's forward (with bias), weight gradient and input gradient through each
    of the CPU kernels' paths (dense and bounded im2col/col2im, the weight gradient
    from channels-last columns or with g transposed or in place), float32 and float64,
    against PyTorch."""
    r = np.random.default_rng(5)
    x, w, b = (r.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ref = F.conv2d(tx, tw, tb, **attrs)
    g = r.standard_normal(tuple(ref.shape)).astype(dtype)
    ref.backward(torch.tensor(g))
    px, pw, pb = (tg.tensor(a, requires_grad=True) for a in (x, w, b))
    out = tg.conv2d(px, pw, pb, **attrs)
    out.backward(tg.tensor(g))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for got, want in ((out, ref), (px.grad, tx.grad), (pw.grad, tw.grad), (pb.grad, tb.grad)):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **tol)


@pytest.mark.parametrize("name, x, w", [
    ("conv1d", (3, 9), (4, 3, 2)), ("conv2d", (3, 9, 9), (4, 3, 2, 2)),
    ("conv3d", (3, 5, 5, 5), (4, 3, 2, 2, 2)), ("conv_transpose1d", (3, 9), (3, 4, 2)),
    ("conv_transpose2d", (3, 9, 9), (3, 4, 2, 2)),
    ("conv_transpose3d", (3, 5, 5, 5), (3, 4, 2, 2, 2))])
def test_an_unbatched_input_convolves_as_torch(name, x, w):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal(x), rng.standard_normal(w)
    gx, gw = tg.tensor(xa, requires_grad=True), tg.tensor(wa, requires_grad=True)
    tx, tw = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    got = getattr(tg.nn.functional, name)(gx, gw, stride=2)
    want = getattr(torch.nn.functional, name)(tx, tw, stride=2)
    (got ** 2).sum().backward()
    (want ** 2).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw.grad.numpy(), tw.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, ws", [("conv2d", (3, 2, 3, 3)), ("conv_transpose2d", (2, 3, 3, 3)),
                                      ("conv1d", (3, 2, 3)), ("conv_transpose1d", (2, 3, 3)),
                                      ("conv_transpose3d", (2, 3, 3, 3, 3))])
def test_a_half_width_input_with_a_float32_weight_is_refused_as_torch(name, ws):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((1, 2) + (5,) * (len(ws) - 2)).astype(
        np.float32)
    w = np.random.default_rng(1).standard_normal(ws).astype(np.float32)
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, name)(torch.tensor(x).bfloat16(), torch.tensor(w))
    f = getattr(tg.nn.functional, name)
    with pytest.raises(RuntimeError, match=f"{name}.*same dtype.*bfloat16 != float32"):
        f(tg.tensor(x).bfloat16(), tg.tensor(w))
    with tg.autocast("cpu", dtype=tg.bfloat16):  # (autocast casts both: no error)
        assert f(tg.tensor(x).bfloat16(), tg.tensor(w)).dtype == tg.bfloat16
