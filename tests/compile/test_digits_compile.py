"""``python -m tapegrad.examples.digits --compile``: the compiled step trains to the
same losses and accuracy as the eager one, and the demo prints the speed-up."""
import re

import numpy as np
import pytest

import tapegrad as tg


@pytest.fixture(autouse=True)
def _examples_extra():
    # the examples extra, imported when a test here runs: not at collection, where
    # every xdist worker would import it
    for name in ("sklearn", "matplotlib", "tqdm"):
        pytest.importorskip(name)


def test_digits_compiled_training_matches_eager(tmp_path, capsys):
    from tapegrad.examples import digits
    tg.manual_seed(0)
    data = digits.load_data(0)
    tg.manual_seed(0)
    eager_model = digits.make_model("mlp")
    _, eager = digits.train(eager_model, data, 1, 64, 3e-3, progress=False)
    tg.manual_seed(0)
    acc = digits.main(["--model", "mlp", "--epochs", "1", "--out", str(tmp_path),
                       "--compile", "--no-progress"])
    out = capsys.readouterr().out
    assert "tg.compile:" in out and "speed-up" in out
    # forward and backward programs, for the full batch and the last, smaller one
    assert re.search(r"\b[24] captures", out), out
    pred = digits.predict(eager_model, data[2]).argmax(1)
    assert abs(acc - float(np.mean(pred == data[3]))) < 1e-9


def test_digits_compiled_step_time_leaves_captures_out():
    # the calls that captured a program (they compile kernels: seconds, not
    # milliseconds) count as captures, not as replayed steps of the reported speed-up
    from tapegrad.examples import digits
    tg.manual_seed(0)
    data = digits.load_data(0)
    _, history = digits.train(digits.make_model("mlp"), data, 1, 64, 3e-3,
                              progress=False, compiled=True)
    captures = history["compiled"].stats()["captures"]
    assert captures >= 1 and history["capture_seconds"] > 0
    assert history["steps"] == len(history["step_times"]) - captures
