"""What a consumer hands out after a seek of its subscription.

Goal: a seek moves what the application receives, not only what the broker
sends next. The SDK prefetches up to its receiver queue per partition; before
the broker told attached consumers of a seek (`Seeked`), those buffered events
from the old position were handed out after the seek: a seek to latest, made to
skip a backlog, still delivered some 2,000 old events, and a seek back gave old
events first.
Method: one real broker for the module, real SDK consumers; "buffered" is
awaited through DescribeSubscription (events sent and not acknowledged). The
seek is an admin's call on another connection: it returns before the notice
reaches the consumer (12 ms later on a loaded machine), and what the consumer
hands out meanwhile is from before the seek, as with Pulsar's admin reset. So
the test waits until the consumer has handled the notice before it receives.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.core.pb import keybus_pb2 as pb
from sdk.producer import Producer
from tests.support.broker_process import BrokerProcess
from tests.support.receiving import received_until_idle

EVENTS = 300
IDLE_S = 1.5  # no event for this long: the consumer was handed all it gets
NOTICE_WITHIN_S = 10.0  # liveness bound for the notice, not a speed claim


async def topic_with(address: str, topic: str, events: int) -> Producer:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)
    producer = await Producer.create(address, topic)
    futures = [await producer.send(i % 7, b"v%d" % i, partition=0) for i in range(events)]
    await asyncio.gather(*futures)
    return producer


def seek_notices(consumer: Consumer) -> asyncio.Queue[int]:
    """The offsets of the `Seeked` notices the consumer handles, in order (its
    handling of each response wrapped; the consumer's own code runs unchanged)."""
    notices: asyncio.Queue[int] = asyncio.Queue()
    handle = consumer._handle

    def handled(response: pb.SubscribeResponse) -> None:
        handle(response)
        if response.WhichOneof("body") == "seeked":
            notices.put_nowait(response.seeked.offset)

    consumer._handle = handled  # type: ignore[method-assign]
    return notices


async def seek(admin: Admin, topic: str, to: int | str, notices: asyncio.Queue[int]) -> None:
    """Seek, and wait until the consumer handled the broker's notice of it."""
    await admin.seek(topic, "s", to)
    await asyncio.wait_for(notices.get(), NOTICE_WITHIN_S)


async def sent_unacked(admin: Admin, topic: str, least: int, timeout_s: float = 10.0) -> None:
    """Wait until the broker sent the consumer at least `least` events it did not ack."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await admin.describe_subscription(topic, "s")
        if info.partitions[0].unacked >= least:
            return
        assert time.monotonic() < deadline, f"the consumer was not sent {least} events"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("kind", ["exclusive", "failover", "key_shared"])
def test_after_a_seek_the_consumer_hands_out_nothing_from_before_it(
        shared_broker: BrokerProcess, kind: str) -> None:
    address = shared_broker.address
    topic = f"seek-buffer-{kind}"

    async def go() -> None:
        producer = await topic_with(address, topic, EVENTS)
        consumer = await Consumer.subscribe(address, topic, "s", type=kind, start="earliest",
                                            receiver_queue_size=100)
        notices = seek_notices(consumer)
        async with Admin(address) as admin:
            for _ in range(5):
                consumer.ack(await consumer.receive(10))
            await sent_unacked(admin, topic, 50)  # buffered in the SDK, from offset 5 on
            await seek(admin, topic, "latest", notices)
            assert await received_until_idle(consumer, IDLE_S) == [], "events from before the seek to latest"
            new = await (await producer.send(1, b"new", partition=0))
            assert await received_until_idle(consumer, IDLE_S) == [new.offset]

            await seek(admin, topic, 3, notices)
            for _ in range(5):  # take a few, so more is buffered behind them again
                consumer.ack(await consumer.receive(10))
            await sent_unacked(admin, topic, 50)
            await seek(admin, topic, 200, notices)
            assert await received_until_idle(consumer, IDLE_S) == list(range(200, EVENTS + 1))
        await consumer.close()
        await producer.close()

    asyncio.run(go())
