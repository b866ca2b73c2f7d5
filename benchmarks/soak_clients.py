"""The soak run's clients, on one event loop: a producer at a fixed rate, Key_Shared
consumers that leave and join (churn), a Shared subscription and a follow reader per
partition. Every delivery goes into the Ledger (benchmarks/soak_ledger.py).

A leaving Key_Shared consumer acknowledges what it took, except every other one,
which takes one more batch and closes without acknowledging it (as a process that
dies mid-batch): the broker must deliver those events again, to another consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.soak_ledger import Ledger, SessionOrder
from sdk import Consumer, Producer
from sdk.reader import Reader

TOPIC = "soak"
KEY_SHARED = "soak-key-shared"
SHARED = "soak-shared"
TICK_S = 0.01  # the producer sends what is due every tick
RECEIVE_WAIT_S = 0.2


@dataclass(frozen=True)
class Plan:
    """What one soak run does (the command's options)."""

    seconds: float  # producing
    rate: int  # events/s
    keys: int
    value_bytes: int
    partitions: int
    consumers: int  # Key_Shared consumers attached at a time
    churn_s: float  # one leaves and a new one joins this often
    sample_s: float
    drain_s: float  # bound on the backlog draining after the producer stops
    retention_bytes: int


@dataclass
class Tally:
    """Counts the report prints, and the first failure a client saw."""

    sessions: int = 0
    dropped_unacked: int = 0  # events leaving consumers did not acknowledge
    redelivered: int = 0  # Key_Shared deliveries with a redelivery count
    shared_events: int = 0
    reader_events: int = 0
    send_failures: int = 0
    reader_next: list[int] = field(default_factory=list)
    reader_end: list[int] = field(default_factory=list)
    orders: list[SessionOrder] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Clients:
    """The clients of one run against `address`; `ledger` and `tally` fill as they go."""

    def __init__(self, address: str, plan: Plan, ledger: Ledger) -> None:
        self.address, self.plan, self.ledger = address, plan, ledger
        self.tally = Tally(reader_next=[0] * plan.partitions,
                           reader_end=[0] * plan.partitions)
        self.sessions: list[tuple[asyncio.Event, asyncio.Task[None]]] = []
        self.background: list[asyncio.Task[None]] = []
        self.pending: set[asyncio.Task[None]] = set()
        self.readers: list[Reader] = []
        self.shared: list[Consumer] = []

    def _failed(self, what: str, error: BaseException) -> None:
        self.tally.errors.append(f"{what}: {type(error).__name__}: {error}")

    # ------------------------------------------------------------ Key_Shared, churning

    async def join(self) -> None:
        """A new Key_Shared consumer session."""
        self.tally.sessions += 1
        name = f"ks-{self.tally.sessions}"
        consumer = await Consumer.subscribe(self.address, TOPIC, KEY_SHARED, type="key_shared",
                                            consumer_name=name, start="earliest")
        order = SessionOrder(name)
        self.tally.orders.append(order)
        stop = asyncio.Event()
        drop = self.tally.sessions % 2 == 0
        task = asyncio.create_task(self._key_shared(consumer, order, stop, drop), name=name)
        self.sessions.append((stop, task))

    async def leave(self) -> None:
        """The oldest Key_Shared session leaves."""
        stop, task = self.sessions.pop(0)
        stop.set()
        await task

    async def _key_shared(self, consumer: Consumer, order: SessionOrder, stop: asyncio.Event,
                          drop_last: bool) -> None:
        try:
            while not stop.is_set():
                try:
                    batch = await consumer.receive_batch(RECEIVE_WAIT_S)
                except TimeoutError:
                    continue
                order.saw(batch.keys(), batch.offsets)
                self.ledger.received(KEY_SHARED, batch.partition, batch.offsets)
                self.tally.redelivered += sum(1 for c in batch.redelivery_counts if c)
                consumer.ack_batch(batch)
            if drop_last:  # dies mid-batch: this one comes again elsewhere
                with contextlib.suppress(TimeoutError):
                    batch = await consumer.receive_batch(RECEIVE_WAIT_S)
                    order.saw(batch.keys(), batch.offsets)
                    self.tally.dropped_unacked += batch.count
        except Exception as error:  # the verdict names it
            self._failed(f"Key_Shared consumer {order.name}", error)
        finally:
            await consumer.close()

    async def churn(self) -> None:
        """Every churn_s: the oldest session leaves, a new one joins; until cancelled."""
        while True:
            await asyncio.sleep(self.plan.churn_s)
            await self.leave()
            await self.join()

    # ------------------------------------------------------------ Shared and the readers

    async def _shared(self, consumer: Consumer) -> None:
        try:
            while True:
                try:
                    batch = await consumer.receive_batch(RECEIVE_WAIT_S)
                except TimeoutError:
                    continue
                self.ledger.received(SHARED, batch.partition, batch.offsets)
                self.tally.shared_events += batch.count
                consumer.ack_batch(batch)
        except Exception as error:  # the verdict names it
            self._failed("Shared consumer", error)

    async def _read(self, reader: Reader, partition: int) -> None:
        """A follow reader: every offset, in order, without a gap."""
        try:
            async for batch in reader:
                offsets = batch.offsets
                if offsets and offsets[0] != self.tally.reader_next[partition]:
                    self.tally.errors.append(
                        f"reader of partition {partition} expected offset "
                        f"{self.tally.reader_next[partition]}, got {offsets[0]}")
                    return
                self.tally.reader_next[partition] = batch.next_offset
                self.tally.reader_end[partition] = reader.end_offset or 0
                self.tally.reader_events += batch.count
        except Exception as error:  # the verdict names it
            self._failed(f"reader of partition {partition}", error)

    def reader_lag(self) -> int:
        return sum(max(0, end - nxt) for end, nxt in
                   zip(self.tally.reader_end, self.tally.reader_next, strict=True))

    async def start(self) -> None:
        """Every consumer and reader attached (all from the earliest offset)."""
        for _ in range(self.plan.consumers):
            await self.join()
        for i in range(2):
            consumer = await Consumer.subscribe(self.address, TOPIC, SHARED, type="shared",
                                                consumer_name=f"shared-{i}", start="earliest")
            self.shared.append(consumer)
            self.background.append(asyncio.create_task(self._shared(consumer)))
        for partition in range(self.plan.partitions):
            reader = Reader(self.address, TOPIC, partition, start="earliest", follow=True)
            self.readers.append(reader)
            self.background.append(asyncio.create_task(self._read(reader, partition)))

    async def stop(self) -> None:
        while self.sessions:
            await self.leave()
        for task in self.background:
            task.cancel()
        for task in self.background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for consumer in self.shared:
            await consumer.close()
        for reader in self.readers:
            await reader.close()

    # ------------------------------------------------------------ the producer

    async def produce(self, producer: Producer) -> None:
        """`plan.rate` events/s for `plan.seconds`, keys over a bounded key space;
        each answered request marks its offsets acknowledged."""
        plan = self.plan
        rng = random.Random(7)
        value = b"s" * plan.value_bytes
        began, sent, total = time.monotonic(), 0, int(plan.rate * plan.seconds)
        while sent < total:
            due = min(total, int((time.monotonic() - began) * plan.rate) + 1)
            if due > sent:
                n = due - sent
                keys = [f"k{rng.randrange(plan.keys)}" for _ in range(n)]
                future = await producer.send_batch(keys, [value] * n)
                task = asyncio.create_task(self._acknowledged(future))
                self.pending.add(task)
                task.add_done_callback(self.pending.discard)
                sent = due
            await asyncio.sleep(TICK_S)
        await producer.flush()
        while self.pending:
            await asyncio.gather(*list(self.pending))

    async def _acknowledged(self, future: Any) -> None:
        for indexes, result in await future.wait_results():
            if isinstance(result, BaseException):
                self.tally.send_failures += len(indexes)
                continue
            self.ledger.produced(result.partition, result.base_offset, result.count)
