"""The consumer's client-side buffers: delivered batches and pending acks. Pure.

Job: hold what the broker delivered until the application takes it, say
how many permits to grant back (Pulsar's rule: the initial grant is the
receiver queue size per partition; once half of it has been taken, grant
what was taken), and turn acknowledged offsets into the fewest ranges.

Rules:
1. Permits outstanding + events buffered <= queue size per partition, so
   the buffer is bounded by what this consumer granted. The queue size per
   partition is the receiver queue size, or less with many partitions: the
   total bound divided by their number, at least 2 (as Pulsar's
   maxTotalReceiverQueueSizeAcrossPartitions).
2. Acks are kept per partition as ranges and leave as sorted, merged
   half-open ranges in one packed field (`Ack.bounds`): one Ack message per
   partition per flush, no message object per range.
3. `reset` (a reconnect) drops the buffered batches: the broker redelivers
   every event the old stream sent and nobody acknowledged.

It must not know about gRPC, asyncio or clocks.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np

from sdk.core.offset_ranges import interleave, merge_ranges, runs_of

B = TypeVar("B")


class FetchBuffer(Generic[B]):
    """Delivered batches in arrival order, with per-partition permit accounting."""

    def __init__(self, queue_size: int, total_max: int | None = None) -> None:
        if queue_size < 2:
            raise ValueError(f"receiver queue size {queue_size} is invalid: need >= 2")
        self.receiver_queue_size = queue_size
        self.total_max = total_max
        self.queue_size = queue_size  # per partition, set by `initial_grants`
        self._batches: deque[tuple[int, int, B]] = deque()  # (partition, events, batch)
        self._taken: dict[int, int] = {}  # events taken since the last grant, per partition
        self.buffered_events = 0

    def __len__(self) -> int:
        return len(self._batches)

    def initial_grants(self, partitions: Sequence[int]) -> list[tuple[int, int]]:
        """(partition, permits) to send when a stream opens."""
        self._taken = dict.fromkeys(partitions, 0)
        size = self.receiver_queue_size
        if self.total_max is not None and partitions:
            size = max(2, min(size, self.total_max // len(partitions)))
        self.queue_size = size
        return [(p, size) for p in partitions]

    def put(self, partition: int, events: int, batch: B) -> None:
        self._batches.append((partition, events, batch))
        self.buffered_events += events

    def take(self) -> B | None:
        """The oldest batch, or None when empty."""
        if not self._batches:
            return None
        partition, events, batch = self._batches.popleft()
        self.buffered_events -= events
        if partition in self._taken:
            self._taken[partition] += events
        return batch

    def grant_wanted(self) -> bool:
        """True when some partition has half its queue taken (see `grants_due`)."""
        half = self.queue_size // 2
        return any(taken >= half for taken in self._taken.values())

    def grants_due(self) -> list[tuple[int, int]]:
        """(partition, permits) to grant now: partitions with half the queue taken."""
        due = []
        half = self.queue_size // 2
        for partition, taken in self._taken.items():
            if taken >= half:
                due.append((partition, taken))
                self._taken[partition] = 0
        return due

    def remove(self, partition: int, cut: Callable[[B], tuple[B | None, int]]) -> None:
        """Cut events out of the buffered batches of `partition` (a nack gives back
        what was prefetched behind it). `cut` returns the batch that is left (None:
        nothing) and how many events it removed; those count as taken, so their
        permits are granted back."""
        kept: deque[tuple[int, int, B]] = deque()
        for entry in self._batches:
            if entry[0] != partition:
                kept.append(entry)
                continue
            left, removed = cut(entry[2])
            if removed:
                self.buffered_events -= removed
                if partition in self._taken:
                    self._taken[partition] += removed
            if left is not None:
                kept.append((partition, entry[1] - removed, left))
        self._batches = kept

    def count_taken(self, partition: int, events: int) -> None:
        """Events that arrived and were given back unseen: their permits come back."""
        if partition in self._taken:
            self._taken[partition] += events

    def reset(self) -> None:
        self._batches.clear()
        self.buffered_events = 0
        self._taken.clear()


class AckBuffer:
    """Offsets to acknowledge, per partition, until the next flush, as ranges; and whole
    delivered record parts as (send, start, stop) ranges (`Ack.sent_ranges`).

    Ranges are kept as flat Python int lists (a delivery acks one range: no numpy
    array per ack); a flush merges them with numpy only when there are many."""

    def __init__(self) -> None:
        self._pending: dict[int, list[int]] = {}  # flat start, stop pairs
        self._sent: dict[int, list[int]] = {}  # flat send, start, stop triples
        self.count = 0

    def add(self, partition: int, offsets: Iterable[int]) -> None:
        starts, stops = runs_of(np.unique(np.fromiter(offsets, np.int64)))
        if len(starts):
            bounds = np.empty(2 * len(starts), np.int64)
            bounds[0::2], bounds[1::2] = starts, stops
            self._pending.setdefault(partition, []).extend(bounds.tolist())
            self.count += int((stops - starts).sum())

    def add_range(self, partition: int, start: int, stop: int) -> None:
        """Acknowledge every offset in [start, stop) (a whole delivered record)."""
        pending = self._pending.get(partition)
        if pending is None:
            self._pending[partition] = [start, stop]
        elif pending[-1] == start:  # follows the last range (records in order): extend it
            pending[-1] = stop
        else:
            pending += (start, stop)
        self.count += stop - start

    def add_sent(self, partition: int, send: int, start: int, stop: int) -> None:
        """Acknowledge what the broker sent in `send` within [start, stop) (a record part)."""
        sent = self._sent.get(partition)
        if sent is None:
            self._sent[partition] = [send, start, stop]
        else:
            sent += (send, start, stop)
        self.count += 1

    def drain(self) -> dict[int, tuple[bytes, bytes]]:
        """partition -> (`Ack.bounds` of sorted, merged ranges, `Ack.sent_ranges`);
        empties the buffer."""
        pending, self._pending, self.count = self._pending, {}, 0
        sent, self._sent = self._sent, {}
        if not sent:  # the common cases: one partition, whole records
            return {partition: (_merged_bounds(flat), b"") for partition, flat in pending.items()}
        drained = {}
        for partition in pending.keys() | sent.keys():
            flat = pending.get(partition)
            triples = sent.get(partition, ())
            drained[partition] = (_merged_bounds(flat) if flat else b"",
                                  struct.pack(f"<{len(triples)}q", *triples))
        return drained


SMALL_RANGES = 8  # up to this many ranges are merged in Python; more go through numpy


def _merged_bounds(flat: list[int]) -> bytes:
    """`Ack.bounds` of the flat (start, stop) pairs: sorted, merged, little-endian."""
    pairs = len(flat) // 2
    if pairs == 1:
        return struct.pack("<2q", *flat)
    if pairs > SMALL_RANGES:
        array = np.array(flat, np.int64)
        return interleave(*merge_ranges(array[0::2], array[1::2]))
    merged: list[int] = []
    for start, stop in sorted(zip(flat[0::2], flat[1::2], strict=True)):
        if merged and start <= merged[-1]:
            merged[-1] = max(merged[-1], stop)
        else:
            merged += (start, stop)
    return struct.pack(f"<{len(merged)}q", *merged)


class NackHolds:
    """Nacked slots whose nack the broker may not have seen yet.

    A delivery the broker planned before it saw a nack may hold events of the
    nacked slot after the nacked offset; the broker took them back when it saw
    the nack (`Nack.rest_of_slots`), so the consumer drops them and the retry
    is not overtaken (`Delivery.nacks_seen` says how many of this stream's
    nacks the broker had processed). Rules:
    1. Nacks are numbered as they are queued (1, 2, ...), not as they are sent.
    2. `nacked` holds each slot from its lowest nacked offset, under the
       number of the nack being queued (`queued + 1`).
    3. A hold ends once a delivery of its partition shows the broker saw its
       nack: it never waits for later nacks (nor creates any), so it always
       ends (every later delivery of that partition ends it, the retry too).
    4. Only a delivery of the hold's own partition ends it. Each partition's
       dispatcher queues its own deliveries, in the order it decided them, but
       not in step with the others: one whose records it had to read from the
       store first is queued after the read, so a delivery of another partition
       decided after the nack may arrive before it, and says nothing about it.
    """

    def __init__(self) -> None:
        self._holds: dict[tuple[int, int], tuple[int, int]] = {}  # -> (offset, number)
        self.queued = 0

    def __bool__(self) -> bool:
        return bool(self._holds)

    def nacked(self, partition: int, offsets: Sequence[int], slots: Sequence[int]) -> list[int]:
        """Hold the slots of a nack about to be queued (call `queue` for it next); returns
        its `Nack.rest_of_slots`: flat (slot, lowest nacked offset) pairs."""
        number = self.queued + 1
        holds = self._holds
        lowest: dict[int, int] = {}
        for offset, slot in zip(offsets, slots, strict=True):
            lowest[slot] = min(lowest.get(slot, offset), offset)
        for slot, offset in lowest.items():
            hold = holds.get((partition, slot))
            holds[partition, slot] = (offset if hold is None else min(hold[0], offset), number)
        return [v for pair in lowest.items() for v in pair]

    def queue(self) -> None:
        """A nack was queued."""
        self.queued += 1

    def seen(self, nacks_seen: int, partition: int) -> bool:
        """A delivery of `partition` planned after `nacks_seen` nacks: end the holds of
        that partition it covers (rule 4); True when some of that partition remain
        (its events of those slots may be stale)."""
        holds = self._holds
        if not holds:
            return False
        ended = [k for k, v in holds.items() if k[0] == partition and v[1] <= nacks_seen]
        for key in ended:
            del holds[key]
        return any(k[0] == partition for k in holds)

    def stale_positions(self, partition: int, offsets: Sequence[int],
                        slots: Sequence[int]) -> list[int]:
        """Positions of events after their held slot's nacked offset (to give back)."""
        holds = self._holds
        return [i for i, (o, s) in enumerate(zip(offsets, slots, strict=True))
                if o > holds.get((partition, s), (o, 0))[0]]

    def reset(self, still_queued: int) -> None:
        """A new stream: nothing held; the nacks still queued go out on it first."""
        self._holds.clear()
        self.queued = still_queued
