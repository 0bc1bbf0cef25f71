"""Run each contender of a benchmark in its own process.

PyTorch's OpenMP threads keep spinning after each parallel region; in a shared
process they starve OpenBLAS and Numba threads (one CNN step went from 22 ms to
900 ms once torch had run beside it). So every contender gets a fresh interpreter,
with the same thread settings, and reports one JSON line back (``run_each``), or
serves timing rounds through a pipe for as long as its parent asks (``Workers`` and
``serve``), so contenders in different processes still take turns round by round.
"""
import json
import os
import subprocess
import sys
import time


def run_each(script, names, extra_args=(), repeats=1, key=None):
    """``{name: result}``: ``python script --one NAME`` per contender.

    With ``repeats`` > 1 the contenders take turns, each in a fresh process every
    time, and the run with the smallest ``result[key]`` is kept: on a shared VM the
    same process lands on a fast or a slow core (we saw 7 vs 13 us for one
    benchmark), so the best of several fresh processes is the stable figure.
    """
    out = {name: None for name in names}
    for _ in range(repeats):
        for name in names:
            proc = subprocess.run([sys.executable, script, "--one", name, *extra_args],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"# {name} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            if out[name] is None or (key is not None and r[key] < out[name][key]):
                out[name] = r
    return out


def report(result):
    """Print one contender's result as the JSON line ``run_each`` reads."""
    print(json.dumps(result))


def serve(handle):
    """A child process's loop for ``Workers``: each line read from stdin is a command,
    answered with one JSON line ``{"result": handle(command), "log": printed}``
    (what ``handle`` printed travels in ``log``; the parent prints it in order).
    Native libraries' own writes to stdout go to stderr, off the answers' channel."""
    import io
    import traceback
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        sys.stdout = log = io.StringIO()
        try:
            msg = {"result": handle(cmd)}
        except Exception:
            msg = {"error": traceback.format_exc()}
        finally:
            sys.stdout = sys.__stdout__
        msg["log"] = log.getvalue()
        answers.write(json.dumps(msg) + "\n")
        answers.flush()


class Workers:
    """Child processes ``python script *args`` (one per key) running ``serve``,
    asked in turn: one works while the others wait on their pipes, so contenders in
    different processes still take turns round by round. ``pause`` seconds pass
    between one process's answer and the next question: OpenBLAS and OpenMP threads
    keep spinning a while after their work (OpenBLAS's for about 2**28 cycles), and
    would otherwise still hold cores when the next process starts timing."""

    def __init__(self, script, argv, pause=0.1):
        self.pause = pause
        self.procs = {key: subprocess.Popen([sys.executable, script, *args], text=True,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                      for key, args in argv.items()}

    def ask_each(self, cmd, only=None):
        """``{key: result}``, each process asked ``cmd`` in turn and its log printed; a
        process that fails is reported on stderr and dropped."""
        out = {}
        for key, proc in list(self.procs.items()):
            if only is not None and key not in only:
                continue
            line = ""
            time.sleep(self.pause)
            try:
                proc.stdin.write(cmd + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                pass
            msg = json.loads(line) if line else {"error": "the process ended", "log": ""}
            print(msg["log"], end="")
            if "error" in msg:
                print(f"# {key} process failed on {cmd!r}:\n{msg['error'][-2000:]}",
                      file=sys.stderr)
                self._end(key)
                continue
            out[key] = msg["result"]
        return out

    def _end(self, key):
        proc = self.procs.pop(key)
        try:
            proc.stdin.write("quit\n")
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self):
        for key in list(self.procs):
            self._end(key)
