"""Read stored records for a dispatcher: whole records, parsed, slots as numpy arrays.

Runs on a worker thread (blocking RocksDB reads), or on the event loop over
the partition's recent records in memory (`read_events_in`, broker/log/recent.py). Unlike `read_path`, it
never cuts or re-encodes a record: the dispatcher keeps whole stored records
(to send them as stored, and to know where a window ends) and hands the core
the passing events of the read as two arrays (offsets, slots).

A read stops at its `stop` offset, after about `events_max` events or
`bytes_max` bytes of records, or (a catch-up read, with a slot mask) once it
saw `selected_max` events of the masked slots. Events that retention removed
are simply absent: to the core they are acknowledged. A compacted topic's
sparse record is read in its dense form (broker/log/sparse.py) and the
positions compaction removed are treated as filtered out, so they are never
sent and count as acknowledged too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from broker.errors import BrokerError
from broker.log import codec
from broker.log.rocks_store import RocksStore
from broker.log.sparse import densify
from broker.read_path import EventSelector
from broker.subscription import record_scan
from broker.subscription.core import ReadRequest, ReadResult
from broker.subscription.delivery import CachedRecord
from sdk.core.columns import batch_slots
from sdk.core.pb import keybus_pb2 as pb


def parse_record(base: int, value: bytes) -> CachedRecord:
    """One stored record value as the dispatcher keeps it (its slot column and its
    subsets' head read from the bytes when they can be: record_scan.py)."""
    header = codec.decode_header(value)
    body = codec.record_bytes(value)
    record = pb.Record.FromString(body)
    if not header.sparse:
        scanned = record_scan.scan(body, base, header.count)
        if scanned is not None:
            head, slots = scanned
            return CachedRecord(base, header.count, body, record, slots, subset_header=head)
    present = None
    if header.sparse:  # compacted: the positions compaction removed count as filtered
        record, kept = densify(record, header.count)
        body = record.SerializeToString()
        present = np.array(kept, np.int64)
    batch = record.batch
    count = header.count
    if len(batch.slots) == count:  # np.array: ~15x faster on big records, 5x slower on tiny
        slots = np.fromiter(batch.slots, np.int32, count) if count <= 64 else \
            np.array(batch.slots, np.int32)
    else:  # written before slots were stored
        slots = np.array(batch_slots(batch), np.int32)
    return CachedRecord(base, count, body, record, slots, present=present)


class ScanRecord(Protocol):
    """What a read looks at in a record (a `CachedRecord`, or a simulation's record)."""

    @property
    def base(self) -> int: ...

    @property
    def count(self) -> int: ...

    @property
    def end(self) -> int: ...

    @property
    def slots(self) -> npt.NDArray[np.int32]: ...

    @property
    def size(self) -> int: ...


R = TypeVar("R", bound=ScanRecord)


def scan(request: ReadRequest, records: Iterable[R],
         passing: Callable[[R], npt.NDArray[np.int64] | None], bytes_max: int,
         ) -> tuple[list[R], ReadResult]:
    """Go over `records` (in offset order, from the one holding `request.start`) as one
    read: the records read and what they hold for the core (see the module docstring).
    `passing` gives the positions of a record's events that pass the filter (None: all)."""
    start, stop = request.start, request.stop
    kept: list[R] = []
    offsets: list[npt.NDArray[np.int64]] = []
    slots: list[npt.NDArray[np.int32]] = []
    scanned = size = selected = 0
    covered = stop
    mask = request.slot_mask
    try:
        for entry in records:
            if entry.base >= stop:
                break
            if entry.end <= start:
                continue
            kept.append(entry)
            positions = passing(entry)
            if positions is None and start <= entry.base and entry.end <= stop:
                offsets.append(np.arange(entry.base, entry.end, dtype=np.int64))
                slots.append(entry.slots)  # every event of it: its slot column as it is
            else:
                if positions is None:
                    positions = np.arange(entry.count, dtype=np.int64)
                if entry.base < start or entry.end > stop:
                    positions = positions[(positions >= start - entry.base)
                                          & (positions < stop - entry.base)]
                offsets.append(positions + entry.base)
                slots.append(entry.slots[positions])
            scanned += entry.count
            size += entry.size
            if mask is not None:
                selected += int(np.count_nonzero(mask[slots[-1]]))
            if scanned >= request.events_max or size >= bytes_max or \
                    (mask is not None and selected >= request.selected_max):
                covered = min(entry.end, stop)
                break
    except BrokerError as e:  # a damaged block: what lies before it first, then the error
        if e.kind.name != "store_unreadable" or not kept:
            raise
        covered = min(kept[-1].end, stop)  # not `stop`: nothing past the damage is read
    result = ReadResult(max(covered, start), _joined(offsets, np.int64),
                        _joined(slots, np.int32))
    return kept, result


def _joined(parts: list[npt.NDArray[Any]], dtype: type) -> npt.NDArray[Any]:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def read_events(store: RocksStore, topic_id: int, partition: int, request: ReadRequest,
                selector: EventSelector | None, bytes_max: int,
                ) -> tuple[list[CachedRecord], ReadResult]:
    """One read from the log (see the module docstring)."""
    return read_events_in(store.records_from(topic_id, partition, request.start), request,
                          selector, bytes_max)


def read_events_in(values: Iterable[tuple[int, bytes]], request: ReadRequest,
                   selector: EventSelector | None, bytes_max: int,
                   ) -> tuple[list[CachedRecord], ReadResult]:
    """One read over stored (base offset, value) records in offset order, from the one
    holding `request.start`: the log's, or the partition's recent records in memory."""
    records = (parse_record(base, value) for base, value in values)

    def passing(entry: CachedRecord) -> npt.NDArray[np.int64] | None:
        if selector is None:
            return entry.present
        positions = np.asarray(selector(entry.record.batch), np.int64)
        if entry.present is not None:
            positions = np.intersect1d(positions, entry.present, assume_unique=True)
        return positions

    return scan(request, records, passing, bytes_max)


def read_records_holding(store: RocksStore, topic_id: int, partition: int,
                         offsets: Sequence[int]) -> list[CachedRecord]:
    """The stored records holding these offsets (ascending); offsets retention removed
    have none."""
    records: list[CachedRecord] = []
    for offset in offsets:
        if records and records[-1].base <= offset < records[-1].end:
            continue
        for base, value in store.records_from(topic_id, partition, offset):
            entry = parse_record(base, value)
            if entry.base <= offset < entry.end:
                records.append(entry)
            break
    return records
