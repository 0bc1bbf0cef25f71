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
MPICH's wheel). CUDA tensors go through NCCL (``devices/nccl.py``, on CuPy), with MPI carrying the set-up.

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
import atexit
import collections
import datetime
import functools
import io
import os
import sys
import time
import weakref
import zlib

import numpy as np

from ..devices import mpi as _mpi_native
from ..devices import nccl as _nccl
from ..tensor import Tensor, buffer, mark_written

__all__ = ["ReduceOp", "DistError", "DistBackendError", "Work", "init_process_group", "is_initialized",
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


class ReduceOp:
    """Reduction operators of ``all_reduce``, ``reduce`` and ``reduce_scatter`` (the
    bitwise ones on integer and bool tensors only)."""
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MAX = "max"
    MIN = "min"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


class DistError(RuntimeError):
    """Base of the errors of ``tg.distributed`` (as ``torch.distributed.DistError``)."""


class DistBackendError(DistError):
    """A collective could not complete: another rank failed or left, or it timed out."""


class _ArgumentError(ValueError, RuntimeError):
    """A bad argument (a rank out of range, a list of the wrong length): PyTorch's
    backends raise RuntimeError for these, Python's convention is ValueError; both
    classes catch it."""


class _OpError(TypeError, ValueError):
    """Not a reduce op: PyTorch raises TypeError (an argument of the wrong type), and
    ValueError (a value not among ReduceOp's) catches it too."""


_FAULT, _EXIT, _CHECK = 7301, 7302, 7303   # notice tags, on the side communicator
_CHECKED_KEPT = 4096             # how many of its checked calls a rank remembers
_NOTICE_BYTES = 4096
_DESC_BYTES = 160
_DEFAULT_TIMEOUT = 1800.0
_sched_yield = getattr(os, "sched_yield", lambda: None)
_LINGER = 5.0                    # seconds a failed rank waits for the others' reports
_WORLD = None                    # the default group, once initialised
_prev_excepthook = None


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError("tg.distributed needs mpi4py and an MPI library: pip install "
                          "'tapegrad[distributed]' (mpi4py and the mpich wheel), then run "
                          "the script under mpiexec -n N python script.py") from None
    return MPI


def is_available():
    """Whether mpi4py can be imported (the MPI backend is usable)."""
    try:
        import mpi4py  # noqa: F401
        return True
    except ImportError:
        return False


# ------------------------------------------------------------------ the group
class _Group:
    """The default process group: three private duplicates of MPI's world (``comm``
    for the collectives, ``ctl`` for the call checks and the notices, ``fin`` for the
    barrier at exit) and the receive that is always posted for notices."""

    def __init__(self, MPI, timeout, backend):
        self.MPI = MPI
        world = MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.timeout = timeout
        self.backend = backend
        self.seq = 0          # collectives posted on this rank
        self.failed = {}      # rank -> what it raised
        self.exited = {}      # rank -> how many collectives it had made when it left
        self.closed = False
        self.checks = os.environ.get("TAPEGRAD_DISTRIBUTED_CHECKS", "1") != "0"
        self.nccl = None
        self.nreq = None
        self.queue = collections.deque()   # Works whose transfer has not started
        self.hashes = {}                      # call descriptions -> hash
        # all_reduce's short path: its last call (see _fast_entry); the compiled post
        # and test (devices/mpi.py): None until loaded, False where unusable
        self.last_fast = None
        self.native = None if os.environ.get("TAPEGRAD_DISTRIBUTED_NATIVE", "1") != "0" \
            else False
        self.repeats = 0      # repeated short-path calls made before the compiled path
        self.calls = 0        # checked-kind collective calls made (the call index)
        self.prev = None      # the description of the last call compared across ranks
        self.checked = {}     # call index -> description, of this rank's compared calls
        self.announced = set()   # call indices another rank compares, not reached yet
        self.late = []        # (call index, rank): compared there, not by this rank
        self.check_buf = np.zeros(4, dtype=np.int64)
        self.fast_ops = {(np.dtype(t), k): getattr(MPI, _MPI_OPS[k])
                         for t in _FAST_TYPES for k in _FAST_OPS
                         if k != "avg" or np.dtype(t).kind == "f"}
        self.fast_types = {np.dtype(t): getattr(MPI, name) for t, name in _FAST_TYPES.items()}
        self.crowded = False
        self.IN_PLACE = MPI.IN_PLACE
        self.comm = self._dup(world, "init_process_group")
        self.ctl = self._dup(world, "init_process_group")
        self.fin = self._dup(world, "init_process_group")
        # more ranks on this machine than cores: waiting ranks yield the core
        local = world.Split_type(MPI.COMM_TYPE_SHARED)
        self.crowded = local.Get_size() > (os.cpu_count() or 1)
        local.Free()
        # how often the compiled path tests its request before the Python wait takes
        # over (crowded: the core may be needed by the rank it waits for)
        self.polls = 16 if self.crowded else 1024
        self.nbuf = bytearray(_NOTICE_BYTES)
        self.status = MPI.Status()
        self.nreq = self.ctl.Irecv(self.nbuf, MPI.ANY_SOURCE, MPI.ANY_TAG)

    def _dup(self, world, what):
        comm, req = world.Idup()
        self.wait([req], what, None)
        return comm

    # ---- waiting, with notices and the timeout
    def wait(self, reqs, what, seq, timeout=None, faults=True):
        """Spin on ``reqs`` (MPI keeps moving data only inside its calls), reading
        notices and the clock every 64 tests (``faults=False``: another rank's failure
        does not stop the wait, only the timeout does)."""
        if len(reqs) == 1:
            test = reqs[0].Test           # one request: its own test is the cheaper
        else:
            Testall = self.MPI.Request.Testall

            def test():
                return Testall(reqs)
        if test():
            return
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        n = 0
        crowded = self.crowded
        while not test():
            n += 1
            if crowded or n > 512:
                # more ranks than cores here, or a long wait (a slower rank, a busy
                # machine): give the core to whoever the wait is for
                _sched_yield()
            if not n & 63:
                if faults:
                    self.poll(what, seq)
                if time.monotonic() - start > limit:
                    raise DistBackendError(
                        f"{what}: timed out after {limit:g} s on rank {self.rank} of "
                        f"{self.size}, waiting for ranks that did not join (hung, "
                        f"deadlocked, or dead without a word); collective number {seq}")

    def wait_event(self, event, what, seq, timeout=None):
        """As ``wait``, for a CUDA event (an NCCL collective)."""
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        while not event.done:
            self.poll(what, seq)
            if time.monotonic() - start > limit:
                raise DistBackendError(f"{what}: timed out after {limit:g} s on rank "
                                       f"{self.rank} (NCCL); collective number {seq}")
            time.sleep(20e-6)

    def read_notices(self):
        """Take in the notices that arrived (FAULT: a rank failed, EXIT: one left)."""
        MPI = self.MPI
        while self.nreq is not None and self.nreq.Test(self.status):
            src, tag = self.status.Get_source(), self.status.Get_tag()
            text = bytes(self.nbuf[:self.status.Get_count(MPI.BYTE)]).decode("utf-8",
                                                                             "replace")
            self.nreq = self.ctl.Irecv(self.nbuf, MPI.ANY_SOURCE, MPI.ANY_TAG)
            if tag == _CHECK:
                s = int(text)
                if s > self.calls:
                    self.announced.add(s)
                elif s not in self.checked and self.checked and s > next(iter(self.checked)):
                    self.late.append((s, src))
            elif tag == _FAULT:
                self.failed.setdefault(src, text)
            elif tag == _EXIT:
                self.exited[src] = int(text)

    def poll(self, what=None, seq=None):
        """Read the notices; raise if a rank failed, or if one left before joining
        collective number ``seq``."""
        self.read_notices()
        if self.late:
            self.compare_late(what or "tapegrad.distributed")
        where = what or "tapegrad.distributed"
        if self.failed:
            # the root cause first: a rank's own error, not a report of another's
            r, text = min(self.failed.items(),
                          key=lambda kv: kv[1].startswith("DistBackendError"))
            raise DistBackendError(f"{where}: rank {r} failed ({text}); rank {self.rank} "
                                   f"stops too, the job cannot go on without it")
        if seq is not None:
            for r, done in self.exited.items():
                if done < seq:
                    raise DistBackendError(
                        f"{where}: rank {r} exited after {done} collectives, without "
                        f"joining this one (collective number {seq} on rank {self.rank}); "
                        f"every rank must make the same collective calls in the same order")

    def die(self, text):
        """This rank failed (its error is printed): tell the others, wait up to
        ``_LINGER`` seconds until each has answered with its own failure (it has
        printed its error by then: mpiexec may kill the job once one process is
        gone), and exit with status 1, without MPI's finalize."""
        try:
            self.notify(_FAULT, text)
            end = time.monotonic() + _LINGER
            others = self.size - 1
            while time.monotonic() < end:
                self.read_notices()
                if len(self.failed) - (self.rank in self.failed) >= others:
                    break
                time.sleep(1e-3)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    def notify(self, tag, text, grace=2.0):
        """Send a notice to every other rank; wait at most ``grace`` seconds for the
        sends (a dead peer must not hold us)."""
        data = text.encode("utf-8", "replace")[:_NOTICE_BYTES]
        reqs = [self.ctl.Isend(data, r, tag) for r in range(self.size) if r != self.rank]
        end = time.monotonic() + grace
        while not self.MPI.Request.Testall(reqs) and time.monotonic() < end:
            pass

    # ---- starting the queued collectives, in call order
    def pump(self, until=None, timeout=None):
        """Start the queued collectives whose call check is back (all of them up to
        ``until`` when given, waiting for their checks, each at most ``timeout``)."""
        q = self.queue
        MPI = self.MPI
        while q:
            w = q[0]
            if w.check is not None:
                if until is None and not MPI.Request.Testall([w.check[0]]):
                    return
                self.finish_check(w.check, w.what, self.seq + 1, timeout)
            q.popleft()
            w._start()
            if w is until:
                return

    # ---- the call check
    # Every collective call is compared across ranks (name, shape, dtype, op, root)
    # before its data moves: a transfer between mismatched calls is MPI's abort or
    # wrong numbers. A comparison is a round trip of its own, as long as the transfer
    # of a small message, so a rank compares only the calls that differ from its
    # previous one: ranks whose calls agreed so far and who all repeat their last call
    # still agree. A rank whose call changed announces the comparison to the others
    # (a notice with the call index); a rank that made that call without comparing
    # (its call did not change: so it differs) joins the comparison late, from the
    # wait its transfer is stuck in, and every rank gets the error.
    def must_compare(self, desc):
        """Count a checked-kind call; whether it is compared across ranks (then
        announced to the others)."""
        self.calls += 1
        s = self.calls
        if desc == self.prev and s not in self.announced:
            return False
        self.announced.discard(s)
        checked = self.checked
        checked[s] = desc
        if len(checked) > _CHECKED_KEPT:
            del checked[next(iter(checked))]
        self.read_notices()        # a late comparison goes first, in call order
        if self.late:
            self.compare_late("tapegrad.distributed")
        self.prev = desc
        if self.size > 1:
            self.notify(_CHECK, str(s))
        return True

    def compare_late(self, what):
        """Join the comparisons other ranks announced for calls this rank made
        without one (its description there: that of its last compared call)."""
        while self.late:
            s, _ = self.late.pop(0)
            if s in self.checked:
                continue
            mine = next((d for i, d in reversed(self.checked.items()) if i <= s), self.prev)
            self.checked[s] = mine
            self.finish_check(self.start_check(mine, force=True), what, None)

    def compare_now(self, desc, what):
        """Compare the call ``desc`` (a collective about to start, which
        ``must_compare`` chose) across ranks, and wait for the answer."""
        h = self.hash_of(desc)
        buf = self.check_buf
        buf[0], buf[1] = h, -h
        req = self.ctl.Iallreduce(buf[:2], buf[2:], op=self.MPI.MAX)
        self.wait([req], what, self.seq + 1)
        if buf[2] != -buf[3]:
            self.finish_check([self.MPI.REQUEST_NULL, None, buf[2:], desc], what,
                              self.seq + 1)

    def hash_of(self, desc):
        """A call description's hash as the comparison sends it (never 0), memoized."""
        h = self.hashes.get(desc)
        if h is None:
            if len(self.hashes) > 4096:
                self.hashes.clear()
            h = self.hashes[desc] = zlib.crc32(desc.encode()) + 1
        return h

    def start_check(self, desc, force=False):
        """Post the comparison of this call's description across ranks: MAX of
        (h, -h) is (h, -h) exactly when every rank has the same h."""
        if not (self.checks or force):
            return None
        h = self.hash_of(desc)
        arr = np.array([h, -h], dtype=np.int64)
        out = np.empty(2, dtype=np.int64)
        req = self.ctl.Iallreduce(arr, out, op=self.MPI.MAX)
        return [req, arr, out, desc]

    def finish_check(self, chk, what, seq, timeout=None):
        req, _, out, desc = chk
        self.wait([req], what, seq, timeout)
        if out[0] == -out[1]:
            return
        mine = np.zeros(_DESC_BYTES, dtype=np.uint8)
        enc = np.frombuffer(desc.encode()[:_DESC_BYTES], dtype=np.uint8)
        mine[:len(enc)] = enc
        every = np.empty(_DESC_BYTES * self.size, dtype=np.uint8)
        # every rank is here (all got the same comparison): a rank that has its answer
        # and fails with it must not make the others fail with a report of its error
        # before they have theirs
        self.wait([self.ctl.Iallgather(mine, every)], what, None, faults=False)
        calls = [bytes(every[i * _DESC_BYTES:(i + 1) * _DESC_BYTES]).rstrip(b"\0").decode()
                 for i in range(self.size)]
        raise RuntimeError(
            f"{what}: the ranks made different collective calls: "
            + "; ".join(f"rank {i}: {c}" for i, c in enumerate(calls))
            + ". Every rank must call the same collectives in the same order, with tensors "
              "of the same shape and dtype; the process group is unusable after this error")

    # ---- closing
    def close(self, at_exit):
        """Tell the others this rank is done, then meet them at a barrier (so MPI's
        finalize never waits on a rank that failed): a failure there ends the process
        with status 1 at exit, and raises otherwise."""
        if self.closed:
            return
        self.closed = True
        try:
            self.notify(_EXIT, str(self.seq))
            self.wait([self.fin.Ibarrier()], "destroy_process_group", None)
        except DistBackendError as e:
            if at_exit:
                sys.stdout.flush()
                sys.stderr.write(f"[rank {self.rank}] {type(e).__name__}: {e}\n")
                sys.stderr.flush()
                self.die(f"{type(e).__name__}: {e}")
            raise
        if self.nreq is not None:
            self.nreq.Cancel()
            self.nreq.Wait()
            self.nreq = None
        if self.nccl is not None:
            self.nccl.destroy()
        for c in (self.comm, self.ctl, self.fin):
            c.Free()

    # ---- NCCL, made on first use with a CUDA tensor
    def nccl_comm(self, what):
        if self.nccl is None:
            if not _nccl.available():
                raise RuntimeError(f"{what}: CUDA tensors need NCCL through CuPy "
                                   f"(pip install tapegrad[cuda]); not available here")
            uid = _nccl.unique_id() if self.rank == 0 else None
            raw = np.zeros(128, dtype=np.int8)
            if uid is not None:
                raw[:] = np.frombuffer(bytes(uid), dtype=np.int8) if isinstance(uid, bytes) \
                    else np.asarray(uid, dtype=np.int8)
            self.wait([self.ctl.Ibcast(raw, root=0)], what, None)
            as_bytes = isinstance(uid, bytes) if uid is not None else \
                isinstance(_nccl.unique_id(), bytes)
            uid = raw.tobytes() if as_bytes else tuple(int(v) for v in raw)
            self.nccl = _nccl.Communicator(self.size, uid, self.rank)
        return self.nccl


def _excepthook(tp, value, tb):
    """An uncaught exception on a rank: print it, tell the other ranks, exit 1 without
    MPI's finalize (which would wait for them)."""
    g = _WORLD
    hook = _prev_excepthook or sys.__excepthook__
    if g is None or g.closed:
        return hook(tp, value, tb)
    sys.stdout.flush()
    sys.stderr.write(f"[tapegrad.distributed] rank {g.rank} of {g.size}: uncaught "
                     f"{tp.__name__}; telling the other ranks and exiting\n")
    hook(tp, value, tb)
    sys.stderr.flush()
    g.die(f"{tp.__name__}: {value}")


def _at_exit():
    g = _WORLD
    if g is not None and not g.closed:
        g.close(at_exit=True)


# ------------------------------------------------------------------ set-up
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
    return list(range(_group("get_process_group_ranks", group).size))


def get_global_rank(group, group_rank):
    _group("get_global_rank", group)
    return group_rank


def get_group_rank(group, global_rank):
    _group("get_group_rank", group)
    return global_rank


def is_mpi_available():
    return is_available()


def is_nccl_available():
    return _nccl.available()


def is_gloo_available():
    """True where MPI is: ``backend="gloo"`` runs on the MPI transport."""
    return is_available()


def is_torchelastic_launched():
    return False


def get_rank(group=None):
    return _group("get_rank", group).rank


def get_world_size(group=None):
    return _group("get_world_size", group).size


def get_backend(group=None):
    return _group("get_backend", group).backend


# ------------------------------------------------------------------ work handles
class Work:
    """A collective in flight (``async_op=True``): ``wait()`` blocks until it is done
    (and the result is in the tensors), ``is_completed()`` asks without blocking.

    A checked collective moves its data once every rank has been seen to make the same
    call (MPI aborts on a type mismatch inside a transfer, so the data may not go
    first): the comparison is posted at the call, and the transfer starts as soon as
    the comparison is back, at the latest on ``wait()``; collectives start in call
    order on every rank."""

    def __init__(self, group, what, start, check=None, finish=None, keep=None):
        self.group, self.what = group, what
        self.start_fn, self.check, self.finish, self.keep = start, check, finish, keep
        self.seq = None
        self.reqs, self.event = [], None
        self.started = self._done = False

    def _start(self):
        g = self.group
        g.seq += 1
        self.seq = g.seq
        out = self.start_fn()
        self.start_fn = None
        if isinstance(out, list):
            self.reqs = out
        else:
            self.event = out
        self.started = True

    def is_completed(self):
        if self._done:
            return True
        g = self.group
        g.pump()
        if not self.started:
            return False
        ok = g.MPI.Request.Testall(self.reqs) if self.reqs else True
        return bool(ok and (self.event is None or self.event.done))

    def wait(self, timeout=None):
        if self._done:
            return True
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        g = self.group
        g.pump(until=self, timeout=timeout)
        if self.reqs:
            g.wait(self.reqs, self.what, self.seq, timeout)
        if self.event is not None:
            g.wait_event(self.event, self.what, self.seq, timeout)
        self._done = True
        if self.finish is not None:
            self.finish()
        self.keep = self.reqs = self.event = None
        return True


def _submit(g, what, desc, start, finish=None, keep=None, async_op=False, check=True):
    """Queue a collective behind the ones not started yet, its call check posted now;
    start what can start; wait for it unless ``async_op``."""
    chk = g.start_check(desc) if check and g.checks and g.must_compare(desc) else None
    w = Work(g, what, start, chk, finish, keep)
    g.queue.append(w)
    g.pump(until=None if async_op else w)
    if async_op:
        return w
    w.wait()
    return None


# ------------------------------------------------------------------ helpers
_MPI_OPS = {"sum": "SUM", "product": "PROD", "max": "MAX", "min": "MIN", "avg": "SUM",
            "band": "BAND", "bor": "BOR", "bxor": "BXOR"}
_BOOL_OPS = {"sum": "LOR", "max": "LOR", "min": "LAND", "product": "LAND", "band": "LAND",
             "bor": "LOR", "bxor": "LXOR"}
_BITWISE = ("band", "bor", "bxor")


def _op(what, op):
    key = op.lower() if isinstance(op, str) else None
    if key not in _MPI_OPS:
        raise _OpError(f"{what}: unknown reduce op {op!r}; use tg.distributed.ReduceOp "
                       f"(SUM, AVG, PRODUCT, MAX, MIN, BAND, BOR, BXOR)")
    return key


def _tensor(what, t, name="tensor"):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: {name} must be a tg.Tensor, got {type(t).__name__}")
    return t


def _tensor_list(what, name, lst, g):
    """``lst`` must be a list of world-size tensors (TypeError when not a list of
    tensors, as PyTorch; a wrong length is an ``_ArgumentError``)."""
    if not isinstance(lst, (list, tuple)):
        raise TypeError(f"{what}: {name} must be a list of tg.Tensor, got "
                        f"{type(lst).__name__}")
    if len(lst) != g.size:
        raise _ArgumentError(f"{what}: {name} must hold world_size ({g.size}) tensors, got "
                             f"{len(lst)}")
    for i, t in enumerate(lst):
        _tensor(what, t, f"{name}[{i}]")


def _desc(t):
    return f"shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device.type}"


class _Staged:
    """A tensor's buffer as MPI takes it: the buffer itself when C-contiguous and of a
    type MPI reduces, else a contiguous (float32 for float16) copy written back by
    ``done()``."""

    def __init__(self, t, reduce=False):
        self.t = t
        self.buf = buffer(t)
        arr = self.buf
        if reduce and arr.dtype == np.float16:
            arr = arr.astype(np.float32)
        elif not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        self.arr = arr

    def done(self):
        if self.arr is not self.buf:
            self.buf[...] = self.arr
        mark_written(self.t)


def _mpi_op(g, what, key, dtype):
    if dtype == np.bool_:
        return getattr(g.MPI, _BOOL_OPS[key]) if key != "avg" else _no_avg(what, dtype)
    if key == "avg" and dtype.kind != "f":
        _no_avg(what, dtype)
    if key in _BITWISE and dtype.kind not in "iu":
        raise RuntimeError(f"{what}: ReduceOp.{key.upper()} needs an integer or bool tensor, "
                           f"got {dtype}")
    return getattr(g.MPI, _MPI_OPS[key])


def _reduced(g, key, s):
    """What ends a reduction into the staged buffer ``s``: AVG's division, then the
    write-back."""
    def finish():
        if key == "avg":
            s.arr /= g.size
        s.done()
    return finish


def _blocks(what, g, big, big_name, small, small_name):
    """``big`` must hold one block of ``small``'s size per rank."""
    if big.numel() != g.size * small.numel():
        raise RuntimeError(f"{what}: {big_name} has {big.numel()} elements; it needs "
                           f"world_size * {small_name} ({g.size} * {small.numel()})")


def _no_avg(what, dtype):
    raise RuntimeError(f"{what}: ReduceOp.AVG needs a floating point tensor, got {dtype}")


def _contiguous_cuda(what, t):
    arr = buffer(t)
    if not arr.flags.c_contiguous:
        raise RuntimeError(f"{what}: NCCL needs a contiguous CUDA tensor; call "
                           f".contiguous() first")
    return arr


# ------------------------------------------------------------------ collectives
def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` across ranks, in place on every rank (``op``: SUM, AVG,
    PRODUCT, MAX, MIN). Returns a ``Work`` with ``async_op=True``, else None."""
    g = _WORLD
    if g is not None and group is None and not async_op and not g.queue \
            and isinstance(tensor, Tensor):
        # the common case, in fewer steps (the same as below): a blocking reduction
        # of a contiguous CPU buffer; a repeat of the last one skips the look-ups
        arr = buffer(tensor)
        e = g.last_fast
        if e is None or e[0] is not arr or e[1] != op or e[2] != arr.shape:
            e = _fast_entry(g, tensor, arr, op)
        if e is not None:
            if g.checks:
                # must_compare's common case inline: the call repeats the last
                # compared one, and no other rank announced a comparison of it
                g.calls += 1
                if e[4] is not g.prev or g.calls in g.announced:
                    g.calls -= 1
                    _compare(g, e[4])
            g.seq += 1
            if e[5] is not None:
                r = e[5]()          # posted and tested in compiled code
                if r:
                    _native_wait(g, r)
            else:
                _fast_mpi4py(g, e, arr)
            if op == "avg":
                arr /= g.size
            mark_written(tensor)
            return None
    what = "all_reduce"
    g = _group(what, group)
    _tensor(what, tensor)
    key = _op(what, op)
    return _all_reduce(g, what, tensor, key, async_op, True)


_FAST_OPS = frozenset(("sum", "avg", "max", "min", "product"))
_FAST_TYPES = {np.float32: "FLOAT", np.float64: "DOUBLE", np.int32: "INT32_T",
               np.int64: "INT64_T"}
_NATIVE_AFTER = 64   # repeats of a short-path call before the compiled path is loaded
_KEEP_BYTES = 1 << 16   # a buffer this small is held by the cache, a larger one weakly


def _fast_entry(g, tensor, arr, op):
    """``all_reduce``'s short path for this buffer and op (``g.last_fast``), made
    anew or, for a large buffer, found through its weakref; None where it does not
    apply. A tuple: the buffer (a weakref if large), op, shape, MPI op, the call's
    description, then the compiled call with its arguments bound (the buffer's
    address, which does not change while it lives) or None."""
    e = g.last_fast
    if e is not None and e[0].__class__ is weakref.ref and e[0]() is arr and e[1] == op \
            and e[2] == arr.shape:
        return e
    g.repeats = 0
    if op not in _FAST_OPS or arr.__class__ is not np.ndarray or not arr.flags.c_contiguous \
            or not arr.flags.writeable:
        return None
    mop = g.fast_ops.get((arr.dtype, op))
    if mop is None:
        return None
    desc = f"all_reduce({_desc(tensor)}, op={op})"
    post = None
    if g.native and arr.size <= _mpi_native.MAX_COUNT:
        post = functools.partial(g.native, arr.ctypes.data,
                                 *_mpi_native.pack(g.comm, arr.size, g.fast_types[arr.dtype],
                                                   mop), g.polls)
    held = arr if arr.nbytes <= _KEEP_BYTES else weakref.ref(arr)
    e = g.last_fast = (held, op, arr.shape, mop, desc, post)
    return e


def _compare(g, desc):
    """The short path's call check when it may differ from the last compared call."""
    if g.must_compare(desc):
        g.compare_now(desc, "all_reduce")
    g.prev = desc


def _fast_mpi4py(g, e, arr):
    """The short path's transfer through mpi4py (until the compiled path is loaded,
    or where it cannot be)."""
    req = g.comm.Iallreduce(g.IN_PLACE, arr, op=e[3])
    if not req.Test():
        g.wait([req], "all_reduce", g.seq)
    if g.native is None:
        g.repeats += 1
        if g.repeats >= _NATIVE_AFTER:
            _load_native(g)


def _load_native(g):
    """Load the compiled post-and-test (once; False where it cannot be used) and drop
    the short path's entry, which the next call makes again with it."""
    g.native = _mpi_native.load(g.MPI) or False
    g.last_fast = None


def _native_wait(g, r):
    """The compiled call's answer other than done: an MPI error, or the request still
    in flight, which the usual wait finishes (with the notices and the timeout)."""
    if r < 0:
        raise g.MPI.Exception(-r)
    g.wait([_mpi_native.request_of(g.MPI, r)], "all_reduce", g.seq)


def _all_reduce(g, what, tensor, key, async_op, check):
    desc = f"all_reduce({_desc(tensor)}, op={key})"
    if tensor.is_cuda:
        if key == "avg" and not tensor.dtype.is_floating_point:
            _no_avg(what, tensor.dtype)
        arr = _contiguous_cuda(what, tensor)
        return _submit(g, what, desc, lambda: g.nccl_comm(what).all_reduce(arr, key),
                       lambda: mark_written(tensor), async_op=async_op, check=check)
    s = _Staged(tensor, reduce=True)
    mop = _mpi_op(g, what, key, s.arr.dtype)  # validates before anything is posted

    finish = _reduced(g, key, s)
    return _submit(g, what, desc, lambda: [g.comm.Iallreduce(g.MPI.IN_PLACE, s.arr, op=mop)],
                   finish, s, async_op, check)


def broadcast(tensor, src, group=None, async_op=False):
    """Copy ``tensor`` of rank ``src`` into ``tensor`` of every rank, in place."""
    what = "broadcast"
    g = _group(what, group)
    _tensor(what, tensor)
    if not isinstance(src, (int, np.integer)) or not 0 <= src < g.size:
        raise _ArgumentError(f"broadcast: src must be a rank in [0, {g.size}), got {src!r}")
    src = int(src)
    desc = f"broadcast({_desc(tensor)}, src={src})"
    if tensor.is_cuda:
        arr = _contiguous_cuda(what, tensor)
        return _submit(g, what, desc, lambda: g.nccl_comm(what).broadcast(arr, src),
                       lambda: mark_written(tensor), async_op=async_op)
    s = _Staged(tensor)
    return _submit(g, what, desc, lambda: [g.comm.Ibcast(s.arr, root=src)], s.done, s,
                   async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Wait until every rank has reached this call."""
    g = _group("barrier", group)
    return _submit(g, "barrier", "barrier()", lambda: [g.comm.Ibarrier()], async_op=async_op)


def _same(what, name, t, ref):
    if tuple(t.shape) != tuple(ref.shape) or t.dtype != ref.dtype or t.device != ref.device:
        raise RuntimeError(f"{what}: {name} has shape {tuple(t.shape)}, {t.dtype} on "
                           f"{t.device}; expected {tuple(ref.shape)}, {ref.dtype} on "
                           f"{ref.device} (those of the input tensor)")


def _same_kind(what, output, input):
    if output.dtype != input.dtype or output.device != input.device:
        raise RuntimeError(f"{what}: output is {output.dtype} on {output.device}, input "
                           f"{input.dtype} on {input.device}; they must match")


def _empty_like(arr, shape):
    import importlib
    xp = importlib.import_module(type(arr).__module__.split(".")[0])
    return xp.empty(shape, dtype=arr.dtype)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """``tensor_list[r]`` gets rank r's ``tensor`` (one per rank, same shape and dtype)."""
    what = "all_gather"
    g = _group(what, group)
    _tensor(what, tensor)
    _tensor_list(what, "tensor_list", tensor_list, g)
    for i, t in enumerate(tensor_list):
        _same(what, f"tensor_list[{i}]", _tensor(what, t, f"tensor_list[{i}]"), tensor)
    desc = f"all_gather({_desc(tensor)})"
    if tensor.is_cuda:
        send = _contiguous_cuda(what, tensor)
        recv = _empty_like(send, (g.size,) + tuple(send.shape))
        start = lambda: g.nccl_comm(what).all_gather(send, recv)  # noqa: E731
    else:
        send = np.ascontiguousarray(buffer(tensor))
        recv = np.empty((g.size,) + send.shape, dtype=send.dtype)
        start = lambda: [g.comm.Iallgather(send, recv)]  # noqa: E731

    def finish():
        for i, t in enumerate(tensor_list):
            buffer(t)[...] = recv[i]
            mark_written(t)
    return _submit(g, what, desc, start, finish, (send, recv), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Rank r's ``input_tensor`` lands in block r of ``output_tensor`` (world size
    times its size: concatenated on dim 0, or stacked), with no copy when the output is
    contiguous."""
    what = "all_gather_into_tensor"
    g = _group(what, group)
    _tensor(what, output_tensor, "output_tensor")
    _tensor(what, input_tensor, "input_tensor")
    _same_kind(what, output_tensor, input_tensor)
    _blocks(what, g, output_tensor, "output_tensor", input_tensor, "input")
    desc = f"all_gather_into_tensor({_desc(input_tensor)})"
    if input_tensor.is_cuda:
        send = _contiguous_cuda(what, input_tensor)
        recv = _contiguous_cuda(what, output_tensor)
        return _submit(g, what, desc, lambda: g.nccl_comm(what).all_gather(send, recv),
                       lambda: mark_written(output_tensor), async_op=async_op)
    send = np.ascontiguousarray(buffer(input_tensor))
    s = _Staged(output_tensor)
    return _submit(g, what, desc, lambda: [g.comm.Iallgather(send, s.arr)], s.done,
                   (send, s), async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """``output`` on rank r gets the reduction over ranks of their ``input_list[r]``."""
    what = "reduce_scatter"
    g = _group(what, group)
    _tensor(what, output, "output")
    key = _op(what, op)
    _tensor_list(what, "input_list", input_list, g)
    for i, t in enumerate(input_list):
        _same(what, f"input_list[{i}]", _tensor(what, t, f"input_list[{i}]"), output)
    desc = f"reduce_scatter({_desc(output)}, op={key})"
    if output.is_cuda:
        recv = _contiguous_cuda(what, output)
        send = _empty_like(recv, (g.size,) + tuple(output.shape))
        for i, t in enumerate(input_list):
            send[i] = buffer(t)
        return _submit(g, what, desc, lambda: g.nccl_comm(what).reduce_scatter(send, recv, key),
                       lambda: mark_written(output), send, async_op)
    s = _Staged(output, reduce=True)
    mop = _mpi_op(g, what, key, s.arr.dtype)
    send = np.empty((g.size,) + tuple(output.shape), dtype=s.arr.dtype)
    for i, t in enumerate(input_list):
        send[i] = buffer(t)

    finish = _reduced(g, key, s)
    return _submit(g, what, desc, lambda: [g.comm.Ireduce_scatter_block(send, s.arr, op=mop)],
                   finish, (send, s), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Block r of ``input`` (world size times ``output``'s size) reduced over ranks
    lands in ``output`` on rank r; no copy for contiguous tensors."""
    what = "reduce_scatter_tensor"
    g = _group(what, group)
    _tensor(what, output, "output")
    _tensor(what, input, "input")
    key = _op(what, op)
    _same_kind(what, output, input)
    _blocks(what, g, input, "input", output, "output")
    desc = f"reduce_scatter_tensor({_desc(output)}, op={key})"
    if output.is_cuda:
        send = _contiguous_cuda(what, input)
        recv = _contiguous_cuda(what, output)
        return _submit(g, what, desc, lambda: g.nccl_comm(what).reduce_scatter(send, recv, key),
                       lambda: mark_written(output), async_op=async_op)
    send = _Staged(input, reduce=True).arr
    s = _Staged(output, reduce=True)
    mop = _mpi_op(g, what, key, send.dtype)

    finish = _reduced(g, key, s)
    return _submit(g, what, desc, lambda: [g.comm.Ireduce_scatter_block(send, s.arr, op=mop)],
                   finish, (send, s), async_op)


def _rank_arg(what, name, r, g):
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= r < g.size:
        raise _ArgumentError(f"{what}: {name} must be a rank in [0, {g.size}), got {r!r}")
    return int(r)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` across ranks into ``tensor`` of rank ``dst`` (the others'
    tensors are left as they were)."""
    what = "reduce"
    g = _group(what, group)
    _tensor(what, tensor)
    key = _op(what, op)
    dst = _rank_arg(what, "dst", dst, g)
    desc = f"reduce({_desc(tensor)}, op={key}, dst={dst})"
    if tensor.is_cuda:
        raise RuntimeError("reduce: CUDA tensors are not supported; use all_reduce")
    s = _Staged(tensor, reduce=True)
    mop = _mpi_op(g, what, key, s.arr.dtype)
    root = g.rank == dst

    def start():
        if root:
            return [g.comm.Ireduce(g.MPI.IN_PLACE, s.arr, op=mop, root=dst)]
        return [g.comm.Ireduce(s.arr, None, op=mop, root=dst)]

    def finish():
        if root:
            if key == "avg":
                s.arr /= g.size
            s.done()
    return _submit(g, what, desc, start, finish, s, async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """``gather_list[r]`` on rank ``dst`` gets rank r's ``tensor``; the other ranks
    pass no list."""
    what = "gather"
    g = _group(what, group)
    _tensor(what, tensor)
    dst = _rank_arg(what, "dst", dst, g)
    if g.rank == dst:
        _tensor_list(what, "gather_list", gather_list, g)
        for i, t in enumerate(gather_list):
            _same(what, f"gather_list[{i}]", t, tensor)
    elif gather_list:
        raise ValueError("gather: Argument ``gather_list`` must NOT be specified on "
                         "non-destination ranks.")
    if tensor.is_cuda:
        raise RuntimeError("gather: CUDA tensors are not supported; use all_gather")
    desc = f"gather({_desc(tensor)}, dst={dst})"
    send = np.ascontiguousarray(buffer(tensor))
    recv = np.empty((g.size,) + send.shape, dtype=send.dtype) if g.rank == dst else None

    def finish():
        if recv is not None:
            for i, t in enumerate(gather_list):
                buffer(t)[...] = recv[i]
                mark_written(t)
    return _submit(g, what, desc, lambda: [g.comm.Igather(send, recv, root=dst)], finish,
                   (send, recv), async_op)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """``tensor`` on rank r gets ``scatter_list[r]`` of rank ``src``; the other ranks
    pass no list."""
    what = "scatter"
    g = _group(what, group)
    _tensor(what, tensor)
    src = _rank_arg(what, "src", src, g)
    if g.rank == src:
        _tensor_list(what, "scatter_list", scatter_list, g)
        for i, t in enumerate(scatter_list):
            _same(what, f"scatter_list[{i}]", t, tensor)
    elif scatter_list:
        raise ValueError("scatter: Argument ``scatter_list`` must NOT be specified on "
                         "non-source ranks.")
    if tensor.is_cuda:
        raise RuntimeError("scatter: CUDA tensors are not supported; use broadcast")
    desc = f"scatter({_desc(tensor)}, src={src})"
    s = _Staged(tensor)
    send = None
    if g.rank == src:
        send = np.empty((g.size,) + s.arr.shape, dtype=s.arr.dtype)
        for i, t in enumerate(scatter_list):
            send[i] = buffer(t)
    return _submit(g, what, desc, lambda: [g.comm.Iscatter(send, s.arr, root=src)], s.done,
                   (send, s), async_op)


def _splits(what, name, sizes, t, g):
    """Element counts and offsets per rank of ``t`` cut along dim 0 (equal parts when
    ``sizes`` is None)."""
    rows = t.shape[0] if t.dim() else 1
    row = t.numel() // rows if rows else 0
    if sizes is None:
        if rows % g.size:
            raise _ArgumentError(f"{what}: {name} of {rows} rows does not split evenly "
                                 f"over world_size ({g.size}); give the split sizes")
        sizes = [rows // g.size] * g.size
    sizes = [int(v) for v in sizes]
    if len(sizes) != g.size or sum(sizes) != rows or min(sizes) < 0:
        raise _ArgumentError(f"{what}: {name}'s split sizes {sizes} must be world_size "
                             f"({g.size}) counts summing to its {rows} rows")
    counts = np.array(sizes, dtype=np.int64) * row
    return counts, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                      group=None, async_op=False):
    """Rank r sends block k of ``input`` (along dim 0; equal blocks unless split sizes
    are given) to rank k, which puts it in its block r of ``output``."""
    what = "all_to_all_single"
    g = _group(what, group)
    _tensor(what, output, "output")
    _tensor(what, input, "input")
    _same_kind(what, output, input)
    if input.is_cuda:
        raise RuntimeError("all_to_all_single: CUDA tensors are not supported")
    scounts, sdispl = _splits(what, "input", input_split_sizes, input, g)
    rcounts, rdispl = _splits(what, "output", output_split_sizes, output, g)
    even = output_split_sizes is None and input_split_sizes is None
    desc = f"all_to_all_single({_desc(input) if even else 'dtype=' + str(input.dtype)})"
    send = np.ascontiguousarray(buffer(input)).reshape(-1)
    s = _Staged(output)
    flat = s.arr.reshape(-1)
    return _submit(g, what, desc, lambda: [g.comm.Ialltoallv(
        [send, (scounts, sdispl)], [flat, (rcounts, rdispl)])], s.done, (send, s), async_op)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """``output_tensor_list[k]`` on rank r gets ``input_tensor_list[r]`` of rank k."""
    what = "all_to_all"
    g = _group(what, group)
    _tensor_list(what, "output_tensor_list", output_tensor_list, g)
    _tensor_list(what, "input_tensor_list", input_tensor_list, g)
    for t in list(output_tensor_list) + list(input_tensor_list):
        _same_kind(what, t, input_tensor_list[0])
        if t.is_cuda:
            raise RuntimeError("all_to_all: CUDA tensors are not supported")
    dtype = buffer(input_tensor_list[0]).dtype
    send = np.concatenate([np.ascontiguousarray(buffer(t)).reshape(-1)
                           for t in input_tensor_list]).astype(dtype, copy=False)
    scounts = np.array([t.numel() for t in input_tensor_list], dtype=np.int64)
    rcounts = np.array([t.numel() for t in output_tensor_list], dtype=np.int64)
    recv = np.empty(int(rcounts.sum()), dtype=dtype)
    sd = np.concatenate([[0], np.cumsum(scounts)[:-1]]).astype(np.int64)
    rd = np.concatenate([[0], np.cumsum(rcounts)[:-1]]).astype(np.int64)
    desc = f"all_to_all(dtype={input_tensor_list[0].dtype})"

    def finish():
        for t, o, c in zip(output_tensor_list, rd.tolist(), rcounts.tolist()):
            buffer(t)[...] = recv[o:o + c].reshape(tuple(t.shape))
            mark_written(t)
    return _submit(g, what, desc, lambda: [g.comm.Ialltoallv([send, (scounts, sd)],
                                                             [recv, (rcounts, rd)])],
                   finish, (send, recv), async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that raises after ``timeout`` (a ``timedelta`` or seconds; the group's
    by default), or as soon as a rank is known to have failed or left, naming it."""
    w = barrier(group, async_op=True)
    w.wait(timeout)


# ---- point to point: not collective calls (no call check, not counted in the
# collective sequence that a leaving rank reports)
class _P2PWork:
    """``isend`` / ``irecv``'s handle: ``wait()``, ``is_completed()``; a recv's
    ``source_rank()``."""

    def __init__(self, group, what, req, peer, finish=None, keep=None):
        self.group, self.what, self.req, self.peer = group, what, req, peer
        self.finish, self.keep = finish, keep
        self.status = group.MPI.Status()
        self._done = False

    def _test(self):
        return self.req.Test(self.status)

    def is_completed(self):
        if not self._done and self._test():
            self._complete()
        return self._done

    def _complete(self):
        self._done = True
        if self.finish is not None:
            self.finish()
        self.keep = None

    def source_rank(self):
        self.wait()
        return self.status.Get_source()

    def wait(self, timeout=None):
        if self._done:
            return True
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        g = self.group
        limit = g.timeout if timeout is None else timeout
        start = time.monotonic()
        gone = None
        n = 0
        while not self._test():
            n += 1
            if g.crowded or n > 512:
                _sched_yield()
            if n & 63:
                continue
            g.poll(self.what)
            now = time.monotonic()
            left = [r for r in g.exited if self.peer is None or r == self.peer]
            if left and (self.peer is not None or len(g.exited) == g.size - 1):
                gone = gone or now
                if now - gone > 0.5:   # (what it sent before leaving is in by now)
                    raise DistBackendError(
                        f"{self.what}: rank {left[0]} exited without the matching "
                        f"{'recv' if 'send' in self.what else 'send'} (rank {g.rank} "
                        f"waited for it)")
            if now - start > limit:
                raise DistBackendError(f"{self.what}: timed out after {limit:g} s on rank "
                                       f"{g.rank}, waiting for rank "
                                       f"{'any' if self.peer is None else self.peer}")
        self._complete()
        return True


def _p2p_peer(what, name, peer, g):
    peer = _rank_arg(what, name, peer, g)
    if peer == g.rank:
        raise _ArgumentError(f"{what}: {name}={peer} is this process's own rank")
    return peer


def isend(tensor, dst, group=None, tag=0, _what="isend"):
    """Send ``tensor`` to rank ``dst`` without waiting: a handle with ``wait()``."""
    what = _what
    g = _group(what, group)
    _tensor(what, tensor)
    dst = _p2p_peer(what, "dst", dst, g)
    if tensor.is_cuda:
        raise RuntimeError(f"{what}: CUDA tensors are not supported")
    arr = np.ascontiguousarray(buffer(tensor))
    return _P2PWork(g, what, g.comm.Isend(arr, dst, tag=int(tag)), dst, keep=arr)


def irecv(tensor, src=None, group=None, tag=0, _what="irecv"):
    """Receive into ``tensor`` from rank ``src`` (any rank when None) without
    waiting: a handle with ``wait()`` and ``source_rank()``."""
    what = _what
    g = _group(what, group)
    _tensor(what, tensor)
    if src is not None:
        src = _p2p_peer(what, "src", src, g)
    if tensor.is_cuda:
        raise RuntimeError(f"{what}: CUDA tensors are not supported")
    s = _Staged(tensor)
    req = g.comm.Irecv(s.arr, g.MPI.ANY_SOURCE if src is None else src, tag=int(tag))
    return _P2PWork(g, what, req, src, s.done, s)


def send(tensor, dst, group=None, tag=0):
    """Send ``tensor`` to rank ``dst`` (returns once it is sent)."""
    isend(tensor, dst, group, tag, "send").wait()


def recv(tensor, src=None, group=None, tag=0):
    """Receive into ``tensor`` from rank ``src`` (any rank when None); returns the
    sender's rank."""
    w = irecv(tensor, src, group, tag, "recv")
    w.wait()
    return w.status.Get_source()


class P2POp:
    """One point-to-point operation for ``batch_isend_irecv``: ``P2POp(dist.isend,
    tensor, peer)`` or ``P2POp(dist.irecv, tensor, peer)``."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type "
                             "``tg.distributed.isend`` or ``tg.distributed.irecv``.")
        self.op, self.tensor, self.group, self.tag = op, tensor, group, tag
        self.peer = peer if peer is not None else group_peer


def batch_isend_irecv(p2p_op_list):
    """Start every ``P2POp`` of the list; their handles."""
    return [p.op(p.tensor, p.peer, p.group, p.tag) for p in p2p_op_list]


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


def _all_reduce_unchecked(tensor, key):
    """``all_reduce(async_op=True)`` without the call check, for DDP's buckets (their
    layout was compared across ranks at construction): nothing waits for the other
    ranks before the transfer starts."""
    g = _group("DistributedDataParallel")
    return _all_reduce(g, "DistributedDataParallel all_reduce", tensor, key, True, False)


# ------------------------------------------------------------------ checkpoints
def _broadcast_bytes(data, src, what):
    g = _group(what)
    n = np.array([len(data) if g.rank == src else 0], dtype=np.int64)
    broadcast(Tensor(n), src)
    raw = np.frombuffer(data, dtype=np.uint8).copy() if g.rank == src else \
        np.empty(int(n[0]), dtype=np.uint8)
    broadcast(Tensor(raw), src)
    return raw.tobytes()


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
