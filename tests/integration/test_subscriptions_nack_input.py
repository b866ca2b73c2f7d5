"""A nack given a delay the wire cannot carry.

Goal: such a nack (negative, not an int, past 2**32-1) is refused at the call,
naming what is allowed, and the consumer goes on. Before, it was taken silently
and then broke the consumer's background flush (protobuf's "Value out of
range" ended that task): no ack, nack or permit left the consumer again, so it
stopped receiving without an error.
Method: one real broker for the module, a real SDK consumer.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from tests.support.broker_process import BrokerProcess
from tests.support.receiving import received_until_idle


async def topic_with(address: str, topic: str, events: int) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, partitions=1)
    producer = await Producer.create(address, topic)
    await asyncio.gather(*[await producer.send(i, b"v", partition=0) for i in range(events)])
    await producer.close()


def test_a_nack_delay_the_wire_cannot_carry_is_refused_and_the_consumer_goes_on(
        shared_broker: BrokerProcess) -> None:
    address = shared_broker.address
    topic = "nack-bad-delay"

    async def go() -> None:
        await topic_with(address, topic, 30)
        consumer = await Consumer.subscribe(address, topic, "s", type="shared", start="earliest",
                                            receiver_queue_size=4)
        first = await consumer.receive(10)
        for bad in (-5, "10", 1.5, 1 << 32):
            with pytest.raises(ValueError, match=r"delay_ms=.* is invalid: need an int 0\.\."):
                consumer.nack(first, delay_ms=bad)  # type: ignore[arg-type]
        consumer.nack(first, delay_ms=1)
        got = await received_until_idle(consumer, idle_s=3.0)
        assert sorted(got) == list(range(30)), "the consumer stopped after a refused nack"
        await consumer.close()

    asyncio.run(go())


def test_the_sync_consumer_refuses_it_in_the_caller_thread(shared_broker: BrokerProcess) -> None:
    # SyncConsumer.nack hands the nack to its loop thread; a delay past 2**32-1 was
    # refused there, and the error lost: the caller saw nothing.
    from sdk.sync_consumer import SyncConsumer

    address = shared_broker.address
    topic = "nack-bad-delay-sync"
    asyncio.run(topic_with(address, topic, 3))
    consumer = SyncConsumer.subscribe(address, topic, "s", type="shared", start="earliest")
    try:
        first = consumer.receive(10)
        for bad in (1 << 32, -1, 1.5):
            with pytest.raises(ValueError, match=r"delay_ms=.* is invalid: need an int 0\.\."):
                consumer.nack(first, delay_ms=bad)  # type: ignore[arg-type]
        consumer.ack(first)
    finally:
        consumer.close()


def test_an_ack_of_offsets_the_wire_cannot_carry_is_refused_and_the_consumer_goes_on(
        shared_broker: BrokerProcess) -> None:
    # Before: -1 was sent and the broker ended the stream for it (the consumer failed
    # with InvalidArgument), 1.5 acknowledged offset 1, 2**64 said "Python int too
    # large to convert to C long", and a partition not the consumer's was sent too.
    address = shared_broker.address
    topic = "ack-bad-offsets"

    async def go() -> None:
        await topic_with(address, topic, 20)
        consumer = await Consumer.subscribe(address, topic, "s", type="shared", start="earliest",
                                            receiver_queue_size=4)
        first = await consumer.receive(10)
        for bad in (-1, 1.5, 2**64, "3", True):
            with pytest.raises(ValueError, match=r"offset .* is invalid; offsets are ints 0\.\."):
                consumer.ack_offsets(0, [bad])  # type: ignore[list-item]
        for partition in (1, -1, "0"):
            with pytest.raises(ValueError, match=r"partition=.* is invalid; use one of this "
                                                 r"consumer's partitions \[0\]"):
                consumer.ack_offsets(partition, [0])  # type: ignore[arg-type]
        consumer.ack(first)
        got = await received_until_idle(consumer, idle_s=3.0)
        assert sorted([first.offset, *got]) == list(range(20)), "the consumer stopped"
        await consumer.close()

    asyncio.run(go())
