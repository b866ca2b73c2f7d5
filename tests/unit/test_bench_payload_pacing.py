"""Benchmark payloads and pacing: what every system carries and when it is sent.

Goal: a value is exactly `value_bytes` and carries its send time; keys are the
same for every system; batches respect the count, the duration and the rate.
Method: direct calls; hypothesis for the round trip and the batch split.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.measurement import CompareWorkload
from benchmarks.pacing import due_s, events_limit, next_batch_events, send_batch_events
from benchmarks.payload import key_sequence, latencies_ms, sent_ns_of, stamped_value


@given(st.integers(8, 4096), st.integers(0, 2**62))
def test_stamped_value_has_its_size_and_send_time(value_bytes: int, sent_ns: int) -> None:
    value = stamped_value(value_bytes, sent_ns)
    assert len(value) == value_bytes
    assert sent_ns_of(value) == sent_ns


def test_stamped_value_rejects_a_size_without_room_for_the_time() -> None:
    with pytest.raises(ValueError, match="out of range"):
        stamped_value(7, 0)


def test_latencies_are_milliseconds_from_send_to_arrival() -> None:
    values = [stamped_value(100, 1_000_000), stamped_value(100, 3_500_000)]
    assert latencies_ms(values, 5_000_000) == [4.0, 1.5]


def test_keys_are_the_same_for_every_run_and_in_range() -> None:
    assert key_sequence(10_000, 500) == key_sequence(10_000, 500)
    keys = key_sequence(10, 200_000)
    assert len(keys) == 100_000 and set(keys) == set(range(10))


def test_send_batch_is_a_full_batch_or_one_tick_at_the_rate() -> None:
    workload = CompareWorkload(batch_events=1_000, rate_per_s=10_000)
    assert send_batch_events(workload, paced=False) == 1_000
    assert send_batch_events(workload, paced=True) == 10
    assert send_batch_events(CompareWorkload(rate_per_s=100), paced=True) == 1


@given(st.integers(1, 5_000), st.integers(1, 700))
def test_batches_add_up_to_the_count(events: int, batch_events: int) -> None:
    workload = CompareWorkload(events=events, batch_events=batch_events)
    sent, sends = 0, 0
    while n := next_batch_events(sent, 0.0, workload, paced=False):
        assert 1 <= n <= batch_events
        sent, sends = sent + n, sends + 1
    assert sent == events and sends == -(-events // batch_events)


def test_duration_ends_a_throughput_run_but_not_a_paced_one() -> None:
    workload = CompareWorkload(events=1_000, duration_s=2.0, latency_events=50)
    assert next_batch_events(0, 2.0, workload, paced=False) == 0
    assert next_batch_events(0, 1.9, workload, paced=False) == 1_000
    assert next_batch_events(0, 2.0, workload, paced=True) == 10
    assert next_batch_events(50, 0.0, workload, paced=True) == 0
    assert events_limit(workload, paced=True) == 50


def test_sends_are_due_at_the_rate() -> None:
    assert due_s(0, 10_000) == 0.0
    assert due_s(25_000, 10_000) == 2.5
