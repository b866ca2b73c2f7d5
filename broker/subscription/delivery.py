"""Records a dispatcher holds, and the bytes of the messages it sends.

Job: keep the stored records whose events are still in play (read and not
yet acknowledged), find the record of an offset, and encode one
`SubscribeResponse(delivery=...)` per consumer per dispatch round as bytes.

Rules:
1. A record enters the cache when the dispatcher reads it and leaves once
   none of its offsets is unacknowledged (`evict_acked`), or all at once
   on a seek. Every offset a consumer holds or that waits for (re)delivery
   therefore has its record here.
2. A consumer that gets every event of a record gets the stored bytes as
   they are (no re-encoding); otherwise a subset Record with an `offsets`
   column is built from column lists made once per record (an itemgetter
   per column, not an object per event).
3. `Delivery.window_last_offsets` is, per record sent, the last offset of
   the stored record: a window record is one consistency window, so a
   consumer given part of it still learns where the window ends.

It must not know about: consumers, permits, acks, the event loop or RocksDB.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from broker.rpc.wire import varint
from sdk.core.columns import OPTIONAL_COLUMNS
from sdk.core.pb import keybus_pb2 as pb

_COLUMNS = ("key_ints", "key_strings", "values", *OPTIONAL_COLUMNS)
_RESPONSE_DELIVERY_TAG = b"\x0a"  # SubscribeResponse.delivery: field 1, length-delimited
_RECORDS_TAG = b"\x2a"  # Delivery.records: field 5, length-delimited
_REDELIVERY_COUNTS_TAG = b"\x1a"  # Delivery.redelivery_counts: field 3, packed
_WINDOW_LAST_OFFSETS_TAG = b"\x22"  # Delivery.window_last_offsets: field 4, packed
_NACKS_SEEN_TAG = b"\x30"  # Delivery.nacks_seen: field 6, varint


@dataclass(slots=True)
class CachedRecord:
    """One stored record: its bytes, its parsed form and its slot column."""

    base: int
    count: int
    body: bytes
    record: pb.Record
    slots: list[int]
    columns: dict[str, list[Any]] | None = field(default=None)

    @property
    def end(self) -> int:
        return self.base + self.count

    def column_lists(self) -> dict[str, list[Any]]:
        """Per-event columns as lists (made once per record, for subsets)."""
        if self.columns is None:
            batch = self.record.batch
            self.columns = {name: list(getattr(batch, name)) for name in _COLUMNS}
        return self.columns

    def subset_bytes(self, positions: Sequence[int]) -> bytes:
        """The serialized Record holding only the events at `positions` (ascending)."""
        if len(positions) == self.count:
            return self.body
        record = self.record
        subset = pb.Record(topic=record.topic, partition=record.partition,
                           base_offset=self.base, scn_first=record.scn_first,
                           window=record.window, publish_time_ms=record.publish_time_ms)
        base = self.base
        subset.offsets.extend([base + p for p in positions])
        batch = subset.batch
        batch.count = len(positions)
        pick: Callable[[list[Any]], Any] = itemgetter(*positions)
        single = len(positions) == 1
        count = self.count
        for name, column in self.column_lists().items():
            if not column:
                continue
            if len(column) == count and count > 1:
                picked = pick(column)
                getattr(batch, name).extend((picked,) if single else picked)
            else:
                getattr(batch, name).extend(column)
        return subset.SerializeToString()


class RecordCache:
    """Cached records by base offset, in offset order."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._records: dict[int, CachedRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def add(self, entry: CachedRecord) -> None:
        assert not self._bases or entry.base >= self._records[self._bases[-1]].end, (
            "records must be added in offset order")
        self._bases.append(entry.base)
        self._records[entry.base] = entry

    def clear(self) -> None:
        self._bases.clear()
        self._records.clear()

    def find(self, offset: int) -> CachedRecord:
        i = bisect_right(self._bases, offset) - 1
        assert i >= 0, f"offset {offset} has no cached record"
        entry = self._records[self._bases[i]]
        assert offset < entry.end, f"offset {offset} has no cached record"
        return entry

    def overlapping(self, start: int, stop: int) -> list[CachedRecord]:
        """The cached records holding any offset in [start, stop)."""
        i = max(0, bisect_right(self._bases, start) - 1)
        j = bisect_left(self._bases, stop)
        return [self._records[b] for b in self._bases[i:j] if self._records[b].end > start]

    def evict_acked(self, is_fully_acked: Callable[[int, int], bool],
                    ranges: Sequence[tuple[int, int]]) -> int:
        """Drop the records within the span of `ranges` (half-open, ascending) whose
        offsets are all acknowledged; asks `is_fully_acked` once per record.

        One ack message carries many short ranges over a few records: the walk
        is per record in the span, not per range (a fully acknowledged record
        the ranges did not touch may go too: that is always safe).
        """
        if not ranges:
            return 0
        dropped = {e.base for e in self.overlapping(ranges[0][0], ranges[-1][1])
                   if is_fully_acked(e.base, e.end)}
        if dropped:
            for base in dropped:
                del self._records[base]
            self._bases = [b for b in self._bases if b not in dropped]
        return len(dropped)

    def evict_below(self, offset: int) -> None:
        """Drop records that end at or below `offset` (all acknowledged)."""
        k = 0
        while k < len(self._bases) and self._records[self._bases[k]].end <= offset:
            del self._records[self._bases[k]]
            k += 1
        if k:
            del self._bases[:k]


def delivery_bytes(cache: RecordCache, offsets: Sequence[int],
                   redelivery_counts: Sequence[int] | None, nacks_seen: int = 0) -> bytes:
    """A serialized SubscribeResponse(delivery=...) carrying `offsets` (ascending).

    Args:
        cache: holds the record of every offset.
        offsets: what this consumer gets now, ascending.
        redelivery_counts: parallel to `offsets`, or None when all are 0.
        nacks_seen: Nack messages of the consumer's stream processed so far.
    """
    parts: list[bytes] = []
    last_offsets: list[int] = []
    i, n = 0, len(offsets)
    while i < n:
        entry = cache.find(offsets[i])
        j = bisect_left(offsets, entry.end, i)
        base = entry.base
        positions = [o - base for o in offsets[i:j]]
        body = entry.subset_bytes(positions)
        parts += (_RECORDS_TAG, varint(len(body)), body)
        last_offsets.append(entry.end - 1)
        i = j
    if redelivery_counts is not None:
        packed = b"".join(varint(c) for c in redelivery_counts)
        parts += (_REDELIVERY_COUNTS_TAG, varint(len(packed)), packed)
    packed = b"".join(varint(o) for o in last_offsets)
    parts += (_WINDOW_LAST_OFFSETS_TAG, varint(len(packed)), packed)
    if nacks_seen:
        parts += (_NACKS_SEEN_TAG, varint(nacks_seen))
    delivery = b"".join(parts)
    return _RESPONSE_DELIVERY_TAG + varint(len(delivery)) + delivery
