"""tg.nn's modules and functions against PyTorch: every module of the nn surface list
(``tests/surface/nn_surface.py``'s smoke calls) with PyTorch's weights loaded gives the same
forward, input gradients and
parameter gradients (float64); initialisations follow PyTorch's; the in-place
functional spellings write into their input; what the registry cannot drive (random
gumbel_softmax, return_indices) is checked here."""
import os
import sys
import warnings

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "surface"))
import nn_surface as C  # noqa: E402

# every module but the random ones and the containers (their smoke calls build PyTorch
# submodules in float32)
MODULES = sorted(n for n in C.MODULES_SMOKE if hasattr(tg.nn, n) and n not in C.RANDOM_M
                 and n not in tg.nn.modules.container.__all__)
# PyTorch's legacy CrossMapLRN2d has a hand-written backward that is not the derivative
# of its own forward (a centred window, where the forward's running sum never drops
# channel 0): its forward is compared, its gradient against finite differences
FORWARD_ONLY = {"CrossMapLRN2d"}


def _np(t):
    return None if t is None else np.asarray(t.detach().numpy(), dtype=np.float64)


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [out]


@pytest.mark.parametrize("name", MODULES)
def test_module_forward_and_gradients_match_torch(name):
    spec = C.MODULES_SMOKE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        mt = spec.build(torch, name).double()
        mg = spec.build(tg, name).double()
    st = mt.state_dict()
    assert list(st) == list(mg.state_dict())
    mg.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in st.items()})
    ins_t = [torch.tensor(a.astype(np.float64) if a.dtype.kind == "f" else a,
                          requires_grad=a.dtype.kind == "f") for a in spec.inputs]
    ins_g = [tg.tensor(a.astype(np.float64) if a.dtype.kind == "f" else a,
                       requires_grad=a.dtype.kind == "f") for a in spec.inputs]
    if spec._run is not None:
        out_t, out_g = spec.run(mt, torch), spec.run(mg, tg)
    else:
        try:
            out_t = mt(*ins_t)
        except RuntimeError as e:  # PyTorch refuses a target that requires grad
            if "not differentiable with respect to argument 'target'" not in str(e):
                raise
            ins_t[-1].requires_grad_(False)
            ins_g[-1].requires_grad_(False)
            out_t = mt(*ins_t)
        out_g = mg(*ins_g)
    lt = [o for o in _leaves(out_t) if isinstance(o, torch.Tensor) and o.is_floating_point()]
    lg = [o for o in _leaves(out_g) if isinstance(o, tg.Tensor) and o.is_floating_point()]
    assert len(lt) == len(lg)
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal(tuple(o.shape)) for o in lt]
    for a, b in zip(lt, lg):
        np.testing.assert_allclose(_np(b), _np(a), rtol=1e-7, atol=1e-9)
    diff = [(a, w) for a, w in zip(lt, ws) if a.requires_grad]
    if not diff or name in FORWARD_ONLY:
        return
    sum(((a * torch.tensor(w)).sum() for a, w in diff)).backward()
    sum(((b * tg.tensor(w)).sum() for b, w in zip(lg, ws) if b.requires_grad)).backward()
    for x, y in zip(ins_t, ins_g):
        if x.requires_grad and x.grad is None:  # PyTorch does not differentiate a target
            assert y.grad is None or not np.any(_np(y.grad))
        elif x.requires_grad:
            np.testing.assert_allclose(_np(y.grad), _np(x.grad), rtol=1e-7, atol=1e-9)
    pt, pg = dict(mt.named_parameters()), dict(mg.named_parameters())
    assert list(pt) == list(pg)
    for k in pt:
        if pt[k].grad is None:
            assert pg[k].grad is None or not np.any(_np(pg[k].grad)), k
        else:
            np.testing.assert_allclose(_np(pg[k].grad), _np(pt[k].grad), rtol=1e-7, atol=1e-9,
                                       err_msg=k)


def test_cross_map_lrn2d_gradient_by_finite_differences():
    from tapegrad.testing import gradcheck, gradgradcheck
    m = tg.nn.CrossMapLRN2d(3, alpha=0.5, beta=0.75, k=1.0)
    x = tg.tensor(np.random.default_rng(0).standard_normal((1, 5, 2, 2)), requires_grad=True)
    assert gradcheck(m, (x,))
    assert gradgradcheck(m, (x,))


def test_new_modules_have_torch_defaults_and_buffers():
    # running statistics after a training step, then evaluation with them
    for name, shape in (("InstanceNorm3d", (2, 2, 2, 3, 3)), ("BatchNorm3d", (2, 2, 2, 3, 3))):
        kw = {"track_running_stats": True} if name.startswith("Instance") else {}
        mt, mg = getattr(torch.nn, name)(2, **kw), getattr(tg.nn, name)(2, **kw)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        mt(torch.tensor(x))
        mg(tg.tensor(x))
        for k in ("running_mean", "running_var"):
            np.testing.assert_allclose(_np(getattr(mg, k)), _np(getattr(mt, k)), rtol=1e-5,
                                       atol=1e-6)
        mt.eval()
        mg.eval()
        np.testing.assert_allclose(_np(mg(tg.tensor(x))), _np(mt(torch.tensor(x))), rtol=1e-4,
                                   atol=1e-5)
    assert tg.nn.PReLU(3).weight.tolist() == [0.25] * 3
    assert tg.nn.RMSNorm((2, 3)).weight.tolist() == [[1.0] * 3] * 2
    assert tg.nn.InstanceNorm1d(3).weight is None  # affine=False by default, as PyTorch
    # uniform(-1/sqrt(in1), 1/sqrt(in1)) for Bilinear; N(0, 1) for EmbeddingBag
    w = _np(tg.nn.Bilinear(16, 40, 64).weight)
    assert np.abs(w).max() <= 0.25 and abs(w.std() - 0.25 / np.sqrt(3)) < 0.01
    e = tg.nn.EmbeddingBag(200, 50, padding_idx=3).weight
    assert abs(_np(e).std() - 1) < 0.05 and not np.any(_np(e)[3])
    ct = _np(tg.nn.ConvTranspose1d(4, 6, 3).weight)
    assert ct.shape == (4, 6, 3) and np.abs(ct).max() <= 1 / np.sqrt(18)
    assert repr(tg.nn.Hardtanh(-2.0, 2.0)) == "Hardtanh(min_val=-2.0, max_val=2.0, inplace=False)"
    with pytest.raises(TypeError):
        tg.nn.AvgPool1d()
    pd = tg.nn.ParameterDict({"a": tg.ones(2)})
    assert isinstance(pd["a"], tg.nn.Parameter) and list(pd.keys()) == ["a"]


@pytest.mark.parametrize("name,args", [("relu_", ()), ("elu_", (0.5,)), ("celu_", (0.7,)),
                                       ("selu_", ()), ("leaky_relu_", (0.2,)),
                                       ("hardtanh_", (-0.5, 0.5)), ("threshold_", (0.1, 2.0)),
                                       ("rrelu_", ())])
def test_inplace_spellings_write_into_the_input(name, args):
    x = np.random.default_rng(0).standard_normal((3, 4))
    a, b = tg.tensor(x), torch.tensor(x)
    r = getattr(F, name)(a, *args)
    getattr(torch.nn.functional, name)(b, *args)
    assert r is a
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-12)


def test_inplace_module_flag_and_gradient_through_the_write():
    x = tg.tensor(np.linspace(-2, 2, 8), requires_grad=True)
    y = x * 1.0
    out = tg.nn.Hardtanh(inplace=True)(y)
    assert out is y
    out.sum().backward()
    np.testing.assert_allclose(_np(x.grad), (np.abs(np.linspace(-2, 2, 8)) < 1).astype(float))


def test_return_indices_match_torch():
    x = np.random.default_rng(0).permutation(2 * 3 * 6 * 6 * 6).reshape(2, 3, 6, 6, 6) / 100.0
    for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}):
        v1, i1 = F.max_pool3d(tg.tensor(x), return_indices=True, **kw)
        v2, i2 = torch.nn.functional.max_pool3d(torch.tensor(x), return_indices=True, **kw)
        np.testing.assert_array_equal(i1.numpy(), i2.numpy())
        np.testing.assert_allclose(_np(v1), _np(v2))
    x2 = x[:, :, 0]
    for size in (3, (4, 2)):
        v1, i1 = F.adaptive_max_pool2d(tg.tensor(x2), size, return_indices=True)
        v2, i2 = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x2), size,
                                                         return_indices=True)
        np.testing.assert_array_equal(i1.numpy(), i2.numpy())
        np.testing.assert_allclose(_np(v1), _np(v2))
    v1, i1 = F.max_pool1d(tg.tensor(x2[:, :, 0]), 2, return_indices=True)
    v2, i2 = torch.nn.functional.max_pool1d(torch.tensor(x2[:, :, 0]), 2, return_indices=True)
    np.testing.assert_array_equal(i1.numpy(), i2.numpy())
    # unpooling puts the values back where they were
    u = F.max_unpool3d(*F.max_pool3d(tg.tensor(x), 2, return_indices=True), 2)
    ut = torch.nn.functional.max_unpool3d(
        *torch.nn.functional.max_pool3d(torch.tensor(x), 2, return_indices=True), 2)
    np.testing.assert_allclose(_np(u), _np(ut))


@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_is_softmax_at_the_generators_draw(hard):
    logits = np.random.default_rng(0).standard_normal((4, 5))
    tg.manual_seed(3)
    state = tg.get_rng_state()
    x = tg.tensor(logits, requires_grad=True)
    y = F.gumbel_softmax(x, tau=0.5, hard=hard)
    tg.set_rng_state(state)
    from tapegrad.ops.creation import generator
    e = generator().exponential(size=(4, 5))
    z = (logits - np.log(e)) / 0.5
    soft = np.exp(z - z.max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    if hard:
        want = np.eye(5)[soft.argmax(-1)]
    else:
        want = soft
    np.testing.assert_allclose(_np(y), want, rtol=1e-10, atol=1e-12)
    # the gradient is softmax's at that draw (straight through when hard)
    w = np.random.default_rng(2).standard_normal((4, 5))
    (y * tg.tensor(w)).sum().backward()
    zt = torch.tensor(z * 0.5, requires_grad=True)  # logits + g
    (torch.softmax(zt / 0.5, -1) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(x.grad), zt.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_functional_errors_name_the_function():
    with pytest.raises(RuntimeError, match="glu"):
        F.glu(tg.ones(3, 5))
    with pytest.raises(RuntimeError, match="pixel_shuffle"):
        F.pixel_shuffle(tg.ones(1, 6, 2, 2), 2)
    with pytest.raises(ValueError, match="kl_div"):
        F.kl_div(tg.ones(2), tg.ones(2), reduction="avg")
    with pytest.raises(RuntimeError, match="multi_margin_loss"):
        F.multi_margin_loss(tg.ones(3, 5), tg.tensor([0, 1]))
    with pytest.raises(ValueError, match="embedding_bag"):
        F.embedding_bag(tg.tensor([[1, 2]]), tg.ones(4, 3), mode="median")
    with pytest.raises(NotImplementedError, match="celu"):
        F.celu(tg.tensor([1, 2]))


def test_reassigned_members_keep_their_place():
    """A child, parameter or buffer assigned again stays where it was in children(),
    named_parameters() and named_buffers(), as in PyTorch (a program that replaces a
    network's first layer, then drops its last child, relies on it)."""
    def orders(lib):
        net = lib.nn.Sequential(lib.nn.Conv2d(3, 4, 3), lib.nn.BatchNorm2d(4), lib.nn.ReLU())
        net.add_module("fc", lib.nn.Linear(4, 2))
        setattr(net, "0", lib.nn.Conv2d(1, 4, 3))
        net.fc.weight = lib.nn.Parameter(lib.zeros(2, 4))
        net.add_module("1", lib.nn.BatchNorm2d(4))
        net[1].register_buffer("running_mean", lib.ones(4))
        kept = lib.nn.Sequential(*list(net.children())[:-1])
        return ([type(m).__name__ for m in net.children()],
                [n for n, _ in net.named_parameters()], [n for n, _ in net.named_buffers()],
                kept[0].in_channels)
    assert orders(tg) == orders(torch)


def test_batchnorm_cumulative_average_matches_torch_eager_and_compiled():
    """``momentum=None``: the running statistics are the cumulative average of the
    batches' (PyTorch's), and a compiled training step replays with the count of
    each call (the factor is computed with ops, not read by Python)."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((6, 3)) * (k + 1) + k for k in range(4)]
    ref = torch.nn.BatchNorm1d(3, momentum=None).double()
    for x in xs:
        ref(torch.tensor(x))
    for compiled in (False, True):
        bn = tg.nn.BatchNorm1d(3, momentum=None).double()
        run = tg.compile(bn) if compiled else bn
        for x in xs:
            run(tg.tensor(x))
        np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(),
                                   rtol=1e-12)
        np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(),
                                   rtol=1e-12)
        assert int(bn.num_batches_tracked) == 4
        if compiled:
            assert run.stats()["replays"] >= 2, run.stats()["eager_reason"]
