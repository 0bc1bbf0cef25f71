"""tg.distributed on MPI (loopback, one machine): all-reduce latency and bandwidth
against mpi4py's own calls, and the DDP training step of an MLP on 2 ranks against 1.

    python benchmarks/bench_distributed.py [--ranks 2 4] [--quick] [--part ddp]
        [--ddp-ranks 1 2] [--widths 512] [--steps 30]

The driver launches ``mpiexec -n N python bench_distributed.py --worker ...`` and
prints rank 0's medians. Questions answered:

1. all_reduce (float32, SUM, in place) per message size: ``mpi4py`` (the blocking
   ``comm.Allreduce(MPI.IN_PLACE, array)``), ``tg`` (``dist.all_reduce(tensor)``, with
   its call check on: a 16-byte comparison on a side communicator before the transfer,
   made only when a call differs from the rank's previous one, so here once per size),
   and ``tg unchecked`` (the check off, as DDP's buckets run); tg's repeated calls
   post and test MPI's all-reduce from compiled code (``devices/mpi.py``). Latency is
   the median time per call; bus bandwidth is ``2 (n-1)/n * bytes / time`` (what a
   ring moves per rank).
2. DDP step time (forward, backward, Adam) of the MLP against one process on its own
   batch (the same processes, without DDP), for DDP as PyTorch's default (``.grad``
   copied back from the bucket) and with ``gradient_as_bucket_view=True``, the three
   taking turns step after step; with 1 rank the difference is DDP's own cost. The
   overlap: of the time the gradient all-reduces take on their own, how much is hidden
   behind the backward (``1 - (ddp backward - local backward) / all-reduce time``),
   and how long the backward waited for the buckets at its end (that wait also holds
   the time a rank waits for a slower one).

On this 2-vCPU VM, 4 ranks oversubscribe the cores (MPICH waits by spinning), so the
4-rank rows measure contention more than the library.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

SIZES = [1, 16, 256, 4096, 65536, 1 << 20, 1 << 22]   # float32 elements
MLP = (784, 512, 512, 10)   # bench_mlp_step.py's MLP


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


# ------------------------------------------------------------------ workers
def worker_allreduce(quick):
    import numpy as np
    from mpi4py import MPI

    import tapegrad as tg
    import tapegrad.distributed as dist
    dist.init_process_group()
    comm = MPI.COMM_WORLD
    world = dist.setup._WORLD
    crowded = world.crowded
    rows = []
    for n in SIZES:
        arr = np.ones(n, dtype=np.float32)
        t = tg.tensor(np.ones(n, dtype=np.float32))
        calls = max(5, min(2000, int(2e7 // (n * 4 + 2000)))) // (4 if quick else 1)
        if crowded:   # more ranks than cores: each call waits for the scheduler
            calls = max(3, calls // 40)
        calls_of = {}
        for name in ("mpi4py", "tg", "tg unchecked"):
            if name == "mpi4py":
                def call():
                    comm.Allreduce(MPI.IN_PLACE, arr)
            else:
                def call():
                    dist.all_reduce(t)
            calls_of[name] = call
        res = {name: [] for name in calls_of}
        for name, call in calls_of.items():   # warm-up (tg: past the repeats after
            world.checks = name != "tg unchecked"   # which its compiled path loads)
            for _ in range(3 if name == "mpi4py" else dist.collectives._NATIVE_AFTER + 3):
                call()
        # the contenders take turns, round after round: a busy neighbour slows them
        # all alike; the median round of each
        for _ in range(3 if quick or crowded else 11):
            for name, call in calls_of.items():
                world.checks = name != "tg unchecked"
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(calls):
                    call()
                res[name].append((time.perf_counter() - start) / calls)
        res = {name: _median(v) for name, v in res.items()}
        world.checks = True
        rows.append({"n": n, "bytes": 4 * n, **res})
    if dist.get_rank() == 0:
        print(json.dumps({"size": dist.get_world_size(), "rows": rows}))


def _mlp(width, depth, seed=0):
    """``depth`` hidden layers of ``width`` between 784 inputs and 10 outputs."""
    import tapegrad as tg
    import tapegrad.nn as nn
    tg.manual_seed(seed)
    layers, d = [], MLP[0]
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    layers.append(nn.Linear(d, MLP[-1]))
    return nn.Sequential(*layers)


def worker_ddp(width, depth, batch, cap, steps):
    import numpy as np

    import tapegrad as tg
    import tapegrad.distributed as dist
    import tapegrad.nn.functional as F
    from tapegrad.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(rank)
    x = tg.tensor(rng.standard_normal((batch, MLP[0])).astype(np.float32))
    y = tg.tensor(rng.integers(0, 10, batch))
    nparams = sum(p.numel() for p in _mlp(width, depth).parameters())
    # three copies of the model, taking turns step after step (a busy neighbour slows
    # them alike): without DDP, DDP as PyTorch's default (.grad copied back from the
    # bucket), DDP with gradient_as_bucket_view
    models = {"local": _mlp(width, depth),
              "ddp": DDP(_mlp(width, depth), bucket_cap_mb=cap),
              "view": DDP(_mlp(width, depth), bucket_cap_mb=cap, gradient_as_bucket_view=True)}
    opts = {k: tg.optim.Adam(m.parameters(), lr=1e-3) for k, m in models.items()}
    t = {k: {"forward": [], "backward": [], "step": [], "wait": []} for k in models}
    for i in range(steps + 3):
        for k, model in models.items():
            opt = opts[k]
            dist.barrier()
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            t1 = time.perf_counter()
            opt.zero_grad()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            if i >= 3:
                t[k]["forward"].append(t1 - t0)
                t[k]["backward"].append(t2 - t1)
                t[k]["step"].append(t3 - t0)
                if k != "local":  # the time its backward spent waiting for the buckets
                    t[k]["wait"].append(model._stats.get("wait", float("nan")))
    res = {k: {"forward": _median(v["forward"]), "backward": _median(v["backward"]),
               "backward_min": min(v["backward"]), "forward_min": min(v["forward"]),
               "step": _median(v["step"]),
               "wait": _median(v["wait"]) if v["wait"] else 0.0}
           for k, v in t.items()}
    ddp = models["ddp"]
    stats = dict(ddp._stats)
    # the same all-reduces alone: one per bucket, back to back, waited at the end
    flats = [tg.tensor(b.flat.copy()) for b in ddp._buckets]
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.all_reduce(f, async_op=True) for f in flats]
        for w in works:
            w.wait()
        times.append(time.perf_counter() - t0)
    comm = _median(times)
    if rank == 0:
        print(json.dumps({"size": size, "params": nparams, "width": width, "depth": depth,
                          "batch": batch, "cap_mb": cap, **res,
                          "allreduce_alone": comm, "stats": stats}))


# ------------------------------------------------------------------ driver
def _launch(n, args, timeout=900):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [mpiexec, "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        print(f"# {' '.join(cmd)} failed:\n{p.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def _fmt_t(s):
    return f"{s * 1e6:9.1f} us" if s < 1e-2 else f"{s * 1e3:9.2f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=("all", "allreduce", "ddp"), default="all")
    ap.add_argument("--ddp-ranks", type=int, nargs="+", default=[1, 2],
                    help="the DDP table's world sizes")
    ap.add_argument("--widths", type=int, nargs="+", help="only these MLP widths (512, 2048)")
    ap.add_argument("--steps", type=int, help="DDP steps measured (default 30, 10 --quick)")
    ap.add_argument("--worker", nargs="*")
    args = ap.parse_args()
    if args.worker is not None:
        kind, *rest = args.worker
        if kind == "allreduce":
            return worker_allreduce(args.quick)
        return worker_ddp(int(rest[0]), int(rest[1]), int(rest[2]), float(rest[3]),
                          int(rest[4]))

    if args.part in ("all", "allreduce"):
        allreduce_tables(args)
    if args.part in ("all", "ddp"):
        ddp_table(args)


def allreduce_tables(args):
    print("## all_reduce, float32 SUM in place, loopback (median time per call)\n")
    for n in args.ranks:
        r = _launch(n, ["allreduce"] + (["--quick"] if args.quick else []))
        if r is None:
            continue
        print(f"### {n} ranks\n")
        print("| bytes | mpi4py | tg | tg unchecked | tg / mpi4py | unchecked / mpi4py "
              "| busbw mpi4py | busbw tg |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for row in r["rows"]:
            f = 2 * (n - 1) / n * row["bytes"]
            print(f"| {row['bytes']} | {_fmt_t(row['mpi4py'])} | {_fmt_t(row['tg'])} | "
                  f"{_fmt_t(row['tg unchecked'])} | {row['tg'] / row['mpi4py']:.2f} | "
                  f"{row['tg unchecked'] / row['mpi4py']:.2f} | "
                  f"{f / row['mpi4py'] / 1e9:.2f} GB/s | {f / row['tg'] / 1e9:.2f} GB/s |")
        print()


def ddp_table(args):
    print("## DDP training step (forward, backward, Adam), medians\n")
    steps = args.steps or (10 if args.quick else 30)
    # bench_mlp_step's MLP (784-512-512-10, batch 128 per rank): one 25 MB bucket, or
    # 1 MB buckets; and a wider one (784-2048x3-10, 9.9M parameters, 40 MB)
    configs = [(512, 2, 128, 25.0), (512, 2, 128, 1.0), (2048, 3, 128, 25.0),
               (2048, 3, 128, 4.0)]
    configs = [c for c in configs if args.widths is None or c[0] in args.widths]
    print("| model | ranks | buckets | local step | DDP step | view step | local backward "
          "| DDP backward | view backward | min local / DDP / view forward "
          "| min local / DDP / view backward "
          "| all-reduces alone | waited at the end DDP / view | hidden DDP / view "
          "| started during backward |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: |")
    for width, depth, batch, cap in configs:
        for n in args.ddp_ranks:
            r = _launch(n, ["ddp", str(width), str(depth), str(batch), str(cap), str(steps)])
            if r is None:
                continue
            loc, ddp, view, comm = r["local"], r["ddp"], r["view"], r["allreduce_alone"]

            def hidden(d):
                return f"{1 - (d['backward'] - loc['backward']) / comm:.0%}" if comm > 0 \
                    else "-"
            st = r["stats"]
            print(f"| 784-{width}x{depth}-10 ({r['params']} params), batch {batch}/rank, "
                  f"cap {cap} MB | {n} | {st['buckets']} | {_fmt_t(loc['step'])} | "
                  f"{_fmt_t(ddp['step'])} | {_fmt_t(view['step'])} | "
                  f"{_fmt_t(loc['backward'])} | {_fmt_t(ddp['backward'])} | "
                  f"{_fmt_t(view['backward'])} | {_fmt_t(loc['forward_min'])} / "
                  f"{_fmt_t(ddp['forward_min'])} / {_fmt_t(view['forward_min'])} | "
                  f"{_fmt_t(loc['backward_min'])} / "
                  f"{_fmt_t(ddp['backward_min'])} / {_fmt_t(view['backward_min'])} | "
                  f"{_fmt_t(comm)} | {_fmt_t(ddp['wait'])} / {_fmt_t(view['wait'])} | "
                  f"{hidden(ddp)} / {hidden(view)} | "
                  f"{st['started_during_backward']}/{st['buckets']} |")
    print()


if __name__ == "__main__":
    main()
