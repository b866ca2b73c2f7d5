"""What one consumer holds on one partition: events sent to it and not acknowledged.

Job: remember, per consumer, the offsets sent and not yet acknowledged with
their slots, redelivery counts and send times, and take them out again by
offset ranges (acks, nacks), by age (ack timeouts) or all at once (the
consumer left), at numpy speed: no Python object per event.

Rules:
1. Entries are kept in parallel arrays sorted by offset; an entry taken out
   is marked dead and the arrays are compacted once most entries are dead,
   so taking is a pair of binary searches per range, not a list delete.
2. An offset is held at most once (a consumer is never sent an event it
   holds); adding one that is held is a programmer error (asserted).
3. Ranges are half-open ``[start, stop)``, sorted and disjoint; offsets in
   them that this consumer does not hold are ignored: an ack or nack covers
   only what was sent to the consumer that sends it.

It must not know about slots' owners, permits, the cursor, the log or time
beyond the `now_ms` it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
_COMPACT_MIN = 1024


@dataclass(frozen=True, slots=True)
class Taken:
    """Events taken out of a holding: parallel arrays, ascending offsets."""

    offsets: I64
    slots: I32
    counts: I32

    def __len__(self) -> int:
        return len(self.offsets)


EMPTY = Taken(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))


def concat(parts: list[Taken]) -> Taken:
    """One `Taken` of several (not re-sorted)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return EMPTY
    if len(parts) == 1:
        return parts[0]
    return Taken(np.concatenate([p.offsets for p in parts]),
                 np.concatenate([p.slots for p in parts]),
                 np.concatenate([p.counts for p in parts]))


def pick(events: Taken, positions: npt.NDArray[np.intp]) -> Taken:
    """The events at these positions."""
    return Taken(events.offsets[positions], events.slots[positions], events.counts[positions])


def union(a: Taken, b: Taken) -> Taken:
    """Both, in offset order."""
    merged = concat([a, b])
    return pick(merged, np.argsort(merged.offsets, kind="stable"))


class Holding:
    """The unacknowledged events of one consumer; see the module docstring."""

    __slots__ = ("_counts", "_live", "_offsets", "_sends", "_sent_ms", "_slots", "count")

    def __init__(self) -> None:
        self._offsets = np.zeros(0, np.int64)
        self._slots = np.zeros(0, np.int32)
        self._counts = np.zeros(0, np.int32)
        self._sent_ms = np.zeros(0, np.int64)
        self._sends = np.zeros(0, np.int64)  # which send (delivery) each event came in
        self._live = np.zeros(0, np.bool_)
        self.count = 0  # live entries

    def add(self, taken: Taken, now_ms: int, send: int = 0) -> None:
        """Hold these events (offsets ascending), sent at `now_ms` in send `send`."""
        if not len(taken):
            return
        n = len(taken)
        sent = np.full(n, now_ms, np.int64)
        sends = np.full(n, send, np.int64)
        if not len(self._offsets) or taken.offsets[0] > self._offsets[-1]:
            self._offsets = np.concatenate((self._offsets, taken.offsets))
            self._slots = np.concatenate((self._slots, taken.slots))
            self._counts = np.concatenate((self._counts, taken.counts))
            self._sent_ms = np.concatenate((self._sent_ms, sent))
            self._sends = np.concatenate((self._sends, sends))
            self._live = np.concatenate((self._live, np.ones(n, np.bool_)))
        else:
            self._compact(force=True)
            offsets = np.concatenate((self._offsets, taken.offsets))
            order = np.argsort(offsets, kind="stable")
            self._offsets = offsets[order]
            assert not len(offsets) or bool(np.all(np.diff(self._offsets) > 0)), \
                "an event was sent to a consumer that holds it"
            self._slots = np.concatenate((self._slots, taken.slots))[order]
            self._counts = np.concatenate((self._counts, taken.counts))[order]
            self._sent_ms = np.concatenate((self._sent_ms, sent))[order]
            self._sends = np.concatenate((self._sends, sends))[order]
            self._live = np.ones(len(order), np.bool_)
        self.count += n

    def take_sent(self, sends: I64, starts: I64, stops: I64) -> Taken:
        """Take out the held events of send `sends[i]` in [starts[i], stops[i]) for every i
        (a delivered record part acknowledged whole, whatever else is held in its span)."""
        if not self.count or not len(sends):
            return EMPTY
        offsets = self._offsets
        low = np.searchsorted(offsets, starts, side="left")
        spans = np.searchsorted(offsets, stops, side="left") - low
        total = int(spans.sum())
        if not total:
            return EMPTY
        which = np.repeat(np.arange(len(sends)), spans)
        positions = np.repeat(low - np.cumsum(spans) + spans, spans) + np.arange(total)
        chosen = positions[self._live[positions] & (self._sends[positions] == sends[which])]
        if len(chosen) > 1 and not bool(np.all(np.diff(chosen) > 0)):
            chosen = np.unique(chosen)  # ranges out of order or overlapping
        return self._take_positions(chosen)

    def take_ranges(self, starts: I64, stops: I64) -> Taken:
        """Take out the held offsets inside the half-open ranges (sorted, disjoint)."""
        if not self.count or not len(starts):
            return EMPTY
        offsets = self._offsets
        low = np.searchsorted(offsets, starts, side="left")
        high = np.searchsorted(offsets, stops, side="left")
        spans = high - low
        if not spans.any():
            return EMPTY
        if len(starts) == 1:
            positions = np.arange(low[0], high[0])
        else:
            keep = spans > 0
            low, spans = low[keep], spans[keep]
            positions = np.repeat(low - np.cumsum(spans) + spans, spans) + np.arange(spans.sum())
        positions = positions[self._live[positions]]
        return self._take_positions(positions)

    def take_expired(self, now_ms: int, timeout_ms: int) -> Taken:
        """Take out what was sent `timeout_ms` or longer before `now_ms`."""
        if not self.count:
            return EMPTY
        positions = np.flatnonzero(self._live & (self._sent_ms + timeout_ms <= now_ms))
        return self._take_positions(positions)

    def take_all(self) -> Taken:
        """Take out everything (the consumer left)."""
        return self._take_positions(np.flatnonzero(self._live))

    def take_after(self, firsts: dict[int, int]) -> Taken:
        """Take out the held events of these slots above their given offsets
        (slot -> offset): the rest of a slot behind a nacked event."""
        if not self.count or not firsts:
            return EMPTY
        slots = np.fromiter(firsts.keys(), np.int64, len(firsts))
        order = np.argsort(slots)
        slots, lows = slots[order], np.fromiter(firsts.values(), np.int64, len(firsts))[order]
        i = np.minimum(np.searchsorted(slots, self._slots), len(slots) - 1)
        chosen = self._live & (slots[i] == self._slots) & (self._offsets > lows[i])
        return self._take_positions(np.flatnonzero(chosen))

    def take_below(self, stop: int) -> Taken:
        """Take out every held offset below `stop` (a cumulative ack)."""
        high = int(np.searchsorted(self._offsets, stop, side="left"))
        return self._take_positions(np.flatnonzero(self._live[:high]))

    def oldest_sent_ms(self) -> int | None:
        """When the oldest held event was sent (None when nothing is held)."""
        if not self.count:
            return None
        return int(self._sent_ms[self._live].min())

    def live(self) -> Taken:
        """Every held event, ascending (read only: a view for stats and range moves)."""
        live = self._live
        return Taken(self._offsets[live], self._slots[live], self._counts[live])

    def _take_positions(self, positions: npt.NDArray[np.intp]) -> Taken:
        if not len(positions):
            return EMPTY
        taken = Taken(self._offsets[positions], self._slots[positions], self._counts[positions])
        self._live[positions] = False
        self.count -= len(positions)
        self._compact()
        return taken

    def _compact(self, force: bool = False) -> None:
        dead = len(self._live) - self.count
        if not dead or not (force or (len(self._live) >= _COMPACT_MIN and dead * 2 >= len(self._live))):
            return
        live = self._live
        self._offsets = self._offsets[live]
        self._slots = self._slots[live]
        self._counts = self._counts[live]
        self._sent_ms = self._sent_ms[live]
        self._sends = self._sends[live]
        self._live = np.ones(self.count, np.bool_)
