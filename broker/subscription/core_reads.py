"""The read side of the dispatch core: what to read next, and taking in what a read found.

Job: rule 2 of `core.py` — the main read at `position` that never waits for a
slot, and catch-up reads that sweep the floored slots that may deliver again
(each starts where the last stopped; a slot whose floor is behind the sweep
waits for the next one, so a slot that keeps falling back cannot hold the
others) — and the restart filter (the persisted cursor's knowledge of what was
acknowledged, until the main read passed it).

It is a part of `PartitionCore` (a base class): it reads and changes the
core's state and hands what it found to the core's dispatch. Pure: no I/O,
no clock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker.subscription.array_ops import distinct
from broker.subscription.core_types import CoreLimits, ReadRequest, ReadResult
from broker.subscription.cursor import Cursor
from broker.subscription.dispatch import BLOCKING, FLOORED
from broker.subscription.given_back import GivenBack
from broker.subscription.holdings import I32, I64, Taken, concat, pick
from broker.subscription.members import Member, permits_available
from broker.subscription.pending import Pending
from broker.subscription.slot_state import SlotState
from sdk.core.hashing import SLOT_COUNT

CATCH_UP_READS_IN_A_ROW = 3  # then a main read, when one is wanted too


class ReadSide:
    """See the module docstring; `PartitionCore` provides the state it declares."""

    position: int
    filter: Cursor | None
    limits: CoreLimits
    slots: SlotState
    given_back: GivenBack
    pending: Pending
    members: dict[str, Member]
    _by_index: list[Member | None]
    _owners: npt.NDArray[np.uint32]
    _ticket: int
    _sweep: int
    _catch_up_in_a_row: int
    _dead_out: Taken

    @property
    def keyed(self) -> bool:
        raise NotImplementedError

    def mark_delete(self) -> int:
        raise NotImplementedError

    def _dispatch(self, fresh: Taken, now_ms: int) -> None:
        raise NotImplementedError  # DispatchSide's, before this class in PartitionCore's bases

    def next_read(self, end_offset: int) -> ReadRequest | None:
        """What to read next, or None. Catch-up reads go first (they move the mark-delete,
        and they must outrun the main read to rejoin it), but when both are wanted the
        main read gets at least one read in `CATCH_UP_READS_IN_A_ROW + 1`."""
        available = permits_available(self._by_index, self.limits.consumer_unacked_events_max)
        wanted = any(available)
        catch_up = None
        if not self.keyed or (wanted and self.slots.floors):
            catch_up = self._catch_up_request(np.array(available, np.int64), end_offset)
        main = self._main_wanted(wanted, end_offset)
        if catch_up is not None and (self._catch_up_in_a_row < CATCH_UP_READS_IN_A_ROW
                                     or not main):
            self._catch_up_in_a_row += 1
            return catch_up
        self._catch_up_in_a_row = 0
        if not main:
            return None
        self._ticket += 1
        return ReadRequest(self._ticket, self.position, end_offset, self.limits.read_events_max)

    def read_all(self, end_offset: int) -> bool:
        """Whether no read can be wanted before the log grows past `end_offset`, whatever
        the permits: the main read is there and nothing waits to be read again (no
        floors; for Shared, nothing given back). Then `next_read` gives None, and a
        shell following the tail may idle without asking it."""
        return self.position >= end_offset and not self.slots.floors and \
            not len(self.given_back)

    def _main_wanted(self, permits_left: bool, end_offset: int) -> bool:
        """Whether the main read is wanted; `permits_left`: some owner index has permits."""
        if self.position >= end_offset:
            return False
        if self.keyed:
            return permits_left
        demand = sum(m.available(self.limits.consumer_unacked_events_max)
                     for m in self.members.values())
        return demand > len(self.pending)

    def _catch_up_request(self, permits: I64, end_offset: int) -> ReadRequest | None:
        """A catch-up read for the floored slots that may deliver (rule 2).

        Catch-up reads sweep: each starts where the last one stopped and takes the
        slots whose events all lie ahead of it; a slot whose floor is behind waits for
        the next sweep, which starts at the lowest one. So a slow slot that keeps
        falling back cannot hold the sweep at its floor while other slots wait. A
        catch-up read may run on past the main read's position (to `end_offset`): it
        is then the main read too, and its slots rejoin the main read (a catch-up
        that stopped there would chase the main read for ever).
        """
        if not self.keyed:
            return self._shared_catch_up()
        floor_slots, floor_offsets = self.slots.floor_arrays()
        if not len(floor_slots):
            return None
        owner = self._owners[floor_slots].astype(np.intp)
        ready = (owner != 0) & (permits[owner] > 0) & \
            ((self.slots.flags[floor_slots] & BLOCKING) == 0)
        if not ready.any():
            return None
        slots, starts, owner = floor_slots[ready], floor_offsets[ready].copy(), owner[ready]
        given = self.given_back
        if len(given):  # a slot's given-back events come before its floor
            i = np.minimum(slots.searchsorted(given.slots), len(slots) - 1)
            mine = slots[i] == given.slots
            np.minimum.at(starts, i[mine], given.offsets[mine])
        if self._sweep >= self.position or not (starts >= self._sweep).any():
            self._sweep = int(starts.min())
        ahead = starts >= self._sweep
        mask = np.zeros(SLOT_COUNT, np.bool_)
        mask[slots[ahead]] = True
        wanted = int(permits[distinct(owner[ahead])].sum()) + \
            self.limits.waiting_slot_events_max * int(ahead.sum())
        self._ticket += 1
        return ReadRequest(self._ticket, max(self._sweep, int(starts[ahead].min())),
                           max(end_offset, self.position), self.limits.read_events_max, True,
                           mask, wanted)

    def _shared_catch_up(self) -> ReadRequest | None:
        given = self.given_back
        if not len(given) or not any(m.available(self.limits.consumer_unacked_events_max)
                                     for m in self.members.values()):
            return None
        if self._sweep >= self.position or given.offsets[-1] < self._sweep:
            self._sweep = int(given.offsets[0])
        start = int(given.offsets[given.offsets.searchsorted(self._sweep)])
        self._ticket += 1
        return ReadRequest(self._ticket, start, self.position, self.limits.read_events_max, True)

    def process_read(self, request: ReadRequest, result: ReadResult, now_ms: int) -> None:
        """Take what a read found: send what may go, keep or floor what waits."""
        if request.ticket != self._ticket:
            return  # a seek came in between
        if request.catch_up:
            fresh = self._catch_up_events(request, result, now_ms)
            self._sweep = result.stop
            if result.stop > self.position:  # it ran on past the main read: it is that too
                fresh = concat([fresh, self._main_events(result, self._still_ahead(request))])
                self.position = result.stop
        else:
            fresh = self._main_events(result)
            self.position = max(self.position, result.stop)
        self._dispatch(fresh, now_ms)
        mask = self._still_ahead(request)
        if mask is not None:
            self._leave_floors(mask)
        self._drop_filter()

    def _main_events(self, result: ReadResult,
                     caught_up: npt.NDArray[np.bool_] | None = None) -> Taken:
        """A read's events from the main read's position on, but those of floored slots
        (read past: counted on their floors; `caught_up` slots were taken by the
        catch-up part of the same read)."""
        offsets, slots = result.offsets, result.slots
        if self.filter is None and (not len(offsets) or offsets[0] >= self.position):
            keep = None  # ascending offsets, all from the position on: every one passes
        else:
            keep = self._filter_mask(offsets, slots) & (offsets >= self.position)
        if self.keyed and self.slots.floors:
            floored = (self.slots.flags[slots] & FLOORED) != 0
            if floored.any():
                past = floored if keep is None else floored & keep
                if caught_up is not None:
                    past = past & ~caught_up[slots]
                self.slots.count_past_floor(slots[past])
                keep = ~floored if keep is None else keep & ~floored
        if keep is not None and not keep.all():
            offsets, slots = offsets[keep], slots[keep]
        return Taken(offsets, slots, np.zeros(len(offsets), np.int32))

    def _catch_up_events(self, request: ReadRequest, result: ReadResult, now_ms: int) -> Taken:
        """The given-back events and the floored slots' events this read found (rule 2)."""
        offsets, slots = result.offsets, result.slots
        given = self.given_back
        mask = self._still_ahead(request)
        positions = given.positions_between(request.start, result.stop)
        if mask is not None:
            positions = positions[mask[given.slots[positions]]]
        else:
            positions = positions[given.due_ms[positions] <= now_ms]
        back = given.take(positions)
        if len(back):  # events retention removed meanwhile are gone: acknowledged
            i = np.minimum(offsets.searchsorted(back.offsets), max(len(offsets) - 1, 0))
            found = offsets[i] == back.offsets if len(offsets) else np.zeros(len(back), np.bool_)
            back = pick(back, found.nonzero()[0])
        if mask is None:
            return back
        region = mask[slots] & self.slots.past_floor(slots, offsets)
        region &= self._filter_mask(offsets, slots)
        self.slots.count_past_floor(slots[region], -1)
        self.slots.raise_floors(mask, result.stop)  # lowered again for what waits
        fresh = Taken(offsets[region], slots[region], np.zeros(int(region.sum()), np.int32))
        if not len(back):
            return fresh
        merged = concat([back, fresh])
        return pick(merged, merged.offsets.argsort(kind="stable"))

    def _still_ahead(self, request: ReadRequest) -> npt.NDArray[np.bool_] | None:
        """The slots of a catch-up read whose every event to read again still lies at or
        past its start: a nack or a leave while the read was in flight may have given
        back an earlier event of a slot, which must go first (next sweep)."""
        if request.slot_mask is None:
            return None
        mask = request.slot_mask.copy()
        floor_slots, floor_offsets = self.slots.floor_arrays()
        mask[floor_slots[floor_offsets < request.start]] = False
        given = self.given_back
        mask[given.slots[given.offsets < request.start]] = False
        return mask

    def _leave_floors(self, slot_mask: npt.NDArray[np.bool_]) -> None:
        """Slots of a catch-up read whose floor reached the main read leave their floor
        (unless events given back still wait for them)."""
        floor_slots, floor_offsets = self.slots.floor_arrays()
        done = slot_mask[floor_slots] & (floor_offsets >= self.position)
        if not done.any():
            return
        waiting = set(self.given_back.slots.tolist()) | set(self._dead_out.slots.tolist())
        self.slots.unfloor_all([slot for slot in floor_slots[done].tolist()
                                if slot not in waiting])

    def _filter_mask(self, offsets: I64, slots: I32) -> npt.NDArray[np.bool_]:
        """After a restart: which of these events the persisted cursor says are unacked."""
        if self.filter is None:
            return np.ones(len(offsets), np.bool_)
        return self.filter.unacked_mask(offsets, slots)

    def _drop_filter(self) -> None:
        if self.filter is not None and self.mark_delete() >= self.filter.horizon:
            self.filter = None
