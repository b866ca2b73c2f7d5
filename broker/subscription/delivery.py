"""Records a dispatcher keeps, and the bytes of the messages it sends.

Job: keep recently read stored records (a byte-bounded cache; a miss is
read again from the log by the dispatcher), and encode what the core
decided to send to one consumer as `SubscribeResponse(delivery=...)`
messages, none larger than `bytes_max` however many events that is.

Rules:
1. A consumer that gets every event of a record gets the stored bytes as
   they are (no re-encoding); otherwise a subset Record with an `offsets`
   column is cut from the stored bytes (`subset_wire.py`: the record's wire
   layout found once, a few numpy gathers per subset). A few events of a
   record (an eighth at most, a quarter in all) are picked from its parsed
   columns instead, which costs less than finding the layout; so are the
   subsets of bytes not laid out as protobuf writes them (with column lists
   made once per record: an itemgetter per column, not an object per event).
2. A message holds whole record parts until the next would pass
   `bytes_max`; a part larger than that alone is split in halves until each
   fits (an event is at most `event_bytes_max`, well below `bytes_max`; one
   larger than `bytes_max` would still go alone).
3. `Delivery.window_last_offsets` is, per record part sent, the last offset
   of the stored record: a window record is one consistency window, so a
   consumer given part of it still learns where the window ends.
4. The cache evicts the oldest records first once over its memory budget
   (what a record costs in memory, about three times its bytes)
   (never those of the current round: `trim` runs after the round's sends),
   and drops records that lie wholly below the mark-delete.

It must not know about consumers, permits, acks, the event loop or RocksDB.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from broker.rpc.wire import varint
from broker.subscription import subset_wire
from sdk.core.columns import OPTIONAL_COLUMNS
from sdk.core.pb import keybus_pb2 as pb

_COLUMNS = ("key_ints", "key_strings", "values", *OPTIONAL_COLUMNS)
_RESPONSE_DELIVERY_TAG = b"\x0a"  # SubscribeResponse.delivery: field 1, length-delimited
_RECORDS_TAG = b"\x2a"  # Delivery.records: field 5, length-delimited
_REDELIVERY_COUNTS_TAG = b"\x1a"  # Delivery.redelivery_counts: field 3, packed
_WINDOW_LAST_OFFSETS_TAG = b"\x22"  # Delivery.window_last_offsets: field 4, packed
_NACKS_SEEN_TAG = b"\x30"  # Delivery.nacks_seen: field 6, varint
_SEND_TAG = b"\x38"  # Delivery.send: field 7, varint


@dataclass(slots=True)
class CachedRecord:
    """One stored record: its bytes, its parsed form and its slot column."""

    base: int
    count: int
    body: bytes
    record: pb.Record
    slots: npt.NDArray[np.int32]
    columns: dict[str, list[Any]] | None = field(default=None)
    # A compacted topic's sparse record, made dense: the positions that hold events
    # (the others are placeholders, never sent). None: every position.
    present: npt.NDArray[np.int64] | None = field(default=None)
    # Where the stored bytes' parts lie (found on the first subset); None: not yet,
    # False: not laid out as expected (subsets come from the parsed record).
    layout: subset_wire.RecordLayout | bool | None = field(default=None)
    # Events picked through the parsed record while it has no layout (small parts)
    picked_small: int = field(default=0)

    @property
    def end(self) -> int:
        return self.base + self.count

    @property
    def size(self) -> int:
        return len(self.body)

    @property
    def memory_bytes(self) -> int:
        """What keeping it costs, roughly: its bytes, its parsed form and (once a subset
        was cut from it) its layout or column lists, each at most about the size of the
        bytes (a layout's equal-size rows are views of the bytes)."""
        return 3 * len(self.body)

    def column_lists(self) -> dict[str, list[Any]]:
        """Per-event columns as lists (made once per record, for subsets)."""
        if self.columns is None:
            batch = self.record.batch
            self.columns = {name: list(getattr(batch, name)) for name in _COLUMNS}
        return self.columns

    def subset_bytes(self, positions: Sequence[int] | npt.NDArray[np.int64]) -> bytes:
        """The serialized Record holding only the events at `positions` (ascending)."""
        if len(positions) == self.count:
            return self.body
        n = len(positions)
        if self.layout is None and 8 * n <= self.count and \
                4 * (self.picked_small + n) <= self.count:
            # a few events (a catch-up read's, a hot key's): picking them from the parsed
            # columns costs less than finding the layout, until a quarter was picked so
            self.picked_small += n
            return self.proto_subset_bytes([int(p) for p in positions])
        if self.layout is None:
            self.layout = subset_wire.layout_of(self.body, self.record, self.base) or False
        if isinstance(self.layout, subset_wire.RecordLayout):
            return subset_wire.subset_bytes(self.layout, np.asarray(positions, np.int64))
        return self.proto_subset_bytes([int(p) for p in positions])

    def proto_subset_bytes(self, positions: Sequence[int]) -> bytes:
        """`subset_bytes` built through the protobuf classes (bytes laid out otherwise)."""
        record = self.record
        subset = pb.Record(topic=record.topic, partition=record.partition,
                           base_offset=self.base, scn_first=record.scn_first,
                           window=record.window, publish_time_ms=record.publish_time_ms)
        base = self.base
        subset.offsets.extend([base + p for p in positions])
        batch = subset.batch
        batch.count = len(positions)
        pick: Callable[[Any], Any] = itemgetter(*positions)
        single = len(positions) == 1
        count = self.count
        # A small part (a catch-up read's, a hot key's) picks from the parsed columns
        # as they are; a record split between consumers turns them into lists once.
        columns: Any = self.columns
        if columns is None:
            columns = self.column_lists() if 4 * len(positions) >= count else {
                name: getattr(record.batch, name) for name in _COLUMNS}
        for name, column in columns.items():
            if not column:
                continue
            if len(column) == count and count > 1:
                picked = pick(column)
                getattr(batch, name).extend((picked,) if single else picked)
            else:
                getattr(batch, name).extend(column)
        return subset.SerializeToString()


class RecordCache:
    """Recently read records by base offset, within a byte budget (rule 4)."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._records: OrderedDict[int, CachedRecord] = OrderedDict()  # insertion order
        self._bases: npt.NDArray[np.int64] | None = None  # sorted, rebuilt lazily
        self._ends: npt.NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return len(self._records)

    def add(self, entry: CachedRecord) -> None:
        if entry.base in self._records:
            return
        self._records[entry.base] = entry
        self.bytes += entry.memory_bytes
        self._bases = None

    def clear(self) -> None:
        self._records.clear()
        self.bytes = 0
        self._bases = None

    def find(self, offset: int) -> CachedRecord | None:
        bases, ends = self._index()
        i = int(np.searchsorted(bases, offset, side="right")) - 1
        if i < 0 or offset >= ends[i]:
            return None
        return self._records[int(bases[i])]

    def missing(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The offsets (ascending) whose record is not cached."""
        bases, ends = self._index()
        if not len(bases):
            return offsets
        i = np.searchsorted(bases, offsets, side="right") - 1
        held = (i >= 0) & (offsets < ends[np.maximum(i, 0)])
        return offsets[~held]

    def trim(self, mark_delete: int) -> None:
        """Drop records wholly below `mark_delete`, then the oldest past the budget."""
        if mark_delete >= 0:
            for base in [b for b, r in self._records.items() if r.end <= mark_delete]:
                self.bytes -= self._records.pop(base).memory_bytes
                self._bases = None
        while self.bytes > self.bytes_max and self._records:
            _, entry = self._records.popitem(last=False)
            self.bytes -= entry.memory_bytes
            self._bases = None

    def _index(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        if self._bases is None or self._ends is None:
            bases = np.fromiter(self._records.keys(), np.int64, len(self._records))
            order = np.argsort(bases)
            self._bases = bases[order]
            ends = np.fromiter((r.end for r in self._records.values()), np.int64,
                               len(self._records))
            self._ends = ends[order]
        return self._bases, self._ends


def delivery_messages(cache: RecordCache, offsets: npt.NDArray[np.int64],
                      redelivery_counts: npt.NDArray[np.int32] | None, nacks_seen: int,
                      bytes_max: int, send: int = 0) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    """Serialized SubscribeResponse(delivery=...) messages carrying `offsets` (ascending),
    each within `bytes_max` (rule 2), and the offsets whose record is gone (not cached:
    the caller fetched what the log still holds)."""
    bases, ends = cache._index()
    i = np.searchsorted(bases, offsets, side="right") - 1
    held = (i >= 0) & (offsets < ends[np.maximum(i, 0)]) if len(bases) else \
        np.zeros(len(offsets), np.bool_)
    gone = offsets[~held]
    if not held.all():
        offsets, i = offsets[held], i[held]
        if redelivery_counts is not None:
            redelivery_counts = redelivery_counts[held]
    parts: list[tuple[bytes, int, list[int]]] = []  # (record bytes, window end, counts)
    counts = redelivery_counts.tolist() if redelivery_counts is not None else None
    splits = np.flatnonzero(np.diff(i)) + 1
    for first, stop in zip(np.concatenate(([0], splits)).tolist(),
                           np.concatenate((splits, [len(offsets)])).tolist(), strict=True):
        if first == stop:
            continue
        entry = cache._records[int(bases[i[first]])]
        chosen = offsets[first:stop]
        part_counts = counts[first:stop] if counts is not None else []
        if stop - first == entry.count:  # the whole record: its stored bytes
            parts += _fitting_parts(entry, list(range(entry.count)), part_counts, bytes_max)
            continue
        body = entry.subset_bytes(chosen - entry.base)
        if len(body) <= bytes_max or stop - first == 1:
            parts.append((body, entry.end - 1, part_counts))
        else:
            parts += _fitting_parts(entry, (chosen - entry.base).tolist(), part_counts,
                                    bytes_max)
    return _messages(parts, counts is not None, nacks_seen, bytes_max, send), gone


def _fitting_parts(entry: CachedRecord, positions: list[int], counts: list[int],
                   bytes_max: int) -> list[tuple[bytes, int, list[int]]]:
    body = entry.subset_bytes(positions)
    if len(body) <= bytes_max or len(positions) == 1:
        return [(body, entry.end - 1, counts)]
    half = len(positions) // 2
    return (_fitting_parts(entry, positions[:half], counts[:half], bytes_max)
            + _fitting_parts(entry, positions[half:], counts[half:], bytes_max))


def _messages(parts: list[tuple[bytes, int, list[int]]], with_counts: bool, nacks_seen: int,
              bytes_max: int, send: int) -> list[bytes]:
    messages: list[bytes] = []
    current: list[tuple[bytes, int, list[int]]] = []
    size = 0
    for part in parts:
        if current and size + len(part[0]) + 16 > bytes_max:
            messages.append(_delivery(current, with_counts, nacks_seen, send))
            current, size = [], 0
        current.append(part)
        size += len(part[0]) + 16
    if current:
        messages.append(_delivery(current, with_counts, nacks_seen, send))
    return messages


def _delivery(parts: list[tuple[bytes, int, list[int]]], with_counts: bool,
              nacks_seen: int, send: int) -> bytes:
    out: list[bytes] = []
    for body, _, _ in parts:
        out += (_RECORDS_TAG, varint(len(body)), body)
    if with_counts:
        packed = b"".join(varint(c) for _, _, counts in parts for c in counts)
        out += (_REDELIVERY_COUNTS_TAG, varint(len(packed)), packed)
    packed = b"".join(varint(last) for _, last, _ in parts)
    out += (_WINDOW_LAST_OFFSETS_TAG, varint(len(packed)), packed)
    if nacks_seen:
        out += (_NACKS_SEEN_TAG, varint(nacks_seen))
    if send:
        out += (_SEND_TAG, varint(send))
    delivery = b"".join(out)
    return _RESPONSE_DELIVERY_TAG + varint(len(delivery)) + delivery
