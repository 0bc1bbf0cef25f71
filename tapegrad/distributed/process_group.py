"""The process group over MPI: the group object that owns the communicators, the
call check, the fault watch and its notices, and the errors they raise."""
import collections
import os
import sys
import time
import zlib

import numpy as np

from ..devices import nccl as _nccl

# MPI's operations by ReduceOp name; the compiled path's ops and types
_MPI_OPS = {"sum": "SUM", "product": "PROD", "max": "MAX", "min": "MIN", "avg": "SUM",
            "band": "BAND", "bor": "BOR", "bxor": "BXOR"}
_BOOL_OPS = {"sum": "LOR", "max": "LOR", "min": "LAND", "product": "LAND", "band": "LAND",
             "bor": "LOR", "bxor": "LXOR"}
_BITWISE = ("band", "bor", "bxor")
_FAST_OPS = frozenset(("sum", "avg", "max", "min", "product"))
_FAST_TYPES = {np.float32: "FLOAT", np.float64: "DOUBLE", np.int32: "INT32_T",
               np.int64: "INT64_T"}


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
        finalize never waits on a rank that failed) and read their exit notices: a
        failure there ends the process with status 1 at exit, and raises otherwise."""
        if self.closed:
            return
        self.closed = True
        try:
            self.notify(_EXIT, str(self.seq))
            self.wait([self.fin.Ibarrier()], "destroy_process_group", None)
            self.drain_notices("destroy_process_group")
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

    def drain_notices(self, what):
        """Read the notices until every other rank's exit notice is in. Each rank's
        notices arrive in the order it sent them and its exit notice is its last, so
        none is left in flight: MPI may give a later group's communicator the freed
        one's context, and a notice left unread would reach that group."""
        limit = self.timeout
        start = time.monotonic()
        while True:
            self.read_notices()
            if self.failed:
                self.poll(what)
            if all(r in self.exited for r in range(self.size) if r != self.rank):
                return
            if time.monotonic() - start > limit:
                missing = [r for r in range(self.size) if r != self.rank and r not in self.exited]
                raise DistBackendError(
                    f"{what}: timed out after {limit:g} s on rank {self.rank} of "
                    f"{self.size}, waiting for the exit notices of ranks {missing}")
            _sched_yield()

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
