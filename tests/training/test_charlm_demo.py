"""The character-level LM demo runs end to end (a few steps of each model, short
context): checkpoint reload, the loss plot, sampled text and the final
``val bits-per-char: X.XXX`` line."""
import re

import pytest


@pytest.fixture(autouse=True)
def _examples_extra():
    # the examples extra, imported when a test here runs: not at collection, where
    # every xdist worker would import it
    for name in ("matplotlib", "tqdm"):
        pytest.importorskip(name)


@pytest.mark.parametrize("model", ["transformer", "lstm"])
def test_charlm_smoke(tmp_path, capsys, model):
    from tapegrad.examples import charlm
    bpc = charlm.main(["--model", model, "--steps", "4", "--seq-len", "16", "--batch-size", "64",
                       "--eval-every", "2", "--eval-batches", "1", "--val-batches", "2",
                       "--sample-chars", "20",
                       "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"val bits-per-char: \d+\.\d{3}", out[-1])
    assert abs(float(out[-1].split(": ")[1]) - bpc) < 1e-3
    assert bpc < 6.0            # uniform over the 103 characters would be 6.69
    assert any("identical predictions" in line for line in out)
    assert any(line.startswith("step     2") and "val perplexity" in line for line in out)
    i = out.index("--- sampled text (temperature 0.8) ---")
    assert out[i + 1].startswith("The ")
    for name in ("curves.png", f"charlm_{model}.tg"):
        assert (tmp_path / name).stat().st_size > 0


def test_charlm_data_split_and_codes():
    from tapegrad.examples import charlm
    data = charlm.CharData(charlm.load_text())
    assert data.vocab > 50 and len(data.train) > 9 * len(data.val) - 10
    assert data.decode(data.encode("The class")) == "The class"
    import numpy as np
    x, y = data.batch(np.random.default_rng(0), 3, 8)
    assert x.shape == y.shape == (3, 8) and (x[:, 1:] == y[:, :-1]).all()


@pytest.mark.parametrize("model,amp", [("transformer", "bf16"), ("lstm", "fp16")])
def test_charlm_amp_flag(tmp_path, capsys, model, amp):
    """``--amp``: a float32 run, then the same steps under tg.autocast (fp16 with a
    GradScaler, unscaled before clipping); both runs' bits per character printed."""
    from tapegrad.examples import charlm
    bpc = charlm.main(["--model", model, "--steps", "3", "--seq-len", "8", "--batch-size", "8",
                       "--eval-every", "3", "--eval-batches", "1", "--val-batches", "1",
                       "--sample-chars", "5", "--out", str(tmp_path), "--no-progress",
                       "--amp", amp])
    out = capsys.readouterr().out.strip().splitlines()
    line = next(s for s in out if s.startswith("float32: val bits-per-char"))
    m = re.search(rf"--amp {amp}: val bits-per-char (\d+\.\d{{3}}) \([+-]\d\.\d{{3}}\), "
                  r"[\d.]+ ms per step \([\d.]+x the float32 speed\)", line)
    assert m and abs(float(m.group(1)) - bpc) < 1e-3
    assert bpc < 6.6            # below uniform (6.69) after three steps
    assert any("under tg.autocast" in s for s in out)
