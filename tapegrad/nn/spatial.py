"""Conv1d, ConvTranspose2d, GroupNorm, Upsample, Unfold and Fold: PyTorch's arguments,
parameter names and default initialisations (a PyTorch state dict loads by key)."""
import math

from ..ops import empty, ones, zeros
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["Conv1d", "ConvTranspose2d", "GroupNorm", "Upsample", "Unfold", "Fold"]


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _init_conv(module, fan_in_dims):
    init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    if module.bias is not None:
        fan_in = math.prod(module.weight.shape[d] for d in fan_in_dims)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(module.bias, -bound, bound)


def _params(module, shape, out_channels, bias, device, dtype):
    module.weight = Parameter(empty(shape, dtype=dtype, device=device))
    if bias:
        module.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
    else:
        module.register_parameter("bias", None)


class Conv1d(Module):
    """1-D convolution over ``(N, C, L)``; weight ``(out_channels, in_channels / groups,
    kernel_size)``, PyTorch's arguments and initialisation."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("Conv1d: in_channels and out_channels must be divisible by "
                             f"groups, got {in_channels}, {out_channels}, groups={groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"Conv1d: padding_mode must be 'zeros', 'reflect', "
                             f"'replicate' or 'circular', got {padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, 1)
        self.stride = _tuple(stride, 1)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, 1)
        self.dilation = _tuple(dilation, 1)
        self.groups, self.padding_mode = groups, padding_mode
        _params(self, (out_channels, in_channels // groups) + self.kernel_size, out_channels,
                bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _init_conv(self, (1, 2))

    def forward(self, input):
        padding = self.padding
        if self.padding_mode != "zeros" and not isinstance(padding, str):
            p = padding[0]
            input = F.pad(input, (p, p), mode=self.padding_mode)
            padding = 0
        return F.conv1d(input, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,):
            s += f", padding={self.padding}"
        if self.dilation != (1,):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose2d(Module):
    """2-D transposed convolution; weight ``(in_channels, out_channels / groups, kH,
    kW)``, PyTorch's arguments (``forward(input, output_size=None)``) and
    initialisation."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("ConvTranspose2d: in_channels and out_channels must be divisible "
                             f"by groups, got {in_channels}, {out_channels}, groups={groups}")
        if padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for ConvTranspose2d, "
                             f"got {padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _tuple(kernel_size, 2)
        self.stride = _tuple(stride, 2)
        self.padding = _tuple(padding, 2)
        self.output_padding = _tuple(output_padding, 2)
        self.dilation = _tuple(dilation, 2)
        self.groups, self.padding_mode = groups, padding_mode
        _params(self, (in_channels, out_channels // groups) + self.kernel_size, out_channels,
                bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _init_conv(self, (1, 2, 3))

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        output_size = tuple(output_size)[-2:]
        out = []
        for d in range(2):
            n = input.shape[d + 2]
            lo = ((n - 1) * self.stride[d] - 2 * self.padding[d]
                  + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            if not lo <= output_size[d] < lo + self.stride[d]:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes "
                                 f"range from {lo} to {lo + self.stride[d] - 1} in dim {d + 2} "
                                 f"(for an input of {tuple(input.shape[2:])})")
            out.append(output_size[d] - lo)
        return tuple(out)

    def forward(self, input, output_size=None):
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups,
                                  self.dilation)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


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
        self._has_bias = bias

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self._has_bias}")


class Upsample(Module):
    """``Upsample(size=None, scale_factor=None, mode='nearest', align_corners=None,
    recompute_scale_factor=None)``: ``F.interpolate`` as a module (no parameters)."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) \
            else (tuple(float(s) for s in scale_factor) if scale_factor else None)
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")
