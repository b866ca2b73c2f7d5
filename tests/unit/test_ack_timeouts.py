"""The pure rules of the client-timed ack timeout (sdk/ack_timeouts.py)."""

from __future__ import annotations

import pytest

from sdk.ack_timeouts import AckTimeouts


def test_what_outlives_the_timeout_expires_once_with_its_slots() -> None:
    t = AckTimeouts(1000)
    t.taken(0, [5, 3, 4], [50, 30, 40], now_ms=0)
    t.taken(1, [7], [70], now_ms=10)
    assert t.next_deadline_ms() == 1000
    assert t.expired(999) == []
    assert t.expired(1000) == [(0, [3, 4, 5], [30, 40, 50])]
    assert t.next_deadline_ms() == 1010
    assert t.expired(5000) == [(1, [7], [70])]
    assert t.expired(9000) == [] and t.next_deadline_ms() is None and len(t) == 0


def test_acked_nacked_seeked_or_reconnected_events_do_not_expire() -> None:
    t = AckTimeouts(1000)
    t.taken(0, [1, 2, 3], [9, 9, 9], now_ms=0)
    t.taken(1, [1, 2], [8, 8], now_ms=0)
    t.taken(2, [1], [7], now_ms=0)
    t.forget(0, [2])
    t.forget_below(0, 2)  # cumulative: offset 1
    t.forget_partition(1)  # a seek
    assert t.expired(1000) == [(0, [3], [9]), (2, [1], [7])]
    t.taken(0, [4], [9], now_ms=2000)
    t.clear()  # a reconnect
    assert t.expired(10_000) == [] and t.next_deadline_ms() is None


def test_a_forgotten_take_does_not_hold_the_next_deadline() -> None:
    t = AckTimeouts(1000)
    t.taken(0, [1], [1], now_ms=0)
    t.taken(0, [2], [1], now_ms=500)
    t.forget(0, [1])
    assert t.next_deadline_ms() == 1500


def test_a_redelivery_taken_again_is_timed_from_the_new_take() -> None:
    t = AckTimeouts(1000)
    t.taken(0, [1], [1], now_ms=0)
    t.taken(0, [1], [1], now_ms=800)
    assert t.expired(1000) == []
    assert t.expired(1800) == [(0, [1], [1])]


def test_a_key_shared_nack_forgets_the_rest_of_its_slots() -> None:
    t = AckTimeouts(1000)
    t.taken(0, [1, 2, 3, 4], [5, 6, 5, 6], now_ms=0)
    t.forget_after(0, {5: 1})  # the broker takes back offset 3 with the nack of 1
    t.forget(0, [1])
    assert t.expired(1000) == [(0, [2, 4], [6, 6])]


def test_no_timeout_makes_no_tracker() -> None:
    with pytest.raises(ValueError, match="timeout_ms=0"):
        AckTimeouts(0)
