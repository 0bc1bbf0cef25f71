"""``tg.nn.parallel``: ``DistributedDataParallel`` (it lives in
``tapegrad/distributed/ddp.py``, next to the collectives it drives; loaded on first
use)."""

__all__ = ["DistributedDataParallel"]  # noqa: F822 (loaded by __getattr__)


def __getattr__(name):
    if name == "DistributedDataParallel":
        from ..distributed.ddp import DistributedDataParallel
        return DistributedDataParallel
    raise AttributeError(f"module 'tapegrad.nn.parallel' has no attribute {name!r}")
