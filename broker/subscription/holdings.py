"""What one consumer holds on one partition: events sent to it and not acknowledged.

Job: remember, per consumer, the offsets sent and not yet acknowledged with
their slots, redelivery counts and send times, and take them out again by
offset ranges (acks, nacks), by age (ack timeouts) or all at once (the
consumer left), at numpy speed: no Python object per event.

Rules:
1. Entries are kept in parallel arrays sorted by offset; an entry taken out
   is marked dead and the arrays are compacted once most entries are dead
   (or emptied at once when none is left), so taking is a pair of binary
   searches per range, not a list delete. The arrays are buffers with room
   to grow (amortized doubling), so adding in offset order writes in place.
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
from typing import Any

import numpy as np
import numpy.typing as npt

from broker.subscription.array_ops import distinct

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
_COMPACT_MIN = 1024
_ROOM = 64  # first size of a holding's buffers
_FEW_PARTS = 4  # a take of at most this many ranges goes range by range
_FEW_ENTRIES = 16  # ... and a range spanning at most this many entries, entry by entry


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
    parts = [p for p in parts if len(p.offsets)]
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
    return pick(merged, merged.offsets.argsort(kind="stable"))


class Holding:
    """The unacknowledged events of one consumer; see the module docstring."""

    __slots__ = ("_counts", "_live", "_n", "_offsets", "_sends", "_sent_ms", "_slots", "count")

    def __init__(self) -> None:
        # Buffers with room to grow: entries [0, _n) are used (live or dead), so adding
        # in offset order writes in place instead of concatenating six arrays.
        self._offsets = np.zeros(_ROOM, np.int64)
        self._slots = np.zeros(_ROOM, np.int32)
        self._counts = np.zeros(_ROOM, np.int32)
        self._sent_ms = np.zeros(_ROOM, np.int64)
        self._sends = np.zeros(_ROOM, np.int64)  # which send (delivery) each event came in
        self._live = np.zeros(_ROOM, np.bool_)
        self._n = 0
        self.count = 0  # live entries

    def add(self, taken: Taken, now_ms: int, send: int = 0) -> None:
        """Hold these events (offsets ascending), sent at `now_ms` in send `send`."""
        n = len(taken.offsets)
        if not n:
            return
        used = self._n
        if used and taken.offsets[0] <= self._offsets[used - 1]:
            self._merge(taken, now_ms, send)
            return
        if used + n > len(self._offsets):
            self._resize(n)
            used = self._n
        stop = used + n
        self._offsets[used:stop] = taken.offsets
        self._slots[used:stop] = taken.slots
        self._counts[used:stop] = taken.counts
        self._sent_ms[used:stop] = now_ms
        self._sends[used:stop] = send
        self._live[used:stop] = True
        self._n = stop
        self.count += n

    def _merge(self, taken: Taken, now_ms: int, send: int) -> None:
        """`add` of events that do not all lie past the held ones: merged in order."""
        n = len(taken)
        self._compact(force=True)
        used = self._n
        offsets = np.concatenate((self._offsets[:used], taken.offsets))
        order = offsets.argsort(kind="stable")
        offsets = offsets[order]
        assert bool((offsets[1:] > offsets[:-1]).all()), "an event was sent to a consumer that holds it"
        columns = (offsets,
                   np.concatenate((self._slots[:used], taken.slots))[order],
                   np.concatenate((self._counts[:used], taken.counts))[order],
                   np.concatenate((self._sent_ms[:used], np.full(n, now_ms, np.int64)))[order],
                   np.concatenate((self._sends[:used], np.full(n, send, np.int64)))[order])
        self._replace(columns, used + n)
        self.count += n

    def take_sent(self, sends: I64, starts: I64, stops: I64) -> Taken:
        """Take out the held events of send `sends[i]` in [starts[i], stops[i]) for every i
        (a delivered record part acknowledged whole, whatever else is held in its span)."""
        if not self.count or not len(sends):
            return EMPTY
        offsets = self._offsets[:self._n]
        if len(sends) <= _FEW_PARTS:  # a few record parts (following the tail: most acks)
            return self._take_positions(self._few_positions(starts, stops, sends))
        low = offsets.searchsorted(starts, side="left")
        spans = offsets.searchsorted(stops, side="left") - low
        total = int(spans.sum())
        if not total:
            return EMPTY
        which = np.arange(len(sends)).repeat(spans)
        positions = (low - spans.cumsum() + spans).repeat(spans) + np.arange(total)
        chosen = positions[self._live[positions] & (self._sends[positions] == sends[which])]
        if len(chosen) > 1 and not bool((chosen[1:] > chosen[:-1]).all()):
            chosen = distinct(chosen)  # ranges out of order or overlapping
        return self._take_positions(chosen)

    def _few_positions(self, starts: I64, stops: I64,
                       sends: I64 | None) -> npt.NDArray[np.intp]:
        """The live positions in a few ranges (of send `sends[i]` when given), range by
        range: a slice each, or one Python step per entry when a range spans a few
        (following the tail); ascending."""
        offsets = self._offsets[:self._n]
        lows = offsets.searchsorted(starts).tolist()
        highs = offsets.searchsorted(stops).tolist()
        wanted = [None] * len(lows) if sends is None else sends.tolist()
        live, held_sends = self._live, self._sends
        few: list[int] = []
        found: list[npt.NDArray[np.intp]] = []
        for send, low, high in zip(wanted, lows, highs, strict=True):
            if high - low <= _FEW_ENTRIES:
                few += [p for p in range(low, high)
                        if live[p] and (send is None or held_sends[p] == send)]
            else:
                mine = live[low:high] if send is None else \
                    live[low:high] & (held_sends[low:high] == send)
                found.append(mine.nonzero()[0] + low)
        if few or not found:
            found.append(np.array(few, np.intp))
        chosen = found[0] if len(found) == 1 else np.concatenate(found)
        if len(chosen) > 1 and not bool((chosen[1:] > chosen[:-1]).all()):
            chosen = distinct(chosen)  # ranges out of order or overlapping
        return chosen

    def take_ranges(self, starts: I64, stops: I64) -> Taken:
        """Take out the held offsets inside the half-open ranges (sorted, disjoint)."""
        if not self.count or not len(starts):
            return EMPTY
        if len(starts) <= _FEW_PARTS:  # a few ranges (following the tail: most acks)
            return self._take_positions(self._few_positions(starts, stops, None))
        offsets = self._offsets[:self._n]
        low = offsets.searchsorted(starts, side="left")
        high = offsets.searchsorted(stops, side="left")
        spans = high - low
        if not spans.any():
            return EMPTY
        keep = spans > 0
        low, spans = low[keep], spans[keep]
        positions = (low - spans.cumsum() + spans).repeat(spans) + np.arange(spans.sum())
        positions = positions[self._live[positions]]
        return self._take_positions(positions)

    def take_expired(self, now_ms: int, timeout_ms: int) -> Taken:
        """Take out what was sent `timeout_ms` or longer before `now_ms`."""
        if not self.count:
            return EMPTY
        n = self._n
        positions = (self._live[:n] & (self._sent_ms[:n] + timeout_ms <= now_ms)).nonzero()[0]
        return self._take_positions(positions)

    def take_all(self) -> Taken:
        """Take out everything (the consumer left)."""
        return self._take_positions(self._live[:self._n].nonzero()[0])

    def take_after(self, firsts: dict[int, int]) -> Taken:
        """Take out the held events of these slots above their given offsets
        (slot -> offset): the rest of a slot behind a nacked event."""
        if not self.count or not firsts:
            return EMPTY
        n = self._n
        slots = np.fromiter(firsts.keys(), np.int64, len(firsts))
        order = slots.argsort()
        slots, lows = slots[order], np.fromiter(firsts.values(), np.int64, len(firsts))[order]
        held_slots = self._slots[:n]
        i = np.minimum(slots.searchsorted(held_slots), len(slots) - 1)
        chosen = self._live[:n] & (slots[i] == held_slots) & (self._offsets[:n] > lows[i])
        return self._take_positions(chosen.nonzero()[0])

    def take_below(self, stop: int) -> Taken:
        """Take out every held offset below `stop` (a cumulative ack)."""
        high = int(self._offsets[:self._n].searchsorted(stop, side="left"))
        return self._take_positions(self._live[:high].nonzero()[0])

    def first_offset(self) -> int | None:
        """The lowest held offset (None when nothing is held), without copying."""
        if not self.count:
            return None
        return int(self._offsets[int(np.argmax(self._live[:self._n]))])

    def oldest_sent_ms(self) -> int | None:
        """When the oldest held event was sent (None when nothing is held)."""
        if not self.count:
            return None
        n = self._n
        return int(self._sent_ms[:n][self._live[:n]].min())

    def live(self) -> Taken:
        """Every held event, ascending (read only: a view for stats and range moves)."""
        n = self._n
        live = self._live[:n]
        return Taken(self._offsets[:n][live], self._slots[:n][live], self._counts[:n][live])

    def _take_positions(self, positions: npt.NDArray[np.intp]) -> Taken:
        if not len(positions):
            return EMPTY
        taken = Taken(self._offsets[positions], self._slots[positions], self._counts[positions])
        self._live[positions] = False
        self.count -= len(positions)
        if not self.count:
            self._n = 0  # all taken: start over at the front (no compaction needed)
        else:
            self._compact()
        return taken

    def _compact(self, force: bool = False) -> None:
        n = self._n
        dead = n - self.count
        if not dead or not (force or (n >= _COMPACT_MIN and dead * 2 >= n)):
            return
        live = self._live[:n]
        self._replace(tuple(a[:n][live] for a in (self._offsets, self._slots, self._counts,
                                                  self._sent_ms, self._sends)), self.count)

    def _resize(self, adding: int) -> None:
        """Make room for `adding` more entries (dropping dead ones on the way)."""
        n = self._n
        live = self._live[:n]
        self._replace(tuple(a[:n][live] for a in (self._offsets, self._slots, self._counts,
                                                  self._sent_ms, self._sends)),
                      self.count, room=adding)

    def _replace(self, columns: tuple[npt.NDArray[Any], ...], n: int, room: int = 0) -> None:
        """Hold exactly these live entries (offsets, slots, counts, sent_ms, sends), in
        buffers with room for `room` more (at least half their size free: amortized)."""
        size = max(_ROOM, 2 * (n + room))
        if size < len(self._offsets) <= 4 * size:
            size = len(self._offsets)  # the buffers fit and are not much too big: keep them
        if len(self._offsets) != size:
            self._offsets = np.zeros(size, np.int64)
            self._slots = np.zeros(size, np.int32)
            self._counts = np.zeros(size, np.int32)
            self._sent_ms = np.zeros(size, np.int64)
            self._sends = np.zeros(size, np.int64)
            self._live = np.zeros(size, np.bool_)
        buffers: tuple[npt.NDArray[Any], ...] = (self._offsets, self._slots, self._counts,
                                                 self._sent_ms, self._sends)
        for buffer, column in zip(buffers, columns, strict=True):
            buffer[:n] = column
        self._live[:n] = True
        self._n = n
