"""ack_timeout_ms counts from when the application takes an event, not from the send.

Goal: timed by the broker from when it sent each event, the time an event waited
in the SDK's receive buffer counted: a Shared consumer with ack_timeout_ms=1000,
max_redeliveries=1, taking 100 ms per event and acking every one, saw 41 of 60
events go to the dead-letter topic (111 deliveries for 60 events). The SDK now
times its acks itself (SubscribeOpen.ack_timeout_by_client, sdk/ack_timeouts.py)
and nacks what outlives the timeout, as Pulsar's client-side ackTimeout.
Method: one real broker for the module, real SDK producers and consumers; what
the application saw, the dead-letter topic's size and the subscription's cursor.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer, ConsumerConfig, Message
from sdk.databus import DatabusClient, DatabusConfig
from sdk.errors import TopicNotFound
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from sdk.sync_consumer import SyncConsumer
from tests.integration.test_databus_failures import Applying, until
from tests.integration.test_databus_failures import produce as produce_windows
from tests.support.broker_process import BrokerProcess

TIMEOUT_MS = 1000


async def produce(address: str, topic: str, n: int, keys: int = 0) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)
    async with await Producer.create(address, topic) as producer:
        for i in range(n):
            options = {"ordering_key": f"k{i % keys}"} if keys else {}
            await producer.send(i, b"v%d" % i, partition=0, **options)
        await producer.flush()


async def dead_lettered(address: str, topic: str) -> int:
    async with Admin(address) as admin:
        try:
            return (await admin.describe_topic(topic)).partitions[0].end_offset
        except TopicNotFound:
            return 0  # created with the first dead letter


async def drained(address: str, topic: str, subscription: str) -> bool:
    async with SubscriptionAdmin(address) as admin:
        info = await admin.describe_subscription(topic, subscription)
    return all(p.mark_delete == p.end_offset for p in info.partitions)


def test_a_slow_application_acking_every_event_loses_none(shared_broker: BrokerProcess) -> None:
    """(a) The buffer holds all 60 events at once; taking each costs 100 ms, so the
    last waits ~6 s in the buffer: no event may time out, none is dead-lettered."""
    address = shared_broker.address
    topic, events = "ackt-slow", 60

    async def go() -> None:
        await produce(address, topic, events)
        consumer = await Consumer.subscribe(address, topic, "s", type="shared", start="earliest",
                                            ack_timeout_ms=TIMEOUT_MS, max_redeliveries=1,
                                            dead_letter_topic=f"{topic}-dlq")
        deliveries = 0
        acked: set[int] = set()
        try:
            while len(acked) < events and deliveries < 3 * events:  # bounded
                message = await consumer.receive(3.0)
                deliveries += 1
                await asyncio.sleep(0.1)  # the application's work
                consumer.ack(message)
                acked.add(message.offset)
        except TimeoutError:
            pass  # the rest went to the dead-letter topic (the old behaviour)
        await consumer.flush_acks()
        await asyncio.sleep(0.5)  # the broker applies the acks, dead-letters what it must
        dead = await dead_lettered(address, f"{topic}-dlq")
        done = await drained(address, topic, "s")
        await consumer.close()
        print(f"deliveries={deliveries} acked={len(acked)} dead_lettered={dead} drained={done}")
        assert dead == 0, f"{dead} of {events} acked events went to the dead-letter topic " \
                          f"({deliveries} deliveries)"
        assert len(acked) == events and done

    asyncio.run(go())


def test_only_a_taken_event_times_out(shared_broker: BrokerProcess) -> None:
    """(c) Events left in the buffer past the timeout are not redelivered; (b) one
    taken and never acknowledged comes again about the timeout after it was taken."""
    address = shared_broker.address
    topic = "ackt-taken"

    async def go() -> None:
        await produce(address, topic, 3)
        consumer = await Consumer.subscribe(address, topic, "s", type="shared", start="earliest",
                                            ack_timeout_ms=TIMEOUT_MS)
        await asyncio.sleep(2.5 * TIMEOUT_MS / 1000)  # delivered into the buffer, not taken
        first: list[Message] = []
        taken_at = 0.0  # when offset 0, the one held, was taken: its clock starts then
        try:
            while len(first) < 10:  # bounded
                first.append(await consumer.receive(0.5))
                if len(first) == 1:
                    taken_at = time.monotonic()
        except TimeoutError:
            pass
        assert [(m.offset, m.redelivery_count) for m in first] == [(0, 0), (1, 0), (2, 0)]
        consumer.ack(first[1])
        consumer.ack(first[2])
        again = await consumer.receive(10.0)
        waited = time.monotonic() - taken_at
        assert (again.offset, again.redelivery_count) == (0, 1)
        # The SDK's deadlines are whole milliseconds (sdk/ack_timeouts.py): 10 ms of room.
        assert waited >= (TIMEOUT_MS - 10) / 1000, "redelivered before the timeout"
        consumer.ack(again)
        await consumer.flush_acks()
        await consumer.close()

    asyncio.run(go())


def test_key_shared_timeouts_keep_the_order_of_a_key(shared_broker: BrokerProcess) -> None:
    """(b) Key_Shared: a key's events taken and not acknowledged come again, in order."""
    address = shared_broker.address
    topic, events, keys = "ackt-keyed", 12, 3

    async def go() -> None:
        await produce(address, topic, events, keys)
        consumer = await Consumer.subscribe(address, topic, "s", type="key_shared",
                                            start="earliest", ack_timeout_ms=TIMEOUT_MS)
        held = [o for o in range(events) if o % keys == 0]  # key k0: never acked at first
        for _ in range(events):
            message = await consumer.receive(5.0)
            assert message.redelivery_count == 0
            if message.offset not in held:
                consumer.ack(message)
        again: list[Message] = []
        while len(again) < len(held):  # bounded by the receive timeout
            message = await consumer.receive(10.0)
            again.append(message)
            consumer.ack(message)
        assert [m.offset for m in again] == held, "the key's order was broken"
        assert again[0].redelivery_count == 1
        await consumer.flush_acks()
        for _ in range(100):  # bounded: 5 s
            if await drained(address, topic, "s"):
                break
            await asyncio.sleep(0.05)
        assert await drained(address, topic, "s")
        await consumer.close()

    asyncio.run(go())


def test_no_ack_timeout_times_nothing(shared_broker: BrokerProcess) -> None:
    """No ack timeout: the consumer keeps no timer (an event held stays held)."""
    address = shared_broker.address
    topic = "ackt-none"

    async def go() -> None:
        await produce(address, topic, 1)
        consumer = await Consumer.subscribe(address, topic, "s", type="shared", start="earliest",
                                            ack_timeout_ms=0)
        message = await consumer.receive(5.0)
        assert consumer._ack_timer is None
        with pytest.raises(TimeoutError):
            await consumer.receive(1.5)
        consumer.ack(message)
        await consumer.close()

    asyncio.run(go())


def test_the_sync_consumer_times_what_it_took(shared_broker: BrokerProcess) -> None:
    """SyncConsumer runs the same Consumer on its loop thread: a taken event not
    acknowledged comes again; acknowledged, it does not."""
    address = shared_broker.address
    topic = "ackt-sync"
    asyncio.run(produce(address, topic, 2))
    with SyncConsumer(address, topic, "s", type="shared", start="earliest",
                      ack_timeout_ms=TIMEOUT_MS) as consumer:
        first, second = consumer.receive(5.0), consumer.receive(5.0)
        consumer.ack(second)
        again = consumer.receive(10.0)
        assert (again.offset, again.redelivery_count) == (first.offset, 1)
        consumer.ack(again)
        with pytest.raises(TimeoutError):
            consumer.receive(2.0 * TIMEOUT_MS / 1000)


def test_a_databus_registration_with_an_ack_timeout_presents_each_window_once(
        shared_broker: BrokerProcess) -> None:
    """The Databus shared registration takes parts with receive_batch and acks whole
    windows: with ack_timeout_ms set, every window is presented once and acknowledged."""
    address = shared_broker.address
    topic = "ackt-databus"
    consumer = Applying(event_sleep_s=0.005)

    async def go() -> list[tuple[int, list[int]]]:
        async with Admin(address) as admin:
            await admin.create_topic(topic, partitions=1)
        made = await produce_windows(address, topic, 0, 6, 10)
        client = DatabusClient(address, config=DatabusConfig(checkpoint_windows_n=1))
        client.register_shared(consumer, topic=topic, subscription="s", consumer_config=
                               ConsumerConfig(type="key_shared", start="earliest",
                                              ack_timeout_ms=TIMEOUT_MS))
        async with client:
            await until(lambda: len(consumer.windows) >= len(made), 30)
            for _ in range(100):  # bounded: 5 s
                if await drained(address, topic, "s"):
                    break
                await asyncio.sleep(0.05)
            assert await drained(address, topic, "s")
        return made

    made = asyncio.run(go())
    assert consumer.errors == [] and consumer.rollbacks == []
    assert sorted(consumer.windows) == sorted(made)
