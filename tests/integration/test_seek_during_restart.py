"""A dispatcher restarted by supervision while a seek's cursor write is in flight
delivers from the seek's position.

Goal: SeekSubscription either applies fully or fails for its caller. A dispatcher
whose round fails is restarted from the cursor on disk; when the seek's write had not
landed yet (a slow disk, a busy worker pool), the restart read the cursor from before
the seek, the seek still answered OK, and the events it asked to have again were
never delivered. Now the restart waits for cursor writes in flight first.
Method: the real broker (`tests/support/in_process.py`: gRPC on 127.0.0.1, real
RocksDB) on a RocksStore subclass whose cursor writes take 0.5 s while armed and
whose next log read of the partition raises (the round after the seek fails; the
restart backoff is 0.1 s); a real SDK producer, consumer and admin. Every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

from broker.log.rocks_store import RocksStore
from broker.subscription.cursor import Cursor
from sdk.consumer import Consumer
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.in_process import broker_on
from tests.support.receiving import receive_values

WAIT_S = 20.0
COUNT = 40


class SlowCursorsFailingRead(RocksStore):
    """While armed: cursor writes take `slow_s`; the next log read raises once."""

    slow_s = 0.0
    read_failures = 0

    def put_cursors(self, topic_id: int, name: str, cursors: dict[int, bytes]) -> None:
        time.sleep(self.slow_s)  # on a worker thread, as every cursor write
        super().put_cursors(topic_id, name, cursors)

    def records_from(self, topic_id: int, partition: int, offset: int) -> Iterator[tuple[int, bytes]]:
        if self.read_failures > 0:
            self.read_failures -= 1
            raise OSError("injected read error")
        return super().records_from(topic_id, partition, offset)


async def _receive(consumer: Consumer, wanted: set[bytes]) -> None:
    await receive_values(consumer, wanted, WAIT_S)


async def _disk_cursor_at(store: RocksStore, offset: int) -> None:
    """Wait until the subscription's cursor on disk says every event below `offset` is acked."""
    for _ in range(int(WAIT_S / 0.02)):
        data = store.get_cursor(1, 0, "s")
        if data and Cursor.from_bytes(data).mark_delete >= offset:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the cursor on disk never reached {offset}")


async def _scenario(tmp_path: Path) -> None:
    async with broker_on(tmp_path, SlowCursorsFailingRead, partitions=1) as (address, store):
        producer = await Producer.create(address, "orders", linger_ms=1)
        consumer = await Consumer.subscribe(address, "orders", "s", type="exclusive",
                                            consumer_name="c1", start="earliest")
        admin = SubscriptionAdmin(address)
        try:
            values = {b"v%d" % key for key in range(COUNT)}
            for key in range(COUNT):
                await producer.send(key, b"v%d" % key)
            await asyncio.wait_for(producer.flush(), WAIT_S)
            await _receive(consumer, values)
            await _disk_cursor_at(store, COUNT)  # the cursor from before the seek
            store.slow_s, store.read_failures = 0.5, 1
            # the seek's write takes 0.5 s; an event produced meanwhile wakes the round,
            # whose read fails; the restart comes 0.1 s later, while the write is in flight
            seek = asyncio.ensure_future(admin.seek("orders", "s", "earliest"))
            await asyncio.sleep(0.1)
            assert not seek.done()
            await producer.send(COUNT, b"v%d" % COUNT)
            await asyncio.wait_for(producer.flush(), WAIT_S)
            await asyncio.wait_for(seek, WAIT_S)  # answered OK: it must have applied
            assert store.read_failures == 0  # the fault did fire
            store.slow_s = 0.0
            # the seek's events again and the new one (before: only the new one came)
            await _receive(consumer, values | {b"v%d" % COUNT})
        finally:
            await admin.close()
            await consumer.close()
            await producer.close()


def test_a_restart_during_a_seeks_write_delivers_from_the_seek(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(tmp_path), WAIT_S * 3))
