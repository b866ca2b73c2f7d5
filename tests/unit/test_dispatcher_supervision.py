"""A subscription dispatcher that fails is reported, restarted, and serves again.

Goal: an unexpected exception in a dispatcher's round ends its consumers'
streams with UNAVAILABLE naming the dispatcher and the cause (not "shutting
down"), refuses new consumers with that status while it waits, restarts from
the persisted cursor after the shared backoff, and a consumer that reconnects
receives every event not acknowledged before the failure; the traceback is
logged once.
Method: a real RocksDB store in a temp dir, a real topic registry and
subscription manager (no broker process), with a RocksStore subclass whose
log reads raise a given number of times (the fault goes in through the
manager's store argument; nothing in the broker knows about it). Sessions are
read from their outboxes as the Subscribe servicer reads them; every wait is
bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.subscription.consumer_state import Session
from broker.subscription.manager import SubscriptionManager
from sdk.core.pb import keybus_pb2 as pb
from tests.support.managers import subscription_manager
from tests.support.wire import events_of, int_batch

WAIT_S = 10.0
R = TypeVar("R", bound=RocksStore)


class FailingReads(RocksStore):
    """Log reads raise `fault` the next `failures` times."""

    fault: Exception = OSError("injected read error")
    failures = 0

    def records_from(self, topic_id: int, partition: int, offset: int) -> Iterator[tuple[int, bytes]]:
        if self.failures > 0:
            self.failures -= 1
            raise self.fault
        return super().records_from(topic_id, partition, offset)


def subscribe(consumer: str) -> pb.SubscribeOpen:
    return pb.SubscribeOpen(topic="t", subscription="s", consumer_name=consumer,
                            type=pb.KEY_SHARED, initial_position=pb.StartPosition(earliest=True))


async def delivered_values(session: Session, count: int) -> list[bytes]:
    """Values of the first `count` events delivered to `session` (bounded wait)."""
    values: list[bytes] = []
    while len(values) < count:
        message = await asyncio.wait_for(session.outbox.get(), WAIT_S)
        assert message is not None, session.error
        response = pb.SubscribeResponse.FromString(message)
        if response.HasField("delivery"):
            values += [value for _, _, value, _ in events_of(response.delivery.records)]
    return values


async def ended(session: Session) -> BrokerError:
    """Read `session` until its stream ends (bounded wait); the status it ends with."""
    while await asyncio.wait_for(session.outbox.get(), WAIT_S) is not None:
        pass
    assert session.error is not None
    return session.error


async def attach_when_back(manager: SubscriptionManager, consumer: str) -> Session:
    """Attach, retrying while the dispatcher refuses with task_failed (as the SDK does)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await manager.attach(subscribe(consumer))
        except BrokerError as e:
            assert e.kind.name == "task_failed", e
            assert time.monotonic() < deadline, "the dispatcher never restarted"
            await asyncio.sleep(0.02)


@asynccontextmanager
async def opened(store: R, backoff_ms: int, events: int
                 ) -> AsyncIterator[tuple[R, SubscriptionManager]]:
    """A registry and manager on `store`, topic "t" (1 partition) holding `events` events."""
    # recent_records off: every dispatcher read goes to the store, where the faults are
    # (otherwise reads of the newest records come from memory: broker/log/recent.py)
    settings = Settings(task_restart_backoff_ms=backoff_ms,
                        task_restart_backoff_max_ms=backoff_ms * 4, recent_records_bytes_max=0)
    try:
        async with subscription_manager(store, settings) as (registry, manager):
            await registry.partition("t", 0).submit(pb.ProduceRequest(
                topic="t", batch=int_batch(list(range(events)))))
            yield store, manager
    finally:
        store.close()


async def scenario(path: Path) -> None:
    async with opened(FailingReads(str(path), fsync=False), 300, 5) as (store, manager):
        store.failures = 1
        first = await manager.attach(subscribe("c1"))
        manager.grant(first, pb.Permits(partition=0, count=100))
        error = await ended(first)
        assert error.code == grpc.StatusCode.UNAVAILABLE
        assert "dispatcher of subscription 's' on 't'/0" in error.message
        assert "injected read error" in error.message
        manager.detach(first)  # the servicer's part once the stream ended

        with pytest.raises(BrokerError) as refused:  # within the backoff: said why
            await manager.attach(subscribe("c2"))
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert "injected read error" in refused.value.message

        second = await attach_when_back(manager, "c2")
        manager.grant(second, pb.Permits(partition=0, count=100))
        assert sorted(await delivered_values(second, 5)) == sorted(b"v%d" % k for k in range(5))
        assert manager._topics["t"]["s"].dispatchers[0].supervision.restarts == 1


def test_a_failed_dispatcher_tells_its_consumers_and_serves_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="keybus.dispatch")
    asyncio.run(asyncio.wait_for(scenario(tmp_path / "db"), WAIT_S * 3))
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1 and "dispatcher t/0/s failed" in tracebacks[0].getMessage()
    assert any("restarted after 1 failure" in r.getMessage() for r in caplog.records)


def test_a_restart_that_fails_again_backs_off_and_retries(tmp_path: Path) -> None:
    """The store still fails when the restart reads the cursor: another failure, not a hang."""

    class FailingCursorReads(FailingReads):
        cursor_failures = 0

        def get_cursor(self, topic_id: int, partition: int, name: str) -> bytes | None:
            if self.cursor_failures > 0:
                self.cursor_failures -= 1
                raise OSError("injected cursor read error")
            return super().get_cursor(topic_id, partition, name)

    async def body() -> None:
        store_used = FailingCursorReads(str(tmp_path / "db"), fsync=False)
        async with opened(store_used, 20, 2) as (store, manager):
            store.failures, store.cursor_failures = 1, 2
            first = await manager.attach(subscribe("c1"))
            manager.grant(first, pb.Permits(partition=0, count=10))
            assert "injected read error" in (await ended(first)).message
            manager.detach(first)
            second = await attach_when_back(manager, "c2")
            assert store.cursor_failures == 0  # both failed restarts happened first
            manager.grant(second, pb.Permits(partition=0, count=10))
            assert sorted(await delivered_values(second, 2)) == [b"v0", b"v1"]

    asyncio.run(asyncio.wait_for(body(), WAIT_S * 3))
