"""Real models exported with ``tg.onnx.export``: the largest difference from eager,
the export's time and onnxruntime's latency against eager tapegrad.

    python benchmarks/bench_onnx.py [--batch 8] [--rounds 51]

The models of ``tests/compile/test_onnx_models.py`` (ResNet-style block with BatchNorm
in eval, DCGAN generator and discriminator, VAE, word LM with LSTM and with a
Transformer, a bidirectional LSTM) and charlm's two. Each is exported at batch 2 with
a dynamic batch and run at ``--batch``; eager (``no_grad``) and onnxruntime (one
thread, as eager's BLAS here) take turns, one call each per round; the table gives
the median per call, ms.
"""
import argparse
import os
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "compile")]

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402
import tapegrad.nn as nn  # noqa: E402


def _models():
    import test_onnx_models as M

    from tapegrad.examples.charlm import make_model
    rand, tokens = M._rand, M._tokens
    T = 16
    mask = nn.Transformer.generate_square_subsequent_mask(T)

    def lstm_lm():
        m = M.RNNModel("LSTM", 1000, 64, 128, 2)

        class Flat(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, x, h, c):
                return self.m(x, (h, c))
        return Flat(), lambda B: (tokens((T, B), 1000), rand(2, B, 128), rand(2, B, 128, seed=1)), \
            ["tokens", "h", "c"], {"tokens": {1: "batch"}, "h": {1: "batch"}, "c": {1: "batch"}}

    yield "ResNet-style (BN eval)", M.ResNetish(), lambda B: (rand(B, 3, 32, 32),), ["x"], \
        {"x": {0: "batch"}}
    yield "DCGAN generator", M.Generator(), lambda B: (rand(B, 8, 1, 1),), ["z"], \
        {"z": {0: "batch"}}
    yield "DCGAN discriminator", M.Discriminator(), lambda B: (rand(B, 3, 16, 16),), ["x"], \
        {"x": {0: "batch"}}
    yield "VAE", M.VAE(), lambda B: (rand(B, 1, 28, 28),), ["x"], {"x": {0: "batch"}}
    m, a, n, d = lstm_lm()
    yield "word LM, LSTM (2x128)", m, a, n, d
    yield "word LM, Transformer", M.TransformerModel(1000, 64, 4, 128, 2), \
        lambda B: (tokens((T, B), 1000), mask), ["tokens", "mask"], {"tokens": {1: "batch"}}
    yield "bi-LSTM, zero state", nn.LSTM(32, 64, 2, batch_first=True, bidirectional=True), \
        lambda B: (rand(B, T, 32),), ["x"], {"x": {0: "batch"}}
    yield "charlm Transformer", make_model("transformer", 96, 64), \
        lambda B: (tokens((B, 64), 96),), ["tokens"], {"tokens": {0: "batch"}}
    yield "charlm LSTM", make_model("lstm", 96, 64), lambda B: (tokens((B, 64), 96),), \
        ["tokens"], {"tokens": {0: "batch"}}


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [y for o in out for y in _flat(o)]
    return [out.numpy()]


def main():
    import onnxruntime as ort
    from threadpoolctl import threadpool_limits
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=51)
    args = p.parse_args()
    tg.manual_seed(0)
    d = tempfile.mkdtemp()
    print(f"{'model':26s} {'max |diff|':>10s} {'export s':>9s} {'eager ms':>9s} {'ORT ms':>8s} "
          f"{'eager/ORT':>9s}")
    with threadpool_limits(1, user_api="blas"):
        for name, model, make, names, dyn in _models():
            model.eval()
            path = os.path.join(d, "m.onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = time.perf_counter()
                tg.onnx.export(model, make(2), path, input_names=names, dynamic_axes=dyn)
                export_s = time.perf_counter() - t
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            xs = make(args.batch)
            feeds = {n: a.numpy() for n, a in zip(names,
                                                  [a for a in xs if isinstance(a, tg.Tensor)])}
            with tg.no_grad():
                refs = _flat(model(*xs))
            outs = sess.run(None, feeds)
            diff = max(float(np.max(np.abs(o - r))) if o.size else 0.0 for o, r in zip(outs, refs))
            te, to = [], []
            for _ in range(args.rounds):
                t = time.perf_counter()
                with tg.no_grad():
                    model(*xs)
                te.append(time.perf_counter() - t)
                t = time.perf_counter()
                sess.run(None, feeds)
                to.append(time.perf_counter() - t)
            e, o = np.median(te) * 1e3, np.median(to) * 1e3
            print(f"{name:26s} {diff:10.2e} {export_s:9.2f} {e:9.2f} {o:8.2f} {e / o:9.2f}")


if __name__ == "__main__":
    main()
