"""Layers with PyTorch's signatures and default initialisations."""
import math

from ..dtypes import int64
from ..grad_mode import no_grad
from ..ops import empty, ones, zeros, flatten, reshape
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["Identity", "Linear", "Conv2d", "Embedding", "LayerNorm", "BatchNorm1d",
           "BatchNorm2d", "Dropout", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "LeakyReLU",
           "ELU", "Softplus", "Softmax", "LogSoftmax", "Flatten", "Unflatten", "MaxPool2d",
           "AvgPool2d", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCELoss",
           "BCEWithLogitsLoss"]


def _empty(*shape, device=None, dtype=None):
    return Parameter(empty(shape, dtype=dtype, device=device))


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``; weight ``(out_features, in_features)`` drawn from
    Kaiming-uniform (a=sqrt(5)), bias from U(-1/sqrt(in), 1/sqrt(in)), as PyTorch."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = _empty(out_features, in_features, device=device, dtype=dtype)
        if bias:
            self.bias = _empty(out_features, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Conv2d(Module):
    """2-D convolution over ``(N, C, H, W)``; PyTorch's arguments and initialisation."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("Conv2d: in_channels and out_channels must be divisible by "
                             f"groups, got {in_channels}, {out_channels}, groups={groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"Conv2d: padding_mode must be 'zeros', 'reflect', "
                             f"'replicate' or 'circular', got {padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride)
        self.padding = padding if isinstance(padding, str) else _pair(padding)
        self.dilation = _pair(dilation)
        self.groups = groups
        self.padding_mode = padding_mode
        self.weight = _empty(out_channels, in_channels // groups, *self.kernel_size,
                             device=device, dtype=dtype)
        if bias:
            self.bias = _empty(out_channels, device=device, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

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


class Embedding(Module):
    """A lookup table ``(num_embeddings, embedding_dim)`` initialised N(0, 1); the
    ``padding_idx`` row is zero and gets no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 device=None, dtype=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse "
                                      "are not supported")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = _empty(num_embeddings, embedding_dim, device=device, dtype=dtype)
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0

    def forward(self, input):
        if self.padding_idx is None:
            return F.embedding(input, self.weight)
        return F.embedding(input, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class LayerNorm(Module):
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
                f"elementwise_affine={self.elementwise_affine}")


class _BatchNorm(Module):
    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype,
                                                           device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype,
                                                         device=device))
            self.register_buffer("num_batches_tracked", zeros((), dtype=int64,
                                                                  device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def _check_input_dim(self, input):
        if input.ndim not in self._ndims:
            raise ValueError(f"{type(self).__name__}: expected "
                             f"{' or '.join(f'{n}D' for n in self._ndims)} input "
                             f"(got {input.ndim}D input)")
        if input.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected {self.num_features} channels "
                             f"in dim 1, got input of shape {tuple(input.shape)}")

    def forward(self, input):
        self._check_input_dim(input)
        use_batch_stats = self.training or self.running_mean is None
        if self.training and self.track_running_stats:
            self._update_running_stats(input)
        if use_batch_stats:
            return F.batch_norm(input, None, None, self.weight, self.bias, True, 0.0,
                                self.eps)
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                            self.bias, False, 0.0, self.eps)

    def _update_running_stats(self, input):
        """PyTorch's running statistics: an exponential average (or, with
        ``momentum=None``, a cumulative one) of the batch mean and unbiased variance,
        computed and written with ops (so ``tg.compile`` captures the update)."""
        shape = tuple(input.shape)
        n = math.prod(shape) // shape[1] if len(shape) > 1 else 0
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got "
                             f"input size {shape}")
        with no_grad():
            self.num_batches_tracked.add_(1)
            factor = (1.0 / int(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
            dims = (0,) + tuple(range(2, len(shape)))
            x = input.detach()
            mean = x.mean(dim=dims)
            var = x.var(dim=dims, correction=1)
            for buf, stat in ((self.running_mean, mean), (self.running_var, var)):
                buf.mul_(1 - factor).add_((stat * factor).to(buf.dtype))

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over ``(N, C)`` or ``(N, C, L)``, with running statistics."""
    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over ``(N, C, H, W)``, with running statistics."""
    _ndims = (4,)


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        if not self.training or self.p == 0:
            return input
        return F.dropout(input, self.p, True, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class _Activation(Module):
    """An activation with PyTorch's ``inplace`` flag: ``inplace=True`` overwrites the
    input and returns it."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ReLU(_Activation):
    def forward(self, input):
        return F.relu(input, self.inplace)


class SiLU(_Activation):
    def forward(self, input):
        return F.silu(input, self.inplace)


class Tanh(_Activation):
    def forward(self, input):
        return input.tanh_() if self.inplace else F.tanh(input)


class Sigmoid(_Activation):
    def forward(self, input):
        return input.sigmoid_() if self.inplace else F.sigmoid(input)


class GELU(Module):
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
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        shape = list(input.shape)
        d = self.dim % len(shape)
        return reshape(input, tuple(shape[:d]) + self.unflattened_size + tuple(shape[d + 1:]))

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        kw = {}
        if self.dilation != 1:
            kw["dilation"] = self.dilation
        if self.ceil_mode:
            kw["ceil_mode"] = True
        if self.return_indices:
            kw["return_indices"] = True
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, **kw)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, "
                f"ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


# ---------------------------------------------------------------- losses
class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"{type(self).__name__}: reduction must be 'none', 'mean' or "
                             f"'sum', got {reduction!r}")
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        kw = {}
        if self.weight is not None:
            kw["weight"] = self.weight
        if self.ignore_index != -100:
            kw["ignore_index"] = self.ignore_index
        if self.label_smoothing:
            kw["label_smoothing"] = self.label_smoothing
        if self.reduction != "mean":
            kw["reduction"] = self.reduction
        return F.cross_entropy(input, target, **kw)


class NLLLoss(_Loss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class BCELoss(_Loss):
    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, weight=self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)
