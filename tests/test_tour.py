"""``python -m structmat tour``: every row checked against dense algebra, documented limits shown as such."""

import pytest

from structmat.__main__ import main
from structmat.tour import run_tour


def test_tour_checks_every_row_and_marks_the_limits(capsys):
    rows = run_tour(T=8)
    checked = [r for r in rows if r[4] is not None]
    assert len(checked) > 100 and max(r[4] for r in checked) < 1e-8
    limits = [r for r in rows if r[4] is None]
    assert all(r[2].startswith("raises ") and r[3] == "-" for r in limits)  # no error of 0 printed for them
    assert main(["tour", "-T", "8"]) == 0
    out = capsys.readouterr().out
    assert f"{len(checked)} operations checked" in out and f"{len(limits)} documented limit" in out


def test_tour_refuses_a_length_below_one(capsys):
    with pytest.raises(SystemExit):
        main(["tour", "-T", "0"])
    err = capsys.readouterr().err
    assert "usage: python -m structmat tour" in err and "-T must be at least 1; got 0" in err
