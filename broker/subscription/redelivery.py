"""Redelivery bookkeeping of one subscription partition: counts, delays, retries.

Job: remember how often each offset was given back (nack, ack timeout,
consumer loss), which nacked offsets wait out a delay, and which slots must
hold their later events back so a retried event is not overtaken.

Rules:
1. A nack (and an ack timeout, which is a nack without delay) puts the
   offset in *retrying* until it is acknowledged: while an offset of a slot
   is retrying, no later offset of that slot is delivered (`held`). While
   it waits out its delay it is itself held too; once due, it goes first
   and the rest of the slot waits until it is acknowledged. So key order
   survives retries (at slot granularity, as every Key_Shared rule here).
2. The redelivery count of an offset is how many times it was given back;
   a delivery carries it. Counts below the mark-delete are pruned.
3. `exhausted(offset, max)` says when an offset goes to the dead-letter
   topic instead of back to a consumer (max 0 = never).

Time is an argument (`now_ms`). It must not know about consumers, the log,
permits or how held slots are enforced (that is `plan_dispatch`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence


class Redeliveries:
    """See the module docstring. Runs on the dispatcher's task."""

    def __init__(self) -> None:
        # heap of (due_ms, offset); an entry is live only while its due_ms is the
        # offset's current one (settled or re-nacked offsets leave stale entries)
        self._delayed: list[tuple[int, int]] = []
        self._delayed_slot: dict[int, int] = {}  # offset -> slot, waiting out a delay
        self._delayed_due: dict[int, int] = {}  # offset -> its due_ms
        self._retrying: dict[int, int] = {}  # offset -> slot, nacked and not acked
        self._counts: dict[int, int] = {}
        self._held: dict[int, int] | None = {}

    def count(self, offset: int) -> int:
        return self._counts.get(offset, 0)

    def counts_of(self, offsets: Sequence[int]) -> list[int] | None:
        """Counts parallel to `offsets`; None when every one is 0."""
        counts = self._counts
        if not counts:
            return None
        found = [counts.get(o, 0) for o in offsets]
        return found if any(found) else None

    @property
    def delayed_count(self) -> int:
        return len(self._delayed_slot)

    @property
    def retrying(self) -> Mapping[int, int]:
        return self._retrying

    def exhausted(self, offset: int, max_redeliveries: int) -> bool:
        """True when `offset` was given back more than `max_redeliveries` times."""
        return max_redeliveries > 0 and self._counts.get(offset, 0) > max_redeliveries

    def process_lost(self, offsets: Iterable[int]) -> None:
        """Offsets whose consumer left unacknowledged: count them, nothing held."""
        counts = self._counts
        for offset in offsets:
            counts[offset] = counts.get(offset, 0) + 1

    def process_nacked(self, offsets: Sequence[int], slots: Sequence[int], due_ms: int) -> None:
        """Offsets given back by a nack or an ack timeout, redelivered at `due_ms`."""
        counts = self._counts
        for offset, slot in zip(offsets, slots, strict=True):
            counts[offset] = counts.get(offset, 0) + 1
            self._retrying[offset] = slot
            self._delayed_slot[offset] = slot
            self._delayed_due[offset] = due_ms
            heapq.heappush(self._delayed, (due_ms, offset))
        self._held = None

    def process_due(self, now_ms: int) -> tuple[list[int], list[int]]:
        """Pop the delayed offsets due by `now_ms`: (offsets, slots)."""
        offsets: list[int] = []
        slots: list[int] = []
        heap = self._delayed
        while heap and heap[0][0] <= now_ms:
            due, offset = heapq.heappop(heap)
            if self._delayed_due.get(offset) != due:
                continue  # stale
            del self._delayed_due[offset]
            offsets.append(offset)
            slots.append(self._delayed_slot.pop(offset))
        if offsets:
            self._held = None
        return offsets, slots

    def next_due_ms(self) -> int | None:
        heap = self._delayed
        while heap and self._delayed_due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # stale
        return heap[0][0] if heap else None

    def held(self) -> Mapping[int, int]:
        """slot -> the first offset of it that may not be delivered now (rule 1)."""
        if self._held is None:
            held: dict[int, int] = {}
            delayed = self._delayed_slot
            for offset, slot in self._retrying.items():
                first = offset if offset in delayed else offset + 1
                if first < held.get(slot, first + 1):
                    held[slot] = first
            self._held = held
        return self._held

    def process_acks(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Acknowledged offsets stop retrying (half-open ranges, ascending starts)."""
        if not self._retrying:
            return
        starts = [start for start, _ in ranges]
        done = []
        for offset in self._retrying:
            i = bisect_right(starts, offset) - 1
            if i >= 0 and offset < ranges[i][1]:
                done.append(offset)
        for offset in done:
            self.forget(offset)

    def forget(self, offset: int) -> None:
        """`offset` is settled (acknowledged or dead-lettered)."""
        if self._retrying.pop(offset, None) is not None:
            self._delayed_slot.pop(offset, None)
            self._delayed_due.pop(offset, None)
            self._held = None
        self._counts.pop(offset, None)

    def prune_below(self, mark_delete: int) -> None:
        """Drop everything below the mark-delete (all acknowledged)."""
        for table in (self._counts, self._retrying, self._delayed_slot, self._delayed_due):
            stale = [o for o in table if o < mark_delete]
            for offset in stale:
                del table[offset]
        self._held = None

    def clear(self) -> None:
        """Forget everything (a seek)."""
        self._delayed.clear()
        self._delayed_slot.clear()
        self._delayed_due.clear()
        self._retrying.clear()
        self._counts.clear()
        self._held = None
