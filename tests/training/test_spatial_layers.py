"""Conv1d, ConvTranspose2d, GroupNorm, Upsample, Unfold/Fold against PyTorch: the same
state-dict keys, a PyTorch state dict loaded by key, then forward, input and
parameter gradients equal; default initialisations in PyTorch's bounds; the
functional wrappers' argument handling; forward-mode rules of the new ops."""
import math
import types

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.ops_registry import get

torch = pytest.importorskip("torch")


def _compare_module(make, x_shape, seed=0, call=None, tol=1e-10):
    """Build the module in both libraries, load PyTorch's state dict into ours, and
    compare outputs and gradients in float64."""
    torch.manual_seed(seed)
    tm = make(torch.nn).double()
    gm = make(tg.nn).double()
    tsd = tm.state_dict()
    assert list(gm.state_dict()) == list(tsd)
    gm.load_state_dict({k: tg.tensor(v.numpy()) for k, v in tsd.items()})
    x = np.random.default_rng(seed).standard_normal(x_shape)
    xt = torch.tensor(x, requires_grad=True)
    xg = tg.tensor(x, requires_grad=True)
    call = call or (lambda m, v: m(v))
    yt, yg = call(tm, xt), call(gm, xg)
    np.testing.assert_allclose(yg.detach().numpy(), yt.detach().numpy(), rtol=tol, atol=tol)
    w = np.random.default_rng(seed + 1).standard_normal(tuple(yt.shape))
    (yt * torch.tensor(w)).sum().backward()
    (yg * tg.tensor(w)).sum().backward()
    np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)
    tp = dict(tm.named_parameters())
    for name, p in gm.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=tol, atol=tol,
                                   err_msg=name)
    return gm, tm


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, dilation=2),
                                dict(groups=2, bias=False, padding="same"),
                                dict(padding=2, padding_mode="circular")])
def test_conv1d(kw):
    _compare_module(lambda nn: nn.Conv1d(4, 6, 3, **kw), (2, 4, 11))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(2, 3), padding=(0, 1), groups=2, dilation=(2, 1)),
                                dict(stride=3, bias=False, output_padding=(2, 1))])
def test_conv_transpose2d(kw):
    _compare_module(lambda nn: nn.ConvTranspose2d(4, 6, (3, 2), **kw), (2, 4, 5, 4))


def test_conv_transpose2d_output_size():
    _compare_module(lambda nn: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1), (1, 2, 4, 4),
                    call=lambda m, v: m(v, output_size=(8, 7)))
    m = tg.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    with pytest.raises(ValueError, match="output size"):
        m(tg.ones(1, 2, 4, 4), output_size=(9, 9))


@pytest.mark.parametrize("kw", [dict(), dict(affine=False, eps=1e-3), dict(bias=False)])
@pytest.mark.parametrize("shape", [(3, 6, 5), (2, 6, 3, 4), (4, 6)])
def test_group_norm(kw, shape):
    _compare_module(lambda nn: nn.GroupNorm(3, 6, **kw), shape)


def test_group_norm_affine_trained_weights():
    torch.manual_seed(3)
    tm = torch.nn.GroupNorm(2, 4).double()
    with torch.no_grad():
        tm.weight.normal_()
        tm.bias.normal_()
    gm = tg.nn.GroupNorm(2, 4).double()
    gm.load_state_dict({k: tg.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((3, 4, 5))
    np.testing.assert_allclose(gm(tg.tensor(x)).detach().numpy(),
                               tm(torch.tensor(x)).detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw,shape", [
    (dict(scale_factor=2), (2, 3, 4, 5)),
    (dict(size=(7, 3)), (1, 2, 4, 5)),
    (dict(scale_factor=1.7, mode="bilinear"), (1, 2, 4, 5)),
    (dict(scale_factor=(2.5, 0.5), mode="bilinear", align_corners=True), (1, 2, 4, 6)),
    (dict(size=9, mode="bilinear", align_corners=False), (2, 1, 3, 3)),
    (dict(scale_factor=3, mode="linear"), (2, 3, 4)),
    (dict(size=10, mode="linear", align_corners=True), (2, 3, 4)),
    (dict(scale_factor=1.5, recompute_scale_factor=True, mode="bilinear"), (1, 1, 5, 3)),
    (dict(scale_factor=0.6), (1, 2, 10, 7)),
    (dict(scale_factor=1.7, mode="nearest-exact"), (1, 2, 4, 5)),
    (dict(scale_factor=(1.5, 0.7), mode="bicubic"), (1, 2, 4, 6)),
    (dict(size=(5, 9), mode="bicubic", align_corners=True), (2, 1, 3, 4)),
    (dict(scale_factor=1.3, mode="bicubic", recompute_scale_factor=True), (1, 1, 5, 4)),
    (dict(size=(3, 2), mode="area"), (1, 2, 7, 5)),
    (dict(scale_factor=0.5, mode="area"), (1, 2, 6, 5)),
    (dict(scale_factor=(1.5, 2, 0.5), mode="trilinear"), (1, 2, 3, 2, 4)),
    (dict(size=(3, 4, 2), mode="nearest"), (1, 1, 2, 3, 5)),
])
def test_upsample(kw, shape):
    _compare_module(lambda nn: nn.Upsample(**kw), shape)


def test_unfold_fold_modules():
    _compare_module(lambda nn: nn.Unfold(2, dilation=1, padding=1, stride=2), (2, 3, 5, 6))
    _compare_module(lambda nn: nn.Fold((5, 6), 2, padding=1, stride=2), (2, 12, 12))
    # unbatched: (C, H, W) in, (C * kH * kW, L) out, and back
    _compare_module(lambda nn: nn.Unfold(2, dilation=1, padding=1, stride=2), (3, 5, 6))
    _compare_module(lambda nn: nn.Fold((5, 6), 2, padding=1, stride=2), (12, 12))


def test_default_inits_in_pytorch_bounds():
    tg.manual_seed(0)
    for m, fan_in in ((tg.nn.Conv1d(4, 8, 5), 20), (tg.nn.ConvTranspose2d(6, 4, 3), 36),
                      (tg.nn.ConvTranspose2d(6, 4, 3, groups=2), 18)):
        bound = 1 / math.sqrt(fan_in)
        for p in (m.weight, m.bias):
            a = p.detach().numpy()
            assert np.abs(a).max() <= bound and np.abs(a).max() > 0.7 * bound
    g = tg.nn.GroupNorm(2, 4)
    assert g.weight.tolist() == [1.0] * 4 and g.bias.tolist() == [0.0] * 4
    assert tg.nn.ConvTranspose2d(6, 4, 3, groups=2).weight.shape == (6, 2, 3, 3)
    assert repr(tg.nn.Upsample(scale_factor=2)) == repr(torch.nn.Upsample(scale_factor=2))
    assert repr(tg.nn.GroupNorm(2, 4)) == repr(torch.nn.GroupNorm(2, 4))


def test_functional_argument_errors():
    x = tg.ones(1, 2, 3, 3)
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x)
    with pytest.raises(NotImplementedError, match="lanczos"):
        F.interpolate(x, scale_factor=2, mode="lanczos")
    with pytest.raises(RuntimeError, match="num_groups"):
        F.group_norm(x, 3)
    with pytest.raises(RuntimeError, match="output_padding"):
        F.conv_transpose2d(x, tg.ones(2, 1, 3, 3), output_padding=1)
    with pytest.raises(RuntimeError, match="conv_transpose2d: expected a floating point"):
        F.conv_transpose2d(tg.ones(1, 2, 3, 3, dtype=tg.int64), tg.ones(2, 1, 3, 3))


def test_new_ops_differentiate_to_second_order():
    x = tg.tensor(np.random.default_rng(0).standard_normal((1, 2, 3, 3)), requires_grad=True)
    w = tg.tensor(np.random.default_rng(1).standard_normal((2, 2, 2, 2)), requires_grad=True)
    fns = [lambda x, w: F.conv_transpose2d(x, w, stride=2) ** 2,
           lambda x, w: F.group_norm(x * w.sum(), 2) ** 3,
           lambda x, w: F.interpolate(x * w.mean(), scale_factor=2, mode="bilinear") ** 2,
           lambda x, w: F.fold(F.unfold(x * w.mean(), 2), (3, 3), 2) ** 2]
    for fn in fns:
        assert tg.testing.gradgradcheck(fn, (x, w))


# ---------------------------------------------------------------- forward mode
NEW_OPS = ["conv_transpose2d", "group_norm", "interpolate", "unfold", "fold"]


@pytest.mark.parametrize("name", NEW_OPS)
def test_jvp_rules_match_finite_differences(name):
    """Each new op's forward-mode rule, called as the registry calls it, equals the
    central difference of the op along random tangents (float64)."""
    op = get(name)
    rng = np.random.default_rng(0)
    for s in op.samples(np.float64):
        arrays = [a for a in s.args]
        tans = [None if a is None else rng.standard_normal(a.shape) for a in arrays]
        from tapegrad.dispatch import bind

        def f(*xs):
            return bind(op, *[None if v is None else tg.tensor(v) for v in xs], **s.attrs)
        inputs = [None if a is None else tg.tensor(a) for a in arrays]
        out = f(*arrays)
        ctx = types.SimpleNamespace(inputs=inputs, out=out, attrs=dict(s.attrs), m=tg.ops)
        (jt,) = op.jvp(ctx, *[None if t is None else tg.tensor(t) for t in tans])
        h = 1e-6
        plus = f(*[None if a is None else a + h * t for a, t in zip(arrays, tans)]).numpy()
        minus = f(*[None if a is None else a - h * t for a, t in zip(arrays, tans)]).numpy()
        np.testing.assert_allclose(jt.numpy(), (plus - minus) / (2 * h), rtol=1e-6, atol=1e-7)
        # one tangent at a time (None elsewhere) too
        k = 0
        only = [t if i == k else None for i, t in enumerate(tans)]
        (j0,) = op.jvp(ctx, *[None if t is None else tg.tensor(t) for t in only])
        plus = f(*[None if a is None else a + h * t if t is not None else a
                   for a, t in zip(arrays, only)]).numpy()
        minus = f(*[None if a is None else a - h * t if t is not None else a
                    for a, t in zip(arrays, only)]).numpy()
        np.testing.assert_allclose(j0.numpy(), (plus - minus) / (2 * h), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("shape, kw", [
    ((1, 2, 16, 12), dict(size=(5, 4))), ((2, 1, 9, 7), dict(size=(3, 3))),
    ((1, 1, 8, 8), dict(size=(16, 12))), ((1, 2, 13, 11), dict(scale_factor=(0.5, 0.3))),
    ((1, 1, 10, 10), dict(size=(3, 7), align_corners=True)),
    ((1, 1, 6, 6), dict(scale_factor=0.4, recompute_scale_factor=True))])
def test_interpolate_antialias_as_torch(mode, shape, kw):
    x = np.random.default_rng(0).standard_normal(shape)
    gout = np.random.default_rng(1)
    tx, gx = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    want = torch.nn.functional.interpolate(tx, mode=mode, antialias=True, **kw)
    got = F.interpolate(gx, mode=mode, antialias=True, **kw)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-13)
    g = gout.standard_normal(tuple(want.shape))
    (want * torch.tensor(g)).sum().backward()
    (got * tg.tensor(g)).sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), atol=1e-13)


def test_interpolate_antialias_keeps_a_nan_local_and_refuses_other_modes():
    x = np.ones((1, 1, 8, 8))
    x[0, 0, 0, 0] = np.nan
    got = F.interpolate(tg.tensor(x), size=(4, 4), mode="bilinear", antialias=True).numpy()
    want = torch.nn.functional.interpolate(torch.tensor(x), size=(4, 4), mode="bilinear",
                                           antialias=True).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    for shape, mode in (((1, 2, 8), "linear"), ((1, 2, 8, 8), "nearest")):
        with pytest.raises(ValueError, match="Anti-alias"):
            F.interpolate(tg.randn(*shape), size=4, mode=mode, antialias=True)
