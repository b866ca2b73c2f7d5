"""A seeded, deterministic simulation that drives the real dispatch core (`PartitionCore`).

Goal: exercise the very code the broker runs for one subscription partition
under a random schedule — produce, dispatch rounds, permits (of 1 too), acks
(in order and out of order), nacks with delays, ack timeouts, joins, clean
leaves, crashes, stalls that last until the end, a consumer that never acks,
seeks, broker crashes and restarts from the persisted cursor, dead letters,
a key filter; every type and Key_Shared mode — and check after every step
what `model.py` checks at every delivery, plus: every slot has exactly one
owner (auto-split, consistent hashing) or none twice (sticky); what the core
holds per consumer, gives back and keeps waiting is exactly what the model
says (so memory is bounded by what is in flight plus the look-ahead limits,
never by the events read past a waiting slot); a slot whose owner is healthy
and has permits gets an event within a bounded number of rounds; a persisted
cursor never calls an unacknowledged event acknowledged; a window whose share
the broker says has ended for a consumer (`share_ends.open_windows` over the
round's sends) gets no more first deliveries to it until a join, leave, seek
or restart; and once stalls end every event is acknowledged within a bounded
number of rounds.

Consumers (`consumer.py`) behave as the SDK does, with messages in flight each
way, so deliveries planned before the broker saw a nack really arrive after
it; the applications' view is checked too (`Model.app_take`).

Method: one `random.Random(seed)` decides everything; the core takes time as
`now_ms`; nothing else is random or timed, so a seed replays exactly
(`run_seed`). The shell round here is the dispatcher's (`dispatcher.py`):
tick, dispatch, carry out sends, read what the core asks for (the real
`log_reader.scan` over simulated records), carry out again.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np

from broker.subscription.core import (
    CoreLimits,
    Kind,
    Mode,
    PartitionCore,
    ReadRequest,
    ReadResult,
)
from broker.subscription.cursor import Cursor
from broker.subscription.log_reader import scan
from broker.subscription.members import MemberSpec
from broker.subscription.selector import SelectorError
from sdk.core.hashing import SLOT_COUNT, slot_of
from sdk.core.model import HashRange
from sdk.core.offset_ranges import runs_of
from tests.sim.broker_steps import BrokerSteps, Stats
from tests.sim.consumer import SimConsumer
from tests.sim.log import SimLog
from tests.sim.model import Model, Violation

POOL = [f"c{i}" for i in range(8)]


class Simulation(BrokerSteps):
    """One seeded run; `run()` raises `Violation` (message with the seed) on a failure."""

    def __init__(self, seed: int, steps: int) -> None:
        self.seed = seed
        self.steps = steps
        rnd = self.rnd = random.Random(seed)
        self.kind = rnd.choice([Kind.KEY_SHARED] * 4 + [Kind.SHARED, Kind.EXCLUSIVE,
                                                          Kind.FAILOVER])
        self.mode = rnd.choice(list(Mode)) if self.kind == Kind.KEY_SHARED else Mode.AUTO_SPLIT
        self.limits = CoreLimits(
            look_ahead_events_max=rnd.choice([4, 16, 64]),
            waiting_slot_events_max=rnd.choice([1, 2, 4, 8]),
            read_events_max=rnd.choice([3, 8, 20, 50]),
            consumer_unacked_events_max=rnd.choice([5, 30, 1000]),
            consumer_permits_max=1000,
            max_redeliveries=rnd.choice([0, 0, 2, 4]),
            points_per_consumer=rnd.choice([1, 5, 20]),
            persisted_ranges_max=rnd.choice([2, 10, 100_000]))
        self.keys = rnd.choice([3, 8, 24, 64])
        self.hot_key = rnd.random() < 0.3
        self.filter_mod = rnd.choice([0, 0, 0, 3])  # keys % 3 == 0 are filtered out
        self.now = 0
        self.log = SimLog(self.filter_mod)
        self.model = Model(self.kind != Kind.SHARED, self.limits.max_redeliveries)
        self.core = PartitionCore(self.kind, self.mode, 0, self.limits, Cursor(0), self.now)
        self.persisted = Cursor(0)
        self.consumers: dict[str, SimConsumer] = {}
        # slot (or -1 for Shared) -> (rounds without progress, the bound when it began)
        self.waited: dict[int, tuple[int, int]] = {}
        self.progress: set[int] = set()
        self.stats = Stats()
        self.trail: deque[str] = deque(maxlen=int(__import__('os').environ.get('KEYBUS_SIM_TRAIL', 40)))  # the last actions, for a failure's message
        self.in_flight: tuple[ReadRequest, ReadResult] | None = None
        self.nacks_seen: dict[str, int] = {}  # per consumer stream, as Session.nacks_seen
        self.asleep = False
        self.wake_at: int | None = None
        self.woken = False  # an input came since the shell's round began (its wake flag)
        self.owners_epoch = 0
        self.shares_ended: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------ the schedule

    def run(self) -> Stats:
        try:
            for _ in range(self.steps):
                self.step()
            self.heal()
        except Violation as error:
            trail = "\n  ".join(self.trail)
            raise Violation(f"seed {self.seed} (replay: run_seed({self.seed}, {self.steps})) at "
                            f"step {self.stats.steps}, {self.kind.name}"
                            f"/{self.mode.name}, {self.limits}: {error}\nlast actions:\n  "
                            f"{trail}") from None
        self.stats.deliveries = self.model.deliveries
        self.stats.redeliveries = self.model.redeliveries
        self.stats.events = self.model.end
        return self.stats

    def step(self) -> None:
        rnd = self.rnd
        self.stats.steps += 1
        self.now += rnd.choice([0, 0, 1, 5, 20, 100])
        action = rnd.random()
        names = sorted(self.consumers)
        if action < 0.14:
            self.produce()
        elif action < 0.40:
            self.round()
        elif action < 0.62 and names:
            self.consumers[rnd.choice(names)].act(rnd, self.model, self.now)
        elif action < 0.82 and names:
            self.upstream(self.consumers[rnd.choice(names)], rnd.choice([1, 2, 10]))
        elif action < 0.86:
            self.join()
        elif action < 0.88 and names:
            self.leave(rnd.choice(names), crash=rnd.random() < 0.5)
        elif action < 0.90 and names:
            consumer = self.consumers[rnd.choice(names)]
            consumer.stalled = not consumer.stalled if rnd.random() < 0.5 else True
            self.trail.append(f"{consumer.name} stalled={consumer.stalled}")
        elif action < 0.93:
            self.persist()
        elif action < 0.935:
            self.restart()
        elif action < 0.94:
            self.seek(rnd.randrange(self.model.end + 1))
        else:
            self.now += rnd.choice([200, 1000])

    def upstream(self, consumer: SimConsumer, n: int) -> None:
        """The broker processes what a consumer sent, in order (`SubscribeServicer._pump`)."""
        name = consumer.name
        for _ in range(n):
            if not consumer.wire_out:
                return
            kind, offsets, value, rest = consumer.wire_out.popleft()
            if kind == "permits":
                self._grant(consumer, value)
            elif kind == "ack":
                self._ack(name, offsets, rest)
            else:
                self.nacks_seen[name] += 1
                self._nack(name, offsets, value, dict(zip(rest[0::2], rest[1::2], strict=True)))

    # ------------------------------------------------------------ the log

    def produce(self) -> None:
        rnd = self.rnd
        n = rnd.randint(1, 12)
        keys = [0 if self.hot_key and rnd.random() < 0.5 else rnd.randrange(self.keys)
                for _ in range(n)]
        slots = [slot_of(k) for k in keys]
        passes = [not self.filter_mod or k % self.filter_mod != 0 for k in keys]
        base = self.model.end
        self.log.append(keys, slots)
        self.trail.append(f"produce {base}..{base + n - 1} keys {keys}")
        self.model.produced(keys, slots, passes)
        if self.core.position >= base and any(
                m.available(self.limits.consumer_unacked_events_max)
                for m in self.core.members.values()):
            self.wake()  # it waited for data

    # ------------------------------------------------------------ the shell's round

    def round(self) -> None:
        """One dispatcher round, as `dispatcher.py` runs it: its read may stay in flight
        until the next round while consumers act, and it sleeps when it has nothing to do
        until an input or a timer wakes it (so a lost wake-up shows as a liveness failure)."""
        core = self.core
        self.stats.rounds += 1
        self.progress.clear()
        if self.in_flight is not None:
            request, result = self.in_flight
            self.in_flight = None
            core.process_read(request, result, self.now)
            self._carry_out()
            self._idle_after_read()
        elif self.asleep and (self.wake_at is None or self.now < self.wake_at):
            pass  # the shell sleeps
        else:
            self.asleep = self.woken = False
            core.process_tick(self.now)
            self._reconcile_timeouts()
            core.dispatch(self.now)
            self._carry_out()
            wanted = core.next_read(self.model.end)
            if wanted is not None:
                request = wanted
                _, result = scan(request, self.log.records_from(request.start), self.log.passing,
                                 1 << 40)
                self.trail.append(f"read {'catch-up' if request.catch_up else 'main'} "
                                  f"{request.start}..{result.stop} ({len(result.offsets)} events)")
                if self.rnd.random() < 0.5:
                    self.in_flight = (request, result)  # other inputs land meanwhile
                else:
                    core.process_read(request, result, self.now)
                    self._carry_out()
                    self._idle_after_read()
            elif not self._demand_unread():
                self.asleep, self.wake_at = True, core.next_due_ms(self.now)
        self.check_state()
        self.check_liveness()

    def _demand_unread(self) -> bool:
        """The shell does not sleep while someone could take events not read yet."""
        unacked_max = self.limits.consumer_unacked_events_max
        return self.core.position < self.model.end and any(
            m.available(unacked_max) for m in self.core.members.values())

    def _idle_after_read(self) -> None:
        """The shell idles right after a read that leaves nothing to read (`read_all`),
        unless an input woke it while the read was in flight (its wait returns at once)."""
        if not self.woken and self.core.read_all(self.model.end):
            self.asleep, self.wake_at = True, self.core.next_due_ms(self.now)

    def wake(self) -> None:
        self.asleep = False
        self.woken = True

    def _carry_out(self) -> None:
        sends = self.core.take_sends()
        self.check_share_ends(sends)
        for send in sends:
            consumer = self.consumers[send.consumer]
            offsets = send.events.offsets.tolist()
            counts = send.events.counts.tolist()
            if offsets != sorted(offsets):
                raise Violation(f"a send to {send.consumer} is not in offset order: {offsets}")
            for offset, count in zip(offsets, counts, strict=True):
                self.model.deliver(send.consumer, offset, count, self.now, send.send)
                self.progress.add(self.model.events[offset].slot if self.model.keyed else -1)
            consumer.wire_in.append((offsets, counts, self.nacks_seen[send.consumer], send.send))
            self.trail.append(f"send {send.consumer} {offsets} counts {counts}")
        self.core.take_notices()
        dead = self.core.take_dead_letters()
        if len(dead):
            ok = self.rnd.random() < 0.8
            self.trail.append(f"dead-letter {dead.offsets.tolist()} ok={ok}")
            for offset in dead.offsets.tolist():
                self.model.dead_lettered(offset, ok, self.now)
            self.core.process_dead_lettered(dead, ok, self.now)
            self.wake()

    def _reconcile_timeouts(self) -> None:
        """What the core gave back on a tick must be exactly what outlived its timeout."""
        for name, consumer in self.consumers.items():
            timeout = consumer.spec.ack_timeout_ms
            held = self.model.held_by(name)
            expired = {o for o in held if timeout and self.model.sent_ms[o] + timeout <= self.now}
            core_held = set(self.core.members[name].holding.live().offsets.tolist())
            if core_held != held - expired:
                raise Violation(f"{name}: after the tick at {self.now} the core holds "
                                f"{sorted(core_held ^ (held - expired))[:10]} differently "
                                f"(timeout {timeout})")
            for offset in sorted(expired):
                self.model.give_back(offset, self.now)
                consumer.forget(offset)
                self.model.app_release(name, [offset])
            if expired:
                self.trail.append(f"timeout {name} {sorted(expired)}")

    # ------------------------------------------------------------ consumers

    def join(self) -> None:
        rnd = self.rnd
        free = [n for n in POOL if n not in self.consumers]
        if not free or (self.kind == Kind.EXCLUSIVE and self.consumers):
            return
        name = rnd.choice(free)
        ranges: tuple[HashRange, ...] = ()
        if self.kind == Kind.KEY_SHARED and self.mode == Mode.STICKY:
            first = rnd.randrange(SLOT_COUNT)
            ranges = (HashRange(first, min(SLOT_COUNT - 1, first + rnd.choice([100, 20_000,
                                                                                 65_535]))),)
        spec = MemberSpec(name, rnd.randrange(3), ranges,
                          rnd.choice([0, 0, 0, 300, 2000]), rnd.choice([0, 0, 8]))
        self._attach(SimConsumer(spec, rnd.choice([2, 10, 100]), rnd.random() < 0.2,
                                 never_acks=rnd.random() < 0.1))

    def _attach(self, consumer: SimConsumer) -> None:
        consumer.checked = not consumer.spec.ack_timeout_ms and self.kind != Kind.FAILOVER
        consumer.ordered = self.kind != Kind.SHARED
        before = {n: set(m.holding.live().offsets.tolist()) for n, m in self.core.members.items()}
        try:
            self.core.process_attach(consumer.spec, self.now)
        except SelectorError:
            if set(self.core.members) != set(before):
                raise Violation(f"a refused attach of {consumer.name} changed the "
                                f"members") from None
            return
        self.consumers[consumer.name] = consumer
        self.nacks_seen[consumer.name] = 0
        self.owners_epoch += 1
        self.wake()
        self.trail.append(f"attach {consumer.spec}")
        self._reconcile_rewind(before)
        consumer.start()
        self.check_owners()

    def leave(self, name: str, crash: bool) -> None:
        consumer = self.consumers[name]
        if not crash:  # a clean close sends what it queued first
            self.upstream(consumer, len(consumer.wire_out))
        del self.consumers[name]
        before = {n: set(m.holding.live().offsets.tolist()) for n, m in self.core.members.items()
                  if n != name}
        self.core.process_detach(name, self.now)
        self.owners_epoch += 1
        self.wake()
        self.trail.append(f"{'crash' if crash else 'leave'} {name} holding "
                          f"{sorted(self.model.held_by(name))}")
        for offset in sorted(self.model.held_by(name)):
            self.model.give_back(offset, self.now)
        self.model.app_gone(name)
        self._reconcile_rewind(before)
        self.check_owners()

    def _reconcile_rewind(self, before: dict[str, set[int]]) -> None:
        """Exclusive/Failover: a change of active consumer takes back what the old one held."""
        for name, held in before.items():
            member = self.core.members.get(name)
            if member is None or name not in self.consumers:
                continue
            now_held = set(member.holding.live().offsets.tolist())
            for offset in sorted(held - now_held):
                if self.kind not in (Kind.EXCLUSIVE, Kind.FAILOVER):
                    raise Violation(f"{name} lost offset {offset} on a membership change")
                self.model.give_back(offset, self.now)
                self.consumers[name].forget(offset)
                self.model.app_release(name, [offset])
                self.trail.append(f"rewind {name} {offset}")

    def _grant(self, consumer: SimConsumer, count: int) -> None:
        member = self.core.members[consumer.name]
        count = min(count, self.limits.consumer_permits_max - member.permits)
        if count > 0:
            self.core.process_permits(consumer.name, count)
            self.wake()
            self.trail.append(f"permits {consumer.name} +{count}")

    def _ack(self, name: str, offsets: list[int], sent: list[int]) -> None:
        """An Ack: offset ranges, and sent ranges (send, start, stop) for whole batches."""
        model = self.model
        triples = list(zip(sent[0::3], sent[1::3], sent[2::3], strict=True))
        in_sent = sorted(o for o in model.held_by(name)
                         if any(model.send_of.get(o) == s and a <= o < b for s, a, b in triples))
        counted = sum(model.ack(name, o) for o in [*offsets, *in_sent])
        acked = 0
        if offsets:
            starts, stops = runs_of(np.array(sorted(offsets), np.int64))
            acked += self.core.process_ack(name, starts, stops)
        if triples:
            sends, starts, stops = (np.array(v, np.int64) for v in zip(*triples, strict=True))
            acked += self.core.process_ack_sent(name, sends, starts, stops)
        if acked:
            self.wake()
        self.trail.append(f"ack {name} {sorted(offsets)} sent {triples}")
        if acked != counted:
            raise Violation(f"{name} acked {sorted(offsets)}: the core counted {acked}, "
                            f"expected {counted}")

    def _nack(self, name: str, offsets: list[int], delay: int, rest: dict[int, int]) -> None:
        """A nack: what it names, and what the consumer holds of each slot after the
        offset `rest` gives (Nack.rest_of_slots)."""
        model = self.model
        named = set(offsets)
        given = sorted(o for o in model.held_by(name) if o in named or (
            model.keyed and o > rest.get(model.events[o].slot, 1 << 62)))
        for offset in given:  # the rest of the slots was not failed: never dead-lettered
            model.give_back(offset, self.now + delay, failed=offset in named)
        starts, stops = runs_of(np.array(offsets, np.int64))
        self.core.process_nack(name, starts, stops, self.now + delay, self.now, rest)
        self.wake()
        self.trail.append(f"nack {name} {offsets} rest {rest} delay {delay} at {self.now}")


def run_seed(seed: int, steps: int) -> Stats:
    """Run one seed (replays exactly); raises Violation on a failure."""
    return Simulation(seed, steps).run()
