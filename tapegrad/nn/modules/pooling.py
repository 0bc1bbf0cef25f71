"""The pooling modules (``torch.nn.modules.pooling``): max, average, adaptive, power
(LP) and fractional max pooling of 1, 2 or 3 dims, and max-unpooling."""
from .. import functional as F
from ..module import Module
from .activation import _Act

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
           "AvgPool1d", "AvgPool2d", "AvgPool3d", "FractionalMaxPool2d",
           "FractionalMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"]


class MaxPool2d(Module):
    """2-d max pooling over windows of ``kernel_size``, as ``torch.nn.MaxPool2d``."""
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
    """2-d average pooling over windows of ``kernel_size``, as ``torch.nn.AvgPool2d``."""
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


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
    """The partial inverse of ``MaxPool1d``: values put back at the pooled indices, as
    ``torch.nn.MaxUnpool1d``."""
    _fn = "max_unpool1d"


class MaxUnpool2d(_MaxUnpool):
    """The partial inverse of ``MaxPool2d``: values put back at the pooled indices, as
    ``torch.nn.MaxUnpool2d``."""
    _fn = "max_unpool2d"


class MaxUnpool3d(_MaxUnpool):
    """The partial inverse of ``MaxPool3d``: values put back at the pooled indices, as
    ``torch.nn.MaxUnpool3d``."""
    _fn = "max_unpool3d"


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
    """2-d fractional max pooling (pseudo-random window positions), as
    ``torch.nn.FractionalMaxPool2d``."""
    _nd = 2


class FractionalMaxPool3d(_FractionalMaxPool):
    """3-d fractional max pooling (pseudo-random window positions), as
    ``torch.nn.FractionalMaxPool3d``."""
    _nd = 3
