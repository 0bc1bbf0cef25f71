"""The convolution modules, ``torch.nn.modules.conv``'s: Conv1d, Conv2d, Conv3d,
ConvTranspose1d, ConvTranspose2d, ConvTranspose3d over one ``_ConvNd`` base (PyTorch's
arguments, checks, parameter names and initialisation: a PyTorch state dict loads by
key), each calling its ``tg.nn.functional`` convolution."""
import math

from ...ops import empty
from .. import functional as F, init
from ..module import Module
from ..parameter import Parameter, UninitializedParameter
from .lazy import LazyModuleMixin

__all__ = ['Conv1d', 'Conv2d', 'Conv3d', 'ConvTranspose1d', 'ConvTranspose2d', 'ConvTranspose3d',
           'LazyConv1d', 'LazyConv2d', 'LazyConv3d', 'LazyConvTranspose1d', 'LazyConvTranspose2d',
           'LazyConvTranspose3d']


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _ConvNd(Module):
    """A convolution's arguments, checks and parameters: the kernel arguments as
    ``_n``-tuples (a convolution's padding may be 'same' or 'valid'), weight
    ``(out_channels, in_channels / groups, *kernel_size)`` (transposed: ``(in_channels,
    out_channels / groups, *kernel_size)``) Kaiming-uniform (a=sqrt(5)) and bias
    ``(out_channels,)`` from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch."""
    _n = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 transposed, output_padding, groups, bias, padding_mode, device=None,
                 dtype=None):
        super().__init__()
        name, n = type(self).__name__, self._n
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels and out_channels must be divisible by "
                             f"groups, got {in_channels}, {out_channels}, groups={groups}")
        if transposed and padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for {name}, "
                             f"got {padding_mode!r}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name}: padding_mode must be 'zeros', 'reflect', "
                             f"'replicate' or 'circular', got {padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = _ntuple(kernel_size, n), _ntuple(stride, n)
        self.padding = (padding if isinstance(padding, str) and not transposed
                        else _ntuple(padding, n))
        if transposed:
            self.output_padding = _ntuple(output_padding, n)
        self.dilation, self.groups, self.padding_mode = _ntuple(dilation, n), groups, padding_mode
        shape = ((in_channels, out_channels // groups) if transposed
                 else (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(empty(shape, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = math.prod(self.weight.shape[1:])
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")


class Conv1d(_ConvNd):
    """1-D convolution over ``(N, C, L)``; weight ``(out_channels, in_channels / groups,
    kernel_size)``, PyTorch's arguments and initialisation."""
    _n = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, 0, groups, bias, padding_mode, device, dtype)

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


class Conv2d(_ConvNd):
    """2-D convolution over ``(N, C, H, W)``; PyTorch's arguments and initialisation."""
    _n = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, 0, groups, bias, padding_mode, device, dtype)

    def forward(self, input):
        padding = self.padding
        if self.padding_mode != "zeros" and not isinstance(padding, str):
            ph, pw = padding
            input = F.pad(input, (pw, pw, ph, ph), mode=self.padding_mode)
            padding = (0, 0)
        return F.conv2d(input, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv3d(_ConvNd):
    """3-D convolution over ``(N, C, D, H, W)``; PyTorch's arguments and initialisation."""
    _n = 3

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, 0, groups, bias, padding_mode, device, dtype)

    def forward(self, input):
        padding = self.padding
        if self.padding_mode != "zeros":
            if isinstance(padding, str):  # 'same' (the odd element at the end) or 'valid'
                tot = [d * (k - 1) if padding == "same" else 0
                       for d, k in zip(self.dilation, self.kernel_size)]
                widths = [(t // 2, t - t // 2) for t in tot]
            else:
                widths = [(p, p) for p in padding]
            (d0, d1), (h0, h1), (w0, w1) = widths
            input = F.pad(input, (w0, w1, h0, h1, d0, d1), mode=self.padding_mode)
            padding = 0
        return F.conv3d(input, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups)


class ConvTranspose1d(_ConvNd):
    """1-D transposed convolution; weight ``(in_channels, out_channels / groups, k)``,
    PyTorch's arguments and initialisation."""
    _n = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, device, dtype)

    def forward(self, input, output_size=None):
        op = self.output_padding
        if output_size is not None:
            L = input.shape[-1]
            base = (L - 1) * self.stride[0] - 2 * self.padding[0] + \
                self.dilation[0] * (self.kernel_size[0] - 1) + 1
            op = (int(tuple(output_size)[-1]) - base,)
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding, op,
                                  self.groups, self.dilation)


class ConvTranspose2d(_ConvNd):
    """2-D transposed convolution; weight ``(in_channels, out_channels / groups, kH,
    kW)``, PyTorch's arguments (``forward(input, output_size=None)``) and
    initialisation."""
    _n = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, device, dtype)

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


class ConvTranspose3d(_ConvNd):
    """3-D transposed convolution; weight ``(in_channels, out_channels / groups, kD, kH,
    kW)``, PyTorch's arguments and initialisation."""
    _n = 3

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, device, dtype)

    def forward(self, input, output_size=None):
        op = self.output_padding
        if output_size is not None:
            sp = tuple(input.shape[-3:])
            want = tuple(output_size)[-3:]
            op = tuple(int(w) - ((n - 1) * s - 2 * p + d * (k - 1) + 1)
                       for w, n, s, p, d, k in zip(want, sp, self.stride, self.padding,
                                                   self.dilation, self.kernel_size))
        return F.conv_transpose3d(input, self.weight, self.bias, self.stride, self.padding, op,
                                  self.groups, self.dilation)



class _LazyConvMixin(LazyModuleMixin):
    """The lazy convolutions (PyTorch's arguments, without ``in_channels``):
    ``in_channels`` from the first input's dim 1 (dim 0 unbatched), then the weight and
    bias of the convolution's shapes."""

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False,
                         padding_mode)
        self._lazy_init(out_channels, bias, device, dtype)

    def _lazy_init(self, out_channels, bias, device, dtype):
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs):
        if not self.has_uninitialized_params():
            return
        if input.dim() not in (self._n + 1, self._n + 2):
            raise ValueError(f"Expected {self._n + 1}D (unbatched) or {self._n + 2}D (batched) "
                             f"input to {type(self).__name__}, but got input of size: "
                             f"{list(input.shape)}")
        self.in_channels = input.shape[1] if input.dim() == self._n + 2 else input.shape[0]
        if self.in_channels % self.groups:
            raise ValueError("in_channels must be divisible by groups")
        g = self.groups
        self.weight.materialize(
            ((self.in_channels, self.out_channels // g) if hasattr(self, "output_padding")
             else (self.out_channels, self.in_channels // g)) + self.kernel_size)
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))
        self.reset_parameters()


class _LazyConvTransposeMixin(_LazyConvMixin):
    """The lazy transposed convolutions: their arguments' order (``output_padding``)."""

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", device=None,
                 dtype=None):
        LazyModuleMixin.__init__(self, 0, 0, kernel_size, stride, padding, output_padding,
                                 groups, False, dilation, padding_mode)
        self._lazy_init(out_channels, bias, device, dtype)



def _lazy(conv, mixin):
    """``Lazy<conv>``: a ``conv`` whose ``in_channels`` is its first input's channel
    count, as PyTorch's; it becomes a ``conv`` then."""
    name = f"Lazy{conv.__name__}"
    return type(name, (mixin, conv), {
        "cls_to_become": conv, "__module__": __name__, "__qualname__": name,
        "__doc__": f"A ``{conv.__name__}`` whose ``in_channels`` is its first input's "
                   f"channel count, as ``torch.nn.{name}``; it becomes a "
                   f"``{conv.__name__}`` then."})


LazyConv1d, LazyConv2d, LazyConv3d = (_lazy(c, _LazyConvMixin) for c in (Conv1d, Conv2d, Conv3d))
LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d = (
    _lazy(c, _LazyConvTransposeMixin)
    for c in (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d))
