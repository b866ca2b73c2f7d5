"""One consumer's Subscribe stream as the broker keeps it: identity, settings, outbox.

A `Session` is one Subscribe stream; its outbox is a bounded queue of
serialized SubscribeResponse messages that the servicer drains. Dispatchers
never wait on it. Deliveries are bounded by permits in events, and by bytes
here: once the queued messages pass the session's limit, the session pauses
the consumer in every dispatcher it is attached to (they send it nothing
more, its slots wait like a consumer out of permits) until the servicer has
written out all but half the limit. A consumer that still lets its outbox
fill up (`outbox_max` messages) is disconnected (RESOURCE_EXHAUSTED) rather
than letting the broker's memory grow.

The limit is `outbox_bytes_max`, or less: the session's share of the
broker's budget for all outboxes (`share_budget.py`), which drops as
sessions open and grows back as they close. Nothing queued is ever dropped
for it: a session over a smaller share only stops getting more (the budget
wakes it to pause at once) until it is written down to half its share, and a
paused session is woken when shares grow, so it resumes if it is now under
half (nothing else would: only a write resumes it). A session also pauses
when all outboxes together hold more than the budget (`outbox_budget.py`),
so sessions that filled under larger shares and stalled do not hold more
than the budget between them. The check comes after a message is queued,
so an empty outbox always takes the next delivery, even one larger than the
share: a session's outbox makes progress whatever its share, and holds at
most its share plus what one dispatcher round sent it.

`bytes` is what the broker holds for the stream: the queued messages, and
the one being written counted twice (`writing`): gRPC copies it into its
own buffer, and the servicer's bytes live until gRPC has written it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import BrokerError
from broker.subscription.members import MemberSpec
from broker.subscription.outbox_budget import OutboxBudget
from sdk.core.model import HashRange


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """What a consumer asked for when it opened its stream (validated)."""

    name: str
    priority: int
    sticky_ranges: tuple[HashRange, ...]
    ack_timeout_ms: int
    look_ahead_max: int
    partitions: tuple[int, ...]


class Session:
    """One Subscribe stream: the consumer's identity and its bounded outbox."""

    def __init__(self, spec: ConsumerSpec, topic: str, subscription: str,
                 outbox_max: int, outbox_bytes_max: int = 1 << 62,
                 budget: OutboxBudget | None = None) -> None:
        self.spec = spec
        self.topic = topic
        self.subscription = subscription
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue(outbox_max)
        self.outbox_max = outbox_max
        self.outbox_bytes_max = outbox_bytes_max
        self.bytes = 0  # queued in the outbox (what the budget sees of the session)
        self.budget = budget
        self.paused = False
        self._resume: dict[int, Callable[[bool], None]] = {}  # partition -> pause(flag)
        self.error: BrokerError | None = None
        self.closed = False
        self.nacks_seen = 0  # Nack messages processed (Delivery.nacks_seen)

    @property
    def name(self) -> str:
        return self.spec.name

    def limit(self) -> int:
        """Past this many bytes queued the session pauses: its share of the budget."""
        return self.outbox_bytes_max if self.budget is None else \
            min(self.outbox_bytes_max, self.budget.share)

    def on_pause(self, partition: int, pause: Callable[[bool], None]) -> None:
        """Register how to pause (True) and resume (False) this consumer on a partition."""
        self._resume[partition] = pause

    def send(self, message: bytes) -> None:
        """Queue one serialized SubscribeResponse; never waits (see the module docstring)."""
        if self.closed:
            return
        try:
            self.outbox.put_nowait(message)
        except asyncio.QueueFull:
            self.close(BrokerError("consumer_outbox_full", consumer=self.name,
                                   max=self.outbox_max))
            return
        n = len(message)
        self.bytes += n
        budget = self.budget
        if budget is None:
            over = self.bytes > self.outbox_bytes_max
        else:
            budget.held_bytes += n
            over = self.bytes > min(self.outbox_bytes_max, budget.share) \
                or budget.held_bytes > budget.bytes_max
        if over and not self.paused:
            self._set_paused(True)

    def writing(self, message: bytes) -> None:
        """The servicer hands `message` (taken from the outbox) to gRPC, which copies it."""
        n = len(message)
        self.bytes += n
        if self.budget is not None:
            self.budget.held_bytes += n

    def written(self, message: bytes) -> None:
        """gRPC wrote `message`: its copy and the servicer's are gone."""
        n = 2 * len(message)
        self.bytes -= n
        if self.budget is not None:
            self.budget.held_bytes -= n
        if self.paused and self.bytes <= self.limit() // 2:
            self._set_paused(False)

    def leave_budget(self) -> None:
        """The stream is gone: what it held no longer counts (it counts nothing more)."""
        if self.budget is not None:
            self.budget.leave(self)
            self.budget = None

    def share_changed(self) -> None:
        """The budget's wake: pause if over a smaller share, resume if under half a
        larger one."""
        if self.closed:
            return
        limit = self.limit()
        if not self.paused and self.bytes > limit:
            self._set_paused(True)
        elif self.paused and self.bytes <= limit // 2:
            self._set_paused(False)

    def _set_paused(self, paused: bool) -> None:
        self.paused = paused
        if self.budget is not None:
            if paused:
                self.budget.wait_for_room(self)
            else:
                self.budget.done_waiting(self)
        for pause in self._resume.values():
            pause(paused)

    def member_spec(self) -> MemberSpec:
        """What a dispatch core knows of this consumer."""
        spec = self.spec
        return MemberSpec(spec.name, spec.priority, spec.sticky_ranges, spec.ack_timeout_ms,
                          spec.look_ahead_max)

    def close(self, error: BrokerError | None = None) -> None:
        """End the stream (with `error` as its status, if any). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.error = error
        while True:  # make room for the end marker: what is queued is moot now
            try:
                self.outbox.put_nowait(None)
                return
            except asyncio.QueueFull:
                self.outbox.get_nowait()
