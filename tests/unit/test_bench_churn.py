"""The churn scenario's pure parts: who is away when, and what the samples say.

Goal: consumer 0 never leaves; from the first period on exactly one other
consumer is away, round robin, so each boundary is one leave and one rejoin;
drain episodes and the row's figures come out of the samples and the
consumers' rejoin waits as documented.
Method: direct calls with hand-built samples; no broker.
"""

from __future__ import annotations

import pytest

from benchmarks.keybus_churn import Sample, churn_figures, detached, drain_episodes, schedule


def test_one_consumer_other_than_the_first_is_away_per_period() -> None:
    away = [[i for i in range(4) if detached(i, 4, t + 0.5, 2.0)] for t in (0, 2, 4, 6, 8)]
    assert away == [[], [1], [2], [3], [1]]
    assert not any(detached(0, 4, t / 10, 1.0) for t in range(100))
    assert not detached(0, 1, 5.0, 1.0)  # a lone consumer never leaves
    assert not detached(1, 2, 0.99, 1.0) and detached(1, 2, 1.0, 1.0) and detached(1, 2, 2.5, 1.0)


def test_schedule_lists_each_boundary_rejoin_first() -> None:
    assert schedule(4, 2.0, 6.5) == [(2.0, 1, "leave"), (4.0, 1, "join"), (4.0, 2, "leave"),
                                     (6.0, 2, "join"), (6.0, 3, "leave")]
    assert schedule(1, 1.0, 10.0) == []
    # with two consumers, consumer 1 leaves at the first boundary and stays away
    assert schedule(2, 1.0, 3.5) == [(1.0, 1, "leave")]


def _s(at: float, draining: int, waiting: int = 0, events: int = 0) -> Sample:
    return Sample(at, 4, waiting, events, draining)


def test_drain_episodes_run_from_first_draining_sample_to_the_first_clear_one() -> None:
    samples = [_s(0.0, 0), _s(0.1, 3), _s(0.2, 1), _s(0.3, 0), _s(0.4, 0), _s(0.5, 2), _s(0.6, 2)]
    assert drain_episodes(samples) == pytest.approx([0.2, 0.1])  # the last one is still open
    assert drain_episodes([]) == [] and drain_episodes([_s(0, 0), _s(1, 0)]) == []


def test_churn_figures_summarize_rejoin_waits_and_samples() -> None:
    samples = [_s(0.0, 0, 10, 500), _s(0.02, 4, 90, 20_000), _s(0.04, 0, 5, 100)]
    figures = churn_figures(samples, [40.0, 10.0, 95.5], changes=6)
    assert figures["membership_changes"] == 6 and figures["rejoins"] == 3
    assert figures["join_wait_p50_ms"] == 40.0 and figures["join_wait_max_ms"] == 95.5
    assert figures["describe_draining_episodes_ms"] == [20.0]
    assert figures["waiting_slots_max"] == 90 and figures["waiting_events_max"] == 20_000
    assert figures["draining_slots_max"] == 4 and figures["describe_samples"] == 3
    empty = churn_figures([], [], changes=0)
    assert empty["join_wait_p50_ms"] is None and empty["waiting_events_max"] == 0
