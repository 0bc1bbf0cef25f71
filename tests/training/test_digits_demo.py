"""The digits demo runs end to end (MLP, 1 epoch): checkpoint reload, plots, and the
final ``test accuracy: 0.XXX`` line."""
import re

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


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
