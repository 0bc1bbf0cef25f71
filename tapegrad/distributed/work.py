"""Work handles: what an ``async_op=True`` collective returns, and the queue that
runs a collective's steps in call order."""
import datetime


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
