"""Goal: `python -m benchmarks view-pass` runs its three settings over real passes
and prints one row per run. Method: its main with one small pass per setting."""

from __future__ import annotations

import pytest

from benchmarks import view_pass


def test_a_short_run_prints_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert view_pass.main(["--pass-events", "600", "--passes", "1", "--repeats", "1",
                           "--slice", "64"]) == 0
    table = capsys.readouterr().out
    assert "view-pass --pass-events 600" in table
    names = [line.split(" | ")[0] for line in table.splitlines()[4:]]
    assert names == ["| one batch", "| slices of 64, sizes read", "| slices of 64"]
