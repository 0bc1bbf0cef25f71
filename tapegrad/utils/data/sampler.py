"""``torch.utils.data.sampler``'s path to ``tapegrad.data``'s samplers."""
from ...data import (BatchSampler, DistributedSampler, RandomSampler, Sampler,  # noqa: F401
                     SequentialSampler, SubsetRandomSampler)

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "BatchSampler"]
