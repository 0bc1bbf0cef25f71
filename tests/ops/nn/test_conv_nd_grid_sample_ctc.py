"""conv3d, conv_transpose3d, grid_sample and ctc_loss (ops/nn/conv_nd.py, spatial.py, loss_ctc.py)
against PyTorch in float64: values, first-order gradients of every input, second order
(PyTorch's where it has one: conv; finite differences otherwise), every grid_sample
mode / padding_mode / align_corners, ctc_loss's reductions and zero_infinity, and bad
input raising PyTorch's exception class with the op's name. The registry tests
(tests/ops/test_registry.py) run their samples through gradcheck, gradgradcheck, vmap
and forward mode as well."""
import itertools
import warnings

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.ops.nn.spatial import _grid
from tapegrad.testing import gradcheck, gradgradcheck

TF = torch.nn.functional


def _pair(a, grad=True):
    return (torch.tensor(a, requires_grad=grad and a.dtype.kind == "f"),
            tg.tensor(a, requires_grad=grad and a.dtype.kind == "f"))


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _check_first_order(fn_t, fn_g, arrays, rtol=1e-9, atol=1e-11):
    """Values and the gradient of <out, w> for every float input, tapegrad vs torch."""
    ts, gs = zip(*(_pair(a) for a in arrays))
    out_t, out_g = fn_t(*ts), fn_g(*gs)
    np.testing.assert_allclose(_np(out_g), _np(out_t), rtol=rtol, atol=atol)
    w = np.random.default_rng(3).standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(w)).sum().backward()
    (out_g * tg.tensor(w)).sum().backward()
    for k, (a, b) in enumerate(zip(ts, gs)):
        if a.requires_grad:
            ga = np.zeros(a.shape) if a.grad is None else a.grad.numpy()
            gb = np.zeros(b.shape) if b.grad is None else _np(b.grad)
            np.testing.assert_allclose(gb, ga, rtol=1e-8, atol=1e-10, err_msg=f"input {k}")


def _check_second_order(fn_t, fn_g, arrays):
    """d/d(inputs) of <d<out, w>/d(first input), v>: PyTorch's double backward."""
    ts, gs = zip(*(_pair(a) for a in arrays))
    out_t, out_g = fn_t(*ts), fn_g(*gs)
    rng = np.random.default_rng(5)
    w = rng.standard_normal(tuple(out_t.shape))
    (gt,) = torch.autograd.grad((out_t * torch.tensor(w)).sum(), ts[0], create_graph=True)
    (gg,) = tg.autograd.grad((out_g * tg.tensor(w)).sum(), gs[0], create_graph=True)
    v = rng.standard_normal(tuple(gt.shape))
    sec_t = torch.autograd.grad((gt * torch.tensor(v)).sum(), ts, allow_unused=True)
    sec_g = tg.autograd.grad((gg * tg.tensor(v)).sum(), gs, allow_unused=True)
    for k, (a, b) in enumerate(zip(sec_t, sec_g)):
        ga = np.zeros(ts[k].shape) if a is None else a.numpy()
        gb = np.zeros(ts[k].shape) if b is None else _np(b)
        np.testing.assert_allclose(gb, ga, rtol=1e-8, atol=1e-10, err_msg=f"input {k}")


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


# ------------------------------------------------------------------ conv3d
CONV3D = [
    ((2, 4, 5, 6, 4), (6, 4, 3, 3, 3), True, {"padding": 1}),
    ((1, 4, 6, 5, 5), (4, 2, 2, 3, 2), False, {"stride": (2, 1, 2), "dilation": (1, 2, 1),
                                               "groups": 2}),
    ((1, 3, 4, 5, 6), (2, 3, 2, 2, 3), True, {"padding": "same", "dilation": (2, 1, 1)}),
    ((3, 4, 4, 4), (2, 3, 1, 2, 2), False, {"padding": (1, 0, 1), "stride": 2}),
]


@pytest.mark.parametrize("xs,ws,bias,kw", CONV3D)
def test_conv3d_matches_torch(xs, ws, bias, kw):
    arrays = [_rand(*xs), _rand(*ws, seed=1)] + ([_rand(ws[0], seed=2)] if bias else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's note on 'same' with an even kernel
        _check_first_order(lambda *a: TF.conv3d(*a, **kw), lambda *a: F.conv3d(*a, **kw), arrays)
        _check_second_order(lambda *a: TF.conv3d(*a, **kw), lambda *a: F.conv3d(*a, **kw),
                            arrays)


CT3D = [
    ((2, 3, 3, 4, 2), (3, 2, 3, 2, 2), True, {"stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 4, 2, 3, 3), (4, 1, 2, 3, 2), False, {"stride": (1, 2, 2), "groups": 2,
                                               "dilation": (2, 1, 1)}),
    ((2, 3, 3, 2), (2, 2, 3, 1, 2), True, {"stride": (3, 1, 1), "output_padding": (2, 0, 0),
                                           "padding": (2, 0, 1)}),
]


@pytest.mark.parametrize("xs,ws,bias,kw", CT3D)
def test_conv_transpose3d_matches_torch(xs, ws, bias, kw):
    Cout = ws[1] * kw.get("groups", 1)
    arrays = [_rand(*xs), _rand(*ws, seed=1)] + ([_rand(Cout, seed=2)] if bias else [])
    _check_first_order(lambda *a: TF.conv_transpose3d(*a, **kw),
                       lambda *a: F.conv_transpose3d(*a, **kw), arrays)
    _check_second_order(lambda *a: TF.conv_transpose3d(*a, **kw),
                        lambda *a: F.conv_transpose3d(*a, **kw), arrays)


def test_conv3d_modules_match_torch_with_padding_modes():
    x = _rand(2, 3, 4, 5, 4)
    for mode, pad in itertools.product(("zeros", "reflect", "replicate", "circular"),
                                       (1, "same")):
        torch.manual_seed(0)
        mt = torch.nn.Conv3d(3, 4, (3, 2, 3), padding=pad, padding_mode=mode).double()
        mg = tg.nn.Conv3d(3, 4, (3, 2, 3), padding=pad, padding_mode=mode).double()
        mg.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
        np.testing.assert_allclose(_np(mg(tg.tensor(x))), _np(mt(torch.tensor(x))), rtol=1e-9,
                                   atol=1e-11, err_msg=f"{mode} {pad}")
    torch.manual_seed(0)
    mt = torch.nn.ConvTranspose3d(3, 2, 3, stride=2).double()
    mg = tg.nn.ConvTranspose3d(3, 2, 3, stride=2).double()
    mg.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    for size in (None, (9, 12, 10)):
        np.testing.assert_allclose(_np(mg(tg.tensor(x), output_size=size)),
                                   _np(mt(torch.tensor(x), output_size=size)), rtol=1e-9,
                                   atol=1e-11)
    # PyTorch's initialisation bounds: kaiming_uniform(a=sqrt(5)) is 1/sqrt(fan_in)
    w = _np(tg.nn.Conv3d(4, 6, 3).weight)
    assert w.shape == (6, 4, 3, 3, 3) and np.abs(w).max() <= 1 / np.sqrt(4 * 27)


# ------------------------------------------------------------------ grid_sample
GRID_CASES = [(mode, pm, ac, nd)
              for nd, modes in ((2, ("bilinear", "nearest", "bicubic")),
                                (3, ("bilinear", "nearest")))
              for mode in modes for pm in ("zeros", "border", "reflection") for ac in (False, True)]


@pytest.mark.parametrize("mode,pm,ac,nd", GRID_CASES)
def test_grid_sample_matches_torch(mode, pm, ac, nd):
    sizes = (4, 5) if nd == 2 else (3, 4, 3)
    x = _rand(2, 3, *sizes)
    g = _grid(2, (3, 2) if nd == 2 else (2, 2, 2), sizes, ac, seed=7)
    kw = dict(mode=mode, padding_mode=pm, align_corners=ac)
    _check_first_order(lambda a, b: TF.grid_sample(a, b, **kw),
                       lambda a, b: F.grid_sample(a, b, **kw), [x, g])


@pytest.mark.parametrize("mode,pm,ac", [("bilinear", "reflection", False),
                                        ("bicubic", "border", True), ("nearest", "zeros", False)])
def test_grid_sample_second_order_by_finite_differences(mode, pm, ac):
    # PyTorch's grid_sampler backward has no derivative of its own
    x = tg.tensor(_rand(1, 1, 3, 4), requires_grad=True)
    g = tg.tensor(_grid(1, (2, 1), (3, 4), ac, seed=9), requires_grad=True)

    def fn(a, b):
        return F.grid_sample(a, b, mode=mode, padding_mode=pm, align_corners=ac)
    assert gradcheck(fn, (x, g))
    assert gradgradcheck(fn, (x, g))


def test_grid_sample_default_align_corners_warns_and_is_false():
    x, g = _rand(1, 1, 3, 3), _grid(1, (2, 2), (3, 3), False, seed=1)
    with pytest.warns(UserWarning, match="align_corners"):
        out = F.grid_sample(tg.tensor(x), tg.tensor(g))
    np.testing.assert_allclose(_np(out), TF.grid_sample(torch.tensor(x), torch.tensor(g),
                                                        align_corners=False).numpy())


# ------------------------------------------------------------------ ctc_loss
def _ctc_inputs(seed=0):
    rng = np.random.default_rng(seed)
    T, N, C = 7, 3, 5
    logits = rng.standard_normal((T, N, C))
    targets = np.array([[1, 2, 2, 4], [3, 1, 0, 0], [4, 4, 1, 2]])
    # the third cannot be aligned in 4 frames (4, 4 needs a blank between: 5 frames)
    il, tl = np.array([7, 5, 4]), np.array([4, 2, 4])
    return logits, targets, il, tl


@pytest.mark.parametrize("reduction,zero_infinity", list(itertools.product(
    ("none", "mean", "sum"), (False, True))))
def test_ctc_loss_through_log_softmax_matches_torch(reduction, zero_infinity):
    """PyTorch's backward is the gradient with respect to the logits of a log_softmax
    (exp(log_probs) - posterior); through log_softmax both are the true gradient."""
    logits, targets, il, tl = _ctc_inputs()
    if not zero_infinity:  # an infinite loss has no gradient to compare
        il = np.array([7, 5, 6])
    lt, lg = _pair(logits)

    def both(lib, x):
        f = lib.nn.functional
        return f.ctc_loss(f.log_softmax(x, 2), lib.tensor(targets), lib.tensor(il),
                          lib.tensor(tl), blank=0, reduction=reduction,
                          zero_infinity=zero_infinity)
    ot, og = both(torch, lt), both(tg, lg)
    np.testing.assert_allclose(_np(og), _np(ot), rtol=1e-9, atol=1e-11)
    w = np.random.default_rng(1).standard_normal(tuple(ot.shape))
    (ot * torch.tensor(w)).sum().backward()
    (og * tg.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(lg.grad), lt.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_ctc_loss_infinite_without_zero_infinity_and_forms_of_targets():
    logits, targets, il, tl = _ctc_inputs()
    lp = torch.log_softmax(torch.tensor(logits), 2)
    out = F.ctc_loss(tg.tensor(lp.numpy()), tg.tensor(targets), tg.tensor(il), tg.tensor(tl),
                     reduction="none")
    assert np.isinf(_np(out)[2]) and np.all(np.isfinite(_np(out)[:2]))
    np.testing.assert_allclose(_np(out), TF.ctc_loss(lp, torch.tensor(targets), torch.tensor(il),
                                                     torch.tensor(tl), reduction="none").numpy())
    # concatenated targets, lengths as tuples, another blank; unbatched
    cat = np.concatenate([r[:n] for r, n in zip(targets, tl)])
    for blank in (0, 2):
        t_cat = np.where(cat == blank, 1, cat)
        ref = TF.ctc_loss(lp, torch.tensor(t_cat), tuple(il), tuple(tl), blank=blank,
                          zero_infinity=True)
        got = F.ctc_loss(tg.tensor(lp.numpy()), tg.tensor(t_cat), tuple(il.tolist()),
                         tuple(tl.tolist()), blank=blank, zero_infinity=True)
        np.testing.assert_allclose(_np(got), ref.numpy(), rtol=1e-9)
    ref = TF.ctc_loss(lp[:, 0], torch.tensor(targets[0]), torch.tensor(7), torch.tensor(4))
    got = F.ctc_loss(tg.tensor(lp[:, 0].numpy()), tg.tensor(targets[0]), tg.tensor(7),
                     tg.tensor(4))
    np.testing.assert_allclose(_np(got), ref.numpy(), rtol=1e-9)
    m = tg.nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)
    np.testing.assert_allclose(
        _np(m(tg.tensor(lp.numpy()), tg.tensor(targets), tg.tensor(il), tg.tensor(tl))),
        torch.nn.CTCLoss(reduction="sum", zero_infinity=True)(
            lp, torch.tensor(targets), torch.tensor(il), torch.tensor(tl)).numpy(), rtol=1e-9)


def test_ctc_loss_second_order_by_finite_differences():
    logits, targets, il, tl = _ctc_inputs(1)
    x = tg.tensor(logits[:4, :2, :4], requires_grad=True)

    def fn(x):
        return F.ctc_loss(F.log_softmax(x, 2), tg.tensor(targets[:2, :2]), tg.tensor([4, 3]),
                          tg.tensor([2, 1]), reduction="none")
    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))


# ------------------------------------------------------------------ bad input
def _lp():
    return np.log(np.full((6, 2, 4), 0.25))


BAD = [
    ("conv3d", (_rand(1, 3, 4, 4, 4), _rand(2, 2, 2, 2, 2)), {}),
    ("conv3d", (_rand(1, 2, 2, 2, 2), _rand(2, 2, 3, 3, 3)), {}),
    ("conv3d", (_rand(1, 2, 4, 4), _rand(2, 2, 2, 2)), {}),
    ("conv3d", (_rand(1, 2, 4, 4, 4), _rand(2, 2, 2, 2, 2)), {"padding": "full"}),
    ("conv3d", (_rand(1, 2, 4, 4, 4), _rand(2, 2, 2, 2, 2)), {"stride": 2, "padding": "same"}),
    ("conv_transpose3d", (_rand(1, 2, 3, 3, 3), _rand(3, 2, 2, 2, 2)), {}),
    ("conv_transpose3d", (_rand(1, 2, 3, 3, 3), _rand(2, 2, 2, 2, 2)), {"output_padding": 1}),
    ("grid_sample", (_rand(1, 2, 4, 5), _rand(1, 3, 2, 3)), {}),
    ("grid_sample", (_rand(1, 2, 4, 5), _rand(2, 3, 2, 2)), {}),
    ("grid_sample", (_rand(1, 2, 4, 5), _rand(1, 3, 2, 2)), {"mode": "area"}),
    ("grid_sample", (_rand(1, 2, 4, 5), _rand(1, 3, 2, 2)), {"padding_mode": "wrap"}),
    ("grid_sample", (_rand(1, 2, 3, 4, 5), _rand(1, 3, 2, 2, 3)), {"mode": "bicubic"}),
    ("ctc_loss", (_lp(), np.array([[1, 2], [3, 1]]), np.array([7, 5]), np.array([2, 2])), {}),
    ("ctc_loss", (_lp(), np.array([[1, 2], [3, 1]]), np.array([6, 5]), np.array([3, 2])), {}),
    ("ctc_loss", (_lp(), np.array([[1, 2], [3, 1]]), np.array([6, 5]), np.array([2, 2])),
     {"blank": 4}),
    ("ctc_loss", (_lp(), np.array([[1, 2], [3, 1]]), np.array([6, 5]), np.array([2, 2])),
     {"reduction": "avg"}),
]


@pytest.mark.parametrize("name,args,kw", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_raises_torch_class_naming_the_op(name, args, kw):
    kw = dict(kw, align_corners=False) if name == "grid_sample" else kw
    with pytest.raises(Exception) as ref:
        getattr(TF, name)(*[torch.tensor(a) for a in args], **kw)
    with pytest.raises(ref.type, match=name):
        getattr(F, name)(*[tg.tensor(a) for a in args], **kw)
