"""Train a small CNN (or MLP) on scikit-learn's bundled 8x8 handwritten digits.

    python -m tapegrad.examples.digits [--model cnn|mlp] [--epochs N] [--out DIR]
        [--device cpu|cuda] [--data digits.npz] [--amp bf16|fp16]
    mpiexec -n 2 python -m tapegrad.examples.digits --distributed

With ``--distributed`` (under ``mpiexec -n N``) each process trains on its share of
every batch (``tg.data.DistributedSampler``, ``--batch-size`` is the global batch) and
``DistributedDataParallel`` averages the gradients, so the training is that of one
process on the same batches; rank 0 shows the progress and writes the outputs.

Shows a progress bar with the running loss, saves a checkpoint and checks that the
reloaded model predicts identically, writes ``curves.png`` (loss and accuracy per
epoch) and ``misclassified.png`` into ``--out``, and ends by printing
``test accuracy: 0.XXX``. The data ship with scikit-learn: nothing is downloaded
(``--data`` reads the same digits from an ``.npz`` with ``data`` and ``target``, as
``benchmarks/data/digits.npz``, where scikit-learn is not installed). ``--device cuda``
trains on the GPU (CuPy); the progress bar (tqdm) and the plots (matplotlib) are
skipped, with a note, where those packages are missing.

With ``--amp bf16`` (or ``fp16``) the forward and the loss run under ``tg.autocast``
in that dtype while the weights, their gradients and Adam's state stay float32 (the
master weights); ``fp16`` also scales the loss with ``tg.amp.GradScaler``. A float32
run of the same model on the same batches comes first, and the demo prints both runs'
accuracy and time per step.
"""
import argparse
import os
import time

import numpy as np

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F


def load_data(seed=0, test_fraction=0.2, path=None):
    """Digits as float32 in [0, 1]: (x_train, y_train, x_test, y_test), a seeded split;
    from scikit-learn, or from the ``.npz`` at ``path`` (``data``, ``target``)."""
    if path is not None:
        with np.load(path) as f:
            data, target = f["data"], f["target"]
    else:
        from sklearn.datasets import load_digits
        digits = load_digits()
        data, target = digits.data, digits.target
    x = (data / 16.0).astype(np.float32)
    y = target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                             nn.Linear(64, 10))
    if kind == "cnn":
        if not hasattr(tg.ops, "conv2d") or not hasattr(tg.ops, "max_pool2d"):
            raise SystemExit("the CNN needs tapegrad.ops.conv2d and max_pool2d; use --model mlp")
        return nn.Sequential(
            nn.Unflatten(1, (1, 8, 8)),
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),     # 32 x 4 x 4
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 64 x 2 x 2
            nn.Flatten(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"unknown model {kind!r}: choose cnn or mlp")


AMP = {"bf16": tg.bfloat16, "fp16": tg.float16}


def _autocast(device, amp):
    """``tg.autocast`` for ``device`` in ``amp``'s dtype (``None``: autocast off)."""
    return tg.autocast(tg.device(device).type, dtype=AMP.get(amp), enabled=amp is not None)


@tg.no_grad()
def predict(model, x, batch_size=512, device="cpu", amp=None):
    model.eval()
    with _autocast(device, amp):
        out = [model(tg.tensor(x[i:i + batch_size], device=device)).float().cpu().numpy()
               for i in range(0, len(x), batch_size)]
    return np.concatenate(out)


def make_step(model, opt, amp=None, scaler=None, device="cpu"):
    """One training step: forward, cross-entropy, backward, Adam update. ``amp``: the
    forward and the loss under ``tg.autocast`` in that dtype; ``scaler``: a
    ``tg.amp.GradScaler`` scaling the loss (float16)."""
    def step(xb, yb):
        with _autocast(device, amp):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss
    return step


def _progress(total, disable):
    try:
        from tqdm import tqdm
    except ImportError:  # no progress bar without tqdm
        class tqdm:
            def __init__(self, *a, **k):
                pass

            def __getattr__(self, name):
                return lambda *a, **k: None
    return tqdm(total=total, disable=disable, unit="batch", dynamic_ncols=True)


def train(model, data, epochs, batch_size, lr, progress=True, distributed=False,
          compiled=False, device="cpu", amp=None):
    """Adam with a cosine schedule; returns per-epoch (train loss, test accuracy).

    ``distributed``: ``model`` is a DistributedDataParallel; each rank takes
    ``batch_size / world size`` of every batch (rounded, when it does not divide)
    through a DistributedSampler.
    ``compiled``: the model runs as ``tg.compile(model)``, the backward and the update
    outside it (its forward and backward programs captured once per batch shape,
    replayed after). ``device``: where the batches go (the model is there). ``amp``:
    ``"bf16"`` or ``"fp16"`` (with a GradScaler), as ``make_step``."""
    x_train, y_train, x_test, y_test = data
    dataset = tg.data.TensorDataset(x_train, y_train)
    sampler = None
    if distributed:
        world = tg.distributed.get_world_size()
        per_rank = max(1, round(batch_size / world))
        if per_rank * world != batch_size and tg.distributed.get_rank() == 0:
            print(f"--batch-size {batch_size} does not split over {world} processes: "
                  f"{per_rank} each, a global batch of {per_rank * world}")
        sampler = tg.data.DistributedSampler(len(dataset), shuffle=True, seed=0)
        loader = tg.data.DataLoader(dataset, batch_size=per_rank, sampler=sampler)
    else:
        loader = tg.data.DataLoader(dataset, batch_size=batch_size, shuffle=True)
    opt = tg.optim.Adam(model.parameters(), lr=lr)
    sched = tg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    history = {"loss": [], "accuracy": [], "step_seconds": 0.0, "steps": 0, "step_times": []}
    scaler = tg.amp.GradScaler(tg.device(device).type) if amp == "fp16" else None
    step = make_step(model, opt, amp, scaler, device)
    if compiled:
        cmodel = tg.compile(model)
        step = make_step(cmodel, opt)
        history["compiled"] = cmodel
    bar = _progress(epochs * len(loader), not progress)
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        total, count = 0.0, 0
        for xb, yb in loader:
            if device != "cpu":
                xb, yb = xb.to(device), yb.to(device)
            t0 = time.perf_counter()
            loss = step(xb, yb)
            dt = time.perf_counter() - t0
            history["step_times"].append(dt)
            captures = history["compiled"].stats()["captures"] if compiled else 0
            if captures != history.get("captures", 0):   # this call captured a program
                history["capture_seconds"] = history.get("capture_seconds", 0.0) + dt
                history["captures"] = captures
            else:  # (eager steps, or the compiled step's replays)
                history["step_seconds"] += dt
                history["steps"] += 1
            total += loss.item() * len(yb)
            count += len(yb)
            bar.set_description(f"epoch {epoch + 1}/{epochs}")
            bar.set_postfix(loss=f"{total / count:.4f}", refresh=False)
            bar.update()
        sched.step()
        acc = float(np.mean(predict(model, x_test, device=device, amp=amp).argmax(1) == y_test))
        history["loss"].append(total / count)
        history["accuracy"].append(acc)
        bar.set_postfix(loss=f"{total / count:.4f}", test_acc=f"{acc:.3f}")
    bar.close()
    return opt, history


def check_checkpoint(model, opt, kind, path, x_test, device="cpu"):
    """Save model and optimizer, reload into a fresh model, compare predictions."""
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "model_kind": kind},
            path)
    ckpt = tg.load(path)
    fresh = make_model(ckpt["model_kind"]).to(device)
    fresh.load_state_dict(ckpt["model"])
    same = np.array_equal(predict(model, x_test, device=device),
                          predict(fresh, x_test, device=device))
    if not same:
        raise SystemExit(f"checkpoint {path}: reloaded model predicts differently")
    return same


def plot(history, x_test, y_test, pred, out):
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plots")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    epochs = np.arange(1, len(history["loss"]) + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    a.plot(epochs, history["loss"], marker="o")
    a.set(xlabel="epoch", ylabel="train loss (cross-entropy)", title="loss")
    b.plot(epochs, history["accuracy"], marker="o", color="tab:green")
    b.set(xlabel="epoch", ylabel="test accuracy", title="accuracy")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=100)
    plt.close(fig)

    wrong = np.flatnonzero(pred != y_test)[:36]
    cols = 6
    rows = max(1, int(np.ceil(len(wrong) / cols)))
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.3, rows * 1.5 + 0.4), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, i in zip(axes.flat, wrong):
        ax.imshow(x_test[i].reshape(8, 8), cmap="gray_r")
        ax.set_title(f"{y_test[i]} -> {pred[i]}", fontsize=9, color="tab:red")
    fig.suptitle(f"misclassified test digits (true -> predicted): {int(np.sum(pred != y_test))}"
                 if len(wrong) else "no misclassified test digits", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "misclassified.png"), dpi=100)
    plt.close(fig)


def _blas_threads(n):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:   # comes with scikit-learn; without it, leave BLAS as it is
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas") if n > 0 else threadpool_limits(None)


def _report_speedup(kind, data, batch_size, history, steps=30):
    """Eager steps of a copy of the model on the same batches: the compiled step's
    speed-up (the compiled time includes its captures)."""
    model = make_model(kind)
    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    step = make_step(model, opt)
    x, y = data[0], data[1]
    batches = [(tg.tensor(x[i:i + batch_size]), tg.tensor(y[i:i + batch_size]))
               for i in range(0, steps * batch_size, batch_size) if i + batch_size <= len(x)]
    step(*batches[0])
    t0 = time.perf_counter()
    for xb, yb in batches:
        step(xb, yb)
    eager = (time.perf_counter() - t0) / len(batches)
    comp = history["step_seconds"] / max(history["steps"], 1)
    stats = history["compiled"].stats()
    print(f"tg.compile: {comp * 1e3:.2f} ms per replayed step ({stats['replays']} replays, "
          f"{stats['kernels']} kernels and {stats['fused_groups']} fused groups per replay; "
          f"{stats['captures']} captures took {history.get('capture_seconds', 0.0):.2f} s), "
          f"{eager * 1e3:.2f} ms/step eager: speed-up {eager / comp:.2f}x")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    p.add_argument("--epochs", type=int, default=None,
                   help="default: 15 for the CNN, 30 for the MLP")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs", help="folder for checkpoint and plots")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads while training (default 1: these matrices are too "
                        "small to gain from more, and extra threads hurt on a busy machine)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel over the processes of mpiexec -n N (MPI)")
    p.add_argument("--compile", action="store_true",
                   help="train with model = tg.compile(model) and print its speed-up over "
                        "eager")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the GPU, through CuPy)")
    p.add_argument("--data", default=None,
                   help="an .npz with the digits (data, target) instead of scikit-learn's")
    p.add_argument("--amp", choices=tuple(AMP), default=None,
                   help="train under tg.autocast in bfloat16 or float16 (with a GradScaler), "
                        "float32 master weights, after a float32 run to compare with")
    args = p.parse_args(argv)
    epochs = args.epochs or (15 if args.model == "cnn" else 30)
    lr = args.lr or (3e-3 if args.model == "cnn" else 3e-3)
    rank, world = 0, 1
    if args.distributed:
        tg.distributed.init_process_group(backend="mpi")
        rank, world = tg.distributed.get_rank(), tg.distributed.get_world_size()
    lead = rank == 0
    if lead:
        os.makedirs(args.out, exist_ok=True)

    device = str(tg.device(args.device))
    if device != "cpu":
        if not tg.cuda.is_available():
            raise SystemExit(f"--device {args.device}: CUDA is not available (it needs CuPy "
                             f"and an NVIDIA GPU: pip install 'tapegrad[cuda12]' or "
                             f"'tapegrad[cuda13]')")
        if args.distributed or args.compile:
            raise SystemExit("--device cuda trains in one eager process here: drop "
                             "--distributed and --compile")
    if args.amp and (args.distributed or args.compile):
        raise SystemExit("--amp trains in one eager process here: drop --distributed and "
                         "--compile")
    tg.manual_seed(args.seed)
    data = load_data(args.seed, path=args.data)
    net = make_model(args.model).to(device)
    if lead:
        print(net if world == 1 else f"{net}\non {world} processes (DistributedDataParallel)")
    model = tg.nn.parallel.DistributedDataParallel(net) if args.distributed else net
    x_test, y_test = data[2], data[3]
    with _blas_threads(args.blas_threads):
        if args.amp:  # the float32 run to compare with: the same initial weights and batches
            ref = make_model(args.model).to(device)
            ref.load_state_dict(net.state_dict())
            tg.manual_seed(args.seed + 1)
            _, ref_history = train(ref, data, epochs, args.batch_size, lr,
                                   progress=not args.no_progress, device=device)
            ref_acc = float(np.mean(predict(ref, x_test, device=device).argmax(1) == y_test))
            tg.manual_seed(args.seed + 1)
        start = time.perf_counter()
        opt, history = train(model, data, epochs, args.batch_size, lr,
                             progress=lead and not args.no_progress,
                             distributed=args.distributed, compiled=args.compile,
                             device=device, amp=args.amp)
        seconds = time.perf_counter() - start
        if args.compile and lead:
            _report_speedup(args.model, data, args.batch_size, history)
    if args.distributed:
        tg.distributed.barrier()
    if not lead:
        return None
    ckpt = os.path.join(args.out, f"digits_{args.model}.tg")
    check_checkpoint(net, opt, args.model, ckpt, x_test, device)
    print(f"checkpoint {ckpt}: reloaded model gives identical predictions")
    pred = predict(net, x_test, device=device, amp=args.amp).argmax(1)
    plot(history, x_test, y_test, pred, args.out)
    print(f"trained {epochs} epochs in {seconds:.1f} s"
          + (f" on {world} processes" if world > 1 else "") + f" on {device}"
          + (f" under tg.autocast({AMP[args.amp]})" if args.amp else "")
          + f"; plots in {args.out}/")
    acc = float(np.mean(pred == y_test))
    if args.amp:
        # the median step: the first steps' kernel compilations left out
        ms, ref_ms = (float(np.median(h["step_times"])) * 1e3 for h in (history, ref_history))
        print(f"float32: test accuracy {ref_acc:.3f}, {ref_ms:.2f} ms per step; "
              f"--amp {args.amp}: test accuracy {acc:.3f} ({(acc - ref_acc) * 100:+.1f} points), "
              f"{ms:.2f} ms per step ({ref_ms / ms:.2f}x the float32 speed)")
    print(f"test accuracy: {acc:.3f}")
    return acc


if __name__ == "__main__":
    main()
