"""A seek whose cursor write fails changes nothing: not the disk, not the deliveries.

Goal: SeekSubscription is all or nothing. It used to move the partitions' cursors
in memory first and then write them; when that write failed, the caller got an
error, yet the cores had moved and were marked dirty: the consumers were sent
the events from the seek's position at once, and the next background cursor
write stored the seek the caller was told had failed.
Method: the real broker in-process (`tests/support/in_process.py`: gRPC on
127.0.0.1, real RocksDB) on a RocksStore subclass whose next cursor write raises
when armed (a status RocksDB could give that is not a disk failure, so the broker
stays up), and which records every cursor write that lands; a real SDK producer,
consumer and admin. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.log.rocks_store import RocksStore
from broker.subscription.cursor import Cursor
from sdk.consumer import Consumer
from sdk.errors import Unavailable
from sdk.producer import Producer
from sdk.subscription_admin import SubscriptionAdmin
from tests.support.in_process import broker_on
from tests.support.receiving import receive_values

PARTITIONS = 2
COUNT = 40
WAIT_S = 20.0
QUIET_S = 1.0  # 20 cursor persist intervals: a moved cursor would be written by then


class FailingCursorWrite(RocksStore):
    """While `failures` > 0, a cursor write raises (and counts it down); every cursor
    write that lands is recorded as the stored mark-deletes of its partitions."""

    failures = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.landed: list[dict[int, int]] = []

    def put_cursors(self, topic_id: int, name: str, cursors: dict[int, bytes]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise Exception("TimedOut: injected cursor write failure")
        super().put_cursors(topic_id, name, cursors)
        self.landed.append({p: Cursor.from_bytes(c).mark_delete for p, c in cursors.items()})

    def stored(self, topic_id: int, name: str) -> list[int]:
        found = [self.get_cursor(topic_id, p, name) for p in range(PARTITIONS)]
        return [-1 if f is None else Cursor.from_bytes(f).mark_delete for f in found]


async def _receive(consumer: Consumer, wanted: set[bytes]) -> None:
    await receive_values(consumer, wanted, WAIT_S, only_wanted=True)


async def _all_acked(admin: SubscriptionAdmin, store: FailingCursorWrite) -> list[int]:
    """Wait until every event is acked, in memory and on disk; the mark-deletes."""
    ends: list[int] = []
    for _ in range(int(WAIT_S / 0.02)):
        info = await admin.describe_subscription("orders", "s")
        ends = [p.mark_delete for p in info.partitions]
        if sum(ends) == COUNT and store.stored(1, "s") == ends:
            return ends
        await asyncio.sleep(0.02)
    raise AssertionError(f"never all acked: {ends} in memory, {store.stored(1, 's')} on disk")


async def _scenario(tmp_path: Path) -> None:
    async with broker_on(tmp_path, FailingCursorWrite, partitions=PARTITIONS) as (address, store):
        producer = await Producer.create(address, "orders", linger_ms=1)
        consumer = await Consumer.subscribe(address, "orders", "s", type="shared",
                                            consumer_name="c1", start="earliest")
        admin = SubscriptionAdmin(address)
        try:
            values = {b"v%d" % key for key in range(COUNT)}
            for key in range(COUNT):
                await producer.send(key, b"v%d" % key)
            await asyncio.wait_for(producer.flush(), WAIT_S)
            await _receive(consumer, values)
            ends = await _all_acked(admin, store)

            store.landed.clear()
            store.failures = 1
            with pytest.raises(Unavailable, match="was not applied"):
                await asyncio.wait_for(admin.seek("orders", "s", "earliest"), WAIT_S)
            assert store.failures == 0  # the fault did fire
            with pytest.raises(TimeoutError):  # nothing is delivered again
                message = await consumer.receive(timeout_s=QUIET_S)
                raise AssertionError(f"{message.value!r} delivered after a failed seek")
            assert all(w == dict(enumerate(ends)) for w in store.landed), (
                f"the failed seek was written later: {store.landed}")
            assert store.stored(1, "s") == ends
            info = await admin.describe_subscription("orders", "s")
            assert [p.mark_delete for p in info.partitions] == ends

            # delivery goes on from where it was
            await producer.send(COUNT, b"v%d" % COUNT)
            await asyncio.wait_for(producer.flush(), WAIT_S)
            await _receive(consumer, {b"v%d" % COUNT})

            # and a seek that writes applies whole
            await asyncio.wait_for(admin.seek("orders", "s", "earliest"), WAIT_S)
            assert store.stored(1, "s") == [0] * PARTITIONS
            await _receive(consumer, values | {b"v%d" % COUNT})
        finally:
            await admin.close()
            await consumer.close()
            await producer.close()


def test_a_seek_whose_write_fails_moves_neither_the_cursor_nor_the_deliveries(
        tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_scenario(tmp_path), WAIT_S * 4))
