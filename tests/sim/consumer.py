"""A simulated consumer: the SDK's client side and an application, with the wire between.

Goal: behave as a real `sdk.consumer.Consumer` does towards the broker,
including the parts that keep per-key order across nacks (the SDK's own
`NackHolds`, giving back prefetched events behind a nack and events of an
older delivery that overtook a retry) and Pulsar's permit rule, while the
messages each way take a while to arrive: deliveries sit on `wire_in` until
the consumer receives them, its acks, nacks and permits on `wire_out` until
the broker processes them, each side in order.

Method: plain lists and deques; every choice comes from the harness's seeded
random generator, passed in.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from broker.subscription.members import MemberSpec
from sdk.fetch_buffer import NackHolds
from tests.sim.model import Model

# ("ack" | "nack" | "permits", offsets, delay or count, a nack's rest_of_slots pairs or an
# ack's sent ranges as flat (send, start, stop) triples)
Request = tuple[str, list[int], int, list[int]]


@dataclass
class SimConsumer:
    """See the module docstring."""

    spec: MemberSpec
    queue_size: int
    one_permit_at_a_time: bool
    stalled: bool = False  # takes nothing and grants nothing, until the end
    never_acks: bool = False
    checked: bool = True  # its application's view is checked (see Model.app_take)
    ordered: bool = True  # not Shared: nacks hold their slots (as the SDK)
    wire_in: deque[tuple[list[int], list[int], int, int]] = field(default_factory=deque)
    batches: dict[int, tuple[int, list[int]]] = field(default_factory=dict)  # offset -> batch
    wire_out: deque[Request] = field(default_factory=deque)
    holds: NackHolds = field(default_factory=NackHolds)
    buffer: deque[int] = field(default_factory=deque)  # received, not taken by the app
    app: list[int] = field(default_factory=list)  # taken by the app, not acked or nacked
    taken_since_grant: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self) -> None:
        """A new stream: the initial grant (Pulsar: the whole queue)."""
        self.holds.reset(0)
        self.wire_out.append(("permits", [], 1 if self.one_permit_at_a_time else self.queue_size,
                              []))

    # ------------------------------------------------------------ the SDK

    def receive(self, model: Model) -> None:
        """Take one delivery off the wire, as `Consumer._handle` does."""
        offsets, _, nacks_seen, send = self.wire_in.popleft()
        stale = self.holds.seen(nacks_seen, 0)
        drop = set(self.holds.stale_positions(0, offsets, [model.events[o].slot for o in offsets])
                   ) if stale else set()
        self.taken_since_grant += len(drop)  # the broker took them back: permits return
        kept = [o for i, o in enumerate(offsets) if i not in drop]
        self.buffer.extend(kept)
        parts: dict[int, list[int]] = {}  # a batch: the events of one record in one send
        for offset in offsets:
            parts.setdefault(model.record_base[offset], []).append(offset)
        for part in parts.values():
            batch = (send, part)  # one object per batch: `ack` compares identity
            for offset in part:
                if offset in kept:
                    self.batches[offset] = batch

    def nack(self, model: Model, offset: int, delay_ms: int) -> list[int]:
        """The application nacks `offset` and the later events of its slot it holds; the
        SDK gives back those of the slot it prefetched behind it too. Returns them all."""
        if not self.ordered:  # Shared: just this event
            self.app.remove(offset)
            self.wire_out.append(("nack", [offset], delay_ms, []))
            self.holds.queue()
            return [offset]
        slot = model.events[offset].slot
        held = [o for o in self.app if o > offset and model.events[o].slot == slot]
        prefetched = [o for o in self.buffer if o > offset and model.events[o].slot == slot]
        given = sorted([offset, *held, *prefetched])
        for o in [offset, *held]:
            self.app.remove(o)
        for o in prefetched:
            self.buffer.remove(o)
        self.taken_since_grant += len(prefetched)
        named = [offset, *held]  # the prefetched ones go back with `rest`, as the SDK does
        rest = self.holds.nacked(0, named, [slot] * len(named))
        self.wire_out.append(("nack", named, delay_ms, rest))
        self.holds.queue()
        return given

    def ack(self, offsets: list[int]) -> None:
        """Acknowledge; a whole batch still all held by the application goes as one sent
        range, as `Consumer.ack_batch` sends it; the rest as offset ranges."""
        chosen = set(offsets)
        held = set(self.app)
        sent: list[int] = []
        for offset in sorted(chosen):
            batch = self.batches.get(offset)
            if batch is None or offset not in chosen:
                continue
            send, part = batch
            if send and all(o in chosen and o in held and self.batches.get(o) is batch
                            for o in part):
                sent += (send, part[0], part[-1] + 1)
                chosen -= set(part)
        for offset in offsets:
            self.app.remove(offset)
            self.batches.pop(offset, None)
        self.wire_out.append(("ack", sorted(chosen), 0, sent))

    def grant_due(self) -> None:
        """Pulsar's rule: once half the queue was taken, grant what was taken."""
        if self.one_permit_at_a_time:
            if not self.buffer and not self.wire_in and self.taken_since_grant:
                self.wire_out.append(("permits", [], 1, []))
                self.taken_since_grant = 0
        elif self.taken_since_grant >= max(1, self.queue_size // 2):
            self.wire_out.append(("permits", [], self.taken_since_grant, []))
            self.taken_since_grant = 0

    def forget(self, offset: int) -> None:
        """The broker took `offset` back (a timeout, a rewind): the application gives it up."""
        if offset in self.app:
            self.app.remove(offset)
        elif offset in self.buffer:
            self.buffer.remove(offset)
        else:
            for offsets, counts, _, _ in self.wire_in:
                if offset in offsets:
                    i = offsets.index(offset)
                    del offsets[i], counts[i]
        self.taken_since_grant += 1

    # ------------------------------------------------------------ the application

    def act(self, rnd: random.Random, model: Model, now_ms: int) -> None:
        """Receive, take, ack or nack, grant: one step of the application."""
        for _ in range(rnd.choice([0, 1, 3])):
            if self.wire_in:
                self.receive(model)
        if self.stalled:
            return
        for _ in range(rnd.choice([1, 3, 50])):
            if not self.buffer:
                break
            offset = self.buffer.popleft()
            model.app_take(self.name, offset, self.checked)
            self.app.append(offset)
            self.taken_since_grant += 1
        if self.app and not self.never_acks:
            choice = rnd.random()
            if choice < 0.08:
                given = self.nack(model, rnd.choice(self.app), rnd.choice([0, 1, 50, 300, 1000]))
                model.app_release(self.name, given)
            elif choice < 0.8:
                chosen = list(self.app) if rnd.random() < 0.7 else rnd.sample(
                    self.app, rnd.randint(1, len(self.app)))
                model.app_ack(self.name, chosen)
                self.ack(chosen)
        self.grant_due()

    def drain(self, model: Model) -> None:
        """Healing: receive everything, take it all, ack it all, grant the queue back."""
        while self.wire_in:
            self.receive(model)
        taken = list(self.buffer)
        self.buffer.clear()
        for offset in taken:
            model.app_take(self.name, offset, self.checked)
        self.app.extend(taken)
        if self.app:
            model.app_ack(self.name, list(self.app))
            self.ack(list(self.app))
        self.taken_since_grant += len(taken)
        if self.taken_since_grant:
            self.wire_out.append(("permits", [], self.taken_since_grant, []))
            self.taken_since_grant = 0
