"""Cursor: the mark-delete offset plus acknowledged ranges above it.

Goal: the cursor answers exactly like the set of acknowledged offsets it
stands for, keeps its ranges merged, and survives its persisted form.

Method: worked examples for each rule; a hypothesis RuleBasedStateMachine
that drives a `Cursor` and a plain `set` model with the same acks, seeks and
encode/decode round trips and compares every answer after each step; and
corruption cases for `from_bytes`.
"""

from __future__ import annotations

import itertools
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.subscription.cursor import Cursor, CursorDecodeError

HORIZON = 120  # offsets the model checks; acks reach a little past it


def test_new_cursor_has_everything_unacked() -> None:
    cursor = Cursor()
    assert cursor.mark_delete == 0
    assert cursor.backlog(10) == 10
    assert cursor.unacked_in(0, 10) == [(0, 10)]
    assert not cursor.is_acked(0)


def test_ranges_merge_and_advance_the_mark_delete() -> None:
    cursor = Cursor()
    assert cursor.ack_ranges([(5, 7), (9, 10)]) == 3
    assert cursor.acked_ranges() == [(5, 7), (9, 10)]
    assert cursor.ack_ranges([(7, 9)]) == 2  # bridges both: one range 5..10
    assert cursor.acked_ranges() == [(5, 10)]
    assert cursor.mark_delete == 0
    assert cursor.ack_ranges([(0, 5)]) == 5  # touches the mark-delete: absorbed
    assert cursor.mark_delete == 10
    assert cursor.acked_ranges() == []


def test_acks_below_mark_delete_are_ignored() -> None:
    cursor = Cursor(100)
    assert cursor.ack_ranges([(3, 50), (99, 100)]) == 0
    assert cursor.ack_ranges([(90, 103)]) == 3  # only the part above counts
    assert cursor.mark_delete == 103
    assert cursor.ack_cumulative(50) == 0
    assert cursor.mark_delete == 103


def test_overlapping_and_repeated_acks_count_once() -> None:
    cursor = Cursor()
    assert cursor.ack_ranges([(10, 20), (15, 25), (10, 20)]) == 15
    assert cursor.ack_ranges([(12, 13)]) == 0
    assert cursor.acked_ranges() == [(10, 25)]
    assert cursor.ack_ranges([(4, 4)]) == 0  # empty range


def test_ack_cumulative_swallows_ranges_below_it() -> None:
    cursor = Cursor()
    cursor.ack_ranges([(3, 4), (6, 8), (20, 30)])
    assert cursor.ack_cumulative(7) == 5  # offsets 0..6 less 3 and 6, acked before
    assert cursor.mark_delete == 8
    assert cursor.acked_ranges() == [(20, 30)]


def test_unacked_in_and_backlog() -> None:
    cursor = Cursor(2)
    cursor.ack_ranges([(4, 6), (8, 9)])
    assert cursor.unacked_in(0, 12) == [(2, 4), (6, 8), (9, 12)]
    assert cursor.unacked_in(5, 8) == [(6, 8)]
    assert cursor.unacked_in(4, 6) == []
    assert cursor.unacked_in(0, 2) == []
    assert cursor.backlog(12) == 2 + 2 + 3
    assert cursor.backlog(1) == 0


def test_seek_resets_both_ways() -> None:
    cursor = Cursor()
    cursor.ack_ranges([(0, 3), (10, 20)])
    cursor.seek(15)
    assert cursor.mark_delete == 15
    assert cursor.acked_ranges() == []
    assert cursor.is_acked(14) and not cursor.is_acked(15) and not cursor.is_acked(16)
    cursor.seek(1)
    assert cursor.backlog(20) == 19


@pytest.mark.parametrize("bad", [(-1, 3), (5, 4)])
def test_bad_ranges_are_refused(bad: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="invalid"):
        Cursor().ack_ranges([bad])


def test_bad_offsets_are_refused() -> None:
    with pytest.raises(ValueError):
        Cursor(-1)
    with pytest.raises(ValueError):
        Cursor().seek(-5)
    with pytest.raises(ValueError):
        Cursor().ack_cumulative(-1)
    with pytest.raises(ValueError):
        Cursor().unacked_in(5, 2)


def test_round_trip_is_compact() -> None:
    cursor = Cursor(1_000_000)
    cursor.ack_ranges([(1_000_002, 1_000_003), (1_000_010, 1_000_500)])
    data = cursor.to_bytes()
    assert Cursor.from_bytes(data) == cursor
    # version + 3-byte mark-delete + count + 2 one/two-byte deltas each + crc
    assert len(data) <= 1 + 3 + 1 + 2 * 3 + 4


def test_equality_and_repr() -> None:
    assert Cursor(3) == Cursor(3)
    assert Cursor(3) != Cursor(4)
    assert Cursor() != "cursor"
    assert "mark_delete=3" in repr(Cursor(3))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda data: data[:3], "too short"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "checksum"),
        (lambda data: bytes([9]) + data[1:], "checksum"),
    ],
)
def test_corrupt_bytes_are_refused(mutate: object, message: str) -> None:
    data = Cursor(7).to_bytes()
    with pytest.raises(CursorDecodeError, match=message):
        Cursor.from_bytes(mutate(data))  # type: ignore[operator]


def _sealed(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


def test_unknown_version_truncation_and_trailing_bytes_are_refused() -> None:
    with pytest.raises(CursorDecodeError, match="version 2"):
        Cursor.from_bytes(_sealed(bytes([2, 0, 0])))
    with pytest.raises(CursorDecodeError, match="truncated"):
        Cursor.from_bytes(_sealed(bytes([1, 0x80])))
    with pytest.raises(CursorDecodeError, match="trailing"):
        Cursor.from_bytes(_sealed(bytes([1, 0, 0, 0])))


@given(st.integers(0, 2**62), st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 300))))
def test_round_trip_property(mark_delete: int, ranges: list[tuple[int, int]]) -> None:
    cursor = Cursor(mark_delete)
    cursor.ack_ranges((mark_delete + start, mark_delete + start + n) for start, n in ranges)
    assert Cursor.from_bytes(cursor.to_bytes()) == cursor


class CursorMachine(RuleBasedStateMachine):
    """Drive a Cursor and a set of acked offsets together; compare everything."""

    def __init__(self) -> None:
        super().__init__()
        self.cursor = Cursor()
        self.acked: set[int] = set()

    @rule(ranges=st.lists(st.tuples(st.integers(0, HORIZON), st.integers(0, 15)), max_size=4))
    def ack_ranges(self, ranges: list[tuple[int, int]]) -> None:
        expected = set()
        for start, n in ranges:
            expected |= set(range(start, start + n))
        newly = self.cursor.ack_ranges((start, start + n) for start, n in ranges)
        assert newly == len(expected - self.acked)
        self.acked |= expected

    @rule(stop=st.integers(0, HORIZON))
    def ack_cumulative(self, stop: int) -> None:
        newly = self.cursor.ack_cumulative(stop)
        assert newly == len(set(range(stop)) - self.acked)
        self.acked |= set(range(stop))

    @rule(offset=st.integers(0, HORIZON))
    def seek(self, offset: int) -> None:
        self.cursor.seek(offset)
        self.acked = set(range(offset))

    @rule()
    def round_trip(self) -> None:
        self.cursor = Cursor.from_bytes(self.cursor.to_bytes())

    @rule(start=st.integers(0, HORIZON + 20), n=st.integers(0, 40))
    def unacked_in(self, start: int, n: int) -> None:
        got = self.cursor.unacked_in(start, start + n)
        expected = [o for o in range(start, start + n) if o not in self.acked]
        assert [o for first, stop in got for o in range(first, stop)] == expected
        assert all(stop > first for first, stop in got)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(got))  # merged

    @invariant()
    def matches_model(self) -> None:
        cursor = self.cursor
        mark_delete = 0
        while mark_delete in self.acked:
            mark_delete += 1
        assert cursor.mark_delete == mark_delete
        end = HORIZON + 20
        assert [o for o in range(end) if cursor.is_acked(o)] == sorted(
            o for o in self.acked if o < end)
        assert cursor.backlog(end) == end - len([o for o in self.acked if o < end])
        ranges = cursor.acked_ranges()
        assert all(start > mark_delete for start, _ in ranges)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


TestCursorMachine = CursorMachine.TestCase
TestCursorMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
