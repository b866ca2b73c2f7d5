"""Build read chunks from the log: whole stored records where possible.

Runs on a worker thread (blocking RocksDB reads). A stored record goes out
as its exact stored bytes unless only part of it may be sent (it starts
before the read's start, ends after its stop, or a hash range or key filter
drops some events): only then is it decoded and re-encoded with the
passing events and their `offsets` column. Filtered events never leave the
broker.

A read never skips offsets silently. Stored records are contiguous (each
starts where the one before ends; a sparse record keeps the span it had), so
a record that starts past where the read expected one means the records in
between were deleted: by compaction (a compacted topic drops a record it
emptied: the events were superseded, nothing is lost) or by retention after
the read started (the up-front check passed; the iterator then seeks to the
next stored record). Retention announces its cut (`removed_below`) before it
deletes, so a gap below that mark is loss: the chunk ends before it and says
so (`Chunk.removed`), and the stream ends with OUT_OF_RANGE. The check is one
integer comparison per record; the mark is looked at only at a gap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from broker.errors import BrokerError
from broker.log import codec
from broker.log.rocks_store import RocksStore
from sdk.core.columns import OPTIONAL_COLUMNS
from sdk.core.pb import keybus_pb2 as pb

# A chunk's bytes_max bounds the whole message it goes out in, so that at the default of
# 4 MiB it fits gRPC's default receive limit (4 MiB) of any client, not only the SDK's:
# each record adds its tag and length, and the message's other fields the most they take.
# A ReadResponse (broker/rpc/wire.py): next_offset, end_offset, high_watermark, a tag and
# a varint of at most 10 bytes each. A Bootstrap's catch-up and online messages carry the
# same chunks (broker/view/bootstrap.py): next_offset and end_offset, the phase (a tag and
# one byte) and where to resume (a tag, a length and a BootstrapResume of a phase and two
# offsets). The first message of either stream also names the topic's incarnation (16 hex
# digits, a tag and a length: wire.first_response_head), counted in every chunk so the
# first fits as well. Only a single record larger than bytes_max goes out alone past it
# (a read must progress).
RECORD_FRAMING_BYTES_MAX = 6
INCARNATION_FIELD_BYTES_MAX = 1 + 1 + 16
READ_FIELDS_BYTES_MAX = 3 * 11
BOOTSTRAP_LOG_FIELDS_BYTES_MAX = 2 * 11 + 2 + (1 + 1 + 2 + 2 * 11)
RESPONSE_FIELDS_BYTES_MAX = (max(READ_FIELDS_BYTES_MAX, BOOTSTRAP_LOG_FIELDS_BYTES_MAX)
                             + INCARNATION_FIELD_BYTES_MAX)

# Given a batch, the indexes of the events that pass (ascending).
EventSelector = Callable[[pb.EventBatch], list[int]]


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """What one read wants; limits are per chunk."""

    topic_id: int
    partition: int
    stop_offset: int | None
    events_max: int
    bytes_max: int
    slot_mask: bytes | None
    selector: EventSelector | None


@dataclass(frozen=True, slots=True)
class Chunk:
    records: list[bytes]  # serialized keybus.v1.Record, in offset order
    next_offset: int
    events: int
    scanned_events: int
    # (first, stop): offsets first..stop-1 the read reached were removed by retention
    # while it read (the records before them are in `records`); None: nothing missing.
    removed: tuple[int, int] | None = None
    # (scn, offset): the chunk ends on stored records the read's hash ranges or filter
    # dropped whole; the last one's last SCN and last offset (next_offset - 1), for the
    # position a filtered follow read tells (broker/read_passed.py). None: the chunk
    # ends on a record in `records`, or cut by the read's stop.
    passed: tuple[int, int] | None = None


def read_chunk(store: RocksStore, spec: ReadSpec, start: int,
               removed_below: Callable[[], int] | None = None) -> Chunk:
    """Read records from `start` until a limit, the end of the log or a gap
    that retention made.

    Args:
        removed_below: the partition's retention cut (every offset below it is
            deleted or being deleted); read only when a record starts past
            where the read expected one. None: gaps are not checked.
    """
    records: list[bytes] = []
    events = scanned = 0
    size = RESPONSE_FIELDS_BYTES_MAX
    next_offset = expected = start
    stop = spec.stop_offset
    removed = None
    dropped_end = dropped_scn = -1  # the last record dropped whole: its end and last SCN
    try:
        for base, value in store.records_from(spec.topic_id, spec.partition, start):
            header = codec.decode_header(value)
            end = base + header.count
            if end <= start:
                continue
            if base > expected and removed_below is not None and expected < removed_below():
                removed = (expected, base if stop is None else min(base, stop))
                break
            if stop is not None and base >= stop:
                break
            expected = end
            body = codec.record_bytes(value)
            partial = base < start or (stop is not None and end > stop) or header.sparse
            if partial or spec.slot_mask is not None or spec.selector is not None:
                body, n = _subset(body, start, stop, spec)
            else:
                n = header.count
            if n and records and size + len(body) + RECORD_FRAMING_BYTES_MAX > spec.bytes_max:
                break  # it starts the next chunk, so the response stays within bytes_max
            scanned += header.count
            next_offset = end if stop is None else min(end, stop)
            if n:
                records.append(body)
                events += n
                size += len(body) + RECORD_FRAMING_BYTES_MAX
            else:  # dropped whole: by the filter or hash ranges (or a sparse record cut away)
                dropped_end, dropped_scn = end, header.scn_last
            if events >= spec.events_max or size >= spec.bytes_max \
                    or scanned >= 8 * spec.events_max:
                break
    except BrokerError as e:  # a damaged block: what lies before it first, then the error
        if e.kind.name != "store_unreadable" or not records:
            raise
    passed = (dropped_scn, dropped_end - 1) if dropped_end == next_offset else None
    return Chunk(records, next_offset, events, scanned, removed, passed)


def _subset(body: bytes, start: int, stop: int | None, spec: ReadSpec) -> tuple[bytes, int]:
    """Re-encode a record with only the events the read may see."""
    record = pb.Record.FromString(body)
    batch = record.batch
    count = batch.count
    keep: Sequence[int]
    if record.offsets:  # sparse (compacted): events at these offsets only
        offsets = record.offsets
        keep = [i for i in range(count) if start <= offsets[i] and (stop is None or offsets[i] < stop)]
    else:
        first = max(0, start - record.base_offset)
        last = count if stop is None else min(count, stop - record.base_offset)
        keep = range(first, last)
    if spec.slot_mask is not None:
        mask, slots = spec.slot_mask, batch.slots
        keep = [i for i in keep if mask[slots[i]]]
    if spec.selector is not None:
        passing = spec.selector(batch)
        if len(keep) == count:  # the common case: no cut, no hash ranges
            keep = passing
        else:
            inside = set(keep)
            keep = [i for i in passing if i in inside]
    if len(keep) == count:
        return body, count
    if not keep:
        return b"", 0
    return _select(record, list(keep)).SerializeToString(), len(keep)


def _select(record: pb.Record, keep: Sequence[int]) -> pb.Record:
    """A copy of a record with only the events at indexes `keep` (built in
    place; itemgetter picks a column's entries in C)."""
    batch = record.batch
    count = batch.count
    pick: Callable[[Any], Any] = (itemgetter(*keep) if len(keep) > 1
                                  else lambda column: (column[keep[0]],))
    offsets = ([record.offsets[i] for i in keep] if record.offsets
               else [record.base_offset + i for i in keep])
    result = pb.Record(topic=record.topic, partition=record.partition,
                       base_offset=record.base_offset, scn_first=record.scn_first,
                       window=record.window, publish_time_ms=record.publish_time_ms,
                       offsets=offsets)
    subset = result.batch
    subset.count = len(keep)
    for name in ("key_ints", "key_strings", "values", *OPTIONAL_COLUMNS):
        column = getattr(batch, name)
        if len(column) == count and count > 1:
            getattr(subset, name).extend(pick(column))
        elif column:
            getattr(subset, name).extend(column)
    return result


select_events = _select  # the compaction of a compacted topic subsets records the same way
