"""The digits demo trains on the device (``--device cuda``): MLP and CNN, the
checkpoint reloads with identical predictions, and the accuracy is that of a model
that learned. The digits come from ``benchmarks/data/digits.npz`` (the GPU machine
may lack scikit-learn)."""
import os

import pytest
from gpu_env import DEVICE, HAVE_GPU, require

from tapegrad.examples import digits

require()

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "data", "digits.npz")


@pytest.mark.parametrize("model,epochs,floor", [
    ("mlp", 3, 0.85),
    pytest.param("cnn", 2, 0.80, marks=pytest.mark.skipif(
        not HAVE_GPU, reason="the CPU mode checks the logic with the MLP (the CNN: 8 s)"))])
def test_digits_demo_trains_on_device(model, epochs, floor, tmp_path, capsys):
    acc = digits.main(["--device", DEVICE, "--model", model, "--epochs", str(epochs),
                       "--no-progress", "--out", str(tmp_path), "--data", DATA])
    out = capsys.readouterr().out
    assert f"on {DEVICE}" in out and "identical predictions" in out
    assert acc >= floor, f"{model} on {DEVICE}: test accuracy {acc}"
