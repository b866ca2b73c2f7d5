"""One consumer's Subscribe stream as the broker keeps it: identity, settings, outbox.

A `Session` is one Subscribe stream; its outbox is a bounded queue of
serialized SubscribeResponse messages that the servicer drains. Dispatchers
never wait on it. Deliveries are bounded by permits in events, and by bytes
here: once the queued messages pass `outbox_bytes_max`, the session pauses
the consumer in every dispatcher it is attached to (they send it nothing
more, its slots wait like a consumer out of permits) until the servicer has
written half of them out. A consumer that still lets its outbox fill up
(`outbox_max` messages) is disconnected (RESOURCE_EXHAUSTED) rather than
letting the broker's memory grow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import BrokerError
from broker.subscription.members import MemberSpec
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
                 outbox_max: int, outbox_bytes_max: int = 1 << 62) -> None:
        self.spec = spec
        self.topic = topic
        self.subscription = subscription
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue(outbox_max)
        self.outbox_max = outbox_max
        self.outbox_bytes_max = outbox_bytes_max
        self.outbox_bytes = 0
        self.paused = False
        self._resume: dict[int, Callable[[bool], None]] = {}  # partition -> pause(flag)
        self.error: BrokerError | None = None
        self.closed = False
        self.nacks_seen = 0  # Nack messages processed (Delivery.nacks_seen)

    @property
    def name(self) -> str:
        return self.spec.name

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
        self.outbox_bytes += len(message)
        if not self.paused and self.outbox_bytes > self.outbox_bytes_max:
            self.paused = True
            for pause in self._resume.values():
                pause(True)

    def written(self, message: bytes) -> None:
        """The servicer handed `message` to gRPC."""
        self.outbox_bytes -= len(message)
        if self.paused and self.outbox_bytes <= self.outbox_bytes_max // 2:
            self.paused = False
            for pause in self._resume.values():
                pause(False)

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
