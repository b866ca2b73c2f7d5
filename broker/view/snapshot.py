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

import numpy as np
import numpy.typing as npt

from broker.read_path import RECORD_FRAMING_BYTES_MAX, EventSelector
from broker.view import codec
from broker.view.snapshot_bytes import (
    ENTRY_COLUMNS_BYTES_MAX,
    RESPONSE_FIELDS_BYTES_MAX,
    record_fields_bytes_max,
    resume_bytes_max,
)
from broker.view.store import ViewStore
from sdk.core.pb import keybus_pb2 as pb

SCAN_FACTOR = 8  # a chunk looks at no more than this many entries per event sent
# A chunk's bytes_max bounds the whole BootstrapResponse (at the default 4 MiB, gRPC's
# default receive limit of any client), its resume point included: snapshot_bytes.py
# counts each part. Only a chunk of one entry goes out past it (an entry that does not
# fit alone: the snapshot must move on, as a log read sends a record too large alone).


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
        self._ended = views.log.ended
        self._it = views.iterator()
        self._it.seek(codec.state_key(spec.topic_id, spec.partition))
        self._ended(self._it, self._what)
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
        self._ended(it, self._what)
        return sorted(found)

    def _what(self) -> str:
        return f"the view of topic {self.spec.topic!r} partition {self.spec.partition}"

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
        events = scanned = 0
        size = RESPONSE_FIELDS_BYTES_MAX
        topic_bytes = len(spec.topic.encode())
        scan_max = SCAN_FACTOR * spec.events_max
        full = False
        while self._index < len(self.sources) and events < spec.events_max \
                and not full and scanned < scan_max:
            source = self.sources[self._index]
            fields = record_fields_bytes_max(topic_bytes, len(source.encode()))
            keys, values, looked, full = self._read_source(
                source, spec.events_max - events, scan_max - scanned,
                spec.bytes_max - size - fields, must_take=scanned == 0)
            scanned += looked
            skip = len(self._prefix) + len(codec.source_part(source))
            record = build_record(spec, source, keys, values, skip)
            if record is not None:
                records.append(record)
                events += record.batch.count
                size += record.ByteSize() + RECORD_FRAMING_BYTES_MAX
        return Chunk(records, events, self.position, self._index >= len(self.sources))

    def _read_source(self, source: str, events_max: int, scan_max: int, bytes_left: int,
                     must_take: bool) -> tuple[list[bytes], list[bytes], int, bool]:
        """Raw entries of one source from the current position that may be
        sent (below the snapshot offset; tombstones if asked): (entry keys,
        values, entries looked at, whether `bytes_left` stopped it). An entry
        that would take the chunk past `bytes_left`, with the resume point that
        names it (every entry looked at may be the chunk's last), is left for the
        next chunk, unless `must_take` and it is the first (a chunk always moves on)."""
        it = self._it
        head = self._prefix + codec.source_part(source)
        # An entry costs its key part (what follows `head` in its entry key: len(key) -
        # skip), its stored value less the head the message does not carry, and its
        # columns; as the chunk's last, also the resume point that names it, which
        # repeats the key part (snapshot_bytes.py). Both folded into per-source constants,
        # so an entry costs two len() calls and a few additions.
        skip = len(head)
        entry_extra = ENTRY_COLUMNS_BYTES_MAX - codec.ENTRY_HEAD.size - skip
        resume = resume_bytes_max(skip - len(self._prefix) - codec.SOURCE_LENGTH.size, 0)
        # bytes_left less the resume point's fixed part, plus `skip`: an entry fits when
        # its cost and its key part (len(key) - skip) do.
        room = bytes_left - resume + skip
        if not self._positioned:
            at = head if self._after is None else head + codec.key_part(self._after)
            it.seek(at)
            if self._after is not None and it.valid() and it.key() == at:
                it.next()
            self._positioned = True
        keys: list[bytes] = []
        values: list[bytes] = []
        limit = min(events_max, scan_max)
        full = False
        while len(keys) < limit:
            if not it.valid() or not (key := it.key()).startswith(head):
                self._ended(it, self._what)
                self._index, self._after, self._positioned = self._index + 1, None, False
                break
            value = it.value()
            key_bytes = len(key)
            cost = key_bytes + len(value) + entry_extra
            if cost + key_bytes > room and (keys or not must_take):
                full = True
                break
            room -= cost
            keys.append(key)
            values.append(value)
            it.next()
        if keys:
            self.position = Position(source, decode_key(keys[-1], skip))
        looked = len(keys)
        if keys:
            heads = codec.decode_heads(values)
            keep = heads["offset"] < self.snapshot_offset
            if not self.spec.include_tombstones:
                keep &= heads["opcode"] != pb.DELETE
            if not keep.all():
                chosen = np.flatnonzero(keep).tolist()
                keys, values = [keys[i] for i in chosen], [values[i] for i in chosen]
        return keys, values, looked, full


def decode_key(key: bytes, skip: int) -> int | str:
    """The primary key of an entry key whose source part ends at `skip`."""
    if key[skip:skip + 1] == codec.INT_TAG:
        return int(codec.INT_KEY.unpack_from(key, skip + 1)[0]) - codec.SIGN_BIT
    return key[skip + 1:].decode()


def decode_keys(keys: Sequence[bytes], skip: int) -> list[int | str]:
    """The primary keys of entry keys of one source (ints in one numpy pass)."""
    int_size = skip + 1 + codec.INT_KEY.size
    if all(len(k) == int_size and k[skip] == 0 for k in keys):
        raw = np.frombuffer(b"".join([k[skip + 1:] for k in keys]), ">u8").astype(np.uint64)
        return (raw ^ np.uint64(codec.SIGN_BIT)).astype(np.int64).tolist()  # type: ignore[no-any-return]
    return [decode_key(k, skip) for k in keys]


def build_record(spec: SnapshotSpec, source: str, entry_keys: Sequence[bytes],
                 values: Sequence[bytes], skip: int) -> pb.Record | None:
    """One Record of a source's entries that pass the hash ranges and filters.

    Columns are built from all heads at once (numpy); the key filter runs on
    the keys before any value is copied.
    """
    if not entry_keys:
        return None
    heads = codec.decode_heads(values)
    keys = decode_keys(entry_keys, skip)
    keep = _passing(spec, source, keys, heads)
    if not keep:
        return None
    if len(keep) < len(keys):
        picked = heads[np.asarray(keep)]
        keys, values = [keys[i] for i in keep], [values[i] for i in keep]
    else:
        picked = heads
    offsets = picked["offset"].tolist()
    record = pb.Record(topic=spec.topic, partition=spec.partition, base_offset=offsets[0],
                       scn_first=int(picked["scn"][0]),
                       publish_time_ms=int(picked["publish_time_ms"].max()))
    record.offsets.extend(offsets)
    record.scns.extend(picked["scn"].tolist())
    record.publish_times_ms.extend(picked["publish_time_ms"].tolist())
    _fill_batch(record.batch, source, keys, picked, values)
    return record


def _passing(spec: SnapshotSpec, source: str, keys: Sequence[int | str],
             heads: npt.NDArray[np.void]) -> list[int]:
    keep: list[int] | range = range(len(keys))
    if spec.slot_mask is not None:
        mask = np.frombuffer(spec.slot_mask, np.uint8)
        keep = np.flatnonzero(mask[heads["slot"].astype(np.int64)]).tolist()
    if spec.selector is not None and keep:
        probe = pb.EventBatch(count=len(keys), sources=[source])
        _fill_keys(probe, keys)
        passing = spec.selector(probe)
        if isinstance(keep, range):
            return passing
        inside = set(keep)
        return [i for i in passing if i in inside]
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
                heads: npt.NDArray[np.void], values: Sequence[bytes]) -> None:
    batch.count = len(keys)
    _fill_keys(batch, keys)
    batch.sources.append(source)
    batch.slots.extend(heads["slot"].tolist())
    opcodes = heads["opcode"]
    if opcodes.any():
        batch.opcodes.extend(opcodes.tolist())
    times = heads["event_time_ms"]
    if times.any():
        batch.event_times_ms.extend(times.tolist())
    size = codec.ENTRY_HEAD.size
    if not (heads["ordering_length"].any() or heads["schema_length"].any()
            or heads["headers_length"].any()):
        batch.values.extend([v[size:] for v in values])
        return
    entries = [codec.decode_entry(v) for v in values]  # some carry more than a value
    batch.values.extend([e.value for e in entries])
    if any(e.ordering_key for e in entries):
        batch.ordering_keys.extend([e.ordering_key for e in entries])
    schemas = {e.schema for e in entries}
    if schemas != {""}:
        batch.schemas.extend([entries[0].schema] if len(schemas) == 1
                             else [e.schema for e in entries])
    if any(e.headers for e in entries):
        batch.headers.extend([pb.Headers.FromString(e.headers) for e in entries])
