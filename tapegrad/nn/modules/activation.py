"""The activation modules (``torch.nn.modules.activation``): ReLU, GELU, the
hard/soft shrinks and clamps, Softmax and friends, PReLU, RReLU, each over its
``tg.nn.functional`` function, and MultiheadAttention (PyTorch keeps it here too)."""
import math

import numpy as np

from ... import dtypes as _dt
from ...grad_mode import no_grad
from ...ops import (
    empty,
    masked_fill,
    matmul,
    mean,
    permute,
    reshape,
    squeeze,
    tensor,
    transpose,
    unsqueeze,
    zeros,
)
from ...tensor import Tensor
from .. import functional as F, init
from ..module import Module
from ..parameter import Parameter
from .linear import Linear

__all__ = ["Threshold", "ReLU", "RReLU", "Hardtanh", "ReLU6", "Sigmoid", "Hardsigmoid", "Tanh",
           "SiLU", "Mish", "Hardswish", "ELU", "CELU", "SELU", "GLU", "GELU",
           "Hardshrink", "LeakyReLU", "LogSigmoid", "Softplus", "Softshrink",
           "MultiheadAttention", "PReLU", "Softsign", "Tanhshrink", "Softmin",
           "Softmax", "Softmax2d", "LogSoftmax"]


class _Activation(Module):
    """An activation with PyTorch's ``inplace`` flag: ``inplace=True`` overwrites the
    input and returns it."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ReLU(_Activation):
    """The ReLU activation, as ``torch.nn.ReLU``."""
    def forward(self, input):
        return F.relu(input, self.inplace)


class SiLU(_Activation):
    """The SiLU (swish) activation, ``x * sigmoid(x)``, as ``torch.nn.SiLU``."""
    def forward(self, input):
        return F.silu(input, self.inplace)


class Tanh(_Activation):
    """The hyperbolic tangent activation, as ``torch.nn.Tanh``."""
    def forward(self, input):
        return input.tanh_() if self.inplace else F.tanh(input)


class Sigmoid(_Activation):
    """The logistic sigmoid activation, as ``torch.nn.Sigmoid``."""
    def forward(self, input):
        return input.sigmoid_() if self.inplace else F.sigmoid(input)


class GELU(Module):
    """The GELU activation (``approximate='tanh'`` for the tanh form), as
    ``torch.nn.GELU``."""
    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        if self.approximate == "none":
            return F.gelu(input)
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate='{self.approximate}'"


class LeakyReLU(Module):
    """The leaky ReLU activation, as ``torch.nn.LeakyReLU``."""
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """The ELU activation, as ``torch.nn.ELU``."""
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta x)) / beta``, linear above ``threshold``, as
    ``torch.nn.Softplus``."""
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    """Softmax along ``dim``, as ``torch.nn.Softmax``."""
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """``log(softmax(x))`` along ``dim``, computed stably, as ``torch.nn.LogSoftmax``."""
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class _Act(Module):
    """An activation ``F.<fn>(input, **self.<args>)``; ``_args`` names the constructor's
    arguments (stored as attributes, shown by ``repr``)."""
    _fn = None
    _args = ()

    def __init__(self, *args, **kwargs):
        super().__init__()
        names = [n for n, _ in self._args]
        vals = dict(self._args)
        for n, v in zip(names, args):
            vals[n] = v
        for n, v in kwargs.items():
            if n not in vals:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword "
                                f"argument '{n}'")
            vals[n] = v
        for n in names:
            setattr(self, n, vals[n])

    def forward(self, input):
        return getattr(F, self._fn)(input, **{n: getattr(self, n) for n, _ in self._args})

    def extra_repr(self):
        return ", ".join(f"{n}={getattr(self, n)}" for n, _ in self._args)


def _act(name, fn, *args):
    return type(name, (_Act,), {"_fn": fn, "_args": args, "__doc__": f"``F.{fn}`` as a module."})


CELU = _act("CELU", "celu", ("alpha", 1.0), ("inplace", False))
SELU = _act("SELU", "selu", ("inplace", False))
Hardshrink = _act("Hardshrink", "hardshrink", ("lambd", 0.5))
Hardsigmoid = _act("Hardsigmoid", "hardsigmoid", ("inplace", False))
Hardswish = _act("Hardswish", "hardswish", ("inplace", False))
Hardtanh = _act("Hardtanh", "hardtanh", ("min_val", -1.0), ("max_val", 1.0), ("inplace", False))
ReLU6 = _act("ReLU6", "relu6", ("inplace", False))
Softshrink = _act("Softshrink", "softshrink", ("lambd", 0.5))
Softsign = _act("Softsign", "softsign")
Tanhshrink = _act("Tanhshrink", "tanhshrink")
Threshold = _act("Threshold", "threshold", ("threshold", None), ("value", None),
                 ("inplace", False))
GLU = _act("GLU", "glu", ("dim", -1))
Softmin = _act("Softmin", "softmin", ("dim", None))
LogSigmoid = _act("LogSigmoid", "logsigmoid")
Mish = _act("Mish", "mish", ("inplace", False))


for _c in (CELU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, ReLU6, Softshrink,
           Softsign, Tanhshrink, Threshold, GLU, Softmin, LogSigmoid, Mish):
    _c.__module__ = __name__
del _c


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of (N, C, H, W) or (C, H, W)."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D "
                             f"instead")
        return F.softmax(input, -3)


class RReLU(Module):
    """Randomized leaky ReLU: slopes drawn from U(lower, upper) in training, their mean
    in evaluation."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace
                                                            else "")


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)``; ``weight`` (``num_parameters``,) filled with
    ``init``."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(empty((num_parameters,), dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self):
        with no_grad():
            self.weight.fill_(self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class MultiheadAttention(Module):
    """``MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
    add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None, batch_first=False)``;
    ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` returns
    ``(attn_output, attn_weights or None)`` as PyTorch. Keys and values of other widths
    (``kdim``, ``vdim``: separate ``q/k/v_proj_weight``), ``bias_k``/``bias_v`` and
    ``add_zero_attn`` run ``F.multi_head_attention_forward``, as PyTorch's module."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise AssertionError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                                 f"({num_heads})")
        kw = dict(dtype=dtype, device=device)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.head_dim = embed_dim // num_heads
        self.dropout, self.batch_first = dropout, batch_first
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty((3 * embed_dim, embed_dim), **kw))
            for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(n, None)
        else:
            self.q_proj_weight = Parameter(empty((embed_dim, embed_dim), **kw))
            self.k_proj_weight = Parameter(empty((embed_dim, self.kdim), **kw))
            self.v_proj_weight = Parameter(empty((embed_dim, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(empty((1, 1, embed_dim), **kw))
            self.bias_v = Parameter(empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        if not self._qkv_same_embed_dim or self.bias_k is not None or self.add_zero_attn:
            return self._general(query, key, value, key_padding_mask, need_weights,
                                 attn_mask, average_attn_weights, is_causal)
        batched = query.ndim == 3
        if not batched:
            query, key, value = (unsqueeze(t, 0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = unsqueeze(key_padding_mask, 0)
        elif not self.batch_first:
            query, key, value = (transpose(t, 0, 1) for t in (query, key, value))
        n, tgt_len, e = query.shape
        src_len = key.shape[1]
        if e != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, "
                                 f"but got {e}")
        q, k, v = self._project(query, key, value)
        h, d = self.num_heads, self.head_dim
        q = permute(reshape(q, (n, tgt_len, h, d)), (0, 2, 1, 3))
        k = permute(reshape(k, (n, src_len, h, d)), (0, 2, 3, 1))
        v = permute(reshape(v, (n, src_len, h, d)), (0, 2, 1, 3))
        scores = matmul(q * (1.0 / math.sqrt(d)), k)          # (n, h, L, S)
        mask = self._mask(attn_mask, key_padding_mask, is_causal, n, tgt_len, src_len,
                          scores.dtype, scores.device)
        if mask is not None:
            scores = scores + mask
        weights = F.softmax(scores, -1)
        if self.dropout > 0 and self.training:
            weights = F.dropout(weights, self.dropout, True)
        out = matmul(weights, v)                                # (n, h, L, d)
        out = reshape(permute(out, (0, 2, 1, 3)), (n, tgt_len, e))
        out = self.out_proj(out)
        if not batched:
            out = squeeze(out, 0)
        elif not self.batch_first:
            out = transpose(out, 0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = mean(weights, dim=1)
        if not batched:
            weights = squeeze(weights, 0)
        return out, weights

    def _general(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                 average_attn_weights, is_causal):
        """PyTorch's module's path: ``F.multi_head_attention_forward`` on (L, N, E)."""
        swap = self.batch_first and query.ndim == 3
        if swap:
            query, key, value = (transpose(t, 0, 1) for t in (query, key, value))
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
            is_causal=is_causal)
        return (transpose(out, 0, 1) if swap else out), weights

    def _project(self, query, key, value):
        e = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if query is key and key is value:
            qkv = F.linear(query, w, b)
            return qkv[..., :e], qkv[..., e:2 * e], qkv[..., 2 * e:]
        bs = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        return (F.linear(query, w[:e], bs[0]), F.linear(key, w[e:2 * e], bs[1]),
                F.linear(value, w[2 * e:], bs[2]))

    def _mask(self, attn_mask, key_padding_mask, is_causal, n, L, S, dtype, device):
        """One additive float mask broadcastable to (n, h, L, S), or None (the causal
        one made on the scores' ``device``)."""
        parts = []
        if attn_mask is None and is_causal:
            attn_mask = tensor(np.triu(np.ones((L, S), dtype=bool), 1), device=device)
        if attn_mask is not None:
            m = _additive(attn_mask, dtype)
            if m.ndim == 3:   # (n * h, L, S)
                m = reshape(m, (n, self.num_heads, L, S))
            parts.append(m)
        if key_padding_mask is not None:
            m = _additive(key_padding_mask, dtype)
            parts.append(reshape(m, (n, 1, 1, S)))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else parts[0] + parts[1]

    def extra_repr(self):
        return ""

    def __repr__(self):
        return (f"MultiheadAttention(\n  (out_proj): "
                f"NonDynamicallyQuantizableLinear(in_features={self.embed_dim}, "
                f"out_features={self.embed_dim}, bias={self.out_proj.bias is not None})\n)")


def _additive(mask, dtype):
    if not isinstance(mask, Tensor):
        mask = tensor(np.asarray(mask))
    if mask.dtype == _dt.bool:
        return masked_fill(zeros(mask.shape, dtype=dtype, device=mask.device), mask,
                           float("-inf"))
    return mask
