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
   read skips its events. When the slot may deliver again, a catch-up read
   goes over [lowest floor, position) for the waiting slots only, and each
   slot leaves its floor once it caught up. Waiting costs a few bytes per
   slot, never the events read past it.
3. Events a consumer gives back (nack, ack timeout, it left, Failover moves
   the active consumer) go to `GivenBack` (offsets only, not bytes) and
   floor their slot at or below its events still in memory, so the slot
   sends them first, then the rest in offset order: per-key order survives
   retries. A nack delay blocks the slot until it passes.
4. Key order across range moves (Key_Shared): a moved slot whose old owner
   still holds unacked events of it is *draining*: its new owner gets
   nothing of it until the old owner acked or gave back all of them, or left
   (then they come first, by rule 3). At most one consumer holds unacked
   events of a slot; every slot has exactly one owner while anyone is
   attached (the selector's job).
5. Acks and nacks are offset ranges, applied in one pass to what the
   consumer that sends them holds (other offsets in them are ignored: no
   client acknowledges what it was not sent).
6. The cursor (`snapshot()`) is what is unacknowledged: events held, given
   back, pending, out to the dead-letter topic, plus the floors. Its
   mark-delete is the lowest of them (or `position`).
7. Shared has no slots: events go round-robin by permits, given-back ones
   (each with its own nack delay) are read again and go first.

It must not know about gRPC, RocksDB, record bytes, asyncio or the clock.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from broker.subscription.cursor import Cursor
from broker.subscription.dispatch import (
    BLOCKING,
    DRAINING,
    FLOORED,
    pick_active,
    plan_keyed,
    plan_shared,
)
from broker.subscription.given_back import GivenBack
from broker.subscription.holdings import EMPTY, I32, I64, Taken, concat
from broker.subscription.members import Member, MemberSpec, RateMeter, permit_array
from broker.subscription.pending import Pending
from broker.subscription.persist import merge_cursor
from broker.subscription.selector import DuplicateConsumer, RangeChanges, build_owner_table
from broker.subscription.selector_auto_split import AutoSplitSelector
from broker.subscription.selector_consistent import ConsistentHashSelector
from broker.subscription.selector_sticky import StickySelector
from broker.subscription.slot_state import SlotState
from sdk.core.hashing import SLOT_COUNT, SLOT_MAX
from sdk.core.model import HashRange, slot_mask


class Kind(IntEnum):
    """Subscription types (the wire's SubscriptionType values)."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class Mode(IntEnum):
    """Key_Shared modes (the wire's KeySharedMode values)."""

    AUTO_SPLIT = 0
    STICKY = 1
    CONSISTENT = 2


@dataclass(frozen=True, slots=True)
class CoreLimits:
    """The bounds of one core; see docs/architecture.md for what each costs."""

    look_ahead_events_max: int = 20_000  # events read and waiting in memory, in all
    waiting_slot_events_max: int = 64  # of them, per slot
    read_events_max: int = 5_000  # events per read
    consumer_unacked_events_max: int = 200_000  # per consumer: past it, nothing more
    consumer_permits_max: int = 100_000  # outstanding per consumer
    max_redeliveries: int = 0  # given back more often: dead-letter topic (0 = never)
    points_per_consumer: int = 100  # consistent hashing
    persisted_ranges_max: int = 100_000  # unacknowledged runs in a persisted cursor


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Read the log from `start` (up to `stop`, about `events_max` events) and hand every
    event that passes the subscription's filter to `process_read`. A catch-up read
    (`slot_mask` set) may stop once it saw `selected_max` events of those slots."""

    ticket: int
    start: int
    stop: int
    events_max: int
    catch_up: bool = False
    slot_mask: npt.NDArray[np.bool_] | None = None
    selected_max: int = 0


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What a read found: every passing event in [request.start, stop), ascending."""

    stop: int
    offsets: I64
    slots: I32


@dataclass(frozen=True, slots=True)
class Send:
    """Send these events (ascending offsets, with redelivery counts) to `consumer`; the
    consumer acknowledges a record part of it whole by `send` (Ack.sent_ranges)."""

    consumer: str
    events: Taken
    send: int


@dataclass(frozen=True, slots=True)
class Notice:
    """Tell `consumer` its new Key_Shared ranges, or whether Failover made it active."""

    consumer: str
    ranges: tuple[HashRange, ...] | None = None
    active: bool | None = None


class PermitsInvalid(ValueError):
    """A permit grant out of range; the message says what is allowed."""


def new_selector(mode: int, points: int) -> AutoSplitSelector | StickySelector | ConsistentHashSelector:
    if mode == Mode.STICKY:
        return StickySelector()
    if mode == Mode.CONSISTENT:
        return ConsistentHashSelector(points)
    return AutoSplitSelector()


class PartitionCore:
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
        self._owners = np.zeros(SLOT_COUNT, np.uint32)
        self._shared_next = 0
        self.slots = SlotState()
        self.pending = Pending()
        self.given_back = GivenBack()
        self._dead_out = EMPTY  # out to the dead-letter topic, not settled
        self._sends: list[Send] = []
        self._notices: list[Notice] = []
        self._dead_new: list[Taken] = []
        self._ticket = 0
        # send ids never repeat across restarts (a consumer may ack an old one late)
        self._last_send = now_ms * 1_000_000
        self._sweep = 0  # where the next catch-up read starts (see `_catch_up_request`)
        self._catch_up_turn = True
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

    # ------------------------------------------------------------ membership

    def check_attach(self, spec: MemberSpec, now_ms: int) -> None:
        """Refuse what `process_attach` would refuse, changing nothing.

        Raises:
            SelectorError: the name is taken or the selector refuses the consumer.
        """
        if self.selector is not None:
            trial = copy.deepcopy(self.selector)
            trial.add_consumer(spec.name, now_ms, spec.sticky_ranges)
        elif spec.name in self.members:
            raise DuplicateConsumer(f"consumer {spec.name!r} is already attached")

    def process_attach(self, spec: MemberSpec, now_ms: int) -> None:
        """Attach a consumer. Raises SelectorError (see `check_attach`); nothing changes then."""
        self.check_attach(spec, now_ms)
        member = Member(spec, now_ms)
        if self.selector is not None:
            self._update_rates(now_ms)
            changes = self.selector.add_consumer(spec.name, now_ms, spec.sticky_ranges)
            self.members[spec.name] = member
            self._moved(changes, newcomer=spec.name)
        else:
            self.members[spec.name] = member
            if self.kind != Kind.SHARED:
                self._choose_active(now_ms, newcomer=spec.name)
        self._reindex()

    def process_detach(self, name: str, now_ms: int) -> None:
        """A consumer left (or its stream broke): what it held comes back, first."""
        member = self.members.pop(name, None)
        if member is None:
            return
        self.slots.drop_holder(name)
        self._give_back(member.holding.take_all(), now_ms, now_ms)
        if self.selector is not None:
            self._update_rates(now_ms)
            self._moved(self.selector.remove_consumer(name), newcomer=None)
        elif self.kind != Kind.SHARED:
            self._choose_active(now_ms, newcomer=None)
        self._reindex()

    def _update_rates(self, now_ms: int) -> None:
        if isinstance(self.selector, AutoSplitSelector):
            for name, member in self.members.items():
                self.selector.set_dispatch_rate(name, member.meter.rate(now_ms))

    def _moved(self, changes: RangeChanges, newcomer: str | None) -> None:
        """Drain the moved slots their old owners hold; tell whoever's ranges changed."""
        assert self.selector is not None
        table = self.selector.owner_table()
        for slot, entry in list(self.slots.draining.items()):
            if table.owner_of(slot) == entry[0]:  # moved back to its holder
                self.slots.stop_draining(slot)
        for name in changes.consumers:
            member = self.members.get(name)
            lost = changes.lost_by(name)
            if member is None or not lost or not member.holding.count:
                continue
            held = member.holding.live().slots
            moved = held[np.frombuffer(slot_mask(lost), np.bool_)[held]]
            if len(moved):
                self.slots.start_draining(moved, name)
        told = [n for n in changes.consumers if n in self.members]
        if newcomer is not None and newcomer not in told:
            told.append(newcomer)
        for name in told:
            self._notices.append(Notice(name, ranges=tuple(self.selector.ranges_of(name))))

    def _choose_active(self, now_ms: int, newcomer: str | None) -> None:
        """Exclusive/Failover: pick the active consumer; its predecessor's events move."""
        ranked = [(n, m.spec.priority) for n, m in self.members.items()]
        active = pick_active(ranked, self.partition)
        previous = self.active
        if active != previous:
            old = self.members.get(previous) if previous is not None else None
            if old is not None:  # rewind what the old active holds to the new one
                self._give_back(old.holding.take_all(), now_ms, now_ms)
            self.active = active
        if self.kind == Kind.FAILOVER:
            for name in self.members:
                if active != previous or name == newcomer:
                    self._notices.append(Notice(name, active=name == active))

    def _reindex(self) -> None:
        """Map owner indexes to members after a membership change."""
        if self.selector is not None:
            table = self.selector.owner_table()
        elif self.active is not None:
            table = build_owner_table([(0, SLOT_MAX, self.active)], [self.active])
        else:
            table = build_owner_table([], [])
        self._owners = np.frombuffer(table.indexes, np.uint32)
        self._by_index = [None] + [self.members[n] for n in table.names[1:] if n is not None]

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
        self.pending.take(np.flatnonzero(pending.offsets < stop))
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
        if rest_of_slots and self.keyed:
            taken = concat([taken, member.holding.take_after(rest_of_slots)])
        self.slots.release_held(taken.slots, name)
        self._give_back(taken, due_ms, now_ms)

    def _give_back(self, taken: Taken, due_ms: int, now_ms: int) -> None:
        """Events that were sent come back unacknowledged (rule 3)."""
        if not len(taken):
            return
        taken = Taken(taken.offsets, taken.slots, taken.counts + 1)
        slots = np.unique(taken.slots)
        limit = self.limits.max_redeliveries
        if limit:
            dead = taken.counts > limit
            if dead.any():
                out = Taken(taken.offsets[dead], taken.slots[dead], taken.counts[dead])
                self._dead_new.append(out)
                self._dead_out = _union(self._dead_out, out)
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
            self.given_back.add(_pick(folded, np.flatnonzero(again)), 0)
            folded = _pick(folded, np.flatnonzero(~again))
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
                self._floor_given_back(np.unique(done.slots))
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
        self._ticket += 1  # a read in flight is now stale
        self.dirty = True

    # ------------------------------------------------------------ reads

    def next_read(self, end_offset: int) -> ReadRequest | None:
        """What to read next, or None. Alternates catch-up and main reads when both are
        wanted (catch-up first: it moves the mark-delete)."""
        permits = permit_array(self._by_index, self.limits.consumer_unacked_events_max)
        catch_up = self._catch_up_request(permits) if permits.any() or not self.keyed else None
        main = self._main_wanted(permits, end_offset)
        if catch_up is not None and (self._catch_up_turn or not main):
            self._catch_up_turn = False
            return catch_up
        self._catch_up_turn = True
        if not main:
            return None
        self._ticket += 1
        return ReadRequest(self._ticket, self.position, end_offset, self.limits.read_events_max)

    def _main_wanted(self, permits: I64, end_offset: int) -> bool:
        if self.position >= end_offset:
            return False
        if self.keyed:
            return bool(permits.any())
        demand = sum(m.available(self.limits.consumer_unacked_events_max)
                     for m in self.members.values())
        return demand > len(self.pending)

    def _catch_up_request(self, permits: I64) -> ReadRequest | None:
        """A catch-up read for the floored slots that may deliver (rule 2).

        Catch-up reads sweep: each starts where the last one stopped and takes the
        slots whose events all lie ahead of it; a slot whose floor is behind waits for
        the next sweep, which starts at the lowest one. So a slow slot that keeps
        falling back cannot hold the sweep at its floor while other slots wait.
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
            i = np.minimum(np.searchsorted(slots, given.slots), len(slots) - 1)
            mine = slots[i] == given.slots
            np.minimum.at(starts, i[mine], given.offsets[mine])
        if self._sweep >= self.position or not (starts >= self._sweep).any():
            self._sweep = int(starts.min())
        ahead = starts >= self._sweep
        mask = np.zeros(SLOT_COUNT, np.bool_)
        mask[slots[ahead]] = True
        wanted = int(permits[np.unique(owner[ahead])].sum()) + \
            self.limits.waiting_slot_events_max * int(ahead.sum())
        self._ticket += 1
        return ReadRequest(self._ticket, max(self._sweep, int(starts[ahead].min())),
                           self.position, self.limits.read_events_max, True, mask, wanted)

    def _shared_catch_up(self) -> ReadRequest | None:
        given = self.given_back
        if not len(given) or not any(m.available(self.limits.consumer_unacked_events_max)
                                     for m in self.members.values()):
            return None
        if self._sweep >= self.position or given.offsets[-1] < self._sweep:
            self._sweep = int(given.offsets[0])
        start = int(given.offsets[np.searchsorted(given.offsets, self._sweep)])
        self._ticket += 1
        return ReadRequest(self._ticket, start, self.position, self.limits.read_events_max, True)

    def process_read(self, request: ReadRequest, result: ReadResult, now_ms: int) -> None:
        """Take what a read found: send what may go, keep or floor what waits."""
        if request.ticket != self._ticket:
            return  # a seek came in between
        if request.catch_up:
            fresh = self._catch_up_events(request, result, now_ms)
            self._sweep = result.stop
        else:
            fresh = self._main_events(result)
            self.position = max(self.position, result.stop)
        self._dispatch(fresh, now_ms)
        mask = self._still_ahead(request)
        if mask is not None:
            self._leave_floors(mask)
        self._drop_filter()

    def _main_events(self, result: ReadResult) -> Taken:
        offsets, slots = result.offsets, result.slots
        keep = self._filter_mask(offsets, slots) & (offsets >= self.position)
        if self.keyed:
            floored = (self.slots.flags[slots] & FLOORED) != 0
            if floored.any():
                self.slots.count_past_floor(slots[floored & keep])
                keep &= ~floored
        if not keep.all():
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
            i = np.minimum(np.searchsorted(offsets, back.offsets), max(len(offsets) - 1, 0))
            found = offsets[i] == back.offsets if len(offsets) else np.zeros(len(back), np.bool_)
            back = _pick(back, np.flatnonzero(found))
        if mask is None:
            return back
        floor_slots, floor_offsets = self.slots.floor_arrays()
        j = np.minimum(np.searchsorted(floor_slots, slots), max(len(floor_slots) - 1, 0))
        region = mask[slots] & (floor_slots[j] == slots) & (offsets >= floor_offsets[j]) \
            if len(floor_slots) else np.zeros(len(slots), np.bool_)
        region &= self._filter_mask(offsets, slots)
        self.slots.count_past_floor(slots[region], -1)
        for slot in floor_slots[mask[floor_slots]].tolist():
            self.slots.raise_floor(slot, result.stop)  # lowered again for what waits
        fresh = Taken(offsets[region], slots[region], np.zeros(int(region.sum()), np.int32))
        if not len(back):
            return fresh
        merged = concat([back, fresh])
        return _pick(merged, np.argsort(merged.offsets, kind="stable"))

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
        for slot in floor_slots[done].tolist():
            if slot not in waiting:
                self.slots.unfloor(slot)

    def _filter_mask(self, offsets: I64, slots: I32) -> npt.NDArray[np.bool_]:
        """After a restart: which of these events the persisted cursor says are unacked."""
        if self.filter is None:
            return np.ones(len(offsets), np.bool_)
        return self.filter.unacked_mask(offsets, slots)

    def _drop_filter(self) -> None:
        if self.filter is not None and self.mark_delete() >= self.filter.horizon:
            self.filter = None

    # ------------------------------------------------------------ dispatch

    def dispatch(self, now_ms: int) -> None:
        """Send what waits in memory and may go now (after permits, acks, ticks)."""
        if not len(self.pending):
            return
        self._dispatch(EMPTY, now_ms)

    def _dispatch(self, fresh: Taken, now_ms: int) -> None:
        """Candidates = the pending events that may go now, then `fresh` (rules 1-3)."""
        permits = permit_array(self._by_index, self.limits.consumer_unacked_events_max)
        ready = self._ready_pending(permits)
        candidates = concat([ready, fresh])
        if not len(candidates):
            return
        if self.keyed:
            sent = self._send_keyed(candidates, permits, now_ms)
        else:
            sent = self._send_shared(candidates, now_ms)
        self._wait(candidates, sent)

    def _ready_pending(self, permits: I64) -> Taken:
        events = self.pending.events
        if not len(events):
            return EMPTY
        if not self.keyed:
            unacked_max = self.limits.consumer_unacked_events_max
            wanted = any(m.available(unacked_max) for m in self.members.values())
            return self.pending.take_all() if wanted else EMPTY
        if not permits.any():
            return EMPTY
        owner = self._owners[events.slots].astype(np.intp)
        ready = (owner != 0) & (permits[owner] > 0) & \
            ((self.slots.flags[events.slots] & BLOCKING) == 0)
        return self.pending.take(np.flatnonzero(ready))

    def _send_keyed(self, candidates: Taken, permits: I64, now_ms: int) -> npt.NDArray[np.bool_]:
        plan = plan_keyed(candidates.slots, self._owners, self.slots.flags, permits)
        sent = np.zeros(len(candidates), np.bool_)
        sent[plan.positions] = True
        for k, owner in enumerate(plan.owners.tolist()):
            positions = plan.positions[plan.bounds[k]:plan.bounds[k + 1]]
            member = self._by_index[owner]
            assert member is not None
            self._send(member, _pick(candidates, positions), now_ms)
        return sent

    def _send_shared(self, candidates: Taken, now_ms: int) -> npt.NDArray[np.bool_]:
        names = list(self.members)
        unacked_max = self.limits.consumer_unacked_events_max
        handed, self._shared_next = plan_shared(
            len(candidates), names, [self.members[n].available(unacked_max) for n in names],
            self._shared_next)
        sent = np.zeros(len(candidates), np.bool_)
        position = 0
        for name, count in handed:
            positions = np.arange(position, position + count)
            sent[positions] = True
            self._send(self.members[name], _pick(candidates, positions), now_ms)
            position += count
        return sent

    def _send(self, member: Member, events: Taken, now_ms: int) -> None:
        if len(events.offsets) > 1 and not bool(np.all(np.diff(events.offsets) > 0)):
            order = np.argsort(events.offsets, kind="stable")
            events = Taken(events.offsets[order], events.slots[order], events.counts[order])
        n = len(events)
        self._last_send += 1
        member.holding.add(events, now_ms, self._last_send)
        member.permits -= n
        member.delivered += n
        member.meter.add(n, now_ms)
        self.meter.add(n, now_ms)
        timeout = member.spec.ack_timeout_ms
        if timeout and member.next_timeout_ms is None:
            member.next_timeout_ms = now_ms + timeout
        self._sends.append(Send(member.name, events, self._last_send))
        self.dirty = True

    def _wait(self, candidates: Taken, sent: npt.NDArray[np.bool_]) -> None:
        """Keep what waits in memory as far as it fits; the rest waits on a floor (or,
        given back before, goes back to `GivenBack`)."""
        if sent.all():
            return
        waiting = _pick(candidates, np.flatnonzero(~sent))
        limits = self.limits
        if not self.keyed:  # bounded by demand: Shared reads only what consumers asked for
            self.pending.admit(waiting, len(waiting) + 1, len(self.pending) + len(waiting))
            return
        _, refused = self.pending.admit(waiting, limits.waiting_slot_events_max,
                                        self._look_ahead_max())
        if not len(refused):
            return
        again = refused.counts > 0
        if again.any():  # given back before: given back still, and their slots wait for them
            back = _pick(refused, np.flatnonzero(again))
            self.given_back.add(back, 0)
            self.slots.lower_floors(back.slots, np.full(len(back), self.position, np.int64))
        fresh = _pick(refused, np.flatnonzero(~again))
        if len(fresh):
            self.slots.lower_floors(fresh.slots, fresh.offsets)
            self.slots.count_past_floor(fresh.slots)

    def _look_ahead_max(self) -> int:
        asked = [m.spec.look_ahead_max for m in self.members.values() if m.spec.look_ahead_max]
        return min([self.limits.look_ahead_events_max, *asked])

    # ------------------------------------------------------------ the cursor

    def mark_delete(self) -> int:
        """Every offset below it is acknowledged (rule 6)."""
        lows = [self.position]
        for member in self.members.values():
            if member.holding.count:
                lows.append(int(member.holding.live().offsets[0]))
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
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def snapshot(self) -> Cursor:
        """The cursor to persist now (clears `dirty`)."""
        self.dirty = False
        floor_slots, floor_offsets = self.slots.floor_arrays()
        return merge_cursor(self.mark_delete(), self.position, self.unacked_offsets(),
                            floor_slots, floor_offsets, self.filter,
                            self.limits.persisted_ranges_max)


def _pick(events: Taken, positions: npt.NDArray[np.intp]) -> Taken:
    return Taken(events.offsets[positions], events.slots[positions], events.counts[positions])


def _union(a: Taken, b: Taken) -> Taken:
    merged = concat([a, b])
    order = np.argsort(merged.offsets, kind="stable")
    return _pick(merged, order)


__all__ = ["DRAINING", "CoreLimits", "Kind", "Mode", "Notice", "PartitionCore", "PermitsInvalid",
           "ReadRequest", "ReadResult", "Send"]
