"""Recurrent layers' sequence ops: one direction of one layer over a whole sequence.

``lstm_layer(input_gates, h0, c0, weight_hh, reverse=False) -> (output, cells, gates)``
``gru_layer(input_gates, h0, weight_hh, bias_hh=None, reverse=False) -> (output, gates)``
``rnn_layer(input_gates, h0, weight_hh, reverse=False, nonlinearity="tanh") -> output``

``input_gates`` (T, B, kH) is the input projection of every step (one matmul the
caller makes: ``x @ W_ih^T + b_ih``, plus ``b_hh`` for the LSTM and RNN, where it
folds); each step adds ``h_{t-1} @ W_hh^T`` (the GRU: ``+ b_hh``) and applies the
cell's arithmetic, PyTorch's equations and gate orders:

- LSTM (i, f, g, o): ``i, f, o = sigmoid(.)``, ``g = tanh(.)``, ``c_t = f c_{t-1} +
  i g``, ``h_t = o tanh(c_t)``; ``cells`` (T, B, H) the cell states, ``gates``
  (T, B, 4H) the gate activations;
- GRU (r, z, n): ``r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)``, ``n = tanh(x_n +
  r (W_hn h + b_hn))``, ``h_t = (1 - z) n + z h_{t-1}``; ``gates`` (T, B, 4H) holds
  r, z, n and ``W_hn h + b_hn``;
- RNN: ``h_t = tanh(.)`` or ``relu(.)``.

``output`` (T, B, H) the hidden states; the extra outputs are what the adjoint needs
(a layer uses ``output``, ``output[-1]`` and the LSTM's ``cells[-1]``). ``reverse``:
the steps run from T-1 down to 0 (a bidirectional layer's second direction), the
outputs stay in time order.

``LSTM_ROWS`` (``lstm_layer_rows(index, table, h0, c0, weight_hh, reverse=False)``,
not registered, not differentiable) is ``lstm_layer(table[index], ...)`` with each step
reading its rows of ``table``: tg.compile's embedding-projection rewrite puts it in
place of an embedding gather whose only reader is an ``lstm_layer``.

Not public functions (``tg.nn.LSTM``/``GRU``/``RNN`` and their cells call them):
sequence ops so that a step costs two compiled calls, not a dozen recorded ops. One
loop skeleton serves the three: on NumPy float32/float64 arrays the forward step is
a BLAS matmul into a preallocated (kH, B) buffer (``W_hh @ h^T``: ~1.5x faster in
OpenBLAS than ``h @ W_hh^T`` at these shapes) and one Numba kernel for the cell's
arithmetic writing the step's slices of the outputs; the adjoint is the reverse loop
(one kernel and one matmul per step) and one matmul for the whole ``W_hh`` gradient.
The batch rows are independent: with several CPU threads and enough work per step
(``_parts``), each thread runs both loops over the whole sequence on its own block of
rows, BLAS on one thread inside, with no synchronisation between steps.
The LSTM (the op and ``lstm_layer_rows``) runs its whole sequence as one compiled
loop each way instead (``_SEQ``), each step's matmul called from the loop (``h @
W_hh^T`` against a contiguous copy of ``W_hh^T``): in float32 where the host has
AVX-512, register tiles (``devices/cpu_kernels/tiled_gemm.py``, twice OpenBLAS's speed
at these row counts), else NumPy's OpenBLAS (``devices/cpu_kernels/blas.py``); no Python
per step, one such loop per thread on its block of batch rows where a step has enough
work (``_seq_parts``, on by default: the loops hold no GIL); where that BLAS is not
found, the Python step loops above.
Float32 kernels use the fusion module's vectorisable ``exp``/``tanh``. Other arrays
(CuPy, float16) run one written-once step (``_cell``) as whole-array code; the same
step, with PyTorch as the library, is the ops' oracle, and with the ops namespace the
batching rule's path for batched weights.

When the adjoint records (``create_graph``, forward over reverse) or a gradient
reaches an auxiliary output (``cells``, ``gates``), it is written with the ops
namespace over the saved outputs, so it differentiates again; ``jvp`` the same way.
Batching (``tg.vmap``): unbatched weights fold the vmapped dim into the op's batch
dim (one op call); batched weights run the step with the ops namespace, one batched
matmul per step.
"""
from types import SimpleNamespace

import numpy as np

from ..._util import op_error, value_range
from ...devices import cpu as _cpu, xp_of
from ...devices.cpu_kernels.tiled_gemm import matmul as _gemm
from ...dispatch import bind
from ...fusion import approx as _approx
from ...ops_registry.opdef import OpDef, validate
from .. import _vmap
from .._decl import Sample, TensorSpec, one_dtype, rand as _rand, register

__all__ = ["lstm_layer", "gru_layer", "rnn_layer"]


# ---------------------------------------------------------------- compiled steps
# Loops of one output each over a row: with several outputs LLVM's vectoriser gives
# up on the aliasing checks between the arrays (and the transcendental helpers then
# run scalar, ~4x slower overall). Each loop counts from 0 and offsets its indices
# (``gr[2 * H + j]``): LLVM did not vectorise loops over ``range(2 * H, 3 * H)``
# (likely Numba's negative-index wraparound on an index it cannot prove
# non-negative), and the LSTM step's g and o gates ran scalar: 27 against 10 us a
# step at B 32, H 256 on an AMD Zen 5, the same results bit for bit.
# ``{S(e)}``: sigmoid of e; ``{T}``: tanh.
_BODIES = {
    "lstm": """
def fwd(hg, xg, c_prev, gates, c, h):
    # hg, xg, gates (B, 4H): the recurrent and input pre-activations, the gate
    # activations (out); c_prev, c, h (B, H)
    B, H = c.shape
    for b in range(B):
        xr, hr, gr = xg[b], hg[b], gates[b]
        cp, cr, ho = c_prev[b], c[b], h[b]
        for k in range(2 * H):
            gr[k] = {S(xr[k] + hr[k])}
        for j in range(H):
            gr[2 * H + j] = {T}(xr[2 * H + j] + hr[2 * H + j])
        for j in range(H):
            gr[3 * H + j] = {S(xr[3 * H + j] + hr[3 * H + j])}
        for j in range(H):
            cr[j] = gr[H + j] * cp[j] + gr[j] * gr[2 * H + j]
        for j in range(H):
            ho[j] = gr[3 * H + j] * {T}(cr[j])


def bwd(gh, dh, dc, gc, gates, c, c_prev, tc, dpre):
    # gh, gc: the output's and the cells' gradients at this step; dh: the recurrent
    # gradient from the later step (in/out: adds gh); dc in/out; tc a (B, H)
    # scratch; dpre (B, 4H) out
    B, H = c.shape
    for b in range(B):
        gr, dr, dcr, tr = gates[b], dh[b], dc[b], tc[b]
        ghr, gcr, cr, cp = gh[b], gc[b], c[b], c_prev[b]
        pr = dpre[b]
        for j in range(H):
            dr[j] += ghr[j]
        for j in range(H):
            tr[j] = {T}(cr[j])
        for j in range(H):
            dcr[j] += gcr[j] + dr[j] * gr[3 * H + j] * (_one - tr[j] * tr[j])
        for j in range(H):
            pr[3 * H + j] = dr[j] * tr[j] * gr[3 * H + j] * (_one - gr[3 * H + j])
        for j in range(H):
            pr[j] = dcr[j] * gr[2 * H + j] * gr[j] * (_one - gr[j])
        for j in range(H):
            pr[H + j] = dcr[j] * cp[j] * gr[H + j] * (_one - gr[H + j])
        for j in range(H):
            pr[2 * H + j] = dcr[j] * gr[j] * (_one - gr[2 * H + j] * gr[2 * H + j])
        for j in range(H):
            dcr[j] *= gr[H + j]
""",
    "gru": """
def fwd(hg, xg, bias, h_prev, gates, h):
    # hg, xg (B, 3H): h_{t-1} @ W_hh^T and the input pre-activations; bias (3H,) b_hh;
    # gates (B, 4H) out: r, z, n, W_hn h + b_hn; h_prev, h (B, H)
    B, H = h.shape
    for b in range(B):
        xr, hr, gr = xg[b], hg[b], gates[b]
        hp, ho = h_prev[b], h[b]
        for k in range(2 * H):
            gr[k] = {S(xr[k] + hr[k] + bias[k])}
        for j in range(H):
            gr[3 * H + j] = hr[2 * H + j] + bias[2 * H + j]
        for j in range(H):
            gr[2 * H + j] = {T}(xr[2 * H + j] + gr[j] * gr[3 * H + j])
        for j in range(H):
            ho[j] = gr[2 * H + j] + gr[H + j] * (hp[j] - gr[2 * H + j])


def bwd(gh, dh, gates, h_prev, dx, dhg):
    # gh: the output's gradient at this step; dh (B, H): in, the recurrent gradient
    # from the later step; out, its part that passes by W_hh (dh z); dx, dhg (B, 3H)
    # out: the input- and hidden-side pre-activation gradients
    B, H = dh.shape
    for b in range(B):
        gr, dr, ghr, hp = gates[b], dh[b], gh[b], h_prev[b]
        xr, hr = dx[b], dhg[b]
        for j in range(H):
            dr[j] += ghr[j]
        for j in range(H):
            xr[2 * H + j] = dr[j] * (_one - gr[H + j]) * (_one - gr[2 * H + j] * gr[2 * H + j])
        for j in range(H):
            hr[2 * H + j] = xr[2 * H + j] * gr[j]
        for j in range(H):
            xr[H + j] = dr[j] * (hp[j] - gr[2 * H + j]) * gr[H + j] * (_one - gr[H + j])
        for j in range(H):
            xr[j] = xr[2 * H + j] * gr[3 * H + j] * gr[j] * (_one - gr[j])
        for k in range(2 * H):
            hr[k] = xr[k]
        for j in range(H):
            dr[j] *= gr[H + j]
""",
    "rnn_tanh": """
def fwd(hg, xg, h):
    B, H = h.shape
    for b in range(B):
        xr, hr, ho = xg[b], hg[b], h[b]
        for j in range(H):
            ho[j] = {T}(xr[j] + hr[j])


def bwd(gh, dh, h, dpre):
    B, H = h.shape
    for b in range(B):
        dr, ghr, ho, pr = dh[b], gh[b], h[b], dpre[b]
        for j in range(H):
            dr[j] += ghr[j]
        for j in range(H):
            pr[j] = dr[j] * (_one - ho[j] * ho[j])
""",
    "rnn_relu": """
def fwd(hg, xg, h):
    B, H = h.shape
    for b in range(B):
        xr, hr, ho = xg[b], hg[b], h[b]
        for j in range(H):
            v = xr[j] + hr[j]
            ho[j] = _zero if v < _zero else v


def bwd(gh, dh, h, dpre):
    B, H = h.shape
    for b in range(B):
        dr, ghr, ho, pr = dh[b], gh[b], h[b], dpre[b]
        for j in range(H):
            dr[j] += ghr[j]
        for j in range(H):
            pr[j] = dr[j] if ho[j] > _zero else _zero
""",
}


# the LSTM step reading its input gates as rows of a table (``lstm_layer_rows``): row
# ``ix[b]`` of ``xg`` for batch row ``b``; its adjoint step is the LSTM's
_BODIES["lstm_rows"] = _BODIES["lstm"].replace(
    "def fwd(hg, xg, c_prev,", "def fwd(hg, xg, ix, c_prev,").replace(
    "xr, hr, gr = xg[b],", "xr, hr, gr = xg[ix[b]],")


def _source(kind, dtype):
    f32 = np.dtype(dtype) == np.float32
    t = "np.float32" if f32 else "np.float64"
    if f32:
        head = [f"from tapegrad.fusion.approx import helpers as _approx  # {_approx.tag()}",
                "_A = _approx()"] + [f"{h} = _A.{h}" for h in
                                     _approx.needed(["sigmoid", "tanh"])]
        sig, tanh = "_sigmoid_f32({})", "_tanh_f32"
    else:  # libm; a Python helper would not be compiled, so the sigmoid is inline
        head, sig, tanh = [], "_one / (_one + np.exp(-({})))", "np.tanh"
    body = _BODIES[kind].replace("{T}", tanh)
    while "{S(" in body:      # {S(expr)} -> the sigmoid of expr (expr has no braces)
        a = body.index("{S(")
        b = body.index(")}", a)
        body = body[:a] + sig.format(body[a + 3:b]) + body[b + 2:]
    return "\n".join(["import numpy as np"] + head + [f"_one = {t}(1.0)",
                                                      f"_zero = {t}(0.0)", "", body])


# The LSTM's whole sequence in one compiled loop per block of batch rows (``lo:hi``):
# each step's matmul calls BLAS from the loop (``devices/cpu_kernels/blas.py``), so a
# step costs no Python, and the loop holds no GIL (one per thread, on its own rows).
# ``h0``, ``c0``, ``zeros`` come as (1, B, H) and ``g_out``, ``g_cells`` as (T, B, H)
# (a (1, B, H) placeholder where ``has_*`` is false) so that every row slice the
# step kernels get has one array type.
_SEQ = """
_fwd = _h.helper(fwd, fastmath=_FM)
_bwd = _h.helper(bwd, fastmath=_FM)


def fwd_seq(wT, xg, ix, h0, c0, gates, cells, out, lo, hi, reverse, zero_h0, hg):
    # wT (H, 4H): W_hh^T, contiguous; hg (hi - lo, 4H) scratch: h_{t-1} @ W_hh^T
    T = out.shape[0]
    for k in range(T):
        t = T - 1 - k if reverse else k
        p = t + 1 if reverse else t - 1
        if k == 0:
            cp = c0[0, lo:hi]
            if zero_h0:
                hg[:, :] = _zero
            else:
                _gemm(h0[0, lo:hi], wT, hg, False)
        else:
            cp = cells[p, lo:hi]
            _gemm(out[p, lo:hi], wT, hg, False)
        _fwd(hg, {XG}, cp, gates[t, lo:hi], cells[t, lo:hi], out[t, lo:hi])


def bwd_seq(w, g_out, g_cells, zeros, has_gout, has_gcells, gates, cells, c0, dpre, dh,
            dc, tc, lo, hi, reverse, need_h0, ix, gtab):
    # dh, dc (B, H): out, h0's and c0's gradients; tc (B, H) scratch; dpre (T, B, 4H)
    # out; each step then dh = dpre[t] @ W_hh; {ROWS}
    T = gates.shape[0]
    for k in range(T - 1, -1, -1):
        t = T - 1 - k if reverse else k
        p = t + 1 if reverse else t - 1
        cp = c0[0, lo:hi] if k == 0 else cells[p, lo:hi]
        gh = g_out[t, lo:hi] if has_gout else zeros[0, lo:hi]
        gc = g_cells[t, lo:hi] if has_gcells else zeros[0, lo:hi]
        _bwd(gh, dh[lo:hi], dc[lo:hi], gc, gates[t, lo:hi], cells[t, lo:hi], cp,
             tc[lo:hi], dpre[t, lo:hi])
        if k or need_h0:
            _gemm(dpre[t, lo:hi], w, dh[lo:hi], False)
{ROWS_ADD}"""
# lstm_rows: each step's input-gate gradients added into rows ix[t, b] of gtab (the
# gradient of the table the forward read its input gates from), while they are in cache
_ROWS_ADD = """        for b in range(lo, hi):
            d, r = dpre[t, b], gtab[ix[t, b]]
            for j in range(d.shape[0]):
                r[j] += d[j]
"""
_SEQ_KERNELS = {}


def _seq_kernels(kind, dtype):
    """(fwd_seq, bwd_seq) of ``kind`` ("lstm"; "lstm_rows": the forward reads its input
    gates as rows ``ix`` of a table, the adjoint adds their gradients into the table's)
    for ``dtype``, or None (Numba unusable, or no GEMM it can call)."""
    key = (kind, np.dtype(dtype).str)
    if key not in _SEQ_KERNELS:
        _SEQ_KERNELS[key] = None
        try:
            from ...devices.cpu_kernels import blas, tiled_gemm
            f32 = np.dtype(dtype) == np.float32
            if f32 and tiled_gemm.load():
                gemm = (f"from tapegrad.devices.cpu_kernels.tiled_gemm import gemm32 as _gemm"
                        f"  # tiles v{tiled_gemm.VERSION}")
            elif blas.load():
                gemm = (f"from tapegrad.devices.cpu_kernels.blas import gemm{32 if f32 else 64}"
                        f" as _gemm  # blas v{blas.VERSION}")
            else:
                gemm = None
            if gemm is not None:
                rows = kind == "lstm_rows"
                src = _source(kind, dtype) + _SEQ.replace(
                    "{XG}", "xg, ix[t, lo:hi]" if rows else "xg[t, lo:hi]").replace(
                    "{ROWS}", "ix (T, B), gtab (V, 4H): in/out, each step's rows added" if
                    rows else "ix, gtab unused").replace("{ROWS_ADD}", _ROWS_ADD if rows else "")
                src = src.replace("import numpy as np", "\n".join([
                    "import numpy as np",
                    "from tapegrad.devices.cpu import jit_helpers as _jit_helpers", gemm,
                    "_h = _jit_helpers()",
                    f"_FM = {tuple(sorted(_cpu.FASTMATH_SUM))!r}"]), 1)
                _SEQ_KERNELS[key] = tuple(
                    _cpu.compile_source((f"{kind}_layer", name, src), src, name,
                                        parallel=False, fastmath=_cpu.FASTMATH_SUM,
                                        error_model="numpy")
                    for name in ("fwd_seq", "bwd_seq") if f"def {name}(" in src)
        except Exception:  # a kernel that does not compile: the Python step loops
            _SEQ_KERNELS[key] = None
    return _SEQ_KERNELS[key]


_KERNELS = {}


def _kernels(kind, dtype):
    """(fwd, bwd) of ``kind`` compiled for ``dtype`` (float32/float64), or None (Numba
    unusable)."""
    key = (kind, np.dtype(dtype).str)
    if key not in _KERNELS:
        try:
            src = _source(kind, dtype)
            _KERNELS[key] = tuple(
                _cpu.compile_source((f"{kind}_layer", name, src), src, name, parallel=False,
                                    fastmath=_cpu.FASTMATH_SUM, error_model="numpy")
                for name in ("fwd", "bwd")
                if f"def {name}(" in src)
        except Exception:  # numba missing or broken: whole-array code instead
            _KERNELS[key] = None
    return _KERNELS[key]


def _compiled_for(kind, *arrays):
    """The kernels when every (non-None) array is a NumPy float32/float64 array."""
    a = arrays[0]
    if any(v is not None and type(v) is not np.ndarray for v in arrays) or \
            a.dtype not in (np.float32, np.float64) or a.shape[0] == 0:
        return None
    return _kernels(kind, a.dtype)


_NO_INDEX = np.zeros((1, 1), np.int64)  # (fwd_seq's ix where the input gates are whole)


def _order(T, reverse):
    return range(T - 1, -1, -1) if reverse else range(T)


def _c(a, dt=None):
    return None if a is None else np.ascontiguousarray(a, dt)


# ---------------------------------------------------------------- one step, any library
class _Xp:
    """NumPy/CuPy with the names ``_cell`` uses (torch and the ops namespace have them)."""
    def __init__(self, xp):
        self.xp = xp
        self.tanh, self.matmul = xp.tanh, xp.matmul

    def sigmoid(self, x):
        return 1 / (1 + self.xp.exp(-x))

    def relu(self, x):
        return self.xp.maximum(x, 0)

    def cat(self, xs, dim):
        return self.xp.concatenate(xs, axis=dim)

    def stack(self, xs, dim):
        return self.xp.stack(xs, axis=dim)


def _cell(lib, kind, px, h, c, w, b):
    """One step's arithmetic with ``lib`` (``_Xp``, torch or the ops namespace): ``px``
    the input-side pre-activations, ``h``/``c`` the previous states (leading dims
    allowed on ``h``, ``w`` and ``b``: a batch of weights). ``(h', c', gates)``."""
    H = h.shape[-1]
    ph = lib.matmul(h, w.transpose(-1, -2))     # (.mT: not on every CuPy)
    if b is not None:
        ph = ph + b

    def cut(a, j):
        return a[..., j * H:(j + 1) * H]
    if kind == "lstm":
        pre = px + ph
        i, f, o = (lib.sigmoid(cut(pre, j)) for j in (0, 1, 3))
        g = lib.tanh(cut(pre, 2))
        c = f * c + i * g
        return o * lib.tanh(c), c, lib.cat([i, f, g, o], dim=-1)
    if kind == "gru":
        r, z = (lib.sigmoid(cut(px, j) + cut(ph, j)) for j in (0, 1))
        hn = cut(ph, 2)
        n = lib.tanh(cut(px, 2) + r * hn)
        return n + z * (h - n), None, lib.cat([r, z, n, hn], dim=-1)
    pre = px + ph
    return (lib.tanh(pre) if kind == "rnn_tanh" else lib.relu(pre)), None, None


def _run(lib, kind, xg, h, c, w, b, reverse):
    """The whole sequence with ``_cell`` (time at dim 0 of ``xg``): the op's outputs."""
    T = xg.shape[0]
    outs, cells, gates = [None] * T, [None] * T, [None] * T
    for t in _order(T, reverse):
        h, c, g = _cell(lib, kind, xg[t], h, c, w, b)
        outs[t], cells[t], gates[t] = h, c, g
    res = [lib.stack(outs, dim=0)]
    if kind == "lstm":
        res.append(lib.stack(cells, dim=0))
    if kind in ("lstm", "gru"):
        res.append(lib.stack(gates, dim=0))
    return tuple(res) if len(res) > 1 else res[0]


def _generic(kind, xg, h, c, w, b, reverse, shapes):
    xp = xp_of(xg)
    if xg.shape[0] == 0:
        res = tuple(xp.empty(s, xg.dtype) for s in shapes)
        return res if len(res) > 1 else res[0]
    return _run(_Xp(xp), kind, xg, h, c, w, b, reverse)


# ---------------------------------------------------------------- the loop skeleton
# The batch rows of a recurrence are independent: with several CPU threads and enough
# work per step, each thread runs the whole sequence on its own block of rows (its own
# small matmuls, BLAS on one thread), with no synchronisation between steps; a block
# keeps at least PART_ROWS rows (OpenBLAS's per-step GEMM loses half its speed below
# ~16 columns) and a step at least PART_MIN multiply-adds (B x kH x H). Off by default
# (PART_MIN infinite): on 2 idle cores the blocks, whose step loops share the GIL, took
# 1.5x the time of one loop with BLAS on both threads (charlm's LSTM layer: 52.6 against
# 34.4 ms); they only won where the cores were oversubscribed and BLAS threads spun.
PART_ROWS = 16
PART_MIN = float("inf")
PARTS = None  # the number of blocks (None: one per CPU thread)


def _parts(B, G, H):
    """The batch-row blocks the loops run on, one per thread, or None (one loop over
    all rows, BLAS on its own threads)."""
    nt = min(PARTS or _cpu.threads(), B // max(PART_ROWS, 1))
    if nt < 2 or B * G * H < PART_MIN:
        return None
    cut = [B * i // nt for i in range(nt + 1)]
    return [slice(lo, hi) for lo, hi in zip(cut, cut[1:])]


def _run_parts(parts, body):
    """``body(s)`` for each block ``s`` of ``parts`` on the CPU threads (BLAS on one
    thread inside), or ``body(slice(None))`` once where ``parts`` is None."""
    if parts is None:
        body(slice(None))
        return

    def work(n, which):
        for i in which:
            body(parts[i])
    with _cpu.blas_single_thread():
        _cpu.run_chunked(work, len(parts), np.arange(len(parts)), min_chunk=1)


def _fast_forward(w, h0, out, reverse, step):
    """Per step t (run order), on each block ``s`` of batch rows: ``hg = h_{t-1}[s] @
    W_hh^T`` into a preallocated buffer (zeros at the first step when h0 is zero),
    then ``step(t, p, hg, s)`` (``p`` the previous step's index, None first) writes
    the step's outputs for those rows, ``out[t, s]`` among them."""
    T, B, H = out.shape
    dt = out.dtype
    G = w.shape[0]
    order = _order(T, reverse)
    zero_h0 = not h0.any()

    def run(s):
        n = len(range(B)[s])
        hgT = np.empty((G, n), dt)
        hg = np.empty((n, G), dt)
        h, p = h0[s], None
        for t in order:
            if p is None and zero_h0:
                hg.fill(0)
            else:
                np.matmul(w, h.T, out=hgT)     # (kH, B): OpenBLAS's faster orientation
                np.copyto(hg, hgT.T)
            step(t, p, hg, s)
            h, p = out[t, s], t
    _run_parts(_parts(B, G, H), run)


# The LSTM's compiled sequence loops in blocks of batch rows, one per worker thread
# (BLAS on one thread inside), each at least SEQ_PART_ROWS rows, where a step has
# SEQ_PART_MIN multiply-adds (B x 4H x H). These loops hold no GIL, and each thread
# runs its own steps' cell arithmetic as well as its GEMMs, with no synchronisation
# between steps. On 2 cores of an AMD EPYC (Zen 3), with OpenBLAS's idle workers
# sleeping (``devices.cpu.tune_blas``), forward and backward in ms, one loop with BLAS
# on both threads against the blocks: B 32, H 64, T 16: 0.37/0.46 against 0.34/0.45;
# charlm's layer (B 32, H 256, T 64): 11.1/16.8 against 11.2/15.8 (on a busier VM
# 16.4/23.0 against 12.5/19.3); B 256, H 256, T 16: 17.0/30.8 against 15.4/28.1; only
# H 1024 (B 32) lost 4%, and below the threshold (B 32, H 32) the threads' start cost
# more than they gained.
SEQ_PART_ROWS = 16
SEQ_PART_MIN = 1 << 19


def _seq_parts(B, G, H):
    nt = min(PARTS or _cpu.threads(), B // max(SEQ_PART_ROWS, 1))
    if nt < 2 or B * G * H < SEQ_PART_MIN:
        return None
    cut = [B * i // nt for i in range(nt + 1)]
    return [slice(lo, hi) for lo, hi in zip(cut, cut[1:])]


def _run_seq(parts, body):
    """``body(s)`` for each block ``s`` of ``parts`` on worker threads (BLAS on one
    thread inside), or ``body(slice(None))`` where ``parts`` is None."""
    if parts is None:
        body(slice(None))
        return
    with _cpu.blas_single_thread():
        _cpu.run_on_workers([lambda s=s: body(s) for s in parts])


def _seq_forward(fwd_seq, w, xg, ix, h0, c0, out, cells, gates, reverse):
    """The LSTM's forward with the compiled sequence loop (``xg`` (T, B, 4H), or the
    table whose rows ``ix`` (T, B) each step reads), writing ``out``, ``cells``,
    ``gates``."""
    T, B, H = out.shape
    dt, G = out.dtype, gates.shape[-1]
    wT = np.ascontiguousarray(w.T)
    zero_h0 = not h0.any()
    h0, c0 = _c(h0).reshape(1, B, H), _c(c0).reshape(1, B, H)

    def run(s):
        lo, hi, _ = s.indices(B)
        fwd_seq(wT, xg, ix, h0, c0, gates, cells, out, lo, hi, reverse, zero_h0,
                np.empty((hi - lo, G), dt))
    _run_seq(_seq_parts(B, G, H), run)


def _seq_adjoint(bwd_seq, w, g_out, g_cells, gates, cells, c0, reverse, need_h0,
                 ix=None, n_rows=0):
    """The LSTM's reverse loop compiled: ``(dpre, dh0, dc0)``; with ``ix`` (T, B) (the
    "lstm_rows" loop): ``(dpre, dh0, dc0, gtab)``, ``gtab`` (n_rows, 4H) the input-gate
    gradients of the steps added per row of ``ix`` (the gradient of the table whose
    rows ``lstm_layer_rows`` read)."""
    T, B, H = cells.shape
    dt = cells.dtype
    zeros = np.zeros((1, B, H), dt)
    dpre = np.empty((T, B, 4 * H), dt)
    dh, dc, tc = np.zeros((B, H), dt), np.zeros((B, H), dt), np.empty((B, H), dt)
    w, c0 = _c(w), _c(c0).reshape(1, B, H)
    g_out = zeros if g_out is None else _c(g_out, dt)
    g_cells = zeros if g_cells is None else _c(g_cells, dt)
    has_gout, has_gcells = g_out is not zeros, g_cells is not zeros
    parts = _seq_parts(B, 4 * H, H)
    blocks = parts or [None]
    if ix is None:
        ix, tabs = _NO_INDEX, [np.zeros((1, 1), dt)] * len(blocks)
    else:  # (one table per block of rows: no two threads add into one row)
        ix = np.ascontiguousarray(ix, np.int64)
        tabs = [np.zeros((n_rows, 4 * H), dt) for _ in blocks]

    def run(s, i=0):
        lo, hi, _ = s.indices(B)
        bwd_seq(w, g_out, g_cells, zeros, has_gout, has_gcells, gates, cells, c0, dpre,
                dh, dc, tc, lo, hi, reverse, need_h0, ix, tabs[i])
    if parts is None:
        run(slice(None))
    else:
        with _cpu.blas_single_thread():
            _cpu.run_on_workers([lambda i=i, s=s: run(s, i) for i, s in enumerate(parts)])
    if ix is _NO_INDEX:
        return dpre, dh, dc
    for t in tabs[1:]:
        tabs[0] += t
    return dpre, dh, dc, tabs[0]


def _fast_adjoint(w, out, reverse, need_h0, dhg, step, carry=False):
    """The reverse loop, on each block ``s`` of batch rows: ``dh`` (rows, H) is the
    gradient reaching ``h_t[s]`` from later steps; ``step(t, p, dh, s)`` adds the
    output's gradient, writes ``dhg[t, s]`` (the hidden-side pre-activation gradient)
    and whatever else, and leaves in ``dh`` the part of ``h_{t-1}``'s gradient that
    does not pass by ``W_hh`` (``carry``: the GRU's ``dh z``; else ``dh`` is
    overwritten); then ``dh (+)= dhg[t, s] @ W_hh``. Returns h0's gradient."""
    T, B, H = out.shape
    dh = np.zeros((B, H), out.dtype)
    steps = list(_order(T, reverse))

    def run(s):
        d = dh[s]
        tmp = np.empty_like(d) if carry else None
        for k in range(T - 1, -1, -1):
            t = steps[k]
            step(t, steps[k - 1] if k else None, d, s)
            if k or need_h0:
                if carry:
                    np.matmul(dhg[t, s], w, out=tmp)
                    d += tmp
                else:
                    np.matmul(dhg[t, s], w, out=d)
    _run_parts(_parts(B, w.shape[0], H), run)
    return dh


def _weight_grad(dhg, h0, out, reverse):
    """``W_hh``'s gradient, the sum over steps of ``dhg[t]^T @ h_{t-1}``: one GEMM over
    the steps whose previous state is an output (contiguous row ranges of ``dhg`` and
    ``out``, no stacked copy of the previous states) plus the first step's with h0
    (none where h0 is zero)."""
    T, B, H = out.shape
    G = dhg.shape[-1]
    d2, o2 = dhg.reshape(T * B, G), out.reshape(T * B, H)
    if reverse:   # step t's previous state: out[t + 1]; the first step (t = T-1): h0
        gw = _gemm(d2[:(T - 1) * B].T, o2[B:])
        first = dhg[T - 1]
    else:
        gw = _gemm(d2[B:].T, o2[:(T - 1) * B])
        first = dhg[0]
    if h0.any():
        gw += first.T @ h0
    return gw


def _ops_adjoint(m, h0, w, out, g_out, reverse, step):
    """The reverse loop with the ops namespace (it records when the walk records, and
    runs on raw arrays when it does not): ``step(t, p, h_prev, dh)`` ->
    ``(dx_t, dhg_t or None (the same), the part of dh carried past W_hh or None)``.
    Returns ``(dxg, dhg, dh0, W_hh's gradient)``."""
    T, B, H = out.shape
    steps = list(_order(T, reverse))
    dh = m.zeros_like(h0)
    dxs, dhgs, hps = [None] * T, [None] * T, [None] * T
    same = True
    for k in range(T - 1, -1, -1):
        t = steps[k]
        hps[t] = h0 if k == 0 else out[steps[k - 1]]
        if g_out is not None:
            dh = dh + g_out[t]
        dxs[t], dhg, carry = step(t, steps[k - 1] if k else None, hps[t], dh)
        same = dhg is None
        dhgs[t] = dxs[t] if same else dhg
        dh = m.matmul(dhgs[t], w)
        if carry is not None:
            dh = carry + dh
    dxg = m.stack(dxs, dim=0)
    dhg = dxg if same else m.stack(dhgs, dim=0)
    G = dhg.shape[-1]
    gw = m.matmul(m.mT(m.reshape(dhg, (T * B, G))), m.reshape(m.stack(hps, dim=0), (T * B, H)))
    return dxg, dhg, dh, gw


def _ops_tangents(m, h0, w, out, reverse, th0, tw, step):
    """Forward mode step by step: ``step(t, p, h_prev, th_prev, tph)`` -> the step's
    state tangent, with ``tph`` the tangent of ``h_{t-1} @ W_hh^T``."""
    T = out.shape[0]
    th = m.zeros_like(h0) if th0 is None else th0
    ths = [None] * T
    steps = list(_order(T, reverse))
    for k, t in enumerate(steps):
        hp = h0 if k == 0 else out[steps[k - 1]]
        tph = m.matmul(th, m.mT(w))
        if tw is not None:
            tph = tph + m.matmul(hp, m.mT(tw))
        th = ths[t] = step(t, steps[k - 1] if k else None, hp, th, tph)
    return m.stack(ths, dim=0)


def _recording(*arrays):
    return any(a is not None and type(a) is not np.ndarray for a in arrays)


def _piece(a, j, H):
    return a[:, j * H:(j + 1) * H]


# ---------------------------------------------------------------- shape rules
def _infer(name, k, xg, h0, w, c0=None, b=None):
    names = ("input_gates", "h0", "c0", "weight_hh", "bias_hh")
    dt = one_dtype(name, (xg, h0, c0, w, b), names, floating=True)
    xs = tuple(xg.shape)
    if len(xs) != 3 or xs[2] % k:
        raise op_error(name, f"input_gates of shape {xs}: expected (T, B, {k} * "
                             f"hidden_size)", RuntimeError)
    T, B, G = xs
    H = G // k
    for n, s in (("h0", h0), ("c0", c0)):
        if s is not None and tuple(s.shape) != (B, H):
            raise op_error(name, f"{n} of shape {tuple(s.shape)}: expected (batch, "
                                 f"hidden_size) = {(B, H)} for input_gates {xs}", RuntimeError)
    if tuple(w.shape) != (G, H):
        raise op_error(name, f"weight_hh of shape {tuple(w.shape)}: expected ({k} * "
                             f"hidden_size, hidden_size) = {(G, H)}", RuntimeError)
    if b is not None and tuple(b.shape) != (G,):
        raise op_error(name, f"bias_hh of shape {tuple(b.shape)}: expected ({G},)",
                       RuntimeError)
    return T, B, H, dt


def _errors(k, c=False, b=False):
    """Bad calls: W_hh's shape, h0's, input_gates' last dim, mixed dtypes (, bias)."""
    r = _rand
    G = 2 * k

    def call(xg, h, w, dt=np.float64, bias=None):
        args = [r(xg), r(h).astype(dt)] + ([r((2, 2))] if c else []) + [r(w)]
        return tuple(args + ([bias] if b else []))
    out = [(call((3, 2, G), (2, 2), (G, 3)), {}, RuntimeError),
           (call((3, 2, G), (1, 2), (G, 2)), {}, RuntimeError),
           (call((3, 2, G), (2, 2), (G, 2), np.float32), {}, RuntimeError)]
    if k > 1:
        out.append((call((3, 2, G - 1), (2, 2), (G - 1, 2)), {}, RuntimeError))
    if b:
        out.append((call((3, 2, G), (2, 2), (G, 2), bias=r((G + 1,))), {}, RuntimeError))
    return out


def _samples(k, c=False, b=False, attrs=({},)):
    def samples(dtype=np.float64):
        def s(T, B, H, seed, reverse=False, bias=True, extra=None):
            def r(shape, j):
                return _rand(shape, dtype, -1.0, 1.0, seed=seed * 10 + j)
            args = [r((T, B, k * H), 1), r((B, H), 2)] + ([r((B, H), 3)] if c else [])
            args.append(r((k * H, H), 4))
            if b:
                args.append(r((k * H,), 5) if bias else None)
            at = dict(extra or {})
            if reverse:
                at["reverse"] = True
            return Sample(tuple(args), at)
        out = [s(3, 2, 2, 1, extra=attrs[0]), s(4, 1, 3, 2, reverse=True, extra=attrs[-1]),
               s(1, 3, 1, 3, bias=False)]
        return out
    return samples


def _buffers(out, specs, dt, inputs):
    """The step loops' output buffers: fresh, or the caller's ``out`` (one array, or
    a tuple for several outputs) where each is a C-contiguous NumPy array of its spec
    apart from every input; None where out does not fit (the caller computes, then
    copies into it)."""
    if out is None:
        return tuple(np.empty(s, dt) for s in specs)
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(specs) or not all(
            type(o) is np.ndarray and o.flags.c_contiguous and o.dtype == dt
            and o.shape == tuple(s) for o, s in zip(outs, specs)):
        return None
    if any(np.may_share_memory(o, a) for o in outs for a in inputs if a is not None):
        return None
    if len(outs) > 1 and any(np.may_share_memory(a, b) for i, a in enumerate(outs)
                             for b in outs[i + 1:]):
        return None
    return outs


def _into(out, result):
    """``result`` (one array or a tuple) copied into the caller's ``out``."""
    if isinstance(out, tuple):
        for o, r in zip(out, result):
            o[...] = r
    else:
        out[...] = result
    return out


# ---------------------------------------------------------------- LSTM
def _lstm_layer_kernel(input_gates, h0, c0, weight_hh, *, reverse=False, out=None):
    # out: None, or (out, cells, gates) buffers of the results' specs (tg.compile's
    # planned memory), written in place
    T, B, G = input_gates.shape
    H = G // 4
    specs = ((T, B, H), (T, B, H), (T, B, G))
    ks = _compiled_for("lstm", input_gates, h0, c0, weight_hh)
    bufs = None if ks is None else _buffers(out, specs, input_gates.dtype,
                                            (input_gates, h0, c0, weight_hh))
    if bufs is None:
        res = _generic("lstm", input_gates, h0, c0, weight_hh, None, reverse, specs) \
            if ks is None else _lstm_layer_kernel(input_gates, h0, c0, weight_hh,
                                                  reverse=reverse)
        return res if out is None else _into(out, res)
    out, cells, gates = bufs
    seq = _seq_kernels("lstm", input_gates.dtype)
    if seq is not None:
        _seq_forward(seq[0], weight_hh, _c(input_gates), _NO_INDEX, h0, c0, out, cells,
                     gates, reverse)
        return out, cells, gates
    fwd = ks[0]
    xg, c0 = _c(input_gates), _c(c0)
    _fast_forward(_c(weight_hh), _c(h0), out, reverse, lambda t, p, hg, s: fwd(
        hg, xg[t, s], c0[s] if p is None else cells[p, s], gates[t, s], cells[t, s],
        out[t, s]))
    return out, cells, gates


def _lstm_layer_infer(input_gates, h0, c0, weight_hh, *, reverse=False):
    T, B, H, dt = _infer("lstm_layer", 4, input_gates, h0, weight_hh, c0=c0)
    return (TensorSpec((T, B, H), dt), TensorSpec((T, B, H), dt),
            TensorSpec((T, B, 4 * H), dt))


def _lstm_layer_vjp(ctx, g):
    xg, h0, c0, w = ctx.inputs
    out, cells, gates = ctx.out
    g_out, g_cells, g_gates = g
    needs = ctx.needs_input_grad
    reverse = ctx.attrs.get("reverse", False)
    ks = _compiled_for("lstm", out, w, g_out, g_cells, h0, c0)
    seq = None if ks is None else _seq_kernels("lstm", out.dtype)
    if seq is not None and g_gates is None:
        dpre, dh, dc = _seq_adjoint(seq[1], w, g_out, g_cells, gates, cells, c0, reverse,
                                    needs[1])
        return (dpre if needs[0] else None, dh if needs[1] else None,
                dc if needs[2] else None,
                _weight_grad(dpre, h0, out, reverse) if needs[3] else None)
    if ks is not None and g_gates is None:
        bwd = ks[1]
        T, B, H = out.shape
        dt = out.dtype
        zeros = np.zeros((B, H), dt)
        g_out, g_cells, c0 = _c(g_out, dt), _c(g_cells, dt), _c(c0)
        dpre = np.empty((T, B, 4 * H), dt)
        dc = np.zeros((B, H), dt)
        tc = np.empty((B, H), dt)
        dh = _fast_adjoint(_c(w), out, reverse, needs[1], dpre, lambda t, p, dh, s: bwd(
            zeros[s] if g_out is None else g_out[t, s], dh, dc[s],
            zeros[s] if g_cells is None else g_cells[t, s], gates[t, s], cells[t, s],
            c0[s] if p is None else cells[p, s], tc[s], dpre[t, s]))
        return (dpre if needs[0] else None, dh if needs[1] else None,
                dc if needs[2] else None,
                _weight_grad(dpre, h0, out, reverse) if needs[3] else None)
    m = ctx.m
    if out.shape[0] == 0:
        return (m.zeros_like(gates), m.zeros_like(h0), m.zeros_like(c0), m.zeros_like(w))
    H = out.shape[-1]
    dc = m.zeros_like(c0)

    def step(t, p, hp, dh):
        nonlocal dc
        c_prev = c0 if p is None else cells[p]
        i, f, gg, o = (_piece(gates[t], j, H) for j in range(4))
        if g_cells is not None:
            dc = dc + g_cells[t]
        tc = m.tanh(cells[t])
        d = dc + dh * o * (1 - tc * tc)
        dgate = m.cat([d * gg, d * c_prev, d * i, dh * tc], dim=-1)
        if g_gates is not None:
            dgate = dgate + g_gates[t]
        dc = d * f
        return (dgate * m.cat([i * (1 - i), f * (1 - f), 1 - gg * gg, o * (1 - o)], dim=-1),
                None, None)
    dxg, _, dh, gw = _ops_adjoint(m, h0, w, out, g_out, reverse, step)
    return (dxg if needs[0] else None, dh if needs[1] else None, dc if needs[2] else None,
            gw if needs[3] else None)


def _lstm_layer_jvp(ctx, txg, th0, tc0, tw):
    xg, h0, c0, w = ctx.inputs
    out, cells, gates = ctx.out
    m = ctx.m
    T, B, H = out.shape
    if T == 0 or all(t is None for t in (txg, th0, tc0, tw)):
        return (None, None, None)
    tc = m.zeros_like(c0) if tc0 is None else tc0
    tcs, tgs = [None] * T, [None] * T

    def step(t, p, hp, th, tpre):
        nonlocal tc
        c_prev = c0 if p is None else cells[p]
        if txg is not None:
            tpre = tpre + txg[t]
        i, f, gg, o = (_piece(gates[t], j, H) for j in range(4))
        tgate = tpre * m.cat([i * (1 - i), f * (1 - f), 1 - gg * gg, o * (1 - o)], dim=-1)
        ti, tf, tg_, to = (_piece(tgate, j, H) for j in range(4))
        tc = tf * c_prev + f * tc + ti * gg + i * tg_
        tcc = m.tanh(cells[t])
        tcs[t], tgs[t] = tc, tgate
        return to * tcc + o * (1 - tcc * tcc) * tc
    ths = _ops_tangents(m, h0, w, out, ctx.attrs.get("reverse", False), th0, tw, step)
    return (ths, m.stack(tcs, dim=0), m.stack(tgs, dim=0))


# ---------------------------------------------------------------- LSTM over table rows
def _lstm_rows_kernel(index, table, h0, c0, weight_hh, *, reverse=False, out=None):
    """``lstm_layer(table[index], h0, c0, weight_hh)`` with each step reading its input
    gates as rows of ``table`` (no ``(T, B, 4H)`` gather before the loop)."""
    span = value_range(index)
    if span is not None and (span[0] < 0 or span[1] >= table.shape[0]):
        raise op_error("embedding", f"index out of range: indices span [{span[0]}, "
                                    f"{span[1]}] for {table.shape[0]} embeddings", IndexError)
    T, B = index.shape
    G = table.shape[1]
    specs = ((T, B, G // 4), (T, B, G // 4), (T, B, G))
    ks = _compiled_for("lstm_rows", table, h0, c0, weight_hh) \
        if type(index) is np.ndarray else None
    bufs = None if ks is None else _buffers(out, specs, table.dtype,
                                            (table, h0, c0, weight_hh))
    if bufs is None:
        return _lstm_layer_kernel(xp_of(table).take(table, index, axis=0), h0, c0, weight_hh,
                                  reverse=reverse, out=out)
    out, cells, gates = bufs
    ix, tab = np.ascontiguousarray(index, np.int64), _c(table)
    seq = _seq_kernels("lstm_rows", table.dtype)
    if seq is not None:
        _seq_forward(seq[0], weight_hh, tab, ix, h0, c0, out, cells, gates, reverse)
        return out, cells, gates
    fwd = ks[0]
    c0 = _c(c0)
    _fast_forward(_c(weight_hh), _c(h0), out, reverse, lambda t, p, hg, s: fwd(
        hg, tab, ix[t, s], c0[s] if p is None else cells[p, s], gates[t, s], cells[t, s],
        out[t, s]))
    return out, cells, gates


def _lstm_rows_infer(index, table, h0, c0, weight_hh, *, reverse=False):
    if len(index.shape) != 2 or np.dtype(index.dtype).kind not in "iu":
        raise op_error("lstm_layer_rows", f"index of shape {tuple(index.shape)} and dtype "
                                          f"{np.dtype(index.dtype)}: expected (T, B) integers",
                       RuntimeError)
    T, B = index.shape
    return _lstm_layer_infer(TensorSpec((T, B, table.shape[-1]), table.dtype), h0, c0,
                             weight_hh, reverse=reverse)


# Not registered, not differentiable: a step of tg.compile's programs (the embedding-
# projection rewrite puts it in place of an embedding whose only reader is an
# lstm_layer), whose backward is the lstm_layer's own adjoint
LSTM_ROWS = OpDef(name="lstm_layer_rows", kernel=_lstm_rows_kernel, infer=_lstm_rows_infer,
                  args=("index", "table", "h0", "c0", "weight_hh"), differentiable=False,
                  nout=3, samples=lambda dtype=None: [])
validate(LSTM_ROWS)


def _lstm_rows_grad_kernel(g_out, g_cells, index, h0, c0, weight_hh, out, cells, gates, *,
                           reverse=False, num_weights, needs=(True, True, True)):
    """The adjoint of ``lstm_layer_rows(index, table, h0, c0, weight_hh)`` (``out``,
    ``cells``, ``gates`` its results; ``g_out``, ``g_cells``: the results' gradients or
    None) as far as the table: ``(table's gradient, h0's, c0's, weight_hh's)``, the
    last three None where ``needs`` says so. The reverse loop adds each step's
    input-gate gradients into the table's rows while they are in cache, instead of an
    ``embedding_backward`` reading the whole ``(T, B, 4H)`` gradient back."""
    T, B, H = cells.shape
    seq = _seq_kernels("lstm_rows", out.dtype) if _compiled_for(
        "lstm", out, weight_hh, g_out, g_cells, h0, c0, cells, gates) is not None else None
    if seq is not None:
        dpre, dh, dc, gtab = _seq_adjoint(seq[1], weight_hh, g_out, g_cells, gates, cells,
                                          c0, reverse, needs[0], ix=index, n_rows=num_weights)
    else:  # the LSTM's adjoint, then the rows added
        ctx = SimpleNamespace(inputs=(None, h0, c0, weight_hh), out=(out, cells, gates),
                              m=None, needs_input_grad=(True,) + tuple(needs),
                              attrs={"reverse": reverse})
        dpre, dh, dc, gw = _lstm_layer_vjp(ctx, (g_out, g_cells, None))
        gtab = np.zeros((num_weights, 4 * H), out.dtype)
        np.add.at(gtab, np.asarray(index), dpre)
        return gtab, dh, dc, gw
    return (gtab, dh if needs[0] else None, dc if needs[1] else None,
            _weight_grad(dpre, h0, out, reverse) if needs[2] else None)


def _lstm_rows_grad_infer(g_out, g_cells, index, h0, c0, weight_hh, out, cells, gates, *,
                          reverse=False, num_weights, needs=(True, True, True)):
    G, H = weight_hh.shape
    dt = out.dtype
    return (TensorSpec((num_weights, G), dt), TensorSpec(tuple(h0.shape), dt),
            TensorSpec(tuple(c0.shape), dt), TensorSpec((G, H), dt))


# Not registered, not differentiable: a step of tg.compile's backward programs, in
# place of an lstm_layer's adjoint whose input-gate gradient only an embedding_backward
# over the indices of an lstm_layer_rows reads (compiler/embedding_projection.py)
LSTM_ROWS_GRAD = OpDef(name="lstm_layer_rows_backward", kernel=_lstm_rows_grad_kernel,
                       infer=_lstm_rows_grad_infer,
                       args=("g_out", "g_cells", "index", "h0", "c0", "weight_hh", "out",
                             "cells", "gates"),
                       differentiable=False, nout=4, samples=lambda dtype=None: [])
validate(LSTM_ROWS_GRAD)


# ---------------------------------------------------------------- GRU
def _gru_layer_kernel(input_gates, h0, weight_hh, bias_hh=None, *, reverse=False, out=None):
    # out: None, or (out, gates) buffers, written in place
    T, B, G = input_gates.shape
    H = G // 3
    specs = ((T, B, H), (T, B, 4 * H))
    ks = _compiled_for("gru", input_gates, h0, weight_hh, bias_hh)
    bufs = None if ks is None else _buffers(out, specs, input_gates.dtype,
                                            (input_gates, h0, weight_hh, bias_hh))
    if bufs is None:
        res = _generic("gru", input_gates, h0, None, weight_hh, bias_hh, reverse, specs) \
            if ks is None else _gru_layer_kernel(input_gates, h0, weight_hh, bias_hh,
                                                 reverse=reverse)
        return res if out is None else _into(out, res)
    fwd = ks[0]
    dt = input_gates.dtype
    out, gates = bufs
    xg, h0 = _c(input_gates), _c(h0)
    b = np.zeros(G, dt) if bias_hh is None else _c(bias_hh)
    _fast_forward(_c(weight_hh), h0, out, reverse, lambda t, p, hg, s: fwd(
        hg, xg[t, s], b, h0[s] if p is None else out[p, s], gates[t, s], out[t, s]))
    return out, gates


def _gru_layer_infer(input_gates, h0, weight_hh, bias_hh=None, *, reverse=False):
    T, B, H, dt = _infer("gru_layer", 3, input_gates, h0, weight_hh, b=bias_hh)
    return TensorSpec((T, B, H), dt), TensorSpec((T, B, 4 * H), dt)


def _gru_layer_vjp(ctx, g):
    _, h0, w, b = ctx.inputs
    out, gates = ctx.out
    g_out, g_gates = g
    needs = ctx.needs_input_grad
    reverse = ctx.attrs.get("reverse", False)
    ks = _compiled_for("gru", out, w, g_out, h0)
    if ks is not None and g_gates is None:
        bwd = ks[1]
        T, B, H = out.shape
        dt = out.dtype
        zeros = np.zeros((B, H), dt)
        g_out, h0 = _c(g_out, dt), _c(h0)
        dx, dhg = np.empty((T, B, 3 * H), dt), np.empty((T, B, 3 * H), dt)
        dh = _fast_adjoint(_c(w), out, reverse, needs[1], dhg, lambda t, p, dh, s: bwd(
            zeros[s] if g_out is None else g_out[t, s], dh, gates[t, s],
            h0[s] if p is None else out[p, s], dx[t, s], dhg[t, s]), carry=True)
        return (dx if needs[0] else None, dh if needs[1] else None,
                _weight_grad(dhg, h0, out, reverse) if needs[2] else None,
                dhg.reshape(T * B, 3 * H).sum(0) if needs[3] else None)
    m = ctx.m
    T, B, H = out.shape
    if T == 0:
        return (m.zeros_like(gates[:, :, :3 * H]), m.zeros_like(h0), m.zeros_like(w),
                None if b is None else m.zeros_like(b))

    def step(t, p, hp, dh):
        r, z, n, hn = (_piece(gates[t], j, H) for j in range(4))
        gg = None if g_gates is None else [_piece(g_gates[t], j, H) for j in range(4)]
        dn, dz = dh * (1 - z), dh * (hp - n)
        if gg is not None:
            dn, dz = dn + gg[2], dz + gg[1]
        dpn = dn * (1 - n * n)
        dr, dhn = dpn * hn, dpn * r
        if gg is not None:
            dr, dhn = dr + gg[0], dhn + gg[3]
        dpr, dpz = dr * r * (1 - r), dz * z * (1 - z)
        return m.cat([dpr, dpz, dpn], dim=-1), m.cat([dpr, dpz, dhn], dim=-1), dh * z
    dxg, dhg, dh, gw = _ops_adjoint(m, h0, w, out, g_out, reverse, step)
    gb = m.sum(m.reshape(dhg, (T * B, 3 * H)), dim=0) if needs[3] else None
    return (dxg if needs[0] else None, dh if needs[1] else None, gw if needs[2] else None, gb)


def _gru_layer_jvp(ctx, txg, th0, tw, tb):
    xg, h0, w, b = ctx.inputs
    out, gates = ctx.out
    m = ctx.m
    T, B, H = out.shape
    if T == 0 or all(t is None for t in (txg, th0, tw, tb)):
        return (None, None)
    tgs = [None] * T

    def step(t, p, hp, th, tph):
        if tb is not None:
            tph = tph + tb
        tpx = m.zeros_like(tph) if txg is None else txg[t]
        r, z, n, hn = (_piece(gates[t], j, H) for j in range(4))
        tr = (_piece(tpx, 0, H) + _piece(tph, 0, H)) * r * (1 - r)
        tz = (_piece(tpx, 1, H) + _piece(tph, 1, H)) * z * (1 - z)
        thn = _piece(tph, 2, H)
        tn = (_piece(tpx, 2, H) + tr * hn + r * thn) * (1 - n * n)
        tgs[t] = m.cat([tr, tz, tn, thn], dim=-1)
        return tn + tz * (hp - n) + z * (th - tn)
    ths = _ops_tangents(m, h0, w, out, ctx.attrs.get("reverse", False), th0, tw, step)
    return ths, m.stack(tgs, dim=0)


# ---------------------------------------------------------------- RNN (tanh, relu)
def _rnn_kind(nonlinearity):
    if nonlinearity not in ("tanh", "relu"):
        raise op_error("rnn_layer", f"unknown nonlinearity {nonlinearity!r}: expected 'tanh' "
                                    f"or 'relu'", ValueError)
    return "rnn_" + nonlinearity


def _rnn_layer_kernel(input_gates, h0, weight_hh, *, reverse=False, nonlinearity="tanh",
                      out=None):
    kind = _rnn_kind(nonlinearity)
    ks = _compiled_for(kind, input_gates, h0, weight_hh)
    bufs = None if ks is None else _buffers(out, (input_gates.shape,), input_gates.dtype,
                                            (input_gates, h0, weight_hh))
    if bufs is None:
        res = _generic(kind, input_gates, h0, None, weight_hh, None, reverse,
                       (input_gates.shape,)) if ks is None else _rnn_layer_kernel(
            input_gates, h0, weight_hh, reverse=reverse, nonlinearity=nonlinearity)
        return res if out is None else _into(out, res)
    fwd = ks[0]
    out = bufs[0]
    xg = _c(input_gates)
    _fast_forward(_c(weight_hh), _c(h0), out, reverse, lambda t, p, hg, s: fwd(
        hg, xg[t, s], out[t, s]))
    return out


def _rnn_layer_infer(input_gates, h0, weight_hh, *, reverse=False, nonlinearity="tanh"):
    _rnn_kind(nonlinearity)
    T, B, H, dt = _infer("rnn_layer", 1, input_gates, h0, weight_hh)
    return TensorSpec((T, B, H), dt)


def _rnn_layer_vjp(ctx, g_out):
    xg, h0, w = ctx.inputs
    out = ctx.out
    needs = ctx.needs_input_grad
    reverse = ctx.attrs.get("reverse", False)
    kind = _rnn_kind(ctx.attrs.get("nonlinearity", "tanh"))
    ks = _compiled_for(kind, out, w, g_out, h0)
    if ks is not None:
        bwd = ks[1]
        dpre = np.empty_like(out)
        g_out = np.zeros_like(out) if g_out is None else _c(g_out, out.dtype)
        dh = _fast_adjoint(_c(w), out, reverse, needs[1], dpre,
                           lambda t, p, dh, s: bwd(g_out[t, s], dh, out[t, s], dpre[t, s]))
        return (dpre if needs[0] else None, dh if needs[1] else None,
                _weight_grad(dpre, h0, out, reverse) if needs[2] else None)
    m = ctx.m
    if out.shape[0] == 0:
        return m.zeros_like(out), m.zeros_like(h0), m.zeros_like(w)

    def step(t, p, hp, dh):
        y = out[t]
        return (dh * (1 - y * y) if kind == "rnn_tanh" else dh * m.sign(y)), None, None
    dxg, _, dh, gw = _ops_adjoint(m, h0, w, out, g_out, reverse, step)
    return (dxg if needs[0] else None, dh if needs[1] else None, gw if needs[2] else None)


def _rnn_layer_jvp(ctx, txg, th0, tw):
    xg, h0, w = ctx.inputs
    out = ctx.out
    m = ctx.m
    kind = _rnn_kind(ctx.attrs.get("nonlinearity", "tanh"))
    if out.shape[0] == 0 or all(t is None for t in (txg, th0, tw)):
        return (None,)

    def step(t, p, hp, th, tpre):
        if txg is not None:
            tpre = tpre + txg[t]
        y = out[t]
        return tpre * (1 - y * y) if kind == "rnn_tanh" else tpre * m.sign(y)
    return (_ops_tangents(m, h0, w, out, ctx.attrs.get("reverse", False), th0, tw, step),)


# ---------------------------------------------------------------- batching
def _vmap_rule(ctx, *values):
    """Unbatched weights: the vmapped dim folds into the op's batch dim (one call);
    batched weights: the step with the ops namespace, a batched matmul per step."""
    m, V = ctx.m, ctx.size
    name = ctx.op.name
    kind = _rnn_kind(ctx.attrs.get("nonlinearity", "tanh")) if name == "rnn_layer" \
        else name[:-6]
    nseq = 3 if kind == "lstm" else 2                  # input_gates, h0 (, c0)
    vals = _vmap.batched_all(ctx, values)
    T, B, G = tuple(vals[0].shape)[1:]
    if not any(ctx.batched[nseq:]):
        folded = [m.reshape(m.movedim(vals[0], 0, 1), (T, V * B, G))]
        folded += [m.reshape(v, (V * B, tuple(v.shape)[-1])) for v in vals[1:nseq]]
        res = bind(ctx.op, *folded, *values[nseq:], **ctx.attrs)
        outs = res if isinstance(res, tuple) else (res,)
        outs = tuple(m.movedim(m.reshape(o, (T, V, B, tuple(o.shape)[-1])), 1, 0)
                     for o in outs)
    else:
        if T == 0:
            return _vmap.loop(ctx, *values)
        w = vals[nseq]
        b = vals[nseq + 1] if len(vals) > nseq + 1 else None
        res = _run(m, kind, m.movedim(vals[0], 0, 1), vals[1],
                   vals[2] if kind == "lstm" else None, w,
                   None if b is None else m.unsqueeze(b, 1), ctx.attrs.get("reverse", False))
        outs = tuple(m.movedim(o, 0, 1) for o in (res if isinstance(res, tuple) else (res,)))
    return outs if len(outs) > 1 else outs[0]


# ---------------------------------------------------------------- declarations
def _torch(kind):
    def oracle(torch, xg, h, *rest, reverse=False, nonlinearity="tanh"):
        c, w, b = (rest[0], rest[1], None) if kind == "lstm" else (None, rest[0], (
            rest[1] if len(rest) > 1 else None))
        k = _rnn_kind(nonlinearity) if kind == "rnn" else kind
        return _run(torch, k, xg, h, c, w, b, reverse)
    return oracle


# ---------------------------------------------------------------- ONNX forms
# (each op's ``onnx=``: the nodes of one call, ``tapegrad.onnx``'s Builder ``b``)
class _OnnxBody:
    """Nodes of a scan body (names local to it; outer names may be read)."""

    def __init__(self, b):
        self.b, self.nodes, self.k = b, [], 0

    def __call__(self, op_type, inputs, out=None, **attrs):
        if out is None:
            self.k += 1
            out = f"b{self.k}"
        outs = [out] if isinstance(out, str) else list(out)
        self.nodes.append(self.b.helper.make_node(op_type, inputs, outs, **attrs))
        return out


def _onnx_zeros_state(b, gates, size, dtype):
    """Zeros (B, size), B the batch of the (T, B, k) ``gates``: the default initial
    state, symbolic in the batch."""
    bdim = b.slice(b.node("Shape", [gates]), [1], [2], [0])
    shp = b.node("Concat", [bdim, b.ints([size])], axis=0)
    value = b.helper.make_tensor("zero", b.onnx_type(dtype), [1], [0])
    return b.node("ConstantOfShape", [shp], value=value)


def _onnx_state(b, st, j, gates, size):
    v = b.literal(st, j)
    if isinstance(v, np.ndarray) and not v.any():
        return _onnx_zeros_state(b, gates, size, b.dtype(st, j))
    return b.input(st, j)


def _onnx_scan(b, st, body_nodes, states, scan_outs, dtype, reverse):
    """A Scan over the time axis of input 0: ``states`` (names of the initial
    states), body inputs ``s_k`` (states) and ``x_t``; ``scan_outs`` the number of
    per-step outputs after the new states."""
    h = b.helper
    t = b.onnx_type(dtype)
    ins = [h.make_tensor_value_info(f"s{k}_in", t, None) for k in range(len(states))]
    ins.append(h.make_tensor_value_info("x_t", t, None))
    outs = [h.make_tensor_value_info(f"s{k}_out", t, None) for k in range(len(states))]
    outs += [h.make_tensor_value_info(f"y{k}_out", t, None) for k in range(scan_outs)]
    body = h.make_graph(body_nodes, b.fresh("scan_body"), ins, outs)
    n = len(states) + scan_outs
    res = b.node("Scan", states + [b.input(st, 0)], n, body=body, num_scan_inputs=1,
                 scan_input_directions=[int(reverse)],
                 scan_output_directions=[int(reverse)] * scan_outs)
    return res[len(states):]


def _onnx_lstm_layer(b, st):
    T, B, G = b.shape(st, 0)
    H = G // 4
    dt = b.dtype(st, 0)
    h0 = _onnx_state(b, st, 1, b.input(st, 0), H)
    c0 = _onnx_state(b, st, 2, b.input(st, 0), H)
    wT = b.node("Transpose", [b.input(st, 3)], perm=[1, 0])
    n = _OnnxBody(b)
    z = n("Add", ["x_t", n("MatMul", ["s0_in", wT])])
    i, f, g, o = n("Split", [z, b.ints([H] * 4)], ["gi", "gf", "gg", "go"], axis=1)
    i, f, g, o = n("Sigmoid", [i]), n("Sigmoid", [f]), n("Tanh", [g]), n("Sigmoid", [o])
    c = n("Add", [n("Mul", [f, "s1_in"]), n("Mul", [i, g])], "s1_out")
    n("Mul", [o, n("Tanh", [c])], "s0_out")
    n("Identity", ["s0_out"], "y0_out")
    n("Identity", ["s1_out"], "y1_out")
    n("Concat", [i, f, g, o], "y2_out", axis=1)
    ys = _onnx_scan(b, st, n.nodes, [h0, c0], 3, dt, st.attrs.get("reverse", False))
    for k in range(3):
        b.node("Identity", [ys[k]], [b.output(st, k)])


def _onnx_gru_layer(b, st):
    T, B, G = b.shape(st, 0)
    H = G // 3
    dt = b.dtype(st, 0)
    h0 = _onnx_state(b, st, 1, b.input(st, 0), H)
    wT = b.node("Transpose", [b.input(st, 2)], perm=[1, 0])
    n = _OnnxBody(b)
    hw = n("MatMul", ["s0_in", wT])
    if b.is_tensor(st, 3):
        hw = n("Add", [hw, b.input(st, 3)])
    xr, xz, xn = n("Split", ["x_t", b.ints([H] * 3)], ["xr", "xz", "xn"], axis=1)
    hr, hz, hn = n("Split", [hw, b.ints([H] * 3)], ["hr", "hz", "hn"], axis=1)
    r = n("Sigmoid", [n("Add", [xr, hr])])
    z = n("Sigmoid", [n("Add", [xz, hz])])
    nn_ = n("Tanh", [n("Add", [xn, n("Mul", [r, hn])])])
    n("Add", [nn_, n("Mul", [z, n("Sub", ["s0_in", nn_])])], "s0_out")
    n("Identity", ["s0_out"], "y0_out")
    n("Concat", [r, z, nn_, hn], "y1_out", axis=1)
    ys = _onnx_scan(b, st, n.nodes, [h0], 2, dt, st.attrs.get("reverse", False))
    for k in range(2):
        b.node("Identity", [ys[k]], [b.output(st, k)])


def _onnx_rnn_layer(b, st):
    T, B, H = b.shape(st, 0)
    dt = b.dtype(st, 0)
    h0 = _onnx_state(b, st, 1, b.input(st, 0), H)
    wT = b.node("Transpose", [b.input(st, 2)], perm=[1, 0])
    n = _OnnxBody(b)
    z = n("Add", ["x_t", n("MatMul", ["s0_in", wT])])
    act = "Relu" if st.attrs.get("nonlinearity", "tanh") == "relu" else "Tanh"
    n(act, [z], "s0_out")
    n("Identity", ["s0_out"], "y0_out")
    (y,) = _onnx_scan(b, st, n.nodes, [h0], 1, dt, st.attrs.get("reverse", False))
    b.node("Identity", [y], [b.output(st)])


LSTM_LAYER = register(
    name="lstm_layer", autocast="lower", kernel=_lstm_layer_kernel, infer=_lstm_layer_infer,
    args=("input_gates", "h0", "c0", "weight_hh"), nout=3, vjp=_lstm_layer_vjp,
    jvp=_lstm_layer_jvp, vmap=_vmap_rule, saves=("h0", "c0", "weight_hh", "out"),
    samples=_samples(4, c=True), error_samples=lambda: _errors(4, c=True),
    torch=_torch("lstm"),
    doc="One LSTM layer's recurrence over a sequence (see tapegrad/ops/nn/rnn.py).",
    onnx=_onnx_lstm_layer)

GRU_LAYER = register(
    name="gru_layer", autocast={"cpu": "promote", "cuda": "lower"}, kernel=_gru_layer_kernel,
    infer=_gru_layer_infer,
    args=("input_gates", "h0", "weight_hh", "bias_hh"), optional=("bias_hh",), nout=2,
    vjp=_gru_layer_vjp, jvp=_gru_layer_jvp, vmap=_vmap_rule,
    saves=("h0", "weight_hh", "bias_hh", "out"), samples=_samples(3, b=True),
    error_samples=lambda: _errors(3, b=True), torch=_torch("gru"),
    doc="One GRU layer's recurrence over a sequence (see tapegrad/ops/nn/rnn.py).",
    onnx=_onnx_gru_layer)

RNN_LAYER = register(
    name="rnn_layer", autocast="lower", kernel=_rnn_layer_kernel, infer=_rnn_layer_infer,
    args=("input_gates", "h0", "weight_hh"), vjp=_rnn_layer_vjp, jvp=_rnn_layer_jvp,
    vmap=_vmap_rule, saves=("h0", "weight_hh", "out"),
    samples=_samples(1, attrs=({}, {"nonlinearity": "relu"})),
    error_samples=lambda: _errors(1) + [
        ((_rand((3, 2, 2)), _rand((2, 2)), _rand((2, 2))), {"nonlinearity": "gelu"},
         ValueError)],
    torch=_torch("rnn"),
    doc="One Elman RNN layer's recurrence over a sequence (see tapegrad/ops/nn/rnn.py).",
    onnx=_onnx_rnn_layer)


def lstm_layer(input_gates, h0, c0, weight_hh, reverse=False):
    """``(output, cells, gates)`` of one LSTM direction over the sequence (module doc)."""
    return bind(LSTM_LAYER, input_gates, h0, c0, weight_hh, reverse=bool(reverse))


def gru_layer(input_gates, h0, weight_hh, bias_hh=None, reverse=False):
    """``(output, gates)`` of one GRU direction over the sequence (module doc)."""
    return bind(GRU_LAYER, input_gates, h0, weight_hh, bias_hh, reverse=bool(reverse))


def rnn_layer(input_gates, h0, weight_hh, reverse=False, nonlinearity="tanh"):
    """``output`` of one Elman RNN direction over the sequence (module doc)."""
    return bind(RNN_LAYER, input_gates, h0, weight_hh, reverse=bool(reverse),
                nonlinearity=nonlinearity)
