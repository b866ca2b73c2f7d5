"""The broker's side of the simulation: persist the cursor, crash and restart, seek, heal.

A mixin of `Simulation` (harness.py), split from it by job: these steps act on
the whole partition rather than on one consumer. `restart` rebuilds the real
`PartitionCore` from the persisted cursor, as the broker does after a crash;
`heal` ends every stall and checks that everything is acknowledged within a
bound. They use the simulation's state (core, model, consumers, clock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from broker.subscription.core import Kind, Mode, PartitionCore
from broker.subscription.cursor import Cursor
from broker.subscription.members import MemberSpec
from sdk.core.hashing import SLOT_COUNT
from sdk.core.model import HashRange
from tests.sim.checks import Checks
from tests.sim.consumer import SimConsumer
from tests.sim.model import Violation


@dataclass
class Stats:
    """What one run did (run_seed returns it)."""

    steps: int = 0
    rounds: int = 0
    deliveries: int = 0
    redeliveries: int = 0
    events: int = 0
    restarts: int = 0


class BrokerSteps(Checks):
    """Steps of the simulated broker (mixed into `Simulation`, which provides
    the state `Checks` declares and what is declared here)."""

    stats: Stats
    persisted: Cursor
    in_flight: Any
    wake: Callable[[], None]
    join: Callable[[], None]
    round: Callable[[], None]
    upstream: Callable[[SimConsumer, int], None]
    _attach: Callable[[SimConsumer], None]

    def persist(self) -> None:
        """Write the cursor; it must never call an unacknowledged event acknowledged."""
        data = self.core.snapshot().to_bytes()
        cursor = Cursor.from_bytes(data)
        acked = self._acked_by(cursor)
        wrong = [o for o in range(self.model.end) if acked[o] and not self.model.acked[o]]
        if wrong:
            raise Violation(f"the persisted cursor calls {wrong[:10]} acknowledged: {cursor}")
        self.persisted = cursor

    def _acked_by(self, cursor: Cursor) -> bytearray:
        end = self.model.end
        offsets = np.arange(cursor.mark_delete, end, dtype=np.int64)
        slots = np.array([e.slot for e in self.model.events[cursor.mark_delete:]], np.int32)
        unacked = cursor.unacked_mask(offsets, slots).tolist() if end > cursor.mark_delete else []
        acked = bytearray(b"\x01" * min(cursor.mark_delete, end))
        acked += bytes(0 if u else 1 for u in unacked)
        for offset, event in enumerate(self.model.events):
            if not event.passes:
                acked[offset] = 1
        return acked

    def restart(self) -> None:
        """The broker crashes and restarts from the persisted cursor; consumers reconnect."""
        self.stats.restarts += 1
        self.trail.append(f"restart from {self.persisted}")
        self.model.restart(self._acked_by(self.persisted))
        self.owners_epoch += 1  # a new core: what was sent goes out again, as first deliveries
        self.core = PartitionCore(self.kind, self.mode, 0, self.limits,
                                  Cursor.from_bytes(self.persisted.to_bytes()), self.now)
        consumers, self.consumers = self.consumers, {}
        self.waited.clear()
        self.in_flight = None
        self.wake()
        for name in sorted(consumers):
            old = consumers[name]
            self.model.app_gone(name)
            self._attach(SimConsumer(old.spec, old.queue_size, old.one_permit_at_a_time,
                                     stalled=old.stalled, never_acks=old.never_acks))

    def seek(self, offset: int) -> None:
        self.trail.append(f"seek {offset}")
        self.core.process_seek(offset)
        self.owners_epoch += 1  # everything from `offset` goes out again, as first deliveries
        self.model.seek(offset)
        self.wake()
        self.waited.clear()
        for consumer in self.consumers.values():  # the applications start over
            consumer.buffer.clear()
            consumer.app.clear()
            consumer.wire_in.clear()
            # Acks in flight are dropped: arriving after the seek they would acknowledge
            # the copies sent again, which the applications never saw (a real seek races
            # with them so: the simulation leaves that race out). Nacks still go (the
            # SDK counts them: nacks_seen).
            consumer.wire_out = deque(r for r in consumer.wire_out if r[0] != "ack")

    def heal(self) -> None:
        """Stalls end, nobody nacks: everything is acknowledged within a bound."""
        if self.kind == Kind.KEY_SHARED and self.mode == Mode.STICKY:
            self._cover_sticky_gaps()
        if not self.consumers:
            self.join()
            if not self.consumers:
                self._attach(SimConsumer(MemberSpec("healer"), 100, False))
        self.in_flight_done()
        for consumer in self.consumers.values():
            consumer.stalled = consumer.never_acks = False
            consumer.one_permit_at_a_time = False
        # a sweep of the log per four rounds, and each consumer may hold only so many
        limits = self.limits
        bound = 4 * (self.model.end // limits.read_events_max) + 200 + \
            2 * (self.model.end // limits.consumer_unacked_events_max)
        for _ in range(bound):
            self.now += 100
            self.round()
            for name, consumer in sorted(self.consumers.items()):
                consumer.drain(self.model)
                member = self.core.members[name]
                if member.permits + len(consumer.buffer) < consumer.queue_size:
                    consumer.wire_out.append(("permits", [], consumer.queue_size - member.permits,
                                              []))
                self.upstream(consumer, len(consumer.wire_out))
            if self.model.lowest_unacked() == self.model.end and \
                    self.core.mark_delete() >= self.model.end:
                self.persist()
                return
        raise Violation(f"not drained within {bound} rounds after the stalls ended: "
                        f"model lowest unacked {self.model.lowest_unacked()} of "
                        f"{self.model.end}, core mark-delete {self.core.mark_delete()}, "
                        f"floors {dict(list(self.core.slots.floors.items())[:5])}")

    def in_flight_done(self) -> None:
        """Deliver what is on the wires (heal starts from quiet wires)."""
        for consumer in self.consumers.values():
            self.upstream(consumer, len(consumer.wire_out))

    def _cover_sticky_gaps(self) -> None:
        assert self.core.selector is not None
        taken = sorted((r.slot_first, r.slot_last) for n in self.core.members
                       for r in self.core.selector.ranges_of(n))
        gaps, position = [], 0
        for first, last in taken:
            if first > position:
                gaps.append(HashRange(position, first - 1))
            position = last + 1
        if position < SLOT_COUNT:
            gaps.append(HashRange(position, SLOT_COUNT - 1))
        if gaps:
            self._attach(SimConsumer(MemberSpec("healer", sticky_ranges=tuple(gaps)), 100,
                                     False))
