"""``tg.nn.parallel.DistributedDataParallel`` (defined here, next to the collectives
it drives): data-parallel training over ``tg.distributed``, as
``torch.nn.parallel.DistributedDataParallel``.

How the gradients meet (PyTorch's reducer). Parameters are packed, in reverse order of
``module.parameters()`` (roughly the order their gradients become ready), into flat
buckets of at most ``bucket_cap_mb``. Each parameter has a post-accumulate grad hook
(``Tensor.register_post_accumulate_grad_hook``): the walker runs it as soon as the
parameter's ``.grad`` holds its last contribution of the backward. The hook puts the
gradient, divided by the world size (one pass, as PyTorch divides before summing), in
the parameter's slot of its bucket (with ``gradient_as_bucket_view=True`` the slot
then IS ``.grad``'s storage, so when ``.grad`` is kept between steps nothing is
copied); once every slot of a bucket is in, and every earlier bucket has started, the
bucket's non-blocking all-reduce (SUM) starts (buckets start in index order on every
rank, as MPI requires) while the walk goes on through the earlier layers. The hook
that completes the last bucket waits for them all; the averaged gradients are then in
the buckets, which ``.grad`` views (or, by default, as PyTorch, are copied back into
each ``.grad``). The last bucket (the first layers' gradients) cannot overlap anything:
nothing of the backward is left when it starts.

After each synchronised forward the graph is walked once from the outputs (Python over
nodes) to find the parameters it reaches: one that it does not reach is an error
unless ``find_unused_parameters=True``; then its local gradient counts as zero (or as
what ``.grad`` held already), a map of the used ones is all-reduced (MAX), and a
parameter no rank used keeps its ``.grad`` as it was.

Supported as PyTorch's: ``backward()`` (not ``tg.grad``, which accumulates nothing),
one backward per forward, every output the loss depends on (an output the loss does
not use leaves its parameters' buckets unfinished: the next forward says so),
``no_sync()``, ``broadcast_buffers``. ``tg.compile``: a step that runs a DDP forward or
backward runs eagerly (the all-reduces happen in Python hooks, outside the ops that a
replay repeats), with tg.compile's warning naming DistributedDataParallel.
"""
import contextlib
import time

import numpy as np

from .. import distributed as dist
from ..dispatch import notify
from ..grad_mode import is_grad_enabled, no_grad
from ..nn.module import Module
from ..tensor import Tensor, buffer, mark_written, wrap
from .collectives import _all_reduce_unchecked, _mpi_op
from .process_group import _ArgumentError
from .setup import _group
from .work import _submit

__all__ = ["DistributedDataParallel"]

_NO_COMPILE = ("DistributedDataParallel: its gradient all-reduces run in Python hooks "
               "during the backward, outside the ops a replay repeats")


_WHAT = "DistributedDataParallel all_reduce"


class _Bucket:
    """A flat gradient buffer and its all-reduce (SUM, in place, without the call
    check: the layout was compared across ranks at construction), made once: a launch
    only queues the prepared start."""
    __slots__ = ("flat", "tensor", "members", "work", "start", "finish")

    def __init__(self, flat, members):
        self.flat, self.members = flat, members
        self.tensor = t = wrap(flat)   # what the all-reduce runs on
        self.work = None
        g = _group(_WHAT)
        if t.is_cuda:
            self.start = lambda: g.nccl_comm(_WHAT).all_reduce(flat, "sum")
        elif flat.dtype in (np.float32, np.float64):
            mop = _mpi_op(g, _WHAT, "sum", flat.dtype)
            self.start = lambda: [g.comm.Iallreduce(g.MPI.IN_PLACE, flat, op=mop)]
        else:  # (float16: MPI reduces a float32 copy)
            self.start = None
        self.finish = lambda: mark_written(t)

    def launch(self):
        if self.start is None:
            self.work = _all_reduce_unchecked(self.tensor, "sum")
        else:
            self.work = _submit(_group(_WHAT), _WHAT, None, self.start, self.finish,
                                async_op=True, check=False)


class DistributedDataParallel(Module):
    """Wrap ``module`` for data-parallel training: call it as the module; after
    ``loss.backward()`` every rank holds the gradients averaged over all ranks.

    Parameters and buffers are broadcast from rank 0 at construction (after checking
    that every rank has the same parameter shapes), and buffers again at each forward
    (``broadcast_buffers``). ``bucket_cap_mb``: the size of the gradient buckets whose
    all-reduces overlap the backward. ``find_unused_parameters``: allow parameters
    that do not reach the forward's outputs. ``gradient_as_bucket_view``: ``.grad`` is
    a view of the bucket (one copy fewer per step; the memory is reused by the next
    backward). ``no_sync()``: a context in which forwards and backwards accumulate
    local gradients only; the first synchronised backward after it averages the
    accumulated sum.

    >>> # under mpiexec -n 2, after tg.distributed.init_process_group():
    >>> # model = tg.nn.parallel.DistributedDataParallel(net)
    >>> # loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=25,
                 find_unused_parameters=False, gradient_as_bucket_view=False,
                 static_graph=False):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be a tg.nn.Module, got "
                            f"{type(module).__name__}")
        what = "DistributedDataParallel"
        if not dist.is_initialized():
            # PyTorch's ValueError (its default group is missing); a RuntimeError too
            raise _ArgumentError(f"{what}: Default process group has not been "
                                      f"initialized; call "
                                      f"tg.distributed.init_process_group() first")
        if process_group is not None:
            raise ValueError(f"{what}: only the default process group is supported")
        if not bucket_cap_mb > 0:
            raise ValueError(f"{what}: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        d = self.__dict__
        d["broadcast_buffers"] = broadcast_buffers
        d["find_unused_parameters"] = find_unused_parameters
        d["gradient_as_bucket_view"] = gradient_as_bucket_view
        d["bucket_cap_mb"] = bucket_cap_mb
        d["_sync"] = True
        d["_pass"] = None      # the bookkeeping of the last synchronised forward
        d["_stats"] = None     # of the last synchronised backward: buckets, how many
        #                        started before the last gradient came in, the seconds
        #                        spent waiting for them at its end
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        d["_names"] = [n for n, _ in named]
        d["_params"] = [p for _, p in named]
        d["_index"] = {id(p): i for i, p in enumerate(self._params)}
        # every rank must hold the same model
        _same_model(module, len(named))
        with no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, 0)
        self._make_buckets(bucket_cap_mb * 2 ** 20)
        d["_handles"] = [p.register_post_accumulate_grad_hook(self._hook(i))
                         for i, p in enumerate(self._params)]

    def _make_buckets(self, cap):
        """Reverse parameter order, one dtype and device per bucket, at most ``cap``
        bytes each (a parameter larger than the cap gets a bucket of its own). Each
        parameter's slot: a view of its bucket in its shape, and a Tensor on it that
        shares the bucket's version counter."""
        params = self._params
        groups, cur, size, key = [], [], 0, None
        for i in reversed(range(len(params))):
            p = params[i]
            k = (p.dtype, p.device)
            nbytes = p.numel() * buffer(p).itemsize
            if cur and (k != key or size + nbytes > cap):
                groups.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += nbytes
            key = k
        if cur:
            groups.append(cur)
        buckets, where = [], [0] * len(params)
        slots, grads = [None] * len(params), [None] * len(params)
        divide = [None] * len(params)
        for b, members in enumerate(groups):
            xp = _xp(buffer(params[members[0]]))
            flat = xp.zeros(sum(params[i].numel() for i in members),
                            dtype=buffer(params[members[0]]).dtype)
            bk = _Bucket(flat, members)
            off = 0
            for i in members:
                n = params[i].numel()
                where[i] = b
                with no_grad():  # a view of the bucket: it shares its version counter
                    grads[i] = bk.tensor[off:off + n].reshape(tuple(params[i].shape))
                slots[i] = buffer(grads[i])
                divide[i] = xp.divide
                off += n
            buckets.append(bk)
        d = self.__dict__
        d["_buckets"], d["_where"], d["_slots"], d["_grads"] = buckets, where, slots, grads
        d["_divide"] = divide

    # ------------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        notify("fail", _NO_COMPILE)
        prev = self._pass
        if prev is not None and prev.begun and not prev.finalized:
            missing = [self._names[i] for i, ok in enumerate(prev.done) if not ok]
            raise RuntimeError(
                f"DistributedDataParallel: on rank {dist.get_rank()}, the previous "
                f"backward did not finish averaging the gradients: parameters {missing} "
                f"got no gradient in it although the forward's outputs lead to them (an "
                f"output the loss did not use?). Make every output take part in the "
                f"loss, or leave those parameters out of the forward")
        if self.broadcast_buffers:
            bufs = list(self.module.buffers())
            if bufs:
                with no_grad():
                    for b in bufs:
                        dist.broadcast(b, 0)
        out = self.module(*args, **kwargs)
        P = None
        if self._sync and self._params and is_grad_enabled():
            P = _Pass(self, out)
        self.__dict__["_pass"] = P
        return out

    def _hook(self, i):
        def hook(p):
            P = self._pass
            if P is not None:  # else: not a synchronised forward (no_sync, no_grad)
                P.ready(i, p)
        return hook

    @contextlib.contextmanager
    def no_sync(self):
        """Forwards and backwards inside accumulate local gradients, unsynchronised."""
        old = self._sync
        self.__dict__["_sync"] = False
        try:
            yield
        finally:
            self.__dict__["_sync"] = old

    def extra_repr(self):
        return (f"buckets={len(self._buckets)}, bucket_cap_mb={self.bucket_cap_mb}, "
                f"find_unused_parameters={self.find_unused_parameters}")


class _Pass:
    """One synchronised forward's backward: which parameters are in, how far the
    buckets are."""

    def __init__(self, ddp, out):
        self.ddp = ddp
        n = len(ddp._params)
        used, self.root = _reached(out, ddp._index)
        unused = [i for i in range(n) if i not in used]
        if unused and not ddp.find_unused_parameters:
            raise RuntimeError(
                f"DistributedDataParallel: on rank {dist.get_rank()}, parameters "
                f"{[ddp._names[i] for i in unused]} were not used in producing the "
                f"forward's outputs, so their gradients would never be ready. Pass "
                f"find_unused_parameters=True to DistributedDataParallel (an unused "
                f"parameter's local gradient then counts as zero), or make every "
                f"parameter take part in the loss")
        self.unused = unused
        self.done = [False] * n
        self.pending = [len(b.members) for b in ddp._buckets]
        self.launched = 0       # buckets whose all-reduce started (a prefix)
        self.polled = 0         # buckets up to there are known complete
        self.begun = self.finalized = False
        self.used_map = self.used_work = None
        self.size = dist.get_world_size()
        self.kept = {}          # unused parameter -> its .grad before (a bucket view)

    def ready(self, i, p):
        """Parameter ``i``'s gradient is complete (its post-accumulate hook)."""
        notify("fail", _NO_COMPILE)
        ddp = self.ddp
        if self.finalized:
            raise RuntimeError("DistributedDataParallel: a second backward through the same "
                               "forward is not supported; run the forward again")
        if self.done[i]:
            raise RuntimeError(
                f"DistributedDataParallel: parameter {ddp._names[i]} got a gradient that "
                f"the forward's outputs do not lead to (used outside the wrapped module's "
                f"forward?); its bucket counted it as unused")
        if not self.begun:
            self.begun = True
            if self.unused:
                self._begin_unused()
        g = p.grad
        if g is ddp._grads[i]:  # accumulated in place in the bucket (a kept bucket view)
            self._scale(i, None)
        else:
            self._scale(i, buffer(g))
            if ddp.gradient_as_bucket_view:
                p.grad = ddp._grads[i]
        self._mark(i)

    def _scale(self, i, g):
        """Parameter ``i``'s slot = ``g`` / world size (``g`` None: the slot itself),
        in one pass: the buckets are then summed (as PyTorch, which divides first)."""
        view, n = self.ddp._slots[i], self.size
        if n == 1:
            if g is not None:
                view[...] = g
        elif g is None:
            view /= n
        else:
            self.ddp._divide[i](g, n, out=view)

    def _begin_unused(self):
        """The parameters the forward did not reach count as ready now, with their
        ``.grad`` so far (or zero); which parameters each rank used is all-reduced
        first (the same position in the call order on every rank)."""
        ddp = self.ddp
        n = len(ddp._params)
        self.used_map = np.ones(n, dtype=np.uint8)
        self.used_map[self.unused] = 0
        self.used_work = _all_reduce_unchecked(Tensor(self.used_map), "max")
        for i in self.unused:
            g = ddp._params[i].grad
            if g is None:
                ddp._slots[i][...] = 0
            elif g is ddp._grads[i]:
                self.kept[i] = ddp._slots[i].copy()
                self._scale(i, None)
            else:
                self._scale(i, buffer(g))
            self._mark(i)

    def _mark(self, i):
        self.done[i] = True
        ddp = self.ddp
        buckets = ddp._buckets
        self.pending[ddp._where[i]] -= 1
        before = self.launched
        while self.launched < len(buckets) and not self.pending[self.launched]:
            buckets[self.launched].launch()
            self.launched += 1
        if self.launched == len(buckets):
            ddp.__dict__["_stats"] = {"buckets": len(buckets),
                                      "started_during_backward": before,
                                      "wait": self._finish()}
        elif self.polled < self.launched and buckets[self.polled].work.is_completed():
            self.polled += 1  # (MPI moves data only inside its calls)

    def _finish(self):
        """Every bucket started: wait for them (and for the used map), then the
        gradients; the seconds spent waiting."""
        ddp = self.ddp
        t0 = time.perf_counter()
        for bk in ddp._buckets:
            bk.work.wait()
            bk.work = None
        if self.used_work is not None:
            self.used_work.wait()
        waited = time.perf_counter() - t0
        self.finalized = True
        if self.root is None or self.root.write < 0:
            # the graph is released (no retain_graph): no second backward can come, so a
            # later backward that is not DDP's (the module called directly) leaves the
            # gradients alone
            ddp.__dict__["_pass"] = None
        view = ddp.gradient_as_bucket_view
        for i, p in enumerate(ddp._params):
            if self.used_map is not None and not self.used_map[i]:
                # no rank has a gradient for it: its .grad stays as it was
                if i in self.kept:
                    ddp._slots[i][...] = self.kept[i]
                continue
            g = p.grad
            if g is ddp._grads[i]:
                continue
            if view or g is None:
                p.grad = ddp._grads[i] if view else wrap(ddp._slots[i].copy())
            else:
                buffer(g)[...] = ddp._slots[i]
                mark_written(g)
        return waited


# ------------------------------------------------------------------ helpers
def _tensors(out):
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)


def _reached(out, index):
    """The indices (``index``: id -> index) of the leaves the graph behind ``out``
    gives gradients to, and one of its output nodes (None without)."""
    found, seen, stack = set(), set(), []
    for t in _tensors(out):
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif id(t) in index:
            found.add(index[id(t)])
    root = stack[0] if stack else None
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for e, need in zip(node.edges, node.needs_input_grad):
            if not need:
                continue
            if type(e) is tuple:
                stack.append(e[0])
            else:
                i = index.get(id(e))
                if i is not None:
                    found.add(i)
    return found, root


def _xp(arr):
    """The array module of ``arr`` (NumPy, or CuPy for a CUDA tensor's buffer)."""
    if isinstance(arr, np.ndarray):
        return np
    import importlib
    return importlib.import_module(type(arr).__module__.split(".")[0])


def _same_model(module, n_grad):
    """Raise on every rank unless every rank's module has the same parameters (names,
    shapes, dtypes): their fingerprints, all-gathered."""
    import zlib
    sig = ";".join(f"{n}{tuple(p.shape)}{p.dtype}" for n, p in module.named_parameters())
    mine = np.array([n_grad, zlib.crc32(sig.encode())], dtype=np.int64)
    size = dist.get_world_size()
    every = [Tensor(np.zeros(2, dtype=np.int64)) for _ in range(size)]
    dist.all_gather(every, Tensor(mine))
    got = [tuple(int(v) for v in buffer(t)) for t in every]
    if len(set(got)) > 1:
        raise RuntimeError("DistributedDataParallel: the ranks hold different models "
                           "(parameter count, fingerprint of names, shapes and dtypes): "
                           + "; ".join(f"rank {r}: {n} parameters, {h:08x}"
                                       for r, (n, h) in enumerate(got)))
