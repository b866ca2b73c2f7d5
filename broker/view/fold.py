"""Fold log records into view entries: the latest event per (source, key). Pure.

Rules:
1. Records come in offset order; a later event of a key replaces an earlier
   one, so within one pass only the last event of each key is encoded and
   written (a hot key costs one put per pass, not one per event).
2. A DELETE becomes a tombstone entry (kept, with its value if it has one)
   and a tombstone index entry, so the sweep can drop it after
   delete_retention_ms (`expired_tombstones`).
3. The new state counts keys, tombstones and bytes from the entries each
   put replaces (`account`): the caller reads those old values in one
   multi-get.

Cost per event: one entry key (a bytes concatenation) and one dict store;
per key that wins: one value encoding. No I/O, clock or randomness here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from broker.view import codec
from sdk.core.columns import batch_slots, expand, keys_of, record_offsets, record_scns
from sdk.core.pb import keybus_pb2 as pb


class _Columns:
    """A record's columns expanded once, shared by every event of it that wins."""

    __slots__ = ("batch", "event_times", "headers", "offsets", "opcodes", "ordering", "publish",
                 "publish_times", "schemas", "scns", "slots")

    def __init__(self, record: pb.Record) -> None:
        batch = record.batch
        count = batch.count
        self.batch = batch
        self.offsets = record_offsets(record)
        self.scns = list(record.scns) if record.scns else record_scns(record)
        self.publish = record.publish_time_ms
        self.publish_times = list(record.publish_times_ms) if record.publish_times_ms else None
        self.slots = batch_slots(batch)
        self.opcodes = expand(batch.opcodes, count, pb.UPSERT)
        self.ordering = expand(batch.ordering_keys, count, "")
        self.schemas = expand(batch.schemas, count, "")
        self.event_times = expand(batch.event_times_ms, count, 0)
        self.headers = expand(batch.headers, count, None) if batch.headers else None

    def publish_time(self, i: int) -> int:
        return self.publish if self.publish_times is None else self.publish_times[i]

    def encode(self, i: int) -> bytes:
        headers = self.headers[i] if self.headers is not None else None
        return codec.encode_entry(
            self.offsets[i], self.scns[i], self.publish_time(i), self.event_times[i],
            self.slots[i], self.opcodes[i], self.ordering[i].encode(), self.schemas[i].encode(),
            headers.SerializeToString() if headers is not None and headers.entries else b"",
            self.batch.values[i])


@dataclass(slots=True)
class Fold:
    """What one pass writes: entries, tombstone index entries, the new position."""

    entries: dict[bytes, bytes] = field(default_factory=dict)  # entry key -> value
    tombstones: list[tuple[bytes, bytes]] = field(default_factory=list)  # index key -> suffix
    offset_next: int = 0
    scn: int = 0
    events: int = 0


def entry_keys(prefix: bytes, batch: pb.EventBatch) -> list[bytes]:
    """The view key of every event of a batch (prefix = P | b"e")."""
    count = batch.count
    sources = batch.sources
    if len(sources) <= 1:
        head = prefix + codec.source_part(sources[0] if sources else "")
        if not batch.key_strings:
            int_head = head + codec.INT_TAG
            pack, sign = codec.INT_KEY.pack, codec.SIGN_BIT
            return [int_head + pack(k + sign) for k in batch.key_ints]
        return [head + codec.key_part(k) for k in keys_of(batch)]
    heads = {s: prefix + codec.source_part(s) for s in set(sources)}
    keys = keys_of(batch)
    return [heads[sources[i]] + codec.key_part(keys[i]) for i in range(count)]


def fold_records(topic_id: int, partition: int, records: Iterable[pb.Record],
                 offset_next: int, scn: int) -> Fold:
    """Fold records (offset order, from `offset_next`) into the latest entry per key.

    Args:
        offset_next, scn: the view's position before these records.
    Returns:
        The entries to put, tombstone index entries for the DELETE entries
        among them, and the position after the last record.
    """
    prefix = codec.entries_prefix(topic_id, partition)
    latest: dict[bytes, tuple[_Columns, int]] = {}
    fold = Fold(offset_next=offset_next, scn=scn)
    for record in records:
        count = record.batch.count
        if count == 0:
            continue
        columns = _Columns(record)
        positions = zip(repeat(columns, count), range(count), strict=True)
        latest.update(zip(entry_keys(prefix, record.batch), positions, strict=True))
        fold.offset_next = max(fold.offset_next, columns.offsets[-1] + 1)
        fold.scn = max(fold.scn, columns.scns[-1])
        fold.events += count
    skip = len(prefix)
    for key, (columns, i) in latest.items():
        fold.entries[key] = columns.encode(i)
        if columns.opcodes[i] == pb.DELETE:
            index = codec.tombstone_key(topic_id, partition, columns.publish_time(i),
                                        columns.offsets[i])
            fold.tombstones.append((index, key[skip:]))
    return fold


def account(state: codec.ViewState, keys: Sequence[bytes], new: Sequence[bytes],
            old: Sequence[bytes | None], offset_next: int, scn: int) -> codec.ViewState:
    """The state after putting `new` values over `old` ones (None: a new key)."""
    n_keys, n_tombstones, n_bytes = state.keys, state.tombstones, state.entry_bytes
    for key, value, previous in zip(keys, new, old, strict=True):
        if previous is None:
            n_keys += 1
            n_bytes += len(key) + len(value)
        else:
            n_bytes += len(value) - len(previous)
            n_tombstones -= codec.entry_is_tombstone(previous)
        n_tombstones += codec.entry_is_tombstone(value)
    return codec.ViewState(offset_next, scn, n_keys, n_tombstones, n_bytes)


def expired_tombstones(index: Sequence[tuple[bytes, bytes]], entries: Sequence[bytes | None],
                       entry_prefix: bytes) -> list[bytes]:
    """The entry keys a sweep deletes: those still holding the tombstone indexed.

    Args:
        index: (index key, entry suffix) of tombstones old enough to go.
        entries: the current value of each one's entry (None: gone).
    """
    doomed: list[bytes] = []
    for (index_key, suffix), value in zip(index, entries, strict=True):
        if value is None or not codec.entry_is_tombstone(value):
            continue  # upserted again since: the index entry is stale
        if codec.entry_offset(value) == codec.decode_tombstone_key(index_key)[1]:
            doomed.append(entry_prefix + suffix)
    return doomed


def remove_entries(state: codec.ViewState, keys: Sequence[bytes],
                   values: Sequence[bytes]) -> codec.ViewState:
    """The state after deleting entries (keys with their current values)."""
    n_keys, n_tombstones, n_bytes = state.keys, state.tombstones, state.entry_bytes
    for key, value in zip(keys, values, strict=True):
        n_keys -= 1
        n_bytes -= len(key) + len(value)
        n_tombstones -= codec.entry_is_tombstone(value)
    return codec.ViewState(state.offset_next, state.scn, n_keys, n_tombstones, n_bytes)
