"""The scripts in examples/ run, check their own claims (they assert them), and print them."""

import json
import math
import runpy
import sys
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(p for p in FOLDER.glob("*.py") if p.stem != "mask_zoo")  # a training run: its own test below
PROMISED = {"closure_theory": "every bound of Mamba-2 Prop. C.1 holds", "bidirectional_attention": "residual"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(path)])
    runpy.run_path(str(path), run_name="__main__")  # an example whose claim fails raises here
    out = capsys.readouterr().out
    assert PROMISED.get(path.stem, "") in out, f"{path.name} did not print its result"


def test_mask_zoo_small_run_trains_every_mixer_and_writes_its_results(tmp_path, monkeypatch, capsys):
    """The CI version of the MQAR example: every mixer takes its steps, the loss is finite, the
    accuracies are probabilities and the table, JSON and PNG are written."""
    monkeypatch.syspath_prepend(str(FOLDER))
    import mask_zoo

    runs = mask_zoo.main(["--small", "--out", str(tmp_path)])
    assert [r["mixer"] for r in runs] == [*mask_zoo.MASKS, "selective+window", "mamba2"]
    for r in runs:
        steps = [s for s, _ in r["curve"]]
        assert steps[0] == 0 and steps[-1] == mask_zoo.SMALL["steps"]
        assert all(0.0 <= a <= 1.0 for _, a in r["curve"]) and math.isfinite(r["final_loss"])
    saved = json.loads((tmp_path / "mask_zoo.json").read_text())
    assert len(saved["runs"]) == len(runs) and (tmp_path / "mask_zoo.png").stat().st_size > 0
    assert "| mamba2 |" in (tmp_path / "mask_zoo.md").read_text() and "| selective |" in capsys.readouterr().out
