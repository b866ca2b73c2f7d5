"""Columns of an EventBatch: the broadcast rule, validation and row views.

Rules:
1. A required column (values; at least one key column) has `count` entries.
2. An optional column has 0 entries (default for all), 1 entry (broadcast to
   all) or `count` entries. This lets a batch from one source with one schema
   carry the source and schema once.
3. An event's key is key_strings[i] when that column is present and the entry
   is non-empty, else key_ints[i]. An empty string key is therefore only
   allowed where key_ints has an entry.

Validation here is per batch (lengths, one pass over key columns); it raises
`BatchError`, whose message names the field and what is allowed. It must not
know about topics, partitions or storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sdk.core.hashing import SLOT_MAX, slots_of
from sdk.core.pb import keybus_pb2 as pb

T = TypeVar("T")

# The broker's default event_bytes_max (broker/config.py takes it from here): a client
# that cannot ask the broker its limit, such as `keybus produce`, checks values against it.
EVENT_BYTES_MAX_DEFAULT = 1 << 20

OPTIONAL_COLUMNS = ("ordering_keys", "slots", "sources", "opcodes", "schemas", "headers",
                    "event_times_ms")
# An ordering key, source or schema is at most this many bytes of UTF-8: the compacted
# view stores each one's length in 2 bytes, and a stored event the view cannot hold
# would stop the view, hence retention, for good (so the broker refuses it up front).
TEXT_BYTES_MAX = 0xFFFF
TEXT_COLUMNS = ("ordering_keys", "sources", "schemas")
OPCODES = frozenset((pb.UPSERT, pb.DELETE))  # protobuf keeps unknown enum numbers: checked
# A supplied SCN (a window's) is at most a signed 64-bit integer, as Databus's SCNs are
# Java longs; the SCNs after it (plain batches count on from it) then have 2**63 to go
# before the wire's uint64 ends, so no client can leave a partition without SCNs.
SCN_SUPPLIED_MAX = (1 << 63) - 1
SCN_MAX = (1 << 64) - 1


class BatchError(ValueError):
    """An EventBatch that breaks the column rules; the message names the field.

    A column-shape error only a client bug can cause is prefixed with the wire
    field (`batch.key_ints: ...`); what a user's own data can break (an empty
    batch, too many events, an empty key, a value too large) is a `sentence`
    in the user's words.
    """

    def __init__(self, field_name: str, message: str, *, sentence: bool = False) -> None:
        super().__init__(message if sentence else f"{field_name}: {message}")
        self.field_name = field_name


def column_value(column: Sequence[T], i: int, default: T) -> T:
    """Element i of a column under the broadcast rule."""
    n = len(column)
    if n == 0:
        return default
    if n == 1:
        return column[0]
    return column[i]


def expand(column: Sequence[T], count: int, default: T) -> list[T]:
    """A column as exactly `count` entries (broadcast applied)."""
    n = len(column)
    if n == count:
        return list(column)
    if n == 0:
        return [default] * count
    return [column[0]] * count


def validate_batch(batch: pb.EventBatch, event_bytes_max: int, batch_events_max: int) -> None:
    """Check a batch's shape; raise BatchError naming the first broken field.

    Per-event work is kept off the common path: the oversize check looks at
    single values only when the whole batch's value bytes could hold one.
    """
    count = batch.count
    if count == 0:
        raise BatchError("batch.count", "an empty batch or window is not allowed; send 1 or more "
                         "events", sentence=True)
    if count > batch_events_max:
        raise BatchError("batch.count", f"a batch of {count:,} events is over the broker's limit of "
                         f"{batch_events_max:,} events per batch (batch_events_max); send smaller "
                         "batches", sentence=True)
    if len(batch.values) != count:
        raise BatchError("batch.values", f"has {len(batch.values)} entries; need exactly count={count}")
    _check_keys(batch, count)
    for name in OPTIONAL_COLUMNS:
        n = len(getattr(batch, name))
        if n not in (0, 1, count):
            raise BatchError(f"batch.{name}", f"has {n} entries; allowed: 0, 1 or count={count}")
    if batch.slots and max(batch.slots) > SLOT_MAX:
        raise BatchError("batch.slots", f"slot {max(batch.slots)} is out of range; allowed 0..{SLOT_MAX}")
    if batch.opcodes and not OPCODES.issuperset(batch.opcodes):
        i, opcode = next((i, o) for i, o in enumerate(batch.opcodes) if o not in OPCODES)
        raise BatchError("batch.opcodes", f"entry {i} is {opcode}; allowed UPSERT (0) or DELETE (1)")
    _check_texts(batch)
    _check_sizes(batch, event_bytes_max)


def _check_texts(batch: pb.EventBatch) -> None:
    """Ordering keys, sources and schemas within TEXT_BYTES_MAX; the UTF-8 is encoded
    only for a column whose longest entry could be over it (4 bytes a character at most)."""
    for name in TEXT_COLUMNS:
        column = getattr(batch, name)
        if not column or 4 * max(map(len, column)) <= TEXT_BYTES_MAX:
            continue
        for i, text in enumerate(column):
            size = text_bytes_over(text)
            if size:
                which = f"event {i}" if len(column) > 1 else "every event (broadcast)"
                raise BatchError(f"batch.{name}",
                                 f"the {name[:-1].replace('_', ' ')} of {which} is {size:,} bytes "
                                 f"(UTF-8), over the limit of {TEXT_BYTES_MAX:,} bytes for an "
                                 "ordering key, source or schema", sentence=True)


def _check_keys(batch: pb.EventBatch, count: int) -> None:
    n_ints, n_strings = len(batch.key_ints), len(batch.key_strings)
    if n_ints not in (0, count) or n_strings not in (0, count) or n_ints + n_strings == 0:
        raise BatchError(
            "batch.key",
            f"key_ints has {n_ints} and key_strings {n_strings} entries; each must have 0 or "
            f"count={count} entries and at least one must have count",
        )
    if n_strings and not n_ints and "" in batch.key_strings:
        i = list(batch.key_strings).index("")
        raise BatchError("batch.key_strings",
                         f"event {i} has an empty string key; a key is a non-empty string or an int64",
                         sentence=True)


def _check_sizes(batch: pb.EventBatch, event_bytes_max: int) -> None:
    values = batch.values
    if sum(map(len, values)) <= event_bytes_max:
        return
    for i, value in enumerate(values):
        if len(value) > event_bytes_max:
            raise BatchError("batch.values",
                             value_size_error(f"the value of event {i}", len(value),
                                              event_bytes_max), sentence=True)


def text_bytes_over(text: str) -> int:
    """The UTF-8 size of `text` if it is over TEXT_BYTES_MAX, else 0; encoded only when
    it could be over (4 bytes a character at most)."""
    if 4 * len(text) <= TEXT_BYTES_MAX:
        return 0
    size = len(text.encode())
    return size if size > TEXT_BYTES_MAX else 0


def value_size_error(what: str, size: int, event_bytes_max: int) -> str:
    """The words for a value over the broker's limit, the same from the broker and from
    a client that checks before sending."""
    return (f"{what} is {size:,} bytes, over the broker's limit of {event_bytes_max:,} "
            "bytes per event (event_bytes_max)")


def keys_of(batch: pb.EventBatch) -> list[int | str]:
    """The primary key of every event (rule 3)."""
    strings = batch.key_strings
    ints = batch.key_ints
    if not strings:
        return list(ints)
    if not ints:
        return list(strings)
    return [s if s else k for s, k in zip(strings, ints, strict=True)]


def ordering_keys_of(batch: pb.EventBatch) -> list[int | str]:
    """The key Key_Shared hashes for every event: ordering key, else the key."""
    ordering = batch.ordering_keys
    keys = keys_of(batch)
    if not ordering:
        return keys
    if len(ordering) == 1:
        return [ordering[0] or k for k in keys]
    return [o or k for o, k in zip(ordering, keys, strict=True)]


def batch_slots(batch: pb.EventBatch) -> list[int]:
    """The slot of every event: the slots column when sent, else computed."""
    if len(batch.slots) == batch.count:
        return list(batch.slots)
    if len(batch.slots) == 1:
        return [batch.slots[0]] * batch.count
    return slots_of(ordering_keys_of(batch))


@dataclass(frozen=True, slots=True)
class Event:
    """One event as an application sees it (a row view of a batch)."""

    key: int | str
    value: bytes
    ordering_key: str = ""
    source: str = ""
    opcode: int = pb.UPSERT
    schema: str = ""
    headers: dict[str, bytes] = field(default_factory=dict)
    event_time_ms: int = 0
    # Set by the broker.
    topic: str = ""
    partition: int = 0
    offset: int = -1
    scn: int = 0
    publish_time_ms: int = 0
    slot: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (value decoded as UTF-8 where it can be)."""
        try:
            value: Any = self.value.decode()
        except UnicodeDecodeError:
            value = self.value.hex()
        return {
            "topic": self.topic, "partition": self.partition, "offset": self.offset,
            "scn": self.scn, "key": self.key, "ordering_key": self.ordering_key,
            "slot": self.slot, "source": self.source,
            "opcode": "DELETE" if self.opcode == pb.DELETE else "UPSERT", "schema": self.schema,
            "value": value,
            "headers": {k: v.decode(errors="replace") for k, v in self.headers.items()},
            "event_time_ms": self.event_time_ms, "publish_time_ms": self.publish_time_ms,
        }


def record_offsets(record: pb.Record) -> list[int]:
    """The offset of every event of a record (dense unless `offsets` is set)."""
    if record.offsets:
        return list(record.offsets)
    return list(range(record.base_offset, record.base_offset + record.batch.count))


def record_next_offset(record: pb.Record) -> int:
    """The offset after a record's last event (a filtered record lists its offsets)."""
    if record.offsets:
        return int(record.offsets[-1]) + 1
    return int(record.base_offset + record.batch.count)


def record_scns(record: pb.Record) -> list[int]:
    """The SCN of every event: listed (a bootstrap snapshot), one per window,
    else scn_first + position."""
    if record.scns:
        return list(record.scns)
    offsets = record_offsets(record)
    if record.window:
        return [record.scn_first] * len(offsets)
    delta = record.scn_first - record.base_offset
    return [o + delta for o in offsets]


def record_events(record: pb.Record) -> list[Event]:
    """Row views of a record's events. Costs a Python object per event: use
    the columns directly on hot paths."""
    batch = record.batch
    count = batch.count
    keys = keys_of(batch)
    ordering = expand(batch.ordering_keys, count, "")
    sources = expand(batch.sources, count, "")
    opcodes = expand(batch.opcodes, count, pb.UPSERT)
    schemas = expand(batch.schemas, count, "")
    times = expand(batch.event_times_ms, count, 0)
    headers = expand(batch.headers, count, pb.Headers())
    slots = batch_slots(batch)
    offsets = record_offsets(record)
    scns = record_scns(record)
    published = (list(record.publish_times_ms) if record.publish_times_ms
                 else [record.publish_time_ms] * count)
    return [
        Event(key=keys[i], value=batch.values[i], ordering_key=ordering[i], source=sources[i],
              opcode=opcodes[i], schema=schemas[i], headers=dict(headers[i].entries),
              event_time_ms=times[i], topic=record.topic, partition=record.partition,
              offset=offsets[i], scn=scns[i], publish_time_ms=published[i],
              slot=slots[i])
        for i in range(count)
    ]
