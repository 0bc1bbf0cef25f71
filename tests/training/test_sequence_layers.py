"""RNN/LSTM/GRU, their cells and the Transformer layers against PyTorch: the same
state-dict keys, PyTorch's weights loaded by state dict, then outputs, final states,
input and parameter gradients equal (float64)."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")
TOL = dict(rtol=1e-9, atol=1e-10)


def _load(gm, tm):
    tsd = tm.state_dict()
    assert list(gm.state_dict()) == list(tsd)
    gm.load_state_dict({k: tg.tensor(v.numpy()) for k, v in tsd.items()})


class Const:
    """An input that does not require grad (a float mask)."""
    def __init__(self, value):
        self.value = value


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [y for o in out for y in _flat(o)]
    return [] if out is None else [out]


def _both(make, inputs, call, seed=0):
    """Run ``call(module, *inputs)`` in both libraries (float64) and compare every
    output, then the gradients of a random projection of all outputs with respect
    to the float inputs and every parameter."""
    torch.manual_seed(seed)
    tm = make(torch.nn).double()
    gm = make(tg.nn).double()
    _load(gm, tm)
    ti = [torch.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray)
          else torch.tensor(a.value) if isinstance(a, Const) else a for a in inputs]
    gi = [tg.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray)
          else tg.tensor(a.value) if isinstance(a, Const) else a for a in inputs]
    to, go = _flat(call(tm, *ti)), _flat(call(gm, *gi))
    assert len(to) == len(go)
    rng = np.random.default_rng(seed + 7)
    lt, lg = 0, 0
    for a, b in zip(go, to):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOL)
        w = rng.standard_normal(tuple(b.shape))
        lt = lt + (b * torch.tensor(w)).sum()
        lg = lg + (a * tg.tensor(w)).sum()
    lt.backward()
    lg.backward()
    for a, b in zip(gi, ti):
        if isinstance(b, torch.Tensor) and b.requires_grad:
            if b.grad is None:        # an unused input
                assert a.grad is None
                continue
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL)
    tp = dict(tm.named_parameters())
    for name, p in gm.named_parameters():
        if tp[name].grad is None:
            assert p.grad is None or not np.any(p.grad.numpy())
            continue
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), err_msg=name, **TOL)
    return gm, tm


def _x(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


RNN_CASES = [
    dict(),
    dict(num_layers=2),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bias=False),
]


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("kw", RNN_CASES, ids=lambda kw: "-".join(f"{k}={v}" for k, v in
                                                                     kw.items()) or "default")
def test_recurrent_layers(kind, kw):
    T, B, D, H = 5, 3, 4, 6
    x = _x(B, T, D) if kw.get("batch_first") else _x(T, B, D)
    _both(lambda nn: getattr(nn, kind)(D, H, **kw), [x], lambda m, v: m(v))


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_recurrent_initial_states_and_unbatched(kind):
    T, B, D, H, L = 4, 2, 3, 5, 2
    h0 = _x(2 * L, B, H, seed=2)
    state = (lambda a, b: (a, b)) if kind == "LSTM" else (lambda a, b: a)
    c0 = _x(2 * L, B, H, seed=3)
    make = lambda nn: getattr(nn, kind)(D, H, num_layers=L, bidirectional=True)  # noqa: E731
    _both(make, [_x(T, B, D), h0, c0], lambda m, v, h, c: m(v, state(h, c)))
    _both(make, [_x(T, D), h0[:, 0], c0[:, 0]], lambda m, v, h, c: m(v, state(h, c)))
    _both(lambda nn: getattr(nn, kind)(D, H), [_x(T, D)], lambda m, v: m(v))


def test_rnn_relu_and_repr():
    _both(lambda nn: nn.RNN(3, 4, nonlinearity="relu", num_layers=2), [_x(5, 2, 3)],
          lambda m, v: m(v))
    for kind, kw in (("LSTM", dict(num_layers=2, batch_first=True, dropout=0.5)),
                     ("RNN", dict(nonlinearity="relu")), ("GRU", dict(bidirectional=True))):
        assert repr(getattr(tg.nn, kind)(3, 4, **kw)) == repr(getattr(torch.nn, kind)(3, 4,
                                                                                     **kw))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_dropout_between_layers(kind):
    m = getattr(tg.nn, kind)(3, 8, num_layers=2, dropout=0.5)
    x = tg.tensor(_x(6, 2, 3), dtype=tg.float32)
    m.eval()
    a = m(x)[0].detach().numpy()
    m.train()
    b = m(x)[0].detach().numpy()
    assert not np.allclose(a, b)       # training: dropout on layer 0's output
    m.eval()
    np.testing.assert_array_equal(m(x)[0].detach().numpy(), a)
    if kind != "LSTM":
        return
    one = tg.nn.LSTM(3, 8, num_layers=1, dropout=0.5)   # PyTorch: no dropout after the last
    with pytest.warns(UserWarning):
        torch.nn.LSTM(3, 8, num_layers=1, dropout=0.5)
    np.testing.assert_array_equal(one(x)[0].detach().numpy(), one.eval()(x)[0].detach().numpy())


def test_recurrent_errors_and_init():
    m = tg.nn.GRU(3, 4)
    with pytest.raises(RuntimeError, match="input_size"):
        m(tg.ones(2, 2, 5))
    with pytest.raises(RuntimeError, match="hidden size"):
        m(tg.ones(2, 2, 3), tg.zeros(2, 2, 4))
    with pytest.raises(ValueError, match="2D or 3D"):
        m(tg.ones(3))
    for p in tg.nn.LSTM(3, 16).parameters():
        a = p.detach().numpy()
        assert np.abs(a).max() <= 0.25 and np.abs(a).max() > 0.2


def test_gate_arithmetic_is_one_fused_node():
    """A cell's new state comes out of one recorded node: an LSTMCell's is the LSTM
    sequence op over one step (inputs: the input projection, h, c, W_hh; h and c are
    its two outputs' first step), a GRUCell's and an RNNCell's theirs."""
    h, c = tg.nn.LSTMCell(3, 4)(tg.ones(2, 3))
    node = h.grad_fn.next_functions[0][0]
    assert node is c.grad_fn.next_functions[0][0] and "LstmLayer" in repr(node)
    assert len(node.next_functions) == 4
    for kind, name in (("GRUCell", "GruLayer"), ("RNNCell", "RnnLayer")):
        h = getattr(tg.nn, kind)(3, 4)(tg.ones(2, 3))
        node = h.grad_fn.next_functions[0][0]
        assert name in repr(node) and len(node.next_functions) == 3 + (kind == "GRUCell")


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells(kind):
    B, D, H = 3, 4, 5
    h0, c0 = _x(B, H, seed=4), _x(B, H, seed=5)
    state = (lambda h, c: (h, c)) if kind == "LSTMCell" else (lambda h, c: h)
    _both(lambda nn: getattr(nn, kind)(D, H), [_x(B, D), h0, c0],
          lambda m, v, h, c: m(v, state(h, c)))
    _both(lambda nn: getattr(nn, kind)(D, H, bias=False), [_x(B, D)], lambda m, v: m(v))
    _both(lambda nn: getattr(nn, kind)(D, H), [_x(D)], lambda m, v: m(v))


# ---------------------------------------------------------------- transformer
def _masks(L, S, B, seed=0):
    rng = np.random.default_rng(seed)
    causal = np.triu(np.full((L, S), -np.inf), 1)
    boolmask = np.triu(np.ones((L, S), bool), 1)
    pad = np.zeros((B, S), bool)
    pad[0, -2:] = True
    return dict(causal=causal, boolmask=boolmask, pad=pad, rng=rng)


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True, activation="gelu"),
                                dict(batch_first=True), dict(bias=False, norm_first=True)])
@pytest.mark.parametrize("masks", ["none", "float", "bool+pad"])
def test_encoder_layer(kw, masks):
    L, B, E = 5, 2, 8
    m = _masks(L, L, B)
    x = _x(B, L, E) if kw.get("batch_first") else _x(L, B, E)
    make = lambda nn: nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0, **kw)  # noqa: E731
    if masks == "none":
        _both(make, [x], lambda mod, v: mod(v))
    elif masks == "float":
        _both(make, [x, Const(m["causal"])], lambda mod, v, a: mod(v, src_mask=a))
    else:
        _both(make, [x, m["boolmask"], m["pad"]],
              lambda mod, v, a, p: mod(v, src_mask=a, src_key_padding_mask=p))


def test_encoder_stack_with_norm_and_causal():
    L, B, E = 6, 2, 8

    def make(nn):
        layer = nn.TransformerEncoderLayer(E, 4, 32, dropout=0.0, batch_first=True)
        return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E),
                                     **({"enable_nested_tensor": False} if nn is torch.nn
                                        else {}))
    mask = np.triu(np.full((L, L), -np.inf), 1)
    gm, _ = _both(make, [_x(B, L, E), Const(mask)],
                  lambda mod, v, a: mod(v, mask=a, is_causal=True))
    assert gm.layers[0].linear1.weight is not gm.layers[1].linear1.weight
    gm2, _ = _both(make, [_x(B, L, E), np.zeros((B, L), bool)],
                   lambda mod, v, p: mod(v, src_key_padding_mask=p))


@pytest.mark.parametrize("kw", [dict(), dict(norm_first=True), dict(batch_first=True)])
def test_decoder_layer(kw):
    L, S, B, E = 4, 6, 2, 8
    bf = kw.get("batch_first")
    tgt = _x(B, L, E) if bf else _x(L, B, E)
    mem = _x(B, S, E, seed=9) if bf else _x(S, B, E, seed=9)
    m = _masks(L, S, B)
    causal = np.triu(np.full((L, L), -np.inf), 1)
    make = lambda nn: nn.TransformerDecoderLayer(E, 2, 16, dropout=0.0, **kw)  # noqa: E731
    _both(make, [tgt, mem, Const(causal), m["pad"]],
          lambda mod, t, mm, a, p: mod(t, mm, tgt_mask=a, memory_key_padding_mask=p))
    _both(make, [tgt, mem], lambda mod, t, mm: mod(t, mm))


def test_decoder_stack():
    L, S, B, E = 3, 5, 2, 8
    make = lambda nn: nn.TransformerDecoder(  # noqa: E731
        nn.TransformerDecoderLayer(E, 2, 16, dropout=0.0), 2, norm=nn.LayerNorm(E))
    _both(make, [_x(L, B, E), _x(S, B, E, seed=3)], lambda mod, t, m: mod(t, m))


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True, norm_first=True)])
def test_transformer(kw):
    """nn.Transformer: PyTorch's keys and Xavier-uniform matrices; with its weights
    loaded, the outputs and all gradients equal, masks included."""
    L, S, B, E = 3, 4, 2, 8
    bf = kw.get("batch_first")
    src = _x(B, S, E) if bf else _x(S, B, E)
    tgt = _x(B, L, E, seed=4) if bf else _x(L, B, E, seed=4)
    make = lambda nn: nn.Transformer(E, 2, 2, 1, 16, dropout=0.0, **kw)  # noqa: E731
    causal = tg.nn.Transformer.generate_square_subsequent_mask(L).numpy()
    gm, _ = _both(make, [src, tgt, Const(causal)], lambda m, s, t, a: m(s, t, tgt_mask=a))
    w = tg.nn.Transformer(E, 2, 1, 1, 16).encoder.layers[0].linear1.weight.detach().numpy()
    bound = np.sqrt(6 / (E + 16))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    with pytest.raises(RuntimeError, match="batch number"):
        gm(tg.ones(S, B, E, dtype=tg.float64), tg.ones(L, B + 1, E, dtype=tg.float64))


def test_transformer_dropout_train_vs_eval():
    layer = tg.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3)
    x = tg.tensor(_x(4, 2, 8), dtype=tg.float32)
    a = layer(x).detach().numpy()
    layer.eval()
    b = layer(x).detach().numpy()
    c = layer(x).detach().numpy()
    assert not np.allclose(a, b) and np.array_equal(b, c)
    with pytest.raises(RuntimeError, match="relu/gelu"):
        tg.nn.TransformerEncoderLayer(8, 2, activation="swish")


# the plain RNN cells in the main suite; LSTM and GRU (several times the cost) in the
# exhaustive tier: the main suite's registry tests gradgradcheck lstm_layer and gru_layer
# and check their jvp rules on their first samples
@pytest.mark.parametrize("kind", [pytest.param("LSTM", marks=pytest.mark.slow),
                                  pytest.param("GRU", marks=pytest.mark.slow),
                                  "RNN", "RNN-relu"])
def test_recurrent_higher_order_and_forward_mode(kind):
    """Second-order gradients (the sequence ops' recorded adjoints differentiate
    again) and forward mode (their jvp rules) against finite differences, with
    respect to the input, the initial state and every parameter (float64)."""
    kw = dict(nonlinearity="relu") if kind == "RNN-relu" else {}
    m = getattr(tg.nn, kind[:3] if kind != "LSTM" else kind)(2, 3, bidirectional=True,
                                                              **kw).double()
    x = tg.tensor(_x(3, 2, 2), requires_grad=True)
    h0 = tg.tensor(_x(2, 2, 3, seed=3), requires_grad=True)
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().requires_grad_() for _, p in m.named_parameters()]

    def g(v, h, *ps):
        state = (h, h * 0.5) if kind == "LSTM" else h
        out, hn = tg.functional.functional_call(m, dict(zip(names, ps)), (v, state))
        return out, (hn[0] if kind == "LSTM" else hn)
    assert tg.testing.gradcheck(g, (x, h0, *params))
    pick = [names.index(n) for n in ("weight_hh_l0", "weight_hh_l0_reverse", "bias_hh_l0")]

    def g2(v, h, *ws):     # second order: the input, h0 and the recurrent parameters
        ps = list(params)
        for i, w in zip(pick, ws):
            ps[i] = w
        return g(v, h, *ps)
    assert tg.testing.gradgradcheck(g2, (x, h0, *(params[i] for i in pick)))
    f = lambda v: m(v)[0]  # noqa: E731
    t = tg.tensor(_x(3, 2, 2, seed=5))
    _, jt = tg.functional.jvp(f, (x.detach(),), (t,))
    h = 1e-6
    fd = (f(x.detach() + h * t) - f(x.detach() - h * t)) / (2 * h)
    np.testing.assert_allclose(jt.detach().numpy(), fd.detach().numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kw", [dict(), dict(num_layers=2, bidirectional=True),
                                dict(batch_first=True, bias=False)],
                         ids=["default", "2-layers-bidir", "batch-first-nobias"])
def test_lstm_proj_size(kw):
    """proj_size: weight_hr_l{k} keys, h of proj_size features, equal to PyTorch."""
    T, B, Din, H, P = 4, 3, 5, 6, 2
    x = _x(B, T, Din) if kw.get("batch_first") else _x(T, B, Din)
    gm, _ = _both(lambda nn: nn.LSTM(Din, H, proj_size=P, **kw), [x], lambda m, v: m(v))
    assert "weight_hr_l0" in gm.state_dict() and "proj_size=2" in repr(gm)
    D, L = (2 if kw.get("bidirectional") else 1), kw.get("num_layers", 1)
    h0, c0 = _x(D * L, B, P, seed=2), _x(D * L, B, H, seed=3)
    _both(lambda nn: nn.LSTM(Din, H, proj_size=P, **kw), [x, h0, c0],
          lambda m, v, h, c: m(v, (h, c)))


def test_lstm_proj_size_errors():
    for bad, cls in ((dict(proj_size=6), ValueError), (dict(proj_size=-1), ValueError)):
        with pytest.raises(cls):
            tg.nn.LSTM(3, 6, **bad)
    for kind in ("GRU", "RNN"):
        with pytest.raises(ValueError, match="only supported for LSTM"):
            getattr(tg.nn, kind)(3, 6, proj_size=2)
    m = tg.nn.LSTM(3, 6, proj_size=2)
    with pytest.raises(RuntimeError, match="hidden size"):
        m(tg.ones(4, 1, 3), (tg.zeros(1, 1, 6), tg.zeros(1, 1, 6)))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN", "RNN-relu"])
def test_layer_is_one_node_per_direction(kind):
    """A recurrent layer's recurrence is one recorded sequence op, whatever the length,
    and its adjoint (only the output used) matches PyTorch's in float32 too (the
    compiled kernels' approximations)."""
    torch.manual_seed(0)
    kw = dict(nonlinearity="relu") if kind == "RNN-relu" else {}
    kind, name = kind[:4].rstrip("-"), {"LSTM": "LstmLayer", "GRU": "GruLayer"}.get(
        kind[:4].rstrip("-"), "RnnLayer")
    tm = getattr(torch.nn, kind)(4, 8, bidirectional=True, **kw)
    gm = getattr(tg.nn, kind)(4, 8, bidirectional=True, **kw)
    _load(gm, tm)
    x = _x(7, 3, 4).astype(np.float32)
    tx, gx = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    out = gm(gx)[0]
    seen, nodes, stack_ = set(), [], [out.grad_fn]
    while stack_:
        n = stack_.pop()
        if n is None or isinstance(n, str) or id(n) in seen:   # "AccumulateGrad": a leaf
            continue
        seen.add(id(n))
        nodes.append(n)
        stack_ += [f for f, _ in n.next_functions]
    names = [repr(n) for n in nodes]
    assert sum(name in r for r in names) == 2, names
    (out * out).sum().backward()
    to = tm(tx)[0]
    (to * to).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for name, p in gm.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(tm.named_parameters())[name].grad,
                                   rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("B,H", [(34, 70), (5, 9)], ids=["blocks-of-rows", "one-loop"])
def test_lstm_float32_step_products(B, H):
    """The float32 LSTM's compiled loops, whose per-step products run in register
    tiles where the host has AVX-512 (``devices/cpu_kernels/tiled_gemm.py``), else in
    BLAS: with two blocks of 17 rows (tiles of 8 rows and one row) and 4H = 280
    columns (tiles of 32 and 16 columns, 8 left over), and in one loop of 5 rows,
    values and every gradient equal PyTorch's in float32."""
    from tapegrad.ops.nn import rnn as ops_rnn
    assert ops_rnn._seq_kernels("lstm", np.float32) is not None
    torch.manual_seed(0)
    tm, gm = torch.nn.LSTM(5, H), tg.nn.LSTM(5, H)
    _load(gm, tm)
    x = _x(6, B, 5).astype(np.float32)
    h0, c0 = (_x(1, B, H, seed=s).astype(np.float32) for s in (2, 3))
    tx, gx = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    th, gh = torch.tensor(h0, requires_grad=True), tg.tensor(h0, requires_grad=True)
    out, (hn, cn) = gm(gx, (gh, tg.tensor(c0)))
    tout, (thn, tcn) = tm(tx, (th, torch.tensor(c0)))
    w = _x(6, B, H, seed=4).astype(np.float32)
    ((out * tg.tensor(w)).sum() + cn.sum()).backward()
    ((tout * torch.tensor(w)).sum() + tcn.sum()).backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    for a, b in ((gx, tx), (gh, th)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-4)
    for name, p in gm.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(tm.named_parameters())[name].grad,
                                   rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_under_vmap(kind):
    """tg.vmap over a batch of (sequence, initial state) pairs: the sequence op's
    batching rule folds the vmapped dim into its batch (no loop fallback, so no
    warning) and equals the layer run on each pair; per-example weights (vmap over
    functional_call) take the rule's batched-matmul path, equal to the loop too."""
    import warnings
    m = getattr(tg.nn, kind)(3, 4, num_layers=2, bidirectional=True).double()
    V, T, B = 3, 5, 2
    xs, hs = tg.tensor(_x(V, T, B, 3)), tg.tensor(_x(V, 4, B, 4, seed=2))

    def f(x, h):
        out, hn = m(x, (h, h * 0.5) if kind == "LSTM" else h)
        return out, (hn[0] if kind == "LSTM" else hn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = tg.vmap(f)(xs, hs)
    for v in range(V):
        want = f(xs[v], hs[v])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a[v].detach().numpy(), b.detach().numpy(),
                                       rtol=1e-12, atol=1e-12)
    names = [n for n, _ in m.named_parameters()]
    ps = [tg.tensor(np.stack([p.detach().numpy() * (1 + 0.1 * v) for v in range(V)]))
          for _, p in m.named_parameters()]

    def g(x, *p):
        return tg.functional.functional_call(m, dict(zip(names, p)), (x,))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = tg.vmap(g, in_dims=(None,) + (0,) * len(ps))(xs[0], *ps)
    for v in range(V):
        np.testing.assert_allclose(got[v].detach().numpy(),
                                   g(xs[0], *(p[v] for p in ps)).detach().numpy(),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_whole_array_path(kind, monkeypatch):
    """Without the compiled kernels (CuPy arrays, float16, Numba missing) the sequence
    ops run their written-once step as whole-array code and the ops-namespace adjoint:
    equal to PyTorch too."""
    from tapegrad.ops.nn import rnn as ops_rnn
    monkeypatch.setattr(ops_rnn, "_compiled_for", lambda *a: None)
    _both(lambda nn: getattr(nn, kind)(3, 4, num_layers=2, bidirectional=True),
          [_x(4, 2, 3), _x(4, 2, 4, seed=2), _x(4, 2, 4, seed=3)],
          lambda m, v, h, c: m(v, (h, c) if kind == "LSTM" else h))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("kw,states", [
    (dict(num_layers=2, bidirectional=True, batch_first=True), False),
    (dict(num_layers=2, bidirectional=True), True),
], ids=["batch_first-no-states", "initial-states"])
def test_recurrent_layers_over_batch_blocks(kind, kw, states, monkeypatch):
    """The compiled step loops split into blocks of batch rows, one loop per thread
    (forced here on small shapes: three blocks of 1, 2 and 2 rows; the LSTM's whole
    sequence loops and the others' Python step loops): the values, final states and
    gradients equal PyTorch's, with and without given initial states."""
    from tapegrad.ops.nn import rnn as ops_rnn
    monkeypatch.setattr(ops_rnn, "PART_ROWS", 1)
    monkeypatch.setattr(ops_rnn, "PART_MIN", 0)
    monkeypatch.setattr(ops_rnn, "PARTS", 3)
    monkeypatch.setattr(ops_rnn, "SEQ_PART_ROWS", 1)
    monkeypatch.setattr(ops_rnn, "SEQ_PART_MIN", 0)
    assert ops_rnn._parts(5, 8, 4) == [slice(0, 1), slice(1, 3), slice(3, 5)]
    assert ops_rnn._seq_parts(5, 8, 4) == [slice(0, 1), slice(1, 3), slice(3, 5)]
    T, B, D, H = 4, 5, 3, 4
    x = _x(B, T, D) if kw.get("batch_first") else _x(T, B, D)
    make = lambda nn: getattr(nn, kind)(D, H, **kw)  # noqa: E731
    if not states:
        _both(make, [x], lambda m, v: m(v))
        return
    h0, c0 = _x(4, B, H, seed=2), _x(4, B, H, seed=3)
    _both(make, [x, h0, c0], lambda m, v, h, c: m(v, (h, c) if kind == "LSTM" else h))


@pytest.mark.parametrize("kw,states", [
    (dict(num_layers=2, bidirectional=True, batch_first=True), False),
    (dict(num_layers=2, bidirectional=True), True),
], ids=["batch_first-no-states", "initial-states"])
def test_lstm_python_step_loops(kw, states, monkeypatch):
    """Where no BLAS can be called from compiled code (``devices/cpu_kernels/blas.py``
    finds none) the LSTM runs the Python step loops (a BLAS matmul and a compiled step
    per step), in one loop and in blocks of rows: equal to PyTorch too."""
    from tapegrad.ops.nn import rnn as ops_rnn
    monkeypatch.setattr(ops_rnn, "_seq_kernels", lambda *a: None)
    T, B, D, H = 4, 5, 3, 4
    x = _x(B, T, D) if kw.get("batch_first") else _x(T, B, D)
    make = lambda nn: nn.LSTM(D, H, **kw)  # noqa: E731
    h0, c0 = _x(4, B, H, seed=2), _x(4, B, H, seed=3)
    for blocks in (False, True):
        if blocks:
            monkeypatch.setattr(ops_rnn, "PART_ROWS", 1)
            monkeypatch.setattr(ops_rnn, "PART_MIN", 0)
            monkeypatch.setattr(ops_rnn, "PARTS", 2)
        if states:
            _both(make, [x, h0, c0], lambda m, v, h, c: m(v, (h, c)))
        else:
            _both(make, [x], lambda m, v: m(v))
