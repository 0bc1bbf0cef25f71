"""How long does one training step of a sequence model take, against PyTorch eager,
in the same run?

- LSTM: 2 layers, input and hidden 256, sequence 64, batch 32 (target:
  at most 1.5x PyTorch); GRU and RNN (tanh) the same sizes;
- Transformer encoder: 2 ``TransformerEncoderLayer``s, d_model 128, 4 heads,
  feed-forward 512, dropout 0.1, causal mask, sequence 128, batch 16 (target: at most
  1.3x PyTorch).

A step is forward, a mean-square loss of the output, backward, ``zero_grad`` and
an SGD step (lr 0.01, momentum 0.9) with the optimizer classes, float32, the same
initial weights (PyTorch's, loaded by state dict). Two threads for everyone
(BENCH_THREADS=n to change), each contender in its own process, taking turns, best
of BENCH_REPEATS (default 3) processes; medians over 20 steps after 3 warm-up steps.

    python benchmarks/bench_sequence.py [lstm|gru|rnn|transformer]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
THREADS = os.environ.get("BENCH_THREADS", "2")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = THREADS

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
CASES = {
    "lstm": dict(T=64, B=32, D=256, title="LSTM 2 layers, hidden 256, seq 64, batch 32",
                 target=1.5),
    "gru": dict(T=64, B=32, D=256, title="GRU 2 layers, hidden 256, seq 64, batch 32",
                target=1.5),
    "rnn": dict(T=64, B=32, D=256, title="RNN (tanh) 2 layers, hidden 256, seq 64, batch 32",
                target=1.5),
    "transformer": dict(T=128, B=16, D=128, title="Transformer encoder 2 layers, d_model 128, "
                                                  "4 heads, seq 128, batch 16", target=1.3),
}


_RECURRENT = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}


def _median_ms(step, reps=20, warm=3):
    for _ in range(warm):
        step()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _model(nn, case):
    if case in _RECURRENT:
        return getattr(nn, _RECURRENT[case])(256, 256, num_layers=2)
    layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True)
    kw = {"enable_nested_tensor": False} if nn.__name__.startswith("torch") else {}
    return nn.TransformerEncoder(layer, 2, **kw)


def _weights(case):
    import torch
    torch.manual_seed(0)
    return {k: v.numpy().copy() for k, v in _model(torch.nn, case).state_dict().items()}


def _data(case):
    c = CASES[case]
    r = np.random.default_rng(0)
    shape = (c["T"], c["B"], c["D"]) if case in _RECURRENT else (c["B"], c["T"], c["D"])
    return r.standard_normal(shape).astype(np.float32)


def _mask(T):
    return np.triu(np.full((T, T), -np.inf, np.float32), 1)


def bench_tapegrad(case):
    import tapegrad as tg
    model = _model(tg.nn, case)
    model.load_state_dict({k: tg.tensor(v) for k, v in _weights(case).items()})
    x = tg.tensor(_data(case))
    mask = tg.tensor(_mask(CASES[case]["T"]))
    opt = tg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        out = model(x)[0] if case in _RECURRENT else model(x, mask=mask)
        loss = (out * out).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    ms = _median_ms(step)
    return ms, float(step().item())


def bench_torch(case):
    import torch
    torch.set_num_threads(int(THREADS))
    model = _model(torch.nn, case)
    model.load_state_dict({k: torch.tensor(v) for k, v in _weights(case).items()})
    x = torch.tensor(_data(case))
    mask = torch.tensor(_mask(CASES[case]["T"]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        out = model(x)[0] if case in _RECURRENT else model(x, mask=mask)
        loss = (out * out).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    ms = _median_ms(step)
    return ms, float(step().item())


_CONTENDERS = {"tapegrad": bench_tapegrad, "pytorch": bench_torch}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--one"]:  # a child process: one contender, one case, one JSON line
        from _isolate import report
        ms, loss = _CONTENDERS[argv[1]](argv[2])
        report({"ms": ms, "loss": loss})
        return
    from _isolate import run_each
    cases = argv or list(CASES)
    print(f"Sequence-model training steps, float32, {THREADS} threads, each contender in its "
          f"own process (median ms of 20 steps, best of {REPEATS} processes)")
    for case in cases:
        c = CASES[case]
        res = run_each(os.path.abspath(__file__), list(_CONTENDERS), extra_args=(case,),
                       repeats=REPEATS, key="ms")
        base = res["pytorch"]["ms"]
        print(f"\n{c['title']} (target: at most {c['target']}x PyTorch)")
        print(f"{'':10s} {'ms/step':>9s} {'vs torch':>9s} {'loss':>10s}")
        for name, r in res.items():
            if r is not None:
                print(f"{name:10s} {r['ms']:9.2f} {r['ms'] / base:8.2f}x {r['loss']:10.6f}")


if __name__ == "__main__":
    main()
