"""LayerNorm, GroupNorm, LocalResponseNorm, CrossMapLRN2d and RMSNorm
(``torch.nn.modules.normalization``)."""
import numpy as np

from ...ops import einsum, ones, zeros
from .. import functional as F, init
from ..module import Module
from ..parameter import Parameter

__all__ = ["LocalResponseNorm", "CrossMapLRN2d", "LayerNorm", "GroupNorm", "RMSNorm"]


class LayerNorm(Module):
    """Layer normalization over the last dims (``normalized_shape``), with an affine map, as
    ``torch.nn.LayerNorm``."""
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype,
                                                device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(Module):
    """``GroupNorm(num_groups, num_channels, eps=1e-5, affine=True, device=None,
    dtype=None, *, bias=True)``: weight ones and bias zeros of ``(num_channels,)``, as
    PyTorch."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """Local response normalization across neighbouring channels, as
    ``torch.nn.LocalResponseNorm``."""
    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(Module):
    """The legacy cross-channel LRN of (N, C, H, W): ``x (k + alpha / size * s)^-beta``,
    ``s`` a running sum of squares over channels exactly as PyTorch's (legacy) forward
    computes it: channels ``0 .. c + p - 1`` (``p = (size - 1) // 2 + 1``), minus
    channels ``1 .. c - p`` (so channel 0 is never dropped, as in PyTorch)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def _window(self, C):
        p = int((self.size - 1) / 2 + 1)
        m = np.zeros((C, C))
        for c in range(C):
            m[c, :min(c + p, C) if c else min(p, C)] = 1
            if c > p:
                m[c, 1:c - p + 1] = 0
        return m

    def forward(self, input):
        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D "
                             f"instead.")
        m = input.new_tensor(self._window(input.shape[1]))
        s = einsum("cj,njhw->nchw", m, input * input)
        return input * (s * (self.alpha / self.size) + self.k) ** (-self.beta)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class RMSNorm(Module):
    """Root-mean-square normalization over the last dims, with a scale, as
    ``torch.nn.RMSNorm``."""
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = ns, eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(ns, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")
