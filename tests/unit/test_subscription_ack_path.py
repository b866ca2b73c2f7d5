"""The broker's ack path: ranges in, one pass over what the consumer holds.

Goal: an Ack or Nack carries its ranges as one packed field (`bounds`) or
as OffsetRange messages (or both); `checked_ranges` accepts the SDK's
sorted, disjoint ranges as they are, and sorts, merges and refuses what is
out of order or out of range with a message naming the range and the limit;
then the core applies a whole message to the consumer's holding at once and
counts exactly the offsets that consumer holds (set model).

Method: worked examples of refusals; hypothesis properties against set
models with many short ranges per message (Key_Shared's common case: a
consumer's part of a record is one range per event or two).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.errors import BrokerError
from broker.subscription.core import CoreLimits, Kind, PartitionCore
from broker.subscription.cursor import Cursor
from broker.subscription.holdings import Taken
from broker.subscription.members import MemberSpec
from broker.subscription.ranges import checked_ranges, sent_ranges
from sdk.core.offset_ranges import bounds_of, ranges_of_bounds
from sdk.core.pb import keybus_pb2 as pb

HORIZON = 200


def checked(bounds: list[int], listed: list[tuple[int, int]] = (),  # type: ignore[assignment]
            end: int = 100) -> list[tuple[int, int]]:
    ranges = [pb.OffsetRange(start=a, stop=b) for a, b in listed]
    data = np.array(bounds, "<u8").tobytes()  # as any client may write them
    starts, stops = checked_ranges(ranges, data, end, 0, "ack")
    return list(zip(starts.tolist(), stops.tolist(), strict=True))


def test_sorted_ranges_pass_as_they_are() -> None:
    assert checked([1, 2, 4, 6, 9, 10]) == [(1, 2), (4, 6), (9, 10)]


def test_ranges_are_sorted_merged_and_refused() -> None:
    assert checked([9, 10], [(1, 3), (2, 5)]) == [(1, 5), (9, 10)]
    assert checked([1, 2, 2, 4]) == [(1, 4)]  # touching ranges merge
    with pytest.raises(BrokerError, match="no offset ranges given"):
        checked([])
    with pytest.raises(BrokerError, match=r"\[5, 5\) of partition 0 is invalid"):
        checked([5, 5])
    with pytest.raises(BrokerError, match="100 \\(the partition's end offset\\)"):
        checked([1, 2, 90, 101])
    with pytest.raises(BrokerError, match="holds 24 bytes"):
        checked([1, 2, 3])
    with pytest.raises(BrokerError, match="is invalid"):
        checked([0, 1 << 63])  # read as a negative int64
    with pytest.raises(BrokerError, match="beyond 2\\*\\*63"):
        checked([], [(0, 1 << 63)])
    many = [bound for k in range(12) for bound in (5 * k, 5 * k + 2)]  # checked with numpy
    assert checked(many) == [(5 * k, 5 * k + 2) for k in range(12)]
    many[15] = many[14]  # the eighth range empty
    with pytest.raises(BrokerError, match=r"\[35, 35\) of partition 0 is invalid"):
        checked(many)


RANGES = st.lists(st.tuples(st.integers(0, HORIZON), st.integers(1, 3)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(RANGES)
def test_checked_ranges_cover_exactly_what_was_asked(pairs: list[tuple[int, int]]) -> None:
    if not pairs:
        return
    flat = [v for a, n in pairs for v in (a, a + n)]
    got = checked(flat, end=HORIZON + 10)
    assert {o for a, b in got for o in range(a, b)} == {o for a, n in pairs
                                                         for o in range(a, a + n)}
    assert all(b < a for (_, b), (a, _) in itertools.pairwise(got))


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, HORIZON - 1), max_size=80), st.sets(st.integers(0, HORIZON - 1)))
def test_an_ack_counts_exactly_what_the_consumer_holds(held: set[int], acked: set[int]) -> None:
    core = PartitionCore(Kind.SHARED, 0, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("a"), 0)
    offsets = np.array(sorted(held), np.int64)
    core.members["a"].holding.add(Taken(offsets, np.zeros(len(offsets), np.int32),
                                        np.zeros(len(offsets), np.int32)), 0)
    counted = core.process_ack("a", *ranges_of_bounds(bounds_of(acked)))
    assert counted == len(held & acked)
    assert set(core.members["a"].holding.live().offsets.tolist()) == held - acked


def test_sent_ranges_ack_whole_record_parts_of_one_send() -> None:
    core = PartitionCore(Kind.SHARED, 0, 0, CoreLimits(), Cursor(0), 0)
    core.process_attach(MemberSpec("a"), 0)
    holding = core.members["a"].holding
    holding.add(Taken(np.array([1, 3], np.int64), np.zeros(2, np.int32),
                      np.zeros(2, np.int32)), 0, send=5)
    holding.add(Taken(np.array([2, 4], np.int64), np.zeros(2, np.int32),
                      np.zeros(2, np.int32)), 0, send=6)
    data = np.array([5, 0, 10], "<i8").tobytes()
    assert core.process_ack_sent("a", *sent_ranges(data, 100, 0)) == 2
    assert holding.live().offsets.tolist() == [2, 4]
    assert core.process_ack_sent("nobody", *sent_ranges(data, 100, 0)) == 0


def test_sent_ranges_are_checked() -> None:
    with pytest.raises(BrokerError, match="holds 16 bytes"):
        sent_ranges(bytes(16), 100, 0)
    with pytest.raises(BrokerError, match=r"sent range \[7, 7\) of partition 3 is invalid"):
        sent_ranges(np.array([1, 7, 7], "<i8").tobytes(), 100, 3)
    with pytest.raises(BrokerError, match="the partition's end offset"):
        sent_ranges(np.array([1, 7, 200], "<i8").tobytes(), 100, 3)
    with pytest.raises(BrokerError, match=r"sent range \[-4, 3\) of partition 3 is invalid"):
        sent_ranges(np.array([1, 5, 9, 2, -4, 3], "<i8").tobytes(), 100, 3)
    with pytest.raises(BrokerError, match=r"sent range \[90, 101\) of partition 3"):
        sent_ranges(np.array([1, 5, 9, 2, 90, 101], "<i8").tobytes(), 100, 3)
    assert [a.tolist() for a in sent_ranges(b"", 100, 3)] == [[], [], []]
    many = np.array([[send, 10 * send, 10 * send + 5] for send in range(12)], "<i8")
    many[7, 2] = 201  # past the end, in a field of many triples (checked with numpy)
    with pytest.raises(BrokerError, match=r"sent range \[70, 201\) of partition 3"):
        sent_ranges(many.tobytes(), 200, 3)
    many[7, 2] = 75
    assert sent_ranges(many.tobytes(), 200, 3)[2].tolist() == [10 * s + 5 for s in range(12)]
