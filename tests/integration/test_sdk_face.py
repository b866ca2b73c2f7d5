"""One SDK, one spelling: the faces a user meets first.

Goal: the start position is `start` on Reader, TopicReader and Consumer (the
old `initial_position` still works, with a DeprecationWarning); an unknown
consumer setting names the allowed ones instead of a raw TypeError, and
`async with Consumer(...)` attaches as `async with Reader(...)` reads; the sync
classes are complete twins (SyncProducer.create, SyncConsumer.subscribe,
SyncAdmin's subscription methods, SyncTopicReader); TopicReader reads every
partition merged.
Method: a real broker process; the SDK as a user calls it.
"""

from __future__ import annotations

import asyncio
import warnings

import pytest

from sdk import (
    Admin,
    Consumer,
    ConsumerConfig,
    KeybusError,
    Producer,
    SyncAdmin,
    SyncConsumer,
    SyncProducer,
    SyncTopicReader,
    TopicReader,
)
from tests.support.broker_process import BrokerProcess


async def _topic(address: str, name: str, partitions: int, keys: list[int]) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(name, partitions)
    async with await Producer.create(address, name) as producer:
        for key in keys:
            await producer.send(key, f"v{key}".encode(), partition=key % partitions)
        await producer.flush()


def test_topic_reader_reads_every_partition(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await _topic(shared_broker.address, "face-merged", 3, list(range(30)))
        async with TopicReader(shared_broker.address, "face-merged") as reader:
            seen = [(e.partition, e.offset, e.key) async for b in reader for e in b.events()]
        assert sorted(k for _, _, k in seen) == list(range(30))
        for partition in range(3):  # order within a partition holds
            offsets = [o for p, o, _ in seen if p == partition]
            assert offsets == sorted(offsets) == list(range(10))
        async with TopicReader(shared_broker.address, "face-merged", [1], start=5) as reader:
            assert [e.key async for b in reader for e in b.events()] == [16, 19, 22, 25, 28]
        with pytest.raises(ValueError, match="is an offset, a position in one partition"):
            TopicReader(shared_broker.address, "face-merged", start=5)

    asyncio.run(go())


def test_consumer_start_is_spelled_as_readers(shared_broker: BrokerProcess) -> None:
    async def go() -> None:
        await _topic(shared_broker.address, "face-start", 1, [1, 2, 3])
        consumer = await Consumer.subscribe(shared_broker.address, "face-start", "new",
                                            start="earliest")
        assert [(await consumer.receive(10)).key for _ in range(3)] == [1, 2, 3]
        await consumer.close()
        with pytest.warns(DeprecationWarning, match="is now start="):
            old = await Consumer.subscribe(shared_broker.address, "face-start", "old",
                                           initial_position="earliest")
        assert (await old.receive(10)).key == 1
        await old.close()
        with pytest.raises(ValueError, match=r"unknown consumer setting\(s\) colour; allowed: "
                                             r"type, mode, ranges, start,"):
            await Consumer.subscribe(shared_broker.address, "face-start", "x", colour="red")
        # Constructed as a Reader is, the consumer attaches when entered.
        async with Consumer(shared_broker.address, "face-start", "ctor", start="earliest") as c:
            assert (await c.receive(10)).key == 1
        idle = Consumer(shared_broker.address, "face-start", "idle")
        with pytest.raises(KeybusError, match=r"not attached: use `await Consumer\.subscribe"):
            await idle.receive(1)
        await idle.close()

    asyncio.run(go())
    assert ConsumerConfig(start=7).start == 7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert ConsumerConfig(initial_position="earliest").start == "earliest"


def test_sync_faces_are_complete_twins(shared_broker: BrokerProcess) -> None:
    address = shared_broker.address
    with SyncAdmin(address) as admin:
        admin.create_topic("face-sync", 2)
    with SyncProducer.create(address, "face-sync") as producer:
        stored = [producer.send(k, b"x", partition=k % 2) for k in range(6)]
        producer.flush()
        assert sorted((f.result().partition, f.result().offset) for f in stored) == [
            (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    with SyncTopicReader(address, "face-sync") as reader:
        assert sorted(k for batch in reader for k in batch.keys()) == list(range(6))  # noqa: SIM118
    with SyncConsumer.subscribe(address, "face-sync", "sync-sub", start="earliest") as consumer:
        first = consumer.receive(10)
        consumer.ack(first)
        consumer.flush_acks()
    with SyncAdmin(address) as admin:
        assert [s.subscription for s in admin.list_subscriptions("face-sync")] == ["sync-sub"]
        assert admin.describe_subscription("face-sync", "sync-sub").subscription == "sync-sub"
        seeked = admin.seek("face-sync", "sync-sub", "earliest")
        assert [p.mark_delete for p in seeked.partitions] == [0, 0]
        admin.delete_subscription("face-sync", "sync-sub")
        assert admin.list_subscriptions("face-sync") == []
