"""One subscription on one partition, as one pure state machine (h11 / TigerBeetle shape).

Job: every decision of dispatch. The shell (`dispatcher.py`) reads the log,
feeds what it read and what consumers said to `process_*`, and carries out
what comes back: `take_sends()` (what to send to whom), `next_read()` (what to
read next: from which offset, for which slots), `snapshot()` (what to persist
when `dirty`), `take_notices()`, `take_dead_letters()`. No I/O, no asyncio,
no clock: time is the `now_ms` argument, so a seeded simulation drives this
very code (tests/sim/).

Rules:
1. The partition is read at `position` (the main read), which never waits
   for a slot: it moves on whenever some consumer has permits.
2. A slot whose events cannot go out now (no owner, owner out of permits or
   paused, draining to a new owner, a nack delay, an event out to the
   dead-letter topic) keeps at most `waiting_slot_events_max` events read in
   memory (`Pending`, at most `look_ahead_events_max` in all); past that it
   gets a *floor*: "slot S waits from offset O" (`SlotState`), and the main
   read skips its events. When the slot may deliver again, catch-up reads
   sweep from the lowest floor for the waiting slots only and run on into
   the main read, and each slot leaves its floor once it caught up
   (`core_reads.py`). Waiting costs a few bytes per slot, never the events
   read past it.
3. Events a consumer gives back (nack, ack timeout, it left, Failover moves
   the active consumer) go to `GivenBack` (offsets only, not bytes) and
   floor their slot at or below its events still in memory, so the slot
   sends them first, then the rest in offset order: per-key order survives
   retries. A nack delay blocks the slot until it passes. A nack may name,
   per slot, from where to take back the rest of the slot the consumer
   holds (`rest_of_slots`: what the SDK drops from older deliveries).
4. Key order across range moves (Key_Shared): a moved slot whose old owner
   still holds unacked events of it is *draining*: its new owner gets
   nothing of it until the old owner acked or gave back all of them, or left
   (then they come first, by rule 3). At most one consumer holds unacked
   events of a slot; every slot has exactly one owner while anyone is
   attached (the selector's job).
5. Acks and nacks are offset ranges (or, for whole record parts, ranges of
   one send), applied in one pass to what the consumer that sends them holds
   (other offsets in them are ignored: no client acknowledges what it was
   not sent).
6. The cursor (`snapshot()`) is what is unacknowledged: events held, given
   back, pending, out to the dead-letter topic, plus the floors. Its
   mark-delete is the lowest of them (or `position`).
7. Shared has no slots: events go round-robin by permits, given-back ones
   (each with its own nack delay) are read again and go first.

The state machine is split by job: `core_types.py` (its inputs and outputs),
`core_reads.py` (rule 2's reads), `core_dispatch.py` (planning a batch of
candidates, rules 1-3 and 7), `core_members.py` (attach, detach, range moves
and the owner table, rule 4); this module keeps flow control, acks, nacks,
time, seek and the cursor.

It must not know about gRPC, RocksDB, record bytes, asyncio or the clock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from broker.subscription.array_ops import distinct
from broker.subscription.core_dispatch import DispatchSide
from broker.subscription.core_members import MemberSide
from broker.subscription.core_reads import ReadSide
from broker.subscription.core_types import (
    CoreLimits,
    Kind,
    Mode,
    Notice,
    PermitsInvalid,
    ReadRequest,
    ReadResult,
    Send,
    new_selector,
)
from broker.subscription.cursor import Cursor
from broker.subscription.dispatch import DRAINING
from broker.subscription.given_back import GivenBack
from broker.subscription.holdings import EMPTY, I64, Taken, concat, pick, union
from broker.subscription.members import Member, RateMeter
from broker.subscription.pending import Pending
from broker.subscription.persist import merge_cursor
from broker.subscription.slot_state import SlotState
from sdk.core.hashing import SLOT_COUNT


class PartitionCore(DispatchSide, ReadSide, MemberSide):
    """See the module docstring. Every method runs on the dispatcher's task."""

    def __init__(self, kind: int, mode: int, partition: int, limits: CoreLimits,
                 cursor: Cursor, now_ms: int) -> None:
        self.kind = Kind(kind)
        self.partition = partition
        self.limits = limits
        self.position = cursor.mark_delete  # the main read's next offset
        self.filter: Cursor | None = None if cursor.is_simple else cursor  # after a restart
        self.members: dict[str, Member] = {}
        self.selector = new_selector(mode, limits.points_per_consumer) \
            if self.kind == Kind.KEY_SHARED else None
        self.active: str | None = None  # Exclusive / Failover
        self._by_index: list[Member | None] = [None]
        self._reindex()  # no owner yet: the one shared empty table
        self._shared_next = 0
        self.slots = SlotState()
        self.pending = Pending()
        self.given_back = GivenBack()
        self._dead_out = EMPTY  # out to the dead-letter topic, not settled
        self._sends: list[Send] = []
        self._notices: list[Notice] = []
        self._dead_new: list[Taken] = []
        self._ticket = 0
        self.seeks = 0  # how many seeks moved it (`process_seek`)
        # send ids never repeat across restarts (a consumer may ack an old one late)
        self._last_send = now_ms * 1_000_000
        self._sweep = 0  # where the next catch-up read starts (see `_catch_up_request`)
        self._catch_up_in_a_row = 0
        self.meter = RateMeter(now_ms)
        self.dirty = False

    # ------------------------------------------------------------ outputs

    def take_sends(self) -> list[Send]:
        sends, self._sends = self._sends, []
        return sends

    def take_notices(self) -> list[Notice]:
        notices, self._notices = self._notices, []
        return notices

    def take_dead_letters(self) -> Taken:
        """Events to append to the dead-letter topic, then `process_dead_lettered`."""
        dead, self._dead_new = concat(self._dead_new), []
        return dead

    @property
    def keyed(self) -> bool:
        return self.kind != Kind.SHARED

    def owner_of(self, slot: int) -> str | None:
        member = self._by_index[int(self._owners[slot])]
        return None if member is None else member.name

    def may_hold_unsent(self, stop: int) -> bool:
        """Whether `holds_unsent` can be true for a record ending before `stop`:
        following the tail (nothing waits in memory or on a floor, the read is past
        the record) it cannot, and the shell asks nothing more."""
        return stop > self.position or bool(len(self.pending)) or bool(self.slots.floors)

    def holds_unsent(self, name: str, offsets: I64, slots: npt.NDArray[np.int32]) -> bool:
        """Whether events of one record (`offsets`, their `slots`) that `name` owns were
        not sent yet: not read, waiting in memory, or behind their slot's floor (which
        also covers what was given back). A slot's events above its floor that `name`
        still holds count too: an over-estimate, so a share is never said to end early.
        Events of slots that move to another consumer meanwhile do not come to `name`."""
        member = self.members.get(name)
        index = next((i for i, m in enumerate(self._by_index) if m is member), None)
        if member is None or index is None or not self.keyed:
            return False
        mine = self._owners[slots] == index
        if not mine.any():
            return False
        offsets, slots = offsets[mine], slots[mine]
        if int(offsets[-1]) >= self.position:
            return True
        pending = self.pending.events.offsets
        if len(pending) and np.isin(offsets, pending).any():
            return True
        return bool(self.slots.floors) and bool(self.slots.past_floor(slots, offsets).any())

    # ------------------------------------------------------------ flow control

    def process_permits(self, name: str, count: int) -> None:
        """Add permits. Raises PermitsInvalid: count 0, or too many outstanding."""
        member = self.members[name]
        limit = self.limits.consumer_permits_max
        if count < 1 or member.permits + count > limit:
            raise PermitsInvalid(f"count={count} with {member.permits} outstanding is out of "
                                 f"range; allowed: count >= 1 and at most {limit} outstanding "
                                 f"per consumer and partition")
        member.permits += count

    def process_pause(self, name: str, paused: bool) -> None:
        """The shell pauses a consumer whose stream is backed up (its outbox is full)."""
        member = self.members.get(name)
        if member is not None:
            member.paused = paused

    # ------------------------------------------------------------ acks

    def process_ack(self, name: str, starts: I64, stops: I64) -> int:
        """Acknowledge what `name` holds in these half-open ranges (sorted, disjoint);
        returns how many events that was."""
        member = self.members.get(name)
        if member is None:
            return 0
        taken = member.holding.take_ranges(starts, stops)
        if len(taken):
            self.slots.release_held(taken.slots, name)
            self.dirty = True
        return len(taken)

    def process_ack_sent(self, name: str, sends: I64, starts: I64, stops: I64) -> int:
        """Acknowledge what `name` holds of send `sends[i]` in [starts[i], stops[i]) for
        each i (whole record parts); returns how many events that was."""
        member = self.members.get(name)
        if member is None:
            return 0
        taken = member.holding.take_sent(sends, starts, stops)
        if len(taken):
            self.slots.release_held(taken.slots, name)
            self.dirty = True
        return len(taken)

    def process_ack_cumulative(self, name: str, stop: int) -> None:
        """Exclusive/Failover: acknowledge every offset below `stop`, sent or not."""
        for member in self.members.values():
            self.slots.release_held(member.holding.take_below(stop).slots, member.name)
        self.given_back.take_between(0, stop)
        pending = self.pending.events
        self.pending.take((pending.offsets < stop).nonzero()[0])
        for slot, floor in list(self.slots.floors.items()):
            if floor < stop:
                if stop >= self.position:
                    self.slots.unfloor(slot)
                else:
                    self.slots.raise_floor(slot, stop)
        self.position = max(self.position, stop)
        self.dirty = True

    def process_nack(self, name: str, starts: I64, stops: I64, due_ms: int, now_ms: int,
                     rest_of_slots: dict[int, int] | None = None) -> None:
        """`name` gives back what it holds in these ranges, to be sent again from `due_ms`;
        `rest_of_slots` (slot -> offset) adds what it holds of each slot after that offset
        (sent before this nack reached the broker: the consumer drops those as they come)."""
        member = self.members.get(name)
        if member is None:
            return
        taken = member.holding.take_ranges(starts, stops)
        rest = member.holding.take_after(rest_of_slots) \
            if rest_of_slots and self.keyed else EMPTY
        self.slots.release_held(concat([taken, rest]).slots, name)
        self._give_back(taken, due_ms, now_ms)
        # The rest of the slots was not failed, only kept from overtaking the retry
        # (most of it never reached the application), so it is not counted as a
        # failure: counted, a poison event took the healthy events of its key that the
        # SDK had prefetched behind it to the dead-letter topic, unseen
        # (`test_dead_letter_rest_of_key.py`).
        self._give_back(rest, due_ms, now_ms, failed=False)

    def _give_back(self, taken: Taken, due_ms: int, now_ms: int, failed: bool = True) -> None:
        """Events that were sent come back unacknowledged (rule 3). A `failed` one counts
        a redelivery, and past `max_redeliveries` goes to the dead-letter topic; one not
        failed counts at least 1 (a count is how the core tells a given-back event from
        a fresh one; it was sent before) and never goes to the dead-letter topic here."""
        if not len(taken):
            return
        counts = taken.counts + 1 if failed else np.maximum(taken.counts, 1)
        taken = Taken(taken.offsets, taken.slots, counts)
        slots = distinct(taken.slots)
        limit = self.limits.max_redeliveries
        if limit and failed:
            dead = taken.counts > limit
            if dead.any():
                out = Taken(taken.offsets[dead], taken.slots[dead], taken.counts[dead])
                self._dead_new.append(out)
                self._dead_out = union(self._dead_out, out)
                self.slots.dead_letter(out.slots, +1)
                taken = Taken(taken.offsets[~dead], taken.slots[~dead], taken.counts[~dead])
        self.given_back.add(taken, due_ms)
        if self.keyed:
            self._floor_given_back(slots)
            if due_ms > now_ms:
                self.slots.delay(slots, due_ms)
        self.dirty = True

    def _floor_given_back(self, slots: npt.NDArray[np.int32]) -> None:
        """Floor these slots at or below their events in memory, which are read again later,
        after the given-back ones (so those go first)."""
        mask = np.zeros(SLOT_COUNT, np.bool_)
        mask[slots] = True
        folded = self.pending.take_slots(mask)
        again = folded.counts > 0  # given back before, read again: given back still
        if again.any():
            self.given_back.add(pick(folded, again.nonzero()[0]), 0)
            folded = pick(folded, (~again).nonzero()[0])
        self.slots.count_past_floor(folded.slots)
        floor_slots = np.concatenate((folded.slots, slots.astype(np.int32)))
        floor_offsets = np.concatenate((folded.offsets,
                                        np.full(len(slots), self.position, np.int64)))
        self.slots.lower_floors(floor_slots, floor_offsets)

    def process_dead_lettered(self, events: Taken, ok: bool, now_ms: int) -> None:
        """The shell appended `events` to the dead-letter topic (ok) or failed to (then
        they are given back without raising their counts, and retried)."""
        if not len(events):
            return
        out = self._dead_out
        settled = np.isin(out.offsets, events.offsets)
        done = Taken(out.offsets[settled], out.slots[settled], out.counts[settled])
        self._dead_out = Taken(out.offsets[~settled], out.slots[~settled], out.counts[~settled])
        self.slots.dead_letter(done.slots, -1)
        if not ok:
            self.given_back.add(done, now_ms)
            if self.keyed:  # they go first again: their slots wait behind them
                self._floor_given_back(distinct(done.slots))
        self.dirty = True

    # ------------------------------------------------------------ time

    def process_tick(self, now_ms: int) -> None:
        """Let passed nack delays go; give back what outlived its consumer's ack timeout."""
        self.slots.process_due(now_ms)
        for member in list(self.members.values()):
            timeout = member.spec.ack_timeout_ms
            if not timeout:
                continue
            due = member.next_timeout_ms
            if due is None or due <= now_ms:
                expired = member.holding.take_expired(now_ms, timeout)
                self.slots.release_held(expired.slots, member.name)
                self._give_back(expired, now_ms, now_ms)
                oldest = member.holding.oldest_sent_ms()
                member.next_timeout_ms = None if oldest is None else oldest + timeout

    def next_due_ms(self, now_ms: int) -> int | None:
        """When `process_tick` has something to do next (maybe already: a time at or
        before `now_ms`), or a Shared given-back event falls due; None: nothing is timed."""
        times = [t for t in (self.slots.next_due_ms(),) if t is not None]
        times += [m.next_timeout_ms for m in self.members.values()
                  if m.next_timeout_ms is not None]
        if not self.keyed and len(self.given_back):
            later = self.given_back.due_ms[self.given_back.due_ms > now_ms]
            if len(later):
                times.append(int(later.min()))
        return min(times) if times else None

    # ------------------------------------------------------------ seek

    def process_seek(self, offset: int) -> None:
        """Everything below `offset` counts as acknowledged, everything from it on is
        delivered again; what consumers hold is forgotten (their acks are ignored)."""
        self.position = offset
        self.filter = None
        for member in self.members.values():
            member.holding.take_all()
            member.next_timeout_ms = None
        self.slots.reset()
        self.pending = Pending()
        self.given_back = GivenBack()
        self._dead_out = EMPTY
        self._dead_new = []
        for send in self._sends:  # decided, not taken: never sent now
            self.process_unsent(send.consumer, len(send.events.offsets))
        self._sends = []
        self.seeks += 1  # sends taken before it and not yet sent are stale (the shell's)
        self._ticket += 1  # a read in flight is now stale
        self.dirty = True

    def process_unsent(self, name: str, count: int) -> None:
        """`count` events of a send decided before a seek never went out (the seek
        forgot it): their permits come back, or the consumer, whose SDK grants
        permits for what it receives, would wait for events it was never sent."""
        member = self.members.get(name)
        if member is not None:
            member.permits += count

    @staticmethod
    def seek_cursor(offset: int) -> Cursor:
        """The cursor `process_seek(offset)` leaves (what `snapshot()` then returns),
        known before the core moves: a seek writes it first and moves the cores only
        once it is on disk (`dispatcher_upkeep.seek_together`)."""
        return Cursor(offset)

    # ------------------------------------------------------------ the cursor

    def mark_delete(self) -> int:
        """Every offset below it is acknowledged (rule 6)."""
        lows = [self.position]
        for member in self.members.values():
            first = member.holding.first_offset()
            if first is not None:
                lows.append(first)
        for events in (self.given_back.offsets, self.pending.events.offsets,
                       self._dead_out.offsets):
            if len(events):
                lows.append(int(events.min()))
        if self.slots.floors:
            lows.append(min(self.slots.floors.values()))
        return min(lows)

    def unacked_offsets(self) -> I64:
        """Every offset held, given back, pending or out to the dead-letter topic, sorted."""
        parts = [m.holding.live().offsets for m in self.members.values() if m.holding.count]
        parts += [self.given_back.offsets, self.pending.events.offsets, self._dead_out.offsets]
        return distinct(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def snapshot(self) -> Cursor:
        """The cursor to persist now (clears `dirty`)."""
        self.dirty = False
        floor_slots, floor_offsets = self.slots.floor_arrays()
        return merge_cursor(self.mark_delete(), self.position, self.unacked_offsets(),
                            floor_slots, floor_offsets, self.filter,
                            self.limits.persisted_ranges_max)


__all__ = ["DRAINING", "CoreLimits", "Kind", "Mode", "Notice", "PartitionCore", "PermitsInvalid",
           "ReadRequest", "ReadResult", "Send"]
