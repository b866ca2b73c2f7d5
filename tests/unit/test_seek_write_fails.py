"""A seek is applied only once its cursor write landed: a failed one moves nothing.

Goal: SeekSubscription is all or nothing. The cores used to move before the
write; a write that failed left them moved and dirty, so consumers were sent the
seek's events and the cursor was written later (by the next background write, or
at the latest when the broker stopped). A consumer attached while the write is in
flight is sent from the position before the seek until it lands, then from the
seek's (a new consumer's attach waits for the write: the manager's create lock).
Method: a real RocksDB store in a temp dir, a real topic registry and subscription
manager (no broker process), on a RocksStore subclass whose next cursor write can
be held (until the test lets it go, bounded) and made to raise. Sessions are read
from their outboxes as the Subscribe servicer reads them; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import numpy as np
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.subscription.consumer_state import Session
from broker.subscription.core import CoreLimits, Kind, PartitionCore
from broker.subscription.cursor import Cursor
from broker.subscription.manager import SubscriptionManager
from broker.subscription.members import MemberSpec
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb
from tests.support.managers import subscription_manager
from tests.support.wire import events_of, int_batch

WAIT_S = 10.0
QUIET_S = 0.3  # six cursor persist intervals
EVENTS = 5
EARLIEST = pb.StartPosition(earliest=True)


class HeldCursorWrite(RocksStore):
    """When armed, the next cursor write to offset 0 (the seek's: the dispatcher's own
    writes say `EVENTS`) waits for `release` (at most `WAIT_S`), then raises if `fail`;
    `started` is set once it waits."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.armed = self.fail = False
        self.started, self.release = threading.Event(), threading.Event()

    def put_cursors(self, topic_id: int, name: str, cursors: dict[int, bytes]) -> None:
        if self.armed and Cursor.from_bytes(cursors[0]).mark_delete == 0:
            self.armed = False
            self.started.set()
            self.release.wait(WAIT_S)
            if self.fail:
                raise Exception("TimedOut: injected cursor write failure")
        super().put_cursors(topic_id, name, cursors)

    def stored_mark_delete(self) -> int | None:
        data = self.get_cursor(1, 0, "s")
        return None if data is None else Cursor.from_bytes(data).mark_delete


def subscribe(consumer: str) -> pb.SubscribeOpen:
    return pb.SubscribeOpen(topic="t", subscription="s", consumer_name=consumer,
                            type=pb.EXCLUSIVE, initial_position=EARLIEST)


async def delivered(session: Session, timeout_s: float = WAIT_S) -> list[int]:
    """The offsets of the next delivery to `session`; [] when none comes in `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (left := deadline - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(session.outbox.get(), left)
        except TimeoutError:
            break
        assert message is not None, session.error
        response = pb.SubscribeResponse.FromString(message)
        if response.HasField("delivery"):
            return [offset for offset, _, _, _ in events_of(response.delivery.records)]
    return []


async def until_stored(store: HeldCursorWrite, mark_delete: int) -> None:
    for _ in range(int(WAIT_S / 0.01)):
        if store.stored_mark_delete() == mark_delete:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"stored {store.stored_mark_delete()}, never {mark_delete}")


@asynccontextmanager
async def all_acked(store: HeldCursorWrite
                    ) -> AsyncIterator[tuple[TopicRegistry, SubscriptionManager, Session]]:
    """Topic "t" with `EVENTS` events, subscription "s" with all of them acked by its
    consumer "c1" (attached, with permits) and that cursor on disk."""
    async with subscription_manager(store, Settings(recent_records_bytes_max=0)) as (
            registry, manager):
        await produce(registry, list(range(EVENTS)))
        session = await manager.attach(subscribe("c1"))
        manager.grant(session, pb.Permits(partition=0, count=100))
        assert await delivered(session) == list(range(EVENTS))
        manager._topics["t"]["s"].dispatchers[0].ack_cumulative("c1", EVENTS)
        await until_stored(store, EVENTS)
        yield registry, manager, session


async def produce(registry: TopicRegistry, keys: list[int]) -> None:
    await registry.partition("t", 0).submit(pb.ProduceRequest(topic="t", batch=int_batch(keys)))


@contextmanager
def held_store(path: Path) -> Iterator[HeldCursorWrite]:
    store = HeldCursorWrite(str(path), fsync=False)
    try:
        yield store
    finally:
        store.close()


def test_the_seek_cursor_is_what_a_seek_leaves() -> None:
    """`seek_together` writes `seek_cursor` before the core moves: it must be what
    the moved core would persist, whatever the core held before."""
    restart = Cursor(2, 9, np.array([4], np.int64), np.array([6], np.int64),
                     np.array([7], np.int64), np.array([8], np.int64))
    for offset in (0, 3, 12):
        core = PartitionCore(Kind.SHARED, 0, 0, CoreLimits(), restart, 0)
        core.process_attach(MemberSpec("a"), 0)
        core.process_seek(offset)
        assert core.snapshot().to_bytes() == PartitionCore.seek_cursor(offset).to_bytes()


def test_a_failed_seek_moves_nothing_even_when_the_broker_stops(tmp_path: Path) -> None:
    async def body() -> None:
        async with all_acked(store) as (_, manager, session):
            store.armed = store.fail = True
            store.release.set()
            with pytest.raises(BrokerError) as failed:
                await manager.seek("t", "s", EARLIEST, [])
            assert failed.value.kind.name == "seek_failed"
            assert "was not applied" in failed.value.message, failed.value.message
            core = manager._topics["t"]["s"].dispatchers[0].core
            assert (core.position, core.mark_delete()) == (EVENTS, EVENTS)
            assert await delivered(session, QUIET_S) == []  # nothing again
        # the manager closed: its dispatchers stopped, writing any dirty cursor
        assert store.stored_mark_delete() == EVENTS

    with held_store(tmp_path / "db") as store:
        asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))


@pytest.mark.parametrize("fail", [True, False])
def test_a_consumer_is_sent_from_the_old_position_until_the_seeks_write_landed(
        tmp_path: Path, fail: bool) -> None:
    async def body() -> None:
        async with all_acked(store) as (registry, manager, session):
            store.armed, store.fail = True, fail
            seek = asyncio.ensure_future(manager.seek("t", "s", EARLIEST, []))
            assert await asyncio.to_thread(store.started.wait, WAIT_S)
            await produce(registry, [EVENTS])  # the write is in flight: delivery goes on
            assert await delivered(session) == [EVENTS]
            assert await delivered(session, QUIET_S) == []
            store.release.set()
            if fail:
                with pytest.raises(BrokerError, match="was not applied"):
                    await asyncio.wait_for(seek, WAIT_S)
                assert await delivered(session, QUIET_S) == []
                assert store.stored_mark_delete() == EVENTS
            else:
                await asyncio.wait_for(seek, WAIT_S)
                assert store.stored_mark_delete() == 0
                got: list[int] = []
                while len(got) < EVENTS + 1:
                    got += await delivered(session)
                assert got == list(range(EVENTS + 1))

    with held_store(tmp_path / "db") as store:
        asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))
