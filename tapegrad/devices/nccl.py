"""NCCL collectives on CuPy arrays, for ``tg.distributed`` on CUDA tensors.

Thin: a communicator made from a unique id that the caller distributes (over MPI),
and one function per collective that enqueues on the current stream and returns a
CUDA event recorded after it (the caller polls ``event.done``). CuPy is imported on
first use, so this module imports on a machine without it.
"""

__all__ = ["available", "unique_id", "Communicator"]


def _nccl():
    from cupy.cuda import nccl
    return nccl


def available():
    """Whether CuPy with NCCL and a CUDA device are usable here."""
    try:
        import cupy
        nccl = _nccl()
        return cupy.cuda.runtime.getDeviceCount() > 0 and hasattr(nccl, "NcclCommunicator")
    except Exception:
        return False


def unique_id():
    """A new NCCL unique id (a tuple or bytes, as this CuPy gives it)."""
    return _nccl().get_unique_id()


_OPS = {"sum": "NCCL_SUM", "product": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN",
        "avg": "NCCL_AVG"}
_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
          "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32",
          "int64": "NCCL_INT64", "bool": "NCCL_UINT8"}


class Communicator:
    """One process's NCCL communicator over ``size`` ranks (one GPU per process)."""

    def __init__(self, size, uid, rank):
        self.nccl = _nccl()
        self.comm = self.nccl.NcclCommunicator(size, uid, rank)
        self.size = size

    def _dtype(self, arr):
        name = _TYPES.get(arr.dtype.name)
        if name is None:
            raise TypeError(f"NCCL has no type for {arr.dtype.name}")
        return getattr(self.nccl, name)

    def _op(self, op):
        if op not in _OPS:
            raise RuntimeError(f"NCCL has no ReduceOp.{op.upper()}; reduce CPU tensors for "
                               f"the bitwise ops")
        return getattr(self.nccl, _OPS[op])

    def _event(self):
        import cupy
        stream = cupy.cuda.get_current_stream()
        ev = cupy.cuda.Event(block=False, disable_timing=True)
        ev.record(stream)
        return ev

    @staticmethod
    def _stream():
        import cupy
        return cupy.cuda.get_current_stream().ptr

    def all_reduce(self, arr, op):
        self.comm.allReduce(arr.data.ptr, arr.data.ptr, arr.size, self._dtype(arr),
                            self._op(op), self._stream())
        return self._event()

    def broadcast(self, arr, root):
        self.comm.bcast(arr.data.ptr, arr.size, self._dtype(arr), root, self._stream())
        return self._event()

    def all_gather(self, send, recv):
        self.comm.allGather(send.data.ptr, recv.data.ptr, send.size, self._dtype(send),
                            self._stream())
        return self._event()

    def reduce_scatter(self, send, recv, op):
        self.comm.reduceScatter(send.data.ptr, recv.data.ptr, recv.size, self._dtype(send),
                                self._op(op), self._stream())
        return self._event()

    def destroy(self):
        self.comm.destroy()
