"""``model = tg.compile(model)`` whose backward reaches only some outputs (an LSTM's
``(h_n, c_n)`` unused by the loss): the backward program made for those cotangents
known zero (compiler/zero_cotangents.py) gives eager's gradients, for every pattern of
used outputs, over LSTM configurations (batch_first, two layers, bidirectional,
dropout between layers, initial states given or not), and does less than the general
program."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tests.compile._models import pair

V, E, H, T, B = 7, 5, 6, 4, 3


class Model(nn.Module):
    def __init__(self, states=False, **kw):
        super().__init__()
        self.tok = nn.Embedding(V, E)
        self.lstm = nn.LSTM(E, H, **kw)
        self.head = nn.Linear(H * (2 if kw.get("bidirectional") else 1), V)
        self.states = states

    def forward(self, x, h0=None, c0=None):
        out, (h, c) = self.lstm(self.tok(x), None if h0 is None else (h0, c0))
        return self.head(out), h, c


USES = {"logits": (1, 0, 0), "logits+h_n": (1, 1, 0), "logits+c_n": (1, 0, 1),
        "c_n": (0, 0, 1), "all": (1, 1, 1)}


def _loss(outs, use):
    terms = []
    if use[0]:
        logits = outs[0]
        terms.append(F.cross_entropy(logits.reshape(-1, V), tg.tensor(
            np.arange(logits.shape[0] * logits.shape[1]) % V)))
    for k in (1, 2):
        if use[k]:
            terms.append((outs[k] * outs[k]).sum() * 0.1)
    return sum(terms[1:], terms[0])


def _grads(m, x, use, states):
    for p in m.parameters():
        p.grad = None
    loss = _loss(m(x, *states), use)
    loss.backward()
    return float(loss), {n: p.grad.numpy().copy() for n, p in m.named_parameters()
                         if p.grad is not None}


def _compare(kw, use, given_states=False, calls=2):
    m, ref = pair(lambda: Model(**kw))
    cm = tg.compile(m)
    rng = np.random.default_rng(0)
    shape = (B, T) if kw.get("batch_first") else (T, B)
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    for _ in range(calls):
        x = tg.tensor(rng.integers(0, V, shape))
        states = ()
        if given_states:
            states = tuple(tg.tensor(rng.standard_normal((layers, B, H)).astype(np.float32))
                           for _ in range(2))
        lc, gc = _grads(cm, x, use, states)
        le, ge = _grads(ref, x, use, states)
        assert lc == pytest.approx(le, rel=1e-5)
        assert set(ge) <= set(gc)
        for name in gc:  # (a parameter no used output reaches: None eagerly, zeros here)
            np.testing.assert_allclose(gc[name], ge.get(name, 0.0), rtol=1e-5, atol=1e-6,
                                       err_msg=name)
    s = cm.stats()
    assert (s["captures"], s["eager_calls"]) == (1, 0), (s["eager_reason"], s["recaptures"])
    return cm._joint._last


@pytest.mark.parametrize("use", list(USES), ids=list(USES))
def test_unused_outputs_get_the_eager_gradients(use):
    prog = _compare({"batch_first": True}, USES[use])
    made = prog.__dict__.get("zero_backwards", {})
    if all(USES[use]):
        assert not made  # (every cotangent given: the general program)
        return
    (back,) = made.values()
    if use == "c_n":  # (the head's gradients would be zeros returned: the general one)
        assert back is prog.backward
        return
    assert back.kernels < prog.backward.kernels


@pytest.mark.parametrize("kw", [dict(num_layers=2, bidirectional=True),
                                dict(num_layers=2, dropout=0.0, batch_first=True)],
                         ids=["two-layers-bidirectional", "two-layers-batch-first"])
@pytest.mark.parametrize("given_states", [False, True], ids=["no-h0", "h0-c0"])
def test_lstm_configurations(kw, given_states):
    _compare(kw, USES["logits"], given_states)
    _compare(kw, USES["logits+c_n"], given_states)


def test_dropout_between_layers_in_eval_mode():
    m, ref = pair(lambda: Model(num_layers=2, dropout=0.5))
    m.eval()
    ref.eval()
    cm = tg.compile(m)
    x = tg.tensor(np.random.default_rng(3).integers(0, V, (T, B)))
    for _ in range(2):
        lc, gc = _grads(cm, x, USES["logits"], ())
        le, ge = _grads(ref, x, USES["logits"], ())
        assert lc == pytest.approx(le, rel=1e-5)
        for name in ge:
            np.testing.assert_allclose(gc[name], ge[name], rtol=1e-5, atol=1e-6, err_msg=name)
