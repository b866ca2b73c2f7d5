"""Dispatch planning: which candidate events go to which consumer now, and which wait.

Job: the pure middle of the partition task's two-phase dispatch (read a batch
from the log -> `plan_dispatch` -> send the slices), the draining bookkeeping
that keeps per-key order across range moves (`DrainTracker`), Shared
round-robin by permits (`SharedDispatch`) and Failover's active consumer
(`pick_active`).

Rules of `plan_dispatch` (Key_Shared):
1. Candidates are one partition's events as parallel lists (offsets, slots),
   offsets strictly ascending, and must be a prefix, in offset order, of
   (events waiting for redelivery) + (events not read yet). Then the
   examined prefix always holds every earlier event of a slot.
2. An event goes to the owner of its slot, if that owner has a permit left;
   a plan never hands a consumer more events than its permits.
3. Per-key order: once one offset of a slot waits, every later candidate of
   that slot waits too. No bookkeeping is needed for it: every reason to
   wait, once true for a slot, stays true for the rest of the
   plan (owners, draining and held do not change within a plan, held
   compares offsets that only grow, and permits only shrink).
4. A draining slot (a consumer other than its owner still holds unacked
   events of it) goes to nobody: PIP-379's draining hashes, but stricter,
   as the new owner gets nothing of the slot until the old one has acked or
   released everything or is gone; then the redeliveries come first (rule 1).
   If the slot moved back to the holder, it flows to it again.
5. A held slot (a negatively acked offset waiting out its redelivery delay)
   delivers nothing at or after that offset until the redelivery is due:
   a nack does not let later events of the key overtake it.
6. Memory is bounded: the plan stops once `look_ahead_max` candidates wait
   (`look_ahead_reached`), and stops early once no permit is left anywhere;
   candidates past `examined` were not looked at and stay where they are.

The shell's loop (the unit-test `Simulation` runs exactly this): move due
nacks into the replay set and build `held` from the ones not due; candidates =
sorted(replay set) + the next unread offsets; plan; send; put the waiting
offsets in the replay set and advance the read position over the examined
new ones. On a join or leave: `DrainTracker.remove_consumer` for a leaver
(its unacked offsets join the replay set), then `process_moves` with the
selector's changes and every attached consumer's unacked events.

Reasons to wait, in the order they are checked: no owner, draining, held,
no permits. Per-event work is a few list and dict lookups (the owner table
turns a slot into a consumer index); no object is made per event.

It must not know about: the log, RocksDB, gRPC streams, clocks (redelivery
delays are resolved by the shell into the `held` map), or how a selector
assigns ranges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import pairwise

from broker.subscription.selector import NO_OWNER, OwnerTable, RangeChanges
from sdk.core.model import slot_mask


class WaitReason(IntEnum):
    """Why a candidate event was not sent in this plan."""

    NO_OWNER = 1  # no consumer serves its slot (sticky gaps, no consumers)
    DRAINING = 2  # another consumer still holds unacked events of its slot
    HELD = 3  # an earlier (or this) offset of its slot waits for a delayed redelivery
    NO_PERMITS = 4  # its owner has no permit left


@dataclass(slots=True)
class DispatchPlan:
    """What to send now and what waits.

    Attributes:
        sends: consumer -> offsets to send, ascending (only consumers that get some).
        send_indexes: consumer -> positions of those events in the candidate lists.
        waiting_offsets: candidates examined but not sent, ascending.
        waiting_reasons: `WaitReason` values, parallel to `waiting_offsets`.
        examined: candidates[:examined] were decided; the rest were not looked at.
        look_ahead_reached: the plan stopped because `look_ahead_max` events wait.
        waiting_indexes: positions of the waiting events in the candidate lists
            (so the shell moves them with C-level maps, not a loop per event).
    """

    sends: dict[str, list[int]]
    send_indexes: dict[str, list[int]]
    waiting_offsets: list[int]
    waiting_reasons: list[int]
    examined: int
    look_ahead_reached: bool
    waiting_indexes: list[int] = field(default_factory=list)

    def sent_count(self) -> int:
        return sum(len(offsets) for offsets in self.sends.values())

    def waiting_counts(self) -> dict[WaitReason, int]:
        """How many candidates wait, per reason (for stats and "why is it blocked")."""
        counts: dict[WaitReason, int] = {}
        for reason in self.waiting_reasons:
            counts[WaitReason(reason)] = counts.get(WaitReason(reason), 0) + 1
        return counts


def plan_dispatch(
    offsets: Sequence[int],
    slots: Sequence[int],
    owners: OwnerTable,
    permits: Mapping[str, int],
    draining: Mapping[int, str],
    held: Mapping[int, int],
    look_ahead_max: int,
) -> DispatchPlan:
    """Split Key_Shared candidates into per-consumer sends and waiting events.

    Args:
        offsets: candidate offsets, strictly ascending (see rule 1).
        slots: the slot of each candidate, parallel to `offsets`.
        owners: the selector's owner table.
        permits: consumer -> permits it has granted and not used; missing = 0.
        draining: slot -> consumer still holding unacked events of it
            (`DrainTracker.draining`).
        held: slot -> the lowest offset of it waiting for a delayed redelivery.
        look_ahead_max: the most candidates this plan may leave waiting (>= 1).

    Returns:
        The plan; see `DispatchPlan`.
    """
    if look_ahead_max < 1:
        raise ValueError(f"look_ahead_max {look_ahead_max} is invalid: need >= 1")
    assert len(offsets) == len(slots), "offsets and slots must be parallel"
    assert all(a < b for a, b in pairwise(offsets)), "candidate offsets must ascend"
    names = owners.names
    table = owners.indexes
    left = [0 if name is None else max(0, permits.get(name, 0)) for name in names]
    left_total = sum(left)
    chosen: list[list[int]] = [[] for _ in names]
    waiting_indexes: list[int] = []
    waiting_reasons: list[int] = []
    examined = len(offsets)
    reached = False
    for i in range(len(offsets)):
        if left_total == 0:
            examined = i
            break
        slot = slots[i]
        owner = table[slot]
        holder = draining.get(slot)
        first_held = held.get(slot)
        if owner == NO_OWNER:
            reason = WaitReason.NO_OWNER
        elif holder is not None and holder != names[owner]:
            reason = WaitReason.DRAINING
        elif first_held is not None and offsets[i] >= first_held:
            reason = WaitReason.HELD
        elif left[owner] == 0:
            reason = WaitReason.NO_PERMITS
        else:
            left[owner] -= 1
            left_total -= 1
            chosen[owner].append(i)
            continue
        waiting_indexes.append(i)
        waiting_reasons.append(reason)
        if len(waiting_indexes) >= look_ahead_max:
            examined = i + 1
            reached = True
            break
    send_indexes: dict[str, list[int]] = {}
    sends: dict[str, list[int]] = {}
    for owner, indexes in enumerate(chosen):
        name = names[owner]
        if indexes and name is not None:
            send_indexes[name] = indexes
            sends[name] = list(map(offsets.__getitem__, indexes))
    waiting_offsets = list(map(offsets.__getitem__, waiting_indexes))
    return DispatchPlan(sends, send_indexes, waiting_offsets, waiting_reasons, examined, reached,
                        waiting_indexes)


class DrainTracker:
    """Slots whose old owner still holds unacked events after a range move.

    Runs on the partition task. Feed it every range change (with the
    unacked events of the consumers that lost slots), every ack, every
    release (nack, ack timeout) and every consumer removal; hand
    `draining` to `plan_dispatch`.

    Invariant (asserted): at most one consumer holds unacked events of a
    slot. An entry ends when its count reaches zero or its holder is removed
    (then the shell redelivers that consumer's unacked events, which come
    first because they are the lowest offsets of their slots).
    """

    def __init__(self) -> None:
        self._holder: dict[int, str] = {}  # slot -> consumer that still holds events of it
        self._offsets: dict[int, set[int]] = {}  # slot -> those unacked offsets
        self._slot_by_offset: dict[int, int] = {}

    @property
    def draining(self) -> Mapping[int, str]:
        """slot -> the consumer that still holds unacked events of it (read-only view)."""
        return self._holder

    @property
    def draining_events_count(self) -> int:
        return len(self._slot_by_offset)

    def entry(self, slot: int) -> tuple[str, int] | None:
        """(holder, unacked count) of a draining slot, None if it is not draining."""
        holder = self._holder.get(slot)
        return None if holder is None else (holder, len(self._offsets[slot]))

    def process_moves(
        self,
        changes: RangeChanges,
        unacked: Mapping[str, tuple[Sequence[int], Sequence[int]]],
    ) -> list[int]:
        """Start draining the moved slots whose old owner still holds unacked events.

        Args:
            changes: what the selector reported for one join or leave.
            unacked: consumer -> (offsets, slots) of the events it holds
                unacked; must include every attached consumer that lost slots.

        Returns:
            The slots that started (or restarted) draining, ascending.
        """
        started: list[int] = []
        for consumer in changes.consumers:
            lost = changes.lost_by(consumer)
            if not lost or consumer not in unacked:
                continue
            mask = slot_mask(lost)
            offsets, slots = unacked[consumer]
            fresh: dict[int, set[int]] = {}
            for offset, slot in zip(offsets, slots, strict=True):
                if mask[slot]:
                    fresh.setdefault(slot, set()).add(offset)
            for slot, slot_offsets in fresh.items():
                self._start(slot, consumer, slot_offsets)
                started.append(slot)
        return sorted(started)

    def process_acks(self, ranges: Iterable[tuple[int, int]]) -> list[int]:
        """Forget acked offsets (half-open ranges); returns slots that stopped draining."""
        released: list[int] = []
        tracked = self._slot_by_offset
        for start, stop in ranges:
            if not tracked:
                break
            if stop - start <= len(tracked):
                hits = [offset for offset in range(start, stop) if offset in tracked]
            else:
                hits = [offset for offset in tracked if start <= offset < stop]
            released += self._forget(hits)
        return released

    def process_released(self, offsets: Iterable[int]) -> list[int]:
        """Forget offsets their consumer gave back (nack, ack timeout) unacked."""
        tracked = self._slot_by_offset
        return self._forget([offset for offset in offsets if offset in tracked])

    def remove_consumer(self, name: str) -> list[int]:
        """Drop every entry `name` holds; returns the slots that stopped draining."""
        slots = sorted(slot for slot, holder in self._holder.items() if holder == name)
        for slot in slots:
            for offset in self._offsets.pop(slot):
                del self._slot_by_offset[offset]
            del self._holder[slot]
        return slots

    def _start(self, slot: int, consumer: str, offsets: set[int]) -> None:
        holder = self._holder.get(slot)
        assert holder is None or holder == consumer, (
            f"slot {slot}: {consumer!r} and {holder!r} both hold unacked events of it"
        )
        for offset in self._offsets.get(slot, ()):
            del self._slot_by_offset[offset]
        self._holder[slot] = consumer
        self._offsets[slot] = offsets
        for offset in offsets:
            self._slot_by_offset[offset] = slot

    def _forget(self, offsets: list[int]) -> list[int]:
        released: list[int] = []
        for offset in offsets:
            slot = self._slot_by_offset.pop(offset)
            slot_offsets = self._offsets[slot]
            slot_offsets.discard(offset)
            if not slot_offsets:
                del self._offsets[slot]
                del self._holder[slot]
                released.append(slot)
        return released


class SharedDispatch:
    """Shared mode: spread events over consumers by their permits, round-robin.

    No ordering and no key affinity. Each plan fills consumers in turn,
    starting after the consumer that was served last, giving each an even
    share of what is left (capped by its permits) until events or permits
    run out; work is per consumer, not per event. With one consumer it
    serves Exclusive and Failover (the active consumer) as well.
    """

    def __init__(self) -> None:
        self._consumers: list[str] = []
        self._next = 0

    def consumers(self) -> list[str]:
        return list(self._consumers)

    def add_consumer(self, name: str) -> None:
        if name in self._consumers:
            raise ValueError(f"consumer {name!r} is already attached to this subscription")
        self._consumers.append(name)

    def remove_consumer(self, name: str) -> None:
        if name not in self._consumers:
            raise ValueError(f"consumer {name!r} is not attached; attached: {self._consumers}")
        i = self._consumers.index(name)
        del self._consumers[i]
        if i < self._next:
            self._next -= 1
        if self._next >= len(self._consumers):
            self._next = 0

    def plan(self, offsets: Sequence[int], permits: Mapping[str, int]) -> DispatchPlan:
        """Hand out `offsets` (a prefix is examined: as many as there are permits)."""
        count = len(self._consumers)
        order = [self._consumers[(self._next + k) % count] for k in range(count)]
        left = {name: max(0, permits.get(name, 0)) for name in order}
        granted = dict.fromkeys(order, 0)
        remaining = len(offsets)
        active = [name for name in order if left[name] > 0]
        last_served: str | None = None
        while remaining and active:
            share = max(1, remaining // len(active))
            still_open: list[str] = []
            for name in active:
                if remaining == 0:
                    break
                give = min(share, left[name], remaining)
                granted[name] += give
                left[name] -= give
                remaining -= give
                last_served = name
                if left[name]:
                    still_open.append(name)
            active = still_open
        if last_served is not None:
            self._next = (self._consumers.index(last_served) + 1) % count
        sends: dict[str, list[int]] = {}
        send_indexes: dict[str, list[int]] = {}
        position = 0
        for name in order:
            if granted[name]:
                stop = position + granted[name]
                sends[name] = list(offsets[position:stop])
                send_indexes[name] = list(range(position, stop))
                position = stop
        return DispatchPlan(sends, send_indexes, [], [], position, False)


def pick_active(consumers: Sequence[tuple[str, int]], partition: int) -> str | None:
    """Failover: the active consumer of `partition` among (name, priority) pairs.

    Pulsar's rule: sort by priority ascending (0 is the highest), then name;
    keep the highest priority level; active = sorted[partition % n].
    None when there is no consumer.
    """
    if not consumers:
        return None
    ranked = sorted(consumers, key=lambda consumer: (consumer[1], consumer[0]))
    top = [name for name, priority in ranked if priority == ranked[0][1]]
    return top[partition % len(top)]
