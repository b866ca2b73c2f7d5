"""Benchmark figures: percentiles, quantile points, summaries, workload limits.

Goal: every system's figures come from the same arithmetic, and it is right at
the edges (one sample, q = 0 and 100, zero events).
Method: direct calls with small inputs; hypothesis for the percentile rules.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.measurement import (
    CompareWorkload,
    Measurement,
    per_million,
    percentile,
    quantile_points,
    summarize,
)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([7.0], 99) == 7.0


def test_percentile_rejects_no_values_and_bad_q() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=200), st.floats(0, 100),
       st.floats(0, 100))
def test_percentile_is_a_sample_and_grows_with_q(values: list[float], q1: float, q2: float) -> None:
    ordered = sorted(values)
    low, high = sorted((q1, q2))
    assert percentile(ordered, low) in ordered
    assert percentile(ordered, low) <= percentile(ordered, high)


def test_quantile_points_end_at_the_maximum_and_rise() -> None:
    ordered = [float(v) for v in range(1000)]
    points = quantile_points(ordered, points=10)
    assert points[-1] == (100.0, 999.0)
    assert [q for q, _ in points] == sorted(q for q, _ in points)
    assert [v for _, v in points] == sorted(v for _, v in points)
    assert quantile_points([]) == []


def test_summarize_gives_rates_cpu_per_million_and_latency() -> None:
    m = Measurement(system="X", scenario="latency", events=2_000_000, seconds=4.0, client_cpu_s=3.0,
                    server_cpu_s=1.0, value_bytes=100, consumers=4,
                    latencies_ms=[float(v) for v in range(1, 101)])
    row = summarize(m)
    assert row["events_per_s"] == 500_000
    assert row["mb_per_s"] == 50.0
    assert row["cpu_s_per_m_client"] == 1.5
    assert row["cpu_s_per_m_server"] == 0.5
    # percentiles from the HdrHistogram: exact to its 3 significant digits (0.1%)
    for name, expected in (("p50_ms", 50.0), ("p99_ms", 99.0), ("p999_ms", 100.0)):
        assert expected <= row[name] <= expected * 1.001, name
    assert row["max_ms"] == 100.0 and row["latency_histogram"].startswith("HIST")
    assert "latencies_ms" not in row and row["latency_samples"] == 100


def test_summarize_without_latencies_or_events() -> None:
    row = summarize(Measurement("X", "produce", events=0, seconds=0.0, client_cpu_s=0.0,
                                server_cpu_s=0.0, value_bytes=100))
    assert row["events_per_s"] == 0 and "p99_ms" not in row
    assert row["cpu_s_per_m_client"] is None
    assert per_million(2.0, 1_000_000) == 2.0


@pytest.mark.parametrize(("field", "value", "message"), [
    ("value_bytes", 7, "8-byte send time"),
    ("events", 0, "events must be >= 1"),
    ("consumers", 0, "consumers must be >= 1"),
    ("duration_s", 0.0, "duration_s must be > 0"),
    ("deadline_s", -1.0, "deadline_s must be > 0"),
    ("key_shared_mode", "sticky", "allowed: consistent, auto_split"),
])
def test_workload_rejects_what_cannot_run(field: str, value: float | str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CompareWorkload(**{field: value})  # type: ignore[arg-type]
