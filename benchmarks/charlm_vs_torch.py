"""The charlm demo's model and budget in PyTorch, for comparing the two:
the same architecture (``TransformerLM`` or ``LSTMLM``), hyperparameters,
AdamW groups, OneCycleLR, clipping and the same training batches (the demo's data
and random windows), then the whole-validation bits per character, and the time.

    python benchmarks/charlm_vs_torch.py [--model transformer|lstm] [--steps N]
        [--threads 1]

Prints ``pytorch: val bits-per-char X.XXX in S s`` (run the demo itself for
tapegrad's line).
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def build(torch, kind, vocab, context):
    nn = torch.nn

    class TransformerLM(nn.Module):
        def __init__(self):
            super().__init__()
            d = 128
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(context, d)
            layer = nn.TransformerEncoderLayer(d, 4, 512, 0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(d),
                                                 enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(
                context), persistent=False)

        def forward(self, x):
            T = x.shape[1]
            h = self.tok(x) + self.pos(torch.arange(T))
            return self.head(self.encoder(h, mask=self.mask[:T, :T], is_causal=True))

    class LSTMLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, 64)
            self.lstm = nn.LSTM(64, 256, batch_first=True)
            self.head = nn.Linear(256, vocab)

        def forward(self, x):
            return self.head(self.lstm(self.tok(x))[0])

    return TransformerLM() if kind == "transformer" else LSTMLM()


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("transformer", "lstm"), default="transformer")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    from tapegrad.examples import charlm
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    d = charlm.DEFAULTS[args.model]
    steps = args.steps or d["steps"]
    seq = args.seq_len or d["seq_len"]
    lr = args.lr or d["lr"]
    args.batch_size = args.batch_size or d["batch_size"]
    data = charlm.CharData(charlm.load_text())
    model = build(torch, args.model, data.vocab, seq)
    named = list(model.named_parameters())
    dec = [q for n, q in named if q.ndim >= 2 and "pos" not in n and "tok" not in n]
    oth = [q for n, q in named if not (q.ndim >= 2 and "pos" not in n and "tok" not in n)]
    opt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.05},
                             {"params": oth, "weight_decay": 0.0}], lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.15)
    rng = np.random.default_rng(args.seed)
    F = torch.nn.functional
    start = time.perf_counter()
    for _ in range(steps):
        xb, yb = data.batch(rng, args.batch_size, seq)
        logits = model(torch.from_numpy(xb))
        loss = F.cross_entropy(logits.reshape(-1, data.vocab), torch.from_numpy(yb).reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    elapsed = time.perf_counter() - start
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for xb, yb in data.val_batches(args.batch_size, seq):
            logits = model(torch.from_numpy(xb))
            total += F.cross_entropy(logits.reshape(-1, data.vocab),
                                     torch.from_numpy(yb).reshape(-1)).item() * yb.size
            count += yb.size
    print(f"pytorch {args.model}: {steps} steps in {elapsed:.0f} s; val bits-per-char "
          f"{total / count / math.log(2):.3f}")


if __name__ == "__main__":
    main()
