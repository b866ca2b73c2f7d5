"""Records a dispatcher keeps, and the bytes of the messages it sends.

Job: keep recently read stored records (a byte-bounded cache; a miss is
read again from the log by the dispatcher), and encode what the core
decided to send to one consumer as `SubscribeResponse(delivery=...)`
messages, none larger than `bytes_max` however many events that is.

Rules:
1. A consumer that gets every event of a record gets the stored bytes as
   they are (no re-encoding); otherwise a subset Record with an `offsets`
   column is cut from the stored bytes: in C when the native module was
   built (`record_cut.py`), else in Python (`subset_wire.py`: the record's wire
   layout found once, a few numpy gathers per subset). In Python, a few events of a
   record (an eighth at most, a quarter in all), and any subset of a small
   record (`SMALL_RECORD_EVENTS`), are picked from its parsed columns
   instead, which costs less than finding the layout; so are the subsets
   of bytes not laid out as protobuf writes them (with column lists
   made once per record: an itemgetter per column, not an object per event).
2. A message holds whole record parts until the next would pass
   `bytes_max`; a part larger than that alone is split in halves until each
   fits (an event is at most `event_bytes_max`, well below `bytes_max`; one
   larger than `bytes_max` would still go alone).
3. `Delivery.window_last_offsets` is, per record part sent, the last offset
   of the stored record: a window record is one consistency window, so a
   consumer given part of it still learns where the window ends.
   `Delivery.open_windows` lists those of a message's windows of which more
   follows for the consumer: the caller's `open_windows` (events of them not
   sent yet: share_ends.py), and a part split over messages in every message
   but its last.
4. The cache evicts the oldest records first once over its memory budget
   (what a record costs in memory, about three times its bytes): its own
   `bytes_max`, or less, its share of the broker's (`cache_budget.py`);
   never those of the current round: `trim` runs after the round's sends.
   It drops records that lie wholly below the mark-delete.

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
from broker.subscription import record_cut, subset_wire
from broker.subscription.cache_budget import CacheBudget
from sdk.core.columns import OPTIONAL_COLUMNS
from sdk.core.pb import keybus_pb2 as pb

_COLUMNS = ("key_ints", "key_strings", "values", *OPTIONAL_COLUMNS)
_COLUMN_SET = frozenset(_COLUMNS)
_RESPONSE_DELIVERY_TAG = b"\x0a"  # SubscribeResponse.delivery: field 1, length-delimited
_RECORDS_TAG = b"\x2a"  # Delivery.records: field 5, length-delimited
_REDELIVERY_COUNTS_TAG = b"\x1a"  # Delivery.redelivery_counts: field 3, packed
_WINDOW_LAST_OFFSETS_TAG = b"\x22"  # Delivery.window_last_offsets: field 4, packed
_NACKS_SEEN_TAG = b"\x30"  # Delivery.nacks_seen: field 6, varint
_SEND_TAG = b"\x38"  # Delivery.send: field 7, varint
_OPEN_WINDOWS_TAG = b"\x42"  # Delivery.open_windows: field 8, packed
_NO_WINDOWS: frozenset[int] = frozenset()
# Rule 2's bound is the whole message, so that at the default 4 MiB it fits gRPC's default
# receive limit of any client, not only the SDK's: a message's own fields (the response's
# and the Delivery's tags and lengths, nacks_seen, send, one open window) take at most
# DELIVERY_FIELDS_BYTES_MAX; each record part its tag, length, last offset and open window
# (PART_FRAMING_BYTES_MAX) and a varint per redelivery count.
DELIVERY_FIELDS_BYTES_MAX = 64
PART_FRAMING_BYTES_MAX = 26
COUNT_BYTES_MAX = 5
_INDEX_ROOM = 64  # first size of a cache's index arrays
# A record of at most this many events: its subsets come from the parsed columns (a few
# microseconds each), never from a layout (about 50 us to find, worth it for big records)
SMALL_RECORD_EVENTS = 64


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
    # The subsets' fields before the batch (topic to publish time), serialized once
    subset_header: bytes | None = field(default=None)
    # False once the C cut found the bytes laid out otherwise than it expects
    cuttable: bool = field(default=record_cut.NATIVE)

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
        if self.columns is None:  # ListFields: the columns set (empty ones: nothing to pick)
            self.columns = {field.name: list(column)
                            for field, column in self.record.batch.ListFields()
                            if field.name in _COLUMN_SET}
        return self.columns

    def subset_bytes(self, positions: Sequence[int] | npt.NDArray[np.int64]) -> bytes:
        """The serialized Record holding only the events at `positions` (ascending)."""
        if len(positions) == self.count:
            return self.body
        if self.cuttable:  # in C when built (record_cut.py): about a microsecond
            cut = record_cut.cut(self.body, self.header(), self.base, self.count, positions)
            if cut is not None:
                return cut
            self.cuttable = False
        n = len(positions)
        if self.count <= SMALL_RECORD_EVENTS:
            return self.proto_subset_bytes(
                positions.tolist() if isinstance(positions, np.ndarray) else list(positions))
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

    def header(self) -> bytes:
        """A subset's Record fields before the batch (topic to publish time)."""
        header = self.subset_header
        if header is None:
            record = self.record
            header = self.subset_header = pb.Record(
                topic=record.topic, partition=record.partition, base_offset=self.base,
                scn_first=record.scn_first, window=record.window,
                publish_time_ms=record.publish_time_ms).SerializeToString()
        return header

    def proto_subset_bytes(self, positions: Sequence[int]) -> bytes:
        """`subset_bytes` built through the protobuf classes (bytes laid out otherwise)."""
        record = self.record
        header = self.header()
        # The header's fields (1-6) come before the batch (7) and offsets (8), so the
        # header's bytes and the rest's are the bytes protobuf writes for them together.
        subset = pb.Record()
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
        return header + subset.SerializeToString()


class RecordCache:
    """Recently read records by base offset, within a byte budget (rule 4).

    Its index (bases and ends, ascending) lives in two arrays with room to grow:
    records come in offset order and leave from the low end, so adding and
    trimming are O(1) and a look-up never rebuilds it; a record added out of
    order (a re-read below the newest) marks it for one rebuild.
    """

    def __init__(self, bytes_max: int, budget: CacheBudget | None = None) -> None:
        self.bytes_max = bytes_max
        self.budget = budget
        self.bytes = 0
        self._records: OrderedDict[int, CachedRecord] = OrderedDict()  # insertion order
        self._bases = np.zeros(_INDEX_ROOM, np.int64)  # [_first, _stop): sorted by base
        self._ends = np.zeros(_INDEX_ROOM, np.int64)
        self._first = self._stop = 0
        self._stale = False  # the index must be rebuilt from `_records`

    def __len__(self) -> int:
        return len(self._records)

    def add(self, entry: CachedRecord) -> None:
        if entry.base in self._records:
            return
        self._records[entry.base] = entry
        self.bytes += entry.memory_bytes
        if self._stale or (self._stop > self._first
                           and entry.base < int(self._ends[self._stop - 1])):
            self._stale = True
            return
        if self._stop == len(self._bases):
            self._make_room()
        self._bases[self._stop] = entry.base
        self._ends[self._stop] = entry.end
        self._stop += 1

    def clear(self) -> None:
        self._records.clear()
        self.bytes = 0
        self._first = self._stop = 0
        self._stale = False

    def holding(self, first: int, last: int) -> CachedRecord | None:
        """The cached record holding both offsets (so every one between), if one does.
        The newest record is looked at first: following the tail, it is the one."""
        if not self._records:
            return None
        newest = next(reversed(self._records.values()))
        entry = newest if newest.base <= first < newest.end else self.find(first)
        return entry if entry is not None and last < entry.end else None

    def holding_all(self, offsets: npt.NDArray[np.int64]) -> CachedRecord | None:
        """The cached record holding all of `offsets` (ascending), if one does."""
        return self.holding(int(offsets[0]), int(offsets[-1])) if len(offsets) else None

    def find(self, offset: int) -> CachedRecord | None:
        bases, ends = self._index()
        i = int(bases.searchsorted(offset, side="right")) - 1
        if i < 0 or offset >= ends[i]:
            return None
        return self._records[int(bases[i])]

    def missing(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The offsets (ascending) whose record is not cached."""
        bases, ends = self._index()
        if not len(bases):
            return offsets
        i = bases.searchsorted(offsets, side="right") - 1
        held = (i >= 0) & (offsets < ends[np.maximum(i, 0)])
        return offsets[~held]

    def trim(self, mark_delete: int) -> None:
        """Drop records wholly below `mark_delete`, then the oldest past the budget."""
        records = self._records
        if mark_delete >= 0 and records:
            bases, ends = self._index()
            below = int(ends.searchsorted(mark_delete, side="right"))
            for base in bases[:below].tolist():
                self.bytes -= records.pop(base).memory_bytes
            self._first += below
        budget = self.budget  # `limit()`, inlined: a trim ends every round
        limit = self.bytes_max if budget is None or budget.share >= self.bytes_max \
            else budget.share
        while self.bytes > limit and records:
            base, entry = records.popitem(last=False)
            self.bytes -= entry.memory_bytes
            if not self._stale and self._first < self._stop and \
                    int(self._bases[self._first]) == base:
                self._first += 1
            else:
                self._stale = True

    def limit(self) -> int:
        """Bytes the cache keeps after a trim: its own bound, or its share of the
        broker's if smaller."""
        budget = self.budget
        return self.bytes_max if budget is None else min(self.bytes_max, budget.share)

    def _make_room(self) -> None:
        used = self._stop - self._first
        size = len(self._bases) if 2 * used <= len(self._bases) else 2 * len(self._bases)
        bases, ends = np.zeros(size, np.int64), np.zeros(size, np.int64)
        bases[:used] = self._bases[self._first:self._stop]
        ends[:used] = self._ends[self._first:self._stop]
        self._bases, self._ends, self._first, self._stop = bases, ends, 0, used

    def _index(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(bases, ends) of the cached records, ascending (views: read only)."""
        if self._stale:
            entries = sorted(self._records.values(), key=lambda r: r.base)
            size = max(_INDEX_ROOM, 2 * len(entries))
            self._bases, self._ends = np.zeros(size, np.int64), np.zeros(size, np.int64)
            self._bases[:len(entries)] = [r.base for r in entries]
            self._ends[:len(entries)] = [r.end for r in entries]
            self._first, self._stop, self._stale = 0, len(entries), False
        return self._bases[self._first:self._stop], self._ends[self._first:self._stop]


def delivery_messages(cache: RecordCache, offsets: npt.NDArray[np.int64],
                      redelivery_counts: npt.NDArray[np.int32] | None, nacks_seen: int,
                      bytes_max: int, send: int = 0, held: CachedRecord | None = None,
                      open_windows: frozenset[int] = _NO_WINDOWS
                      ) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    """Serialized SubscribeResponse(delivery=...) messages carrying `offsets` (ascending),
    each within `bytes_max` (rule 2), and the offsets whose record is gone (not cached:
    the caller fetched what the log still holds). `held`: the cached record holding
    every offset, when the caller looked it up already. `open_windows`: the windows
    (last offsets) of which more follows for this consumer after these (rule 3)."""
    bytes_max = bytes_max - DELIVERY_FIELDS_BYTES_MAX if bytes_max > DELIVERY_FIELDS_BYTES_MAX \
        else 1  # the rest is for record parts (no call: the path following the tail)
    entry = held if held is not None else cache.holding_all(offsets)
    if entry is not None:  # every offset in one cached record (following the tail: most sends)
        if redelivery_counts is None and len(offsets) < entry.count:  # a part of it, sent once
            positions = offsets - entry.base
            too_large = False
            opened = [entry.end - 1] if open_windows and entry.end - 1 in open_windows else []
            if entry.cuttable and not opened:  # cut and framed in C (record_cut.py)
                message = record_cut.delivery(entry.body, entry.header(), entry.base,
                                              entry.count, positions, entry.end - 1,
                                              nacks_seen, send, bytes_max)
                if isinstance(message, bytes):
                    return [message], offsets[:0]
                too_large = message is False  # cuttable, over one message: split below
                entry.cuttable = too_large  # None: bytes the C cut refuses, Python from now on
            if not too_large:
                body = entry.subset_bytes(positions)
                if len(body) <= bytes_max:  # one part, one message: as below, in fewer steps
                    return [_one_part(body, entry.end - 1, nacks_seen, send, opened)], \
                        offsets[:0]
        counts = redelivery_counts.tolist() if redelivery_counts is not None else None
        parts = _record_parts(entry, offsets, counts or [], bytes_max)
        gone = offsets[:0]
    else:
        parts, gone = _parts_of_records(cache, offsets, redelivery_counts, bytes_max)
    return _messages(parts, redelivery_counts is not None, nacks_seen, bytes_max, send,
                     open_windows), gone


def _parts_of_records(cache: RecordCache, offsets: npt.NDArray[np.int64],
                      redelivery_counts: npt.NDArray[np.int32] | None, bytes_max: int
                      ) -> tuple[list[tuple[bytes, int, list[int]]], npt.NDArray[np.int64]]:
    """The parts carrying `offsets` spread over records, and the offsets not cached."""
    bases, ends = cache._index()
    i = bases.searchsorted(offsets, side="right") - 1
    held = (i >= 0) & (offsets < ends[np.maximum(i, 0)]) if len(bases) else \
        np.zeros(len(offsets), np.bool_)
    gone = offsets[~held]
    if not held.all():
        offsets, i = offsets[held], i[held]
        if redelivery_counts is not None:
            redelivery_counts = redelivery_counts[held]
    parts: list[tuple[bytes, int, list[int]]] = []  # (record bytes, window end, counts)
    counts = redelivery_counts.tolist() if redelivery_counts is not None else None
    if len(offsets):
        splits = (i[1:] != i[:-1]).nonzero()[0] + 1
        for first, stop in zip(np.concatenate(([0], splits)).tolist(),
                               np.concatenate((splits, [len(offsets)])).tolist(), strict=True):
            parts += _record_parts(cache._records[int(bases[i[first]])], offsets[first:stop],
                                   counts[first:stop] if counts is not None else [], bytes_max)
    return parts, gone


def _record_parts(entry: CachedRecord, chosen: npt.NDArray[np.int64], counts: list[int],
                  bytes_max: int) -> list[tuple[bytes, int, list[int]]]:
    """The parts carrying the offsets `chosen` (ascending) of one record."""
    if len(chosen) == entry.count:  # the whole record: its stored bytes
        return _fitting_parts(entry, list(range(entry.count)), counts, bytes_max)
    positions = chosen - entry.base
    body = entry.subset_bytes(positions)
    if len(body) <= bytes_max or len(chosen) == 1:
        return [(body, entry.end - 1, counts)]
    return _fitting_parts(entry, positions.tolist(), counts, bytes_max)


def _fitting_parts(entry: CachedRecord, positions: list[int], counts: list[int],
                   bytes_max: int) -> list[tuple[bytes, int, list[int]]]:
    body = entry.subset_bytes(positions)
    if len(body) <= bytes_max or len(positions) == 1:
        return [(body, entry.end - 1, counts)]
    half = len(positions) // 2
    return (_fitting_parts(entry, positions[:half], counts[:half], bytes_max)
            + _fitting_parts(entry, positions[half:], counts[half:], bytes_max))


def _messages(parts: list[tuple[bytes, int, list[int]]], with_counts: bool, nacks_seen: int,
              bytes_max: int, send: int, open_windows: frozenset[int]) -> list[bytes]:
    groups: list[list[tuple[bytes, int, list[int]]]] = []
    current: list[tuple[bytes, int, list[int]]] = []
    size = 0
    for part in parts:
        cost = len(part[0]) + PART_FRAMING_BYTES_MAX + COUNT_BYTES_MAX * len(part[2])
        if current and size + cost > bytes_max:
            groups.append(current)
            current, size = [], 0
        current.append(part)
        size += cost
    if current:
        groups.append(current)
    messages = []
    for k, group in enumerate(groups):  # rule 3: a window split over messages stays open
        following = open_windows.union(last for _, last, _ in groups[k + 1][:1]) \
            if k + 1 < len(groups) else open_windows
        opened = list(dict.fromkeys(last for _, last, _ in group if last in following))
        messages.append(_delivery(group, with_counts, nacks_seen, send, opened))
    return messages


def _delivery(parts: list[tuple[bytes, int, list[int]]], with_counts: bool,
              nacks_seen: int, send: int, opened: list[int]) -> bytes:
    if len(parts) == 1 and not with_counts:  # following the tail: most
        body, last, _ = parts[0]
        return _one_part(body, last, nacks_seen, send, opened)
    out: list[bytes] = []
    for body, _, _ in parts:
        out += (_RECORDS_TAG, varint(len(body)), body)
    if with_counts:
        packed = b"".join(varint(c) for _, _, counts in parts for c in counts)
        out += (_REDELIVERY_COUNTS_TAG, varint(len(packed)), packed)
    packed = b"".join(varint(last) for _, last, _ in parts)
    out += (_WINDOW_LAST_OFFSETS_TAG, varint(len(packed)), packed)
    return _framed(out, nacks_seen, send, opened)


def _one_part(body: bytes, last: int, nacks_seen: int, send: int,
              opened: Sequence[int] = ()) -> bytes:
    """`_delivery` of one part without redelivery counts: the same bytes."""
    last_bytes = varint(last)
    return _framed([_RECORDS_TAG, varint(len(body)), body, _WINDOW_LAST_OFFSETS_TAG,
                    varint(len(last_bytes)), last_bytes], nacks_seen, send, opened)


def _framed(out: list[bytes], nacks_seen: int, send: int, opened: Sequence[int]) -> bytes:
    """The Delivery's fields `out` with its nacks seen, send and open windows, framed as
    the SubscribeResponse's `delivery` (one join: the records' bytes are copied once)."""
    if nacks_seen:
        out += (_NACKS_SEEN_TAG, varint(nacks_seen))
    if send:
        out += (_SEND_TAG, varint(send))
    if opened:
        packed = b"".join(map(varint, opened))
        out += (_OPEN_WINDOWS_TAG, varint(len(packed)), packed)
    return b"".join((_RESPONSE_DELIVERY_TAG, varint(sum(map(len, out))), *out))
