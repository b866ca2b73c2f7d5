"""The persisted cursor: what is unacknowledged, and building it from a core's state.

Goal: a `Cursor` answers "unacknowledged?" exactly as the runs, floors and
horizon it holds say, and counts the acknowledged ranges between its runs
(what DescribeSubscription reports as `acked_ranges`: 0 with nothing acked
above the mark-delete, not the number of unacked runs); it survives its
persisted form (version 2) and still
reads version 1 (mark-delete plus acknowledged ranges) with the same answers;
corruption is refused with a message; `merge_cursor` never calls an
unacknowledged offset acknowledged, keeps a restart's knowledge beyond the
main read, and cuts at the named limit on runs by moving the horizon down.

Method: worked examples; hypothesis properties against a plain set model
(random unacked offsets, floors per slot, a horizon), encode/decode round
trips at every width; the legacy encoder kept here as a test helper.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.subscription.cursor import Cursor, CursorDecodeError
from broker.subscription.persist import merge_cursor
from sdk.core.offset_ranges import bounds_of, merge_ranges, ranges_of_bounds, runs_of

I64 = np.int64


def arrays(*values: list[int]) -> list[np.ndarray]:
    return [np.array(v, I64) for v in values]


def unacked_set(cursor: Cursor, end: int, slot_of: dict[int, int]) -> set[int]:
    offsets = np.arange(cursor.mark_delete, end, dtype=I64)
    slots = np.array([slot_of.get(o, 0) for o in offsets.tolist()], np.int32)
    mask = cursor.unacked_mask(offsets, slots)
    return set(offsets[mask].tolist())


def test_a_simple_cursor_has_everything_from_its_mark_delete_unacked() -> None:
    cursor = Cursor(10)
    assert cursor.is_simple and cursor.horizon == 10
    assert unacked_set(cursor, 15, {}) == {10, 11, 12, 13, 14}
    assert cursor.unacked_count(15) == 5 and cursor.unacked_count(5) == 0
    assert Cursor.from_bytes(cursor.to_bytes()) == cursor


def test_runs_floors_and_horizon_say_what_is_unacked() -> None:
    starts, stops, floor_slots, floor_offsets = arrays([10, 14], [12, 15], [7], [13])
    cursor = Cursor(10, 20, starts, stops, floor_slots, floor_offsets)
    slot_of = {16: 7, 12: 7, 17: 3}  # 16 is slot 7's, past its floor; 12 is before it
    assert unacked_set(cursor, 23, slot_of) == {10, 11, 14, 16, 20, 21, 22}
    assert not cursor.is_simple
    assert Cursor.from_bytes(cursor.to_bytes()) == cursor
    assert "floors={7: 13}" in repr(cursor)


def test_acked_ranges_are_the_gaps_between_unacked_runs() -> None:
    assert Cursor(10).acked_range_count() == 0  # nothing acknowledged above the mark-delete
    delivered = Cursor(0, 20, *arrays([0], [20]))  # 20 sent, none acked
    assert delivered.acked_range_count() == 0
    two_acked = Cursor(0, 20, *arrays([0, 6, 11], [5, 10, 20]))  # [5, 6) and [10, 11) acked
    assert two_acked.acked_range_count() == 2
    tail_acked = Cursor(0, 20, *arrays([0], [5]))  # [5, 20) acked, 20 on not yet read
    assert tail_acked.acked_range_count() == 1
    floored = Cursor(4, 20, *arrays([8], [9], [7], [12]))  # a floor does not split a gap
    assert floored.acked_range_count() == 2


def acked_runs_model(mark: int, horizon: int, unacked: set[int]) -> int:
    """Maximal ranges of acknowledged offsets in [mark, horizon), counted one by one."""
    count, inside = 0, False
    for offset in range(mark, horizon):
        acked = offset not in unacked
        count += acked and not inside
        inside = acked
    return count


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 50), st.sets(st.integers(0, 120), max_size=40), st.integers(0, 80))
def test_acked_ranges_match_a_set_model(mark: int, unacked: set[int], above: int) -> None:
    horizon = mark + above
    kept = {o for o in unacked if mark <= o < horizon}
    cursor = Cursor(mark, horizon, *runs_of(np.array(sorted(kept), I64)))
    assert cursor.acked_range_count() == acked_runs_model(mark, horizon, kept)
    assert Cursor.from_bytes(cursor.to_bytes()).acked_range_count() == cursor.acked_range_count()


def test_invalid_cursors_are_refused() -> None:
    with pytest.raises(ValueError, match="mark_delete -1 is invalid"):
        Cursor(-1)
    with pytest.raises(ValueError, match="horizon 3 is below mark_delete 5"):
        Cursor(5, 3)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 50), st.sets(st.integers(0, 120), max_size=40),
       st.dictionaries(st.integers(0, 5), st.integers(0, 130), max_size=4),
       st.integers(0, 80))
def test_round_trip_and_answers_match_a_set_model(mark: int, unacked: set[int],
                                                  floors: dict[int, int], above: int) -> None:
    horizon = mark + above
    kept = sorted(o for o in unacked if mark <= o < horizon)
    starts, stops = runs_of(np.array(kept, I64))
    floor_items = sorted((s, max(o, mark)) for s, o in floors.items() if o < horizon)
    cursor = Cursor(mark, horizon, starts, stops,
                    np.array([s for s, _ in floor_items], I64),
                    np.array([o for _, o in floor_items], I64))
    decoded = Cursor.from_bytes(cursor.to_bytes())
    assert decoded == cursor
    slot_of = {o: o % 6 for o in range(200)}
    expected = set(kept) | set(range(horizon, 150)) | {
        o for o in range(mark, horizon) if o % 6 in dict(floor_items)
        and o >= dict(floor_items)[o % 6]}
    assert unacked_set(decoded, 150, slot_of) == {o for o in expected if o >= mark}


def test_every_width_round_trips() -> None:
    for high in (5, 300, 70_000, 5_000_000_000):
        starts, stops = arrays([1, high], [2, high + 3])
        cursor = Cursor(0, high + 10, starts, stops)
        assert Cursor.from_bytes(cursor.to_bytes()) == cursor


def legacy_bytes(mark: int, acked: list[tuple[int, int]]) -> bytes:
    """Version 1 as the first subscriptions broker wrote it."""
    body = bytearray([1])
    for number in (mark, len(acked)):
        while number >= 0x80:
            body.append((number & 0x7F) | 0x80)
            number >>= 7
        body.append(number)
    previous = mark
    for start, stop in acked:
        for number in (start - previous - 1, stop - start - 1):
            body.append(number)
        previous = stop
    return bytes(body) + zlib.crc32(body).to_bytes(4, "big")


def test_version_1_cursors_still_read() -> None:
    cursor = Cursor.from_bytes(legacy_bytes(5, [(8, 10), (12, 13)]))
    assert cursor.mark_delete == 5 and cursor.horizon == 13
    assert unacked_set(cursor, 16, {}) == {5, 6, 7, 10, 11, 13, 14, 15}
    assert Cursor.from_bytes(legacy_bytes(9, [])) == Cursor(9)


def test_corrupt_records_are_refused() -> None:
    data = Cursor(3, 9, *arrays([4], [6])).to_bytes()
    with pytest.raises(CursorDecodeError, match="too short"):
        Cursor.from_bytes(b"\x02\x01")
    with pytest.raises(CursorDecodeError, match="checksum"):
        Cursor.from_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    body = bytes([9]) + data[1:-4]
    with pytest.raises(CursorDecodeError, match="version 9 is unknown"):
        Cursor.from_bytes(body + zlib.crc32(body).to_bytes(4, "big"))
    body = data[:-5]
    with pytest.raises(CursorDecodeError, match="expected"):
        Cursor.from_bytes(body + zlib.crc32(body).to_bytes(4, "big"))
    body = bytes([2, 3]) + data[2:-4]
    with pytest.raises(CursorDecodeError, match="width 3 is invalid"):
        Cursor.from_bytes(body + zlib.crc32(body).to_bytes(4, "big"))
    body = bytes([2, 1, 0x80])
    with pytest.raises(CursorDecodeError, match="truncated inside a varint"):
        Cursor.from_bytes(body + zlib.crc32(body).to_bytes(4, "big"))


# ---------------------------------------------------------------- merge_cursor


def test_merge_cursor_keeps_in_flight_runs_and_floors() -> None:
    cursor = merge_cursor(4, 20, np.array([4, 5, 9], I64), *arrays([3], [12]), None, 100)
    assert (cursor.mark_delete, cursor.horizon) == (4, 20)
    assert list(zip(cursor.run_starts.tolist(), cursor.run_stops.tolist(), strict=False)) == [(4, 6), (9, 10)]
    assert cursor.floor_slots.tolist() == [3] and cursor.floor_offsets.tolist() == [12]


def test_merge_cursor_keeps_a_restart_knowledge_past_the_main_read() -> None:
    restart = Cursor(0, 50, *arrays([10, 30], [12, 40], [5, 6], [2, 45]))
    cursor = merge_cursor(8, 35, np.array([8], I64), *arrays([5], [20]), restart, 100)
    assert cursor.horizon == 50 and cursor.mark_delete == 8
    runs = list(zip(cursor.run_starts.tolist(), cursor.run_stops.tolist(), strict=False))
    assert runs == [(8, 9), (35, 40)]  # the restart's run [30, 40) only from the main read on
    assert dict(zip(cursor.floor_slots.tolist(), cursor.floor_offsets.tolist(), strict=False)) == {5: 20, 6: 45}


def test_merge_cursor_cuts_at_the_run_limit() -> None:
    cursor = merge_cursor(0, 100, np.array([1, 3, 5, 7], I64), *arrays([9, 8], [2, 90]), None, 2)
    assert cursor.horizon == 5  # everything from the first run left out counts as unacked
    assert cursor.run_starts.tolist() == [1, 3]
    assert cursor.floor_slots.tolist() == [9]  # the floor at 90 is past the horizon now


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=30), st.integers(0, 70), st.integers(1, 10))
def test_merge_cursor_never_calls_unacked_acked(unacked: set[int], position: int,
                                                runs_max: int) -> None:
    offsets = np.array(sorted(o for o in unacked if o < position), I64)
    mark = int(offsets[0]) if len(offsets) else position
    cursor = merge_cursor(mark, position, offsets, *arrays([], []), None, runs_max)
    seen = unacked_set(cursor, 80, {})
    assert set(offsets.tolist()) <= seen and set(range(position, 80)) <= seen


# ---------------------------------------------------------------- offset ranges


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 100), max_size=60))
def test_runs_and_bounds_cover_exactly_the_offsets(offsets: list[int]) -> None:
    starts, stops = ranges_of_bounds(bounds_of(offsets))
    covered = {o for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
               for o in range(a, b)}
    assert covered == set(offsets)
    assert all(b < a for a, b in zip(starts[1:].tolist(), stops[:-1].tolist(), strict=True))


def test_bounds_must_be_whole_pairs() -> None:
    with pytest.raises(ValueError, match="holds 8 bytes"):
        ranges_of_bounds(bytes(8))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 10)), max_size=30))
def test_merge_ranges_is_the_union(pairs: list[tuple[int, int]]) -> None:
    starts = np.array([a for a, _ in pairs], I64)
    stops = np.array([a + n for a, n in pairs], I64)
    merged_starts, merged_stops = merge_ranges(starts, stops)
    union = {o for a, n in pairs for o in range(a, a + n)}
    assert {o for a, b in zip(merged_starts.tolist(), merged_stops.tolist(), strict=True)
            for o in range(a, b)} == union
    assert all(b < a for a, b in zip(merged_starts[1:].tolist(), merged_stops[:-1].tolist(),
                                     strict=True))
