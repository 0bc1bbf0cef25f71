"""Rank-0 checkpoints: save on one rank then meet at a barrier; load on one rank
and broadcast the bytes."""
import io

from .collectives import barrier
from .objects import _broadcast_bytes
from .setup import _group


def save_checkpoint(obj, path, src=0):
    """``tg.save(obj, path)`` on rank ``src`` only, then a barrier, so that no rank
    reads the file before it is complete. Every rank calls it."""
    from .. import serialization
    g = _group("save_checkpoint")
    if g.rank == src:
        serialization.save(obj, path)
    barrier()


def load_checkpoint(path, src=0, map_location=None):
    """Rank ``src`` reads ``path`` and broadcasts its bytes; every rank returns
    ``tg.load`` of them (so the file need exist on ``src``'s machine only). Every rank
    calls it."""
    from .. import serialization
    g = _group("load_checkpoint")
    data = b""
    if g.rank == src:
        with open(path, "rb") as fh:
            data = fh.read()
    data = _broadcast_bytes(data, src, "load_checkpoint")
    return serialization.load(io.BytesIO(data), map_location=map_location)
