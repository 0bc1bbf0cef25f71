"""Train a small character-level language model on the help texts that ship with
Python (``pydoc_data.topics``, ~465K characters of English; nothing is downloaded).

    python -m tapegrad.examples.charlm [--model transformer|lstm] [--steps N] [--out DIR]
                                       [--compile] [--amp bf16|fp16]

A causal Transformer (default: 2 pre-norm layers, d_model 128, 4 heads, context
64) or an LSTM (``--model lstm``: 1 layer, hidden 256) learns to predict the next
character on the first 90% of the text and is measured on the last 10%. AdamW with
OneCycleLR, gradient clipping at norm 1, a progress bar with the running loss;
validation loss, perplexity and bits per character as it goes. At the end: a
checkpoint saved and reloaded (the reloaded model must give identical predictions),
``curves.png`` (training and validation loss, in bits per character) in ``--out``,
a few lines of text sampled from the model, and the last line
``val bits-per-char: X.XXX``.

``--export model.onnx`` also writes the trained model as ONNX (``tg.onnx.export``,
a dynamic batch; the LSTM: any sequence length, its state as inputs and outputs;
the Transformer: the full context, which a shorter text fills on the right, as the
causal mask keeps the later positions from the earlier ones) and samples the same
prompt with onnxruntime: the text must be the one the model sampled.

With ``--compile`` the model trains as ``tg.compile(model)`` (the backward, clipping
and AdamW outside) and the demo prints the mean step time against eager steps of a
copy.

With ``--amp bf16`` (or ``fp16``) the forward and the loss run under ``tg.autocast``
in that dtype while the weights, their gradients and AdamW's state stay float32 (the
master weights); ``fp16`` also scales the loss with ``tg.amp.GradScaler``. A float32
run of the same model on the same batches comes first, and the demo prints both runs'
validation bits per character and time per step.
"""
import argparse
import math
import os
import time

import numpy as np

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

LN2 = math.log(2.0)
# per model: training steps, context, batch and peak learning rate (the defaults)
DEFAULTS = {"transformer": dict(steps=400, seq_len=64, batch_size=64, lr=4e-3),
            "lstm": dict(steps=500, seq_len=64, batch_size=32, lr=1e-2)}


# ---------------------------------------------------------------- data
def load_text():
    import pydoc_data.topics
    topics = pydoc_data.topics.topics
    return "\n".join(topics[k] for k in sorted(topics))


class CharData:
    """The text as int64 codes over its sorted characters; a contiguous split
    (the last ``val_fraction`` for validation)."""

    def __init__(self, text, val_fraction=0.1):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        codes = np.array([self.index[c] for c in text], np.int64)
        n_val = int(len(codes) * val_fraction)
        self.train, self.val = codes[:-n_val], codes[-n_val:]

    @property
    def vocab(self):
        return len(self.chars)

    def encode(self, s):
        return np.array([self.index.get(c, 0) for c in s], np.int64)

    def decode(self, codes):
        return "".join(self.chars[int(i)] for i in codes)

    def batch(self, rng, batch_size, seq_len):
        """Random windows: inputs (B, T) and the next characters (B, T)."""
        start = rng.integers(0, len(self.train) - seq_len - 1, batch_size)
        idx = start[:, None] + np.arange(seq_len + 1)
        w = self.train[idx]
        return w[:, :-1], w[:, 1:]

    def val_batches(self, batch_size, seq_len, limit=None):
        """Non-overlapping validation windows, in order."""
        n = (len(self.val) - 1) // seq_len
        x = self.val[:n * seq_len].reshape(n, seq_len)
        y = self.val[1:n * seq_len + 1].reshape(n, seq_len)
        batches = [(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, n, batch_size)]
        return batches[:limit] if limit else batches


# ---------------------------------------------------------------- models
class TransformerLM(nn.Module):
    """Token and position embeddings, pre-norm causal Transformer encoder layers, a
    final LayerNorm and a linear head."""

    def __init__(self, vocab, d_model=128, nhead=4, num_layers=2, dim_feedforward=512,
                 context=128, dropout=0.1):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model))
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", nn.generate_square_subsequent_mask(context),
                             persistent=False)

    def forward(self, x):
        T = x.shape[1]
        h = self.tok(x) + self.pos(tg.arange(T))
        h = self.encoder(h, mask=self.mask[:T, :T], is_causal=True)
        return self.head(h)


class LSTMLM(nn.Module):
    """Embedding, an LSTM, a linear head; ``forward(x, state)`` returns
    ``(logits, state)`` so that sampling carries the state."""

    def __init__(self, vocab, embed=64, hidden=256, num_layers=1, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=num_layers, batch_first=True,
                            dropout=dropout)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x, state=None):
        h, state = self.lstm(self.tok(x), state)
        return self.head(h), state


def make_model(kind, vocab, context, dropout=0.0):
    if kind == "transformer":
        return TransformerLM(vocab, context=context, dropout=dropout)
    if kind == "lstm":
        return LSTMLM(vocab)
    raise SystemExit(f"unknown model {kind!r}: choose transformer or lstm")


def logits_of(model, x):
    out = model(x)
    return out[0] if isinstance(out, tuple) else out


AMP = {"bf16": tg.bfloat16, "fp16": tg.float16}


def loss_of(model, xb, yb, amp=None):
    """Cross-entropy of the next characters; ``amp``: the forward and the loss under
    ``tg.autocast`` in that dtype."""
    with tg.autocast("cpu", dtype=AMP.get(amp), enabled=amp is not None):
        logits = logits_of(model, tg.tensor(xb))
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), tg.tensor(yb.reshape(-1)))


@tg.no_grad()
def evaluate(model, data, batch_size, seq_len, limit=None, amp=None):
    """Mean cross-entropy (nats per character) over validation windows."""
    model.eval()
    total, count = 0.0, 0
    for xb, yb in data.val_batches(batch_size, seq_len, limit):
        total += loss_of(model, xb, yb, amp).item() * yb.size
        count += yb.size
    model.train()
    return total / count


# ---------------------------------------------------------------- training
def train(model, data, args, progress=True):
    from tqdm import tqdm
    rng = np.random.default_rng(args.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos" not in n
             and "tok" not in n]
    other = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "pos" not in n
                                                               and "tok" not in n)]
    opt = tg.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                          {"params": other, "weight_decay": 0.0}], lr=args.lr)
    sched = tg.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps,
                                             pct_start=0.15)
    history = {"step": [], "train": [], "val_step": [], "val": []}
    running = None
    amp = getattr(args, "amp", None)
    scaler = tg.amp.GradScaler("cpu") if amp == "fp16" else None
    run_model = tg.compile(model) if getattr(args, "compile", False) else model
    history["run_model"] = run_model
    history["step_seconds"] = []
    bar = tqdm(range(args.steps), disable=not progress, unit="step", dynamic_ncols=True)
    for step in bar:
        xb, yb = data.batch(rng, args.batch_size, args.seq_len)
        t0 = time.perf_counter()
        loss = loss_of(run_model, xb, yb, amp)
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            tg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        else:  # clipping sees the true gradients: unscaled first
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            tg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        history["step_seconds"].append(time.perf_counter() - t0)
        sched.step()
        v = loss.item()
        running = v if running is None else 0.95 * running + 0.05 * v
        history["step"].append(step + 1)
        history["train"].append(v / LN2)
        bar.set_postfix(loss=f"{running:.3f}", bpc=f"{running / LN2:.3f}", refresh=False)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            val = evaluate(model, data, args.batch_size, args.seq_len, limit=args.eval_batches,
                           amp=amp)
            history["val_step"].append(step + 1)
            history["val"].append(val / LN2)
            bar.write(f"step {step + 1:5d}  train loss {running:.3f}  val loss {val:.3f}  "
                      f"val perplexity {math.exp(val):6.2f}  val bits-per-char {val / LN2:.3f}")
    bar.close()
    return opt, history


def check_checkpoint(model, opt, args, data, path):
    """Save model and optimizer, reload into a fresh model, compare predictions."""
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "model_kind": args.model, "chars": "".join(data.chars)}, path)
    ckpt = tg.load(path)
    fresh = make_model(ckpt["model_kind"], len(ckpt["chars"]), args.seq_len)
    fresh.load_state_dict(ckpt["model"])
    xb, _ = data.val_batches(8, args.seq_len)[0]
    with tg.no_grad():
        model.eval()
        fresh.eval()
        same = np.array_equal(logits_of(model, tg.tensor(xb)).numpy(),
                              logits_of(fresh, tg.tensor(xb)).numpy())
        model.train()
    if not same:
        raise SystemExit(f"checkpoint {path}: the reloaded model predicts differently")
    return fresh


@tg.no_grad()
def sample(model, data, prompt, n, temperature=0.8, seed=0, context=128):
    """``n`` characters after ``prompt``, drawn with ``temperature``."""
    model.eval()
    rng = np.random.default_rng(seed)
    codes = list(data.encode(prompt))
    state = None
    lstm = isinstance(model, LSTMLM)
    feed = codes
    for _ in range(n):
        if lstm:
            logits, state = model(tg.tensor(np.array([feed], np.int64)), state)
        else:
            logits = model(tg.tensor(np.array([codes[-context:]], np.int64)))
        z = logits.numpy()[0, -1].astype(np.float64) / temperature
        p = np.exp(z - z.max())
        nxt = int(rng.choice(len(p), p=p / p.sum()))
        codes.append(nxt)
        feed = [nxt]
    model.train()
    return data.decode(codes)


def export_onnx(model, path, context):
    """The trained model as ONNX: ``tokens`` (batch, seq) -> ``logits``; the LSTM also
    takes and returns its state (``h``, ``c``: layers, batch, hidden); the
    Transformer's seq is its context."""
    model.eval()
    if isinstance(model, LSTMLM):
        x = tg.zeros((1, 8), dtype=tg.int64)
        seq = {0: "batch", 1: "seq"}
        L, H = model.lstm.num_layers, model.lstm.hidden_size
        h = tg.zeros((L, 1, H))

        def step(x, h, c):
            logits, (h, c) = model(x, (h, c))
            return logits, h, c
        tg.onnx.export(step, (x, h, h.clone()), path, input_names=["tokens", "h", "c"],
                       output_names=["logits", "h_n", "c_n"],
                       dynamic_axes={"tokens": seq, "logits": seq, "h": {1: "batch"},
                                     "c": {1: "batch"}, "h_n": {1: "batch"},
                                     "c_n": {1: "batch"}})
    else:
        x = tg.zeros((1, context), dtype=tg.int64)
        tg.onnx.export(model, (x,), path, input_names=["tokens"], output_names=["logits"],
                       dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}})
    model.train()


def sample_onnx(path, data, prompt, n, temperature=0.8, seed=0, context=128):
    """``sample`` with onnxruntime running the exported model."""
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    rng = np.random.default_rng(seed)
    codes = list(data.encode(prompt))
    feed = codes
    state = None
    for _ in range(n):
        if "h" in names:
            if state is None:
                shape = [d if isinstance(d, int) else 1 for d in sess.get_inputs()[1].shape]
                state = [np.zeros(shape, np.float32)] * 2
            logits, h, c = sess.run(None, {"tokens": np.array([feed], np.int64),
                                           "h": state[0], "c": state[1]})
            state = [h, c]
            z = logits[0, -1]
        else:  # the context filled on the right: the last real position's logits
            window = codes[-context:]
            tokens = np.zeros((1, context), np.int64)
            tokens[0, :len(window)] = window
            (logits,) = sess.run(None, {"tokens": tokens})
            z = logits[0, len(window) - 1]
        z = z.astype(np.float64) / temperature
        p = np.exp(z - z.max())
        nxt = int(rng.choice(len(p), p=p / p.sum()))
        codes.append(nxt)
        feed = [nxt]
    return data.decode(codes)


def plot(history, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    s, t = np.array(history["step"]), np.array(history["train"])
    k = max(1, len(t) // 50)
    smooth = np.convolve(t, np.ones(k) / k, mode="valid")
    ax.plot(s, t, color="tab:blue", alpha=0.25, lw=0.8)
    ax.plot(s[k - 1:], smooth, color="tab:blue", label="training (batch, smoothed)")
    ax.plot(history["val_step"], history["val"], "o-", color="tab:orange",
            label="validation (sampled batches)")
    ax.set(xlabel="step", ylabel="bits per character", title="character-level LM on "
                                                              "pydoc_data.topics")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("transformer", "lstm"), default="transformer")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default: 400 for the Transformer, 500 for the LSTM)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: 64 for the Transformer, 32 for the LSTM")
    p.add_argument("--seq-len", type=int, default=None, help="context length (default 64)")
    p.add_argument("--lr", type=float, default=None,
                   help="peak learning rate of OneCycleLR (default: 4e-3 for the "
                        "Transformer, 1e-2 for the LSTM)")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="Transformer dropout (default 0: a few epochs do not overfit)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=4,
                   help="validation batches per evaluation during training (the final one "
                        "uses the whole validation text)")
    p.add_argument("--val-batches", type=int, default=None,
                   help="batches of the final evaluation (default: the whole validation text)")
    p.add_argument("--sample-chars", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs", help="folder for checkpoint and plot")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads (default 1: these matrices are small, and extra "
                        "threads hurt on a busy machine; 0 leaves BLAS as it is)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--export", default=None, metavar="PATH",
                   help="write the trained model as ONNX to PATH and sample it with "
                        "onnxruntime")
    p.add_argument("--compile", action="store_true",
                   help="train with model = tg.compile(model) and print its speed-up")
    p.add_argument("--amp", choices=tuple(AMP), default=None,
                   help="train under tg.autocast in bfloat16 or float16 (with a GradScaler), "
                        "float32 master weights, after a float32 run to compare with")
    args = p.parse_args(argv)
    if args.amp and args.compile:
        raise SystemExit("--amp trains eagerly here: drop --compile")
    with _blas_threads(args.blas_threads):
        return run(args)


def _blas_threads(n):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas") if n > 0 else threadpool_limits(None)


def _report_speedup(args, data, history, steps=10):
    """The compiled steps' mean time (the captures left out) against eager steps of a
    copy of the model on batches of the same shape."""
    cm = history["run_model"]
    s = cm.stats()
    times = history["step_seconds"][3:] or history["step_seconds"]
    comp = float(np.median(times))
    model = make_model(args.model, data.vocab, args.seq_len, args.dropout)
    opt = tg.optim.AdamW(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed + 1)
    took = []
    for _ in range(steps):
        xb, yb = data.batch(rng, args.batch_size, args.seq_len)
        t0 = time.perf_counter()
        loss = loss_of(model, xb, yb)
        opt.zero_grad()
        loss.backward()
        tg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        took.append(time.perf_counter() - t0)
    eager = float(np.median(took[2:]))
    print(f"tg.compile(model): {comp * 1e3:.1f} ms per step ({s['replays']} replays, "
          f"{s['captures']} captures, {s['eager_calls']} eager calls), eager "
          f"{eager * 1e3:.1f} ms per step: speed-up {eager / comp:.2f}x")


def run(args):
    for k, v in DEFAULTS[args.model].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    os.makedirs(args.out, exist_ok=True)
    tg.manual_seed(args.seed)
    data = CharData(load_text())
    model = make_model(args.model, data.vocab, args.seq_len, args.dropout)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {n_params / 1e3:.0f}K parameters; text: {len(data.train)} training "
          f"and {len(data.val)} validation characters, {data.vocab} distinct")
    if args.amp:  # the float32 run to compare with: the same initial weights and batches
        ref = make_model(args.model, data.vocab, args.seq_len, args.dropout)
        ref.load_state_dict(model.state_dict())
        tg.manual_seed(args.seed + 1)
        _, ref_history = train(ref, data, argparse.Namespace(**{**vars(args), "amp": None}),
                               progress=not args.no_progress)
        ref_val = evaluate(ref, data, args.batch_size, args.seq_len, limit=args.val_batches)
        print(f"float32 run: validation loss {ref_val:.3f}")
        tg.manual_seed(args.seed + 1)
    start = time.perf_counter()
    opt, history = train(model, data, args, progress=not args.no_progress)
    train_s = time.perf_counter() - start
    if args.compile:
        _report_speedup(args, data, history)
    path = os.path.join(args.out, f"charlm_{args.model}.tg")
    model = check_checkpoint(model, opt, args, data, path)
    print(f"checkpoint {path}: reloaded, identical predictions")
    plot(history, args.out)
    val = evaluate(model, data, args.batch_size, args.seq_len, limit=args.val_batches,
                   amp=args.amp)
    print(f"trained {args.steps} steps in {train_s:.0f} s"
          + (f" under tg.autocast({AMP[args.amp]})" if args.amp else "")
          + f"; validation loss {val:.3f}, perplexity {math.exp(val):.2f}")
    if args.amp:  # the median step: the first steps' kernel compilations left out
        ms, ref_ms = (float(np.median(h["step_seconds"])) * 1e3 for h in (history, ref_history))
        print(f"float32: val bits-per-char {ref_val / LN2:.3f}, {ref_ms:.1f} ms per step; "
              f"--amp {args.amp}: val bits-per-char {val / LN2:.3f} "
              f"({(val - ref_val) / LN2:+.3f}), {ms:.1f} ms per step "
              f"({ref_ms / ms:.2f}x the float32 speed)")
    print("--- sampled text (temperature 0.8) ---")
    text = sample(model, data, "The ", args.sample_chars, seed=args.seed,
                  context=args.seq_len)
    print(text)
    print("---")
    if args.export:
        export_onnx(model, args.export, args.seq_len)
        onnx_text = sample_onnx(args.export, data, "The ", args.sample_chars, seed=args.seed,
                                context=args.seq_len)
        print(f"--- sampled by onnxruntime from {args.export} ---")
        print(onnx_text)
        print("---")
        if onnx_text != text:
            raise SystemExit("onnxruntime sampled a different text from the exported model")
        print("onnxruntime sampled the same text")
    bpc = val / LN2
    print(f"val bits-per-char: {bpc:.3f}")
    return bpc


if __name__ == "__main__":
    main()
