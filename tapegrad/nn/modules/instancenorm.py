"""Instance normalisation (``torch.nn.modules.instancenorm``): InstanceNorm1d/2d/3d
over ``_BatchNorm``'s parameters and buffers."""
from .. import functional as F
from ._absent import absent
from .batchnorm import _BatchNorm

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(_BatchNorm):
    """Instance normalisation; PyTorch's defaults: no affine parameters and no running
    statistics (``affine=True`` adds weight ones and bias zeros;
    ``track_running_stats=True`` the buffers, used in evaluation)."""
    _ndims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype,
                         bias=bias)

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
    """Instance normalization over each channel of each 1-d sample, as
    ``torch.nn.InstanceNorm1d``."""
    _ndims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization over each channel of each 2-d sample, as
    ``torch.nn.InstanceNorm2d``."""
    _ndims = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization over each channel of each 3-d sample, as
    ``torch.nn.InstanceNorm3d``."""
    _ndims = (4, 5)


__getattr__ = absent(__name__, ["LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"])
