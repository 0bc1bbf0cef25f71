"""``tg.nn.parallel.DistributedDataParallel`` (defined here, next to the collectives
it drives): data-parallel training over ``tg.distributed``, as
``torch.nn.parallel.DistributedDataParallel``.

How the gradients meet. Parameters are packed, in reverse order of
``module.parameters()`` (roughly the order their gradients become ready), into flat
buckets of at most ``bucket_cap_mb``. During a forward, each parameter a module call
reads is a fresh alias of it (``reshape`` to its own shape, a view node), made by a
forward pre-hook on that module, with a gradient hook; all those aliases hang from one
outer alias per parameter made when the forward starts. The reverse walk visits nodes
newest first, so a module's aliases get their gradients right after that module's
backward: the hook adds the gradient into the bucket, and when every parameter of a
bucket is complete its all-reduce starts (non-blocking; buckets start in index order
on every rank, as MPI requires), while the walk goes on through the earlier layers.
The outer aliases get theirs at the end of the walk, with the total over every use
(a parameter also read outside its module's call, a tied weight, is completed there).
The hooks of the parameters themselves run last, as the walker accumulates leaf
gradients: the first one waits for every bucket, divides by the world size, and each
returns its parameter's averaged gradient in place of the local one, which the
walker then stores in ``.grad``.

After the forward, the graph is walked once from the outputs (cheap, Python over
nodes) to count the aliases that reach them: a parameter whose gradient cannot
arrive is unused (an error unless ``find_unused_parameters=True``, then its local
gradient counts as zero and, if some rank used it, it gets the average), and one read
outside its module's call is completed by its outer alias.

Supported as PyTorch's: ``backward()`` (not ``tg.grad``), one backward per forward,
``no_sync()``, ``broadcast_buffers``. ``tg.compile`` does not exist in tapegrad yet;
``tg.fuse``'d functions inside the module are ordinary ops and work.
"""
import contextlib

import numpy as np

from .. import distributed as dist
from ..grad_mode import is_grad_enabled
from ..nn.module import Module
from ..tensor import Tensor, buffer
from . import _all_reduce_unchecked

__all__ = ["DistributedDataParallel"]


class _Bucket:
    __slots__ = ("flat", "members", "pending", "work")

    def __init__(self, flat, members):
        self.flat, self.members = flat, members
        self.pending = 0
        self.work = None


class DistributedDataParallel(Module):
    """Wrap ``module`` for data-parallel training: call it as the module; after
    ``loss.backward()`` every rank holds the gradients averaged over all ranks.

    Parameters and buffers are broadcast from rank 0 at construction (after checking
    that every rank has the same parameter shapes), and buffers again at each forward
    (``broadcast_buffers``). ``bucket_cap_mb``: the size of the gradient buckets whose
    all-reduces overlap the backward. ``find_unused_parameters``: allow parameters
    that do not reach the forward's outputs. ``no_sync()``: a context in which
    forwards and backwards accumulate local gradients only; the first synchronised
    backward after it averages the accumulated sum.

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
            raise RuntimeError(f"{what}: call tg.distributed.init_process_group() first")
        if process_group is not None:
            raise ValueError(f"{what}: only the default process group is supported")
        if not bucket_cap_mb > 0:
            raise ValueError(f"{what}: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        d = self.__dict__
        d["broadcast_buffers"] = broadcast_buffers
        d["find_unused_parameters"] = find_unused_parameters
        d["bucket_cap_mb"] = bucket_cap_mb
        d["_sync"] = True
        d["_pass"] = None      # the bookkeeping of the last synchronised forward
        d["_active"] = None    # the pass whose backward is running
        d["_stats"] = None     # of the last synchronised backward: buckets, how many
        #                        started before the walk ended
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        d["_names"] = [n for n, _ in named]
        d["_params"] = [p for _, p in named]
        # every rank must hold the same model
        _same_model(module, len(named))
        with _no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, 0)
        self._make_buckets(bucket_cap_mb * 2 ** 20)
        # where each parameter sits: (module, attribute name, parameter index)
        index = {id(p): i for i, p in enumerate(self._params)}
        d["_slots"] = {}
        for mod in module.modules():
            names = [(name, index[id(p)]) for name, p in mod._parameters.items()
                     if p is not None and id(p) in index]
            if names:
                self._slots[id(mod)] = (mod, names)
                mod.register_forward_pre_hook(self._pre_hook)
                mod.register_forward_hook(self._post_hook)
        d["_leaf_hooks"] = [p.register_hook(self._leaf_hook(i))
                            for i, p in enumerate(self._params)]

    def _make_buckets(self, cap):
        """Reverse parameter order, one dtype and device per bucket, at most ``cap``
        bytes each (a parameter larger than the cap gets a bucket of its own)."""
        buckets, where = [], [None] * len(self._params)
        cur, size, key = [], 0, None
        order = list(range(len(self._params)))[::-1]
        for i in order:
            p = self._params[i]
            k = (p.dtype, p.device)
            nbytes = p.numel() * buffer(p).itemsize
            if cur and (k != key or size + nbytes > cap):
                buckets.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += nbytes
            key = k
        if cur:
            buckets.append(cur)
        made = []
        for b, members in enumerate(buckets):
            first = buffer(self._params[members[0]])
            total = sum(self._params[i].numel() for i in members)
            flat = _zeros_like(first, total)
            off = 0
            for i in members:
                n = self._params[i].numel()
                where[i] = (b, off, n)
                off += n
            made.append(_Bucket(flat, members))
        self.__dict__["_buckets"] = made
        self.__dict__["_where"] = where

    # ------------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        if self.broadcast_buffers:
            bufs = list(self.module.buffers())
            if bufs:
                with _no_grad():
                    for b in bufs:
                        dist.broadcast(b, 0)
        if not (self._sync and is_grad_enabled() and self._params):
            self.__dict__["_pass"] = None
            return self.module(*args, **kwargs)
        P = _Pass(self)
        self.__dict__["_pass"] = P
        try:
            for mod, names in self._slots.values():
                for name, i in names:
                    mod._parameters[name] = P.outer_alias(i)
            P.in_forward = True
            out = self.module(*args, **kwargs)
        finally:
            P.in_forward = False
            for mod, names in self._slots.values():
                for name, i in names:
                    mod._parameters[name] = self._params[i]
        P.after_forward(out)
        return out

    def _pre_hook(self, mod, args):
        P = self._pass
        if P is not None and P.in_forward:
            for name, i in self._slots[id(mod)][1]:
                mod._parameters[name] = P.inner_alias(i)

    def _post_hook(self, mod, args, out):
        P = self._pass
        if P is not None and P.in_forward:
            for name, i in self._slots[id(mod)][1]:
                mod._parameters[name] = P.outer[i]

    def _leaf_hook(self, i):
        def hook(grad):
            P = self._active
            if P is None:
                return None  # not a synchronised backward (no_sync, eval, outside forward)
            return P.leaf(i)
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
    """One synchronised forward and its backward: the aliases, the counts, the buckets'
    progress."""

    def __init__(self, ddp):
        self.ddp = ddp
        n = len(ddp._params)
        self.outer = [None] * n
        self.outer_nodes = {}     # id(outer alias node) -> parameter index
        self.inner_nodes = {}     # id(inner alias node) -> parameter index
        self.inner_keep = []      # the inner aliases (their nodes' ids must stay unique)
        self.expected = [0] * n   # inner aliases whose gradient will come
        self.got = [0] * n
        self.deferred = [False] * n   # read outside its module's call: wait for the total
        self.used = [False] * n
        self.ready = [False] * n
        self.started = [False] * n    # the bucket slot holds something already
        self.fired = [False] * n      # its outer alias got its gradient (a leaf hook follows)
        self.leaves_done = 0
        self.in_forward = False
        self.begun = self.finalized = False
        self.next_bucket = 0
        self.used_map = None
        for b in ddp._buckets:
            b.pending = len(b.members)
            b.work = None

    # ---- forward
    def outer_alias(self, i):
        p = self.ddp._params[i]
        a = p.reshape(tuple(p.shape))
        a.register_hook(self._total_hook(i))
        self.outer[i] = a
        self.outer_nodes[id(a.grad_fn)] = i
        return a

    def inner_alias(self, i):
        a = self.outer[i].reshape(tuple(self.outer[i].shape))
        a.register_hook(self._inner_hook(i))
        self.inner_nodes[id(a.grad_fn)] = i
        self.inner_keep.append(a)
        return a

    def after_forward(self, out):
        """Walk the graph from the outputs: which inner aliases reach them, which
        parameters are used, which are read outside their module's call."""
        ddp = self.ddp
        stack = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
        seen = set()
        inner, outer = self.inner_nodes, self.outer_nodes
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            j = inner.get(id(node))
            if j is not None:
                self.expected[j] += 1
            for e in node.edges:
                if type(e) is not tuple:
                    continue
                target = e[0]
                i = outer.get(id(target))
                if i is not None:
                    self.used[i] = True
                    if inner.get(id(node)) != i:
                        self.deferred[i] = True
                if id(target) not in seen:
                    stack.append(target)
        self.inner_keep = None
        unused = [ddp._names[i] for i, u in enumerate(self.used) if not u]
        if unused and not ddp.find_unused_parameters:
            raise RuntimeError(
                f"DistributedDataParallel: on rank {dist.get_rank()}, parameters "
                f"{unused} were not used in producing the forward's outputs, so their "
                f"gradients would never be ready. Pass find_unused_parameters=True to "
                f"DistributedDataParallel (an unused parameter's local gradient then "
                f"counts as zero), or make every parameter take part in the loss")

    # ---- backward
    def _begin(self):
        if self.finalized:
            raise RuntimeError("DistributedDataParallel: a second backward through the same "
                               "forward is not supported; run the forward again")
        if not self.begun:
            self.begun = True
            self.ddp.__dict__["_active"] = self
            for i, u in enumerate(self.used):
                if not u:
                    self._add(i, None)
                    self._ready(i)

    def _slot(self, i):
        b, off, n = self.ddp._where[i]
        return self.ddp._buckets[b].flat[off:off + n]

    def _add(self, i, g):
        """Add gradient ``g`` (an array, or None for zero) to parameter i's slot; its
        first contribution also brings the gradient accumulated before (no_sync)."""
        slot = self._slot(i)
        if not self.started[i]:
            self.started[i] = True
            old = self.ddp._params[i].grad
            if old is None:
                slot[...] = 0 if g is None else _flat(g)
                return
            slot[...] = _flat(buffer(old))
        if g is not None:
            slot += _flat(g)

    def _ready(self, i):
        if self.ready[i]:
            return
        self.ready[i] = True
        b = self.ddp._where[i][0]
        self.ddp._buckets[b].pending -= 1
        self._launch()

    def _launch(self):
        buckets = self.ddp._buckets
        while self.next_bucket < len(buckets) and buckets[self.next_bucket].pending == 0:
            bk = buckets[self.next_bucket]
            bk.work = _all_reduce_unchecked(Tensor(bk.flat), "avg")
            self.next_bucket += 1
        for b in buckets[:self.next_bucket]:
            if b.work is not None:
                b.work.is_completed()  # MPI moves data only inside its calls

    def _inner_hook(self, i):
        def hook(grad):
            self._begin()
            if self.deferred[i]:
                return None  # its total comes with the outer alias
            self._add(i, buffer(grad))
            self.got[i] += 1
            if self.got[i] >= self.expected[i]:
                self._ready(i)
            return None
        return hook

    def _total_hook(self, i):
        def hook(grad):
            self._begin()
            self.fired[i] = True
            if self.deferred[i] or not self.ready[i]:
                # read outside its module (the total is here), or some inner alias got
                # no gradient: the total replaces what the inner hooks added
                self.started[i] = False
                self._add(i, buffer(grad))
                self._ready(i)
            return None
        return hook

    def finalize(self):
        """Every bucket started (a parameter without a gradient counts zero), waited
        for and averaged; gradients set for parameters that get no leaf hook."""
        ddp = self.ddp
        for i in range(len(self.ready)):
            if not self.ready[i]:
                self._add(i, None)
                self._ready(i)
        ddp.__dict__["_stats"] = {"buckets": len(ddp._buckets),
                                  "started_during_backward": self.next_bucket}
        used = None
        if ddp.find_unused_parameters:
            self.used_map = np.array([1 if f else 0 for f in self.fired], dtype=np.uint8)
            used = _all_reduce_unchecked(Tensor(self.used_map), "max")
        for bk in ddp._buckets:
            bk.work.wait()
            bk.work = None
        if used is not None:
            used.wait()
        self.finalized = True
        for i, p in enumerate(ddp._params):
            if self.fired[i]:
                continue
            if self.used_map is not None and not self.used_map[i]:
                continue  # no rank has a gradient for it: left as it is
            p.grad = Tensor(self._slot(i).reshape(tuple(p.shape)).copy())

    def leaf(self, i):
        if not self.finalized:
            self.finalize()
        p = self.ddp._params[i]
        p.grad = None  # the averaged gradient (which includes the old one) replaces it
        self.leaves_done += 1
        if self.leaves_done >= sum(self.fired):
            self.ddp.__dict__["_active"] = None
        return self._slot(i).reshape(tuple(p.shape))


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


def _flat(a):
    return a.reshape(-1)


def _zeros_like(arr, n):
    if isinstance(arr, np.ndarray):
        return np.zeros(n, dtype=arr.dtype)
    import importlib
    xp = importlib.import_module(type(arr).__module__.split(".")[0])
    return xp.zeros(n, dtype=arr.dtype)


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


@contextlib.contextmanager
def _no_grad():
    from ..grad_mode import no_grad
    with no_grad():
        yield
