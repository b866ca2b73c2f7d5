"""The durable position of one subscription on one partition.

Job: remember which offsets are acknowledged, compactly, and say what is not.

Rules:
1. `mark_delete` is an offset: every offset below it is acknowledged.
2. Above it, individually acknowledged offsets are kept as half-open
   ``[start, stop)`` ranges, sorted, disjoint and never touching one another
   or the mark-delete (touching ranges are merged), so the list stays as
   short as the acks allow (Pulsar's individuallyDeletedMessages).
3. Acks below the mark-delete are ignored (a late or repeated ack is not an
   error); the mark-delete moves up as soon as a range touches it.
4. `seek` moves the mark-delete anywhere and forgets the ranges (a reset).
5. The persisted form (`to_bytes`) is versioned, delta/varint encoded and
   CRC-checked; `from_bytes` refuses anything else with `CursorDecodeError`.
   `to_bytes` decodes what it wrote before returning it (paired check).

Offsets are ints >= 0; a negative offset or a range with stop < start is an
operating error (`ValueError`), the shell answers the client with it.

It must not know about: the log (where it ends, what is in it), consumers,
slots, storage keys or time.
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

FORMAT_VERSION = 1


class CursorDecodeError(ValueError):
    """Persisted cursor bytes that cannot be read; the message says what is wrong."""


def _check_range(start: int, stop: int) -> None:
    if start < 0 or stop < start:
        raise ValueError(
            f"offset range [{start}, {stop}) is invalid: need 0 <= start <= stop (half-open)"
        )


class Cursor:
    """Mark-delete offset plus acknowledged ranges above it; see the module docstring."""

    __slots__ = ("_mark_delete", "_starts", "_stops")

    def __init__(self, mark_delete: int = 0) -> None:
        _check_range(mark_delete, mark_delete)
        self._mark_delete = mark_delete
        self._starts: list[int] = []  # range starts, ascending, all > mark_delete
        self._stops: list[int] = []  # matching half-open stops

    @property
    def mark_delete(self) -> int:
        """Every offset below this one is acknowledged."""
        return self._mark_delete

    def acked_ranges(self) -> list[tuple[int, int]]:
        """The individually acknowledged ``[start, stop)`` ranges above the mark-delete."""
        return list(zip(self._starts, self._stops, strict=True))

    def ack_ranges(self, ranges: Iterable[tuple[int, int]]) -> int:
        """Acknowledge half-open offset ranges (any order, may overlap or be empty);
        returns how many offsets were newly acked.

        One ack message carries many short ranges: they are merged with the
        stored ranges they can touch in one sorted pass (sorting two sorted
        runs is a merge), one loop step per range, instead of a list insert each.
        """
        given = sorted(ranges)
        if not given:
            return 0
        if given[0][0] < 0 or any(stop < start for start, stop in given):
            for start, stop in given:
                _check_range(start, stop)
        mark = self._mark_delete
        high = max(stop for _, stop in given)
        if high <= mark:
            return 0
        starts, stops = self._starts, self._stops
        i = bisect_left(stops, max(given[0][0], mark))  # first stored range reaching low
        j = bisect_right(starts, high)  # stored ranges before j start at or before high
        window = list(zip(starts[i:j], stops[i:j], strict=False))
        before = sum(stop - start for start, stop in window)
        merged_starts: list[int] = []
        merged_stops: list[int] = []
        current_start = current_stop = mark
        for start, stop in sorted(window + given):
            if stop <= current_stop:
                continue
            if start <= current_stop:
                current_stop = stop
                continue
            if current_stop > current_start:
                merged_starts.append(current_start)
                merged_stops.append(current_stop)
            current_start, current_stop = start, stop
        if current_stop > current_start:
            merged_starts.append(current_start)
            merged_stops.append(current_stop)
        starts[i:j] = merged_starts
        stops[i:j] = merged_stops
        after = sum(stop - start for start, stop in zip(merged_starts, merged_stops, strict=True))
        self._advance_mark_delete()
        return after - before

    def ack_cumulative(self, stop: int) -> int:
        """Acknowledge every offset below `stop`; returns how many were newly acked."""
        _check_range(0, stop)
        return self.ack_ranges([(0, stop)])

    def is_acked(self, offset: int) -> bool:
        if offset < self._mark_delete:
            return True
        i = bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._stops[i]

    def is_range_acked(self, start: int, stop: int) -> bool:
        """True when every offset in ``[start, stop)`` is acknowledged; O(log ranges).

        Ranges never touch (rule 2), so a fully acknowledged span lies below
        the mark-delete or inside one range.
        """
        _check_range(start, stop)
        start = max(start, self._mark_delete)
        if start >= stop:
            return True
        i = bisect_right(self._starts, start) - 1
        return i >= 0 and stop <= self._stops[i]

    def unacked_in(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The unacknowledged offsets in ``[start, stop)`` as half-open ranges, ascending."""
        _check_range(start, stop)
        position = max(start, self._mark_delete)
        gaps: list[tuple[int, int]] = []
        i = bisect_right(self._stops, position)  # first range ending after position
        while position < stop and i < len(self._starts) and self._starts[i] < stop:
            if self._starts[i] > position:
                gaps.append((position, self._starts[i]))
            position = max(position, self._stops[i])
            i += 1
        if position < stop:
            gaps.append((position, stop))
        return gaps

    def backlog(self, end_offset: int) -> int:
        """How many offsets below `end_offset` (the log's next offset) are unacknowledged."""
        if end_offset <= self._mark_delete:
            return 0
        return sum(stop - start for start, stop in self.unacked_in(self._mark_delete, end_offset))

    def seek(self, offset: int) -> None:
        """Reset: everything below `offset` counts as acked, nothing above it."""
        _check_range(offset, offset)
        self._mark_delete = offset
        self._starts.clear()
        self._stops.clear()

    def to_bytes(self) -> bytes:
        """The persisted form: version, mark-delete, range deltas (varints), CRC-32."""
        body = bytearray([FORMAT_VERSION])
        _put_varint(body, self._mark_delete)
        _put_varint(body, len(self._starts))
        previous = self._mark_delete
        for start, stop in zip(self._starts, self._stops, strict=True):
            _put_varint(body, start - previous - 1)  # >= 0: ranges never touch
            _put_varint(body, stop - start - 1)  # >= 0: ranges are never empty
            previous = stop
        body += zlib.crc32(body).to_bytes(4, "big")
        data = bytes(body)
        assert Cursor.from_bytes(data) == self, "cursor encoding does not round-trip"
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> Cursor:
        """Decode `to_bytes` output.

        Raises:
            CursorDecodeError: wrong version, bad checksum, truncated or trailing bytes.
        """
        if len(data) < 5:
            raise CursorDecodeError(f"cursor record is {len(data)} bytes: too short")
        body, crc = data[:-4], int.from_bytes(data[-4:], "big")
        if zlib.crc32(body) != crc:
            raise CursorDecodeError("cursor record checksum mismatch: the record is corrupt")
        if body[0] != FORMAT_VERSION:
            raise CursorDecodeError(
                f"cursor record version {body[0]} is unknown: this broker reads {FORMAT_VERSION}"
            )
        mark_delete, position = _get_varint(body, 1)
        count, position = _get_varint(body, position)
        cursor = cls(mark_delete)
        previous = mark_delete
        for _ in range(count):
            gap, position = _get_varint(body, position)
            length, position = _get_varint(body, position)
            start = previous + gap + 1
            previous = start + length + 1
            cursor._starts.append(start)
            cursor._stops.append(previous)
        if position != len(body):
            raise CursorDecodeError(f"cursor record has {len(body) - position} trailing bytes")
        return cursor

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cursor):
            return NotImplemented
        return (self._mark_delete, self._starts, self._stops) == (
            other._mark_delete, other._starts, other._stops)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Cursor(mark_delete={self._mark_delete}, acked={self.acked_ranges()})"

    def _advance_mark_delete(self) -> None:
        if self._starts and self._starts[0] == self._mark_delete:
            self._mark_delete = self._stops[0]
            del self._starts[0]
            del self._stops[0]
        assert not self._starts or self._starts[0] > self._mark_delete


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
