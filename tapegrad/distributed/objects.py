"""Collectives on Python objects (pickled; as PyTorch, only between trusted
processes), and a byte string broadcast from one rank."""

import numpy as np

from ..tensor import Tensor, buffer
from .collectives import _rank_arg, all_gather_into_tensor, broadcast
from .process_group import _ArgumentError
from .setup import _group


# ---- Python objects (pickled; as PyTorch, only between trusted processes)
def _pickled(obj):
    import pickle
    return np.frombuffer(pickle.dumps(obj), dtype=np.uint8)


def _unpickled(arr):
    import pickle
    return pickle.loads(arr.tobytes())


def all_gather_object(object_list, obj, group=None):
    """``object_list[r]`` gets rank r's ``obj`` (pickled: every rank must trust the
    others)."""
    what = "all_gather_object"
    g = _group(what, group)
    if not isinstance(object_list, list) or len(object_list) != g.size:
        raise _ArgumentError(f"{what}: object_list must be a list of world_size "
                             f"({g.size}) items")
    data = _pickled(obj)
    sizes = Tensor(np.zeros(g.size, dtype=np.int64))
    all_gather_into_tensor(sizes, Tensor(np.array([data.size], dtype=np.int64)))
    sizes = buffer(sizes).tolist()
    width = max(sizes)
    mine = np.zeros(width, dtype=np.uint8)
    mine[:data.size] = data
    every = Tensor(np.empty(width * g.size, dtype=np.uint8))
    all_gather_into_tensor(every, Tensor(mine))
    arr = buffer(every)
    for r in range(g.size):
        object_list[r] = _unpickled(arr[r * width:r * width + sizes[r]])


def gather_object(obj, object_gather_list=None, dst=0, group=None):
    """``object_gather_list[r]`` on rank ``dst`` gets rank r's ``obj``."""
    what = "gather_object"
    g = _group(what, group)
    dst = _rank_arg(what, "dst", dst, g)
    if g.rank == dst and (not isinstance(object_gather_list, list)
                          or len(object_gather_list) != g.size):
        raise _ArgumentError(f"{what}: object_gather_list on rank {dst} must be a list of "
                             f"world_size ({g.size}) items")
    every = [None] * g.size
    all_gather_object(every, obj)
    if g.rank == dst:
        object_gather_list[:] = every


def broadcast_object_list(object_list, src=0, group=None, device=None):
    """The items of ``object_list`` on rank ``src`` replace those of every rank's list
    (of the same length)."""
    what = "broadcast_object_list"
    g = _group(what, group)
    src = _rank_arg(what, "src", src, g)
    if not isinstance(object_list, list):
        raise TypeError(f"{what}: object_list must be a list, got {type(object_list).__name__}")
    data = _pickled(list(object_list)).tobytes() if g.rank == src else b""
    got = _unpickled(np.frombuffer(_broadcast_bytes(data, src, what), dtype=np.uint8))
    if len(got) != len(object_list):
        raise _ArgumentError(f"{what}: rank {src}'s list has {len(got)} items, rank "
                             f"{g.rank}'s {len(object_list)}; they must be the same length")
    object_list[:] = got


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=0,
                        group=None):
    """``scatter_object_output_list[0]`` on rank r gets item r of rank ``src``'s
    ``scatter_object_input_list``."""
    what = "scatter_object_list"
    g = _group(what, group)
    src = _rank_arg(what, "src", src, g)
    if not isinstance(scatter_object_output_list, list) or not scatter_object_output_list:
        raise _ArgumentError(f"{what}: scatter_object_output_list must be a non-empty list")
    items = [None] * g.size
    if g.rank == src:
        if not isinstance(scatter_object_input_list, (list, tuple)) \
                or len(scatter_object_input_list) != g.size:
            raise _ArgumentError(f"{what}: scatter_object_input_list on rank {src} must "
                                 f"be a list of world_size ({g.size}) items")
        items = list(scatter_object_input_list)
    broadcast_object_list(items, src)
    scatter_object_output_list[0] = items[g.rank]


def _broadcast_bytes(data, src, what):
    g = _group(what)
    n = np.array([len(data) if g.rank == src else 0], dtype=np.int64)
    broadcast(Tensor(n), src)
    raw = np.frombuffer(data, dtype=np.uint8).copy() if g.rank == src else \
        np.empty(int(n[0]), dtype=np.uint8)
    broadcast(Tensor(raw), src)
    return raw.tobytes()
