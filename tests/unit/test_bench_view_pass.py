"""Goal: `python -m benchmarks view-pass` runs its two settings over real passes
and prints one row per run. Method: its main with one small pass per setting."""

from __future__ import annotations

import pytest

from benchmarks import view_pass


def test_a_short_run_prints_both_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert view_pass.main(["--pass-events", "600", "--passes", "1", "--repeats", "1",
                           "--slice", "64"]) == 0
    table = capsys.readouterr().out
    assert "view-pass --pass-events 600" in table
    rows = [line for line in table.splitlines() if line.startswith("| one batch")
            or line.startswith("| slices of 64")]
    assert len(rows) == 2
