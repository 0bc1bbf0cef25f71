"""``F.multi_head_attention_forward`` against PyTorch's: the paths the registry's samples
do not take (``need_weights=False`` through scaled_dot_product_attention, ``is_causal``
with it, dropout), ``nn.MultiheadAttention``'s parameters run through both functions,
gradients against PyTorch's and finite differences, and PyTorch's errors."""
import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.testing import gradcheck

E, H, L, S, N = 6, 3, 4, 5, 2


def _params(seed=0, dtype=np.float64):
    r = np.random.default_rng(seed)
    return {n: r.uniform(-0.6, 0.6, s).astype(dtype) for n, s in (
        ("q", (L, N, E)), ("k", (S, N, E)), ("v", (S, N, E)), ("ipw", (3 * E, E)),
        ("ipb", (3 * E,)), ("opw", (E, E)), ("opb", (E,)))}


def _call(lib, p, **kw):
    T = (lambda a: torch.from_numpy(a.copy())) if lib is torch else tg.tensor
    Fn = torch.nn.functional if lib is torch else F
    a = {k: T(v) for k, v in p.items()}
    return Fn.multi_head_attention_forward(a["q"], a["k"], a["v"], E, H, a["ipw"], a["ipb"],
                                           None, None, False, 0.0, a["opw"], a["opb"], **kw)


def _np(t):
    return None if t is None else (t.detach().numpy() if isinstance(t, torch.Tensor)
                                   else np.asarray(t.detach()))


@pytest.mark.parametrize("kw", [
    {"need_weights": False},
    {"need_weights": False, "attn_mask": "causal", "is_causal": True},
    {"need_weights": False, "key_padding_mask": "kpm"},
    {"need_weights": False, "attn_mask": "causal", "key_padding_mask": "kpm"},
    {"need_weights": True, "attn_mask": "causal", "is_causal": True},
    {"need_weights": True, "average_attn_weights": False, "key_padding_mask": "kpm"},
])
def test_paths_match_torch(kw):
    p = _params()
    kpm = np.zeros((N, S), bool)
    kpm[0, 2] = kpm[1, 3] = True  # no row fully masked with the causal mask
    causal = np.triu(np.ones((L, S), bool), 1)
    res = []
    for lib in (tg, torch):
        T = (lambda a: torch.from_numpy(a.copy())) if lib is torch else tg.tensor
        k = dict(kw)
        if k.get("attn_mask") == "causal":
            k["attn_mask"] = T(causal)
        if k.get("key_padding_mask") == "kpm":
            k["key_padding_mask"] = T(kpm)
        res.append(_call(lib, p, **k))
    (o, w), (to, tw) = res
    np.testing.assert_allclose(_np(o), _np(to), rtol=1e-10, atol=1e-12)
    assert (w is None) == (tw is None)
    if w is not None:
        np.testing.assert_allclose(_np(w), _np(tw), rtol=1e-10, atol=1e-12)


def test_module_parameters_give_the_module_output():
    """tg.nn.MultiheadAttention's parameters through the function give the module's
    output and weights."""
    tg.manual_seed(0)
    m = tg.nn.MultiheadAttention(E, H, dtype=tg.float64)
    p = _params(1)
    x, kv = tg.tensor(p["q"]), tg.tensor(p["k"])
    o, w = m(x, kv, kv)
    o2, w2 = F.multi_head_attention_forward(
        x, kv, kv, E, H, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
        m.out_proj.weight, m.out_proj.bias, training=False)
    np.testing.assert_allclose(_np(o2), _np(o), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(w2), _np(w), rtol=1e-10, atol=1e-12)


def test_gradients_match_torch_and_finite_differences():
    p = _params(2)
    tp = {k: torch.from_numpy(v.copy()).requires_grad_(True) for k, v in p.items()}
    gp = {k: tg.tensor(v, requires_grad=True) for k, v in p.items()}
    for need in (False, True):
        to, _ = torch.nn.functional.multi_head_attention_forward(
            tp["q"], tp["k"], tp["v"], E, H, tp["ipw"], tp["ipb"], None, None, False, 0.0,
            tp["opw"], tp["opb"], need_weights=need)
        go, _ = F.multi_head_attention_forward(
            gp["q"], gp["k"], gp["v"], E, H, gp["ipw"], gp["ipb"], None, None, False, 0.0,
            gp["opw"], gp["opb"], need_weights=need)
        c = np.random.default_rng(3).standard_normal(to.shape)
        tgr = torch.autograd.grad(to, list(tp.values()), torch.from_numpy(c))
        ggr = tg.grad(go, list(gp.values()), tg.tensor(c))
        for n, a, b in zip(p, ggr, tgr):
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-9, atol=1e-11, err_msg=n)

    rest = {k: tg.tensor(v) for k, v in _params(4).items()}

    def f(q, k, v):
        return F.multi_head_attention_forward(
            q[:2, :1], k[:3, :1], v[:3, :1], E, H, rest["ipw"], rest["ipb"], None, None,
            True, 0.0, rest["opw"], rest["opb"], need_weights=False)[0]
    small = [tg.tensor(_params(4)[n], requires_grad=True) for n in ("q", "k", "v")]
    assert gradcheck(f, small)


def test_dropout_draws_from_the_seeded_generator():
    p = _params(5)
    outs = []
    for _ in range(2):
        tg.manual_seed(7)
        outs.append(_np(F.multi_head_attention_forward(
            tg.tensor(p["q"]), tg.tensor(p["k"]), tg.tensor(p["v"]), E, H,
            tg.tensor(p["ipw"]), None, None, None, False, 0.5, tg.tensor(p["opw"]), None)[0]))
    np.testing.assert_array_equal(outs[0], outs[1])
    off = _np(F.multi_head_attention_forward(
        tg.tensor(p["q"]), tg.tensor(p["k"]), tg.tensor(p["v"]), E, H, tg.tensor(p["ipw"]),
        None, None, None, False, 0.5, tg.tensor(p["opw"]), None, training=False)[0])
    assert not np.allclose(outs[0], off)


@pytest.mark.parametrize("change,exc,words", [
    ({"q": np.zeros((L, N, E + 1))}, AssertionError, "embedding dimension of 6"),
    ({"v": np.zeros((S + 1, N, E))}, AssertionError, "does not match value shape"),
    ({"attn_mask": np.zeros((L, S + 1))}, RuntimeError, "2D attn_mask"),
    ({"attn_mask": np.zeros((N, L, S))}, RuntimeError, "3D attn_mask"),
    ({"key_padding_mask": np.zeros((N, S + 1), bool)}, AssertionError, "key_padded_mask"),
    ({"is_causal": True}, RuntimeError, "Need attn_mask"),
    ({"attn_mask": np.zeros((L, S), np.int64)}, AssertionError, "only bool and floating"),
])
def test_errors_are_pytorchs(change, exc, words):
    for lib in (tg, torch):
        p = _params()
        kw = {}
        for k, v in change.items():
            if k in p:
                p[k] = v
            else:
                kw[k] = v if not isinstance(v, np.ndarray) else (
                    torch.from_numpy(v) if lib is torch else tg.tensor(v))
        with pytest.raises(exc, match=words):
            _call(lib, p, **kw)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kw", [dict(kdim=4, vdim=3), dict(add_bias_kv=True),
                                dict(add_zero_attn=True),
                                dict(kdim=4, vdim=3, add_bias_kv=True, add_zero_attn=True,
                                     bias=False)])
def test_module_options_match_torch(kw, batch_first):
    """kdim/vdim (separate q/k/v projection weights), bias_k/bias_v and add_zero_attn:
    the parameters' names and shapes, outputs, weights and every gradient as PyTorch's."""
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, **kw).double()
    m = tg.nn.MultiheadAttention(E, H, batch_first=batch_first, **kw).double()
    assert [(n, tuple(p.shape)) for n, p in m.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in tm.named_parameters()]
    m.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    r = np.random.default_rng(1)
    shape = (lambda n, d: (N, n, d)) if batch_first else (lambda n, d: (n, N, d))
    arrays = [r.standard_normal(shape(L, E)), r.standard_normal(shape(S, kw.get("kdim", E))),
              r.standard_normal(shape(S, kw.get("vdim", E)))]
    pad = np.zeros((N, S), bool)
    pad[0, -1] = True
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    gs = [tg.tensor(a, requires_grad=True) for a in arrays]
    to, tw = tm(*ts, key_padding_mask=torch.tensor(pad))
    go, gw = m(*gs, key_padding_mask=tg.tensor(pad))
    np.testing.assert_allclose(go.detach().numpy(), to.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(gw.detach().numpy(), tw.detach().numpy(), rtol=1e-10)
    (to.sum() + (tw * tw).sum()).backward()
    (go.sum() + (gw * gw).sum()).backward()
    for t, g in zip(ts, gs):
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)
    for (n, p), tp in zip(m.named_parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=n)
