"""Goal: the A/B of the broker's event loop (benchmarks/stages_ab.py) reads the figures a
stages run reports and says a change is beyond the noise only when it is larger than
the spread of either side's runs.

Method: hand-made stages reports and runs with known answers.
"""

from __future__ import annotations

import pytest

from benchmarks import stages_ab


def report(loop: float, dispatcher: float | None = None) -> dict:
    tasks = [] if dispatcher is None else [
        {"task": "supervise:dispatcher", "us_per_commit": dispatcher},
        {"task": "Partition.wait_for_data", "us_per_commit": 4.0},
        {"task": "**the loop in all**", "us_per_commit": loop}]
    return {"runs": [{"loop_cpu": [{"step": "X._submit", "us_per_commit": 40.0},
                                   {"step": "**the loop in all**", "us_per_commit": loop}],
                      "task_cpu": tasks, "total": {"p50_ms": 1.7, "p99_ms": 5.4}}]}


def test_a_runs_figures_are_the_loop_per_commit_its_main_tasks_and_latency() -> None:
    assert stages_ab.figures(report(836.2, 326.4)) == {
        "loop": 836.2, "p50_ms": 1.7, "p99_ms": 5.4, "supervise:dispatcher": 326.4}
    assert "supervise:dispatcher" not in stages_ab.figures(report(836.2))  # an older version


def test_a_change_counts_only_beyond_both_sides_spread() -> None:
    base = [{"loop": 815.0}, {"loop": 894.0}, {"loop": 862.0}]
    noise = stages_ab.compare(base, [{"loop": 860.0}, {"loop": 823.0}, {"loop": 837.0}])
    (row,) = noise["rows"]
    assert row["base"] == 857.0 and row["head"] == 840.0
    assert row["change_pct"] == -2.0 and row["spread"] == 79.0 and not row["beyond_spread"]
    cut = stages_ab.compare(base, [{"loop": 700.0}, {"loop": 690.0}, {"loop": 710.0}])
    assert cut["rows"][0]["beyond_spread"]


def test_figures_one_side_lacks_are_left_out() -> None:
    base = [{"loop": 800.0, "p50_ms": 1.0}]
    head = [{"loop": 790.0, "p50_ms": 1.1, "supervise:dispatcher": 300.0}]
    result = stages_ab.compare(base, head)
    assert [r["figure"] for r in result["rows"]] == ["loop", "p50_ms"]
    text = stages_ab.render(stages_ab.parse_args(["--base", "HEAD~1"]), base, head, result)
    assert "| base 1 | 800.0 | 1.0 |" in text and "| loop | 800.0 | 790.0 | -1.2% |" in text


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        stages_ab.parse_args(["--base", "HEAD", "--pairs", "0"])
    assert "must be positive" in capsys.readouterr().err
