"""Recurrent layers: RNN, LSTM, GRU and their cells, with PyTorch's arguments,
parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse`` ...), gate layouts
(LSTM: i, f, g, o; GRU: r, z, n) and initialisation U(-1/sqrt(H), 1/sqrt(H)).

A layer's input projection runs as one matmul over the whole sequence. Its
recurrence is then one op (``lstm_layer``, ``gru_layer``, ``rnn_layer``,
tapegrad/ops/nn/rnn.py: per step a matmul into a preallocated buffer and one compiled
kernel writing the step's slice of the outputs; the adjoint one reverse loop and one
matmul for the whole recurrent weight gradient); a cell is the same op over one
step. An LSTM with ``proj_size`` cuts the projection once into per-step, per-gate
contiguous pieces; each step then does one matmul with the hidden state, one cut of
it into gates, one fused elementwise kernel for the gate arithmetic (``@fuse``: the
sigmoids and tanhs, the new cell and hidden state, forward and backward each one
compiled loop, recorded as one tape entry) and the projection.
"""
import math

from ...devices import xp_of
from ...dispatch import bind
from ...ops import cat, empty, flip, matmul, sigmoid, squeeze, stack, tanh, unsqueeze, zeros
from ...ops.nn.rnn import gru_layer, lstm_layer, rnn_layer
from ...ops_registry import OpDef, TensorSpec
from ...ops_registry.opdef import validate
from ...tensor import Tensor
from ...tracing import fuse
from .. import functional as F, init
from ..module import Module
from ..parameter import Parameter

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


# ---------------------------------------------------------------- fused gate arithmetic
@fuse
def _lstm_gates(xi, xf, xg, xo, hi, hf, hg, ho, c):
    i = sigmoid(xi + hi)
    f = sigmoid(xf + hf)
    g = tanh(xg + hg)
    o = sigmoid(xo + ho)
    c2 = f * c + i * g
    return o * tanh(c2), c2


# ---------------------------------------------------------------- pieces as one node
_PIECES = {}


def _pieces_op(n, axis, keep):
    """One recorded node that cuts a tensor into ``n`` equal contiguous pieces along
    ``axis`` (``keep=False``: the axis has size ``n`` and is dropped, as ``unbind``).

    ``tg.chunk``/``tg.unbind`` are ``n`` getitems, and each getitem's adjoint
    scatters into zeros of the whole input: over a sequence of T steps that is T
    whole-sized gradients. Here the adjoint is one ``cat``/``stack`` of the pieces'
    gradients. Not a public op (its number of outputs is per call), so not
    registered: an OpDef like the registry's, validated the same way.
    """
    key = (n, axis, keep)
    op = _PIECES.get(key)
    if op is not None:
        return op

    def cut(x):
        size = x.shape[axis] // n
        idx = [slice(None)] * x.ndim
        out = []
        for k in range(n):
            idx[axis] = slice(k * size, (k + 1) * size) if keep else k
            out.append(x[tuple(idx)])
        return out

    def kernel(x):
        xp = xp_of(x)
        return tuple(xp.ascontiguousarray(p) for p in cut(x))

    def infer(x):
        shape = list(x.shape)
        if keep:
            shape[axis] //= n
        else:
            del shape[axis]
        return tuple(TensorSpec(tuple(shape), x.dtype) for _ in range(n))

    def vjp(ctx, g):
        g = list(g)
        some = next(t for t in g if t is not None)
        g = [ctx.m.zeros_like(some) if t is None else t for t in g]
        return (ctx.m.cat(g, dim=axis) if keep else ctx.m.stack(g, dim=axis),)

    def jvp(ctx, xt):
        return tuple(bind(op, xt)) if xt is not None else (None,) * n

    op = OpDef(name=f"pieces{n}" if keep else f"steps{n}", kernel=kernel, infer=infer,
               args=("x",), vjp=vjp, jvp=jvp, nout=n, samples=lambda dtype=None: [],
               torch=lambda *a, **k: None)
    validate(op)
    _PIECES[key] = op
    return op


def _cut(x, n, axis, keep=True):
    if n == 1:
        return [x] if keep else [x[0] if axis == 0 else squeeze(x, axis)]
    return list(bind(_pieces_op(n, axis % x.ndim, keep), x))


def _layer(mode, x, h, c, w_ih, w_hh, b_ih, b_hh, reverse, nonlinearity="tanh", w_hr=None):
    """One direction of one layer over the whole sequence: ``(outputs (T, B, H), h,
    c)``. The input projection is one matmul over all steps; the recurrence is then
    one sequence op (``lstm_layer``/``gru_layer``/``rnn_layer``: per step a matmul and
    one compiled kernel, written into preallocated outputs, and its adjoint one
    reverse loop). An LSTM with ``proj_size`` cuts the projection once into per-step,
    per-gate contiguous pieces and runs each step as a matmul with the hidden state,
    one cut of its result into gates, the fused gate kernel and the projection."""
    T = x.shape[0]
    last = 0 if reverse else -1   # (-1: an exported graph takes any sequence length's last)
    if mode == "GRU":                                # b_hh stays apart: r (W_hn h + b_hn)
        out, _ = gru_layer(F.linear(x, w_ih, b_ih), h, w_hh, b_hh, reverse)
        return out, out[last], None
    bias = b_ih if b_hh is None else b_ih + b_hh     # (kH,): the biases fold once
    if mode == "RNN":
        out = rnn_layer(F.linear(x, w_ih, bias), h, w_hh, reverse, nonlinearity)
        return out, out[last], None
    if w_hr is None:
        out, cells, _ = lstm_layer(F.linear(x, w_ih, bias), h, c, w_hh, reverse)
        return out, out[last], cells[last]
    xg = F.linear(x, w_ih, bias)                     # (T, B, 4H)
    w_hhT = w_hh.T
    if reverse:
        xg = flip(xg, (0,))
    gates = [_cut(p, T, 0, keep=False) for p in _cut(xg, 4, -1)]   # [gate][t]: (B, H)
    outs = []
    for t in range(T):
        h, c = _lstm_gates(*(g[t] for g in gates), *_cut(matmul(h, w_hhT), 4, -1), c)
        h = matmul(h, w_hr.T)                        # proj_size: h = W_hr (o * tanh(c))
        outs.append(h)
    out = stack(outs, 0)
    return (flip(out, (0,)) if reverse else out), h, c


# ---------------------------------------------------------------- layers
class RNNBase(Module):
    """The base of ``RNN``, ``LSTM`` and ``GRU``: layers, directions and their weights, as
    ``torch.nn.RNNBase``."""
    _gates = 1

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"hidden_size must be a positive integer, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        if isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self.proj_size = proj_size
        real = proj_size or hidden_size                 # the size of h (PyTorch's name)
        gate = {"LSTM": 4, "GRU": 3}.get(mode, 1) * hidden_size
        dirs = 2 if bidirectional else 1
        self._names = []
        for layer in range(num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                in_size = input_size if layer == 0 else real * dirs
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                setattr(self, names[0], Parameter(empty((gate, in_size), dtype=dtype,
                                                        device=device)))
                setattr(self, names[1], Parameter(empty((gate, real), dtype=dtype,
                                                        device=device)))
                if bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    setattr(self, names[2], Parameter(empty(gate, dtype=dtype, device=device)))
                    setattr(self, names[3], Parameter(empty(gate, dtype=dtype, device=device)))
                if proj_size:
                    names.append(f"weight_hr{sfx}")
                    setattr(self, names[-1], Parameter(empty((proj_size, hidden_size),
                                                             dtype=dtype, device=device)))
                self._names.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        std = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -std, std)

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._names]

    def flatten_parameters(self):
        """As ``torch.nn.RNNBase.flatten_parameters``: PyTorch packs the weights into one
        buffer for cuDNN; each weight here is its own array, used as it is: nothing to
        do (PyTorch's CPU modules do nothing either)."""

    def _weights(self, layer, d):
        names = self._names[layer * (2 if self.bidirectional else 1) + d]
        ws = [getattr(self, n) for n in names]
        w_hr = ws.pop() if self.proj_size else None
        return (ws if self.bias else ws + [None, None]) + [w_hr]

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        return s

    # ------------------------------------------------------------ forward
    def _check(self, input, hx_shape_of):
        if not isinstance(input, Tensor):
            raise TypeError(f"{self.mode}: input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ValueError(f"{self.mode}: Expected input to be 2D or 3D, got {input.ndim}D "
                             f"tensor")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{self.mode}: input.size(-1) must be equal to input_size. "
                               f"Expected {self.input_size}, got {input.shape[-1]}")

    def _hidden(self, hx, batch, batched, input, what="hx", size=None):
        dirs = 2 if self.bidirectional else 1
        shape = (self.num_layers * dirs, batch, size or self.hidden_size)
        if hx is None:
            return zeros(shape, dtype=input.dtype, device=input.device)
        if not batched:
            if hx.ndim != 2:
                raise RuntimeError(f"For unbatched 2-D input, {what} should also be 2-D but "
                                   f"got {hx.ndim}-D tensor")
            hx = unsqueeze(hx, 1)
        elif hx.ndim != 3:
            raise RuntimeError(f"For batched 3-D input, {what} should also be 3-D but got "
                               f"{hx.ndim}-D tensor")
        if tuple(hx.shape) != shape:
            raise RuntimeError(f"Expected hidden size {shape}, got {tuple(hx.shape)}")
        return hx

    def forward(self, input, hx=None):
        self._check(input, None)
        batched = input.ndim == 3
        if not batched:
            input = unsqueeze(input, 1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        T, B = input.shape[0], input.shape[1]
        lstm = self.mode == "LSTM"
        if lstm:
            if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
                raise RuntimeError("LSTM: hx must be a tuple (h_0, c_0)")
            h0 = self._hidden(None if hx is None else hx[0], B, batched, input, "h_0",
                              self.proj_size)
            c0 = self._hidden(None if hx is None else hx[1], B, batched, input, "c_0")
        else:
            if isinstance(hx, (tuple, list)):
                raise RuntimeError(f"{self.mode}: hx must be a Tensor, got a tuple")
            h0 = self._hidden(hx, B, batched, input)
        dirs = 2 if self.bidirectional else 1
        h_n, c_n = [], []
        x = input
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, d)
                if T == 0:
                    out = zeros((0, B, self.proj_size or self.hidden_size), dtype=input.dtype,
                                device=input.device)
                    h, c = h0[k], (c0[k] if lstm else None)
                else:
                    out, h, c = _layer("LSTM" if lstm else self.mode, x, h0[k],
                                       c0[k] if lstm else None, w_ih, w_hh, b_ih, b_hh, d == 1,
                                       getattr(self, "nonlinearity", "tanh"), w_hr)
                outs.append(out)
                h_n.append(h)
                if lstm:
                    c_n.append(c)
            x = outs[0] if dirs == 1 else cat(outs, dim=2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        output = x
        h_n = stack(h_n, 0)
        c_n = stack(c_n, 0) if lstm else None
        if not batched:
            output = squeeze(output, 1)
            h_n = squeeze(h_n, 1)
            c_n = squeeze(c_n, 1) if lstm else None
        elif self.batch_first:
            output = output.transpose(0, 1)
        return (output, (h_n, c_n)) if lstm else (output, h_n)


class RNN(RNNBase):
    """``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``: ``h' = tanh(W_ih x + b_ih +
    W_hh h + b_hh)``; ``forward(input, hx=None)`` returns ``(output, h_n)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None,
                 dtype=None, proj_size=0):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        self.__dict__["nonlinearity"] = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)
        self.mode = "RNN"


class LSTM(RNNBase):
    """``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, proj_size=0)``; ``forward(input, (h_0, c_0)=None)``
    returns ``(output, (h_n, c_n))``. Gates i, f, g, o in ``weight_ih_l0`` rows, as
    PyTorch. ``proj_size > 0``: ``h_t = W_hr (o_t * tanh(c_t))`` with ``weight_hr_l{k}``
    (proj_size, hidden_size); h_0, h_n and the output then have proj_size features."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)


class GRU(RNNBase):
    """``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False)``; gates r, z, n as PyTorch
    (``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, proj_size=0):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)


# ---------------------------------------------------------------- cells
class RNNCellBase(Module):
    """The base of the single-step cells (``RNNCell``, ``LSTMCell``, ``GRUCell``), as
    ``torch.nn.RNNCellBase``."""
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = num_chunks * hidden_size
        self.weight_ih = Parameter(empty((g, input_size), dtype=dtype, device=device))
        self.weight_hh = Parameter(empty((g, hidden_size), dtype=dtype, device=device))
        if bias:
            self.bias_ih = Parameter(empty(g, dtype=dtype, device=device))
            self.bias_hh = Parameter(empty(g, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        std = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -std, std)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        nl = getattr(self, "nonlinearity", "tanh")
        return s + (f", nonlinearity={nl}" if nl != "tanh" else "")

    def _prep(self, input, hx):
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got "
                               f"{input.shape[-1]} expected {self.input_size}")
        batched = input.ndim == 2
        if not batched:
            input = unsqueeze(input, 0)
        return input, batched

    def _state(self, hx, input, batched):
        if hx is None:
            return zeros((input.shape[0], self.hidden_size), dtype=input.dtype,
                         device=input.device)
        return hx if batched else unsqueeze(hx, 0)


class RNNCell(RNNCellBase):
    """One step of an Elman RNN (tanh or relu), as ``torch.nn.RNNCell``."""
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.__dict__["nonlinearity"] = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        input, batched = self._prep(input, hx)
        h = self._state(hx, input, batched)
        bias = self.bias_ih if self.bias_hh is None else self.bias_ih + self.bias_hh
        xg = F.linear(unsqueeze(input, 0), self.weight_ih, bias)       # (1, B, H)
        h = rnn_layer(xg, h, self.weight_hh, nonlinearity=self.nonlinearity)[0]  # one step
        return h if batched else squeeze(h, 0)


class LSTMCell(RNNCellBase):
    """One step of an LSTM, as ``torch.nn.LSTMCell``."""
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        input, batched = self._prep(input, hx)
        h = self._state(None if hx is None else hx[0], input, batched)
        c = self._state(None if hx is None else hx[1], input, batched)
        bias = self.bias_ih if self.bias_hh is None else self.bias_ih + self.bias_hh
        xg = F.linear(unsqueeze(input, 0), self.weight_ih, bias)      # (1, B, 4H)
        out, cells, _ = lstm_layer(xg, h, c, self.weight_hh)           # one step
        h, c = out[0], cells[0]
        return (h, c) if batched else (squeeze(h, 0), squeeze(c, 0))


class GRUCell(RNNCellBase):
    """One step of a GRU, as ``torch.nn.GRUCell``."""
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        input, batched = self._prep(input, hx)
        h = self._state(hx, input, batched)
        xg = F.linear(unsqueeze(input, 0), self.weight_ih, self.bias_ih)  # (1, B, 3H)
        h = gru_layer(xg, h, self.weight_hh, self.bias_hh)[0][0]          # one step
        return h if batched else squeeze(h, 0)
