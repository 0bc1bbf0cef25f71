"""The compiler's embedding-projection rewrite (compiler/embedding_projection.py): an
embedding read only by a linear map (an LSTM's input projection, a Linear) runs as a
gather from the projected table, its backward as a scatter-add into the table's
gradient. Values and gradients against eager (float32) and PyTorch (float64), with
and without the pattern (padding_idx, a second reader of the embedding, a vocabulary
larger than the batch), time-major and batch-first."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tests.compile._models import pair

V, E, H = 7, 5, 6


class LM(nn.Module):
    def __init__(self, batch_first=True, padding_idx=None, vocab=V):
        super().__init__()
        self.tok = nn.Embedding(vocab, E, padding_idx=padding_idx)
        self.lstm = nn.LSTM(E, H, batch_first=batch_first)
        self.head = nn.Linear(H, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.tok(x))
        return self.head(h)


class Residual(nn.Module):
    """The embedding also read by a sum: not rewritten."""
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, E)
        self.proj = nn.Linear(E, V)

    def forward(self, x):
        e = self.tok(x)
        return self.proj(e) + e.sum(-1, keepdim=True)


def _loss(m, x, y):
    out = m(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _grads(m, x, y):
    for p in m.parameters():
        p.grad = None
    loss = _loss(m, x, y)
    loss.backward()
    return float(loss), [p.grad.numpy().copy() for p in m.parameters()]


def _compare(make, shape, vocab=V, calls=3, rtol=1e-5, atol=1e-6):
    """Compiled against eager over a few calls: (the compiled model's stats)."""
    m, ref = pair(make)
    cm = tg.compile(m)
    rng = np.random.default_rng(0)
    for _ in range(calls):
        x = tg.tensor(rng.integers(0, vocab, shape))
        y = tg.tensor(rng.integers(0, vocab, shape))
        lc, gc = _grads(cm, x, y)
        le, ge = _grads(ref, x, y)
        assert lc == pytest.approx(le, rel=1e-5)
        for (name, _), a, b in zip(m.named_parameters(), gc, ge):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=name)
    s = cm.stats()
    assert (s["captures"], s["eager_calls"]) == (1, 0), (s["eager_reason"], s["recaptures"])
    return s


def _backward_names(cm):
    """The step names of the compiled module's backward programs (the general one
    and those for outputs whose gradient is None)."""
    prog = cm._joint._last
    backs = [prog.backward] + list(prog.__dict__.get("zero_backwards", {}).values())
    return [[st.name for st in b.steps] for b in backs]


@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm_input_projection_folded(batch_first):
    s = _compare(lambda: LM(batch_first), (4, 3))
    assert s["embedding_projections"] == 1


@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm_table_gradient_in_recurrence(batch_first, monkeypatch):
    """The LSTM's adjoint and the table's embedding_backward run as one
    lstm_layer_rows_backward step (in every backward program), with eager's
    gradients; with the rewrite off, the two steps."""
    from tapegrad.compiler import embedding_projection as EP
    for on in (True, False):
        monkeypatch.setattr(EP, "GRADIENT_IN_RECURRENCE", on)
        m, _ = pair(lambda: LM(batch_first))
        cm = tg.compile(m)
        _compare(lambda: LM(batch_first), (4, 3))
        x = tg.tensor(np.random.default_rng(4).integers(0, V, (4, 3)))
        for _ in range(2):
            _loss(cm, x, x).backward()
        for names in _backward_names(cm):
            assert ("lstm_layer_rows_backward" in names) == on, names
            assert ("embedding_backward" in names) != on, names
            assert ("lstm_layer.vjp" in names) != on, names


def test_padding_idx_not_folded():
    s = _compare(lambda: LM(padding_idx=2), (4, 3))
    assert s["embedding_projections"] == 0


def test_second_reader_not_folded():
    s = _compare(Residual, (4, 3))
    assert s["embedding_projections"] == 0


def test_vocabulary_larger_than_batch_not_folded():
    s = _compare(lambda: LM(vocab=40), (2, 3), vocab=40)
    assert s["embedding_projections"] == 0


@pytest.mark.parametrize("shape", [(12,), (3, 4)])
def test_embedding_then_linear(shape):
    # 1-D indices: the linear's input is 2-D (its adjoint has no reshapes)
    s = _compare(lambda: nn.Sequential(nn.Embedding(V, E), nn.Linear(E, V)), shape, calls=2)
    assert s["embedding_projections"] == 1


@pytest.mark.parametrize("frozen", ["tok", "lstm"])
def test_frozen_side_folded(frozen):
    def make():
        m = LM()
        for p in getattr(m, frozen).parameters():
            p.requires_grad_(False)
        return m
    m, ref = pair(make)
    cm = tg.compile(m)
    x = tg.tensor(np.random.default_rng(1).integers(0, V, (4, 3)))
    y = tg.tensor(np.random.default_rng(2).integers(0, V, (4, 3)))
    for _ in range(2):
        for mod in (cm, ref):
            for p in mod.parameters():
                p.grad = None
            _loss(mod, x, y).backward()
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            if p.requires_grad:
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5,
                                           atol=1e-6, err_msg=name)
            else:
                assert p.grad is None and q.grad is None
    assert cm.stats()["embedding_projections"] == 1


def test_forward_only_folded():
    m, ref = pair(LM)
    cm = tg.compile(m)
    x = tg.tensor(np.random.default_rng(3).integers(0, V, (4, 3)))
    with tg.no_grad():
        for _ in range(2):
            np.testing.assert_allclose(cm(x).numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-6)
    assert cm.stats()["embedding_projections"] == 1


def test_whole_step_folded():
    m, ref = pair(LM)

    def make_step(model):
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = _loss(model, x, y)
            loss.backward()
            opt.step()
            return loss
        return step
    cs, es = tg.compile(make_step(m)), make_step(ref)
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = tg.tensor(rng.integers(0, V, (4, 3)))
        y = tg.tensor(rng.integers(0, V, (4, 3)))
        assert float(cs(x, y)) == pytest.approx(float(es(x, y)), rel=1e-5)
        for (name, p), q in zip(m.named_parameters(), ref.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
    s = cs.stats()
    assert (s["replays"], s["embedding_projections"]) == (2, 1), s["eager_reason"]


@pytest.mark.parametrize("batch_first", [True, False])
def test_against_pytorch(batch_first):
    torch = pytest.importorskip("torch")
    tg.manual_seed(0)
    m = LM(batch_first).double()
    cm = tg.compile(m)
    t = torch.nn.ModuleDict({"tok": torch.nn.Embedding(V, E),
                             "lstm": torch.nn.LSTM(E, H, batch_first=batch_first),
                             "head": torch.nn.Linear(H, V)}).double()
    with torch.no_grad():
        for name, p in m.named_parameters():
            dict(t.named_parameters())[name].copy_(torch.from_numpy(p.detach().numpy().copy()))
    rng = np.random.default_rng(5)
    for _ in range(2):
        xb, yb = rng.integers(0, V, (4, 3)), rng.integers(0, V, (4, 3))
        loss, grads = _grads(cm, tg.tensor(xb), tg.tensor(yb))
        t.zero_grad()
        h, _ = t["lstm"](t["tok"](torch.from_numpy(xb)))
        out = t["head"](h)
        tl = torch.nn.functional.cross_entropy(out.reshape(-1, V), torch.from_numpy(yb).reshape(-1))
        tl.backward()
        assert loss == pytest.approx(float(tl.detach()), rel=1e-12)
        for (name, _), g in zip(m.named_parameters(), grads):
            np.testing.assert_allclose(g, dict(t.named_parameters())[name].grad.numpy(),
                                       rtol=1e-10, atol=1e-12, err_msg=name)
    assert cm.stats()["embedding_projections"] == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_rows_equals_gather_then_lstm(dtype, reverse):
    # the step the rewrite puts in place of embedding + lstm_layer: the same numbers
    from tapegrad.ops.nn.rnn import LSTM_ROWS, lstm_layer
    rng = np.random.default_rng(6)
    T, B, Hs, n = 5, 3, 4, 6
    table = rng.standard_normal((n, 4 * Hs)).astype(dtype)
    index = rng.integers(0, n, (B, T)).T          # (T, B), strided as a batch_first's
    h0, c0 = (rng.standard_normal((B, Hs)).astype(dtype) for _ in range(2))
    w = rng.standard_normal((4 * Hs, Hs)).astype(dtype)
    got = LSTM_ROWS.compute(index, table, h0, c0, w, reverse=reverse)
    want = lstm_layer(tg.tensor(table[index]), tg.tensor(h0), tg.tensor(c0), tg.tensor(w),
                      reverse)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b.numpy())
    with pytest.raises(IndexError, match="embedding"):
        LSTM_ROWS.kernel(index + n, table, h0, c0, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("path", ["loop", "blocks", "python"])
def test_lstm_rows_backward_equals_adjoint_then_scatter(dtype, reverse, path, monkeypatch):
    """lstm_layer_rows_backward against the LSTM's recorded adjoint and the table's
    gradient through embedding (tapegrad's autograd), with and without the cells'
    gradient and h0's/c0's/W_hh's: the compiled reverse loop, that loop over blocks
    of batch rows (three threads, uneven blocks), and the Python path where the loop
    is not available."""
    from tapegrad.ops.nn import rnn as ops_rnn
    from tapegrad.ops.nn.rnn import LSTM_ROWS, LSTM_ROWS_GRAD, lstm_layer
    if path == "blocks":
        for name, v in (("SEQ_PART_ROWS", 1), ("SEQ_PART_MIN", 0), ("PARTS", 3)):
            monkeypatch.setattr(ops_rnn, name, v)
    rng = np.random.default_rng(8)
    T, B, Hs, n = 6, 5, 4, 7
    table = rng.standard_normal((n, 4 * Hs)).astype(dtype)
    index = rng.integers(0, n, (B, T)).T          # (T, B), strided as a batch_first's
    h0, c0 = (rng.standard_normal((B, Hs)).astype(dtype) for _ in range(2))
    w = (rng.standard_normal((4 * Hs, Hs)) * 0.5).astype(dtype)
    out, cells, gates = LSTM_ROWS.compute(index, table, h0, c0, w, reverse=reverse)
    g_out, g_cells = (rng.standard_normal((T, B, Hs)).astype(dtype) for _ in range(2))
    if path == "python":
        monkeypatch.setattr(ops_rnn, "_seq_kernels", lambda kind, dt: None)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    for gc in (None, g_cells):
        ts = [tg.tensor(a, requires_grad=True) for a in (table, h0, c0, w)]
        o, c, _ = lstm_layer(F.embedding(tg.tensor(index), ts[0]), *ts[1:], reverse)
        loss = (o * tg.tensor(g_out)).sum()
        if gc is not None:
            loss = loss + (c * tg.tensor(gc)).sum()
        loss.backward()
        for needs in ((True, True, True), (False, False, True)):
            got = LSTM_ROWS_GRAD.kernel(g_out, gc, index, h0, c0, w, out, cells, gates,
                                        reverse=reverse, num_weights=n, needs=needs)
            assert len(got) == 4
            for a, t, need in zip(got, ts, (True,) + needs):
                if not need:
                    assert a is None
                    continue
                np.testing.assert_allclose(a, t.grad.numpy(), **tol)


def test_replay_checks_the_indices():
    m, ref = pair(LM)
    cm = tg.compile(m)
    x = np.random.default_rng(7).integers(0, V, (4, 3))
    for _ in range(2):
        _loss(cm, tg.tensor(x), tg.tensor(x)).backward()
    assert cm.stats()["replays"] >= 1
    x[1, 2] = V
    with pytest.raises(IndexError):
        cm(tg.tensor(x))


class Tied(nn.Module):
    """The output layer's weight is the embedding's (weight tying): the table is
    ``E @ E^T + b`` and both gradients reach ``E``."""
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, E)
        self.out = nn.Linear(E, V)
        self.out.weight = self.tok.weight

    def forward(self, x):
        return self.out(self.tok(x))


def test_tied_weights_folded():
    s = _compare(Tied, (4, 3), calls=2)
    assert s["embedding_projections"] == 1


def test_bidirectional_two_layers():
    # two projections read the embedding (both directions): left as it is
    def make():
        m = LM()
        m.lstm = nn.LSTM(E, H, num_layers=2, bidirectional=True, batch_first=True)
        m.head = nn.Linear(2 * H, V)
        return m
    s = _compare(make, (4, 3), calls=2)
    assert s["embedding_projections"] == 0


@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm_rows_over_batch_blocks(batch_first, monkeypatch):
    """The recurrence reading the table's rows, split into blocks of batch rows (one
    loop per thread; forced here on small shapes: three blocks of uneven sizes)."""
    from tapegrad.ops.nn import rnn as ops_rnn
    monkeypatch.setattr(ops_rnn, "SEQ_PART_ROWS", 1)
    monkeypatch.setattr(ops_rnn, "SEQ_PART_MIN", 0)
    monkeypatch.setattr(ops_rnn, "PARTS", 3)
    assert len(ops_rnn._seq_parts(4, 8, 4)) == 3
    s = _compare(lambda: LM(batch_first), (4, 5) if batch_first else (5, 4))
    assert s["embedding_projections"] == 1
