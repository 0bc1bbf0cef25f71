"""Recurrent layers: RNN, LSTM, GRU and their cells, with PyTorch's arguments,
parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse`` ...), gate layouts
(LSTM: i, f, g, o; GRU: r, z, n) and initialisation U(-1/sqrt(H), 1/sqrt(H)).

A layer's input projection runs as one matmul over the whole sequence; each step then
does one matmul with the hidden state and one fused elementwise kernel for the gate
arithmetic (``@fuse``: the input and hidden gate pre-activations added, the
sigmoids and tanhs, the new cell and hidden state, forward and backward each one
compiled loop, recorded as one tape entry).
"""
import math

from ..ops import (cat, flip, matmul, relu, sigmoid, stack, tanh, unsqueeze, squeeze,
                   zeros, empty)
from ..tensor import Tensor
from ..tracing import fuse
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

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


@fuse
def _gru_gates(xr, xz, xn, hr, hz, hn, h):
    r = sigmoid(xr + hr)
    z = sigmoid(xz + hz)
    n = tanh(xn + r * hn)
    return n + z * (h - n)


def _chunks(t, k, H):
    return [t[..., j * H:(j + 1) * H] for j in range(k)]


def _lstm_step(xg, h, c, w_hh, b_hh):
    hg = matmul(h, w_hh.T)
    if b_hh is not None:
        hg = hg + b_hh
    H = h.shape[-1]
    return _lstm_gates(*_chunks(xg, 4, H), *_chunks(hg, 4, H), c)


def _gru_step(xg, h, w_hh, b_hh):
    hg = matmul(h, w_hh.T)
    if b_hh is not None:
        hg = hg + b_hh
    H = h.shape[-1]
    return _gru_gates(*_chunks(xg, 3, H), *_chunks(hg, 3, H), h)


def _rnn_step(xg, h, w_hh, b_hh, nonlinearity):
    pre = xg + matmul(h, w_hh.T)
    if b_hh is not None:
        pre = pre + b_hh
    return tanh(pre) if nonlinearity == "tanh" else relu(pre)


# ---------------------------------------------------------------- layers
class RNNBase(Module):
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
        if proj_size:
            raise NotImplementedError(f"{mode}: proj_size is not supported")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        gate = {"LSTM": 4, "GRU": 3}.get(mode, 1) * hidden_size
        dirs = 2 if bidirectional else 1
        self._names = []
        for layer in range(num_layers):
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                in_size = input_size if layer == 0 else hidden_size * dirs
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                setattr(self, names[0], Parameter(empty((gate, in_size), dtype=dtype,
                                                        device=device)))
                setattr(self, names[1], Parameter(empty((gate, hidden_size), dtype=dtype,
                                                        device=device)))
                if bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    setattr(self, names[2], Parameter(empty(gate, dtype=dtype, device=device)))
                    setattr(self, names[3], Parameter(empty(gate, dtype=dtype, device=device)))
                self._names.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        std = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -std, std)

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._names]

    def _weights(self, layer, d):
        names = self._names[layer * (2 if self.bidirectional else 1) + d]
        ws = [getattr(self, n) for n in names]
        return ws if self.bias else ws + [None, None]

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

    def _hidden(self, hx, batch, batched, input, what="hx"):
        dirs = 2 if self.bidirectional else 1
        shape = (self.num_layers * dirs, batch, self.hidden_size)
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
            h0 = self._hidden(None if hx is None else hx[0], B, batched, input, "h_0")
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
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, d)
                xg = F.linear(x, w_ih, b_ih)              # (T, B, gates): one matmul
                if d:
                    xg = flip(xg, (0,))
                h = h0[k]
                c = c0[k] if lstm else None
                steps = []
                for t in range(T):
                    if lstm:
                        h, c = _lstm_step(xg[t], h, c, w_hh, b_hh)
                    elif self.mode == "GRU":
                        h = _gru_step(xg[t], h, w_hh, b_hh)
                    else:
                        h = _rnn_step(xg[t], h, w_hh, b_hh, self.nonlinearity)
                    steps.append(h)
                out = stack(steps, 0) if T else zeros((0, B, self.hidden_size),
                                                      dtype=input.dtype, device=input.device)
                outs.append(flip(out, (0,)) if d else out)
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
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        self.__dict__["nonlinearity"] = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.mode = "RNN"


class LSTM(RNNBase):
    """``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False)``; ``forward(input, (h_0, c_0)=None)`` returns
    ``(output, (h_n, c_n))``. Gates i, f, g, o in ``weight_ih_l0`` rows, as PyTorch."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)


class GRU(RNNBase):
    """``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False)``; gates r, z, n as PyTorch
    (``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)


# ---------------------------------------------------------------- cells
class RNNCellBase(Module):
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
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.__dict__["nonlinearity"] = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)

    def forward(self, input, hx=None):
        input, batched = self._prep(input, hx)
        h = self._state(hx, input, batched)
        h = _rnn_step(F.linear(input, self.weight_ih, self.bias_ih), h, self.weight_hh,
                      self.bias_hh, self.nonlinearity)
        return h if batched else squeeze(h, 0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        input, batched = self._prep(input, hx)
        h = self._state(None if hx is None else hx[0], input, batched)
        c = self._state(None if hx is None else hx[1], input, batched)
        h, c = _lstm_step(F.linear(input, self.weight_ih, self.bias_ih), h, c, self.weight_hh,
                          self.bias_hh)
        return (h, c) if batched else (squeeze(h, 0), squeeze(c, 0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        input, batched = self._prep(input, hx)
        h = self._state(hx, input, batched)
        h = _gru_step(F.linear(input, self.weight_ih, self.bias_ih), h, self.weight_hh,
                      self.bias_hh)
        return h if batched else squeeze(h, 0)
