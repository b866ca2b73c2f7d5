"""The event a Databus consumer sees (the seed's DbusEvent) and the window SCN.

`DbusEvent` is a view: it holds the window's columns and a position, and
reads a field only when asked. The client makes one per `on_event` call, so
the cost per event is one small object; the columns stay protobuf (no copy).
Unlike Databus, whose event buffer is reused, a consumer may keep an event
after the callback returns.

`Scn` is an int (the window's sequence number) that also says which
partition it belongs to: SCNs increase per partition, so a consumer of a
topic with several partitions needs both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sdk.core.columns import batch_slots, expand, keys_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus.window import Scn

__all__ = ["DbusEvent", "EventColumns", "Scn", "merge_records"]

_OPCODE_NAMES: dict[int, str] = {pb.UPSERT: "UPSERT", pb.DELETE: "DELETE"}


class _Column:
    """One optional column under the broadcast rule: a constant or per event."""

    __slots__ = ("constant", "entries")

    def __init__(self, column: Sequence[Any], count: int, default: Any) -> None:
        per_event = len(column) == count and count > 1
        self.entries: Sequence[Any] | None = column if per_event else None
        self.constant = column[0] if len(column) and not per_event else default

    def at(self, i: int) -> Any:
        entries = self.entries
        return self.constant if entries is None else entries[i]


class EventColumns:
    """The columns of one record (a whole window, or the part this consumer got),
    read lazily by `DbusEvent`. Positions are indexes into the record's batch."""

    __slots__ = ("_keys", "base_offset", "count", "event_times", "headers", "offsets",
                 "opcodes", "partition", "publish_time_ms", "publish_times_ms", "record",
                 "schemas", "scn_first", "scns", "sources", "topic", "values", "window")

    def __init__(self, record: pb.Record) -> None:
        batch = record.batch
        count = batch.count
        self.record = record
        self.topic = record.topic
        self.partition = record.partition
        self.scn_first = record.scn_first
        self.window = record.window
        self.base_offset = record.base_offset
        self.publish_time_ms = record.publish_time_ms
        self.count = count
        self.values: Sequence[bytes] = batch.values
        self.offsets: Sequence[int] | None = record.offsets or None
        # A bootstrap snapshot gathers events of many stored records: their own SCNs.
        self.scns: Sequence[int] | None = record.scns or None
        self.publish_times_ms: Sequence[int] | None = record.publish_times_ms or None
        self.sources = _Column(batch.sources, count, "")
        self.schemas = _Column(batch.schemas, count, "")
        self.opcodes = _Column(batch.opcodes, count, pb.UPSERT)
        self.event_times = _Column(batch.event_times_ms, count, 0)
        self.headers = _Column(batch.headers, count, None)
        self._keys: list[int | str] | None = None

    @property
    def keys(self) -> list[int | str]:
        if self._keys is None:
            self._keys = keys_of(self.record.batch)
        return self._keys

    def offset_at(self, i: int) -> int:
        offsets = self.offsets
        return self.base_offset + i if offsets is None else offsets[i]

    def scn_at(self, i: int) -> int:
        """A window's events share its SCN; a plain batch's event i has scn_first + its place
        (a snapshot's events carry their own)."""
        if self.scns is not None:
            return self.scns[i]
        if self.window:
            return self.scn_first
        return self.scn_first + self.offset_at(i) - self.base_offset


class DbusEvent:
    """One data event: the seed's DbusEvent, read from the window's columns.

    Attributes (properties): scn, timestamp (ms: the event time the producer
    set, else the broker's publish time), key (int or str), long_key,
    string_key, value (bytes), opcode (sdk.UPSERT or sdk.DELETE), source,
    schema, partition, offset, headers, topic.
    """

    __slots__ = ("_columns", "_i")

    def __init__(self, columns: EventColumns, i: int) -> None:
        self._columns = columns
        self._i = i

    @property
    def scn(self) -> int:
        return self._columns.scn_at(self._i)

    @property
    def timestamp(self) -> int:
        columns = self._columns
        published = columns.publish_times_ms
        return int(columns.event_times.at(self._i)) or (
            columns.publish_time_ms if published is None else published[self._i])

    @property
    def key(self) -> int | str:
        return self._columns.keys[self._i]

    @property
    def long_key(self) -> int:
        """The key as an int. Raises TypeError for a string key."""
        key = self.key
        if isinstance(key, str):
            raise TypeError(f"event at offset {self.offset} has the string key {key!r}; "
                            "use string_key")
        return key

    @property
    def string_key(self) -> str:
        """The key as a string (an int key in decimal)."""
        return str(self.key)

    @property
    def value(self) -> bytes:
        return self._columns.values[self._i]

    @property
    def opcode(self) -> int:
        return int(self._columns.opcodes.at(self._i))

    @property
    def source(self) -> str:
        return str(self._columns.sources.at(self._i))

    @property
    def schema(self) -> str:
        return str(self._columns.schemas.at(self._i))

    @property
    def partition(self) -> int:
        return self._columns.partition

    @property
    def offset(self) -> int:
        return self._columns.offset_at(self._i)

    @property
    def topic(self) -> str:
        return self._columns.topic

    @property
    def headers(self) -> dict[str, bytes]:
        entry = self._columns.headers.at(self._i)
        return dict(entry.entries) if entry is not None else {}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (value as UTF-8 text where it decodes, else hex)."""
        value = self.value
        try:
            text: str = value.decode()
        except UnicodeDecodeError:
            text = value.hex()
        return {"partition": self.partition, "offset": self.offset, "scn": self.scn,
                "source": self.source, "key": self.key,
                "opcode": _OPCODE_NAMES.get(self.opcode, str(self.opcode)),
                "schema": self.schema, "timestamp": self.timestamp, "value": text}

    def __repr__(self) -> str:
        return (f"DbusEvent(partition={self.partition}, offset={self.offset}, scn={self.scn}, "
                f"source={self.source!r}, key={self.key!r})")


def merge_records(records: Sequence[pb.Record]) -> pb.Record:
    """One record from parts of the same stored record (deliveries that split it),
    in the order given; every column per event, `offsets` set."""
    if len(records) == 1:
        return records[0]
    first = records[0]
    merged = pb.Record(topic=first.topic, partition=first.partition,
                       base_offset=first.base_offset, scn_first=first.scn_first,
                       window=first.window, publish_time_ms=first.publish_time_ms)
    batch = merged.batch
    for record in records:
        part = record.batch
        count = part.count
        merged.offsets.extend(record.offsets or range(record.base_offset,
                                                      record.base_offset + count))
        batch.count += count
        batch.values.extend(part.values)
        batch.key_ints.extend(expand(part.key_ints, count, 0) if part.key_ints else ())
        batch.key_strings.extend(expand(part.key_strings, count, "") if part.key_strings
                                 else ())
        batch.slots.extend(batch_slots(part))
        for name, default in (("ordering_keys", ""), ("sources", ""),
                              ("opcodes", pb.UPSERT), ("schemas", ""),
                              ("event_times_ms", 0)):
            getattr(batch, name).extend(expand(getattr(part, name), count, default))
        batch.headers.extend(expand(part.headers, count, pb.Headers()))
    _fill_key_column(batch, records)
    return merged


def _fill_key_column(batch: pb.EventBatch, records: Sequence[pb.Record]) -> None:
    """Key columns must have 0 or `count` entries: pad the one some parts lacked."""
    for name, default in (("key_ints", 0), ("key_strings", "")):
        column = getattr(batch, name)
        if column and len(column) != batch.count:
            padded: list[Any] = []
            for record in records:
                part = getattr(record.batch, name)
                padded.extend(part if part else [default] * record.batch.count)
            del column[:]
            column.extend(padded)
