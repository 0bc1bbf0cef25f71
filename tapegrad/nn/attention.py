"""``MultiheadAttention`` with PyTorch's parameters (``in_proj_weight``,
``in_proj_bias``, ``out_proj``) and initialisation."""
import math

import numpy as np

from .. import dtypes as _dt
from ..ops import (empty, masked_fill, matmul, mean, permute, reshape, squeeze, tensor,
                   transpose, unsqueeze, zeros)
from ..tensor import Tensor
from . import functional as F
from . import init
from .layers import Linear
from .module import Module
from .parameter import Parameter

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """``MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
    batch_first=False)``; ``forward(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False)``
    returns ``(attn_output, attn_weights or None)`` as PyTorch."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim % num_heads:
            raise AssertionError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                                 f"({num_heads})")
        if add_bias_kv or add_zero_attn or (kdim not in (None, embed_dim)) or \
                (vdim not in (None, embed_dim)):
            raise NotImplementedError("MultiheadAttention: add_bias_kv, add_zero_attn and "
                                      "kdim/vdim different from embed_dim are not supported")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout, self.batch_first = dropout, batch_first
        self.kdim = self.vdim = embed_dim
        self._qkv_same_embed_dim = True
        self.in_proj_weight = Parameter(empty((3 * embed_dim, embed_dim), dtype=dtype,
                                                  device=device))
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dtype, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self):
        init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
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
