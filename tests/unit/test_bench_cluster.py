"""The cluster benchmark's pure parts: lag summary, median, the RESULTS.md block.

Method: worked examples with a report shaped like a real run's.
"""

from __future__ import annotations

import math

from benchmarks.cluster import median, render, summarize_lags


def test_lags_and_median() -> None:
    assert summarize_lags([]) == {"lag_events_max": 0, "lag_events_median": 0}
    assert summarize_lags([0, 10, 4]) == {"lag_events_max": 10, "lag_events_median": 4}
    assert median([3.0, 1.0, 2.0, 10.0, 2.5]) == 2.5 and math.isnan(median([]))


def test_render_names_the_machine_load_and_every_figure() -> None:
    report = {
        "command": "python -m benchmarks cluster --kills 5",
        "machine": {"date": "2026-01-01", "nproc": 2, "cpu": "cpu", "python": "3.11",
                    "load_before": "1.0 1.0 1.0", "load_after": "2.0 1.0 1.0"},
        "results": [
            {"scenario": "produce, acks=2", "events": 1000, "events_per_s": 500,
             "lag_events_max": 30, "lag_events_median": 2, "seconds": 2.0},
            {"scenario": "time without a leader", "kills": 5, "without_leader_s_median": 2.1,
             "without_leader_s_min": 1.9, "without_leader_s_max": 2.4,
             "without_leader_s": [1.9, 2.0, 2.1, 2.2, 2.4]},
        ]}
    text = render(report)
    assert "load average 1.0 1.0 1.0 before" in text and "shared" in text
    assert "| produce, acks=2 | 1,000 | 500 | 30 / 2 | 2.0 |" in text
    assert "median **2.1 s**" in text and "5 kills" in text
