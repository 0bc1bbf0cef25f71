"""Every registry op against PyTorch on medium inputs, forward and forward+backward, in
one run.

Inputs: each op's first float32 sample, its arrays scaled up (every dim above 1 times
the same factor) until the largest has about ``--elements`` elements (1M by default;
a 2-D matmul operand is then about 600x600), with the op's attributes unchanged; an op
whose scaled call fails in either library falls back to its sample as declared
(marked ``small``). PyTorch runs the op's registry oracle (``op.torch``) on the same
arrays; ops without one are listed as ``no torch``. Backward: the sum of the float
outputs, backward to every float input (ops that are differentiable).

Medians of ``--reps`` runs (after one warm-up), the two libraries interleaved; BLAS and
PyTorch on one thread. Ratio = tapegrad / PyTorch; ops over 2x are flagged ``SLOW``.

    python benchmarks/bench_ops.py [--filter SUBSTRING] [--start OP] [--quick]
                                   [--elements N] [--reps N]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SKIP = {"empty", "empty_like"}  # nothing computed


def _scaled(args, factor):
    out = []
    for a in args:
        if isinstance(a, np.ndarray) and a.ndim:
            shape = tuple(s * factor if s > 1 else s for s in a.shape)
            reps = tuple(-(-t // s) if s else 1 for t, s in zip(shape, a.shape))
            big = np.tile(a, reps)[tuple(slice(0, t) for t in shape)]
            out.append(np.ascontiguousarray(big))
        else:
            out.append(a)
    return out


def _factor(args, elements):
    arrays = [a for a in args if isinstance(a, np.ndarray) and a.ndim and a.size]
    if not arrays:
        return 1
    big = max(arrays, key=lambda a: a.size)
    grow = sum(1 for s in big.shape if s > 1)
    if not grow:
        return 1
    return max(1, int((elements / big.size) ** (1.0 / grow)))


def _out_growth(op, sample, tg, bind):
    """(output elements at the sample's size, their growth exponent in the scale
    factor), from running the op at factors 1 and 2 (None if either fails)."""
    def count(factor):
        args = [tg.tensor(a) if isinstance(a, np.ndarray) else a
                for a in _scaled(sample.args, factor)]
        outs = _outs(bind(op, *args, **sample.attrs))
        return sum(int(np.prod(o.shape)) for o in outs if hasattr(o, "shape"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n1, n2 = count(1), count(2)
    except Exception:  # noqa: BLE001
        return None
    if n1 <= 0 or n2 <= 0:
        return None
    return n1, max(0.0, np.log2(n2 / n1))


def _outs(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _median_ms(fns, reps):
    """Medians (ms) of each of ``fns``, run interleaved ``reps`` times after a warm-up."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(reps):
        for k, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e3 for t in times]


def _calls(op, args, attrs, tg, torch, bind):
    """(tapegrad forward, torch forward, tapegrad fwd+bwd, torch fwd+bwd) callables."""
    def tg_in(grad):
        return [tg.tensor(a, requires_grad=grad and a.dtype.kind == "f")
                if isinstance(a, np.ndarray) else a for a in args]

    def th_in(grad):
        return [torch.from_numpy(a.copy()).requires_grad_(grad and a.dtype.kind == "f")
                if isinstance(a, np.ndarray) else a for a in args]

    def tg_fwd():
        ins = tg_in(False)
        return lambda: bind(op, *ins, **attrs)

    def th_fwd():
        ins = th_in(False)

        def run():
            with torch.no_grad():
                return op.torch(torch, *ins, **attrs)
        return run

    def loss_tg(outs):
        fl = [o for o in _outs(outs) if isinstance(o, tg.Tensor) and o.requires_grad]
        total = None
        for o in fl:
            s = o.sum()
            total = s if total is None else total + s
        return total

    def tg_bwd():
        ins = tg_in(True)

        def run():
            loss = loss_tg(bind(op, *ins, **attrs))
            if loss is not None:
                loss.backward()
        return run

    def th_bwd():
        ins = th_in(True)

        def run():
            fl = [o for o in _outs(op.torch(torch, *ins, **attrs))
                  if isinstance(o, torch.Tensor) and o.requires_grad]
            if fl:
                sum(o.sum() for o in fl).backward()
        return run
    return tg_fwd(), th_fwd(), tg_bwd(), th_bwd()


def _works(f):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f()
        return True
    except Exception:  # noqa: BLE001 (a scaled call the op refuses: fall back)
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--filter", default="", help="only ops whose name contains this")
    p.add_argument("--quick", action="store_true", help="64K elements, 3 reps")
    p.add_argument("--start", default="", help="skip the ops registered before this one")
    p.add_argument("--elements", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    a = p.parse_args(argv)
    elements = a.elements or (65_536 if a.quick else 1_000_000)
    reps = a.reps or (3 if a.quick else 7)

    import threadpoolctl
    import torch

    import tapegrad as tg
    from tapegrad.dispatch import bind
    threadpoolctl.threadpool_limits(1)
    torch.set_num_threads(1)
    np.seterr(all="ignore")
    warnings.simplefilter("ignore")

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"bench_ops: {elements} elements, {reps} reps, float32, 1 thread each; "
          f"load {load:.2f}")
    print(f"{'op':28s} {'shape':>16s} {'fwd tg':>9s} {'fwd torch':>9s} {'ratio':>6s}  "
          f"{'f+b tg':>9s} {'f+b torch':>9s} {'ratio':>6s}")
    flagged, rows = [], 0
    started = not a.start
    for op in tg.ops_registry.list_ops():
        started = started or op.name == a.start
        if not started or a.filter not in op.name or op.name in SKIP:
            continue
        samples = op.samples(np.float32) if op.samples else []
        sample = next((s for s in samples if any(isinstance(x, np.ndarray) and x.size
                                                  for x in s.args)),
                      samples[0] if samples else None)
        if sample is None:
            continue
        if op.torch is None:
            print(f"{op.name:28s} {'':>16s} no torch oracle")
            continue
        note = ""
        f = _factor(sample.args, elements)
        grow = _out_growth(op, sample, tg, bind)  # outputs that outgrow the input
        if grow is not None:
            out1, expo = grow
            while f > 1 and out1 * f ** expo > 4 * elements:
                f = max(1, int(f / 1.5))
        for factor in dict.fromkeys((f, max(1, f // 4), 1)):
            args = _scaled(sample.args, factor)
            fw = _calls(op, args, dict(sample.attrs), tg, torch, bind)
            if _works(fw[0]) and _works(fw[1]):
                break
        else:
            print(f"{op.name:28s} {'':>16s} sample fails: skipped")
            continue
        if factor == 1 and f > 1:
            note = " small"
        arrays = [x for x in args if isinstance(x, np.ndarray)]
        shape = "x".join(map(str, max(arrays, key=lambda x: x.size).shape)) if arrays else "-"
        t_tg, t_th = _median_ms(fw[:2], reps)
        line = f"{op.name:28s} {shape:>16s} {t_tg:9.3f} {t_th:9.3f} {t_tg / t_th:6.2f}"
        slow = t_tg / t_th > 2
        grad = op.differentiable and sample.grad and any(
            isinstance(x, np.ndarray) and x.dtype.kind == "f" for x in args)
        if grad and _works(fw[2]) and _works(fw[3]):
            b_tg, b_th = _median_ms(fw[2:], reps)
            line += f"  {b_tg:9.3f} {b_th:9.3f} {b_tg / b_th:6.2f}"
            slow = slow or b_tg / b_th > 2
        else:
            line += f"  {'':>9s} {'':>9s} {'-':>6s}"
        if slow:
            line += "  SLOW"
            flagged.append(op.name)
        print(line + note)
        rows += 1
    print(f"\n{rows} ops timed; over 2x PyTorch ({len(flagged)}): {' '.join(flagged)}")


if __name__ == "__main__":
    main()
