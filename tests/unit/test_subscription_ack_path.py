"""The broker's ack path: many short ranges per Ack message, handled per batch.

Goal: with 4 Key_Shared consumers, every Ack message carries hundreds of
one- or two-offset ranges. The helpers that take them must answer exactly
like plain sets while doing per-message (not per-range-times-state) work:
`Cursor.ack_ranges` merges a whole message in one pass, `is_range_acked`
answers without listing gaps, `discard_in_ranges` drops a consumer's unacked
offsets, and the manager's range check accepts sorted ranges as they are
and still sorts, merges and refuses what is out of order or out of range.

Method: hypothesis properties against set models (many ranges per call, in
any order, overlapping, touching, empty, below the mark-delete), and worked
examples for the range check's refusals.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import BrokerError
from broker.subscription.consumer_state import discard_in_ranges
from broker.subscription.cursor import Cursor
from broker.subscription.manager import SubscriptionManager

HORIZON = 200
RANGES = st.lists(st.tuples(st.integers(0, HORIZON), st.integers(0, 12)), max_size=40).map(
    lambda pairs: [(start, start + n) for start, n in pairs])


def model_ack(acked: set[int], ranges: list[tuple[int, int]]) -> int:
    new = {o for start, stop in ranges for o in range(start, stop)} - acked
    acked |= new
    return len(new)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 50), st.lists(RANGES, min_size=1, max_size=6))
def test_batch_acks_match_a_set(mark_delete: int, messages: list[list[tuple[int, int]]]) -> None:
    cursor = Cursor(mark_delete)
    acked = set(range(mark_delete))
    for ranges in messages:
        assert cursor.ack_ranges(ranges) == model_ack(acked, ranges)
        stored = cursor.acked_ranges()
        assert all(stop < start for (_, stop), (start, _) in itertools.pairwise(stored))
        assert not stored or stored[0][0] > cursor.mark_delete
        for offset in range(HORIZON + 14):
            assert cursor.is_acked(offset) == (offset in acked)
    assert Cursor.from_bytes(cursor.to_bytes()) == cursor


@settings(max_examples=300, deadline=None)
@given(RANGES, st.integers(0, HORIZON), st.integers(0, 20))
def test_is_range_acked_matches_a_set(ranges: list[tuple[int, int]], start: int,
                                      length: int) -> None:
    cursor = Cursor()
    acked: set[int] = set()
    cursor.ack_ranges(ranges)
    model_ack(acked, ranges)
    expected = all(o in acked for o in range(start, start + length))
    assert cursor.is_range_acked(start, start + length) == expected
    assert cursor.is_range_acked(start, start + length) == (
        not cursor.unacked_in(start, start + length))


def test_ack_ranges_refuses_bad_ranges_and_accepts_empty_ones() -> None:
    cursor = Cursor(5)
    assert cursor.ack_ranges([]) == 0
    assert cursor.ack_ranges([(7, 7)]) == 0
    assert cursor.ack_ranges([(1, 3)]) == 0  # below the mark-delete
    with pytest.raises(ValueError, match="invalid"):
        cursor.ack_ranges([(9, 10), (8, 6)])
    with pytest.raises(ValueError, match="invalid"):
        cursor.is_range_acked(4, 2)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, HORIZON), max_size=80), RANGES)
def test_discard_in_ranges_matches_a_set(held: set[int], ranges: list[tuple[int, int]]) -> None:
    ranges = sorted(ranges)
    table = {o: o % 7 for o in held}
    inside = {o for o in held if any(start <= o < stop for start, stop in ranges)}
    assert discard_in_ranges(table, ranges) == len(inside)
    assert set(table) == held - inside


def test_discard_walks_the_table_for_a_wide_range() -> None:
    table = {5: 1, 1_000_000: 2, 3: 0}
    assert discard_in_ranges(table, [(0, 999_999)]) == 2  # walks 3 keys, not 10^6 offsets
    assert table == {1_000_000: 2}
    assert discard_in_ranges({}, [(0, 5)]) == 0


def checked(ranges: list[tuple[int, int]], end: int = 100) -> list[tuple[int, int]]:
    dispatcher: Any = SimpleNamespace(partition=SimpleNamespace(end_offset=end), index=0)
    return SubscriptionManager._checked_ranges(dispatcher, ranges, "ack")


def test_range_check_accepts_sorted_ranges_as_they_are() -> None:
    ranges = [(1, 2), (2, 4), (9, 10)]  # touching ranges are fine downstream
    assert checked(ranges) is ranges


def test_range_check_sorts_merges_and_refuses() -> None:
    assert checked([(9, 10), (1, 3), (2, 5)]) == [(1, 5), (9, 10)]
    with pytest.raises(BrokerError):
        checked([])
    with pytest.raises(BrokerError):
        checked([(5, 5)])
    with pytest.raises(BrokerError):
        checked([(1, 2), (90, 101)])  # past the end offset
    with pytest.raises(BrokerError):
        checked([(3, 2), (1, 2)])
