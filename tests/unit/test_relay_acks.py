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
    tracker: AckTracker[str] = AckTracker(2)  # no grace: a closed stream counts no more
    first, second, again = object(), object(), object()
    tracker.attach("b", first)
    tracker.attach("b", again)  # a reconnect: the old stream not yet seen to close
    assert tracker.following(0) == 1
    tracker.attach("c", second)
    assert tracker.following(0) == 2 and tracker.filled
    tracker.detach(first, 0)
    assert tracker.following(0) == 2  # "b" still reports on its new stream
    tracker.detach(second, 0)
    assert tracker.following(0) == 1


def test_too_few_followers_refuse_once_they_filled_or_the_attach_time_is_over() -> None:
    tracker: AckTracker[str] = AckTracker(2)
    tracker.attach("b", object())
    assert not tracker.short_of_followers(0, led_ms=999, attach_ms=1000)  # still attaching
    assert tracker.short_of_followers(0, led_ms=1000, attach_ms=1000)
    stream = object()
    tracker.attach("c", stream)
    assert not tracker.short_of_followers(0, led_ms=5000, attach_ms=1000)  # behind counts
    tracker.detach(stream, 0)
    assert tracker.short_of_followers(0, led_ms=0, attach_ms=1000)  # they had all attached


def test_acks_zero_never_refuses() -> None:
    assert not AckTracker[str](0).short_of_followers(10**9, led_ms=10**9, attach_ms=0)


# A follower whose stream closed follows on for its grace (rule 4, Kafka's
# replica.lag.time.max.ms): a token expiry or a blip must not refuse produce.

def test_a_follower_whose_stream_closed_follows_for_its_grace() -> None:
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=5_000)
    stream = object()
    tracker.attach("b", stream)
    tracker.detach(stream, now_ms=10_000)  # its token expired: the stream ended
    assert tracker.following(10_000) == 1 and tracker.in_grace(10_000) == ["b"]
    assert not tracker.short_of_followers(14_999, led_ms=60_000, attach_ms=1000)
    assert tracker.following(14_999) == 1


def test_a_follower_gone_for_good_stops_counting_after_its_grace() -> None:
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=5_000)
    stream = object()
    tracker.attach("b", stream)
    tracker.detach(stream, now_ms=10_000)
    assert tracker.following(15_000) == 0 and tracker.in_grace(15_000) == []
    assert tracker.short_of_followers(15_000, led_ms=60_000, attach_ms=1000)


def test_a_follower_back_within_its_grace_follows_on_its_new_stream() -> None:
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=5_000)
    old, new = object(), object()
    tracker.attach("b", old)
    tracker.detach(old, now_ms=10_000)
    tracker.attach("b", new)  # reopened with a renewed token
    assert tracker.in_grace(10_100) == [] and tracker.following(60_000) == 1
    tracker.detach(new, now_ms=60_000)  # a later close starts a grace of its own
    assert tracker.following(64_999) == 1 and tracker.following(65_000) == 0


def test_a_stream_closing_while_another_is_open_starts_no_grace() -> None:
    tracker: AckTracker[str] = AckTracker(2, follower_grace_ms=5_000)
    old, new, other = object(), object(), object()
    tracker.attach("b", old)
    tracker.attach("b", new)  # reconnected before the old stream was seen to close
    tracker.attach("c", other)
    tracker.detach(old, now_ms=0)
    assert tracker.in_grace(0) == [] and tracker.following(10**6) == 2
    tracker.detach(other, now_ms=0)
    assert tracker.in_grace(1) == ["c"] and tracker.following(1) == 2


def test_a_grace_counts_each_follower_once() -> None:
    tracker: AckTracker[str] = AckTracker(2, follower_grace_ms=5_000)
    first, second = object(), object()
    tracker.attach("b", first)
    tracker.detach(first, now_ms=0)
    tracker.detach(first, now_ms=1_000)  # seen closing twice: the grace is from the first
    tracker.attach("b", second)
    tracker.detach(second, now_ms=2_000)
    assert tracker.following(2_000) == 1
    assert tracker.short_of_followers(2_000, led_ms=60_000, attach_ms=1000)


@given(grace=st.integers(0, 100),
       steps=st.lists(st.tuples(st.booleans(), st.sampled_from("bc"), st.integers(0, 2),
                                st.integers(0, 50)), max_size=30))
def test_following_matches_the_definition(grace: int, steps: list[tuple[bool, str, int, int]]
                                          ) -> None:
    """Counted: a follower with an open stream, or whose last open one closed less than
    `grace` ago (time moves forward through the steps)."""
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=grace)
    streams = {(f, i): object() for f in "bc" for i in range(3)}
    open_: set[tuple[str, int]] = set()
    closed_at: dict[str, int] = {}
    now = 0
    for opens, follower, index, wait in steps:
        now += wait
        if opens:
            tracker.attach(follower, streams[follower, index])
            open_.add((follower, index))
            closed_at.pop(follower, None)
        else:
            stream = streams[follower, index]
            was_open = (follower, index) in open_
            tracker.detach(stream, now)
            open_.discard((follower, index))
            if was_open and not any(f == follower for f, _ in open_):
                closed_at[follower] = now
        expected = {f for f, _ in open_} | {f for f, at in closed_at.items() if now - at < grace}
        assert tracker.following(now) == len(expected)


# Rule 6: each change of who follows is reported once (the leader logs it, as
# Kafka's "Shrinking ISR" / "Expanding ISR"); a return within the grace is none.

def test_following_changes_report_each_change_once() -> None:
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=5_000)
    first, second = object(), object()
    tracker.attach("b", first)
    assert tracker.following_changes(0) == [("b", True)]
    assert tracker.following_changes(1) == []  # asked again (each report): no change
    tracker.detach(first, now_ms=10_000)
    assert tracker.following_changes(14_999) == []  # in its grace: still follows
    assert tracker.following_changes(15_000) == [("b", False)]
    assert tracker.following_changes(20_000) == []
    tracker.attach("b", second)
    assert tracker.following_changes(20_001) == [("b", True)]


def test_a_follower_back_within_its_grace_never_changed() -> None:
    tracker: AckTracker[str] = AckTracker(2, follower_grace_ms=5_000)
    old, new, other = object(), object(), object()
    tracker.attach("c", other)
    tracker.attach("b", old)
    assert tracker.following_changes(0) == [("b", True), ("c", True)]
    tracker.detach(old, now_ms=1_000)
    tracker.attach("b", new)
    tracker.detach(other, now_ms=1_000)
    assert tracker.following_changes(10_000) == [("c", False)]


def test_grace_left_counts_down_from_the_close_and_is_zero_when_connected() -> None:
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=5_000)
    stream = object()
    tracker.attach("b", stream)
    assert tracker.grace_left_ms("b", 0) == 0 and tracker.grace_left_ms("x", 0) == 0
    tracker.detach(stream, now_ms=10_000)
    assert tracker.grace_left_ms("b", 11_800) == 3_200
    assert tracker.grace_left_ms("b", 14_999.5) == 1  # still in it: never shown as 0
    assert tracker.grace_left_ms("b", 15_000) == 0
    tracker.attach("b", object())
    assert tracker.grace_left_ms("b", 12_000) == 0


def test_state_tells_a_connected_follower_from_one_in_grace_and_one_gone() -> None:
    """DescribeCluster's ReplicaInfo.state: a follower gone for good is "stopped"
    (since when), never shown like a connected one (both had grace_left_ms 0)."""
    tracker: AckTracker[str] = AckTracker(1, follower_grace_ms=5_000)
    gone, kept, other = object(), object(), object()
    tracker.attach("b", gone)
    tracker.attach("c", kept)
    assert tracker.state("b", 0) == ("following", 0) and tracker.state("x", 0) == ("", 0)
    tracker.detach(gone, now_ms=10_000)
    assert tracker.state("b", 11_800) == ("in_grace", 3_200)
    tracker.detach(other, now_ms=40_000)  # another stream's close keeps b's time
    assert tracker.state("b", 42_500) == ("stopped", 27_500)
    assert tracker.state("c", 42_500) == ("following", 0)
    tracker.attach("b", object())
    assert tracker.state("b", 43_000) == ("following", 0)
