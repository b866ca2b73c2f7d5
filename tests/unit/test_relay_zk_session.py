"""ZkSession.stop: bounded, and it says whether ZooKeeper answered the close.

A fake stands in for the kazoo client (its `stop` plays the state changes
kazoo's connection thread makes, or blocks as kazoo's does with ZooKeeper
paused); the integration test with a paused real ZooKeeper is
tests/integration/test_relay_zookeeper_loss.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest

from broker.relay.zk import ZkSession

SESSION = 0x1234


class FakeClient:
    """kazoo's client as ZkSession uses it when stopping."""

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self.client_id: tuple[int, bytes] | None = (SESSION, b"")
        self.on_stop = on_stop
        self.closed = False

    def stop(self) -> None:
        self.on_stop()

    def close(self) -> None:
        self.closed = True


async def session_with(on_stop: Callable[[ZkSession], None], timeout_ms: int = 2_000
                       ) -> ZkSession:
    session = ZkSession("127.0.0.1:1", timeout_ms, lambda state: None)
    session.client = FakeClient(lambda: on_stop(session))  # type: ignore[assignment]
    session._listener("CONNECTED")  # type: ignore[arg-type]
    await asyncio.sleep(0)
    return session


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_close_zookeeper_answered_is_said_as_closed(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bool:
        # kazoo: CONNECTED -> LOST with nothing between only when the close was answered
        session = await session_with(lambda s: s._listener("LOST"))  # type: ignore[arg-type]
        return await session.stop()

    caplog.set_level(logging.INFO, logger="keybus.zookeeper")
    assert asyncio.run(scenario()) is True
    assert any("session 0x1234 closed" in r.getMessage() for r in caplog.records)
    assert not warnings(caplog)  # the LOST of a close is no warning


def test_a_close_with_the_connection_down_says_the_nodes_stay_until_expiry(
        caplog: pytest.LogCaptureFixture) -> None:
    def drop_then_close(session: ZkSession) -> None:
        session._listener("SUSPENDED")  # type: ignore[arg-type]
        session._listener("LOST")  # type: ignore[arg-type]

    async def scenario() -> bool:
        return await (await session_with(drop_then_close)).stop()

    caplog.set_level(logging.INFO, logger="keybus.zookeeper")
    assert asyncio.run(scenario()) is False
    (said,) = [w for w in warnings(caplog) if "not closed" in w]
    assert "session 0x1234 not closed: the connection was SUSPENDED" in said
    assert "until it expires the session" in said


def test_a_close_that_hangs_is_given_up_after_the_session_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    """kazoo's stop joins its connection thread; with ZooKeeper paused that may outlast
    the bound: stop returns at the bound and says so, the thread left to end (a daemon)."""
    release = threading.Event()

    async def scenario() -> tuple[bool, float]:
        session = await session_with(lambda s: release.wait(30), timeout_ms=300)
        began = time.monotonic()
        closed = await session.stop()
        return closed, time.monotonic() - began

    caplog.set_level(logging.INFO, logger="keybus.zookeeper")
    try:
        closed, took = asyncio.run(scenario())
    finally:
        release.set()
    assert closed is False
    assert took < 2.0, took
    (said,) = [w for w in warnings(caplog) if "not closed" in w]
    assert "ZooKeeper did not answer within zookeeper_session_timeout_ms=300" in said
    assert "(its live nodes and any leader node)" in said


def test_calls_that_hang_leave_the_default_executor_free() -> None:
    """ZooKeeper unanswering: kazoo calls wait about a session timeout each. They run on
    the session's own threads, so the broker's log reads (asyncio's default executor,
    6 threads on 2 cores) go on meanwhile; before, 6 hanging calls held them all."""
    async def body() -> None:
        session = ZkSession("127.0.0.1:1", 2_000, lambda state: None)
        release = threading.Event()
        hanging = [asyncio.ensure_future(session.call(release.wait, 10)) for _ in range(8)]
        try:
            await asyncio.sleep(0.05)  # every call thread taken
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "read"), 2) == "read"
        finally:
            release.set()
            await asyncio.gather(*hanging)
            session.client.close()

    asyncio.run(body())
