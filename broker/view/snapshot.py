"""Read a snapshot of a partition's view, one chunk at a time.

Runs on worker threads, one call at a time per snapshot. A snapshot reads
through one RocksDB iterator, which sees the view at one point in time
however long the snapshot takes: the state it reads first says which log
offset the entries hold (every event below `snapshot_offset`), so the
catch-up starts exactly there, with no gap and no duplicate.

Rules:
1. Sources go one after the other, in the order asked for (or by name), and
   keys in key order within a source (see codec.py); a chunk never mixes
   sources within one Record.
2. Only entries whose event is below `snapshot_offset` are sent. For a
   snapshot read in one go that is every entry; for a resumed one (a new
   iterator, later), entries changed since the interrupted snapshot's point
   are left to the catch-up, which starts at that point and carries them.
3. Tombstones are sent only when asked for; hash ranges, the request's key
   filter and the broker's per-source filters apply as on a Read.
4. The resume point after a chunk is the last key *looked at*, sent or not,
   so a resumed snapshot never reads an entry twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.read_path import EventSelector
from broker.view import codec
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb

SCAN_FACTOR = 8  # a chunk looks at no more than this many entries per event sent


@dataclass(frozen=True, slots=True)
class SnapshotSpec:
    topic: str
    topic_id: int
    partition: int
    sources: tuple[str, ...]  # order asked for; empty = every source, by name
    slot_mask: bytes | None
    selector: EventSelector | None
    include_tombstones: bool
    events_max: int
    bytes_max: int


@dataclass(frozen=True, slots=True)
class Position:
    """The last (source, key) looked at; source None: nothing yet."""

    source: str | None = None
    key: int | str | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    records: list[pb.Record]
    events: int
    position: Position
    done: bool


class SnapshotCursor:
    """One snapshot of one partition's view (blocking; one call at a time)."""

    def __init__(self, views: ViewStore, spec: SnapshotSpec, position: Position,
                 snapshot_offset: int | None) -> None:
        self.spec = spec
        self._it = views.iterator()
        self._it.seek(codec.state_key(spec.topic_id, spec.partition))
        found = self._it.valid() and self._it.key() == codec.state_key(spec.topic_id,
                                                                         spec.partition)
        self.state = codec.ViewState.decode(bytes(self._it.value()) if found else None)
        self.snapshot_offset = (self.state.offset_next if snapshot_offset is None
                                else snapshot_offset)
        self._prefix = codec.entries_prefix(spec.topic_id, spec.partition)
        self.sources = list(spec.sources) or self._discover_sources()
        self._index, self._after = self._start_at(position)
        self._positioned = False
        self.position = position

    def _discover_sources(self) -> list[str]:
        found: list[str] = []
        it, prefix = self._it, self._prefix
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            source = codec.source_of_suffix(it.key()[len(prefix):])
            found.append(source)
            it.seek(prefix + codec.source_part(source) + codec.AFTER_KEYS_TAG)
        return sorted(found)

    def _start_at(self, position: Position) -> tuple[int, int | str | None]:
        if position.source is None:
            return 0, None
        if position.source not in self.sources:
            raise ValueError(f"source {position.source!r} is not among the snapshot's sources")
        return self.sources.index(position.source), position.key

    def close(self) -> None:
        del self._it

    def next_chunk(self) -> Chunk:
        """The next entries, up to the spec's limits, as Records per source."""
        spec = self.spec
        records: list[pb.Record] = []
        events = size = scanned = 0
        scan_max = SCAN_FACTOR * spec.events_max
        while self._index < len(self.sources) and events < spec.events_max \
                and size < spec.bytes_max and scanned < scan_max:
            source = self.sources[self._index]
            keys, values, looked = self._read_source(source, spec.events_max - events,
                                                     scan_max - scanned)
            scanned += looked
            record = build_record(spec, source, keys, values)
            if record is not None:
                records.append(record)
                events += record.batch.count
                size += record.ByteSize()
        return Chunk(records, events, self.position, self._index >= len(self.sources))

    def _read_source(self, source: str, events_max: int, scan_max: int
                     ) -> tuple[list[int | str], list[bytes], int]:
        """Entries of one source from the current position (keys, values, looked at)."""
        it = self._it
        head = self._prefix + codec.source_part(source)
        if not self._positioned:
            it.seek(head if self._after is None else head + codec.key_part(self._after))
            if self._after is not None and it.valid() and it.key() == head + codec.key_part(
                    self._after):
                it.next()
            self._positioned = True
        keys: list[int | str] = []
        values: list[bytes] = []
        looked = 0
        skip = len(head)
        limit, tombstones = self.snapshot_offset, self.spec.include_tombstones
        last: int | str | None = self._after
        while looked < scan_max and len(keys) < events_max:
            if not it.valid() or not (key := it.key()).startswith(head):
                self._index, self._after, self._positioned = self._index + 1, None, False
                break
            value = it.value()
            last = decode_key(key, skip)
            looked += 1
            if codec.entry_offset(value) < limit and (
                    tombstones or not codec.entry_is_tombstone(value)):
                keys.append(last)
                values.append(value)
            it.next()
        else:
            self._after = last
        if looked:
            self.position = Position(source, last)
        return keys, values, looked


def decode_key(key: bytes, skip: int) -> int | str:
    """The primary key of an entry key whose source part ends at `skip`."""
    if key[skip:skip + 1] == codec.INT_TAG:
        return int(codec.INT_KEY.unpack_from(key, skip + 1)[0]) - codec.SIGN_BIT
    return key[skip + 1:].decode()


def build_record(spec: SnapshotSpec, source: str, keys: Sequence[int | str],
                 values: Sequence[bytes]) -> pb.Record | None:
    """One Record of a source's entries that pass the hash ranges and filters."""
    if not keys:
        return None
    entries = [codec.decode_entry(v) for v in values]
    keep = _passing(spec, source, keys, entries)
    if not keep:
        return None
    picked = [entries[i] for i in keep]
    record = pb.Record(topic=spec.topic, partition=spec.partition,
                       base_offset=picked[0].offset, scn_first=picked[0].scn,
                       publish_time_ms=max(e.publish_time_ms for e in picked))
    record.offsets.extend([e.offset for e in picked])
    record.scns.extend([e.scn for e in picked])
    record.publish_times_ms.extend([e.publish_time_ms for e in picked])
    _fill_batch(record.batch, source, [keys[i] for i in keep], picked)
    return record


def _passing(spec: SnapshotSpec, source: str, keys: Sequence[int | str],
             entries: Sequence[codec.Entry]) -> list[int]:
    keep: Sequence[int] = range(len(keys))
    if spec.slot_mask is not None:
        mask = spec.slot_mask
        keep = [i for i in keep if mask[entries[i].slot]]
    if spec.selector is not None and keep:
        probe = pb.EventBatch(count=len(keys), sources=[source])
        _fill_keys(probe, keys)
        passing = spec.selector(probe)
        inside = set(keep)
        keep = [i for i in passing if i in inside]
    return list(keep)


def _fill_keys(batch: pb.EventBatch, keys: Sequence[int | str]) -> None:
    if all(type(k) is int for k in keys):
        batch.key_ints.extend(keys)  # type: ignore[arg-type]
    elif all(type(k) is str for k in keys):
        batch.key_strings.extend(keys)  # type: ignore[arg-type]
    else:  # mixed: an empty string entry falls back to the int column
        batch.key_strings.extend([k if isinstance(k, str) else "" for k in keys])
        batch.key_ints.extend([k if isinstance(k, int) else 0 for k in keys])


def _fill_batch(batch: pb.EventBatch, source: str, keys: Sequence[int | str],
                entries: Sequence[codec.Entry]) -> None:
    batch.count = len(keys)
    _fill_keys(batch, keys)
    batch.values.extend([e.value for e in entries])
    batch.sources.append(source)
    batch.slots.extend([e.slot for e in entries])
    if any(e.opcode != pb.UPSERT for e in entries):
        batch.opcodes.extend([e.opcode for e in entries])  # type: ignore[misc]
    if any(e.ordering_key for e in entries):
        batch.ordering_keys.extend([e.ordering_key for e in entries])
    schemas = {e.schema for e in entries}
    if schemas != {""}:
        batch.schemas.extend([entries[0].schema] if len(schemas) == 1
                             else [e.schema for e in entries])
    if any(e.headers for e in entries):
        batch.headers.extend([pb.Headers.FromString(e.headers) for e in entries])
    if any(e.event_time_ms for e in entries):
        batch.event_times_ms.extend([e.event_time_ms for e in entries])
