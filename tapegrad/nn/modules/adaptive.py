"""AdaptiveLogSoftmaxWithLoss (``torch.nn.modules.adaptive``)."""
from collections import namedtuple

import numpy as np

from ...ops.indexed_update import index_add
from ...ops.indexing import index_select
from ...ops.shape import cat
from .. import functional as F
from ..module import Module
from .container import ModuleList, Sequential
from .linear import Linear

__all__ = ["AdaptiveLogSoftmaxWithLoss"]
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
