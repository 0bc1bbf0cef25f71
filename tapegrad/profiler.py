"""``tg.profile()``: per-op call counts and times.

>>> import tapegrad as tg
>>> x = tg.ones(3, requires_grad=True)
>>> with tg.profile() as prof:
...     (x * x).sum().backward()
>>> prof.counts["mul"]
1

While the context is open it observes this thread's op calls through the funnel
(``dispatch.observe``): each kernel and each adjoint the walker runs is timed.
Times are kernel times (forward) and whole-adjoint times (backward; a higher-order
adjoint's own ops are also counted as forward calls). Other threads are not seen.
"""
import time
from dataclasses import dataclass

from . import dispatch

__all__ = ["profile", "OpStats"]



@dataclass
class OpStats:
    """Counts and total seconds of one op inside a ``profile`` block."""
    name: str
    count: int = 0
    seconds: float = 0.0
    backward_count: int = 0
    backward_seconds: float = 0.0

    @property
    def total_seconds(self):
        return self.seconds + self.backward_seconds


class profile:
    """Context manager collecting per-op statistics: ``prof.stats[name]`` is an
    ``OpStats``; ``prof.counts`` and ``prof.times`` are plain dicts;
    ``prof.table()`` (also ``str(prof)``) formats them, slowest first."""

    def __init__(self, backward=True):
        self.backward = backward
        self.stats = {}
        self._start = None
        self.wall_seconds = 0.0

    # ---- results
    @property
    def counts(self):
        return {n: s.count for n, s in self.stats.items() if s.count}

    @property
    def backward_counts(self):
        return {n: s.backward_count for n, s in self.stats.items() if s.backward_count}

    @property
    def times(self):
        return {n: s.seconds for n, s in self.stats.items() if s.count}

    def table(self, sort_by="total", limit=None):
        rows = [s for s in self.stats.values() if s.count or s.backward_count]
        key = {"total": lambda s: -s.total_seconds, "count": lambda s: -s.count,
               "forward": lambda s: -s.seconds, "backward": lambda s: -s.backward_seconds,
               "name": lambda s: s.name}[sort_by]
        rows.sort(key=key)
        if limit is not None:
            rows = rows[:limit]
        head = f"{'op':<24}{'calls':>8}{'fwd us':>12}{'us/call':>10}{'bwd calls':>11}{'bwd us':>12}"
        lines = [head, "-" * len(head)]
        for s in rows:
            per = s.seconds / s.count * 1e6 if s.count else 0.0
            lines.append(f"{s.name:<24}{s.count:>8}{s.seconds * 1e6:>12.1f}{per:>10.2f}"
                         f"{s.backward_count:>11}{s.backward_seconds * 1e6:>12.1f}")
        lines.append(f"wall time in the block: {self.wall_seconds * 1e3:.3f} ms")
        return "\n".join(lines)

    def __str__(self):
        return self.table()

    # ---- the context
    def __enter__(self):
        self._observing = dispatch.observe(self)
        self._observing.__enter__()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_seconds += time.perf_counter() - self._start
        self._observing.__exit__(None, None, None)
        return False

    # ---- the observer (dispatch.observe's protocol)
    def _stats(self, op):
        st = self.stats.get(op.name)
        if st is None:
            st = self.stats[op.name] = OpStats(op.name)
        return st

    def __call__(self, op, kernel, *arrays, **attrs):
        st = self._stats(op)
        t0 = time.perf_counter()
        try:
            return kernel(*arrays, **attrs)
        finally:
            st.seconds += time.perf_counter() - t0
            st.count += 1

    def vjp(self, node, vjp, ctx, g):
        if not self.backward:
            return vjp(ctx, g)
        st = self._stats(node.op)
        t0 = time.perf_counter()
        try:
            return vjp(ctx, g)
        finally:
            st.backward_seconds += time.perf_counter() - t0
            st.backward_count += 1
