"""MPI's non-blocking all-reduce posted and tested from compiled code, for the
blocking ``tg.distributed.all_reduce`` of a repeated call: between two processes of
one machine a reduction of a few bytes takes about as long as mpi4py's own
Python-level steps (buffer parsing, datatype look-up), which this skips.

``load(MPI)`` finds the MPI library that mpi4py loaded (in ``/proc/self/maps``), hands
its ``MPI_Iallreduce`` and ``MPI_Test`` to LLVM by name (``llvmlite``'s
``add_symbol``: the compiled code names them, so Numba's on-disk cache holds it), and
njit-compiles or loads ``post_and_test``; then it runs one reduction on
``MPI_COMM_SELF`` as a check. It returns None when anything of that fails, and for an
MPI of another family than MPICH's (whose handles are C ints and whose
``MPI_IN_PLACE`` is ``(void *) -1``, which the compiled code uses): the caller keeps
mpi4py's path. Numba is imported by ``load`` only.

``post_and_test(ptr, comm_count, type_op, polls)`` posts
``MPI_Iallreduce(MPI_IN_PLACE, ptr, count, datatype, op, comm)`` (``comm_count``
packs ``comm << 32 | count``, ``type_op`` packs ``datatype << 32 | op``: ``pack``
makes them) and tests the request up to ``polls`` times. It returns 0 once the
reduction is done, ``1 << 32 | request`` when it is still in flight (the caller wraps
the request handle for mpi4py and waits, watching for faults), ``-code`` on an MPI
error.
"""
import ctypes
import os

__all__ = ["load", "pack", "request_of", "MAX_COUNT"]

MAX_COUNT = (1 << 31) - 1       # MPI's int count
_IN_PLACE = -1                  # MPICH's MPI_IN_PLACE, (void *) -1
_STATUS_IGNORE = 1              # MPICH's MPI_STATUS_IGNORE, (MPI_Status *) 1
_VENDORS = ("MPICH", "Intel MPI", "MVAPICH", "MVAPICH2")   # the MPICH family (its ABI)
_SYMBOLS = {"tapegrad_MPI_Iallreduce": "MPI_Iallreduce", "tapegrad_MPI_Test": "MPI_Test"}
_loaded = {}


def _i32(h):
    """An MPI handle (mpi4py gives a C int as an unsigned 64-bit number) as a signed
    32-bit int."""
    return ((h & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000


def pack(comm, count, datatype, op):
    """The two packed arguments of ``post_and_test`` for mpi4py objects and a count."""
    return ((_i32(comm.handle) << 32) | count,
            (_i32(datatype.handle) << 32) | (_i32(op.handle) & 0xFFFFFFFF))


def request_of(MPI, r):
    """The mpi4py request of ``post_and_test``'s in-flight answer ``r`` (mpi4py takes
    a handle as an unsigned 64-bit number, a C int's sign extended)."""
    return MPI.Request.fromhandle(_i32(r) & 0xFFFFFFFFFFFFFFFF)


def _libmpi():
    """The path of the MPI library mapped into this process (mpi4py's), or None."""
    try:
        with open("/proc/self/maps") as fh:
            paths = [line.split(None, 5)[5].strip() for line in fh
                     if line.count(" ") >= 5 and "/libmpi" in line]
    except OSError:
        return None
    for p in paths:
        base = os.path.basename(p)
        if base.startswith(("libmpi.so", "libmpich.so")):   # not libmpi_abi, libmpifort
            return p
    return None


# ------------------------------------------------------------------ compiled code
# A module-level function (Numba caches it); its helpers are set by _build, which
# imports Numba.
_lo32 = _slot = _iallreduce = _test = None


def _post_and_test(ptr, comm_count, type_op, polls):
    comm = _lo32(comm_count >> 32)
    count = _lo32(comm_count)
    datatype = _lo32(type_op >> 32)
    op = _lo32(type_op)
    req = _slot()
    flag = _slot()
    err = _iallreduce(_IN_PLACE, ptr, count, datatype, op, comm, req)
    if err != 0:
        return -err
    for _ in range(polls):
        err = _test(req, flag, _STATUS_IGNORE)
        if err != 0:
            return -err
        if flag[0] != 0:
            return 0
    return (1 << 32) | (req[0] & 0xFFFFFFFF)


def _build():
    import llvmlite.binding as llvm
    import numba
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    i32, i64 = types.int32, types.int64
    p32 = types.CPointer(i32)

    @intrinsic
    def _slot(typingctx):
        """A zeroed int32 on the stack of the compiled function."""
        def codegen(context, builder, sig, args):
            return cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(32), 0))
        return p32(), codegen

    @intrinsic
    def _lo32(typingctx, x):
        """The low 32 bits of an int64, as a signed int32."""
        def codegen(context, builder, sig, args):
            return builder.trunc(args[0], ir.IntType(32))
        return i32(i64), codegen

    g = globals()
    g["_slot"], g["_lo32"] = _slot, _lo32
    g["_iallreduce"] = types.ExternalFunction(
        "tapegrad_MPI_Iallreduce", i32(i64, i64, i32, i32, i32, i32, p32))
    g["_test"] = types.ExternalFunction("tapegrad_MPI_Test", i32(p32, p32, i64))
    return numba.njit(cache=True, boundscheck=False)(_post_and_test), llvm


def load(MPI):
    """The compiled ``post_and_test`` for the MPI library mpi4py uses (one per
    process), or None where it cannot be used (see the module's docstring)."""
    key = "post_and_test"
    if key in _loaded:
        return _loaded[key]
    _loaded[key] = None
    try:
        if MPI.get_vendor()[0] not in _VENDORS or not hasattr(MPI.Request, "fromhandle"):
            return None
        if any(MPI._sizeof(c) != 4 for c in (MPI.Comm, MPI.Datatype, MPI.Op, MPI.Request)):
            return None
        path = _libmpi()
        if path is None:
            return None
        lib = ctypes.CDLL(path)
        addrs = {mine: ctypes.cast(getattr(lib, theirs), ctypes.c_void_p).value
                 for mine, theirs in _SYMBOLS.items()}
        fn, llvm = _build()
        for name, addr in addrs.items():
            llvm.add_symbol(name, addr)
        # a check that compiles (or loads) it: a reduction on MPI_COMM_SELF
        import numpy as np
        buf = np.array([5, 7], dtype=np.int32)
        a, b = pack(MPI.COMM_SELF, 2, MPI.INT32_T, MPI.MAX)
        r = fn(buf.ctypes.data, a, b, 1 << 20)
        if r != 0 or buf.tolist() != [5, 7]:
            return None
        # the compiled entry point of that signature, when Numba exposes it: the same
        # call without the dispatcher's look-up of the argument types
        try:
            entry = fn.overloads[fn.signatures[0]].entry_point
            if entry(buf.ctypes.data, a, b, 1 << 20) != 0:
                entry = fn
        except (AttributeError, IndexError, KeyError, TypeError):
            entry = fn
    except Exception:
        return None
    _loaded[key] = entry
    return entry
