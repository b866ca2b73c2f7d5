"""Subsets of a stored Record cut from its serialized bytes, not from proto objects.

Job: a Key_Shared consumer gets only its events of a stored record (a
subset Record with an `offsets` column). Building that subset through the
protobuf classes costs a Python object per event per column (about 40 ns
each, `list(column)` and `extend`); here the record's wire layout is found
once (`layout_of`) and each subset is a few numpy gathers over it
(`subset_bytes`), about ten calls per subset whatever its size.

Rules:
1. The layout is found by walking the wire format of the stored bytes:
   the Record's top-level fields, then the EventBatch's. A repeated string
   or bytes column is a run of `tag, length, payload` elements; when every
   element of the run has the same size (checked on every element: same
   tag and same length prefix, so the run is exact by induction) the run is
   a 2-D array of rows, otherwise its elements are walked one by one. A
   packed numeric column (key_ints, slots, opcodes, event_times_ms) is split
   at the varint ends (bytes below 0x80): rows when every varint has one
   size, else each payload byte is marked with its element (one cumsum).
2. Anything the walk does not expect (an unknown field, a numeric column
   not packed, a column in two pieces, element counts that differ from the
   parsed record's) gives no layout: the caller builds the subset from the
   parsed record instead. Stored records are written by protobuf's own
   serializer, so this happens only for bytes from elsewhere.
3. The subset carries what the proto-built subset carries: topic,
   partition, base_offset (the stored base), scn_first, window,
   publish_time_ms, the chosen events' columns (a column with one entry, a
   broadcast, is copied whole) and `offsets`; fields go out in field-number
   order, so the bytes equal the protobuf serializer's.

It must not know about consumers, deliveries, caches or the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from broker.rpc.wire import varint
from sdk.core.pb import keybus_pb2 as pb

_COUNT_TAG = 0x08  # EventBatch.count: field 1, varint
_BATCH_TAG = b"\x3a"  # Record.batch: field 7, length-delimited
_OFFSETS_TAG = b"\x42"  # Record.offsets: field 8, packed
_BATCH_FIELD = 7
# EventBatch column field numbers, by how they are encoded
_ELEMENT_COLUMNS = {3: "key_strings", 4: "ordering_keys", 6: "values", 7: "sources",
                    9: "schemas", 10: "headers"}
_PACKED_COLUMNS = {2: "key_ints", 5: "slots", 8: "opcodes", 11: "event_times_ms"}
_VARINT_BYTES_MAX = 10
_SHIFTS = np.arange(0, 7 * _VARINT_BYTES_MAX, 7, dtype=np.uint64)


class LayoutMismatch(Exception):
    """The bytes are not laid out as the walk expects (rule 2)."""


@dataclass(slots=True)
class Rows:
    """Elements of equal size: row i is element i's bytes (tag included for a run)."""

    rows: npt.NDArray[np.uint8]

    def pick(self, positions: npt.NDArray[np.int64]) -> bytes:
        return self.rows.take(positions, 0).tobytes()  # take: ~4x faster than rows[...]


@dataclass(slots=True)
class Padded:
    """Elements of up to `rows.shape[1]` bytes: row i holds element i, `used[i]` marks
    which of its bytes are the element's."""

    rows: npt.NDArray[np.uint8]
    used: npt.NDArray[np.bool_]

    def pick(self, positions: npt.NDArray[np.int64]) -> bytes:
        rows = self.rows.take(positions, 0).ravel()
        return rows.compress(self.used.take(positions, 0).ravel()).tobytes()


@dataclass(slots=True)
class Varints:
    """Packed varints of different sizes: the payload and, per byte, its element (one
    cumsum to find; a pick masks the payload's bytes, no padded rows to build)."""

    payload: npt.NDArray[np.uint8]
    element_of_byte: npt.NDArray[np.intp]
    entries: int

    def pick(self, positions: npt.NDArray[np.int64]) -> bytes:
        chosen = np.zeros(self.entries, np.bool_)
        chosen[positions] = True
        return self.payload.compress(chosen.take(self.element_of_byte)).tobytes()


@dataclass(slots=True)
class Elements:
    """Elements of different sizes, each its own bytes (tag included)."""

    elements: list[bytes]

    def pick(self, positions: npt.NDArray[np.int64]) -> bytes:
        elements = self.elements
        return b"".join([elements[p] for p in positions.tolist()])


@dataclass(slots=True)
class Column:
    """One per-event column: picked elements, or (packed) wrapped in one field."""

    packed_tag: bytes | None  # None: a run of elements that carry their own tags
    elements: Rows | Padded | Varints | Elements

    def pick(self, positions: npt.NDArray[np.int64]) -> bytes:
        picked = self.elements.pick(positions)
        if self.packed_tag is None:
            return picked
        return self.packed_tag + varint(len(picked)) + picked


@dataclass(slots=True)
class RecordLayout:
    """Where a stored record's parts lie (rule 1): what every subset shares and the
    per-event columns, in field order."""

    head: bytes  # Record fields 1-6 of a subset
    parts: list[bytes | Column]  # bytes: copied as they are (a broadcast column)
    offsets: Rows | Padded  # the varint of base + i, for every position i


def layout_of(body: bytes, record: pb.Record, base: int) -> RecordLayout | None:
    """The layout of a stored record's bytes, or None when they are not laid out as
    expected (rule 2). `record` is `body` parsed; `base` its first offset."""
    head = pb.Record(topic=record.topic, partition=record.partition, base_offset=base,
                     scn_first=record.scn_first, window=record.window,
                     publish_time_ms=record.publish_time_ms).SerializeToString()
    try:
        start, stop = _batch_span(body)
        parts = _batch_parts(body, start, stop, record.batch)
    except (LayoutMismatch, IndexError):
        return None
    return RecordLayout(head, parts, varint_elements(
        np.arange(base, base + record.batch.count, dtype=np.int64)))


def subset_bytes(layout: RecordLayout, positions: npt.NDArray[np.int64]) -> bytes:
    """The serialized subset Record of the events at `positions` (ascending, at least
    one; rule 3)."""
    batch = [b"%c" % _COUNT_TAG, varint(len(positions))]
    for part in layout.parts:
        batch.append(part if isinstance(part, bytes) else part.pick(positions))
    packed = layout.offsets.pick(positions)
    size = sum(map(len, batch))  # one join: the batch's bytes are copied once
    return b"".join((layout.head, _BATCH_TAG, varint(size), *batch,
                     _OFFSETS_TAG, varint(len(packed)), packed))


def varint_elements(values: npt.NDArray[np.int64]) -> Rows | Padded:
    """Non-negative integers (below 2**63) as varints, one element each (to pick packed
    payloads from)."""
    data = np.asarray(values, np.int64)
    if not len(data):
        return Rows(np.zeros((0, 1), np.uint8))
    low, high = _varint_width(int(data.min())), _varint_width(int(data.max()))
    if low == high:  # one width (a record's offsets, mostly): no per-element widths
        rows = np.empty((len(data), high), np.uint8)
        for j in range(high):
            rows[:, j] = ((data >> (7 * j)) & 0x7F) | (0x80 if j + 1 < high else 0)
        return Rows(rows)
    widths = np.ones(len(data), np.int64)
    for i in range(1, high):
        widths += data >= (1 << (7 * i))
    width_max = high
    rows = np.empty((len(data), width_max), np.uint8)
    for j in range(width_max):  # byte j: 7 bits of the value, high bit when more follow
        rows[:, j] = ((data >> (7 * j)) & 0x7F) | ((widths > j + 1) << 7)
    return _elements(rows, widths, width_max)


def _varint_width(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _elements(rows: npt.NDArray[np.uint8], widths: npt.NDArray[np.int64],
              width_max: int) -> Rows | Padded:
    if not len(widths) or int(widths.min()) == width_max:
        return Rows(rows)
    used = np.empty(rows.shape, np.bool_)
    for j in range(width_max):  # column by column: a broadcast compare is ~5x slower
        used[:, j] = widths > j
    return Padded(rows, used)


# ------------------------------------------------------------ the walk (rule 1)


def _read_varint(body: bytes, i: int) -> tuple[int, int]:
    """The varint at `body[i]` and the index after it."""
    value = shift = 0
    while True:
        byte = body[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7
        if shift >= 64:
            raise LayoutMismatch("varint too long")


def _batch_span(body: bytes) -> tuple[int, int]:
    """Where the Record's EventBatch bytes start and stop."""
    i, n = 0, len(body)
    span: tuple[int, int] | None = None
    while i < n:
        key, i = _read_varint(body, i)
        wire_type = key & 7
        if wire_type == 0:
            _, i = _read_varint(body, i)
        elif wire_type == 2:
            length, i = _read_varint(body, i)
            if key >> 3 == _BATCH_FIELD:
                if span is not None:
                    raise LayoutMismatch("batch in two pieces")
                span = (i, i + length)
            i += length
        else:
            raise LayoutMismatch(f"wire type {wire_type}")
    if span is None or i != n:
        raise LayoutMismatch("no batch")
    return span


def _batch_parts(body: bytes, i: int, stop: int, batch: pb.EventBatch) -> list[bytes | Column]:
    count = batch.count
    parts: list[bytes | Column] = []
    seen: set[int] = set()
    data = np.frombuffer(body, np.uint8)
    while i < stop:
        key, after = _read_varint(body, i)
        field, wire_type = key >> 3, key & 7
        if field in seen:
            raise LayoutMismatch(f"field {field} in two pieces")
        seen.add(field)
        if field == 1 and wire_type == 0:
            _, i = _read_varint(body, after)
            continue
        if field in _ELEMENT_COLUMNS and wire_type == 2:
            if after != i + 1:
                raise LayoutMismatch("tag of more than one byte")
            entries = len(getattr(batch, _ELEMENT_COLUMNS[field]))
            end, column = _element_run(body, data, i, stop, entries, key)
        elif field in _PACKED_COLUMNS and wire_type == 2:
            entries = len(getattr(batch, _PACKED_COLUMNS[field]))
            length, start = _read_varint(body, after)
            end = start + length
            column = Column(body[i:after], _packed_elements(data[start:end], entries))
        else:
            raise LayoutMismatch(f"batch field {field} wire type {wire_type}")
        parts.append(column if entries == count and count > 1 else body[i:end])
        i = end
    if i != stop:
        raise LayoutMismatch("batch overruns")
    return parts


def _element_run(body: bytes, data: npt.NDArray[np.uint8], i: int, stop: int, entries: int,
                 key: int) -> tuple[int, Column]:
    """A run of `entries` elements `key, length, payload` from `body[i]` (a one-byte
    key), within `stop`: its end and its elements (rule 1)."""
    length, after = _read_varint(body, i + 1)
    size = after - i + length
    head = after - i
    end = i + entries * size
    if entries and end <= stop:
        rows = data[i:end].reshape(entries, size)
        if all((rows[:, j] == rows[0, j]).all() for j in range(head)):  # a column at a time
            return end, Column(None, Rows(rows))
    elements: list[bytes] = []
    for _ in range(entries):
        if body[i] != key:
            raise LayoutMismatch("element run interrupted")
        length, after = _read_varint(body, i + 1)
        elements.append(body[i:after + length])
        i = after + length
    if i > stop:
        raise LayoutMismatch("element run overruns")
    return i, Column(None, Elements(elements))


def _packed_elements(payload: npt.NDArray[np.uint8], entries: int) -> Rows | Varints:
    """A packed varint payload split into its `entries` varints (rule 1)."""
    ends = payload < 0x80
    if int(np.count_nonzero(ends)) != entries or (entries and not ends[-1]):
        raise LayoutMismatch("packed column count")
    if not entries:
        return Rows(np.zeros((0, 1), np.uint8))
    width = len(payload) // entries
    if width * entries == len(payload) and bool(ends[width - 1::width].all()):
        return Rows(payload.reshape(entries, width))  # every varint `width` bytes long
    element_of_byte = np.empty(len(payload), np.intp)
    element_of_byte[0] = 0
    np.cumsum(ends[:-1].view(np.uint8), dtype=np.intp, out=element_of_byte[1:])
    return Varints(payload, element_of_byte, entries)
