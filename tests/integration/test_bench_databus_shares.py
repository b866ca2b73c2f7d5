"""Goal: `python -m benchmarks databus-shares` (Key_Shared Databus window shares, from
`send_window`'s due time to `on_end_window`, quoted in RESULTS.md) runs and measures
what it says: every window's shares presented, between the two consumers, with
ordered figures.

Method: a short run (8 windows of 10 events, 20 ms apart) against a real broker
process; the share count is bounded by the windows (each consumer presents a share
of a window at most once, and every window has at least one share).
"""

from __future__ import annotations

from benchmarks.databus_shares import measure, parse_args


def test_a_short_run_presents_every_window_and_orders_its_figures() -> None:
    figures = measure(parse_args(["--windows", "8", "--interval-ms", "20"]))
    assert 8 <= figures["shares"] <= 16
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
