"""Goal: the latency benchmark's pure parts judge a run correctly: percentiles from the
HdrHistogram, warm-up values left out, and each issue-15 target met or not from the
run's own floor and peer figures (and "not measured" when a figure is missing).

Method: small hand-made reports and values with known answers.
"""

from __future__ import annotations

from typing import Any

from benchmarks import broker_metrics, floor, histogram, latency_report
from benchmarks.payload import latencies_ms, stamped_value


def test_histogram_figures_are_the_recorded_percentiles() -> None:
    hist = histogram.of_ms([float(v) for v in range(1, 1001)])  # 1..1000 ms
    figures = histogram.figures_ms(hist)
    assert figures["samples"] == 1000
    assert abs(figures["p50_ms"] - 500) <= 1 and abs(figures["p99_ms"] - 990) <= 1
    assert abs(figures["p999_ms"] - 999) <= 1 and abs(figures["max_ms"] - 1000) <= 1
    assert histogram.figures_ms(histogram.histogram()) == {"samples": 0}
    assert histogram.encoded(hist).startswith("HIST")


def test_values_due_in_the_warm_up_are_left_out() -> None:
    values = [stamped_value(16, 1_000_000), stamped_value(16, 3_000_000)]
    assert latencies_ms(values, 5_000_000) == [4.0, 2.0]
    assert latencies_ms(values, 5_000_000, sent_from_ns=2_000_000) == [2.0]


def _latency(system: str, rate: int, p50: float, p99: float) -> dict[str, Any]:
    return {"system": system, "scenario": "latency", "rate_per_s": rate, "p50_ms": p50,
            "p99_ms": p99}


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"results": rows, "floor": {"disk_fsync": {"p50_ms": 4.0, "p99_ms": 8.0}}}


def test_targets_use_the_same_runs_floor_and_redis() -> None:
    rows = [_latency("Keybus Key_Shared", 10_000, 5.5, 11.0),
            _latency("Keybus Key_Shared", 50_000, 9.0, 22.5),
            _latency("Keybus Key_Shared, --no-fsync", 10_000, 0.9, 3.0),
            _latency("Redis consumer group", 10_000, 0.5, 1.4),
            {"system": "Keybus", "scenario": "produce", "events_per_s": 500_000},
            {"system": "Redis Streams", "scenario": "produce", "events_per_s": 100_000}]
    found = {t["target"]: t for t in latency_report.targets(report(rows))}
    met = {name: t["met"] for name, t in found.items()}
    assert met["fsync, 10,000/s: p50 <= disk fsync p50 + 1.5 ms"] is True  # 5.5 <= 5.5
    assert met["fsync, 10,000/s: p99 <= disk fsync p99 + 3 ms"] is True  # 11 <= 11
    assert met["fsync, 50,000/s: p99 <= 2 x (disk fsync p99 + 3 ms)"] is False  # 22.5 > 22
    assert met["--no-fsync, 10,000/s: p50 <= 1 ms"] is True
    assert met["--no-fsync, 10,000/s: p99 <= 2 x Redis p99"] is False  # 3.0 > 2.8
    assert found["produce throughput, Keybus ÷ Redis (same run)"]["measured"] == 5.0
    assert found["consume throughput, Keybus ÷ Redis (same run)"]["measured"] is None


def test_an_fsync_stall_weighs_on_every_event_arriving_during_it() -> None:
    us = 1000  # spans are in ns
    spans = [(0, 100 * us), (100 * us, 1100 * us), (1100 * us, 1200 * us)]  # the middle stalls
    waits = floor.group_commit_waits_us(spans, 50)
    assert len(waits) == 23  # arrivals at 0, 50, ..., 1100 µs
    assert waits[:3] == [100, 1050, 1000]  # at 50 µs: wait out the stall, then the next fsync
    assert waits[3] == 1050 and waits[-1] == 100  # at 150 µs: the next fsync, after the stall
    assert sum(w > 200 for w in waits) == 19  # one slow fsync of three, most events slow
    assert floor.group_commit_waits_us(spans[:1], 50) == []


def test_the_ideal_group_commit_is_context_beside_the_targets() -> None:
    rows = [_latency("Keybus Key_Shared", 10_000, 5.5, 30.0)]
    with_group_commit = report(rows)
    with_group_commit["floor"]["disk_group_commit"] = {"p50_ms": 0.3, "p99_ms": 27.5}
    found = {t["target"]: t for t in latency_report.targets(with_group_commit)}
    context = found["context, not an issue target: fsync, 10,000/s: p99 <= ideal group commit "
                    "p99 + 3 ms"]
    assert context["met"] is True and context["limit"] == 30.5  # 30 <= 27.5 + 3
    assert found["fsync, 10,000/s: p99 <= disk fsync p99 + 3 ms"]["met"] is False  # 30 > 11
    assert not any(t["target"].startswith("context") for t in latency_report.targets(report(rows)))
    table = latency_report.floor_table({**with_group_commit["floor"], "disk_group_commit": {
        "p50_ms": 0.3, "p99_ms": 27.5, "what": "ideal group commit", "fsyncs": 20_000,
        "slowest_fsync_ms": 61.0}})
    assert "20,000 fsyncs, the slowest 61.00 ms" in table


def test_the_grpc_floor_is_judged_by_the_same_p50_limits_as_context() -> None:
    rows = [_latency("grpcio fan-out floor", 10_000, 0.8, 2.5),
            _latency("grpcio fan-out floor, fsync", 10_000, 5.6, 9.0)]
    found = {t["target"]: t for t in latency_report.targets(report(rows))}
    loose = found["context, not an issue target: the grpcio fan-out floor, 10,000/s: p50 <= 1 ms"]
    assert loose["met"] is True and loose["measured"] == 0.8
    fsync = found["context, not an issue target: the grpcio fan-out floor with fsync, "
                  "10,000/s: p50 <= disk fsync p50 + 1.5 ms"]
    assert fsync["met"] is False and fsync["limit"] == 5.5  # disk p50 4.0 + 1.5
    assert not any("floor" in t["target"] for t in latency_report.targets(report([])))


def test_the_event_loop_table_holds_the_python_servers_rows() -> None:
    rows = [{**_latency("Keybus Key_Shared", 10_000, 3.0, 9.0), "family": "Keybus",
             "server_main_thread": {"cores": 0.72, "cpu_s_per_m": 72.0}},
            {**_latency("grpcio fan-out floor", 10_000, 0.7, 2.0),
             "family": "grpcio fan-out floor",
             "server_main_thread": {"cores": 0.28, "cpu_s_per_m": 28.0}},
            {**_latency("NATS pull consumer", 10_000, 7.0, 30.0), "family": "NATS JetStream",
             "server_main_thread": {"cores": 0.01, "cpu_s_per_m": 1.0}}]
    table = latency_report.main_thread_table(rows)
    assert "| Keybus Key_Shared | 10,000 | 0.72 | 72.00 |" in table
    assert "| grpcio fan-out floor | 10,000 | 0.28 | 28.00 |" in table
    assert "NATS" not in table  # Go spreads its work over threads: its main thread says little


def test_a_missing_figure_is_not_measured_not_met() -> None:
    found = latency_report.targets(report([]))
    assert all(t["met"] is None for t in found)
    text = latency_report.targets_table(found)
    assert "not measured" in text and "**met**" not in text


def test_the_brokers_fsyncs_between_two_scrapes() -> None:
    def page(counts: list[int]) -> str:
        bounds = ["0.001", "0.01", "0.1", "+Inf"]
        lines = ["# HELP keybus_wal_fsync_seconds WAL fsyncs",
                 "# TYPE keybus_wal_fsync_seconds histogram"]
        lines += [f'keybus_wal_fsync_seconds_bucket{{le="{b}"}} {c}.0'
                  for b, c in zip(bounds, counts, strict=True)]
        lines += [f"keybus_wal_fsync_seconds_count {counts[-1]}.0",
                  "keybus_wal_fsync_seconds_sum 1.0"]
        return "\n".join(lines) + "\n"

    before = broker_metrics.fsync_buckets(page([5, 6, 6, 6]))
    assert before[float("inf")] == 6
    stalled = broker_metrics.fsyncs_between(before, broker_metrics.fsync_buckets(
        page([100, 102, 104, 104])))
    assert stalled == {"fsyncs": 98, "over_10ms": 2, "slowest_at_most_ms": 100.0}
    calm = broker_metrics.fsyncs_between(before, broker_metrics.fsync_buckets(
        page([49, 51, 51, 51])))  # one between 1 and 10 ms
    assert calm == {"fsyncs": 45, "over_10ms": 0, "slowest_at_most_ms": 10.0}
    past = broker_metrics.fsyncs_between(before, broker_metrics.fsync_buckets(
        page([5, 6, 6, 7])))  # longer than the last bound
    assert past == {"fsyncs": 1, "over_10ms": 1, "slowest_at_most_ms": None}
    assert broker_metrics.fsync_buckets("# nothing here\n") == {}
    table = latency_report.fsyncs_table([{**_latency("Keybus Key_Shared", 10_000, 3.0, 9.0),
                                          "wal_fsyncs": stalled}])
    assert "| Keybus Key_Shared | 10,000 | 98 | 2 | 100.00 |" in table


def test_the_brokers_garbage_collections_between_two_scrapes() -> None:
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    registry = CollectorRegistry()
    pauses = Histogram(broker_metrics.GC, "collections", ["generation"], registry=registry)

    def page() -> str:
        return generate_latest(registry).decode()

    pauses.labels("0").observe(0.0002)
    before = broker_metrics.gc_totals(page())
    for _ in range(3):
        pauses.labels("0").observe(0.0001)
    pauses.labels("1").observe(0.001)
    pauses.labels("2").observe(0.012)
    found = broker_metrics.gc_between(before, broker_metrics.gc_totals(page()))
    assert found == {"collections": 5, "full": 1, "ms": 13.3}
    assert broker_metrics.gc_totals("# nothing here\n") == {}
    table = latency_report.gc_table([{**_latency("Keybus Key_Shared", 10_000, 3.0, 9.0),
                                      "gc_pauses": found}])
    assert "| Keybus Key_Shared | 10,000 | 5 | 1 | 13.30 |" in table
