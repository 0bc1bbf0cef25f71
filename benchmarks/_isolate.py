"""Run each contender of a benchmark in its own process.

PyTorch's OpenMP threads keep spinning after each parallel region; in a shared
process they starve OpenBLAS and Numba threads (one CNN step went from 22 ms to
900 ms once torch had run beside it). So every contender gets a fresh interpreter,
with the same thread settings, and reports one JSON line back.
"""
import json
import subprocess
import sys


def run_each(script, names, extra_args=()):
    """``{name: result}``: ``python script --one NAME`` per contender."""
    out = {}
    for name in names:
        proc = subprocess.run([sys.executable, script, "--one", name, *extra_args],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"# {name} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            out[name] = None
            continue
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def report(result):
    """Print one contender's result as the JSON line ``run_each`` reads."""
    print(json.dumps(result))
