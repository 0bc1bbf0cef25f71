"""Collectives on tensors: all_reduce (and its compiled fast path), broadcast,
barrier, all_gather, reduce_scatter, reduce, gather, scatter, all_to_all."""
import functools
import weakref

import numpy as np

from ..devices import mpi as _mpi_native
from ..tensor import Tensor, buffer, mark_written
from . import setup as _setup
from .process_group import (
    _BITWISE,
    _BOOL_OPS,
    _FAST_OPS,
    _MPI_OPS,
    ReduceOp,
    _ArgumentError,
    _OpError,
)
from .setup import _group
from .work import _submit


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


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` across ranks, in place on every rank (``op``: SUM, AVG,
    PRODUCT, MAX, MIN). Returns a ``Work`` with ``async_op=True``, else None."""
    g = _setup._WORLD
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


def _all_reduce_unchecked(tensor, key):
    """``all_reduce(async_op=True)`` without the call check, for DDP's buckets (their
    layout was compared across ranks at construction): nothing waits for the other
    ranks before the transfer starts."""
    g = _group("DistributedDataParallel")
    return _all_reduce(g, "DistributedDataParallel all_reduce", tensor, key, True, False)
