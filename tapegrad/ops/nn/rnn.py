"""lstm_layer: one direction of one LSTM layer over a whole sequence, as one op.

``lstm_layer(input_gates, h0, c0, weight_hh, reverse=False) -> (output, cells, gates)``:
``input_gates`` (T, B, 4H) is the input projection of every step (``x @ W_ih^T + b_ih
+ b_hh``, one matmul the caller makes); each step adds ``h_{t-1} @ W_hh^T`` and applies
the gate arithmetic (gates i, f, g, o, PyTorch's order): ``i, f, o = sigmoid(.)``,
``g = tanh(.)``, ``c_t = f c_{t-1} + i g``, ``h_t = o tanh(c_t)``. Outputs: ``output``
(T, B, H) the hidden states, ``cells`` (T, B, H) the cell states, ``gates`` (T, B, 4H)
the gate activations (what the adjoint needs; the layer uses ``output``, ``output[-1]``
and ``cells[-1]``). ``reverse``: the steps run from T-1 down to 0 (a bidirectional
layer's second direction), the outputs stay in time order.

Not a public function (``tg.nn.LSTM`` calls it): a sequence op so that a step costs
two compiled calls, not a dozen recorded ops. On NumPy float32/float64 arrays the
step is a BLAS matmul into a preallocated (4H, B) buffer (``W_hh @ h^T``: ~1.5x
faster in OpenBLAS than ``h @ W_hh^T`` at these shapes) and one Numba kernel for
the gate arithmetic writing the step's slices of the outputs; the adjoint is the
reverse loop (one kernel and one matmul per step) and one matmul for the whole
``W_hh`` gradient. Float32 kernels use the fusion module's vectorisable ``exp``/
``tanh``. Other arrays (CuPy, float16) run the same steps as whole-array code.

When the adjoint records (``create_graph``, forward over reverse) or a gradient
reaches the ``gates`` output, it is written with the ops namespace over the saved
outputs, so it differentiates again; ``jvp`` the same way.
"""
import numpy as np

from ...devices import xp_of
from ...dispatch import bind
from ...devices import cpu as _cpu
from ...fusion import approx as _approx
from ..._util import op_error
from .._decl import register, Sample, TensorSpec, one_dtype, rand as _rand

__all__ = ["lstm_layer"]


# ---------------------------------------------------------------- compiled steps
def _source(dtype):
    f32 = np.dtype(dtype) == np.float32
    t = "np.float32" if f32 else "np.float64"
    if f32:
        head = [f"from tapegrad.fusion.approx import helpers as _approx  # {_approx.tag()}",
                "_A = _approx()"] + [f"{h} = _A.{h}" for h in
                                     _approx.needed(["sigmoid", "tanh"])]
        def sig(e):
            return f"_sigmoid_f32({e})"
        tanh = "_tanh_f32"
    else:  # libm; a Python helper would not be compiled, so the sigmoid is inline
        head = []

        def sig(e):
            return f"_one / (_one + np.exp(-({e})))"
        tanh = "np.tanh"
    # Loops of one output each over a row: with several outputs LLVM's vectoriser
    # gives up on the aliasing checks between the arrays (and the transcendental
    # helpers then run scalar, ~4x slower overall).
    return "\n".join(["import numpy as np"] + head + [
        f"_one = {t}(1.0)",
        "",
        "",
        "def fwd(hg, xg, c_prev, gates, c, h):",
        "    # hg, xg, gates (B, 4H): the recurrent and input pre-activations, the gate",
        "    # activations (out); c_prev, c, h (B, H)",
        "    B, H = c.shape",
        "    for b in range(B):",
        "        xr, hr, gr = xg[b], hg[b], gates[b]",
        "        cp, cr, ho = c_prev[b], c[b], h[b]",
        "        for k in range(2 * H):",
        f"            gr[k] = {sig('xr[k] + hr[k]')}",
        "        for k in range(2 * H, 3 * H):",
        f"            gr[k] = {tanh}(xr[k] + hr[k])",
        "        for k in range(3 * H, 4 * H):",
        f"            gr[k] = {sig('xr[k] + hr[k]')}",
        "        for j in range(H):",
        "            cr[j] = gr[H + j] * cp[j] + gr[j] * gr[2 * H + j]",
        "        for j in range(H):",
        f"            ho[j] = gr[3 * H + j] * {tanh}(cr[j])",
        "",
        "",
        "def bwd(gh, dh, dc, gc, gates, c, c_prev, tc, dpre):",
        "    # gh, gc: the output's and the cells' gradients at this step; dh: the",
        "    # recurrent gradient from the later step (in/out: adds gh); dc in/out; tc a",
        "    # (B, H) scratch; dpre (B, 4H) out",
        "    B, H = c.shape",
        "    for b in range(B):",
        "        gr, dr, dcr, tr = gates[b], dh[b], dc[b], tc[b]",
        "        ghr, gcr, cr, cp = gh[b], gc[b], c[b], c_prev[b]",
        "        pr = dpre[b]",
        "        for j in range(H):",
        "            dr[j] += ghr[j]",
        "        for j in range(H):",
        f"            tr[j] = {tanh}(cr[j])",
        "        for j in range(H):",
        "            dcr[j] += gcr[j] + dr[j] * gr[3 * H + j] * (_one - tr[j] * tr[j])",
        "        for j in range(H):",
        "            pr[3 * H + j] = dr[j] * tr[j] * gr[3 * H + j] * (_one - gr[3 * H + j])",
        "        for j in range(H):",
        "            pr[j] = dcr[j] * gr[2 * H + j] * gr[j] * (_one - gr[j])",
        "        for j in range(H):",
        "            pr[H + j] = dcr[j] * cp[j] * gr[H + j] * (_one - gr[H + j])",
        "        for j in range(H):",
        "            pr[2 * H + j] = dcr[j] * gr[j] * (_one - gr[2 * H + j] * gr[2 * H + j])",
        "        for j in range(H):",
        "            dcr[j] *= gr[H + j]",
    ]) + "\n"


_KERNELS = {}


def _kernels(dtype):
    """(fwd, bwd) compiled for ``dtype`` (float32/float64), or None (Numba unusable)."""
    key = np.dtype(dtype).str
    if key not in _KERNELS:
        try:
            src = _source(dtype)
            _KERNELS[key] = tuple(
                _cpu.compile_source(("lstm_layer", name, src), src, name, parallel=False,
                                    error_model="numpy") for name in ("fwd", "bwd"))
        except Exception:  # numba missing or broken: whole-array code instead
            _KERNELS[key] = None
    return _KERNELS[key]


def _compiled_for(*arrays):
    a = arrays[0]
    if type(a) is not np.ndarray or a.dtype not in (np.float32, np.float64):
        return None
    return _kernels(a.dtype)


def _order(T, reverse):
    return range(T - 1, -1, -1) if reverse else range(T)


# ---------------------------------------------------------------- forward
def _lstm_layer_kernel(input_gates, h0, c0, weight_hh, *, reverse=False):
    xp = xp_of(input_gates)
    T, B, G = input_gates.shape
    H = G // 4
    dt = input_gates.dtype
    out = xp.empty((T, B, H), dt)
    cells = xp.empty((T, B, H), dt)
    gates = xp.empty((T, B, G), dt)
    if T == 0:
        return out, cells, gates
    ks = _compiled_for(input_gates)
    if ks is None:
        return _generic_forward(xp, input_gates, h0, c0, weight_hh, reverse, out, cells, gates)
    fwd = ks[0]
    xg = np.ascontiguousarray(input_gates)
    w = np.ascontiguousarray(weight_hh)
    h, c = np.ascontiguousarray(h0), np.ascontiguousarray(c0)
    hgT = np.empty((G, B), dt)
    hg = np.empty((B, G), dt)
    for t in _order(T, reverse):
        np.matmul(w, h.T, out=hgT)     # (4H, B): OpenBLAS's faster orientation here
        np.copyto(hg, hgT.T)
        fwd(hg, xg[t], c, gates[t], cells[t], out[t])
        h, c = out[t], cells[t]
    return out, cells, gates


def _sigmoid(xp, x):
    return 1 / (1 + xp.exp(-x))


def _generic_forward(xp, xg, h, c, w, reverse, out, cells, gates):
    H = h.shape[-1]
    for t in _order(xg.shape[0], reverse):
        pre = xg[t] + h @ w.T
        i, f = _sigmoid(xp, pre[:, :H]), _sigmoid(xp, pre[:, H:2 * H])
        g, o = xp.tanh(pre[:, 2 * H:3 * H]), _sigmoid(xp, pre[:, 3 * H:])
        c = f * c + i * g
        h = o * xp.tanh(c)
        gates[t] = xp.concatenate([i, f, g, o], axis=-1)
        cells[t], out[t] = c, h
    return out, cells, gates


def _lstm_layer_infer(input_gates, h0, c0, weight_hh, *, reverse=False):
    xs, hs, cs, ws = (tuple(s.shape) for s in (input_gates, h0, c0, weight_hh))
    dt = one_dtype("lstm_layer", (input_gates, h0, c0, weight_hh),
                   ("input_gates", "h0", "c0", "weight_hh"), floating=True)
    if len(xs) != 3 or xs[2] % 4:
        raise op_error("lstm_layer", f"input_gates of shape {xs}: expected (T, B, 4 * "
                                     f"hidden_size)", RuntimeError)
    T, B, G = xs
    H = G // 4
    for name, s in (("h0", hs), ("c0", cs)):
        if s != (B, H):
            raise op_error("lstm_layer", f"{name} of shape {s}: expected (batch, hidden_size) "
                                         f"= {(B, H)} for input_gates {xs}", RuntimeError)
    if ws != (G, H):
        raise op_error("lstm_layer", f"weight_hh of shape {ws}: expected (4 * hidden_size, "
                                     f"hidden_size) = {(G, H)}", RuntimeError)
    return (TensorSpec((T, B, H), dt), TensorSpec((T, B, H), dt), TensorSpec((T, B, G), dt))


# ---------------------------------------------------------------- adjoint
def _lstm_layer_vjp(ctx, g):
    xg, h0, c0, w = ctx.inputs
    out, cells, gates = ctx.out
    g_out, g_cells, g_gates = g
    reverse = ctx.attrs.get("reverse", False)
    ks = _compiled_for(out)
    if (ks is not None and g_gates is None and type(out) is np.ndarray
            and type(w) is np.ndarray and (g_out is None or type(g_out) is np.ndarray)
            and (g_cells is None or type(g_cells) is np.ndarray)):
        return _fast_vjp(ks[1], ctx.needs_input_grad, h0, c0, w, out, cells, gates, g_out,
                         g_cells, reverse)
    return _ops_vjp(ctx.m, ctx.needs_input_grad, h0, c0, w, out, cells, gates, g_out,
                    g_cells, g_gates, reverse)


def _prev_states(h0, out, reverse):
    """h_{t-1} of every step t, in time order, as one (T, B, H) array."""
    T = out.shape[0]
    hp = np.empty_like(out)
    if reverse:
        hp[:T - 1] = out[1:]
        hp[T - 1] = h0
    else:
        hp[1:] = out[:T - 1]
        hp[0] = h0
    return hp


def _fast_vjp(bwd, needs, h0, c0, w, out, cells, gates, g_out, g_cells, reverse):
    T, B, H = out.shape
    dt = out.dtype
    zeros = np.zeros((B, H), dt)
    if T == 0:
        return (np.zeros((0, B, 4 * H), dt), np.zeros_like(h0), np.zeros_like(c0),
                np.zeros_like(w))
    g_out = None if g_out is None else np.ascontiguousarray(g_out, dt)
    g_cells = None if g_cells is None else np.ascontiguousarray(g_cells, dt)
    w = np.ascontiguousarray(w)
    c0 = np.ascontiguousarray(c0)
    dpre = np.empty((T, B, 4 * H), dt)
    dh_rec = np.zeros((B, H), dt)
    dc = np.zeros((B, H), dt)
    tc = np.empty((B, H), dt)
    steps = list(_order(T, reverse))
    for k in range(T - 1, -1, -1):
        t = steps[k]
        c_prev = c0 if k == 0 else cells[steps[k - 1]]
        bwd(zeros if g_out is None else g_out[t], dh_rec, dc,
            zeros if g_cells is None else g_cells[t], gates[t], cells[t], c_prev, tc, dpre[t])
        if k or needs[1]:
            np.matmul(dpre[t], w, out=dh_rec)
    gw = None
    if needs[3]:
        hp = _prev_states(h0, out, reverse)
        gw = dpre.reshape(T * B, 4 * H).T @ hp.reshape(T * B, H)
    return (dpre if needs[0] else None, dh_rec if needs[1] else None,
            dc if needs[2] else None, gw)


def _ops_vjp(m, needs, h0, c0, w, out, cells, gates, g_out, g_cells, g_gates, reverse):
    """The adjoint with the ops namespace: it records when the walk records, and runs
    on raw arrays (CuPy, a gradient of ``gates``) when it does not."""
    T, B, H = out.shape
    if T == 0:
        return (m.zeros_like(gates), m.zeros_like(h0), m.zeros_like(c0), m.zeros_like(w))
    steps = list(_order(T, reverse))
    dh = m.zeros_like(h0)
    dc = m.zeros_like(c0)
    dpres = [None] * T
    prev_h = [None] * T
    for k in range(T - 1, -1, -1):
        t = steps[k]
        c_prev = c0 if k == 0 else cells[steps[k - 1]]
        prev_h[t] = h0 if k == 0 else out[steps[k - 1]]
        gt = gates[t]
        i, f, gg, o = (gt[:, j * H:(j + 1) * H] for j in range(4))
        if g_out is not None:
            dh = dh + g_out[t]
        if g_cells is not None:
            dc = dc + g_cells[t]
        tc = m.tanh(cells[t])
        d = dc + dh * o * (1 - tc * tc)
        dgate = m.cat([d * gg, d * c_prev, d * i, dh * tc], dim=-1)
        if g_gates is not None:
            dgate = dgate + g_gates[t]
        dpre = dgate * m.cat([i * (1 - i), f * (1 - f), 1 - gg * gg, o * (1 - o)], dim=-1)
        dpres[t] = dpre
        dh = m.matmul(dpre, w)
        dc = d * f
    dxg = m.stack(dpres, dim=0)
    gw = None
    if needs[3]:
        hp = m.stack(prev_h, dim=0)
        gw = m.matmul(m.mT(m.reshape(dxg, (T * B, 4 * H))), m.reshape(hp, (T * B, H)))
    return (dxg if needs[0] else None, dh if needs[1] else None, dc if needs[2] else None, gw)


def _lstm_layer_jvp(ctx, txg, th0, tc0, tw):
    xg, h0, c0, w = ctx.inputs
    out, cells, gates = ctx.out
    m = ctx.m
    T, B, H = out.shape
    if T == 0 or all(t is None for t in (txg, th0, tc0, tw)):
        return (None, None, None)
    th = m.zeros_like(h0) if th0 is None else th0
    tc = m.zeros_like(c0) if tc0 is None else tc0
    ths, tcs, tgs = [None] * T, [None] * T, [None] * T
    steps = list(_order(T, reverse=ctx.attrs.get("reverse", False)))
    for k, t in enumerate(steps):
        h_prev = h0 if k == 0 else out[steps[k - 1]]
        c_prev = c0 if k == 0 else cells[steps[k - 1]]
        tpre = m.matmul(th, m.mT(w))
        if tw is not None:
            tpre = tpre + m.matmul(h_prev, m.mT(tw))
        if txg is not None:
            tpre = tpre + txg[t]
        gt = gates[t]
        i, f, gg, o = (gt[:, j * H:(j + 1) * H] for j in range(4))
        tgate = tpre * m.cat([i * (1 - i), f * (1 - f), 1 - gg * gg, o * (1 - o)], dim=-1)
        ti, tf, tg_, to = (tgate[:, j * H:(j + 1) * H] for j in range(4))
        tc = tf * c_prev + f * tc + ti * gg + i * tg_
        tcc = m.tanh(cells[t])
        th = to * tcc + o * (1 - tcc * tcc) * tc
        ths[t], tcs[t], tgs[t] = th, tc, tgate
    return (m.stack(ths, dim=0), m.stack(tcs, dim=0), m.stack(tgs, dim=0))


# ---------------------------------------------------------------- declaration
def _samples(dtype=np.float64):
    def s(T, B, H, seed, reverse=False):
        r = lambda shape, k: _rand(shape, dtype, -1.0, 1.0, seed=seed * 10 + k)  # noqa: E731
        attrs = {"reverse": True} if reverse else {}
        return Sample((r((T, B, 4 * H), 1), r((B, H), 2), r((B, H), 3), r((4 * H, H), 4)),
                      attrs)
    return [s(3, 2, 2, 1), s(4, 1, 3, 2, reverse=True), s(1, 3, 1, 3)]


def _torch_lstm_layer(torch, xg, h, c, w, reverse=False):
    T = xg.shape[0]
    H = h.shape[-1]
    outs, cs, gs = [None] * T, [None] * T, [None] * T
    for t in _order(T, reverse):
        pre = xg[t] + h @ w.T
        i, f = torch.sigmoid(pre[:, :H]), torch.sigmoid(pre[:, H:2 * H])
        g, o = torch.tanh(pre[:, 2 * H:3 * H]), torch.sigmoid(pre[:, 3 * H:])
        c = f * c + i * g
        h = o * torch.tanh(c)
        outs[t], cs[t], gs[t] = h, c, torch.cat([i, f, g, o], -1)
    return torch.stack(outs), torch.stack(cs), torch.stack(gs)


def _errors():
    r = _rand
    return [((r((3, 2, 8)), r((2, 2)), r((2, 2)), r((8, 3))), {}, RuntimeError),
            ((r((3, 2, 8)), r((1, 2)), r((2, 2)), r((8, 2))), {}, RuntimeError),
            ((r((3, 2, 7)), r((2, 2)), r((2, 2)), r((7, 2))), {}, RuntimeError),
            ((r((3, 2, 8)), r((2, 2)), r((2, 2)).astype(np.float32), r((8, 2))), {},
             RuntimeError)]


LSTM_LAYER = register(
    name="lstm_layer", kernel=_lstm_layer_kernel, infer=_lstm_layer_infer,
    args=("input_gates", "h0", "c0", "weight_hh"), nout=3, vjp=_lstm_layer_vjp,
    jvp=_lstm_layer_jvp, saves=("h0", "c0", "weight_hh", "out"), samples=_samples,
    error_samples=_errors, torch=_torch_lstm_layer,
    doc="One LSTM layer's recurrence over a sequence (see tapegrad/ops/nn/rnn.py).")


def lstm_layer(input_gates, h0, c0, weight_hh, reverse=False):
    """``(output, cells, gates)`` of one LSTM direction over the sequence (module doc)."""
    return bind(LSTM_LAYER, input_gates, h0, c0, weight_hh, reverse=bool(reverse))
