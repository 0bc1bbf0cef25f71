"""Instance normalisation (``torch.nn.modules.instancenorm``): InstanceNorm1d/2d/3d
over ``_BatchNorm``'s parameters and buffers."""
from .. import functional as F
from .batchnorm import _BatchNorm, _LazyBatchNorm

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
           "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


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



class LazyInstanceNorm1d(_LazyBatchNorm, InstanceNorm1d):
    """An ``InstanceNorm1d`` whose ``num_features`` is its first input's dim 1, as
    ``torch.nn.LazyInstanceNorm1d`` (whose defaults are ``affine=True`` and
    ``track_running_stats=True``); it becomes an ``InstanceNorm1d`` then."""
    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyBatchNorm, InstanceNorm2d):
    """An ``InstanceNorm2d`` whose ``num_features`` is its first input's dim 1."""
    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyBatchNorm, InstanceNorm3d):
    """An ``InstanceNorm3d`` whose ``num_features`` is its first input's dim 1."""
    cls_to_become = InstanceNorm3d
