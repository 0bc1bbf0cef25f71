"""``torch.utils.data.sampler``'s path to ``tapegrad.data``'s samplers."""
from ...data import (  # noqa: F401
                     BatchSampler,
                     DistributedSampler,
                     RandomSampler,
                     Sampler,
                     SequentialSampler,
                     SubsetRandomSampler,
)

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "BatchSampler"]
