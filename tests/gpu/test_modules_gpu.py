"""Modules on the device: the same module (a copy, moved with ``.to``) forward and
backward on the device and on the CPU give the same outputs, input gradients and
parameter gradients; modules that keep state (BatchNorm's running statistics)
update it on the device."""
import copy

import numpy as np
import pytest
from gpu_env import DEVICE, close, on_device, require

import tapegrad as tg
import tapegrad.nn as nn

require()


MODULES = [
    ("linear", lambda: nn.Linear(6, 4), (5, 6)),
    ("conv2d", lambda: nn.Conv2d(3, 4, 3, padding=1, stride=2), (2, 3, 9, 9)),
    ("conv_transpose2d", lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), (2, 3, 5, 5)),
    ("maxpool", lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.MaxPool2d(2)), (2, 2, 8, 8)),
    ("batchnorm_train", lambda: nn.BatchNorm2d(3), (4, 3, 5, 5)),
    ("layernorm", lambda: nn.LayerNorm(7), (3, 5, 7)),
    ("groupnorm", lambda: nn.GroupNorm(2, 4), (3, 4, 6)),
    ("lstm", lambda: nn.LSTM(5, 6, batch_first=True), (2, 7, 5)),
    ("gru", lambda: nn.GRU(5, 4), (7, 2, 5)),
    ("mha_causal", lambda: nn.MultiheadAttention(8, 2, batch_first=True), (2, 5, 8)),
    ("transformer_layer", lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                             batch_first=True), (2, 5, 8)),
]


def _call(name, m, x):
    if name == "mha_causal":  # the causal mask made inside, on the input's device
        return m(x, x, x, is_causal=True, need_weights=False)[0]
    out = m(x)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name,make,shape", [pytest.param(*c, id=c[0]) for c in MODULES])
def test_module_on_device_equals_cpu(name, make, shape):
    tg.manual_seed(0)
    mc = make().double()
    md = copy.deepcopy(mc).to(DEVICE)
    x0 = np.random.default_rng(0).standard_normal(shape)
    res = {}
    for dev, m in (("cpu", mc), (DEVICE, md)):
        x = tg.tensor(x0, device=dev, requires_grad=True)
        out = _call(name, m, x)
        (out * out).sum().backward()
        res[dev] = (out, x.grad, [p.grad for p in m.parameters()],
                    [b for b in m.buffers()] if hasattr(m, "buffers") else [])
    for k, (a, b) in enumerate(zip(res[DEVICE][:2], res["cpu"][:2])):
        assert on_device(a)
        close(a, b, f"{name}: {'output' if k == 0 else 'input gradient'}", rtol=1e-9, atol=1e-11)
    for k, (a, b) in enumerate(zip(res[DEVICE][2], res["cpu"][2])):
        assert on_device(a), f"{name}: parameter {k}'s gradient is not on {DEVICE}"
        close(a, b, f"{name}: parameter {k} gradient", rtol=1e-9, atol=1e-11)
    for k, (a, b) in enumerate(zip(res[DEVICE][3], res["cpu"][3])):
        assert on_device(a), f"{name}: buffer {k} is not on {DEVICE}"
        close(a, b, f"{name}: buffer {k}", rtol=1e-9, atol=1e-11)


def test_causal_self_attention_on_device_equals_an_explicit_mask():
    tg.manual_seed(0)
    mc = nn.MultiheadAttention(8, 2, batch_first=True).double()
    md = copy.deepcopy(mc).to(DEVICE)
    x0 = np.random.default_rng(1).standard_normal((2, 5, 8))
    mask = np.triu(np.ones((5, 5), bool), 1)
    x = tg.tensor(x0)
    outs = [mc(x, x, x, attn_mask=tg.tensor(mask), need_weights=False)[0]]
    x = tg.tensor(x0, device=DEVICE)
    outs.append(md(x, x, x, is_causal=True, need_weights=False)[0])
    assert on_device(outs[1])
    close(outs[1], outs[0], "causal attention", rtol=1e-9, atol=1e-11)
