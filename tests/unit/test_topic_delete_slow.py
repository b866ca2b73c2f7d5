"""A DeleteTopic answers within `topic_delete_wait_ms`, whatever its delete waits for.

Goal: a delete whose step does not end (here a delete listener held by a test
gate: the same place a view maintainer that kept running after its stop held
it, tests/unit/test_view_stop_race.py) is answered UNAVAILABLE
`topic_delete_slow` naming the step, within the bound, never left waiting; the
topic is refused as not existing at once, a create under its name is refused
"still being deleted" (its name's key is not deleted yet), a second delete waits
for the same one; once the step ends the delete finishes in the broker and
leaves no key. A caller that gives up (the client's deadline cancels the call)
does not stop the delete half way: before, the cancel reached the delete, which
left the topic out of the registry with its keys in the store.

Method: a real RocksStore in a temp dir and a real registry on an event loop, no
broker process; every wait bounded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import int_batch

WAIT_MS = 300
BOUND_S = 5.0  # the answer comes after WAIT_MS; the old code never answered


class HeldListener:
    """A delete listener that returns only once released."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    async def topic_deleted(self, topic: str) -> None:
        self.reached.set()
        await self.released.wait()


async def registry_with_topic(path: Path) -> tuple[RocksStore, TopicRegistry, int]:
    store = RocksStore(str(path), fsync=False)
    registry = TopicRegistry(store, Settings(fsync=False, topic_delete_wait_ms=WAIT_MS))
    await registry.open()
    await registry.create("t", pb.TopicConfig(partitions=1))
    await registry.partition("t", 0).submit(pb.ProduceRequest(
        topic="t", batch=int_batch(list(range(10)))))
    return store, registry, registry.meta("t").topic_id


def log_keys(store: RocksStore, topic_id: int) -> int:
    return len(store.scan_prefix("log", topic_id.to_bytes(4, "big")))


async def refused(call: asyncio.Future[None] | asyncio.Task[None]) -> BrokerError:
    done, _ = await asyncio.wait([call], timeout=BOUND_S)
    assert done, f"no answer within {BOUND_S} s"
    error = call.exception()
    assert isinstance(error, BrokerError), error
    return error


def test_a_delete_held_by_a_step_is_answered_within_the_bound(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, topic_id = await registry_with_topic(tmp_path / "db")
        held = HeldListener()
        registry.delete_listeners.append(held.topic_deleted)
        slow = await refused(asyncio.create_task(registry.delete("t")))
        assert slow.kind.name == "topic_delete_slow"
        assert slow.kind.code == grpc.StatusCode.UNAVAILABLE
        assert str(slow) == (
            f"deleting topic 't' takes longer than {WAIT_MS} ms (it waits for the delete "
            "listener HeldListener.topic_deleted); the delete goes on in the broker: the "
            "topic is refused as not existing already, and asking to delete it again waits "
            "for the same delete")
        with pytest.raises(BrokerError, match="topic 't' does not exist"):
            registry.meta("t")
        again = await refused(asyncio.create_task(
            registry.create("t", pb.TopicConfig(partitions=1))))
        assert str(again) == ("topic 't' is still being deleted (it waits for the delete "
                              "listener HeldListener.topic_deleted); create it again once the "
                              "delete is done")
        second = asyncio.create_task(registry.delete("t"))  # joins the delete in progress
        await asyncio.sleep(0.05)
        held.released.set()
        done, _ = await asyncio.wait([second], timeout=BOUND_S)
        assert done and second.exception() is None
        assert log_keys(store, topic_id) == 0
        gone = await refused(asyncio.create_task(registry.delete("t")))
        assert gone.kind.name == "topic_not_found_to_delete"
        await registry.create("t", pb.TopicConfig(partitions=1))
        await registry.close()
        store.close()
    asyncio.run(body())


def test_a_caller_that_gives_up_does_not_stop_the_delete_half_way(tmp_path: Path) -> None:
    async def body() -> None:
        store, registry, topic_id = await registry_with_topic(tmp_path / "db")
        held = HeldListener()
        registry.delete_listeners.append(held.topic_deleted)
        deleting = asyncio.create_task(registry.delete("t"))
        async with asyncio.timeout(BOUND_S):
            await held.reached.wait()
        deleting.cancel()  # the client's deadline passed: grpc cancels the call
        await asyncio.wait([deleting], timeout=BOUND_S)
        held.released.set()
        for _ in range(int(BOUND_S / 0.01)):  # the delete finishes in the broker
            await asyncio.sleep(0.01)
            if log_keys(store, topic_id) == 0:
                break
        assert log_keys(store, topic_id) == 0, "a cancelled delete left the topic's keys"
        assert store.load_topics() == []
        await registry.close()
        store.close()
    asyncio.run(body())


def test_a_stop_waits_for_a_delete_then_cancels_it_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A registry closing while a delete is held lets it run for the bound, then
    cancels it and says the topic is back after a restart (its keys are kept)."""
    async def body() -> None:
        store, registry, topic_id = await registry_with_topic(tmp_path / "db")
        held = HeldListener()
        registry.delete_listeners.append(held.topic_deleted)
        await refused(asyncio.create_task(registry.delete("t")))
        async with asyncio.timeout(BOUND_S):
            await registry.close()
        assert log_keys(store, topic_id) > 0  # cancelled before its keys went
        store.close()

    with caplog.at_level("WARNING", logger="keybus.topics"):
        asyncio.run(body())
    assert "stopping before the delete of topic t finished (it waits for the delete " \
           "listener HeldListener.topic_deleted): the topic is back after a restart" \
           in caplog.text, caplog.text
