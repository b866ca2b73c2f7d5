"""Events read from the log that wait in memory for their slot: the look-ahead.

Job: hold the few events already read for slots that cannot deliver right
now, within two limits (per slot and in total), and say which ones do not
fit so the caller can leave them to a re-read.

Rules:
1. Events are kept in *candidate order*: each slot's events ascend, and a
   slot's events here always come before any of its events not read yet.
2. `admit` takes the events that could not be sent, in candidate order, and
   keeps a prefix of each slot's run: at most `slot_events_max` per slot and
   `events_max` in total (the rest of a slot's events past the first that
   does not fit are refused too, so what stays is always a prefix).
3. Per-slot counts live in one 65,536-entry int32 array (256 KiB of address
   space, resident only where counts were written: `slot_array`); everything
   else is proportional to what is held, at most `events_max` events.

It must not know about consumers, permits, floors or the log.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker.subscription.array_ops import add_slot_counts, slot_array
from broker.subscription.holdings import EMPTY, Taken, concat


class Pending:
    """See the module docstring. Runs on the dispatcher's task."""

    __slots__ = ("_events", "per_slot")

    def __init__(self) -> None:
        self._events: Taken = EMPTY
        self.per_slot = slot_array(np.int32)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def events(self) -> Taken:
        return self._events

    def take(self, positions: npt.NDArray[np.intp]) -> Taken:
        """Take out the events at these positions (ascending), keeping the order of the rest."""
        if not len(positions):
            return EMPTY
        events = self._events
        taken = Taken(events.offsets[positions], events.slots[positions],
                      events.counts[positions])
        keep = np.ones(len(events), np.bool_)
        keep[positions] = False
        self._events = Taken(events.offsets[keep], events.slots[keep], events.counts[keep])
        add_slot_counts(self.per_slot, taken.slots, -1)
        return taken

    def take_slots(self, slot_mask: npt.NDArray[np.bool_]) -> Taken:
        """Take out every event of the masked slots."""
        if not len(self._events):
            return EMPTY
        return self.take(slot_mask[self._events.slots].nonzero()[0])

    def take_all(self) -> Taken:
        return self.take(np.arange(len(self._events)))

    def admit(self, waiting: Taken, slot_events_max: int, events_max: int,
              ) -> tuple[npt.NDArray[np.bool_], Taken]:
        """Keep what fits of `waiting` (candidate order); returns (kept mask, refused)."""
        n = len(waiting)
        if not n:
            return np.zeros(0, np.bool_), EMPTY
        slots = waiting.slots
        order = slots.argsort(kind="stable")
        ordered = slots[order]
        group_start = ordered.searchsorted(ordered, side="left")
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n) - group_start
        fits = rank + self.per_slot[slots] < slot_events_max  # a prefix of each slot's run
        room = events_max - len(self._events)
        if room < n:  # a prefix in candidate order: still a prefix of each slot's run
            fits &= fits.cumsum() <= max(room, 0)
        kept = Taken(waiting.offsets[fits], slots[fits], waiting.counts[fits])
        self._events = concat([self._events, kept])
        add_slot_counts(self.per_slot, kept.slots, 1)
        refused = ~fits
        return fits, Taken(waiting.offsets[refused], slots[refused], waiting.counts[refused])

