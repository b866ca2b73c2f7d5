"""A commit runs its dispatchers' rounds itself, and leaves to their tasks what needs one.

Goal: following the tail, a commit queues its deliveries before it answers the
producers and before the loop runs anything it had queued (`_round_now`), and a
round that needs the store (a read beyond the partition's recent records, sends
whose records left the cache) or that fails is carried on by the dispatcher's
task: every event still delivered once and in order, a failure still ends the
streams and restarts the dispatcher.
Method: a real RocksDB store in a temp dir, a real topic registry and
subscription manager (no broker process); sessions read from their outboxes as
the Subscribe servicer reads them; every wait bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

import broker.subscription.dispatcher as dispatcher_module
from broker.config import Settings
from broker.subscription.consumer_state import Session
from broker.subscription.dispatcher import PartitionDispatcher
from broker.subscription.manager import SubscriptionManager
from sdk.core.pb import keybus_pb2 as pb
from tests.unit.test_dispatcher_supervision import attach_when_back, ended
from tests.unit.test_dispatcher_wakes import (
    WAIT_S,
    counting_rounds,
    deliveries,
    opened,
    produce,
    subscribe,
    until,
)


def offsets_of(found: list[pb.Delivery]) -> list[int]:
    return [offset for delivery in found for record in delivery.records
            for offset in (list(record.offsets) or
                           range(record.base_offset, record.base_offset + record.batch.count))]


def dispatcher_of(manager: SubscriptionManager) -> PartitionDispatcher:
    return manager._topics["t"]["s"].dispatchers[0]


async def attached(manager: SubscriptionManager, consumer: str) -> Session:
    """A consumer of "s" on "t" with 1,000 permits on partition 0."""
    session = await manager.attach(subscribe(consumer))
    manager.grant(session, pb.Permits(partition=0, count=1000))
    return session


async def settled(dispatcher: PartitionDispatcher) -> None:
    """Until the task waits for a wake with no cursor write in flight to wake it."""
    def quiet() -> bool:
        task = dispatcher._persist_task
        return dispatcher._parked and not dispatcher._wake.is_set() and \
            (task is None or task.done())

    await until(quiet, "the dispatcher never settled")
    await asyncio.sleep(0.02)  # whatever the write's end wakes runs now
    await until(quiet, "the dispatcher never settled")


def test_the_commit_queues_the_delivery_before_the_producer_is_answered(tmp_path: Path) -> None:
    async def body() -> None:
        settings = Settings(cursor_persist_interval_ms=60_000)  # no timer wakes the task
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await attached(manager, "c")
            await produce(registry, [0])
            await deliveries(session, 1)
            dispatcher = dispatcher_of(manager)
            partition = registry.partition("t", 0)
            queued_at_publish: list[int] = []
            publish = partition.publish

            def observed_publish() -> None:
                publish()
                queued_at_publish.append(session.outbox.qsize())

            partition.publish = observed_publish  # type: ignore[method-assign]
            for key in range(1, 6):
                await settled(dispatcher)
                await produce(registry, [key])
                assert queued_at_publish[-1] == 1, queued_at_publish  # before any other step
                assert offsets_of(await deliveries(session, 1)) == [key]

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))


def test_a_read_beyond_the_recent_records_is_left_to_the_task(tmp_path: Path) -> None:
    async def body(rounds: list[int]) -> None:
        settings = Settings(recent_records_bytes_max=0)  # every read goes to the store
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await attached(manager, "c")
            dispatcher = dispatcher_of(manager)
            before = list(rounds)
            got: list[int] = []
            for key in range(20):
                await produce(registry, [key])
                got += offsets_of(await deliveries(session, 1))
            assert got == list(range(20))
            tried_now, in_task = rounds[1] - before[1], rounds[0] - rounds[1] - before[0]
            assert tried_now >= 1 and in_task >= 20, (tried_now, in_task)
            assert dispatcher._deferred_read is None

    with counting_rounds() as rounds:
        asyncio.run(asyncio.wait_for(body(rounds), WAIT_S * 3))


def test_sends_of_records_no_longer_cached_are_left_to_the_task(tmp_path: Path) -> None:
    async def body(rounds: list[int]) -> None:
        settings = Settings(cursor_persist_interval_ms=60_000)
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await attached(manager, "c")
            await produce(registry, [0, 1, 2, 3, 4])
            assert offsets_of(await deliveries(session, 5)) == [0, 1, 2, 3, 4]
            dispatcher = dispatcher_of(manager)
            await settled(dispatcher)
            # given back without a wake, their record gone from the cache: the next
            # commit's round decides to send them again and finds no record to cut
            now = dispatcher_module.now_ms()
            dispatcher.core.process_nack("c", np.array([0], np.int64),
                                         np.array([5], np.int64), now, now)
            dispatcher.cache.clear()
            before = list(rounds)
            await produce(registry, [5])
            found = await deliveries(session, 6)
            assert offsets_of(found) == [0, 1, 2, 3, 4, 5]
            assert list(found[0].redelivery_counts)[:5] == [1] * 5  # sent again
            tried_now, in_task = rounds[1] - before[1], rounds[0] - rounds[1] - before[0] + before[1]
            assert tried_now == 1 and in_task >= 1, (tried_now, in_task)
            assert dispatcher._unsent == []

    with counting_rounds() as rounds:
        asyncio.run(asyncio.wait_for(body(rounds), WAIT_S * 3))


def test_a_failure_in_the_commits_round_restarts_the_dispatcher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        settings = Settings(task_restart_backoff_ms=100, task_restart_backoff_max_ms=400)
        async with opened(tmp_path / "db", settings) as (registry, manager, _):
            session = await attached(manager, "c1")
            await produce(registry, [0])
            await deliveries(session, 1)
            dispatcher = dispatcher_of(manager)
            await settled(dispatcher)
            read_events_in = dispatcher_module.read_events_in
            failures = [1]

            def failing(*args: object, **kwargs: object) -> object:
                if failures[0]:
                    failures[0] -= 1
                    raise RuntimeError("injected round failure")
                return read_events_in(*args, **kwargs)  # type: ignore[arg-type]

            monkeypatch.setattr(dispatcher_module, "read_events_in", failing)
            await produce(registry, [1])  # the producer is answered: the event is stored
            error = await ended(session)
            assert error.code == grpc.StatusCode.UNAVAILABLE
            assert "injected round failure" in error.message
            manager.detach(session)
            began = time.monotonic()
            again = await attach_when_back(manager, "c2")
            assert time.monotonic() - began < WAIT_S
            manager.grant(again, pb.Permits(partition=0, count=1000))
            # the cursor was persisted at 0 or 1: what was not acked comes again, in order
            got = offsets_of(await deliveries(again, 1))
            while got[-1] != 1:
                got += offsets_of(await deliveries(again, 1))
            assert got in ([0, 1], [1]), got

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))
