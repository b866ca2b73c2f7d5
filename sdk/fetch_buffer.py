"""The consumer's client-side buffers: delivered batches and pending acks. Pure.

Job: hold what the broker delivered until the application takes it, say
how many permits to grant back (Pulsar's rule: the initial grant is the
receiver queue size per partition; once half of it has been taken, grant
what was taken), and turn acknowledged offsets into the fewest ranges.

Rules:
1. Permits outstanding + events buffered <= queue size per partition, so
   the buffer is bounded by what this consumer granted.
2. Acks are kept per partition as offsets and leave as sorted, merged
   half-open ranges: one Ack message per partition per flush.
3. `reset` (a reconnect) drops the buffered batches: the broker redelivers
   every event the old stream sent and nobody acknowledged.

It must not know about gRPC, asyncio or clocks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, islice, repeat
from operator import add, ne
from typing import Generic, TypeVar

B = TypeVar("B")


def offsets_to_ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, merged half-open ranges covering exactly `offsets` (any order, repeats).

    Python work is per range, not per offset: the run breaks (where an offset
    is not its predecessor + 1) are found by C-level `map` and `compress`.
    """
    ordered = sorted(set(offsets))
    n = len(ordered)
    if not n:
        return []
    if ordered[-1] - ordered[0] == n - 1:  # one run (a whole record): the common case
        return [(ordered[0], ordered[-1] + 1)]
    # breaks[k]: ordered[k] ends a run (ordered[k + 1] is not ordered[k] + 1)
    breaks = bytes(map(ne, islice(ordered, 1, None), map(add, ordered, repeat(1))))
    starts = [ordered[0], *compress(islice(ordered, 1, None), breaks)]
    stops = [*map(add, compress(ordered, breaks), repeat(1)), ordered[-1] + 1]
    return list(zip(starts, stops, strict=True))


class FetchBuffer(Generic[B]):
    """Delivered batches in arrival order, with per-partition permit accounting."""

    def __init__(self, queue_size: int) -> None:
        if queue_size < 2:
            raise ValueError(f"receiver queue size {queue_size} is invalid: need >= 2")
        self.queue_size = queue_size
        self._batches: deque[tuple[int, int, B]] = deque()  # (partition, events, batch)
        self._taken: dict[int, int] = {}  # events taken since the last grant, per partition
        self.buffered_events = 0

    def __len__(self) -> int:
        return len(self._batches)

    def initial_grants(self, partitions: Sequence[int]) -> list[tuple[int, int]]:
        """(partition, permits) to send when a stream opens."""
        self._taken = dict.fromkeys(partitions, 0)
        return [(p, self.queue_size) for p in partitions]

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
    """Offsets to acknowledge, per partition, until the next flush."""

    def __init__(self) -> None:
        self._pending: dict[int, list[int]] = {}
        self.count = 0

    def add(self, partition: int, offsets: Iterable[int]) -> None:
        pending = self._pending.setdefault(partition, [])
        before = len(pending)
        pending.extend(offsets)
        self.count += len(pending) - before

    def drain(self) -> dict[int, list[tuple[int, int]]]:
        """partition -> merged ranges; empties the buffer."""
        pending, self._pending, self.count = self._pending, {}, 0
        return {p: offsets_to_ranges(offsets) for p, offsets in pending.items() if offsets}
