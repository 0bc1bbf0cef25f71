"""A recurrent training step captured whole by tg.compile: the LSTM language model of
``tapegrad.examples.charlm`` (embedding, LSTM, linear head, cross-entropy), its
gradients clipped in place (``clip_grad_norm_``: ``g.mul_(coef)`` on each ``.grad``)
and an AdamW update, all inside the compiled function. Every call is compared with
the same step run eagerly on a copy of the model."""
import copy

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.examples import charlm

V = 12


def _make_step(m, clip):
    opt = tg.optim.AdamW(m.parameters(), lr=1e-2)

    def step(xb, yb):
        logits, _ = m(xb)
        loss = F.cross_entropy(logits.reshape(-1, V), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if clip:
            tg.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        return loss
    return step


@pytest.mark.parametrize("clip", [True, False])
def test_charlm_lstm_step_replays_equal_eager(clip):
    tg.manual_seed(0)
    m = charlm.LSTMLM(V, embed=8, hidden=16)
    me = copy.deepcopy(m)
    cs, es = tg.compile(_make_step(m, clip)), _make_step(me, clip)
    rng = np.random.default_rng(0)
    for _ in range(4):
        xb = tg.tensor(rng.integers(0, V, (3, 5)))
        yb = tg.tensor(rng.integers(0, V, (3, 5)))
        lc, le = cs(xb, yb), es(xb, yb)
        assert float(lc) == pytest.approx(float(le), rel=1e-5)
        for (name, p), q in zip(m.named_parameters(), me.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
    s = cs.stats()
    assert (s["captures"], s["replays"], s["eager_calls"]) == (1, 3, 0), s["eager_reason"]


def test_inplace_op_on_a_gradient_is_a_step():
    """``p.grad.mul_(c)`` inside the compiled step is recorded as a write (not refused):
    the replay scales the new gradient, not the captured one."""
    w = tg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    we = tg.tensor([1.0, -2.0, 3.0], requires_grad=True)

    def step(w, x):
        (w * x).sum().backward()
        w.grad.mul_(0.5)
        return w.grad

    cs = tg.compile(step)
    for k in range(3):
        x = tg.tensor([1.0, 2.0, 4.0]) * (k + 1)
        w.grad = we.grad = None
        np.testing.assert_array_equal(cs(w, x).numpy(), step(we, x).numpy())
    assert cs.stats()["replays"] == 2


def test_head_on_batch_first_output_backward_copies_no_hidden_states():
    """``model = tg.compile(charlm.LSTMLM)``: the linear head reads the LSTM's
    (batch, time) view of its (time, batch) output. The captured adjoint takes the
    swapped-layout path as eager does (its arrays are an ndarray subclass there): the
    weight gradient reads the hidden states in the order they lie, so no step of the
    backward copies them (only the narrower head gradient is reordered), and the
    gradients equal eager."""
    H = 16
    tg.manual_seed(0)
    m = charlm.LSTMLM(V, embed=8, hidden=H)
    me = copy.deepcopy(m)
    cm = tg.compile(m)
    rng = np.random.default_rng(1)
    for _ in range(3):
        xb = tg.tensor(rng.integers(0, V, (3, 5)))
        yb = tg.tensor(rng.integers(0, V, (3, 5)))
        for model in (cm, me):
            model.zero_grad()
            logits, _ = model(xb)
            F.cross_entropy(logits.reshape(-1, V), yb.reshape(-1)).backward()
        for (name, p), q in zip(m.named_parameters(), me.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
    prog = cm._joint._last
    backs = [prog.backward] + list(prog.__dict__.get("zero_backwards", {}).values())
    for b in backs:
        g = b.graph
        copies = [st for st in b.steps if st.name == "reshape" and
                  st.outs[0] not in g.alias]
        assert copies and all(g.shapes[st.outs[0]][-1] == V for st in copies), \
            [(st.name, [g.shapes[v] for v in st.outs]) for st in copies]
