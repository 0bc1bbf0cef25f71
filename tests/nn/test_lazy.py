"""Lazy modules (``nn.LazyLinear``): parameters shaped by the first input, as PyTorch's."""
import copy
import pickle

import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("bias", [True, False])
def test_lazy_linear_becomes_a_linear_on_its_first_call_as_torch(bias):
    g, t = tg.nn.LazyLinear(3, bias=bias), torch.nn.LazyLinear(3, bias=bias)
    assert repr(g) == repr(t)
    assert repr(g.weight) == repr(t.weight) == "<UninitializedParameter>"
    assert isinstance(g.weight, tg.nn.UninitializedParameter) and g.has_uninitialized_params()
    g(tg.ones(2, 7, 5))
    t(torch.ones(2, 7, 5))
    assert type(g) is tg.nn.Linear and type(t) is torch.nn.Linear
    assert repr(g) == repr(t)
    assert type(g.weight) is tg.nn.Parameter and tuple(g.weight.shape) == (3, 5)
    assert (g.bias is None) == (not bias)


def test_materialized_parameters_are_drawn_as_a_linear_s():
    tg.manual_seed(0)
    lazy = tg.nn.LazyLinear(4)
    lazy(tg.ones(1, 6))
    tg.manual_seed(0)
    eager = tg.nn.Linear(6, 4)
    for a, b in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_an_optimizer_made_before_the_first_call_trains_the_materialized_parameters():
    model = tg.nn.Sequential(tg.nn.LazyLinear(8), tg.nn.ReLU(), tg.nn.LazyLinear(2))
    opt = tg.optim.Adam(model.parameters(), lr=0.01)
    x = tg.tensor(np.random.default_rng(0).standard_normal((16, 5)), dtype=tg.float32)
    y = tg.zeros(16, 2)
    losses = []
    for _ in range(20):
        loss = tg.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear"]
    assert losses[-1] < 0.5 * losses[0]


def test_load_state_dict_materializes_from_the_checkpoint():
    src = tg.nn.Linear(6, 4)
    lazy = tg.nn.LazyLinear(4)
    lazy.load_state_dict(src.state_dict())
    assert not lazy.has_uninitialized_params()
    np.testing.assert_array_equal(lazy.weight.detach().numpy(), src.weight.detach().numpy())
    x = tg.ones(2, 6)
    np.testing.assert_array_equal(lazy(x).detach().numpy(), src(x).detach().numpy())
    assert type(lazy) is tg.nn.Linear


@pytest.mark.parametrize("make, shape", [(lambda: tg.nn.LazyLinear(3), (2, 5)),
                                         (lambda: tg.nn.LazyBatchNorm2d(), (2, 3, 4, 4))])
def test_copies_of_an_uninitialized_lazy_module_stay_lazy(make, shape):
    for other in (copy.deepcopy(make()), pickle.loads(pickle.dumps(make()))):
        assert other.has_uninitialized_params()
        other(tg.ones(*shape))
        assert not type(other).__name__.startswith("Lazy")
        assert all(tuple(v.shape) != (0,) for v in other.state_dict().values()
                   if v.ndim)


def test_a_compiled_model_of_lazy_layers_replays_after_its_first_call():
    model = tg.nn.Sequential(tg.nn.LazyLinear(4), tg.nn.ReLU(), tg.nn.LazyLinear(2))
    compiled = tg.compile(model)
    x = tg.ones(3, 5)
    for _ in range(3):
        compiled(x).sum().backward()
    np.testing.assert_array_equal(compiled(x).detach().numpy(), model(x).detach().numpy())
    assert compiled.stats()["replays"] >= 1


@pytest.mark.parametrize("name, args, shape", [
    ("LazyConv1d", (4, 3), (2, 5, 9)), ("LazyConv2d", (4, 3), (2, 6, 9, 9)),
    ("LazyConv3d", (4, 2), (2, 3, 5, 5, 5)), ("LazyConvTranspose1d", (4, 3), (2, 5, 9)),
    ("LazyConvTranspose2d", (4, 3), (2, 6, 7, 7)),
    ("LazyConvTranspose3d", (4, 2), (2, 3, 4, 4, 4)),
    ("LazyConv2d", (4, 3), (6, 9, 9)),   # unbatched: the channels are dim 0
    ("LazyConvTranspose2d", (4, 3, 2, 1, 1, 2), (2, 6, 7, 7))])
def test_lazy_convolutions_become_their_convolution_as_torch(name, args, shape):
    g, t = getattr(tg.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(g) == repr(t)
    yg, yt = g(tg.ones(*shape)), t(torch.ones(*shape))
    assert type(g).__name__ == type(t).__name__ == name[4:]
    assert repr(g) == repr(t)
    assert tuple(g.weight.shape) == tuple(t.weight.shape)
    assert tuple(g.bias.shape) == tuple(t.bias.shape)
    assert tuple(yg.shape) == tuple(yt.shape)


def test_a_lazy_convolution_refuses_channels_its_groups_do_not_divide():
    for m in (tg, torch):
        with pytest.raises(ValueError, match="divisible by groups"):
            m.nn.LazyConv2d(4, 3, groups=2)(m.ones(1, 3, 5, 5))


@pytest.mark.parametrize("name, shape, kw", [
    ("LazyBatchNorm1d", (4, 3), {}), ("LazyBatchNorm1d", (4, 3, 5), {}),
    ("LazyBatchNorm2d", (4, 3, 5, 5), {}), ("LazyBatchNorm3d", (2, 3, 4, 4, 4), {}),
    ("LazyBatchNorm2d", (4, 3, 5, 5), {"bias": False}),
    ("LazyInstanceNorm1d", (4, 3, 6), {}), ("LazyInstanceNorm2d", (2, 3, 5, 5), {}),
    ("LazyInstanceNorm3d", (2, 3, 4, 4, 4), {}),
    ("LazyInstanceNorm2d", (2, 3, 5, 5), {"affine": False})])
def test_lazy_norms_become_their_norm_as_torch(name, shape, kw):
    g, t = getattr(tg.nn, name)(**kw), getattr(torch.nn, name)(**kw)
    assert repr(g) == repr(t)
    assert repr(g.running_mean) == repr(t.running_mean) == "<UninitializedBuffer>"
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    yg, yt = g(tg.tensor(x)), t(torch.tensor(x))
    assert type(g).__name__ == type(t).__name__ == name[4:]
    assert repr(g) == repr(t)
    np.testing.assert_allclose(yg.detach().numpy(), yt.detach().numpy(), atol=1e-6)
    assert sorted(g.state_dict()) == sorted(t.state_dict())
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(g.state_dict()[k].numpy(), v.numpy(), atol=1e-6)


def test_a_lazy_batch_norm_without_weight_or_statistics_takes_any_channels_as_torch():
    g = tg.nn.LazyBatchNorm2d(affine=False, track_running_stats=False)
    t = torch.nn.LazyBatchNorm2d(affine=False, track_running_stats=False)
    g(tg.ones(2, 3, 4, 4))
    t(torch.ones(2, 3, 4, 4))
    assert repr(g) == repr(t) and type(g) is tg.nn.BatchNorm2d
    assert tuple(tg.nn.BatchNorm2d(5, affine=False, track_running_stats=False)(
        tg.ones(2, 3, 4, 4)).shape) == (2, 3, 4, 4)
