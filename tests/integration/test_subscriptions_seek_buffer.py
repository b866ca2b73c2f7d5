"""What a consumer hands out after a seek of its subscription.

Goal: a seek moves what the application receives, not only what the broker
sends next. The SDK prefetches up to its receiver queue per partition; before
the broker told attached consumers of a seek (`Seeked`), those buffered events
from the old position were handed out after the seek: a seek to latest, made to
skip a backlog, still delivered some 2,000 old events, and a seek back gave old
events first.
Method: one real broker for the module, real SDK consumers; "buffered" is
awaited through DescribeSubscription (events sent and not acknowledged).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from tests.support.broker_process import BrokerProcess

EVENTS = 300


async def topic_with(address: str, topic: str, events: int) -> Producer:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)
    producer = await Producer.create(address, topic)
    futures = [await producer.send(i % 7, b"v%d" % i, partition=0) for i in range(events)]
    await asyncio.gather(*futures)
    return producer


async def sent_unacked(admin: Admin, topic: str, least: int, timeout_s: float = 10.0) -> None:
    """Wait until the broker sent the consumer at least `least` events it did not ack."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await admin.describe_subscription(topic, "s")
        if info.partitions[0].unacked >= least:
            return
        assert time.monotonic() < deadline, f"the consumer was not sent {least} events"
        await asyncio.sleep(0.02)


async def received(consumer: Consumer, idle_s: float = 1.5) -> list[int]:
    """Offsets handed out (and acked) until idle_s passes without one."""
    offsets = []
    while True:
        try:
            message = await consumer.receive(idle_s)
        except TimeoutError:
            return offsets
        offsets.append(message.offset)
        consumer.ack(message)


@pytest.mark.parametrize("kind", ["exclusive", "failover", "key_shared"])
def test_after_a_seek_the_consumer_hands_out_nothing_from_before_it(
        shared_broker: BrokerProcess, kind: str) -> None:
    address = shared_broker.address
    topic = f"seek-buffer-{kind}"

    async def go() -> None:
        producer = await topic_with(address, topic, EVENTS)
        consumer = await Consumer.subscribe(address, topic, "s", type=kind, start="earliest",
                                            receiver_queue_size=100)
        async with Admin(address) as admin:
            for _ in range(5):
                consumer.ack(await consumer.receive(10))
            await sent_unacked(admin, topic, 50)  # buffered in the SDK, from offset 5 on
            await admin.seek(topic, "s", "latest")
            assert await received(consumer) == [], "events from before the seek to latest"
            new = await (await producer.send(1, b"new", partition=0))
            assert await received(consumer) == [new.offset]

            await admin.seek(topic, "s", 3)
            for _ in range(5):  # take a few, so more is buffered behind them again
                consumer.ack(await consumer.receive(10))
            await sent_unacked(admin, topic, 50)
            await admin.seek(topic, "s", 200)
            assert await received(consumer) == list(range(200, EVENTS + 1))
        await consumer.close()
        await producer.close()

    asyncio.run(go())
