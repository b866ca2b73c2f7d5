"""Window planning (sdk/databus/window.py): source order, the split among members, barriers.

Goal: the rules of a window's callback sequence hold for any window: events
grouped by source in the declared order, undeclared sources left out, every
event to exactly one member and one key always to the same member, and
segments cut exactly where the seed puts barriers.
Method: examples for each rule, then hypothesis over random windows (source
and slot columns, broadcast or per event) and random call sequences.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.core.model import equal_splits
from sdk.databus.window import (
    BARRIER_AFTER,
    BARRIER_BEFORE,
    Call,
    EventsCall,
    Scn,
    WindowPiece,
    cut_segments,
    group_by_source,
    owner_table,
    plan_piece,
    split_members,
)


def piece(sources: list[str], slots: list[int] | None = None, schemas: list[str] | None = None,
          scn: int = 7, partition: int = 0) -> WindowPiece:
    count = len(sources) if len(sources) > 1 else len(slots or [0])
    return WindowPiece(partition, scn, 100 + count - 1, range(count), sources, schemas or [],
                       slots or [0] * count, payload="columns")


def names(segments: list) -> list[list[str]]:
    return [[call.name for call in segment.calls] for segment in segments]


def test_sources_in_declared_order_then_offset() -> None:
    groups = group_by_source(piece(["B", "A", "B", "A", "C"]), ("A", "B"))
    assert [(source, list(positions)) for source, _, positions in groups] == \
        [("A", [1, 3]), ("B", [0, 2])]


def test_no_declared_order_means_first_appearance() -> None:
    groups = group_by_source(piece(["B", "A", "B"]), None)
    assert [source for source, _, _ in groups] == ["B", "A"]


def test_broadcast_source_and_schema() -> None:
    whole = WindowPiece(0, 1, 3, range(4), ["orders"], ["v2"], [0] * 4, None)
    assert group_by_source(whole, ("orders",)) == [("orders", "v2", range(4))]
    assert group_by_source(whole, ("other",)) == []


def test_schema_of_a_source_is_its_first_events() -> None:
    groups = group_by_source(piece(["A", "B", "A"], schemas=["a1", "b1", "a2"]), ("A", "B"))
    assert [(s, schema) for s, schema, _ in groups] == [("A", "a1"), ("B", "b1")]


def test_owner_table_follows_equal_splits() -> None:
    for n in (1, 2, 3, 4, 7):
        table = owner_table(n)
        for member, hash_range in enumerate(equal_splits(n)):
            assert {table[s] for s in (hash_range.slot_first, hash_range.slot_last)} == {member}


def test_plan_of_one_source_window() -> None:
    segments = plan_piece(piece(["A"], slots=[1, 2, 3]), True, True, ("A",), owner_table(1), 1)
    assert names(segments) == [["on_start_window"], ["on_start_source", "on_event"],
                               ["on_end_source"], ["on_end_window"]]
    assert segments[0].calls[0].args == (Scn(7, 0),)


def test_plan_of_streamed_pieces_opens_and_closes_once() -> None:
    middle = plan_piece(piece(["A", "B"]), False, False, None, owner_table(1), 1)
    assert names(middle) == [["on_start_source", "on_event"], ["on_end_source"],
                             ["on_start_source", "on_event"], ["on_end_source"]]
    closing = plan_piece(WindowPiece(0, 7, 9, (), [], [], [], None), False, True, None,
                         owner_table(1), 1)
    assert names(closing) == [["on_end_window"]]


def test_scn_is_an_int_with_its_partition() -> None:
    scn = Scn(42, 3)
    assert scn == 42 and scn + 1 == 43 and scn.partition == 3
    assert repr(scn) == "Scn(42, partition=3)"
    import pickle

    assert pickle.loads(pickle.dumps(scn)).partition == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ABCD"), st.integers(0, 65535)), min_size=1,
                max_size=60),
       st.integers(1, 6), st.one_of(st.none(), st.permutations("ABCD").map(lambda p: p[:3])))
def test_every_event_once_to_the_owner_of_its_slot(events: list[tuple[str, int]], members: int,
                                                  order: tuple[str, ...] | None) -> None:
    sources = [s for s, _ in events]
    slots = [slot for _, slot in events]
    window = WindowPiece(0, 1, len(events) - 1, range(len(events)), sources, [], slots, None)
    owners = owner_table(members)
    segments = plan_piece(window, True, True, order, owners, members)
    seen: list[int] = []
    presented: list[str] = []
    for segment in segments:
        for call in segment.calls:
            if isinstance(call, EventsCall):
                presented.append(call.source)
                for member, positions in enumerate(call.slices):
                    assert list(positions) == sorted(positions)  # offset order
                    for i in positions:
                        assert sources[i] == call.source
                        assert owners[slots[i]] == member  # one key, one member
                        seen.append(i)
    wanted = [i for i, s in enumerate(sources) if order is None or s in order]
    assert sorted(seen) == wanted  # each event exactly once, undeclared ones left out
    if order is not None:
        assert presented == [s for s in order if s in presented]  # declared order
    assert len(presented) == len(set(presented))  # a source once per window


CALL_NAMES = sorted(BARRIER_BEFORE | BARRIER_AFTER | {"on_event"})


@given(st.lists(st.sampled_from(CALL_NAMES), min_size=1, max_size=30))
def test_segments_cut_exactly_at_barriers(call_names: list[str]) -> None:
    calls = [EventsCall("s", None, ((),)) if n == "on_event" else Call(n) for n in call_names]
    segments = cut_segments(calls)
    assert [c for segment in segments for c in segment.calls] == calls
    for segment in segments:  # no barrier inside a segment
        for before, after in pairwise(segment.calls):
            assert before.name not in BARRIER_AFTER and after.name not in BARRIER_BEFORE
    for left, right in pairwise(segments):  # one at every cut
        assert left.calls[-1].name in BARRIER_AFTER or right.calls[0].name in BARRIER_BEFORE


def test_split_members_single_member_keeps_positions() -> None:
    positions = range(5)
    assert split_members(positions, [], owner_table(1), 1) == (positions,)
