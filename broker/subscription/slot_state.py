"""Per-slot waiting state of one subscription partition: what makes a slot wait.

Job: remember, per slot and never per event, why a slot's events cannot go
out now and from where they must be read again: its *floor* (the slot's
events from that offset on were read past and are read again when the slot
may deliver), draining (which consumer still holds its events after a range
move, and how many), a nack delay, events out for the dead-letter topic.

Rules:
1. One flags byte per slot (`dispatch.FLOORED`, `DRAINING`, `DELAYED`,
   `DEAD_LETTERING`) for the vectorized checks; a dict entry per slot that
   waits for the details. 64 KiB plus a few dozen bytes per waiting slot,
   and while any slot is floored 256 KiB of counts (rule 2); the arrays are
   resident only in the pages written (`slot_array`).
2. A floor only moves down by `lower_floors` (min wins) and up by
   `raise_floor(s)`; `floor_events` counts the slot's events past its floor
   (for the backlog), as reads skip and re-read them: an int32 per slot,
   updated with one gather per read however many slots it touches.
3. Delays keep the latest due time per slot; `process_due(now_ms)` clears
   the ones that passed (a heap, stale entries skipped).

It must not know about consumers' permits, events' bytes, the log or the clock.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import numpy.typing as npt

from broker.subscription.array_ops import distinct, slot_array, slot_counts
from broker.subscription.dispatch import DEAD_LETTERING, DELAYED, DRAINING, FLOORED


class SlotState:
    """See the module docstring. Runs on the dispatcher's task."""

    def __init__(self) -> None:
        self.flags = slot_array(np.uint8)
        self.floors: dict[int, int] = {}  # slot -> first offset to read again
        # events past each slot's floor (approximate, for the backlog): allocated while
        # any slot is floored, so updating the counts of thousands of slots is one gather
        self._past: npt.NDArray[np.int32] | None = None
        self.draining: dict[int, list[str | int]] = {}  # slot -> [holder, events it holds]
        self.delays: dict[int, int] = {}  # slot -> due ms
        self._delay_heap: list[tuple[int, int]] = []
        self.dead_lettering: dict[int, int] = {}  # slot -> events out to the dead-letter topic
        self._floor_arrays: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None

    # ------------------------------------------------------------ floors

    def lower_floors(self, slots: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64]) -> None:
        """Floor each slot at the lowest of its offsets given (and its floor, if any)."""
        if not len(slots):
            return
        order = np.lexsort((offsets, slots))
        slots, offsets = slots[order], offsets[order]
        first = np.concatenate(([True], slots[1:] != slots[:-1]))
        floors = self.floors
        for slot, offset in zip(slots[first].tolist(), offsets[first].tolist(), strict=True):
            if offset < floors.get(slot, offset + 1):
                floors[slot] = offset
        self.flags[slots[first]] |= FLOORED
        self._floor_arrays = None

    def count_past_floor(self, slots: npt.NDArray[np.int32], sign: int = 1) -> None:
        """Events of floored slots read past (+1 each) or read again (-1 each)."""
        if not len(slots):
            return
        if self._past is None:
            self._past = slot_array(np.int32)
        values, counts = slot_counts(slots)
        past = self._past
        past[values] = np.maximum(past[values] + (counts if sign > 0 else -counts), 0)

    @property
    def floor_events(self) -> dict[int, int]:
        """slot -> events past its floor, for the slots with any (for stats)."""
        if self._past is None:
            return {}
        floored = self.floor_arrays()[0]  # only floored slots count (not a scan of all)
        counts = self._past[floored]
        kept = counts.nonzero()[0]
        return dict(zip(floored[kept].tolist(), counts[kept].tolist(), strict=True))

    def raise_floor(self, slot: int, offset: int) -> None:
        if offset > self.floors[slot]:
            self.floors[slot] = offset
            self._floor_arrays = None

    def raise_floors(self, slot_mask: npt.NDArray[np.bool_], offset: int) -> None:
        """`raise_floor(slot, offset)` for every floored slot in the mask, in one update."""
        slots, floors = self.floor_arrays()
        raised = slots[slot_mask[slots] & (floors < offset)]
        if len(raised):
            self.floors.update(dict.fromkeys(raised.tolist(), offset))
            self._floor_arrays = None

    def unfloor(self, slot: int) -> None:
        self.unfloor_all([slot])

    def unfloor_all(self, slots: list[int]) -> None:
        """These slots leave their floors (each is floored)."""
        floors = self.floors
        for slot in slots:
            del floors[slot]
        if self._past is not None:
            self._past[slots] = 0
            if not floors:
                self._past = None
        self.flags[slots] &= ~np.uint8(FLOORED)
        self._floor_arrays = None

    def floor_arrays(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(slots ascending, their floors) of every floored slot (cached until a change)."""
        if self._floor_arrays is None:
            slots = np.fromiter(self.floors.keys(), np.int64, len(self.floors))
            offsets = np.fromiter(self.floors.values(), np.int64, len(self.floors))
            order = slots.argsort()
            self._floor_arrays = (slots[order], offsets[order])
        return self._floor_arrays

    def past_floor(self, slots: npt.NDArray[Any], offsets: npt.NDArray[np.int64]
                   ) -> npt.NDArray[np.bool_]:
        """Per event: its slot is floored and the event lies at or past that floor (one
        binary search over `floor_arrays`, not a lookup per event)."""
        floor_slots, floor_offsets = self.floor_arrays()
        if not len(floor_slots):
            return np.zeros(len(slots), np.bool_)
        j = np.minimum(floor_slots.searchsorted(slots), len(floor_slots) - 1)
        past: npt.NDArray[np.bool_] = (floor_slots[j] == slots) & (offsets >= floor_offsets[j])
        return past

    # ------------------------------------------------------------ draining

    def start_draining(self, slots: npt.NDArray[np.int32], holder: str) -> None:
        """`holder` holds unacked events of these slots (one entry per event), which it
        no longer owns."""
        values, counts = slot_counts(slots)
        for slot, n in zip(values.tolist(), counts.tolist(), strict=True):
            entry = self.draining.get(slot)
            assert entry is None or entry[0] == holder, (
                f"slot {slot}: {holder!r} and {entry[0]!r} both hold unacked events of it")
            self.draining[slot] = [holder, n]
        self.flags[values] |= DRAINING

    def release_held(self, slots: npt.NDArray[np.int32], holder: str) -> None:
        """`holder` acked or gave back events of these slots (one entry per event)."""
        if not self.draining or not len(slots):
            return
        draining_slots = slots[(self.flags[slots] & DRAINING) != 0]
        if not len(draining_slots):
            return
        values, counts = slot_counts(draining_slots)
        for slot, n in zip(values.tolist(), counts.tolist(), strict=True):
            entry = self.draining[slot]
            if entry[0] != holder:
                continue
            left = int(entry[1]) - n
            assert left >= 0, f"slot {slot}: {holder!r} released more than it held"
            if left:
                entry[1] = left
            else:
                self.stop_draining(slot)

    def stop_draining(self, slot: int) -> None:
        del self.draining[slot]
        self.flags[slot] &= ~np.uint8(DRAINING)

    def drop_holder(self, holder: str) -> None:
        """`holder` is gone: it drains nothing any more."""
        for slot in [s for s, entry in self.draining.items() if entry[0] == holder]:
            self.stop_draining(slot)

    # ------------------------------------------------------------ delays

    def delay(self, slots: npt.NDArray[np.int32], due_ms: int) -> None:
        for slot in distinct(slots).tolist():
            if due_ms > self.delays.get(slot, -1):
                self.delays[slot] = due_ms
                heapq.heappush(self._delay_heap, (due_ms, slot))
                self.flags[slot] |= DELAYED

    def process_due(self, now_ms: int) -> bool:
        """Clear the delays that passed by `now_ms`; True when one did."""
        heap, changed = self._delay_heap, False
        while heap and heap[0][0] <= now_ms:
            due, slot = heapq.heappop(heap)
            if self.delays.get(slot) == due:
                del self.delays[slot]
                self.flags[slot] &= ~np.uint8(DELAYED)
                changed = True
        return changed

    def next_due_ms(self) -> int | None:
        heap = self._delay_heap
        while heap and self.delays.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    # ------------------------------------------------------------ dead letters

    def dead_letter(self, slots: npt.NDArray[np.int32], sign: int) -> None:
        """Events of these slots went out to (+1) or came back from (-1) the dead-letter topic."""
        values, counts = slot_counts(slots)
        for slot, n in zip(values.tolist(), counts.tolist(), strict=True):
            left = self.dead_lettering.get(slot, 0) + sign * n
            if left > 0:
                self.dead_lettering[slot] = left
                self.flags[slot] |= DEAD_LETTERING
            else:
                self.dead_lettering.pop(slot, None)
                self.flags[slot] &= ~np.uint8(DEAD_LETTERING)

    def reset(self) -> None:
        """Forget everything (a seek)."""
        self.__init__()  # type: ignore[misc]
