"""Subscription manager: what a refused open leaves, and subscriptions made without a consumer.

Goal: the manager's checks run before anything is created. A consumer's own
requirements (sticky mode needs ranges) refuse the consumer and create
nothing; `ensure` (a relay follower mirroring its upstream, no consumer)
creates any valid subscription, sticky ones too, and stores it (a restart
loads what is stored). A consumer's call (permits, ack) that comes while its
topic is being deleted is refused "topic deleted", as its stream ends (not
"subscription deleted": nobody deleted it). A dead-letter topic that is the subscribed topic (an
endless loop) or a default one too long to create is refused, naming the field.

Method: a real RocksDB store in a temp dir, a real topic registry and
manager, no broker process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb

STICKY = pb.SubscribeOpen(topic="t", subscription="s", consumer_name="c", type=pb.KEY_SHARED,
                          key_shared_mode=pb.STICKY,
                          initial_position=pb.StartPosition(earliest=True))


async def opened(path: Path) -> tuple[RocksStore, TopicRegistry, SubscriptionManager]:
    store = RocksStore(str(path), fsync=False)
    registry = TopicRegistry(store, Settings())
    await registry.open()
    if "t" not in registry.names():
        await registry.create("t", pb.TopicConfig(partitions=2))
    manager = SubscriptionManager(registry, store, Settings(), {})
    await manager.open()
    return store, registry, manager


async def closed(store: RocksStore, registry: TopicRegistry,
                 manager: SubscriptionManager) -> None:
    await manager.close()
    await registry.close()
    store.close()


def test_a_refused_sticky_consumer_creates_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, manager = await opened(tmp_path)
        with pytest.raises(BrokerError, match="no hash range"):
            await manager.attach(STICKY)
        assert manager.list_all("t") == []
        assert store.load_subscriptions(registry.meta("t").topic_id) == []
        await closed(store, registry, manager)

    asyncio.run(body())


def test_ensure_creates_a_sticky_subscription_without_a_consumer(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, manager = await opened(tmp_path)
        assert await manager.ensure(STICKY, created_ms=1) is True
        assert await manager.ensure(STICKY, created_ms=1) is False  # there already
        [info] = manager.list_all("t")
        assert (info.subscription, info.key_shared_mode) == ("s", pb.STICKY)
        assert not any(p.consumers for p in info.partitions)
        with pytest.raises(BrokerError, match="no hash range"):  # a consumer still needs ranges
            await manager.attach(STICKY)
        stored = store.load_subscriptions(registry.meta("t").topic_id)
        assert [raw["name"] for raw in stored] == ["s"]  # a restart finds it
        await closed(store, registry, manager)

    asyncio.run(body())


def test_ensure_refuses_an_invalid_subscription(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, manager = await opened(tmp_path)
        bad = pb.SubscribeOpen(topic="t", subscription="s", type=pb.KEY_SHARED,
                               max_redeliveries=10**6)
        with pytest.raises(BrokerError, match="max_redeliveries"):
            await manager.ensure(bad, created_ms=1)
        assert manager.list_all("t") == []
        await closed(store, registry, manager)

    asyncio.run(body())


def test_a_dead_letter_topic_that_loops_or_cannot_be_named_is_refused(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, manager = await opened(tmp_path)
        await registry.create("t" * 200, pb.TopicConfig(partitions=1))
        refused = [
            (pb.SubscribeOpen(topic="t", subscription="s", consumer_name="c", max_redeliveries=1,
                              dead_letter_topic="t"),
             "dead_letter_topic='t' is the subscribed topic"),
            (pb.SubscribeOpen(topic="t", subscription="s", consumer_name="c",
                              dead_letter_topic="t"),  # no redeliveries yet: still a loop
             "dead_letter_topic='t' is the subscribed topic"),
            (pb.SubscribeOpen(topic="t" * 200, subscription="s" * 100, consumer_name="c",
                              max_redeliveries=1),
             r"default dead-letter topic name <topic>-<subscription>-DLQ would be 305 "
             r"characters, over the limit of 249 .* dead_letter_topic"),
            (pb.SubscribeOpen(topic="t", subscription="s", consumer_name="c", max_redeliveries=1,
                              dead_letter_topic="no spaces"),
             "dead_letter_topic='no spaces' is invalid"),
        ]
        for request, message in refused:
            with pytest.raises(BrokerError, match=message) as caught:
                await manager.attach(request)
            assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert manager.list_all("t") == [] and manager.list_all("t" * 200) == []
        named = pb.SubscribeOpen(topic="t" * 200, subscription="s" * 100, consumer_name="c",
                                 max_redeliveries=1, dead_letter_topic="t-dead")
        session = await manager.attach(named)
        assert manager.spec_of(session).dead_letter_topic == "t-dead"
        await closed(store, registry, manager)

    asyncio.run(body())


def test_a_call_on_a_deleted_topic_is_refused_topic_deleted(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, manager = await opened(tmp_path)
        registry.delete_listeners.append(manager.drop_topic)  # as the broker does
        session = await manager.attach(pb.SubscribeOpen(
            topic="t", subscription="s", consumer_name="c", type=pb.SHARED,
            initial_position=pb.StartPosition(earliest=True)))
        await registry.delete("t")
        with pytest.raises(BrokerError) as caught:  # an ack read before the stream ended
            manager.ack(session, pb.Ack(partition=0, ranges=[pb.OffsetRange(start=0, stop=1)]))
        assert caught.value.kind.name == "topic_deleted"
        assert str(caught.value) == "topic 't' was deleted"
        assert session.error is not None and session.error.kind.name == "topic_deleted"
        await closed(store, registry, manager)

    asyncio.run(body())
