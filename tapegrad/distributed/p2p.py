"""Point-to-point transfers: send/recv, isend/irecv, batch_isend_irecv."""
import datetime
import time

import numpy as np

from ..tensor import buffer
from .collectives import _rank_arg, _Staged, _tensor
from .process_group import DistBackendError, _ArgumentError, _sched_yield
from .setup import _group


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
