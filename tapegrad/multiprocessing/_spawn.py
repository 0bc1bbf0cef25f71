"""``torch.multiprocessing.spawn``: ``nprocs`` processes running ``fn(i, *args)``."""
import multiprocessing
import traceback

__all__ = ["spawn", "start_processes", "ProcessContext", "ProcessRaisedException",
           "ProcessExitedException"]


class ProcessRaisedException(Exception):
    """A spawned process raised: its traceback is the message."""

    def __init__(self, msg, error_index, error_pid):
        super().__init__(msg)
        self.error_index = error_index
        self.pid = error_pid


class ProcessExitedException(Exception):
    """A spawned process exited with a non-zero code (a signal, ``os._exit``)."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg)
        self.error_index = error_index
        self.pid = error_pid
        self.exit_code = exit_code
        self.signal_name = signal_name


def _wrap(fn, i, args, error_queue):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        error_queue.put(traceback.format_exc())
        raise SystemExit(1)


class ProcessContext:
    """The processes ``spawn`` started (``join()`` waits for them, raising the first
    failure: the others are terminated)."""

    def __init__(self, processes, error_queues):
        self.processes = processes
        self.error_queues = error_queues

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None):
        """True when every process has finished; raises a failed one's error."""
        for i, p in enumerate(self.processes):
            p.join(timeout)
            if p.exitcode is None:
                return False
            if p.exitcode != 0:
                for q in self.processes:
                    if q.is_alive():
                        q.terminate()
                        q.join()
                if not self.error_queues[i].empty():
                    msg = self.error_queues[i].get()
                    raise ProcessRaisedException(
                        f"\n\n-- Process {i} terminated with the following error:\n{msg}",
                        i, p.pid)
                raise ProcessExitedException(f"process {i} terminated with exit code "
                                             f"{p.exitcode}", i, p.pid, p.exitcode)
        return True


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    ctx = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        q = ctx.SimpleQueue()
        p = ctx.Process(target=_wrap, args=(fn, i, args, q), daemon=daemon)
        p.start()
        processes.append(p)
        queues.append(q)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start ``nprocs`` processes running ``fn(i, *args)`` (``i`` the process index),
    as PyTorch's: with ``join``, wait for all of them and raise the first failure;
    else return their ``ProcessContext``."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
