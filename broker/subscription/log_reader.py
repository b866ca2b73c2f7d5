"""Read stored records for a dispatcher: whole records, parsed, with slots.

Runs on a worker thread (blocking RocksDB reads). Unlike `read_path`, it
never cuts or re-encodes a record: the dispatcher needs the whole stored
record (to know where a window ends and to send unsplit records as stored)
and applies the key filter itself, as a list of passing positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log import codec
from broker.log.rocks_store import RocksStore
from broker.log.sparse import densify
from broker.read_path import EventSelector
from sdk.core.columns import batch_slots
from sdk.core.pb import keybus_pb2 as pb


@dataclass(frozen=True, slots=True)
class ReadRecord:
    base: int
    count: int
    body: bytes
    record: pb.Record
    slots: list[int]
    passing: list[int] | None  # positions that pass the filter; None = all


def read_records(store: RocksStore, topic_id: int, partition: int, start: int,
                 stop: int, events_max: int, selector: EventSelector | None) -> list[ReadRecord]:
    """Records holding offsets from `start` up to `stop` (exclusive), at least
    one record when there is one, and about `events_max` events."""
    records: list[ReadRecord] = []
    events = 0
    for base, value in store.records_from(topic_id, partition, start):
        if base >= stop:
            break
        header = codec.decode_header(value)
        if base + header.count <= start:
            continue
        body = codec.record_bytes(value)
        record = pb.Record.FromString(body)
        present: list[int] | None = None
        if header.sparse:  # compacted: the positions compaction removed count as filtered
            record, present = densify(record, header.count)
            body = record.SerializeToString()
        batch = record.batch
        slots = list(batch.slots) if len(batch.slots) == header.count else batch_slots(batch)
        passing = selector(batch) if selector is not None else None
        if present is not None:
            passing = present if passing is None else sorted(set(passing) & set(present))
        if passing is not None and len(passing) == header.count:
            passing = None
        records.append(ReadRecord(base, header.count, body, record, slots, passing))
        events += header.count
        if events >= events_max:
            break
    return records
