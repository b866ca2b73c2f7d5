"""Goal: `python -m benchmarks memory` runs end to end on a small topic and prints its
table with what the dispatchers' caches hold; bad sizes are refused with one line.

Method: a real broker process, 4 partitions, 2 subscriptions of 2 stalled consumers.
"""

from __future__ import annotations

import pytest

from benchmarks import memory


def test_a_small_run_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.main(["--partitions", "4", "--subscriptions", "2", "--consumers", "2",
                        "--events", "400", "--settle-s", "0.5"]) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("| 4 |")]
    assert len(row) == 1 and "| 2 x 2 | 400 |" in row[0], out
    assert "not reported" not in row[0]  # the gauge is there


def test_bad_sizes_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.main(["--partitions", "0"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
