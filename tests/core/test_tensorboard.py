"""``tg.utils.tensorboard.SummaryWriter`` writes TensorBoard event files from tensors:
the records are read back with TensorBoard's protobuf schema (as TensorBoard reads
them) and hold the values written."""
import glob
import struct

import numpy as np

import tapegrad as tg
from tapegrad.utils.tensorboard import SummaryWriter


def _events(log_dir):
    """Every Event in the event files under ``log_dir`` (TFRecord framing: length,
    its CRC, the record, its CRC)."""
    from tensorboardX.proto import event_pb2
    out = []
    for path in sorted(glob.glob(f"{log_dir}/**/events.out.tfevents.*", recursive=True)):
        data = open(path, "rb").read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            ev = event_pb2.Event()
            ev.ParseFromString(data[i + 12:i + 12 + n])
            out.append(ev)
            i += 12 + n + 4
    return out


def test_scalars_histogram_image_and_text_round_trip(tmp_path):
    with SummaryWriter(str(tmp_path)) as w:
        assert w.log_dir == str(tmp_path)
        for step in range(3):
            w.add_scalar("loss", tg.tensor(1.5 - step), step)
        w.add_scalars("pair", {"a": tg.tensor(2.0), "b": 3.0}, 0)
        w.add_histogram("w", tg.arange(100.0), 0)
        w.add_image("img", tg.ones(3, 4, 5) * 0.5, 0)
        w.add_text("note", "hello", 0)
        w.flush()
    values = {}
    kinds = set()
    for ev in _events(tmp_path):
        for v in ev.summary.value:
            if v.HasField("simple_value"):
                values.setdefault(v.tag, []).append((ev.step, v.simple_value))
            elif v.HasField("histo"):
                kinds.add("histo")
                assert v.histo.num == 100 and v.histo.max == 99.0
            elif v.HasField("image"):
                kinds.add("image")
                assert (v.image.height, v.image.width) == (4, 5)
            elif v.metadata.plugin_data.plugin_name == "text":
                kinds.add("text")
    assert values["loss"] == [(0, 1.5), (1, 0.5), (2, -0.5)]
    assert sorted(values["pair"]) == [(0, 2.0), (0, 3.0)]   # one run per key, as PyTorch
    assert kinds == {"histo", "image", "text"}


def test_tensors_that_require_grad_are_written():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        w = SummaryWriter(d)
        x = tg.tensor([1.0, 2.0], requires_grad=True)
        w.add_scalar("s", (x * x).sum(), 1)
        w.close()
        got = [v.simple_value for ev in _events(d) for v in ev.summary.value if v.tag == "s"]
        np.testing.assert_allclose(got, [5.0])


def test_a_compiled_step_that_writes_a_scalar_writes_it_on_every_call(tmp_path):
    # a replay would skip the write: that step runs eagerly, with a warning
    import warnings
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with SummaryWriter(str(tmp_path)) as w:
        def step(x, i):
            loss = (x * x).sum()
            w.add_scalar("loss", float(i), i)
            return loss
        c = tg.compile(step)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = [float(c(x, 0)) for _ in range(4)]
        w.flush()
    assert losses == [5.0] * 4
    assert any("SummaryWriter (add_scalar)" in str(m.message) for m in caught)
    steps = [ev.step for ev in _events(str(tmp_path)) if ev.summary.value]
    assert steps == [0, 0, 0, 0]
