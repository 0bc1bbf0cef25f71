"""Flatten and Unflatten (``torch.nn.modules.flatten``)."""
from ...ops import flatten, reshape
from ..module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """Merges dims ``start_dim`` to ``end_dim``, as ``torch.nn.Flatten``."""
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size``, as ``torch.nn.Unflatten``."""
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        shape = list(input.shape)
        d = self.dim % len(shape)
        return reshape(input, tuple(shape[:d]) + self.unflattened_size + tuple(shape[d + 1:]))

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
