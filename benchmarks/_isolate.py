"""Run each contender of a benchmark in its own process.

PyTorch's OpenMP threads keep spinning after each parallel region; in a shared
process they starve OpenBLAS and Numba threads (one CNN step went from 22 ms to
900 ms once torch had run beside it). So every contender gets a fresh interpreter,
with the same thread settings, and reports one JSON line back.
"""
import json
import subprocess
import sys


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
