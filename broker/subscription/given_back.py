"""Events given back by consumers and not yet sent again (nacks, ack timeouts, leaves).

Job: keep the offsets that were sent, given back unacknowledged and must be
sent again, with their slot, redelivery count and the time they may go
(a nack's delay), until a re-read of the log picks them up.

Rules:
1. Their record bytes are not kept: the dispatcher reads them again from
   the log when their slot may deliver, in offset order with the slot's
   later events (see `core.py`). So this costs a few numbers per event, and
   only for events a consumer held: bounded by what consumers may hold.
2. An offset is given back at most once at a time (asserted).
3. Arrays are sorted by offset; every operation is a few numpy calls.

It must not know about consumers, slots' owners, the log or the clock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker.subscription.holdings import EMPTY, I32, I64, Taken


class GivenBack:
    """See the module docstring. Runs on the dispatcher's task."""

    __slots__ = ("counts", "due_ms", "offsets", "slots")

    def __init__(self) -> None:
        self.offsets: I64 = np.zeros(0, np.int64)
        self.slots: I32 = np.zeros(0, np.int32)
        self.counts: I32 = np.zeros(0, np.int32)
        self.due_ms: I64 = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, taken: Taken, due_ms: int) -> None:
        """Give these events back (their counts already raised), redelivered from `due_ms`."""
        if not len(taken):
            return
        offsets = np.concatenate((self.offsets, taken.offsets))
        order = offsets.argsort(kind="stable")
        self.offsets = offsets[order]
        assert bool((self.offsets[1:] > self.offsets[:-1]).all()), "an event was given back twice"
        self.slots = np.concatenate((self.slots, taken.slots))[order]
        self.counts = np.concatenate((self.counts, taken.counts))[order]
        self.due_ms = np.concatenate((self.due_ms, np.full(len(taken), due_ms, np.int64)))[order]

    def take(self, positions: npt.NDArray[np.intp]) -> Taken:
        """Take out the events at these positions (ascending)."""
        if not len(positions):
            return EMPTY
        taken = Taken(self.offsets[positions], self.slots[positions], self.counts[positions])
        keep = np.ones(len(self.offsets), np.bool_)
        keep[positions] = False
        self._keep(keep)
        return taken

    def take_between(self, start: int, stop: int) -> Taken:
        """Take out every event with start <= offset < stop."""
        low, high = self.offsets.searchsorted((start, stop), side="left")
        return self.take(np.arange(low, high))

    def positions_between(self, start: int, stop: int) -> npt.NDArray[np.intp]:
        low, high = self.offsets.searchsorted((start, stop), side="left")
        return np.arange(low, high)

    def first_due_ms(self) -> int | None:
        return int(self.due_ms.min()) if len(self.due_ms) else None

    def clear(self) -> None:
        self._keep(np.zeros(len(self.offsets), np.bool_))

    def _keep(self, keep: npt.NDArray[np.bool_]) -> None:
        self.offsets = self.offsets[keep]
        self.slots = self.slots[keep]
        self.counts = self.counts[keep]
        self.due_ms = self.due_ms[keep]
