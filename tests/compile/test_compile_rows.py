"""tg.compile's row fusion (compiler/rows.py): a layer norm, a masked softmax and
their backwards (per-row sums, per-column weight gradients, a mask repeating over
the batch) as one kernel over rows, checked against the same step run eagerly and
against PyTorch, values and gradients."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F

torch = pytest.importorskip("torch")

B, T, C = 3, 5, 8


@pytest.fixture(autouse=True)
def _small_runs_fused(monkeypatch):
    """Runs this small are fused too (by default they stay as they are)."""
    from tapegrad.compiler import rows
    monkeypatch.setattr(rows, "MIN_ELEMENTS", 0)


def _data(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, C)).astype(dtype)
    w = (1 + 0.1 * rng.standard_normal(C)).astype(dtype)
    b = (0.1 * rng.standard_normal(C)).astype(dtype)
    pos = rng.standard_normal((T, C)).astype(dtype)
    mask = np.triu(np.full((T, T), -np.inf, dtype), 1)
    return x, w, b, pos, mask


def _step(lib, x, w, b, pos, mask):
    """A pre-norm attention block's arithmetic: layer norm of ``x + pos``, a causal
    softmax over its scores, a second layer norm; a loss of everything."""
    ln = F.layer_norm if lib is tg else torch.nn.functional.layer_norm
    sm = F.softmax if lib is tg else torch.softmax
    h = ln(x + pos, (C,), w, b)
    s = sm(h @ h.transpose(-1, -2) * (1 / np.sqrt(C)) + mask, dim=-1)
    out = ln(s @ h + h, (C,), w, b)
    return (out * out * (1 + lib.tanh(out))).sum()


def _names(prog):
    return [st.name for st in prog.steps]


@pytest.mark.parametrize("dtype,constant_rows", [(np.float32, False), (np.float64, False),
                                                 (np.float32, True)])
def test_layer_norm_and_masked_softmax_rows_equal_eager_and_torch(dtype, constant_rows,
                                                                 monkeypatch):
    # constant_rows: the kernels' source has the row length and the mask's period as
    # constants (as for large values), else they are the kernels' arguments
    from tapegrad.compiler import rows
    monkeypatch.setattr(rows, "_SPECIALIZE", 0 if constant_rows else 1 << 62)
    x0, w0, b0, pos0, mask0 = _data(dtype)
    leaves = [tg.tensor(a).requires_grad_() for a in (x0, w0, b0, pos0)]
    mask = tg.tensor(mask0)

    def step(*ts):  # (arguments: nothing is hoisted out of the program as invariant)
        loss = _step(tg, *ts, mask)
        loss.backward()
        grads = [t.grad for t in ts]
        for t in ts:
            t.grad = None
        return loss, grads

    comp = tg.compile(step)
    le, ge = step(*leaves)
    tl = [torch.tensor(a, requires_grad=True) for a in (x0, w0, b0, pos0)]
    lt = _step(torch, *tl, torch.tensor(mask0))
    lt.backward()
    tol = 2e-5 if dtype == np.float32 else 1e-11
    for _ in range(3):
        lc, gc = comp(*leaves)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=tol)
        np.testing.assert_allclose(lc.item(), lt.item(), rtol=tol)
        for a, e, t in zip(gc, ge, tl):
            np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=tol, atol=tol)
            np.testing.assert_allclose(a.numpy(), t.grad.numpy(), rtol=tol, atol=tol)
    assert comp.stats()["replays"] >= 2
    rows = [n for n in _names(comp._last) if n.startswith("rows[")]
    # two layer norms, the softmax, and their backwards
    assert any("softmax" in n for n in rows), _names(comp._last)
    assert sum("rsqrt" in n for n in rows) == 2, rows
    assert any("sum_to" in n for n in rows), rows


def test_module_transformer_layer_rows_equal_eager():
    """A pre-norm Transformer encoder layer as a compiled module (forward and
    backward programs partitioned), with a causal mask: outputs and gradients as
    eager's."""
    import tapegrad.nn as nn

    def make():
        tg.manual_seed(0)
        return nn.TransformerEncoderLayer(C, 2, 16, 0.0, activation="gelu",
                                          batch_first=True, norm_first=True)
    me, mc = make(), make()
    cm = tg.compile(mc)
    x = tg.tensor(np.random.default_rng(1).standard_normal((B, T, C)).astype(np.float32))
    mask = nn.generate_square_subsequent_mask(T)
    for _ in range(3):
        for m in (me, mc):
            m.zero_grad()
        ye = me(x, src_mask=mask, is_causal=True)
        yc = cm(x, src_mask=mask, is_causal=True)
        np.testing.assert_allclose(yc.detach().numpy(), ye.detach().numpy(), rtol=1e-5,
                                   atol=1e-5)
        (ye * ye).sum().backward()
        (yc * yc).sum().backward()
        for a, e in zip(mc.parameters(), me.parameters()):
            np.testing.assert_allclose(a.grad.numpy(), e.grad.numpy(), rtol=1e-4, atol=1e-5)
    prog = cm._joint._last
    assert any(n.startswith("rows[") for n in _names(prog)), _names(prog)
    assert any(n.startswith("rows[") for n in _names(prog.backward)), _names(prog.backward)


def test_rows_off_gives_the_same_program_results():
    """With row fusion off the members run as they are: the same values."""
    from tapegrad.compiler import rows
    x0, w0, b0, pos0, mask0 = _data(np.float64, seed=2)
    out = []
    for enabled in (True, False):
        rows.ENABLED = enabled
        try:
            leaves = [tg.tensor(a) for a in (x0, w0, b0, pos0, mask0)]
            comp = tg.compile(lambda *a: _step(tg, *a))
            comp(*leaves)
            out.append(comp(*leaves).item())
            names = _names(comp._last)
        finally:
            rows.ENABLED = True
        assert any(n.startswith("rows[") for n in names) == enabled, names
    np.testing.assert_allclose(out[0], out[1], rtol=1e-12)
