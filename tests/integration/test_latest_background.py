"""Event processors and Databus registrations starting at "latest" deliver what
is produced once they say they started.

Goal: the promise each API makes for a "latest" start holds. EventProcessor
(start="latest", or a partition's entry of a dict): every event stored after
on_partition_initialize(context) returned is delivered to on_event (Azure
Event Hubs: a partition without a checkpoint starts at the starting position
when the partition is claimed and its consumer opens). DatabusClient.register
(start="latest"): every event stored after on_start_consumption is delivered.
Before, both opened their reads in background tasks after those callbacks, the
broker resolved "latest" after the user's event was stored, and it was skipped.
Method: a real broker process. The race is made deterministic: the reads go
through a channel that starts each Read call a second late (tests/support/
slow_read.py), far longer than producing an event takes; rounds repeat it with
a fresh consumer group (no checkpoint) each time. A skipped event is seen as a
partition that gets nothing within a liveness bound, or gets a later event
first.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sdk import Producer
from sdk.consumer import ConsumerConfig
from sdk.databus import (
    SUCCESS,
    DatabusClient,
    DatabusConfig,
    DatabusConsumerBase,
    DbusEvent,
    connection,
)
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from tests.support.broker_process import BrokerProcess
from tests.support.one_each import create_topic, produce_one_each
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS
from tests.support.slow_read import slow_describe_channel, slow_read_channel

PARTITIONS = 2
ROUNDS = 3  # each round's old-code outcome is fixed by the delay; rounds guard a lucky one
WITHIN_S = 30.0  # liveness bound of one wait, not a speed claim
HELD_BACK_S = 300.0  # a Read held back longer than any test waits
STOP_WITHIN_S = 20.0  # liveness bound of a stop, far below HELD_BACK_S


def test_processor_at_latest_delivers_what_follows_initialize(
        shared_broker: BrokerProcess) -> None:
    address, topic = shared_broker.address, "latest-processor"

    async def one_round(producer: Producer, n: int) -> None:
        initialized: set[int] = set()
        all_initialized = asyncio.Event()
        first: dict[int, bytes] = {}
        all_read = asyncio.Event()

        def on_initialize(context: PartitionContext) -> None:
            initialized.add(context.partition)
            if len(initialized) == PARTITIONS:
                all_initialized.set()

        def on_event(context: PartitionContext, batch: ReadBatch) -> None:
            first.setdefault(context.partition, batch.values[0])
            if len(first) == PARTITIONS:
                all_read.set()

        channel = slow_read_channel(address)
        # round 1 gives partition 1 its own "latest" through the dict form
        start = "latest" if n % 2 == 0 else {0: "latest", 1: "latest"}
        processor = EventProcessor(address, topic, f"round-{n}", on_event=on_event,
                                   on_partition_initialize=on_initialize, start=start,
                                   load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS, channel=channel)
        await processor.start()
        try:
            await asyncio.wait_for(all_initialized.wait(), WITHIN_S)
            tag = b"new %d" % n
            await produce_one_each(producer, tag, PARTITIONS)
            await produce_one_each(producer, b"after %d" % n, PARTITIONS)  # a skip shows as this first
            await asyncio.wait_for(all_read.wait(), WITHIN_S)
            assert first == dict.fromkeys(range(PARTITIONS), tag), f"round {n}"
        finally:
            await processor.stop()
            await channel.close()

    async def go() -> None:
        await create_topic(address, topic, PARTITIONS)
        producer = await Producer.create(address, topic)
        await produce_one_each(producer, b"old", PARTITIONS)  # "latest" is not the start of the log
        for n in range(ROUNDS):
            await one_round(producer, n)
        await producer.close()

    asyncio.run(go())


def test_processor_stopped_while_latest_is_fixed_stops_promptly(
        shared_broker: BrokerProcess) -> None:
    """The pump waits for its reader to open before on_partition_initialize; a stop
    in that wait (a broker slow to answer the read) ends it at once, with neither
    on_partition_initialize nor on_partition_close (nothing was initialized)."""
    address, topic = shared_broker.address, "latest-processor-stop"
    calls: list[str] = []

    async def go() -> None:
        await create_topic(address, topic, PARTITIONS)
        channel = slow_read_channel(address, HELD_BACK_S)  # the reads never open in the test
        processor = EventProcessor(address, topic, "stopping", on_event=lambda c, b: None,
                                   on_partition_initialize=lambda c: calls.append("init"),
                                   on_partition_close=lambda c, r: calls.append("close"),
                                   start="latest", load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS, channel=channel)
        await processor.start()
        try:
            deadline = time.monotonic() + WITHIN_S
            while processor.owned_partitions != list(range(PARTITIONS)):
                assert time.monotonic() < deadline, "the partitions were never claimed"
                await asyncio.sleep(0.05)
        finally:
            await asyncio.wait_for(processor.stop(), STOP_WITHIN_S)
            await channel.close()
        assert calls == []

    asyncio.run(go())

class _FirstEvents(DatabusConsumerBase):
    """Notes on_start_consumption and the first event's value per partition."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.first: dict[int, bytes] = {}
        self.all_read = asyncio.Event()

    def on_start_consumption(self) -> Any:
        self.started.set()
        return SUCCESS

    def on_event(self, event: DbusEvent) -> Any:
        self.first.setdefault(event.partition, event.value)
        if len(self.first) == PARTITIONS:
            self.all_read.set()
        return SUCCESS


async def _produce_windows(producer: Producer, tag: bytes) -> None:
    """A one-event window on every partition, stored before returning."""
    for p in range(PARTITIONS):
        await producer.send_window([{"key": p, "value": tag, "source": "s"}], partition=p)


def test_databus_at_latest_delivers_what_follows_start_consumption(
        shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    address, topic = shared_broker.address, "latest-databus"
    # the registration opens its own channel: make its reads start a second late
    monkeypatch.setattr(connection, "open_channel",
                        lambda broker, security=None: slow_read_channel(broker))

    async def one_round(producer: Producer, n: int) -> None:
        consumer = _FirstEvents()
        client = DatabusClient(address, config=DatabusConfig(checkpoint_windows_n=0))
        client.register(consumer, topic=topic, start="latest", name=f"round-{n}")
        async with client:
            await asyncio.wait_for(consumer.started.wait(), WITHIN_S)
            tag = b"new %d" % n
            await _produce_windows(producer, tag)
            await _produce_windows(producer, b"after %d" % n)  # a skip shows as this first
            await asyncio.wait_for(consumer.all_read.wait(), WITHIN_S)
            assert consumer.first == dict.fromkeys(range(PARTITIONS), tag), f"round {n}"

    async def go() -> None:
        await create_topic(address, topic, PARTITIONS)
        producer = await Producer.create(address, topic)
        await _produce_windows(producer, b"old")  # "latest" is not the start of the log
        for n in range(ROUNDS):
            await one_round(producer, n)
        await producer.close()

    asyncio.run(go())


def test_databus_shared_at_latest_delivers_what_follows_start_consumption(
        shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """register_shared: a new subscription at "latest" is created by the consumer's
    subscribe, which the registration makes after it looked the topic up."""
    address, topic = shared_broker.address, "latest-databus-shared"
    monkeypatch.setattr(connection, "open_channel",
                        lambda broker, security=None: slow_describe_channel(broker))

    async def one_round(producer: Producer, n: int) -> None:
        consumer = _FirstEvents()
        client = DatabusClient(address, config=DatabusConfig(checkpoint_windows_n=0))
        client.register_shared(consumer, topic=topic, subscription=f"round-{n}",
                               consumer_config=ConsumerConfig(type="key_shared",
                                                              start="latest"))
        async with client:
            await asyncio.wait_for(consumer.started.wait(), WITHIN_S)
            tag = b"new %d" % n
            await _produce_windows(producer, tag)
            await _produce_windows(producer, b"after %d" % n)  # a skip shows as this first
            await asyncio.wait_for(consumer.all_read.wait(), WITHIN_S)
            assert consumer.first == dict.fromkeys(range(PARTITIONS), tag), f"round {n}"

    async def go() -> None:
        await create_topic(address, topic, PARTITIONS)
        producer = await Producer.create(address, topic)
        await _produce_windows(producer, b"old")
        for n in range(ROUNDS):
            await one_round(producer, n)
        await producer.close()

    asyncio.run(go())
