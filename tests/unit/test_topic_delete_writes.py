"""Deleting a topic while store work of it is in flight.

Goal: a topic's delete (`TopicRegistry.delete`) leaves no key of the topic in
any column family, also when a retention trim or an event processor store
round was writing on a worker thread at that moment (the write lands before
the delete, never after it); a retention pass that meets the deleted topic
goes on with the other topics, without an error and without waiting for ever
on a partition that stopped; a producer's requests still queued are answered
"topic deleted" (NOT_FOUND: the producer stops), not "shutting down" (which a
producer retries until its delivery timeout); a processor store command
queued before the delete is refused, not written under the old topic id; and a
subscription created by a consumer's open (or a relay follower's `ensure`)
while the topic is deleted is refused "topic 't' was deleted", and its
settings and cursors, written meanwhile, go with the topic's keys (never
written after them); a topic made again under the name starts without it. A
seek's cursor write (admin, a relay follower's cursor sync) in flight lands
before the delete too, and before a delete of its subscription.

Method: a real RocksStore in a temp dir, a real registry, partitions and
processor stores on an event loop, no broker process; the store call under
test (`trim`, `put_many`) is held on its thread by a gate until the delete has
started (a subscription's `save_subscription` and a seek's `put_cursors`:
until the delete has reached its listeners and ran on for up to a second,
which the old code used to delete the keys first), then released. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import COLUMN_FAMILIES, RocksStore
from broker.processor_stores import rules
from broker.processor_stores.keys import Position
from broker.processor_stores.service import ProcessorStores
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import int_batch

WAIT_S = 5.0


def keys_of(store: RocksStore, topic_id: int) -> dict[str, int]:
    """How many keys of the topic id each column family holds (only those with any)."""
    prefix = topic_id.to_bytes(4, "big")
    found = {family: len(store.scan_prefix(family, prefix))
             for family in COLUMN_FAMILIES if family not in ("meta", "acls")}
    return {family: count for family, count in found.items() if count}


class Gate:
    """Holds a store method on its worker thread until `release`."""

    def __init__(self, store: RocksStore, name: str) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()
        real: Callable[..., Any] = getattr(store, name)

        def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self._open.wait(WAIT_S), f"{name} held longer than {WAIT_S} s"
            return real(*args, **kwargs)
        setattr(store, name, held)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, WAIT_S), "the call never started"

    def release(self) -> None:
        self._open.set()


async def registry_with(path: Path, topics: list[str], fsync: bool = False,
                        ) -> tuple[RocksStore, TopicRegistry]:
    store = RocksStore(str(path), fsync=fsync)
    registry = TopicRegistry(store, Settings(fsync=fsync))
    await registry.open()
    for name in topics:  # a size limit of 1 byte and no view holding it: every pass trims
        await registry.create(name, pb.TopicConfig(partitions=1, retention_bytes=1,
                                                   view=pb.VIEW_OFF))
        for first in range(0, 30, 10):
            await registry.partition(name, 0).submit(pb.ProduceRequest(
                topic=name, batch=int_batch(list(range(first, first + 10)))))
    return store, registry


@pytest.mark.parametrize("deleted", ["the topic being trimmed", "a topic the pass reaches later"])
def test_a_retention_pass_during_a_delete_ends_and_leaves_no_key(tmp_path: Path,
                                                                 deleted: str) -> None:
    async def body() -> None:
        store, registry = await registry_with(tmp_path / "db", ["a", "b"])
        name = "a" if deleted == "the topic being trimmed" else "b"
        topic_id = registry.meta(name).topic_id
        gate = Gate(store, "trim")
        retention = asyncio.create_task(registry.enforce_retention())
        await gate.wait_entered()  # topic a's trim is on its worker thread
        deleting = asyncio.create_task(registry.delete(name))
        await asyncio.sleep(0.1)
        gate.release()
        await asyncio.wait_for(deleting, WAIT_S)
        removed = await asyncio.wait_for(retention, WAIT_S)  # neither raises nor hangs
        assert removed >= 0
        assert keys_of(store, topic_id) == {}, "keys written after the topic's delete"
        assert registry.names() == ["b" if name == "a" else "a"]
        await registry.close()
        store.close()
    asyncio.run(body())


def test_queued_produce_requests_are_answered_topic_deleted(tmp_path: Path) -> None:
    async def body() -> None:
        store = RocksStore(str(tmp_path / "db"), fsync=True)  # requests wait for an fsync
        registry = TopicRegistry(store, Settings(fsync=True))
        await registry.open()
        await registry.create("t", pb.TopicConfig(partitions=1))
        partition = registry.partition("t", 0)
        gate = Gate(store, "sync_wal")  # the WAL's fsync held: nothing is answered stored
        futures = [partition.submit(pb.ProduceRequest(topic="t", batch=int_batch([k])))
                   for k in range(5)]
        await gate.wait_entered()  # the first commit waits for its fsync, the rest queue
        deleting = asyncio.create_task(registry.delete("t"))
        await asyncio.sleep(0.1)
        gate.release()
        await asyncio.wait_for(deleting, WAIT_S)
        kinds = []
        for future in futures:
            with pytest.raises(BrokerError) as caught:
                await asyncio.wait_for(future, WAIT_S)
            kinds.append(caught.value.kind.name)
        assert kinds == ["topic_deleted"] * 5
        assert str(caught.value) == "topic 't' was deleted"
        await registry.close()
        store.close()
    asyncio.run(body())


def test_processor_store_writes_in_flight_or_queued_leave_no_key(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry = await registry_with(tmp_path / "db", ["t"])
        settings = Settings(fsync=False)
        stores = ProcessorStores(store, registry, settings)
        stores.start()
        registry.delete_listeners.append(stores.topic_deleted)  # as the broker does
        topic_id = registry.meta("t").topic_id
        group = stores.group("", "t", "g")
        gate = Gate(store, "put_many")
        writing = asyncio.create_task(stores.claim(group, [rules.Claim(0, "a", "")]))
        await gate.wait_entered()  # the claim's round is on its worker thread
        queued = asyncio.create_task(stores.update_checkpoint(group, 0, Position(5, 0, 0)))
        await asyncio.sleep(0)
        deleting = asyncio.create_task(registry.delete("t"))
        await asyncio.sleep(0.1)
        gate.release()
        await asyncio.wait_for(deleting, WAIT_S)
        assert [o.owner_id for _, o in await asyncio.wait_for(writing, WAIT_S)] == ["a"]
        with pytest.raises(BrokerError, match="topic 't' was deleted"):
            await asyncio.wait_for(queued, WAIT_S)
        assert keys_of(store, topic_id) == {}, "keys written after the topic's delete"
        await registry.create("t", pb.TopicConfig(partitions=1))
        assert stores.list_ownership(stores.group("", "t", "g")) == []
        await stores.close()
        await registry.close()
        store.close()
    asyncio.run(body())


OPEN = pb.SubscribeOpen(topic="t", subscription="s", consumer_name="c", type=pb.SHARED,
                        initial_position=pb.StartPosition(earliest=True))


@pytest.mark.parametrize("how", ["attach", "ensure"])
def test_a_subscription_created_during_a_delete_leaves_no_key(tmp_path: Path, how: str) -> None:
    async def body() -> None:
        store, registry = await registry_with(tmp_path / "db", ["t"])
        manager = SubscriptionManager(registry, store, Settings(fsync=False), {})
        await manager.open()
        listening = asyncio.Event()

        async def reached(topic: str) -> None:
            listening.set()
        registry.delete_listeners += [reached, manager.drop_topic]  # as the broker does
        topic_id = registry.meta("t").topic_id
        gate = Gate(store, "save_subscription")
        creating = asyncio.create_task(manager.attach(OPEN) if how == "attach"
                                       else manager.ensure(OPEN, created_ms=1))
        await gate.wait_entered()  # the new subscription's write is on its worker thread
        queued = asyncio.create_task(manager.attach(pb.SubscribeOpen(
            topic="t", subscription="s2", consumer_name="c", type=pb.SHARED)))
        await asyncio.sleep(0)  # read the topic, waits for the create lock
        deleting = asyncio.create_task(registry.delete("t"))
        await asyncio.wait_for(listening.wait(), WAIT_S)
        await asyncio.wait({deleting}, timeout=1.0)  # the old code deletes the keys here
        gate.release()
        await asyncio.wait_for(deleting, WAIT_S)
        answers = await asyncio.wait_for(
            asyncio.gather(creating, queued, return_exceptions=True), WAIT_S)
        assert keys_of(store, topic_id) == {}, "keys written after the topic's delete"
        assert [str(answer) for answer in answers] == ["topic 't' was deleted"] * 2
        assert all(isinstance(answer, BrokerError) for answer in answers)
        await registry.create("t", pb.TopicConfig(partitions=1))
        assert manager.list_all("t") == [], "the old topic's subscription in the new one"
        await manager.close()
        await registry.close()
        store.close()
    asyncio.run(body())


def test_a_seek_during_a_delete_leaves_no_key(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry = await registry_with(tmp_path / "db", ["t"])
        manager = SubscriptionManager(registry, store, Settings(fsync=False), {})
        await manager.open()
        listening = asyncio.Event()

        async def reached(topic: str) -> None:
            listening.set()
        registry.delete_listeners += [reached, manager.drop_topic]  # as the broker does
        topic_id = registry.meta("t").topic_id
        await manager.ensure(OPEN, created_ms=1)
        gate = Gate(store, "put_cursors")
        seeking = asyncio.create_task(manager.seek("t", "s", pb.StartPosition(offset=5), []))
        await gate.wait_entered()  # the cursor's write is on its worker thread
        deleting = asyncio.create_task(registry.delete("t"))
        await asyncio.wait_for(listening.wait(), WAIT_S)
        await asyncio.wait({deleting}, timeout=1.0)  # the old code deletes the keys here
        gate.release()
        await asyncio.wait_for(deleting, WAIT_S)
        await asyncio.wait_for(asyncio.gather(seeking, return_exceptions=True), WAIT_S)
        assert keys_of(store, topic_id) == {}, "keys written after the topic's delete"
        await manager.close()
        await registry.close()
        store.close()
    asyncio.run(body())


def test_a_seek_during_a_subscription_delete_leaves_no_cursor(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry = await registry_with(tmp_path / "db", ["t"])
        manager = SubscriptionManager(registry, store, Settings(fsync=False), {})
        await manager.open()
        topic_id = registry.meta("t").topic_id
        await manager.ensure(OPEN, created_ms=1)
        gate = Gate(store, "put_cursors")
        seeking = asyncio.create_task(manager.seek("t", "s", pb.StartPosition(offset=5), []))
        await gate.wait_entered()  # the cursor's write is on its worker thread
        deleting = asyncio.create_task(manager.delete("t", "s", force=True))
        await asyncio.wait({deleting}, timeout=1.0)  # the old code deletes the keys here
        gate.release()
        await asyncio.wait_for(deleting, WAIT_S)
        await asyncio.wait_for(asyncio.gather(seeking, return_exceptions=True), WAIT_S)
        assert "cursors" not in keys_of(store, topic_id), "a cursor written after the delete"
        await manager.close()
        await registry.close()
        store.close()
    asyncio.run(body())
