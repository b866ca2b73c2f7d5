"""A dispatcher wakes for an ack only when the ack may give it work, and never misses one.

Goal: following the tail, an ack message with nothing waiting behind it runs no
round of its own (each ran one before: the costliest part of an ack), while the
cursor an ack changes is still persisted within the persist interval, and an
ack that frees a consumer held at its unacked limit lets the next events go at
once.
Method: a real RocksDB store in a temp dir, a real topic registry and
subscription manager (no broker process); sessions read from their outboxes as
the Subscribe servicer reads them; rounds counted on the dispatcher; every wait
bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import numpy as np

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.subscription.consumer_state import Session
from broker.subscription.cursor import Cursor
from broker.subscription.dispatcher import PartitionDispatcher
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb
from tests.support.managers import subscription_manager
from tests.support.wire import int_batch

WAIT_S = 10.0


def subscribe(consumer: str) -> pb.SubscribeOpen:
    return pb.SubscribeOpen(topic="t", subscription="s", consumer_name=consumer,
                            type=pb.KEY_SHARED, initial_position=pb.StartPosition(earliest=True))


@asynccontextmanager
async def opened(path: Path, settings: Settings
                 ) -> AsyncIterator[tuple[TopicRegistry, SubscriptionManager, RocksStore]]:
    store = RocksStore(str(path), fsync=False)
    try:
        async with subscription_manager(store, settings) as (registry, manager):
            yield registry, manager, store
    finally:
        store.close()


async def produce(registry: TopicRegistry, keys: list[int]) -> None:
    await registry.partition("t", 0).submit(pb.ProduceRequest(topic="t", batch=int_batch(keys)))


async def deliveries(session: Session, events: int) -> list[pb.Delivery]:
    """The deliveries carrying the next `events` events (bounded wait)."""
    found: list[pb.Delivery] = []
    while events > 0:
        message = await asyncio.wait_for(session.outbox.get(), WAIT_S)
        assert message is not None, session.error
        response = pb.SubscribeResponse.FromString(message)
        if response.HasField("delivery"):
            found.append(response.delivery)
            events -= sum(len(r.offsets) or r.batch.count for r in response.delivery.records)
    return found


def acks_of(delivery: pb.Delivery) -> list[pb.Ack]:
    """One Ack per record part, as the SDK's ack_batch makes them (each on its own)."""
    acks = []
    for record in delivery.records:
        offsets = list(record.offsets) or \
            list(range(record.base_offset, record.base_offset + record.batch.count))
        triple = np.array([delivery.send, offsets[0], offsets[-1] + 1], "<i8").tobytes()
        acks.append(pb.Ack(partition=0, sent_ranges=triple))
    return acks


def persisted_mark_delete(store: RocksStore, registry: TopicRegistry) -> int:
    data = store.get_cursor(registry.meta("t").topic_id, 0, "s")
    return -1 if data is None else Cursor.from_bytes(data).mark_delete


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


@contextmanager
def counting_rounds() -> Iterator[list[int]]:
    """Count every dispatcher's rounds while inside: [all of them, those run on the
    partition's task by `_round_now`] (both wrapped, then restored)."""
    rounds = [0, 0]
    real_round, real_round_now = PartitionDispatcher._round, PartitionDispatcher._round_now

    async def counted(self: PartitionDispatcher) -> bool:
        rounds[0] += 1
        return await real_round(self)

    def counted_now(self: PartitionDispatcher) -> bool:
        rounds[0] += 1
        rounds[1] += 1
        return real_round_now(self)

    PartitionDispatcher._round = counted  # type: ignore[method-assign]
    PartitionDispatcher._round_now = counted_now  # type: ignore[method-assign]
    try:
        yield rounds
    finally:
        PartitionDispatcher._round = real_round  # type: ignore[method-assign]
        PartitionDispatcher._round_now = real_round_now  # type: ignore[method-assign]


def test_acks_with_nothing_waiting_run_no_round_and_the_cursor_is_still_saved(
        tmp_path: Path) -> None:
    async def body(rounds: list[int]) -> None:
        settings = Settings(cursor_persist_interval_ms=500)
        async with opened(tmp_path / "db", settings) as (registry, manager, store):
            session = await manager.attach(subscribe("c"))
            manager.grant(session, pb.Permits(partition=0, count=1000))
            for first in range(0, 60, 2):  # 30 records of two events, following the tail
                await produce(registry, [first, first + 1])
            sent = await deliveries(session, 60)
            dispatcher = manager._topics["t"]["s"].dispatchers[0]
            await until(lambda: dispatcher.core.position == 60, "the dispatcher never caught up")
            await asyncio.sleep(0.6)  # the cursor of the deliveries persisted; idle
            before = rounds[0]
            acks = [ack for delivery in sent for ack in acks_of(delivery)]
            for ack in acks:
                manager.ack(session, ack)
                await asyncio.sleep(0)  # a round the ack would run, runs now
            await until(lambda: persisted_mark_delete(store, registry) == 60,
                        "the acknowledged cursor was never persisted")
            # a round for an ack that finds the cursor clean (no persist timer runs) and
            # for the persist timer, a few in all: not one per ack message
            assert len(acks) == 30
            assert rounds[0] - before <= len(acks) // 3, (rounds[0] - before, len(acks))

    with counting_rounds() as rounds:
        asyncio.run(asyncio.wait_for(body(rounds), WAIT_S * 3))


def test_an_ack_below_the_unacked_limit_lets_the_next_events_go(tmp_path: Path) -> None:
    async def body() -> None:
        settings = Settings(consumer_unacked_events_max=3)
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await manager.attach(subscribe("c"))
            manager.grant(session, pb.Permits(partition=0, count=1000))
            for key in range(9):
                await produce(registry, [key])
            received = 0
            while received < 9:  # three at a time: each ack frees room for the next
                sent = await deliveries(session, 3)
                received += sum(len(r.offsets) or r.batch.count
                                for d in sent for r in d.records)
                for delivery in sent:
                    for ack in acks_of(delivery):
                        manager.ack(session, ack)
            assert received == 9

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))


def test_idle_rounds_share_one_timer_moved_only_for_a_sooner_deadline(tmp_path: Path) -> None:
    """Following the tail, rounds idle until the same persist time: they keep one timer
    (a timeout per wait scheduled and cancelled one each round). A nack due sooner moves
    it, and its event comes back on time; stopping cancels it."""
    async def body() -> None:
        settings = Settings(cursor_persist_interval_ms=5_000)
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await manager.attach(subscribe("c"))
            manager.grant(session, pb.Permits(partition=0, count=1000))
            for key in (0, 1):  # the first delivery's cursor is persisted at once
                await produce(registry, [key])
                await deliveries(session, 1)
            dispatcher = manager._topics["t"]["s"].dispatchers[0]
            await until(lambda: dispatcher._timer is not None, "an idle round set no timer")
            timer = dispatcher._timer
            assert timer is not None
            for key in range(2, 12):  # ten commits, ten rounds: the same timer
                await produce(registry, [key])
                await deliveries(session, 1)
                await until(lambda key=key: dispatcher.core.position == key + 1, "no catch-up")
                assert dispatcher._timer is timer
            began = time.monotonic()
            manager.nack(session, pb.Nack(partition=0, ranges=[pb.OffsetRange(start=3, stop=4)],
                                          delay_ms=200))
            await until(lambda: dispatcher._timer is not timer, "the nack kept the late timer")
            assert timer.cancelled()
            (back,) = await deliveries(session, 1)
            record = back.records[0]
            assert (list(record.offsets) or [record.base_offset]) == [3]
            assert list(back.redelivery_counts) == [1]
            assert 0.15 <= time.monotonic() - began < WAIT_S
            late = dispatcher._timer
            await dispatcher.stop(persist=False)
            assert dispatcher._timer is None and (late is None or late.cancelled())

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))


def test_following_the_tail_a_commit_runs_one_round(tmp_path: Path) -> None:
    """A round whose read reaches the durable end idles at once: before, a second round
    ran after each read (tick, dispatch, carry out, ask for a read) to find nothing."""
    async def body(rounds: list[int]) -> None:
        settings = Settings(cursor_persist_interval_ms=60_000)
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await manager.attach(subscribe("c"))
            manager.grant(session, pb.Permits(partition=0, count=1000))
            await produce(registry, [0])  # the first cursor is persisted at once
            await deliveries(session, 1)
            dispatcher = manager._topics["t"]["s"].dispatchers[0]
            await until(lambda: dispatcher.core.position == 1, "no catch-up")
            await asyncio.sleep(0.05)
            before = list(rounds)
            for key in range(1, 11):
                await produce(registry, [key])
                await deliveries(session, 1)
                await until(lambda key=key: dispatcher.core.position == key + 1, "no catch-up")
                await asyncio.sleep(0.01)  # a second round, if one were to run, runs now
            ran = [now - then for now, then in zip(rounds, before, strict=True)]
            # each on the partition's task, in the commit (`_round_now`): none woke the task
            assert ran == [10, 10], ran

    with counting_rounds() as rounds:
        asyncio.run(asyncio.wait_for(body(rounds), WAIT_S * 3))
