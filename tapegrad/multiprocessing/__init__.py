"""``torch.multiprocessing``: Python's ``multiprocessing`` with tensors in shared memory.

``Tensor.share_memory_()`` moves a CPU tensor's values into a shared-memory segment
(POSIX shared memory: a forked child inherits the mapping, any other process attaches
by name), ``Tensor.is_shared()`` says whether it lives in one, ``Module.share_memory()``
shares every parameter and buffer. A tensor sent to another process (a ``Queue``,
``Pipe``, a ``spawn``ed process's arguments) travels as its segment's name: the
receiver's tensor views the same memory (a tensor not yet shared is moved into shared
memory first, as PyTorch's). So a Hogwild loop (``model.share_memory()``, then
``Process(target=train, args=(model,))`` updating it with an optimizer) updates the
parent's model. The rest of the module is Python's ``multiprocessing``, as PyTorch's
re-exports it, and ``spawn(fn, args=(), nprocs=1, join=True, daemon=False,
start_method="spawn")``.
"""
import multiprocessing
from multiprocessing import *  # noqa: F401,F403 - the module is multiprocessing's surface

from . import _reduce  # noqa: F401 - tensors travel between processes by their segment
from ._spawn import ProcessContext, ProcessExitedException, ProcessRaisedException, spawn

__all__ = list(multiprocessing.__all__) + ["spawn", "ProcessContext", "ProcessRaisedException",
                                           "ProcessExitedException", "get_sharing_strategy",
                                           "set_sharing_strategy",
                                           "get_all_sharing_strategies"]

_STRATEGIES = {"file_system"}


def get_all_sharing_strategies():
    """The ways tensors are shared: named POSIX shared memory (``file_system``)."""
    return set(_STRATEGIES)


def get_sharing_strategy():
    return "file_system"


def set_sharing_strategy(new_strategy):
    if new_strategy not in _STRATEGIES:
        raise ValueError(f"set_sharing_strategy: unknown strategy {new_strategy!r}; "
                         f"tapegrad shares through {sorted(_STRATEGIES)}")

