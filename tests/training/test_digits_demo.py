"""The digits demo runs end to end (MLP, 1 epoch): checkpoint reload, plots, and the
final ``test accuracy: 0.XXX`` line."""
import re

import pytest


@pytest.fixture(autouse=True)
def _examples_extra():
    # the examples extra, imported when a test here runs: not at collection, where
    # every xdist worker would import it
    for name in ("sklearn", "matplotlib", "tqdm"):
        pytest.importorskip(name)


def test_digits_mlp_one_epoch(tmp_path, capsys):
    from tapegrad.examples import digits
    acc = digits.main(["--model", "mlp", "--epochs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"test accuracy: 0\.\d{3}|test accuracy: 1\.000", out[-1])
    assert abs(float(out[-1].split(": ")[1]) - acc) < 1e-3
    assert acc > 0.5          # one epoch of an MLP is already far above chance
    assert any("identical predictions" in line for line in out)
    for name in ("curves.png", "misclassified.png", "digits_mlp.tg"):
        assert (tmp_path / name).stat().st_size > 0


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_digits_amp_flag(tmp_path, capsys, amp):
    """``--amp``: a float32 run, then the same training under tg.autocast (fp16 with a
    GradScaler); both runs' accuracy and step time printed, the weights kept float32."""
    from tapegrad.examples import digits
    acc = digits.main(["--model", "mlp", "--epochs", "1", "--out", str(tmp_path),
                       "--no-progress", "--amp", amp])
    out = capsys.readouterr().out.strip().splitlines()
    line = next(s for s in out if s.startswith("float32: test accuracy"))
    m = re.search(rf"--amp {amp}: test accuracy (\d\.\d{{3}}) \(([+-]\d+\.\d) points\), "
                  r"[\d.]+ ms per step \([\d.]+x the float32 speed\)", line)
    assert m and abs(float(m.group(1)) - acc) < 1e-3
    assert acc > 0.5
    assert any("under tg.autocast" in s for s in out)
    ckpt = __import__("tapegrad").load(str(tmp_path / "digits_mlp.tg"))
    assert all(str(v.dtype) == "tapegrad.float32" for v in ckpt["model"].values())
