"""Joining and leaving the default process group, and asking about it (rank, size,
backend, PyTorch's group objects)."""
import atexit
import datetime
import os
import sys
import traceback

from ..devices import nccl as _nccl
from .process_group import _DEFAULT_TIMEOUT, _ArgumentError, _Group, _mpi, is_available

_WORLD = None                    # the default group, once initialised
_prev_excepthook = None


def _excepthook(tp, value, tb):
    """An uncaught exception on a rank: print it, tell the other ranks, exit 1 without
    MPI's finalize (which would wait for them)."""
    g = _WORLD
    hook = _prev_excepthook or sys.__excepthook__
    if g is None or g.closed:
        return hook(tp, value, tb)
    sys.stdout.flush()
    head = (f"[tapegrad.distributed] rank {g.rank} of {g.size}: uncaught {tp.__name__}; "
            f"telling the other ranks and exiting\n")
    if hook is sys.__excepthook__:  # the report in one write: the ranks share a stderr
        # pipe, and a write up to PIPE_BUF bytes is not interleaved with the others'
        sys.stderr.flush()
        text = head + "".join(traceback.format_exception(tp, value, tb))
        try:
            os.write(sys.stderr.fileno(), text.encode(errors="replace"))
        except (OSError, ValueError, AttributeError):  # (no file descriptor: pytest's)
            sys.stderr.write(text)
    else:
        sys.stderr.write(head)
        hook(tp, value, tb)
    sys.stderr.flush()
    g.die(f"{tp.__name__}: {value}")


def _at_exit():
    g = _WORLD
    if g is not None and not g.closed:
        g.close(at_exit=True)



def init_process_group(backend="mpi", init_method=None, timeout=None, world_size=-1,
                       rank=-1, **kwargs):
    """Join the default process group: every process started by ``mpiexec`` calls it.

    ``backend``: ``"mpi"`` (CPU tensors over MPI, CUDA tensors over NCCL),
    ``"gloo"`` (PyTorch's name for CPU collectives: the same MPI transport, so that a
    script written for PyTorch runs as it is) or ``"nccl"`` (the same, and NCCL must
    be available). ``timeout``: a
    ``datetime.timedelta`` or seconds, the longest a collective waits (30 minutes
    by default). ``world_size`` and ``rank``, if given, must be what ``mpiexec``
    set. Installs an exception hook: an uncaught exception on this rank is reported
    to the others, which then stop with an error naming this rank."""
    global _WORLD, _prev_excepthook
    if _WORLD is not None:
        raise _ArgumentError("trying to initialize the default process group twice!")
    if isinstance(backend, str):
        backend = str(backend).lower()
        if backend in ("cpu:gloo,cuda:nccl", "cuda:nccl,cpu:gloo"):
            backend = "gloo"
    if backend not in ("mpi", "nccl", "gloo", None):
        raise ValueError(f"init_process_group: backend {backend!r} is not supported; "
                         f"tapegrad runs on 'mpi' (CPU, and NCCL for CUDA tensors), 'gloo' "
                         f"(the same MPI transport under PyTorch's CPU name) or 'nccl'")
    if init_method not in (None, "env://"):
        raise ValueError("init_process_group: ranks are found by MPI (run under mpiexec); "
                         "init_method is not used")
    if timeout is None:
        timeout = _DEFAULT_TIMEOUT
    elif isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"init_process_group: timeout must be positive, got {timeout}")
    MPI = _mpi()
    g = _Group(MPI, timeout, backend or "mpi")
    for name, given, real in (("world_size", world_size, g.size), ("rank", rank, g.rank)):
        if given not in (-1, None) and given != real:
            raise ValueError(f"init_process_group: {name}={given} but MPI says {real} "
                             f"(ranks and size come from mpiexec -n N)")
    if backend == "nccl" and not _nccl.available():
        raise RuntimeError("init_process_group: backend 'nccl' needs CuPy with NCCL and a "
                           "GPU; use backend='mpi'")
    _WORLD = g
    if sys.excepthook is not _excepthook:
        _prev_excepthook = sys.excepthook
        sys.excepthook = _excepthook
    atexit.register(_at_exit)


def destroy_process_group(group=None):
    """Leave the default group (every rank calls it): a barrier that reports a rank
    that failed or left early, then the communicators are freed."""
    global _WORLD
    g = _group("destroy_process_group", group)
    try:
        g.close(at_exit=False)
    finally:
        _WORLD = None
        if sys.excepthook is _excepthook:
            sys.excepthook = _prev_excepthook or sys.__excepthook__
        atexit.unregister(_at_exit)


def is_initialized():
    """Whether this process has joined the default process group, as
    ``torch.distributed.is_initialized``."""
    return _WORLD is not None


def _group(what, group=None):
    if group is not None and group is not _WORLD and group is not _DEFAULT:
        raise ValueError(f"{what}: only the default process group (group=None, "
                         f"group.WORLD) is supported")
    if _WORLD is None:
        # PyTorch's ValueError; a RuntimeError too (a call made in the wrong state)
        raise _ArgumentError(f"{what}: Default process group has not been initialized, "
                             f"please make sure to call init_process_group.")
    return _WORLD


class ProcessGroup:
    """The default process group as PyTorch's ``ProcessGroup`` shows it: ``rank()``,
    ``size()``; pass it (or None) as ``group=``. The only group: MPI's world."""

    def rank(self):
        return _group("ProcessGroup.rank").rank

    def size(self):
        return _group("ProcessGroup.size").size

    def __repr__(self):
        return "<tg.distributed default ProcessGroup (MPI's world)>"


_DEFAULT = ProcessGroup()


class group:
    """``group.WORLD``: the default process group."""
    WORLD = _DEFAULT


class GroupMember:
    """``GroupMember.WORLD``: the default process group; ``NON_GROUP_MEMBER``."""
    WORLD = _DEFAULT
    NON_GROUP_MEMBER = -100


class Backend(str):
    """Backend names, as ``torch.distributed.Backend``: ``Backend("mpi") == "mpi"``."""
    MPI = "mpi"
    NCCL = "nccl"
    GLOO = "gloo"
    UNDEFINED = "undefined"

    def __new__(cls, name):
        if not isinstance(name, str):
            raise ValueError(f"Backend name must be a string, but got: {name!r}")
        return str.__new__(cls, name.lower())


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, **kwargs):
    """The default group when ``ranks`` is None or every rank; other subgroups are not
    supported (every rank calls it, as PyTorch)."""
    g = _group("new_group")
    if ranks is None or sorted(int(r) for r in ranks) == list(range(g.size)):
        return _DEFAULT
    raise NotImplementedError(f"new_group: tg.distributed has one process group, MPI's "
                              f"world of {g.size} ranks; subgroups ({sorted(ranks)}) are "
                              f"not supported")


def get_process_group_ranks(group):
    """The global ranks of ``group``'s members (every rank: there is one group), as
    PyTorch's."""
    return list(range(_group("get_process_group_ranks", group).size))


def get_global_rank(group, group_rank):
    """The global rank of ``group``'s rank ``group_rank`` (the same number: there is one
    group), as PyTorch's."""
    _group("get_global_rank", group)
    return group_rank


def get_group_rank(group, global_rank):
    """The rank within ``group`` of global rank ``global_rank`` (the same number: there is
    one group), as PyTorch's."""
    _group("get_group_rank", group)
    return global_rank


def is_mpi_available():
    """True where mpi4py can be imported (the MPI backend is usable), as
    ``torch.distributed.is_mpi_available``."""
    return is_available()


def is_nccl_available():
    """True where NCCL (through CuPy) can carry CUDA tensors, as
    ``torch.distributed.is_nccl_available``."""
    return _nccl.available()


def is_gloo_available():
    """True where MPI is: ``backend="gloo"`` runs on the MPI transport."""
    return is_available()


def is_torchelastic_launched():
    """False: processes are started by ``mpiexec``, never by torchelastic (PyTorch's
    function, for scripts that ask)."""
    return False


def get_rank(group=None):
    """This process's rank in ``group`` (the default group), as
    ``torch.distributed.get_rank``."""
    return _group("get_rank", group).rank


def get_world_size(group=None):
    """The number of processes in ``group`` (the default group), as
    ``torch.distributed.get_world_size``."""
    return _group("get_world_size", group).size


def get_backend(group=None):
    """The backend name of ``group`` (``"mpi"``, ``"gloo"`` or ``"nccl"``, as given to
    ``init_process_group``), as PyTorch's."""
    return _group("get_backend", group).backend
