"""Tensors sent between processes (queues, pipes, a spawned process's arguments) as
the name of their shared-memory segment."""
from multiprocessing.reduction import ForkingPickler

import numpy as np

from ..devices import shared_memory
from ..tensor import Tensor, buffer


def _rebuild(cls, desc, requires_grad):
    t = Tensor(shared_memory.attach(*desc))
    if cls is not Tensor:  # a Parameter (or another subclass made from the data)
        try:
            return cls(t, requires_grad=requires_grad)
        except TypeError:
            return cls(t)
    return t.requires_grad_(True) if requires_grad else t


def _reduce(t):
    """A CPU tensor as its segment (moved into shared memory first, as PyTorch's);
    a device tensor as its values."""
    if not isinstance(buffer(t), np.ndarray):
        return t.__reduce_ex__(4)
    t.share_memory_()
    return (_rebuild, (type(t), shared_memory.describe(buffer(t)), bool(t.requires_grad)))


def register(cls):
    """Send tensors of class ``cls`` (and its subclasses now defined) by segment."""
    todo = [cls]
    while todo:
        c = todo.pop()
        ForkingPickler.register(c, _reduce)
        todo.extend(c.__subclasses__())


register(Tensor)
