"""The scripts in examples/ run, check their own claims (they assert them), and print them."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, capsys):
    runpy.run_path(str(path), run_name="__main__")  # an example whose claim fails raises here
    out = capsys.readouterr().out
    promised = {"closure_theory": "every bound of Mamba-2 Prop. C.1 holds", "bidirectional_attention": "residual"}
    assert promised.get(path.stem, "") in out, f"{path.name} did not print its result"
