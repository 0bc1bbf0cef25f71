"""A single-threaded process that runs each tg.load it is asked for in a forked child,
under an address-space limit (RLIMIT_AS, a budget above what the child starts with) and
a watchdog. test_load_hostile starts one per test worker: forking the test worker
itself inherits whatever locks its other threads (BLAS, Numba, JAX, data loaders) held
at that moment, and a child that needs one of them hangs; this process runs no threads.

One request per line on stdin, JSON: {"path", "count_reads", "setup": [name, arg] or
null, "budget", "watchdog_s"}. One answer per line on stdout, JSON: [exception class
name or "ok", message, bytes read or -1]; "watchdog" when the child gave no answer in
time, "died" when it left without one."""
import json
import os
import select
import signal
import sys

import tapegrad as tg
from tapegrad import serialization


class _CountingFile:
    """A binary file that counts the bytes read through it."""

    def __init__(self, path):
        self.f = open(path, "rb")
        self.name = str(path)
        self.bytes_read = 0

    def read(self, n=-1):
        data = self.f.read(n)
        self.bytes_read += len(data)
        return data

    def seek(self, *args):
        return self.f.seek(*args)

    def tell(self):
        return self.f.tell()

    def seekable(self):
        return True


def _allocate(n):
    # new address space, as a large array's buffer takes when the heap has no free block
    import mmap
    try:
        mmap.mmap(-1, n)
    except OSError as e:
        raise MemoryError(str(e)) from None


def _max_arrays(n):
    serialization._MAX_ARRAYS = n


SETUPS = {"allocate": _allocate, "int_max_str_digits": lambda n: sys.set_int_max_str_digits(n),
          "max_arrays": _max_arrays}


def _child(req):
    import resource
    vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS,
                       (vm + req["budget"], resource.getrlimit(resource.RLIMIT_AS)[1]))
    f = _CountingFile(req["path"]) if req["count_reads"] else req["path"]
    try:
        if req["setup"]:
            name, arg = req["setup"]
            SETUPS[name](arg)
        tg.load(f)
        kind, msg = "ok", ""
    except BaseException as e:   # reported to the parent, whatever it is
        kind, msg = type(e).__name__, str(e)[:2000]
    return [kind, msg, f.bytes_read if req["count_reads"] else -1]


def _run(req):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child
        try:
            os.close(r)
            os.write(w, json.dumps(_child(req)).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        if not select.select([r], [], [], req["watchdog_s"])[0]:
            os.kill(pid, signal.SIGKILL)
            return ["watchdog", f"no answer in {req['watchdog_s']} s", -1]
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        return json.loads(data) if data else ["died", "", -1]
    finally:
        os.close(r)
        os.waitpid(pid, 0)


def main():
    for line in sys.stdin:
        sys.stdout.write(json.dumps(_run(json.loads(line))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
