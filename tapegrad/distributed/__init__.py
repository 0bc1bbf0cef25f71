"""``tg.distributed``: collectives between processes on MPI, as ``torch.distributed``.

Run the script under MPI's launcher; each process is one rank::

    mpiexec -n 2 python train.py

    import tapegrad as tg
    import tapegrad.distributed as dist
    dist.init_process_group(backend="mpi")
    t = tg.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t)                       # in place: 1 + 2 on every rank
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()

The collectives run on the tensors' own buffers (no copy for contiguous CPU tensors)
with mpi4py's non-blocking calls; a blocking ``all_reduce`` repeated in a loop moves to
MPI's own functions called from Numba code (``devices/mpi.py``, MPICH-family libraries;
``TAPEGRAD_DISTRIBUTED_NATIVE=0`` keeps mpi4py's). ``mpi4py`` is imported by
``init_process_group`` only (``pip install tapegrad[distributed]`` installs it with
MPICH's wheel). CUDA tensors go through NCCL (``devices/nccl.py``, on CuPy), with MPI carrying the
set-up.

Faults never hang silently. While a rank waits for a collective it also watches for
notices from the others: a rank whose script raises tells every other rank before it
exits, and they stop with a ``DistBackendError`` naming it; a rank whose script ends
tells how many collectives it made, so a rank waiting on one more is told which rank
left; past ``timeout`` (``init_process_group(timeout=...)``, 30 minutes by default, as
PyTorch's) a wait raises. Each collective also compares a short description (name,
shape, dtype, op, root) across ranks on a side communicator, at the same time as the
data moves, so ranks that call different collectives or pass different shapes get a
``RuntimeError`` listing every rank's call instead of wrong numbers. After such an
error the group is unusable; the uncaught error ends the process (without MPI's
finalize, which would wait for the others).
"""
from .checkpoint import load_checkpoint, save_checkpoint
from .collectives import (
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    broadcast,
    gather,
    monitored_barrier,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
)
from .objects import all_gather_object, broadcast_object_list, gather_object, scatter_object_list
from .p2p import P2POp, batch_isend_irecv, irecv, isend, recv, send
from .process_group import DistBackendError, DistError, ReduceOp, is_available
from .setup import (
    Backend,
    GroupMember,
    ProcessGroup,
    destroy_process_group,
    get_backend,
    get_global_rank,
    get_group_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    is_torchelastic_launched,
    new_group,
)
from .work import Work

__all__ = ["ReduceOp", "DistError", "DistBackendError", "Work", "init_process_group",
           "is_initialized",
           "is_available", "get_rank", "get_world_size", "get_backend", "barrier",
           "destroy_process_group", "all_reduce", "broadcast", "all_gather",
           "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
           "save_checkpoint", "load_checkpoint", "ProcessGroup", "group",
           "GroupMember", "Backend", "new_group", "get_process_group_ranks", "get_global_rank",
           "get_group_rank", "is_mpi_available", "is_nccl_available", "is_gloo_available",
           "is_torchelastic_launched", "reduce", "gather", "scatter", "all_to_all",
           "all_to_all_single", "monitored_barrier", "send", "recv", "isend", "irecv",
           "P2POp", "batch_isend_irecv", "all_gather_object", "gather_object",
           "broadcast_object_list", "scatter_object_list"]
