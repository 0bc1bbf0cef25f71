"""API.md "Training": the nn.Module API (parameters, state dicts, train/eval,
zero_grad, hooks), the listed layers' parameter names, shapes and default
initialisations, clip_grad_*, the optimizers and schedulers step for step against
PyTorch, tg.save/tg.load, and the data utilities."""
import inspect
import os
from collections import OrderedDict

import numpy as np
import pytest
from contract_compare import same

import tapegrad as tg

torch = pytest.importorskip("torch")

LAYERS = """Module Parameter Linear Conv2d Embedding LayerNorm BatchNorm1d BatchNorm2d Dropout ReLU
GELU Tanh Sigmoid Flatten MaxPool2d Sequential ModuleList MultiheadAttention Conv1d
ConvTranspose2d GroupNorm RNN LSTM GRU TransformerEncoderLayer TransformerEncoder
TransformerDecoderLayer Upsample""".split()


def _cases(**cases):
    return pytest.mark.parametrize("case", list(cases.values()), ids=list(cases))


def test_listed_layers_exist():
    for name in LAYERS:
        assert isinstance(getattr(tg.nn, name), type), name


def NET(M):
    return M.nn.Sequential(M.nn.Linear(3, 4), M.nn.ReLU(), M.nn.BatchNorm1d(4),
                           M.nn.Dropout(0.5), M.nn.Linear(4, 2))


def _flags(m):
    out = [m.training, m.eval() is m, m.training, m[2].training, m.train() is m,
           m[2].training, m.train(False) is m, m[3].training]
    return out


def _load_state_dict(M):
    a, b = NET(M), NET(M)
    r = b.load_state_dict(a.state_dict())
    same_values = all(bool((p == q).all()) for p, q in zip(a.parameters(), b.parameters()))
    return list(r.missing_keys), list(r.unexpected_keys), same_values


def _load_state_dict_unexpected(M):
    a = NET(M)
    sd = a.state_dict()
    sd["extra"] = M.zeros(1)
    a.load_state_dict(sd)


def _load_state_dict_missing(M):
    a = NET(M)
    sd = a.state_dict()
    del sd["0.weight"]
    a.load_state_dict(sd)


def _load_state_dict_non_strict(M):
    a = NET(M)
    sd = a.state_dict()
    del sd["0.weight"]
    sd["x"] = M.zeros(1)
    r = a.load_state_dict(sd, strict=False)
    return list(r.missing_keys), list(r.unexpected_keys)


def _load_state_dict_shape(M):
    a = NET(M)
    sd = a.state_dict()
    sd["0.weight"] = M.zeros(2, 2)
    a.load_state_dict(sd)


def _zero_grad(M, **kw):
    m = NET(M)
    m(M.ones(5, 3)).sum().backward()
    m.zero_grad(**kw)
    return next(iter(m.parameters())).grad


def _forward_hook(M):
    m = M.nn.Linear(2, 2)
    seen = []
    h = m.register_forward_hook(
        lambda mod, inp, out: seen.append((type(inp).__name__, len(inp))) or out * 2)
    y = m(M.ones(1, 2))
    h.remove()
    return seen, bool(((y - 2 * m(M.ones(1, 2))).abs() < 1e-6).all())


def _forward_pre_hook(M):
    m = M.nn.Linear(2, 2)
    m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 0,))
    return m(M.ones(1, 2)) - m.bias


def _backward_hook(M):
    m = M.nn.Linear(2, 2)
    seen = []
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append(
        (type(gin).__name__, len(gin), type(gout).__name__, len(gout), tuple(gout[0].shape),
         tuple(gin[0].shape))))
    m(M.ones(1, 2, requires_grad=True)).sum().backward()
    return seen


def _backward_hook_replaces(M):
    m = M.nn.Linear(2, 2)
    m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 0,))
    x = M.ones(1, 2, requires_grad=True)
    m(x).sum().backward()
    return x.grad


def _buffers(M):
    m = M.nn.Module()
    m.register_buffer("b", M.ones(2))
    m.register_buffer("nb", M.ones(1), persistent=False)
    m.p = M.nn.Parameter(M.zeros(3))
    return (list(m.state_dict()), [k for k, _ in m.named_buffers()],
            [k for k, _ in m.named_parameters()])


def _parameter(M):
    p = M.nn.Parameter(M.ones(2))
    q = M.nn.Parameter(M.ones(2), requires_grad=False)
    return (p.requires_grad, q.requires_grad, isinstance(p, M.Tensor), p.is_leaf,
            repr(p).startswith("Parameter containing"))


def _module_casts(M):
    m = M.nn.Linear(2, 2).double()
    return m.weight.dtype, type(m.weight).__name__, m.to(M.float32).weight.dtype


def _apply(M):
    names = []
    NET(M).apply(lambda mod: names.append(type(mod).__name__))
    return names


def _requires_grad_(M):
    m = M.nn.Linear(2, 2)
    m.requires_grad_(False)
    return [p.requires_grad for p in m.parameters()]


def _module_list(M):
    ml = M.nn.ModuleList([M.nn.Linear(1, 1)])
    ml.append(M.nn.Linear(1, 1))
    return len(ml), type(ml[0]).__name__, len(list(ml.parameters()))


@_cases(
    named_parameters=lambda M: [(k, tuple(v.shape), v.requires_grad, type(v).__name__)
                                for k, v in NET(M).named_parameters()],
    state_dict=lambda M: [(k, tuple(v.shape), v.requires_grad)
                          for k, v in NET(M).state_dict().items()],
    state_dict_type=lambda M: type(NET(M).state_dict()).__name__,
    buffers=lambda M: [(k, v.dtype) for k, v in NET(M).named_buffers()],
    children=lambda M: [type(c).__name__ for c in NET(M).children()],
    named_modules=lambda M: [(k, type(c).__name__) for k, c in NET(M).named_modules()],
    train_eval=lambda M: _flags(NET(M)),
    load_state_dict=_load_state_dict,
    load_state_dict_unexpected=_load_state_dict_unexpected,
    load_state_dict_missing=_load_state_dict_missing,
    load_state_dict_non_strict=_load_state_dict_non_strict,
    load_state_dict_shape=_load_state_dict_shape,
    zero_grad_to_none=_zero_grad,
    zero_grad_to_zeros=lambda M: _zero_grad(M, set_to_none=False),
    forward_hook=_forward_hook,
    forward_pre_hook=_forward_pre_hook,
    backward_hook=_backward_hook,
    backward_hook_replaces=_backward_hook_replaces,
    register_buffer=_buffers,
    parameter=_parameter,
    parameter_int=lambda M: M.nn.Parameter(M.ones(2, dtype=M.int64)),
    module_casts=_module_casts,
    apply=_apply,
    requires_grad_=_requires_grad_,
    module_list=_module_list,
    sequential_dict=lambda M: [k for k, _ in M.nn.Sequential(
        OrderedDict(a=M.nn.Linear(1, 2), b=M.nn.ReLU())).named_parameters()],
    sequential_slice=lambda M: (type(NET(M)[1:3]).__name__, len(NET(M)[1:3]), len(NET(M))),
    module_dict=lambda M: sorted(k for k, _ in M.nn.ModuleDict(
        {"a": M.nn.Linear(1, 1)}).named_parameters()),
    repr_linear=lambda M: repr(M.nn.Linear(3, 4)),
    repr_sequential=lambda M: repr(M.nn.Sequential(M.nn.Linear(3, 4), M.nn.ReLU())),
    get_submodule=lambda M: type(NET(M).get_submodule("0")).__name__,
    get_parameter=lambda M: tuple(NET(M).get_parameter("0.weight").shape),
    get_buffer=lambda M: tuple(NET(M).get_buffer("2.running_var").shape),
    linear_no_bias=lambda M: M.nn.Linear(3, 4, bias=False).bias,
    linear_dtype=lambda M: M.nn.Linear(3, 4, dtype=M.float64).weight.dtype,
)
def test_module_api_as_torch(case):
    same(case)


def _init_bounds(M):
    M.manual_seed(0)
    lin, conv = M.nn.Linear(100, 50), M.nn.Conv2d(4, 8, 3)
    out = []
    for w, b, fan_in in [(lin.weight, lin.bias, 100), (conv.weight, conv.bias, 36)]:
        bound = fan_in ** -0.5
        out += [bool(w.abs().max() <= bound), bool(w.abs().max() > 0.9 * bound),
                bool(b.abs().max() <= bound)]
    e = M.nn.Embedding(1000, 20).weight.detach()
    out += [abs(float(e.std()) - 1) < 0.05, abs(float(e.mean())) < 0.05]
    return out


def _batch_norm(M):
    b = M.nn.BatchNorm1d(3)
    x = M.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, -1.0], [2.0, 2.0, 2.0]])
    y = b(x)
    b.eval()
    return y, b.running_mean, b.running_var, b.num_batches_tracked, b(x)


def _dropout(M):
    M.manual_seed(0)
    d = M.nn.Dropout(0.5)
    y = d(M.ones(1000))
    kept = abs(float((y != 0).float().mean()) - 0.5) < 0.06
    d.eval()
    return sorted(set(y.tolist())), kept, d(M.ones(3))


def _layer_shapes(M):
    M.manual_seed(0)
    out = []
    y, (h, c) = M.nn.LSTM(3, 5, num_layers=2, batch_first=True, bidirectional=True)(
        M.ones(2, 7, 3))
    out.append((y.shape, h.shape, c.shape))
    y, h = M.nn.GRU(3, 5)(M.ones(7, 2, 3))
    out.append((y.shape, h.shape))
    y, h = M.nn.RNN(3, 5, num_layers=2)(M.ones(7, 3))
    out.append((y.shape, h.shape))
    o, w = M.nn.MultiheadAttention(8, 2, batch_first=True)(M.ones(2, 4, 8), M.ones(2, 6, 8),
                                                            M.ones(2, 6, 8))
    out.append((o.shape, w.shape))
    o, w = M.nn.MultiheadAttention(8, 2)(M.ones(4, 2, 8), M.ones(6, 2, 8), M.ones(6, 2, 8),
                                         need_weights=False)
    out.append((o.shape, w))
    enc = M.nn.TransformerEncoder(M.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2,
                                  enable_nested_tensor=False)
    out.append(enc(M.ones(2, 5, 8)).shape)
    out.append(M.nn.TransformerDecoderLayer(8, 2, 16)(M.ones(5, 2, 8), M.ones(3, 2, 8)).shape)
    out.append(M.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)(
        M.ones(1, 3, 5, 5)).shape)
    out.append(M.nn.Conv1d(3, 4, 3, padding=1)(M.ones(2, 3, 7)).shape)
    out.append(M.nn.Conv2d(3, 4, 3, padding="same")(M.ones(2, 3, 7, 7)).shape)
    out.append(M.nn.GroupNorm(2, 4)(M.ones(2, 4, 3)).shape)
    out.append(M.nn.Embedding(10, 3, padding_idx=0)(M.tensor([[0, 1]])).shape)
    out.append(M.nn.Flatten()(M.ones(2, 3, 4)).shape)
    return [tuple(tuple(s) if s is not None else None for s in o) if isinstance(o, tuple)
            else tuple(o) for o in out]


def _param_names(M):
    out = []
    for m in [M.nn.LSTM(3, 5, bidirectional=True), M.nn.GRU(3, 5, num_layers=2),
              M.nn.MultiheadAttention(8, 2), M.nn.TransformerEncoderLayer(8, 2, 16),
              M.nn.TransformerDecoderLayer(8, 2, 16), M.nn.GroupNorm(2, 4),
              M.nn.ConvTranspose2d(3, 4, 3)]:
        out.append([(k, tuple(v.shape)) for k, v in m.named_parameters()])
    return out


def _max_pool_upsample(M):
    x = M.arange(16.0).reshape(1, 1, 4, 4)
    return (M.nn.MaxPool2d(2)(x), M.nn.MaxPool2d(3, stride=1, padding=1)(x),
            M.nn.Upsample(scale_factor=2)(x[..., :2, :2]),
            M.nn.Upsample(size=3, mode="bilinear", align_corners=False)(x[..., :2, :2]),
            M.nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)(x),
            M.nn.GELU(approximate="tanh")(x[0, 0, 0] - 2), M.nn.LayerNorm(4)(x[0, 0]))


@_cases(init_bounds=_init_bounds, batch_norm=_batch_norm, dropout=_dropout,
        layer_shapes=_layer_shapes, parameter_names=_param_names,
        pooling_upsampling=_max_pool_upsample,
        layer_norm_init=lambda M: (M.nn.LayerNorm(3).weight, M.nn.LayerNorm(3).bias),
        embedding_padding_row=lambda M: M.nn.Embedding(10, 3, padding_idx=0).weight[0])
def test_layers_as_torch(case):
    same(case, rtol=1e-5)


def _clip(M, fn, *args, **kw):
    p = M.nn.Parameter(M.ones(3))
    p.grad = M.tensor([3.0, -4.0, 0.0])
    return fn(M)([p], *args, **kw), p.grad


@_cases(
    norm=lambda M: _clip(M, lambda M: M.nn.utils.clip_grad_norm_, 1.0),
    norm_inf=lambda M: _clip(M, lambda M: M.nn.utils.clip_grad_norm_, 1.0, norm_type=float("inf")),
    norm_big=lambda M: _clip(M, lambda M: M.nn.utils.clip_grad_norm_, max_norm=10.0),
    value=lambda M: _clip(M, lambda M: M.nn.utils.clip_grad_value_, 1.0),
)
def test_clip_grad_as_torch(case):
    same(case)


# ---------------------------------------------------------------- optim
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_optimizer_defaults_as_torch(name):
    ours = inspect.signature(getattr(tg.optim, name)).parameters
    theirs = inspect.signature(getattr(torch.optim, name)).parameters
    for k, p in ours.items():
        if k != "params":
            assert p.default == theirs[k].default, (name, k)


def _train(M, name, kw, steps=3, sched=None):
    w = M.nn.Parameter(M.tensor([[0.5, -1.0], [2.0, 0.3]], dtype=M.float64))
    b = M.nn.Parameter(M.tensor([0.1, -0.2], dtype=M.float64))
    opt = getattr(M.optim, name)([w, b], **kw)
    sch = getattr(M.optim.lr_scheduler, sched[0])(opt, **sched[1]) if sched else None
    x = M.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=M.float64)
    lrs = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((x @ w + b) ** 2).sum()
        loss.backward()
        opt.step()
        if sch is not None:
            sch.step(loss.item()) if sched[0] == "ReduceLROnPlateau" else sch.step()
            lrs.append(opt.param_groups[0]["lr"])
    return w, b, lrs


OPTIMIZERS = [("SGD", {}), ("SGD", dict(lr=0.01, momentum=0.9)),
              ("SGD", dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1)),
              ("SGD", dict(lr=0.01, momentum=0.9, dampening=0.1, maximize=True)),
              ("Adam", {}), ("Adam", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
              ("AdamW", dict(lr=0.01)), ("AdamW", dict(lr=0.01, weight_decay=0.5)),
              ("RMSprop", {}), ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
              ("Adagrad", dict(lr=0.1)), ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.1))]


@pytest.mark.parametrize("name,kw", OPTIMIZERS, ids=[f"{n}-{sorted(k)}" for n, k in OPTIMIZERS])
def test_optimizer_steps_as_torch(name, kw):
    same(lambda M: _train(M, name, kw), rtol=1e-10, atol=1e-12)


SCHEDULERS = [("StepLR", dict(step_size=2)), ("StepLR", dict(step_size=2, gamma=0.5)),
              ("MultiStepLR", dict(milestones=[1, 3, 3])), ("LinearLR", dict(total_iters=3)),
              ("CosineAnnealingLR", dict(T_max=4)),
              ("CosineAnnealingLR", dict(T_max=4, eta_min=0.001)),
              ("ExponentialLR", dict(gamma=0.9)), ("OneCycleLR", dict(max_lr=0.1, total_steps=10)),
              ("OneCycleLR", dict(max_lr=0.1, epochs=2, steps_per_epoch=5,
                                  anneal_strategy="linear")),
              ("ReduceLROnPlateau", dict(patience=0, factor=0.5))]


@pytest.mark.parametrize("name,kw", SCHEDULERS, ids=[f"{n}-{sorted(k)}" for n, k in SCHEDULERS])
def test_scheduler_as_torch(name, kw):
    same(lambda M: _train(M, "SGD", dict(lr=0.05, momentum=0.9), 6, (name, kw)),
         rtol=1e-10, atol=1e-12)


def _adam_state(M):
    w = M.nn.Parameter(M.ones(2))
    opt = M.optim.Adam([w], lr=0.1)
    w.sum().backward()
    opt.step()
    s = opt.state_dict()
    keys, step = (sorted(s), sorted(s["state"][0])), float(s["state"][0]["step"])
    w2 = M.nn.Parameter(M.ones(2))
    opt2 = M.optim.Adam([w2], lr=0.5)
    opt2.load_state_dict(s)
    (w2 * 2).sum().backward()
    opt2.step()
    return keys, step, w2, opt2.param_groups[0]["lr"], float(opt2.state_dict()["state"][0]["step"])


def _param_groups(M):
    a, b = M.nn.Parameter(M.ones(2)), M.nn.Parameter(M.ones(2))
    opt = M.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)
    (a + b).sum().backward()
    opt.step()
    return a, b, [g["lr"] for g in opt.param_groups], [g["momentum"] for g in opt.param_groups]


def _optim_zero_grad(M):
    a = M.nn.Parameter(M.ones(2))
    opt = M.optim.SGD([a], lr=0.1)
    a.sum().backward()
    opt.zero_grad()
    first = a.grad
    a.sum().backward()
    opt.zero_grad(set_to_none=False)
    return first, a.grad


def _closure(M):
    w = M.nn.Parameter(M.ones(2))
    opt = M.optim.SGD([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w ** 2).sum()
        loss.backward()
        return loss
    return opt.step(closure), w


def _scheduler_state(M):
    opt = M.optim.SGD([M.nn.Parameter(M.ones(2))], lr=0.1)
    s = M.optim.lr_scheduler.StepLR(opt, 2)
    opt.step()
    s.step()
    return s.get_last_lr(), s.state_dict()["last_epoch"], s.state_dict()["base_lrs"]


@_cases(
    adam_state_dict=_adam_state,
    param_groups=_param_groups,
    zero_grad=_optim_zero_grad,
    closure=_closure,
    scheduler_state=_scheduler_state,
    negative_lr=lambda M: M.optim.SGD([M.nn.Parameter(M.ones(2))], lr=-1),
    nesterov_without_momentum=lambda M: M.optim.SGD([M.nn.Parameter(M.ones(2))], lr=0.1,
                                                    nesterov=True),
    empty_params=lambda M: M.optim.SGD([], lr=0.1),
    generator_params=lambda M: len(M.optim.SGD(
        (p for p in M.nn.Linear(2, 2).parameters()), lr=0.1).param_groups[0]["params"]),
    linear_lr_bad_factor=lambda M: M.optim.lr_scheduler.LinearLR(
        M.optim.SGD([M.nn.Parameter(M.ones(1))]), start_factor=0),
)
def test_optimizer_api_as_torch(case):
    same(case)


# ---------------------------------------------------------------- save / load
def test_save_load_round_trips(tmp_path):
    m = tg.nn.Linear(2, 3)
    opt = tg.optim.Adam(m.parameters())
    m(tg.ones(1, 2)).sum().backward()
    opt.step()
    path = os.fspath(tmp_path / "ckpt.pt")
    tg.save({"model": m.state_dict(), "opt": opt.state_dict(), "epoch": 3,
             "notes": ["x", 2.5, None]}, path)
    r = tg.load(path)
    assert r["epoch"] == 3 and r["notes"] == ["x", 2.5, None]
    m2 = tg.nn.Linear(2, 3)
    m2.load_state_dict(r["model"])
    assert all(bool((p == q).all()) for p, q in zip(m.parameters(), m2.parameters()))
    tg.optim.Adam(m2.parameters()).load_state_dict(r["opt"])
    tg.save(tg.arange(6.0, dtype=tg.bfloat16), path)
    t = tg.load(path, map_location="cpu")
    assert t.dtype == tg.bfloat16 and t.tolist() == list(range(6))


def test_save_load_file_objects():
    import io
    buf = io.BytesIO()
    tg.save(tg.ones(2, dtype=tg.int32), buf)
    buf.seek(0)
    t = tg.load(buf)
    assert t.dtype == tg.int32 and t.tolist() == [1, 1]


# ---------------------------------------------------------------- data
def test_data_loader_and_samplers():
    X, Y = tg.arange(10.0).reshape(5, 2), tg.arange(5)
    ds = tg.data.TensorDataset(X, Y)
    dl = tg.data.DataLoader(ds, batch_size=2)
    batches = list(dl)
    assert len(ds) == 5 and len(dl) == 3
    assert batches[0][0].shape == (2, 2) and batches[-1][1].tolist() == [4]
    tg.manual_seed(0)
    shuffled = list(tg.data.DataLoader(list(range(7)), batch_size=3, shuffle=True,
                                       drop_last=True))
    assert len(shuffled) == 2 and shuffled[0].dtype == tg.int64
    assert tg.utils.data.DataLoader is tg.data.DataLoader


def test_distributed_sampler_as_torch():
    from torch.utils.data.distributed import DistributedSampler
    params = inspect.signature(tg.data.DistributedSampler).parameters
    assert [(k, params[k].default) for k in ["num_replicas", "rank", "shuffle", "seed"]] == \
        [("num_replicas", None), ("rank", None), ("shuffle", True), ("seed", 0)]
    for shuffle in (False, True):
        for epoch in (0, 3):
            t = DistributedSampler(range(11), num_replicas=3, rank=2, shuffle=shuffle, seed=0)
            ours = tg.data.DistributedSampler(11, num_replicas=3, rank=2, shuffle=shuffle,
                                              seed=0)
            t.set_epoch(epoch)
            ours.set_epoch(epoch)
            assert (list(ours), len(ours)) == (list(t), len(t))
    np.testing.assert_array_equal(list(tg.data.DistributedSampler(10, 2, 1, shuffle=False)),
                                  [1, 3, 5, 7, 9])


@pytest.mark.parametrize("name", ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCELoss",
                                  "BCEWithLogitsLoss", "AvgPool2d"])
def test_module_constructor_signatures_as_torch(name):
    ours = [(k, p.default) for k, p in inspect.signature(getattr(tg.nn, name)).parameters.items()]
    theirs = inspect.signature(getattr(torch.nn, name)).parameters.items()
    assert ours == [(k, p.default) for k, p in theirs]


def _cross_entropy(M, *args, **kw):
    x = M.tensor([[0.3, -1.0, 2.0], [1.5, 0.2, -0.3]], dtype=M.float64)
    return M.nn.CrossEntropyLoss(*args, **kw)(x, M.tensor([2, 0]))


@_cases(
    positional_ignore_index=lambda M: _cross_entropy(M, None, None, 2),
    size_average_false=lambda M: _cross_entropy(M, size_average=False),
    reduce_false=lambda M: _cross_entropy(M, None, None, -100, False),
    mse_size_average=lambda M: M.nn.MSELoss(False)(M.ones(3), M.zeros(3)),
)
def test_losses_take_the_deprecated_flags_as_torch(case):
    same(case)


def _setitem_shape(M):
    x = M.ones(3)
    x[:] = M.ones(2)


@_cases(
    linear_shapes=lambda M: M.nn.Linear(3, 2)(M.ones(4, 5)),
    linear_dtypes=lambda M: M.nn.Linear(3, 2)(M.ones(4, 3, dtype=M.float64)),
    conv_channels=lambda M: M.nn.Conv2d(3, 2, 3)(M.ones(1, 4, 5, 5)),
    conv_too_small=lambda M: M.nn.Conv2d(3, 2, 3)(M.ones(1, 3, 2, 2)),
    embedding_float=lambda M: M.nn.Embedding(5, 2)(M.ones(3)),
    embedding_out_of_range=lambda M: M.nn.Embedding(5, 2)(M.tensor([5])),
    layer_norm_shape=lambda M: M.nn.LayerNorm(4)(M.ones(2, 3)),
    batch_norm_channels=lambda M: M.nn.BatchNorm1d(4)(M.ones(2, 3)),
    batch_norm_one_sample=lambda M: M.nn.BatchNorm1d(3)(M.ones(1, 3)),
    attention_heads=lambda M: M.nn.MultiheadAttention(8, 3),
    lstm_features=lambda M: M.nn.LSTM(3, 4)(M.ones(2, 5, 4)),
    cross_entropy_batch=lambda M: M.nn.functional.cross_entropy(M.ones(4, 3), M.tensor([0, 1])),
    mse_shapes=lambda M: M.nn.functional.mse_loss(M.ones(4, 3), M.ones(5, 3)),
    dropout_p=lambda M: M.nn.Dropout(1.5),
    setitem_shape=_setitem_shape,
    sequential_index=lambda M: M.nn.Sequential(M.nn.ReLU())[3],
    register_buffer_dotted=lambda M: M.nn.Module().register_buffer("a.b", M.ones(1)),
    register_parameter_tensor=lambda M: M.nn.Module().register_parameter("a", M.ones(1)),
    adam_bad_betas=lambda M: M.optim.Adam([M.nn.Parameter(M.ones(1))], betas=(1.5, 0.9)),
    sgd_not_iterable=lambda M: M.optim.SGD(M.ones(2), lr=0.1),
)
def test_layer_and_optimizer_errors_as_torch(case):
    same(case)
