"""Models people ship, exported with ``tg.onnx.export`` and run in onnxruntime at other
batch sizes (and sequence lengths) than the one captured: the outputs equal eager."""
import math
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


# ---------------------------------------------------------------- models
class ResBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus the input (a 1x1 conv where the channels change)."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(h)) + self.skip(x))


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.blocks = nn.Sequential(ResBlock(8, 8), ResBlock(8, 16, 2))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        h = self.blocks(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))


class Generator(nn.Module):
    """DCGAN's generator: a latent (N, nz, 1, 1) to a (N, 3, 16, 16) image."""

    def __init__(self, nz=8, ngf=8):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf=8):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


class VAE(nn.Module):
    """PyTorch's examples/vae: 784-400-20; in eval mode z is the mean."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20)
        self.fc3, self.fc4 = nn.Linear(20, 400), nn.Linear(400, 784)

    def forward(self, x):
        h = F.relu(self.fc1(x.view(-1, 784)))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu
        if self.training:
            z = mu + tg.randn_like(mu) * tg.exp(0.5 * logvar)
        return tg.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


class RNNModel(nn.Module):
    """PyTorch's examples/word_language_model RNNModel (LSTM or GRU)."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        pe = np.zeros((max_len, d_model), np.float32)
        position = np.arange(max_len, dtype=np.float32)[:, None]
        div = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * (-math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = np.sin(position * div), np.cos(position * div)
        self.register_buffer("pe", tg.tensor(pe[:, None, :]))

    def forward(self, x):
        return x + self.pe[:x.shape[0]]


class TransformerModel(nn.Module):
    """PyTorch's examples/word_language_model TransformerModel (sequence first)."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers):
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, 0.0)
        self.encoder = nn.TransformerEncoder(layer, nlayers)
        self.embed = nn.Embedding(ntoken, ninp)
        self.decoder = nn.Linear(ninp, ntoken)
        self.ninp = ninp

    def forward(self, src, mask):
        src = self.pos_encoder(self.embed(src) * math.sqrt(self.ninp))
        return F.log_softmax(self.decoder(self.encoder(src, mask)), dim=-1)


# ---------------------------------------------------------------- running
def _session(path):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [y for o in out for y in _flat(o)]
    return [out.numpy()]


def _check(model, make_args, path, names, dyn, sizes, atol=2e-5, opset=None):
    """Export ``model`` on ``make_args(*sizes[0])``, run it at every size in onnxruntime
    against eager."""
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tg.onnx.export(model, make_args(*sizes[0]), str(path), input_names=names,
                       dynamic_axes=dyn, opset_version=opset)
    onnx.checker.check_model(onnx.load(str(path)))
    sess = _session(path)
    for size in sizes:
        args = make_args(*size)
        with tg.no_grad():
            refs = _flat(model(*args))
        feeds = {n: a.numpy() for n, a in zip(names, [a for a in args if isinstance(a, tg.Tensor)])}
        outs = sess.run(None, feeds)
        assert len(outs) == len(refs)
        for o, r in zip(outs, refs):
            assert o.shape == r.shape
            np.testing.assert_allclose(o, r, rtol=1e-4, atol=atol)


def _rand(*shape, seed=0):
    return tg.tensor(np.random.default_rng(seed + sum(shape)).standard_normal(shape)
                     .astype(np.float32))


def _tokens(shape, n, seed=0):
    return tg.tensor(np.random.default_rng(seed + sum(shape)).integers(0, n, shape))


def _trained_bn(model, x):
    """Running statistics that are not the initial ones (a few training batches)."""
    model.train()
    with tg.no_grad():
        for k in range(3):
            model(x * (1 + k))
    model.eval()


def test_resnet_block_with_batchnorm_in_eval(tmp_path):
    tg.manual_seed(0)
    m = ResNetish()
    _trained_bn(m, _rand(4, 3, 16, 16))
    _check(m, lambda n: (_rand(n, 3, 16, 16),), tmp_path / "r.onnx", ["x"],
           {"x": {0: "batch"}}, [(2,), (5,)])


def test_dcgan_generator_and_discriminator(tmp_path):
    tg.manual_seed(0)
    g, d = Generator(), Discriminator()
    _trained_bn(g, _rand(4, 8, 1, 1))
    _trained_bn(d, _rand(4, 3, 16, 16))
    _check(g, lambda n: (_rand(n, 8, 1, 1),), tmp_path / "g.onnx", ["z"],
           {"z": {0: "batch"}}, [(2,), (3,)])
    _check(d, lambda n: (_rand(n, 3, 16, 16),), tmp_path / "d.onnx", ["x"],
           {"x": {0: "batch"}}, [(2,), (3,)])


def test_vae(tmp_path):
    tg.manual_seed(0)
    _check(VAE(), lambda n: (_rand(n, 1, 28, 28),), tmp_path / "v.onnx", ["x"],
           {"x": {0: "batch"}}, [(2,), (7,)])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_word_language_model_rnn_at_other_lengths_and_batches(kind, tmp_path):
    tg.manual_seed(0)
    m = RNNModel(kind, 50, 16, 24, 2)

    def args(T, B):
        h = _rand(2, B, 24, seed=1)
        return (_tokens((T, B), 50), (h, _rand(2, B, 24, seed=2)) if kind == "LSTM" else h)

    def fn(tokens, *hidden):
        return m(tokens, tuple(hidden) if kind == "LSTM" else hidden[0])
    names = ["tokens", "h"] + (["c"] if kind == "LSTM" else [])
    dyn = {"tokens": {0: "seq", 1: "batch"}, "h": {1: "batch"}, "c": {1: "batch"}}

    class Flat(nn.Module):  # the hidden state as separate tensor arguments
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, tokens, *hidden):
            return fn(tokens, *hidden)

    def flat_args(T, B):
        a = args(T, B)
        return (a[0],) + (a[1] if kind == "LSTM" else (a[1],))
    _check(Flat(), flat_args, tmp_path / "w.onnx", names,
           {k: v for k, v in dyn.items() if k in names}, [(5, 2), (9, 3), (1, 1)])


@pytest.mark.parametrize("opset", [None, tg.onnx.MAX_OPSET])
def test_lstm_default_zero_state_at_other_lengths(opset, tmp_path):
    tg.manual_seed(0)
    m = nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)
    _check(m, lambda B, T: (_rand(B, T, 6),), tmp_path / "l.onnx", ["x"],
           {"x": {0: "batch", 1: "seq"}}, [(2, 5), (3, 9), (1, 2)], opset=opset)


@pytest.mark.parametrize("opset", [None, tg.onnx.MAX_OPSET])
def test_word_language_model_transformer(opset, tmp_path):
    tg.manual_seed(0)
    m = TransformerModel(50, 16, 2, 32, 2)
    T = 6
    mask = nn.Transformer.generate_square_subsequent_mask(T)
    _check(m, lambda B: (_tokens((T, B), 50), mask), tmp_path / "t.onnx", ["tokens", "mask"],
           {"tokens": {1: "batch"}}, [(2,), (5,)], opset=opset)


@pytest.mark.parametrize("kind", ["transformer", "lstm"])
def test_charlm_models(kind, tmp_path):
    from tapegrad.examples.charlm import make_model
    tg.manual_seed(0)
    m = make_model(kind, 30, 16)
    _check(m, lambda B: (_tokens((B, 16), 30),), tmp_path / "c.onnx", ["tokens"],
           {"tokens": {0: "batch"}}, [(2,), (4,)])
