"""API.md "Compile and export", tg.onnx.export as PyTorch users call torch.onnx.export:
the shipped layers stacked into models (a Transformer encoder with a final norm, a
character LSTM language model with symbolic batch and time, a CNN with batch norm and
dropout trained a little first, a decoder layer, attention with a padding mask),
each run in onnxruntime against eager; and the call forms: a model left in train()
mode is exported in eval mode and given back in its own modes, keyword arguments
(`kwargs=` or a dict last in `args`), a file object for `f`, and PyTorch's other
keywords."""
import io

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

ort = pytest.importorskip("onnxruntime")


def _flat(t):
    if isinstance(t, (tuple, list)):
        return [u for x in t for u in _flat(x)]
    return [t]


def _check(model, args, path, others=(), **kw):
    """Export ``model`` on ``args``; onnxruntime's outputs on ``args`` and on each of
    ``others`` (other shapes, for dynamic axes) equal eager's."""
    tg.onnx.export(model, args, str(path), **kw)
    sess = ort.InferenceSession(str(path))
    for a in (args, *others):
        outs = sess.run(None, {i.name: x.numpy() for i, x in zip(sess.get_inputs(), a)})
        with tg.no_grad():
            want = _flat(model(*a))
        assert len(outs) == len(want)
        for got, w in zip(outs, want):
            assert got.shape == tuple(w.shape)
            np.testing.assert_allclose(got, w.numpy(), rtol=1e-4, atol=1e-5)
    return sess


def test_transformer_encoder_with_final_norm_and_symbolic_batch_and_length(tmp_path):
    tg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu",
                                       norm_first=True, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(16))
    enc.eval()
    _check(enc, (tg.randn(2, 5, 16),), tmp_path / "enc.onnx",
           others=[(tg.randn(3, 7, 16),)], input_names=["src"],
           dynamic_axes={"src": {0: "batch", 1: "length"}})


class _CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.rnn = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 20)

    def forward(self, idx):
        h, _ = self.rnn(self.emb(idx))
        return self.head(h)


def test_character_lstm_language_model_with_symbolic_batch_and_time(tmp_path):
    tg.manual_seed(0)
    m = _CharLM()
    m.eval()
    sess = _check(m, (tg.randint(0, 20, (2, 6)),), tmp_path / "lm.onnx",
                  others=[(tg.randint(0, 20, (4, 9)),)], input_names=["idx"],
                  output_names=["logits"],
                  dynamic_axes={"idx": {0: "b", 1: "t"}, "logits": {0: "b", 1: "t"}})
    assert [o.name for o in sess.get_outputs()] == ["logits"]


def _cnn():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.3), nn.Conv2d(8, 16, 3, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.5), nn.Linear(16, 10))


def test_cnn_with_batchnorm_and_dropout_trained_then_exported_in_eval(tmp_path):
    tg.manual_seed(0)
    m = _cnn()
    opt = tg.optim.SGD(m.parameters(), lr=0.05)
    for _ in range(2):  # running statistics away from their initial values
        opt.zero_grad()
        tg.nn.functional.cross_entropy(m(tg.randn(4, 1, 12, 12) * 2 + 1),
                                       tg.randint(0, 10, (4,))).backward()
        opt.step()
    m.eval()
    _check(m, (tg.randn(2, 1, 12, 12),), tmp_path / "cnn.onnx",
           others=[(tg.randn(5, 1, 12, 12),)], input_names=["img"], output_names=["logits"],
           dynamic_axes={"img": {0: "batch"}, "logits": {0: "batch"}})


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True)

    def forward(self, tgt, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.dec(tgt, memory, tgt_mask=mask)


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, q, kv, pad):
        return self.mha(q, kv, kv, key_padding_mask=pad)


def test_decoder_layer_and_attention_with_a_padding_mask(tmp_path):
    tg.manual_seed(0)
    dec = _Decoder()
    dec.eval()
    _check(dec, (tg.randn(2, 5, 8), tg.randn(2, 3, 8)), tmp_path / "dec.onnx")
    att = _Attention()
    att.eval()
    pad = tg.tensor([[False, False, False, True], [False, False, False, False]])
    _check(att, (tg.randn(2, 3, 8), tg.randn(2, 4, 8), pad), tmp_path / "att.onnx")


# ---------------------------------------------------------------- call forms
def test_a_model_in_train_mode_is_exported_in_eval_and_its_modes_restored(tmp_path):
    tg.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    m.train()
    m[2].eval()  # a mixed tree: each module gets its own mode back
    x = tg.randn(3, 4)
    tg.onnx.export(m, (x,), str(tmp_path / "m.onnx"))
    assert m.training and m[0].training and m[1].training and not m[2].training
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"))
    m.eval()
    with tg.no_grad():
        want = m(x).numpy()
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert tg.onnx.TrainingMode.EVAL == 0
    m.train()
    with pytest.raises(tg.onnx.UnsupportedOperatorError, match="dropout"):
        tg.onnx.export(m, (x,), str(tmp_path / "t.onnx"),
                       training=tg.onnx.TrainingMode.PRESERVE)
    assert m.training and m[1].training


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x, bias=None, scale=1.0):
        y = self.lin(x) * scale
        return y if bias is None else y + bias


def test_keyword_arguments_by_kwargs_and_by_a_trailing_dict(tmp_path):
    tg.manual_seed(0)
    m = _Scaled()
    m.eval()
    x, b = tg.randn(4, 3), tg.randn(4, 2)
    with tg.no_grad():
        want = m(x, bias=b, scale=3.0).numpy()
    for i, call in enumerate([dict(args=(x, {"bias": b, "scale": 3.0})),
                              dict(args=(x,), kwargs={"bias": b, "scale": 3.0})]):
        path = str(tmp_path / f"k{i}.onnx")
        tg.onnx.export(m, call["args"], path, kwargs=call.get("kwargs"),
                       input_names=["x", "bias"])
        sess = ort.InferenceSession(path)
        assert [i.name for i in sess.get_inputs()] == ["x", "bias"]
        got = sess.run(None, {"x": x.numpy(), "bias": b.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_file_object_and_pytorchs_keywords():
    tg.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    buf = io.BytesIO()
    tg.onnx.export(m, (tg.randn(1, 3),), buf, export_params=True, do_constant_folding=True,
                   verbose=False, keep_initializers_as_inputs=False,
                   training=tg.onnx.TrainingMode.EVAL, dynamo=False)
    sess = ort.InferenceSession(buf.getvalue())
    x = tg.randn(1, 3)
    with tg.no_grad():
        want = m(x).numpy()
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
