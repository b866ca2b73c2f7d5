"""AckTracker: a produce is answered once `copies` followers hold it, not before.

Method: worked examples of each rule, and a hypothesis property comparing
the tracker with the definition (released exactly when the copies-th
highest reported position reaches the waiter's end, in end order).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.relay.acks import AckTracker


def test_copies_zero_acknowledges_at_once() -> None:
    tracker: AckTracker[str] = AckTracker(0)
    assert tracker.add(100, "x") and tracker.acked_end() is None


def test_released_when_enough_followers_hold_it() -> None:
    tracker: AckTracker[str] = AckTracker(2)
    assert not tracker.add(10, "first") and not tracker.add(20, "second")
    assert tracker.process_position("b", 25) == []  # one copy only
    assert tracker.process_position("c", 12) == ["first"]
    assert tracker.process_position("c", 30) == ["second"]
    assert tracker.add(20, "late")  # already held twice


def test_a_stale_report_does_not_move_a_position_back() -> None:
    tracker: AckTracker[str] = AckTracker(1)
    tracker.process_position("b", 30)
    assert tracker.process_position("b", 10) == [] and tracker.positions["b"] == 30


def test_drain_hands_back_every_waiter_in_end_order() -> None:
    tracker: AckTracker[str] = AckTracker(1)
    tracker.add(30, "c")
    tracker.add(10, "a")
    assert tracker.waiting == 2 and tracker.drain() == ["a", "c"] and tracker.waiting == 0


@given(copies=st.integers(1, 3), ends=st.lists(st.integers(1, 50), max_size=20),
       reports=st.lists(st.tuples(st.sampled_from("bcd"), st.integers(0, 60)), max_size=30))
def test_release_matches_the_definition(copies: int, ends: list[int],
                                        reports: list[tuple[str, int]]) -> None:
    tracker: AckTracker[int] = AckTracker(copies)
    pending = {i for i, end in enumerate(ends) if not tracker.add(end, i)}
    assert pending == set(range(len(ends)))  # nobody reported yet
    positions: dict[str, int] = {}
    released: list[int] = []
    for follower, end in reports:
        positions[follower] = max(positions.get(follower, -1), end)
        released += tracker.process_position(follower, end)
        held = sorted(positions.values(), reverse=True)
        acked = held[copies - 1] if len(held) >= copies else 0
        assert {i for i in range(len(ends)) if ends[i] <= acked} == set(released)
    assert [ends[i] for i in released] == sorted(ends[i] for i in released)


def test_a_follower_follows_while_a_stream_that_brought_its_report_is_open() -> None:
    tracker: AckTracker[str] = AckTracker(2)
    first, second, again = object(), object(), object()
    tracker.attach("b", first)
    tracker.attach("b", again)  # a reconnect: the old stream not yet seen to close
    assert tracker.following == 1
    tracker.attach("c", second)
    assert tracker.following == 2 and tracker.filled
    tracker.detach(first)
    assert tracker.following == 2  # "b" still reports on its new stream
    tracker.detach(second)
    assert tracker.following == 1


def test_too_few_followers_refuse_once_they_filled_or_the_grace_is_over() -> None:
    tracker: AckTracker[str] = AckTracker(2)
    tracker.attach("b", object())
    assert not tracker.short_of_followers(led_ms=999, grace_ms=1000)  # still attaching
    assert tracker.short_of_followers(led_ms=1000, grace_ms=1000)
    stream = object()
    tracker.attach("c", stream)
    assert not tracker.short_of_followers(led_ms=5000, grace_ms=1000)  # behind still counts
    tracker.detach(stream)
    assert tracker.short_of_followers(led_ms=0, grace_ms=1000)  # they had all attached


def test_acks_zero_never_refuses() -> None:
    assert not AckTracker[str](0).short_of_followers(led_ms=10**9, grace_ms=0)
