"""tg.nn modules: registration, state dicts, modes, and layers against PyTorch given
the same weights (forward and backward)."""
import math

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")


def _needs(*names):
    missing = [n for n in names if not hasattr(tg.ops, n)]
    return pytest.mark.skipif(bool(missing), reason=f"tapegrad.ops lacks {missing}")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 3, bias=False)])
        self.scale = nn.Parameter(tg.ones(1))
        self.register_buffer("counter", tg.zeros(1), persistent=False)
        self.plain = 5


def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "conv.weight", "conv.bias", "bn.weight", "bn.bias",
                     "blocks.0.weight", "blocks.0.bias", "blocks.1.weight"]
    assert len(list(net.parameters())) == 8
    assert [n for n, _ in net.named_children()] == ["conv", "bn", "blocks"]
    assert len(list(net.modules())) == 6
    assert [n for n, _ in net.named_buffers()] == ["counter", "bn.running_mean",
                                                    "bn.running_var", "bn.num_batches_tracked"]
    assert list(net.state_dict()) == names[:5] + ["bn.running_mean", "bn.running_var",
                                                  "bn.num_batches_tracked"] + names[5:]
    assert net.plain == 5 and all(p.requires_grad for p in net.parameters())
    with pytest.raises(TypeError, match="parameter 'scale'"):
        net.scale = tg.ones(1)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        net.nope


def test_train_eval_zero_grad_and_repr():
    net = Net()
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    for p in net.parameters():
        p.grad = tg.ones(p.shape)
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Flatten())
    assert repr(seq) == ("Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=True)\n"
                         "  (1): ReLU()\n  (2): Dropout(p=0.1, inplace=False)\n"
                         "  (3): Flatten(start_dim=1, end_dim=-1)\n)")
    assert repr(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.1), torch.nn.Flatten())) == repr(seq)


def test_load_state_dict_errors():
    net = Net()
    sd = net.state_dict()
    other = Net()
    other.load_state_dict(sd)
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())
    bad = dict(sd)
    del bad["conv.bias"]
    bad["extra"] = tg.zeros(1)
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "conv.bias"'):
        other.load_state_dict(bad)
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "extra"'):
        other.load_state_dict(bad)
    missing, unexpected = other.load_state_dict(bad, strict=False)
    assert missing == ["conv.bias"] and unexpected == ["extra"]
    wrong = dict(sd)
    wrong["blocks.0.weight"] = tg.zeros(8, 9)
    with pytest.raises(RuntimeError, match=r"size mismatch for blocks.0.weight: copying a "
                                           r"param with shape \(8, 9\)"):
        other.load_state_dict(wrong)


@pytest.mark.parametrize("lib", ["tg", "torch"])
def test_load_state_dict_assign_makes_the_tensors_the_modules(lib):
    """``assign=True``, as PyTorch's: each parameter becomes a Parameter over the state
    dict's tensor (its memory, its dtype), with the module's requires_grad; a
    Parameter given is used itself; buffers are the tensors given. Without it the
    values are copied into the module's own tensors, in their dtype."""
    L = tg if lib == "tg" else torch

    def shares(a, b):
        return np.shares_memory(a.detach().numpy(), b.detach().numpy())

    m = L.nn.Sequential(L.nn.Linear(3, 2), L.nn.BatchNorm1d(2))
    m[0].bias.requires_grad_(False)
    sd = {k: v.double() + 1 for k, v in m.state_dict().items()}
    sd["0.weight"] = L.nn.Parameter(sd["0.weight"], requires_grad=False)
    before = m[0].bias
    m.load_state_dict(sd, assign=True)
    assert m[0].weight is sd["0.weight"] and m[0].weight.requires_grad
    assert isinstance(m[0].bias, L.nn.Parameter) and m[0].bias is not before
    assert shares(m[0].bias, sd["0.bias"]) and m[0].bias.dtype == L.float64
    assert not m[0].bias.requires_grad
    assert m[1].running_mean is sd["1.running_mean"]
    m2 = L.nn.Linear(3, 2)
    w = m2.weight
    m2.load_state_dict({"weight": L.ones(2, 3, dtype=L.float64), "bias": L.zeros(2)})
    assert m2.weight is w and m2.weight.dtype == L.float32
    assert float(m2.weight.sum()) == 6.0


def test_state_dict_save_load_round_trip_is_exact(tmp_path):
    tg.manual_seed(0)
    net = Net()
    tg.save(net.state_dict(), tmp_path / "net.tg")
    loaded = tg.load(tmp_path / "net.tg")
    assert list(loaded) == list(net.state_dict())
    tg.manual_seed(1)
    fresh = Net()
    fresh.load_state_dict(loaded)
    for (k, a), (_, b) in zip(net.state_dict().items(), fresh.state_dict().items()):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_default_init_statistics():
    tg.manual_seed(0)
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w = lin.weight.detach().numpy()
    assert w.dtype == np.float32 and np.abs(w).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert np.abs(lin.bias.detach().numpy()).max() <= bound
    conv = nn.Conv2d(6, 8, 5)
    assert np.abs(conv.weight.detach().numpy()).max() <= 1 / math.sqrt(6 * 25)
    emb = nn.Embedding(1000, 64, padding_idx=0)
    e = emb.weight.detach().numpy()
    assert abs(e.std() - 1) < 0.02 and not e[0].any()
    tg.manual_seed(5)
    a = nn.Linear(3, 3).weight.detach().numpy().copy()
    tg.manual_seed(5)
    assert np.array_equal(a, nn.Linear(3, 3).weight.detach().numpy())


def test_to_dtype_keeps_parameter_identity():
    lin = nn.Linear(3, 2)
    w = lin.weight
    lin.to(tg.float64)
    assert lin.weight is w and w.dtype == tg.float64 and w.requires_grad
    bn = nn.BatchNorm1d(3).double()
    assert bn.running_mean.dtype == tg.float64 and bn.num_batches_tracked.dtype == tg.int64


def _copy_to_torch(tg_mod, th_mod):
    with torch.no_grad():
        for (n, p), (m, q) in zip(tg_mod.named_parameters(), th_mod.named_parameters()):
            assert n == m
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))


def _compare_fwd_bwd(tg_mod, th_mod, x, rtol=1e-5, atol=1e-5):
    _copy_to_torch(tg_mod, th_mod)
    xt = tg.tensor(x, requires_grad=True)
    xq = torch.tensor(x, requires_grad=True)
    out, ref = tg_mod(xt), th_mod(xq)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    g = np.random.default_rng(1).standard_normal(ref.shape).astype(x.dtype)
    out.backward(tg.tensor(g))
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(xt.grad.numpy(), xq.grad.numpy(), rtol=rtol, atol=atol)
    for (n, p), (_, q) in zip(tg_mod.named_parameters(), th_mod.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=n)


@_needs("linear")
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(bias):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    _compare_fwd_bwd(nn.Linear(7, 4, bias=bias), torch.nn.Linear(7, 4, bias=bias), x)
    x3 = np.random.default_rng(0).standard_normal((2, 5, 7)).astype(np.float32)
    _compare_fwd_bwd(nn.Linear(7, 4, bias=bias), torch.nn.Linear(7, 4, bias=bias), x3)


@_needs("conv2d")
@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(padding=2, dilation=2),
                                dict(groups=2, bias=False)])
def test_conv2d_matches_torch(kw):
    x = np.random.default_rng(0).standard_normal((2, 4, 9, 8)).astype(np.float32)
    _compare_fwd_bwd(nn.Conv2d(4, 6, 3, **kw), torch.nn.Conv2d(4, 6, 3, **kw), x, 1e-4, 1e-4)


@_needs("batch_norm")
def test_batchnorm_running_stats_match_torch():
    rng = np.random.default_rng(0)
    tb, qb = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    for momentum in (0.1, None):
        tb.momentum = qb.momentum = momentum
        for _ in range(3):
            x = (rng.standard_normal((4, 3, 5, 5)) * 2 + 1).astype(np.float32)
            np.testing.assert_allclose(tb(tg.tensor(x)).detach().numpy(),
                                       qb(torch.tensor(x)).detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(tb.running_mean.numpy(), qb.running_mean.numpy(), atol=1e-6)
        np.testing.assert_allclose(tb.running_var.numpy(), qb.running_var.numpy(), atol=1e-5)
    assert int(tb.num_batches_tracked.item()) == int(qb.num_batches_tracked)
    tb.eval()
    qb.eval()
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(tb(tg.tensor(x)).detach().numpy(),
                               qb(torch.tensor(x)).detach().numpy(), atol=1e-5)


@_needs("layer_norm")
def test_layernorm_matches_torch():
    x = np.random.default_rng(0).standard_normal((3, 4, 6)).astype(np.float32)
    tl = nn.LayerNorm(6)
    tl.weight._data[...] = np.linspace(0.5, 2, 6)
    _compare_fwd_bwd(tl, torch.nn.LayerNorm(6), x)


@_needs("linear")
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_torch(batch_first):
    rng = np.random.default_rng(0)
    tm = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    qm = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    tm.in_proj_bias._data[...] = rng.standard_normal(24) * 0.1
    _copy_to_torch(tm, qm)
    shape = (2, 5, 8) if batch_first else (5, 2, 8)
    x = rng.standard_normal(shape).astype(np.float32)
    mask = np.triu(np.ones((5, 5), dtype=bool), 1)
    out, w = tm(tg.tensor(x), tg.tensor(x), tg.tensor(x), attn_mask=tg.tensor(mask))
    ref, rw = qm(torch.tensor(x), torch.tensor(x), torch.tensor(x), attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(w.detach().numpy(), rw.detach().numpy(), atol=1e-6)


def test_functional_star_import_gives_exactly_all():
    ns = {}
    exec("from tapegrad.nn.functional import *", ns)
    names = set(ns) - {"__builtins__"}
    assert names == set(F.__all__)
    assert all(callable(ns[n]) for n in names)
    with pytest.raises(AttributeError, match="no attribute 'not_an_op'"):
        F.not_an_op


def test_functional_ops_are_the_ops():
    x = tg.tensor([-1.0, 0.5, 2.0])
    for name in ("relu", "leaky_relu", "elu", "silu", "mish", "gelu", "tanh", "sigmoid"):
        np.testing.assert_array_equal(getattr(F, name)(x).numpy(),
                                      getattr(tg, name)(x).numpy())
    assert F.linear is tg.linear and F.pad is tg.pad  # one function, its input checked


INPLACE = [("relu", {}), ("leaky_relu", {"negative_slope": 0.2}), ("elu", {"alpha": 0.7}),
           ("silu", {}), ("mish", {})]


@pytest.mark.parametrize("name,kw", INPLACE, ids=[n for n, _ in INPLACE])
def test_functional_inplace_writes_the_input_as_torch(name, kw):
    a_np = np.array([-2.0, -0.5, 0.3, 1.5], dtype=np.float32)
    # no recording: the input is overwritten and returned
    x = tg.tensor(a_np)
    y = getattr(F, name)(x, inplace=True, **kw)
    ref = getattr(torch.nn.functional, name)(torch.tensor(a_np), **kw)
    assert y is x
    np.testing.assert_allclose(x.numpy(), ref.numpy(), rtol=1e-6)
    # recorded: the gradient flows through the overwritten tensor, as PyTorch
    a = tg.tensor(a_np, requires_grad=True)
    h = a * 2.0
    out = getattr(F, name)(h, inplace=True, **kw)
    assert out is h
    (h * h).sum().backward()
    ta = torch.tensor(a_np, requires_grad=True)
    th = ta * 2.0
    getattr(torch.nn.functional, name)(th, inplace=True, **kw)
    (th * th).sum().backward()
    np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-7)
    # a leaf that requires grad refuses, as PyTorch
    with pytest.raises(RuntimeError, match="leaf"):
        getattr(F, name)(tg.tensor(a_np, requires_grad=True), inplace=True, **kw)


def test_activation_modules_honour_inplace():
    a_np = np.array([-2.0, -0.5, 0.3, 1.5], dtype=np.float32)
    for mod, fn in [(nn.ReLU(inplace=True), tg.relu), (nn.SiLU(inplace=True), tg.silu),
                    (nn.Tanh(inplace=True), tg.tanh), (nn.Sigmoid(inplace=True), tg.sigmoid),
                    (nn.LeakyReLU(0.1, inplace=True), lambda t: tg.leaky_relu(t, 0.1)),
                    (nn.ELU(0.5, inplace=True), lambda t: tg.elu(t, 0.5))]:
        x = tg.tensor(a_np)
        assert mod(x) is x, mod
        np.testing.assert_allclose(x.numpy(), fn(tg.tensor(a_np)).numpy(), rtol=1e-6)
    x = tg.tensor(a_np)
    assert nn.ReLU()(x) is not x and x.tolist() == a_np.tolist()
    assert repr(nn.LeakyReLU(0.1, inplace=True)) == repr(torch.nn.LeakyReLU(0.1, inplace=True))
    assert repr(nn.ELU(inplace=True)) == repr(torch.nn.ELU(inplace=True))
    assert repr(nn.ReLU(inplace=True)) == repr(torch.nn.ReLU(inplace=True))


def test_dropout_inplace():
    tg.manual_seed(0)
    x = tg.ones(1000)
    drop = nn.Dropout(0.5, inplace=True)
    assert drop(x) is x
    vals = set(np.unique(x.numpy()).tolist())
    assert vals == {0.0, 2.0}
    y = tg.ones(10)
    assert drop.eval()(y) is y and y.tolist() == [1.0] * 10
    assert F.dropout(y, 0.5, training=False, inplace=True) is y and y.tolist() == [1.0] * 10


@pytest.mark.parametrize("name", ["relu", "silu", "elu", "leaky_relu", "mish", "dropout"])
def test_op_functions_refuse_inplace_instead_of_ignoring_it(name):
    """``tg.relu`` is ``torch.relu``: no ``inplace`` (``F.relu`` has it and honours it);
    an op that took the flag and ignored it would be silently wrong."""
    with pytest.raises(TypeError, match="inplace"):
        getattr(tg, name)(tg.ones(3), inplace=True)


def _legacy_losses():
    import inspect
    return [n for n in dir(torch.nn) if n.endswith("Loss") and hasattr(tg.nn, n)
            and "reduce" in inspect.signature(getattr(torch.nn, n)).parameters]


@pytest.mark.parametrize("name", _legacy_losses())
def test_deprecated_size_average_and_reduce_choose_the_reduction_as_torch(name):
    import warnings
    assert len(_legacy_losses()) >= 15
    for kw in ({"reduce": False}, {"size_average": False}, {"reduce": True},
               {"size_average": True, "reduce": True}, {"size_average": False, "reduce": False}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (PyTorch's deprecation warning)
            assert getattr(tg.nn, name)(**kw).reduction == \
                getattr(torch.nn, name)(**kw).reduction, kw


def _legacy_functional_cases(L):
    rng = np.random.default_rng(5)
    x = L.tensor(rng.standard_normal((4, 3)))
    y = L.tensor(rng.standard_normal((4, 3)))
    p = L.tensor(rng.uniform(0.1, 0.9, (4, 3)))
    t = L.tensor(rng.integers(0, 3, 4))
    F_ = L.nn.functional
    return {"mse_loss": lambda **kw: F_.mse_loss(x, y, **kw),
            "l1_loss": lambda **kw: F_.l1_loss(x, y, **kw),
            "smooth_l1_loss": lambda **kw: F_.smooth_l1_loss(x, y, **kw),
            "nll_loss": lambda **kw: F_.nll_loss(F_.log_softmax(x, 1), t, **kw),
            "cross_entropy": lambda **kw: F_.cross_entropy(x, t, **kw),
            "binary_cross_entropy": lambda **kw: F_.binary_cross_entropy(p, p * 0.5, **kw),
            "binary_cross_entropy_with_logits":
                lambda **kw: F_.binary_cross_entropy_with_logits(x, p, **kw)}


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "nll_loss",
                                  "cross_entropy", "binary_cross_entropy",
                                  "binary_cross_entropy_with_logits"])
def test_functional_losses_take_the_deprecated_flags_as_torch(name):
    import warnings
    ours, theirs = _legacy_functional_cases(tg)[name], _legacy_functional_cases(torch)[name]
    for kw in ({"reduce": False}, {"size_average": False}, {"reduce": True},
               {"size_average": False, "reduce": False}, {}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (PyTorch's deprecation warning)
            a, b = ours(**kw), theirs(**kw)
        assert tuple(a.shape) == tuple(b.shape), kw
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, err_msg=str(kw))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_binary_cross_entropy_at_zero_and_one_as_torch(dtype, reduction):
    """Predictions at exactly 0 or 1 (a saturated sigmoid in float32) and within 1e-12
    of them: the loss and the input's gradient equal PyTorch's, ``(x - t) /
    max(x (1 - x), 1e-12)``, not nan; second derivatives stay finite; the target's
    gradient at the edges is the clamped logs' difference (finite; PyTorch's is inf)."""
    x = np.array([0.0, 1.0, 0.3, 1e-13, 1.0, 0.0, 0.5], dtype)
    t = np.array([0.0, 1.0, 0.5, 1.0, 0.0, 1.0, 0.25], dtype)
    w = np.linspace(0.5, 2.0, x.size).astype(dtype)
    a, b = tg.tensor(x, requires_grad=True), tg.tensor(t, requires_grad=True)
    ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(t)
    out = F.binary_cross_entropy(a, b, reduction=reduction)
    tout = torch.nn.functional.binary_cross_entropy(ta, tb, reduction=reduction)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-6)
    (out * tg.tensor(w[:out.numel()].reshape(out.shape))).sum().backward()
    (tout * torch.tensor(w[:tout.numel()].reshape(tout.shape))).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    assert np.isfinite(b.grad.numpy()).all()
    mid = slice(2, 3)
    np.testing.assert_allclose(b.grad.numpy()[mid], -np.log(x[mid] / (1 - x[mid])) *
                               (w[0] / x.size if reduction == "mean" else w[mid]), rtol=1e-5)
    a2 = tg.tensor(x, requires_grad=True)
    g, = tg.autograd.grad(F.binary_cross_entropy(a2, b.detach(), reduction="sum"), a2,
                          create_graph=True)
    h, = tg.autograd.grad(g.sum(), a2)
    assert np.isfinite(h.numpy()).all()
    np.testing.assert_allclose(h.numpy()[[2, 6]], (1 / x[[2, 6]] ** 2 * t[[2, 6]] +
                                                   (1 - t[[2, 6]]) / (1 - x[[2, 6]]) ** 2),
                               rtol=1e-5)
