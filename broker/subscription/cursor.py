"""The durable position of one subscription on one partition: what is not acknowledged.

Job: say, compactly and exactly, which offsets are not acknowledged, in a form
that costs what is in flight to write (never what was acknowledged), and
decode it again.

Rules:
1. `mark_delete` is an offset: every offset below it is acknowledged.
2. `horizon` (>= mark_delete): from it on, nothing is acknowledged.
3. Between the two, an offset is *unacknowledged* when it lies in one of the
   half-open `runs` (sorted, disjoint, never touching: events sent to a
   consumer, given back or read and waiting), or when its slot has a *floor*
   at or below it (`floor_slots[i]` is unacknowledged from `floor_offsets[i]`
   on: a slot that waited while the partition read past it). Every other
   offset between them is acknowledged (or was dropped by the key filter, or
   removed by retention: the same to a subscription).
4. So the cursor is the complement of the acknowledged ranges: its size is
   the events in flight plus one entry per waiting slot, however many
   offsets were acknowledged above the slowest one. Acknowledging never
   re-encodes anything.
5. The persisted form (`to_bytes`, version 2) is delta-encoded in the
   narrowest fixed width that fits, CRC-checked and decoded again before it
   is returned (paired check). `from_bytes` also reads version 1 (mark-delete
   plus acknowledged ranges) and refuses anything else with `CursorDecodeError`.

Offsets are ints >= 0. It must not know about the log, consumers, the
dispatcher, storage keys or time.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sdk.core.offset_ranges import merge_ranges, runs_of

FORMAT_VERSION = 2
LEGACY_VERSION = 1
_WIDTHS = (1, 2, 4, 8)
Int64Array = npt.NDArray[np.int64]
__all__ = ["Cursor", "CursorDecodeError", "merge_ranges", "runs_of"]


class CursorDecodeError(ValueError):
    """Persisted cursor bytes that cannot be read; the message says what is wrong."""


def _empty() -> Int64Array:
    return np.zeros(0, np.int64)


@dataclass(slots=True)
class Cursor:
    """What is unacknowledged on one partition; see the module docstring."""

    mark_delete: int = 0
    horizon: int = -1  # -1: the same as mark_delete
    run_starts: Int64Array = field(default_factory=_empty)
    run_stops: Int64Array = field(default_factory=_empty)
    floor_slots: Int64Array = field(default_factory=_empty)
    floor_offsets: Int64Array = field(default_factory=_empty)

    def __post_init__(self) -> None:
        if self.mark_delete < 0:
            raise ValueError(f"mark_delete {self.mark_delete} is invalid: need >= 0")
        if self.horizon < 0:
            self.horizon = self.mark_delete
        if self.horizon < self.mark_delete:
            raise ValueError(f"horizon {self.horizon} is below mark_delete {self.mark_delete}")

    @property
    def is_simple(self) -> bool:
        """True when everything from the mark-delete on is unacknowledged."""
        return self.horizon == self.mark_delete

    def unacked_mask(self, offsets: Int64Array, slots: npt.NDArray[np.int32]) -> npt.NDArray[
            np.bool_]:
        """Per event (parallel arrays, offsets >= mark_delete): not acknowledged?"""
        unacked = offsets >= self.horizon
        if len(self.run_starts):
            i = np.searchsorted(self.run_starts, offsets, side="right") - 1
            inside = (i >= 0) & (offsets < self.run_stops[np.maximum(i, 0)])
            unacked |= inside
        if len(self.floor_slots):
            order = np.argsort(self.floor_slots)
            floor_slots, floor_offsets = self.floor_slots[order], self.floor_offsets[order]
            j = np.searchsorted(floor_slots, slots)
            j = np.minimum(j, len(floor_slots) - 1)
            floored = (floor_slots[j] == slots) & (offsets >= floor_offsets[j])
            unacked |= floored
        return unacked

    def unacked_count(self, end_offset: int) -> int:
        """Unacknowledged offsets below `end_offset`, counting floored slots' regions whole
        (an upper bound there: the cursor does not know which offsets belong to a slot)."""
        if end_offset <= self.mark_delete:
            return 0
        runs = int(np.sum(np.minimum(self.run_stops, end_offset)
                          - np.minimum(self.run_starts, end_offset)))
        return runs + max(0, end_offset - self.horizon)

    def acked_range_count(self) -> int:
        """Individually acknowledged ranges above the mark-delete (Pulsar's
        individuallyDeletedMessages): the gaps between the unacknowledged runs
        below the horizon. A floored slot's events inside a gap do not split it
        (the cursor does not know their offsets)."""
        lows = np.concatenate(([self.mark_delete], self.run_stops))
        highs = np.concatenate((self.run_starts, [self.horizon]))
        return int(np.count_nonzero(np.minimum(highs, self.horizon) > lows))

    def to_bytes(self) -> bytes:
        """The persisted form (version 2); see rule 5."""
        mark = self.mark_delete
        starts, stops = self.run_starts, self.run_stops
        gaps = starts - np.concatenate(([mark], stops[:-1])) if len(starts) else _empty()
        values = np.concatenate((gaps, stops - starts, self.floor_offsets - mark))
        assert not len(values) or int(values.min()) >= 0, "cursor runs or floors out of order"
        high = int(values.max()) if len(values) else 0
        width = next(w for w in _WIDTHS if high < 1 << (8 * w))
        body = bytearray([FORMAT_VERSION, width])
        for number in (mark, self.horizon - mark, len(starts), len(self.floor_slots)):
            _put_varint(body, number)
        body += values.astype(f"<u{width}").tobytes()
        body += self.floor_slots.astype("<u2").tobytes()
        body += zlib.crc32(body).to_bytes(4, "big")
        data = bytes(body)
        assert Cursor.from_bytes(data) == self, "cursor encoding does not round-trip"
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> Cursor:
        """Decode `to_bytes` output, or a version-1 cursor.

        Raises:
            CursorDecodeError: unknown version, bad checksum, truncated or trailing bytes.
        """
        if len(data) < 5:
            raise CursorDecodeError(f"cursor record is {len(data)} bytes: too short")
        body, crc = data[:-4], int.from_bytes(data[-4:], "big")
        if zlib.crc32(body) != crc:
            raise CursorDecodeError("cursor record checksum mismatch: the record is corrupt")
        if body[0] == LEGACY_VERSION:
            return _from_legacy(body)
        if body[0] != FORMAT_VERSION:
            raise CursorDecodeError(f"cursor record version {body[0]} is unknown: this broker "
                                    f"reads {LEGACY_VERSION} and {FORMAT_VERSION}")
        width = body[1]
        if width not in _WIDTHS:
            raise CursorDecodeError(f"cursor record width {width} is invalid")
        position = 2
        numbers = []
        for _ in range(4):
            number, position = _get_varint(body, position)
            numbers.append(number)
        mark, above, runs, floors = numbers
        size = (2 * runs + floors) * width + 2 * floors
        if len(body) - position != size:
            raise CursorDecodeError(f"cursor record holds {len(body) - position} bytes of "
                                    f"runs and floors, expected {size}")
        values = np.frombuffer(body, f"<u{width}", 2 * runs + floors, position).astype(np.int64)
        slots = np.frombuffer(body, "<u2", floors, position + (2 * runs + floors) * width)
        gaps, lengths = values[:runs], values[runs:2 * runs]
        ends = np.cumsum(gaps + lengths) + mark
        return cls(mark, mark + above, ends - lengths, ends, slots.astype(np.int64),
                   values[2 * runs:] + mark)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cursor):
            return NotImplemented
        return (self.mark_delete, self.horizon) == (other.mark_delete, other.horizon) and all(
            np.array_equal(a, b) for a, b in (
                (self.run_starts, other.run_starts), (self.run_stops, other.run_stops),
                (self.floor_slots, other.floor_slots),
                (self.floor_offsets, other.floor_offsets)))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        runs = list(zip(self.run_starts.tolist(), self.run_stops.tolist(), strict=True))
        floors = dict(zip(self.floor_slots.tolist(), self.floor_offsets.tolist(), strict=True))
        return (f"Cursor(mark_delete={self.mark_delete}, horizon={self.horizon}, "
                f"unacked={runs}, floors={floors})")


def _from_legacy(body: bytes) -> Cursor:
    """Version 1: mark-delete plus acknowledged ranges above it. Everything between them,
    and from the last range on, is unacknowledged."""
    mark, position = _get_varint(body, 1)
    count, position = _get_varint(body, position)
    acked: list[tuple[int, int]] = []
    previous = mark
    for _ in range(count):
        gap, position = _get_varint(body, position)
        length, position = _get_varint(body, position)
        start = previous + gap + 1
        previous = start + length + 1
        acked.append((start, previous))
    if position != len(body):
        raise CursorDecodeError(f"cursor record has {len(body) - position} trailing bytes")
    if not acked:
        return Cursor(mark)
    starts = np.array([mark] + [stop for _, stop in acked[:-1]], np.int64)
    stops = np.array([start for start, _ in acked], np.int64)
    return Cursor(mark, acked[-1][1], starts, stops)


def _put_varint(out: bytearray, value: int) -> None:
    assert value >= 0
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise CursorDecodeError("cursor record is truncated inside a varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
