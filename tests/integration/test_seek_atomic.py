"""A seek of several partitions is on disk whole or not at all, and never after a delete.

Goal: SeekSubscription of every partition used to write one cursor per
partition, each awaited in turn; a broker killed between two writes came back
with some partitions moved and the others not (a probe killing the broker
during seeks of 8 partitions saw it within 5 kills). And a seek's write was
not one a stop waits for, so a subscription deleted meanwhile could get a
cursor key back after its keys were deleted.
Method: the real broker in-process (`tests/support/in_process.py`: gRPC on
127.0.0.1, real RocksDB) on a RocksStore subclass that, after every cursor
write, reads back what the store holds for the subscription: what a kill -9
at that moment would find after a restart (every write is in the WAL before it
returns). Real SDK producer and admin. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from broker.log.rocks_store import RocksStore
from broker.subscription.cursor import Cursor
from sdk.admin import Admin
from sdk.consumer import Consumer
from sdk.producer import Producer
from tests.support.in_process import broker_on

PARTITIONS = 6
WAIT_S = 30.0


class CursorWrites(RocksStore):
    """Records, after each cursor write, every partition's stored mark-delete of the
    subscription written; `hold` makes the next write wait until a delete of the
    subscription is stored (or `HOLD_S` passes)."""

    HOLD_S = 5.0

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.states: list[list[int | None]] = []
        self.hold = False
        self.deleted = threading.Event()

    def stored(self, topic_id: int, name: str) -> list[int | None]:
        found = [self.get_cursor(topic_id, p, name) for p in range(PARTITIONS)]
        return [None if f is None else Cursor.from_bytes(f).mark_delete for f in found]

    def put_cursors(self, topic_id: int, name: str, cursors: dict[int, bytes]) -> None:
        if self.hold:
            self.hold = False
            self.deleted.wait(self.HOLD_S)
        super().put_cursors(topic_id, name, cursors)
        self.states.append(self.stored(topic_id, name))

    def delete_subscription(self, topic_id: int, name: str, partitions: int) -> None:
        super().delete_subscription(topic_id, name, partitions)
        self.deleted.set()


async def _filled(address: str) -> list[int]:
    """Events on every partition; the partitions' end offsets."""
    producer = await Producer.create(address, "orders", linger_ms=1)
    for key in range(300):
        await producer.send(key, b"v")
    await asyncio.wait_for(producer.flush(), WAIT_S)
    await producer.close()
    async with Admin(address) as admin:
        ends = [p.end_offset for p in (await admin.describe_topic("orders")).partitions]
    assert all(ends), ends
    return ends


async def _subscribed(address: str) -> None:
    """A subscription at the earliest position, with no consumer left."""
    consumer = await Consumer.subscribe(address, "orders", "s", type="shared", start="earliest")
    await consumer.close()


async def _seek_is_one_write(tmp_path: Path) -> None:
    async with broker_on(tmp_path, CursorWrites, partitions=PARTITIONS) as (address, store):
        ends = await _filled(address)
        await _subscribed(address)
        store.states.clear()
        async with Admin(address) as admin:
            await admin.seek("orders", "s", "latest")
        assert store.states, "the seek wrote no cursor"
        for state in store.states:  # what a kill -9 after each write would find
            assert state in ([0] * PARTITIONS, ends), (
                f"a kill after this write finds the seek half done: {state}; before "
                f"{[0] * PARTITIONS}, after {ends}")
        assert store.states[-1] == ends


def test_a_seek_of_every_partition_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_seek_is_one_write(tmp_path), WAIT_S * 2))


async def _delete_during_seek(tmp_path: Path) -> None:
    async with broker_on(tmp_path, CursorWrites, partitions=PARTITIONS) as (address, store):
        await _filled(address)
        await _subscribed(address)
        topic_id = store.load_topics()[0]["topic_id"]
        async with Admin(address) as admin, Admin(address) as other:
            store.hold = True  # the seek's write waits until the delete is stored
            seek = asyncio.ensure_future(admin.seek("orders", "s", "latest"))
            while store.hold:  # the seek's write has begun
                await asyncio.sleep(0.01)
            await other.delete_subscription("orders", "s", force=True)
            await asyncio.gather(seek, return_exceptions=True)
            assert [s.subscription for s in await other.list_subscriptions("orders")] == []
        assert store.stored(topic_id, "s") == [None] * PARTITIONS, (
            "a seek's cursor write landed after the subscription's delete")


def test_a_seek_write_never_lands_after_the_subscription_is_deleted(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_delete_during_seek(tmp_path), WAIT_S * 2))
