"""Batch normalisation (``torch.nn.modules.batchnorm``): the ``_BatchNorm`` base,
BatchNorm1d/2d/3d with running statistics, and SyncBatchNorm.

SyncBatchNorm: batch normalisation whose statistics span the batch of every rank of
``tg.distributed`` (``torch.nn.SyncBatchNorm``), and
``SyncBatchNorm.convert_sync_batchnorm``.

How the ranks meet. In training, with a process group of more than one rank, each rank
computes its per-channel count ``n_r``, mean ``m_r`` and centred sum of squares
``q_r = sum (x - m_r)^2`` (ops, so they record), writes them as row ``r`` of an
``(R, 2C + 1)`` table of zeros, and one ``all_reduce`` (SUM) gives every rank the whole
table (an all-gather as a reduction). The global mean and biased variance are then
combined with ops, Chan's parallel formula (``M2 = sum q_r + sum n_r (m_r - m)^2``,
stable where a plain sum of squares cancels), so the counts may differ per rank (an
empty rank counts 0). The running statistics take the mean and the unbiased variance
``M2 / (n - 1)`` over the global count ``n``.

The gradient through the all-reduce: with the global loss the sum of the ranks' losses
(DDP's model), the adjoint of a SUM all-reduce is a SUM all-reduce of the incoming
gradients (``_AllReduceSum``, a ``tg.autograd.Function`` whose backward is itself, so
it differentiates again). The rest of the backward is the recorded ops', so the input
gradient equals single-process BatchNorm's on the concatenated batch, exactly; the
weight and bias gradients stay local, as PyTorch's (DDP averages them). One all-reduce
of ``R (2C + 1)`` numbers per layer forward and one per backward (when the input
requires grad), as PyTorch's all-gather of ``2C + 1``.

Eval mode, no process group (``tg.distributed`` not initialised) or a world of one
rank: plain ``BatchNorm``.
"""
import math

from ... import distributed as dist
from ...autograd import Function
from ...dtypes import float32, float64, int64
from ...grad_mode import no_grad
from ...ops import ones, zeros
from ...ops.shape import cat
from .. import functional as F
from ..module import Module
from ..parameter import Parameter, UninitializedBuffer, UninitializedParameter
from .lazy import LazyModuleMixin

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
           "LazyBatchNorm3d", "SyncBatchNorm"]


class _ChannelsError(ValueError, RuntimeError):
    """An input whose channel count is not the layer's: ValueError, and RuntimeError as
    PyTorch's batch_norm raises."""


class _BatchNorm(Module):
    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:  # (bias=False: a scale alone, as PyTorch's)
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
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
        # (without weight or running statistics nothing has a channel count: PyTorch's
        # layer takes any, as a lazy one's num_features stays 0)
        if (self.weight is not None or self.running_mean is not None) and \
                input.shape[1] != self.num_features:
            raise _ChannelsError(f"{type(self).__name__}: expected {self.num_features} channels "
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

    def _factor(self):
        """The running statistics' weight of the new batch: ``momentum``, or with
        ``momentum=None`` one over the batches seen, a float64 0-d tensor computed with
        ops from ``num_batches_tracked`` (not read by Python: a compiled step replays
        it with the count of each call)."""
        if self.momentum is not None:
            return self.momentum
        return 1.0 / self.num_batches_tracked.to(float64)

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
            factor = self._factor()
            dims = (0,) + tuple(range(2, len(shape)))
            x = input.detach()
            mean = x.mean(dim=dims)
            var = x.var(dim=dims, correction=1)
            for buf, stat in ((self.running_mean, mean), (self.running_var, var)):
                buf.mul_(1 - factor).add_((stat * factor).to(buf.dtype))

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over ``(N, C)`` or ``(N, C, L)``, with running statistics."""
    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over ``(N, C, H, W)``, with running statistics."""
    _ndims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over ``(N, C, D, H, W)``, with running statistics."""
    _ndims = (5,)


class _AllReduceSum(Function):
    """``all_reduce(SUM)`` out of place, differentiable: its adjoint (and tangent) is
    the same reduction of the gradient (tangent)."""

    @staticmethod
    def forward(ctx, t, group):
        ctx.group = group
        out = t.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        return _AllReduceSum.apply(g.contiguous(), ctx.group), None

    @staticmethod
    def jvp(ctx, t, _group):
        return _AllReduceSum.apply(t.contiguous(), ctx.group)


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation over ``(N, C, *)`` with statistics over the batches of all
    ranks of ``process_group`` (``torch.nn.SyncBatchNorm``)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None, *,
                 bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        if input.shape[1] != self.num_features:
            raise _ChannelsError(f"SyncBatchNorm: expected {self.num_features} channels in dim "
                             f"1, got input of shape {tuple(input.shape)}")

    def _world(self):
        """The group's size when this forward synchronises, else None."""
        if not self.training or not dist.is_available() or not dist.is_initialized():
            return None
        size = dist.get_world_size(self.process_group)
        return size if size > 1 else None

    def forward(self, input):
        self._check_input_dim(input)
        world = self._world()
        if world is None:
            return super().forward(input)
        return self._sync_forward(input, world)

    def _sync_forward(self, x, world):
        shape = tuple(x.shape)
        C = shape[1]
        dims = (0,) + tuple(range(2, len(shape)))
        n = math.prod(shape) // C
        sdt = float64 if x.dtype == float64 else float32
        xs = x if x.dtype == sdt else x.to(sdt)
        if n > 0:
            m = xs.mean(dim=dims)
            bshape = (1, C) + (1,) * (len(shape) - 2)
            q = ((xs - m.reshape(bshape)) ** 2).sum(dim=dims)
        else:   # an empty batch on this rank: zeros, still recorded on x
            m = q = xs.sum(dim=dims)
        dev = x.device
        row = cat([zeros(1, dtype=sdt, device=dev) + n, m, q]).reshape(1, 2 * C + 1)
        rank = dist.get_rank(self.process_group)
        parts = ([zeros(rank, 2 * C + 1, dtype=sdt, device=dev)] if rank else []) + [row] + \
            ([zeros(world - 1 - rank, 2 * C + 1, dtype=sdt, device=dev)]
             if rank < world - 1 else [])
        table = _AllReduceSum.apply(cat(parts), self.process_group)
        counts = table[:, :1]                       # (R, 1), constants
        total = int(round(float(counts.sum())))
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got "
                             f"{total} over all ranks (input size {shape} on rank {rank})")
        means, qs = table[:, 1:C + 1], table[:, C + 1:]
        mean = (counts * means).sum(dim=0) / total
        m2 = qs.sum(dim=0) + (counts * (means - mean) ** 2).sum(dim=0)
        var = m2 / total
        if self.track_running_stats:
            self._update_running(mean, m2 / (total - 1))
        bshape = (1, C) + (1,) * (len(shape) - 2)
        y = (xs - mean.reshape(bshape)) * (var + self.eps).rsqrt().reshape(bshape)
        if self.weight is not None:
            y = y * self.weight.to(sdt).reshape(bshape)
        if self.bias is not None:
            y = y + self.bias.to(sdt).reshape(bshape)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def _update_running(self, mean, var):
        """PyTorch's update, over the global statistics: an exponential average (or,
        with ``momentum=None``, a cumulative one) of the mean and unbiased variance."""
        with no_grad():
            self.num_batches_tracked.add_(1)
            factor = self._factor()
            for buf, stat in ((self.running_mean, mean), (self.running_var, var)):
                buf.mul_(1 - factor).add_((stat.detach() * factor).to(buf.dtype))

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """Replace every BatchNorm1d/2d/3d in ``module``'s tree by a SyncBatchNorm that
        holds the same parameters and buffers (the same tensors, so ``requires_grad``
        and values carry over) and training flag, as PyTorch's; returns the new root
        (``module`` itself unless it is a BatchNorm)."""
        from .instancenorm import _InstanceNorm  # it derives from _BatchNorm: imported here
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_group)
            if module.affine:
                with no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in list(module.named_children()):
            # in place in the ordered dict: a child keeps its position (and Sequential
            # its order), as PyTorch's add_module of an existing name does
            out._modules[name] = cls.convert_sync_batchnorm(child, process_group)
        return out



class _LazyBatchNorm(LazyModuleMixin, _BatchNorm):
    """The lazy batch and instance norms: ``num_features`` from the first input's dim 1
    (as PyTorch's, an unbatched instance norm's too)."""

    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, *, bias=True):
        super().__init__(0, eps, momentum, False, False, device, dtype)
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            self.num_batches_tracked = zeros((), dtype=int64, device=device)

    def initialize_parameters(self, input):
        if not self.has_uninitialized_params():
            return
        n = self.num_features = input.shape[1]
        if self.affine:
            self.weight.materialize((n,))
            self.weight.fill_(1)
            if self.bias is not None:
                self.bias.materialize((n,))
                self.bias.zero_()
        if self.track_running_stats:
            self.running_mean.materialize((n,))
            self.running_var.materialize((n,))
            self.reset_running_stats()


class LazyBatchNorm1d(_LazyBatchNorm, BatchNorm1d):
    """A ``BatchNorm1d`` whose ``num_features`` is its first input's dim 1, as
    ``torch.nn.LazyBatchNorm1d``; it becomes a ``BatchNorm1d`` then."""
    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyBatchNorm, BatchNorm2d):
    """A ``BatchNorm2d`` whose ``num_features`` is its first input's dim 1."""
    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyBatchNorm, BatchNorm3d):
    """A ``BatchNorm3d`` whose ``num_features`` is its first input's dim 1."""
    cls_to_become = BatchNorm3d
