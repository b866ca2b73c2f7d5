"""What the broker keeps per attached consumer: its stream and, per partition,
its permits, unacknowledged events and dispatch rate.

A `Session` is one Subscribe stream; its outbox is a bounded queue of
serialized SubscribeResponse messages that the servicer drains. Dispatchers
never wait on it: deliveries are bounded by permits, and a consumer that
lets its outbox fill up is disconnected (RESOURCE_EXHAUSTED) rather than
letting the broker's memory grow.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat, starmap

from broker.errors import BrokerError
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
                 outbox_max: int) -> None:
        self.spec = spec
        self.topic = topic
        self.subscription = subscription
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue(outbox_max)
        self.outbox_max = outbox_max
        self.error: BrokerError | None = None
        self.closed = False
        self.nacks_seen = 0  # Nack messages processed (Delivery.nacks_seen)

    @property
    def name(self) -> str:
        return self.spec.name

    def send(self, message: bytes) -> None:
        """Queue one serialized SubscribeResponse; never waits (see the module docstring)."""
        if self.closed:
            return
        try:
            self.outbox.put_nowait(message)
        except asyncio.QueueFull:
            self.close(BrokerError("consumer_outbox_full", consumer=self.name,
                                   max=self.outbox_max))

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


class RateMeter:
    """Events per second over the last whole second (cheap: one add per round)."""

    __slots__ = ("_count", "_rate", "_window_start_ms")

    def __init__(self, now_ms: int) -> None:
        self._window_start_ms = now_ms
        self._count = 0
        self._rate = 0.0

    def add(self, events: int, now_ms: int) -> None:
        self._roll(now_ms)
        self._count += events

    def rate(self, now_ms: int) -> float:
        self._roll(now_ms)
        return self._rate

    def _roll(self, now_ms: int) -> None:
        elapsed = now_ms - self._window_start_ms
        if elapsed >= 1000:
            self._rate = self._count * 1000 / elapsed if elapsed < 2000 else 0.0
            self._count = 0
            self._window_start_ms = now_ms


@dataclass(slots=True)
class PartitionConsumer:
    """A consumer as one partition's dispatcher sees it (runs on that task)."""

    session: Session
    now_ms: int
    permits: int = 0
    unacked: dict[int, int] = field(default_factory=dict)  # offset -> slot
    sent_log: deque[tuple[int, list[int]]] = field(default_factory=deque)  # ack timeouts
    delivered: int = 0
    meter: RateMeter = field(init=False)

    def __post_init__(self) -> None:
        self.meter = RateMeter(self.now_ms)

    @property
    def name(self) -> str:
        return self.session.name

    def take_unacked(self, ranges: Iterable[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Remove and return (offsets, slots) this consumer holds within `ranges`."""
        return take_in_ranges(self.unacked, ranges)

    def discard_unacked(self, ranges: Sequence[tuple[int, int]]) -> int:
        """Remove what this consumer holds within `ranges`; returns how many (acks)."""
        return discard_in_ranges(self.unacked, ranges)


def take_in_ranges(table: dict[int, int], ranges: Iterable[tuple[int, int]]
                   ) -> tuple[list[int], list[int]]:
    """Remove the keys of `table` inside half-open `ranges`: (keys, values), keys ascending.

    Per range, walks whichever is smaller: the range or the table.
    """
    offsets: list[int] = []
    slots: list[int] = []
    for start, stop in ranges:
        if not table:
            break
        if stop - start <= len(table):
            for offset in range(start, stop):
                slot = table.pop(offset, None)
                if slot is not None:
                    offsets.append(offset)
                    slots.append(slot)
        else:
            hits = sorted(o for o in table if start <= o < stop)
            for offset in hits:
                offsets.append(offset)
                slots.append(table.pop(offset))
    return offsets, slots


def discard_in_ranges(table: dict[int, int], ranges: Sequence[tuple[int, int]]) -> int:
    """Remove the keys of `table` inside half-open `ranges` (sorted by start);
    returns how many.

    The ack path, where one message holds many short ranges: the pops of all
    ranges run in one C-level pass (ranges chained, drained by a zero-length
    deque). When the ranges span far more offsets than the table holds (a
    cumulative ack), the table is walked instead.
    """
    before = len(table)
    if not before or not ranges:
        return 0
    span = sum(map(_length, ranges))
    if span <= 4 * before:
        offsets = chain.from_iterable(starmap(range, ranges))
        deque(map(table.pop, offsets, repeat(None)), maxlen=0)
    else:
        starts = [start for start, _ in ranges]
        reach = list(accumulate((stop for _, stop in ranges), max))  # overlaps allowed
        for offset in [o for o in table if _inside(starts, reach, o)]:
            del table[offset]
    return before - len(table)


def _length(span: tuple[int, int]) -> int:
    return span[1] - span[0]


def _inside(starts: list[int], reach: list[int], offset: int) -> bool:
    """Whether `offset` is in a range: some range starting at or before it reaches past it."""
    i = bisect_right(starts, offset) - 1
    return i >= 0 and offset < reach[i]
