"""More of ``torch.nn``'s modules (issue 17's census), each over a ``tg.nn.functional``
function, with PyTorch's constructor arguments, defaults, state dict keys and
initialisation: activations, losses, padding, 1-d/3-d/adaptive/power/unpooling,
distances, shuffles, instance/local-response/RMS norms, BatchNorm3d, the channel
dropouts, Upsampling*2d, Bilinear, EmbeddingBag, ConvTranspose1d, ParameterDict and LinearCrossEntropyLoss;
Conv3d, ConvTranspose3d, CTCLoss, FractionalMaxPool2d/3d, AdaptiveLogSoftmaxWithLoss."""
import math
from collections import namedtuple

import numpy as np

from ..grad_mode import no_grad
from ..dtypes import int64
from ..ops import empty, ones, zeros, einsum
from ..ops.shape import cat
from ..ops.indexing import index_select
from ..ops.indexed_update import index_add
from . import functional as F
from . import init
from .module import Module
from .container import Sequential, ModuleList
from .parameter import Parameter, is_parameter
from .layers import _Loss, _BatchNorm, Dropout, NLLLoss, Linear
from .spatial import Upsample, _params, _init_conv

__all__ = [
    "CELU", "SELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "ReLU6", "Softshrink",
    "Softsign", "Tanhshrink", "Threshold", "GLU", "Softmin", "LogSigmoid", "Mish", "Softmax2d",
    "RReLU", "PReLU",
    "CosineEmbeddingLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "KLDivLoss",
    "MarginRankingLoss", "MultiMarginLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss",
    "PoissonNLLLoss", "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
    "NLLLoss2d", "LinearCrossEntropyLoss",
    "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d",
    "ReplicationPad2d", "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d",
    "AvgPool1d", "AvgPool3d", "MaxPool1d", "MaxPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
    "CosineSimilarity", "PairwiseDistance", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "CrossMapLRN2d",
    "RMSNorm", "BatchNorm3d",
    "Dropout1d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "UpsamplingNearest2d", "UpsamplingBilinear2d",
    "Bilinear", "EmbeddingBag", "ConvTranspose1d", "ParameterDict",
    "Conv3d", "ConvTranspose3d", "CTCLoss", "FractionalMaxPool2d", "FractionalMaxPool3d",
    "AdaptiveLogSoftmaxWithLoss",
]


# ------------------------------------------------------------------ activations
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


# ------------------------------------------------------------------ losses
class _LegacyLoss(_Loss):
    """A loss taking PyTorch's deprecated ``size_average``/``reduce`` flags too."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        if size_average is not None or reduce is not None:
            sa = True if size_average is None else size_average
            rd = True if reduce is None else reduce
            reduction = ("mean" if sa else "sum") if rd else "none"
        super().__init__(reduction)


class CosineEmbeddingLoss(_LegacyLoss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin,
                                       reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps,
                                   reduction=self.reduction)


class HingeEmbeddingLoss(_LegacyLoss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin,
                                      reduction=self.reduction)


class KLDivLoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__()
        if size_average is not None or reduce is not None:
            sa = True if size_average is None else size_average
            rd = True if reduce is None else reduce
            reduction = ("mean" if sa else "sum") if rd else "none"
        if reduction not in ("none", "mean", "sum", "batchmean"):
            raise ValueError(f"KLDivLoss: reduction must be 'none', 'mean', 'sum' or "
                             f"'batchmean', got {reduction!r}")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class MarginRankingLoss(_LegacyLoss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin,
                                     reduction=self.reduction)


class MultiMarginLoss(_LegacyLoss):
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        self.p, self.margin = p, margin
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin,
                                   weight=self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_LegacyLoss):
    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_LegacyLoss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight,
                                             reduction=self.reduction)


class PoissonNLLLoss(_LegacyLoss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class SoftMarginLoss(_LegacyLoss):
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class TripletMarginLoss(_LegacyLoss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got "
                             f"{margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p,
                                     eps=self.eps, swap=self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater "
                             f"than 0, got {margin} instead")
        self.distance_function = distance_function
        self.margin, self.swap = margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)


class NLLLoss2d(NLLLoss):
    """Deprecated: ``NLLLoss`` (which takes (N, C, H, W) inputs itself)."""


class LinearCrossEntropyLoss(Module):
    """``cross_entropy(linear(input), target)``; the projection ``linear`` (``Linear(
    in_features, num_classes, bias)``)."""

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None,
                 dtype=None, reduction="mean", weight=None, ignore_index=None,
                 label_smoothing=0.0, options=None):
        super().__init__()
        if tuple(out_features):
            raise NotImplementedError("LinearCrossEntropyLoss: out_features is not supported")
        self.linear = Linear(in_features, num_classes, bias=bias, device=device, dtype=dtype)
        self.reduction, self.ignore_index = reduction, ignore_index
        self.label_smoothing, self.options = label_smoothing, options
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.linear_cross_entropy(input, self.linear.weight, target,
                                      linear_bias=self.linear.bias, weight=self.weight,
                                      reduction=self.reduction, ignore_index=self.ignore_index,
                                      label_smoothing=self.label_smoothing)


# ------------------------------------------------------------------ padding
class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding, value=None):
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) \
            else (padding,) * (2 * self._n)
        if len(self.padding) != 2 * self._n:
            raise ValueError(f"{type(self).__name__}: padding must be an int or "
                             f"{2 * self._n} ints, got {self.padding}")
        if value is not None:
            self.value = value

    def forward(self, input):
        if input.ndim not in (self._n + 1, self._n + 2):
            raise ValueError(f"{type(self).__name__}: expected {self._n + 1}D or "
                             f"{self._n + 2}D input, got {input.ndim}D")
        if self._mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}" + (f", value={self.value}" if self._mode == "constant" else "")


def _pads():
    made = {}
    for kind, mode in (("Constant", "constant"), ("Zero", "constant"), ("Reflection", "reflect"),
                       ("Replication", "replicate"), ("Circular", "circular")):
        for n in (1, 2, 3):
            name = f"{kind}Pad{n}d"
            body = {"_n": n, "_mode": mode, "__module__": __name__,
                    "__doc__": f"``F.pad(input, padding, {mode!r})`` over the last {n} dims."}
            if kind == "Constant":
                def __init__(self, padding, value):
                    _PadNd.__init__(self, padding, value)
                body["__init__"] = __init__
            elif kind == "Zero":
                def __init__(self, padding):
                    _PadNd.__init__(self, padding, 0.0)
                body["__init__"] = __init__
            made[name] = type(name, (_PadNd,), body)
    return made


_PADS = _pads()
ConstantPad1d = _PADS["ConstantPad1d"]
ConstantPad2d = _PADS["ConstantPad2d"]
ConstantPad3d = _PADS["ConstantPad3d"]
ZeroPad1d = _PADS["ZeroPad1d"]
ZeroPad2d = _PADS["ZeroPad2d"]
ZeroPad3d = _PADS["ZeroPad3d"]
ReflectionPad1d = _PADS["ReflectionPad1d"]
ReflectionPad2d = _PADS["ReflectionPad2d"]
ReflectionPad3d = _PADS["ReflectionPad3d"]
ReplicationPad1d = _PADS["ReplicationPad1d"]
ReplicationPad2d = _PADS["ReplicationPad2d"]
ReplicationPad3d = _PADS["ReplicationPad3d"]
CircularPad1d = _PADS["CircularPad1d"]
CircularPad2d = _PADS["CircularPad2d"]
CircularPad3d = _PADS["CircularPad3d"]


# ------------------------------------------------------------------ pooling
class _Pool(_Act):
    """``F.<fn>(input, **self.<args>)``, as the activations."""


_REQ = object()  # a required argument


def _pool(name, fn, *args):
    def __init__(self, *a, **k):
        _Act.__init__(self, *a, **k)
        for n, v in self._args:
            if getattr(self, n) is _REQ:
                raise TypeError(f"{name}.__init__() missing required argument: '{n}'")
        if hasattr(self, "stride") and self.stride is None and hasattr(self, "kernel_size") \
                and fn not in ("lp_pool1d", "lp_pool2d", "lp_pool3d"):
            self.stride = self.kernel_size
    return type(name, (_Pool,), {"_fn": fn, "_args": args, "__init__": __init__,
                                 "__module__": __name__, "__doc__": f"``F.{fn}`` as a module."})


AvgPool1d = _pool("AvgPool1d", "avg_pool1d", ("kernel_size", _REQ), ("stride", None),
                  ("padding", 0), ("ceil_mode", False), ("count_include_pad", True))
AvgPool3d = _pool("AvgPool3d", "avg_pool3d", ("kernel_size", _REQ), ("stride", None),
                  ("padding", 0), ("ceil_mode", False), ("count_include_pad", True),
                  ("divisor_override", None))
MaxPool1d = _pool("MaxPool1d", "max_pool1d", ("kernel_size", _REQ), ("stride", None),
                  ("padding", 0), ("dilation", 1), ("return_indices", False), ("ceil_mode", False))
MaxPool3d = _pool("MaxPool3d", "max_pool3d", ("kernel_size", _REQ), ("stride", None),
                  ("padding", 0), ("dilation", 1), ("return_indices", False), ("ceil_mode", False))
AdaptiveAvgPool1d = _pool("AdaptiveAvgPool1d", "adaptive_avg_pool1d", ("output_size", _REQ))
AdaptiveAvgPool2d = _pool("AdaptiveAvgPool2d", "adaptive_avg_pool2d", ("output_size", _REQ))
AdaptiveAvgPool3d = _pool("AdaptiveAvgPool3d", "adaptive_avg_pool3d", ("output_size", _REQ))
AdaptiveMaxPool1d = _pool("AdaptiveMaxPool1d", "adaptive_max_pool1d", ("output_size", _REQ),
                          ("return_indices", False))
AdaptiveMaxPool2d = _pool("AdaptiveMaxPool2d", "adaptive_max_pool2d", ("output_size", _REQ),
                          ("return_indices", False))
AdaptiveMaxPool3d = _pool("AdaptiveMaxPool3d", "adaptive_max_pool3d", ("output_size", _REQ),
                          ("return_indices", False))
LPPool1d = _pool("LPPool1d", "lp_pool1d", ("norm_type", _REQ), ("kernel_size", _REQ),
                 ("stride", None), ("ceil_mode", False))
LPPool2d = _pool("LPPool2d", "lp_pool2d", ("norm_type", _REQ), ("kernel_size", _REQ),
                 ("stride", None), ("ceil_mode", False))
LPPool3d = _pool("LPPool3d", "lp_pool3d", ("norm_type", _REQ), ("kernel_size", _REQ),
                 ("stride", None), ("ceil_mode", False))


class _MaxUnpool(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input, indices, output_size=None):
        return getattr(F, self._fn)(input, indices, self.kernel_size, self.stride, self.padding,
                                    output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    _fn = "max_unpool1d"


class MaxUnpool2d(_MaxUnpool):
    _fn = "max_unpool2d"


class MaxUnpool3d(_MaxUnpool):
    _fn = "max_unpool3d"


# ------------------------------------------------------------------ distances, shuffles
class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


# ------------------------------------------------------------------ normalisation
class _InstanceNorm(_BatchNorm):
    """Instance normalisation; PyTorch's defaults: no affine parameters and no running
    statistics (``affine=True`` adds weight ones and bias zeros;
    ``track_running_stats=True`` the buffers, used in evaluation)."""
    _ndims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input):
        if input.ndim not in self._ndims:
            raise ValueError(f"{type(self).__name__}: expected "
                             f"{' or '.join(f'{n}D' for n in self._ndims)} input (got "
                             f"{input.ndim}D input)")
        one = input.ndim == self._ndims[0]
        x = input.unsqueeze(0) if one else input
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              self.momentum if self.momentum is not None else 0.0, self.eps)
        return out[0] if one else out


class InstanceNorm1d(_InstanceNorm):
    _ndims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    _ndims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    _ndims = (4, 5)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over ``(N, C, D, H, W)``, with running statistics."""
    _ndims = (5,)


class LocalResponseNorm(Module):
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
                f"elementwise_affine={self.elementwise_affine}")


# ------------------------------------------------------------------ dropouts
def _dropout(name, fn):
    def forward(self, input):
        return getattr(F, fn)(input, self.p, self.training, self.inplace)
    return type(name, (Dropout,), {"forward": forward, "__module__": __name__,
                                   "__doc__": f"``F.{fn}`` as a module."})


Dropout1d = _dropout("Dropout1d", "dropout1d")
Dropout3d = _dropout("Dropout3d", "dropout3d")
AlphaDropout = _dropout("AlphaDropout", "alpha_dropout")
FeatureAlphaDropout = _dropout("FeatureAlphaDropout", "feature_alpha_dropout")


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


# ------------------------------------------------------------------ layers
class Bilinear(Module):
    """``y = x1^T W x2 + b``; weight ``(out, in1, in2)`` and bias from
    U(-1/sqrt(in1), 1/sqrt(in1)), as PyTorch."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in1_features, in2_features), dtype=dtype,
                                      device=device))
        if bias:
            self.bias = Parameter(empty((out_features,), dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class EmbeddingBag(Module):
    """Bags of embeddings reduced by ``mode`` (sum, mean, max); weight N(0, 1), the
    ``padding_idx`` row zero."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, mode="mean", sparse=False, _weight=None,
                 include_last_offset=False, padding_idx=None, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset = include_last_offset
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(empty((num_embeddings, embedding_dim), dtype=dtype,
                                          device=device))
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'"


class ConvTranspose1d(Module):
    """1-D transposed convolution; weight ``(in_channels, out_channels / groups, k)``,
    PyTorch's arguments and initialisation."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("ConvTranspose1d: in_channels and out_channels must be divisible "
                             f"by groups, got {in_channels}, {out_channels}, groups={groups}")
        if padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for ConvTranspose1d, "
                             f"got {padding_mode!r}")

        def one(v):
            return tuple(v) if isinstance(v, (tuple, list)) else (v,)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = one(kernel_size), one(stride), one(padding)
        self.output_padding, self.dilation = one(output_padding), one(dilation)
        self.groups, self.padding_mode = groups, padding_mode
        _params(self, (in_channels, out_channels // groups) + self.kernel_size, out_channels,
                bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _init_conv(self, (1, 2))

    def forward(self, input, output_size=None):
        op = self.output_padding
        if output_size is not None:
            L = input.shape[-1]
            base = (L - 1) * self.stride[0] - 2 * self.padding[0] + \
                self.dilation[0] * (self.kernel_size[0] - 1) + 1
            op = (int(tuple(output_size)[-1]) - base,)
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding, op,
                                  self.groups, self.dilation)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")


class Conv3d(Module):
    """3-D convolution over ``(N, C, D, H, W)``; PyTorch's arguments and initialisation."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("Conv3d: in_channels and out_channels must be divisible by "
                             f"groups, got {in_channels}, {out_channels}, groups={groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"Conv3d: padding_mode must be 'zeros', 'reflect', 'replicate' "
                             f"or 'circular', got {padding_mode!r}")

        def three(v):
            return tuple(v) if isinstance(v, (tuple, list)) else (v,) * 3
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = three(kernel_size), three(stride)
        self.padding = padding if isinstance(padding, str) else three(padding)
        self.dilation, self.groups, self.padding_mode = three(dilation), groups, padding_mode
        _params(self, (out_channels, in_channels // groups) + self.kernel_size, out_channels,
                bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _init_conv(self, (1, 2, 3, 4))

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

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")


class ConvTranspose3d(Module):
    """3-D transposed convolution; weight ``(in_channels, out_channels / groups, kD, kH,
    kW)``, PyTorch's arguments and initialisation."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("ConvTranspose3d: in_channels and out_channels must be divisible "
                             f"by groups, got {in_channels}, {out_channels}, groups={groups}")
        if padding_mode != "zeros":
            raise ValueError(f"Only \"zeros\" padding mode is supported for ConvTranspose3d, "
                             f"got {padding_mode!r}")

        def three(v):
            return tuple(v) if isinstance(v, (tuple, list)) else (v,) * 3
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = (three(kernel_size), three(stride),
                                                       three(padding))
        self.output_padding, self.dilation = three(output_padding), three(dilation)
        self.groups, self.padding_mode = groups, padding_mode
        _params(self, (in_channels, out_channels // groups) + self.kernel_size, out_channels,
                bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _init_conv(self, (1, 2, 3, 4))

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

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")


class CTCLoss(_Loss):
    """The CTC loss of ``F.ctc_loss`` (blank, reduction, zero_infinity as PyTorch)."""

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                          self.reduction, self.zero_infinity)


class _FractionalMaxPool(Module):
    """Fractional max pooling (PyTorch's arguments; ``_random_samples`` a buffer, None
    unless given: each call then draws from tapegrad's generator)."""
    _nd = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        name, n = type(self).__name__, self._nd

        def tup(v):
            return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
        self.kernel_size = tup(kernel_size)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = tup(output_size) if output_size is not None else None
        self.output_ratio = tup(output_ratio) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a "
                             f"pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        fn = F.fractional_max_pool2d if self._nd == 2 else F.fractional_max_pool3d
        return fn(input, self.kernel_size, self.output_size, self.output_ratio,
                  self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPool):
    _nd = 2


class FractionalMaxPool3d(_FractionalMaxPool):
    _nd = 3


_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """Efficient softmax approximation (Grave et al.), PyTorch's: a head over the
    shortlist ``[0, cutoffs[0])`` and one entry per cluster, each cluster a two-layer
    projection (``in_features // div_value ** (i + 1)`` hidden) to its classes.
    ``forward(input, target)`` returns ``(output, loss)``: each target's log
    probability and the mean negative log likelihood; ``log_prob`` gives all classes',
    ``predict`` the most likely class."""

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False,
                 device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted "
                             "in an increasing order, where each value is between 1 and "
                             "n_classes-1")
        kw = {"device": device, "dtype": dtype}
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **kw)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, **kw),
                                        Linear(hsz, osz, bias=False, **kw)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        td = target_.ndim
        if td == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("AdaptiveLogSoftmaxWithLoss: Input and target should have "
                                   "the same size in the batch dimension, got "
                                   f"{tuple(input_.shape)} and {tuple(target_.shape)}")
            if input_.ndim != 2:
                raise RuntimeError("AdaptiveLogSoftmaxWithLoss: 1D target tensor expects 2D "
                                   f"input tensors, but found inputs with size "
                                   f"{tuple(input_.shape)}")
        elif td == 0:
            if input_.ndim != 1:
                raise RuntimeError("AdaptiveLogSoftmaxWithLoss: 0D target tensor expects 1D "
                                   f"input tensors, but found inputs with size "
                                   f"{tuple(input_.shape)}")
        else:
            raise RuntimeError("AdaptiveLogSoftmaxWithLoss: 0D or 1D target tensor expected, "
                               "multi-target not supported")
        batched = td > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        t = np.asarray(target.tolist(), dtype=np.int64)
        if t.size and (t.min() < 0 or t.max() > self.n_classes - 1):
            raise RuntimeError(f"AdaptiveLogSoftmaxWithLoss: Target values should be in [0, "
                               f"{self.n_classes - 1}], but values in range [{t.min()}, "
                               f"{t.max()}] were found.")
        # each row's head entry: its class in the shortlist, else its cluster's entry;
        # a cluster's rows add their log probability within the cluster
        gather_inds = np.where(t < self.shortlist_size, t, 0)
        output = None
        for i in range(self.n_clusters):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            rows = np.flatnonzero((t >= low) & (t < high))
            if rows.size == 0:
                continue
            gather_inds[rows] = self.shortlist_size + i
            sel = target.new_tensor(rows)
            logp = F.log_softmax(self.tail[i](index_select(input, 0, sel)), dim=1)
            local = logp.gather(1, target.new_tensor(t[rows] - low).unsqueeze(1)).squeeze(1)
            part = index_add(input.new_zeros(t.shape[0]), 0, sel, local)
            output = part if output is None else output + part
        head_logprob = F.log_softmax(self.head(input), dim=1)
        head = head_logprob.gather(1, target.new_tensor(gather_inds).unsqueeze(1)).squeeze(1)
        output = head if output is None else output + head
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _get_full_log_prob(self, input, head_output):
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(parts, 1)

    def log_prob(self, input):
        """Log probabilities of all ``n_classes`` classes, (N, n_classes)."""
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most likely class of each row, (N,) (``log_prob(input).argmax(1)``)."""
        return self.log_prob(input).argmax(1)


class ParameterDict(Module):
    """Parameters by name (a plain tensor is made a Parameter, as PyTorch)."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def _as_param(self, value):
        if value is None or is_parameter(value):
            return value
        return Parameter(value)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, value):
        self.register_parameter(key, self._as_param(value))

    def __delitem__(self, key):
        del self._parameters[key]

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key):
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def pop(self, key):
        v = self._parameters[key]
        del self._parameters[key]
        return v

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in items:
            self[k] = v


del int64, zeros
