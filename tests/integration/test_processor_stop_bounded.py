"""stop() while the Redis ownership store is frozen (SIGSTOPped).

Goal: stop() is bounded and says what it gave up: it closes every partition
("shutdown"), waits at most STOP_STORE_WAIT_S for the cycle under way (then
cancels it) and as long for the release, and returns with one WARNING that
names the partitions not released and when others take them. The old stop()
waited for the cycle and then for the release, each until the store's 5 s
socket timeout, and logged only "event processor error (None): ...".
Method: a real broker process, a real redis-server SIGSTOPped once the
processor owns both partitions and a cycle is waiting on it (0.5 s interval);
the store keeps its default 5 s socket timeout.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path

import pytest

from sdk import Admin
from sdk.processor import EventProcessor
from sdk.processor.release import STOP_STORE_WAIT_S
from sdk.stores import RedisOwnershipStore
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, wait_for
from tests.support.redis_server import RedisServer, redis_unavailable


def test_stop_with_the_ownership_store_frozen_is_bounded_and_says_so(
        shared_broker: BrokerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reason = redis_unavailable()
    if reason is not None:
        pytest.skip(f"REDIS-SERVER UNAVAILABLE, stop test not run: {reason}")
    redis = RedisServer(tmp_path / "redis")
    broker, topic = shared_broker.address, "stop-frozen-store"
    closed: list[str] = []

    async def go() -> float:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=2)
        store = RedisOwnershipStore(redis.url, ttl_ms=EXPIRATION_MS)
        processor = EventProcessor(
            broker, topic, "g", on_event=lambda _c, _b: None, ownership_store=store,
            on_partition_close=lambda _c, why: closed.append(why),
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS)
        await processor.start()
        try:
            await wait_for(lambda: processor.owned_partitions == [0, 1], 15, "both claimed")
            assert redis.process is not None
            redis.process.send_signal(signal.SIGSTOP)
            await asyncio.sleep(INTERVAL_MS / 1000 * 1.5)  # the next cycle waits on Redis
        finally:
            began = time.monotonic()
            await processor.stop()
            took_s = time.monotonic() - began
            await store.close()
        return took_s

    redis.start()
    try:
        with caplog.at_level(logging.INFO, logger="keybus.processor"):
            took_s = asyncio.run(go())
    finally:
        if redis.process is not None and redis.process.poll() is None:
            redis.process.send_signal(signal.SIGCONT)
        redis.stop()
    print(f"stop() took {took_s:.2f} s")
    # the two waits (4 s) and the rest of a stop, with room for a loaded machine; the
    # old code took 9.8 s (5 s of socket timeout twice)
    assert took_s < 2 * STOP_STORE_WAIT_S + 3, f"stop() took {took_s:.1f} s"
    assert closed == ["shutdown", "shutdown"]
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, [r.getMessage() for r in said]
    message = said[0].getMessage()
    assert "stopped without releasing partitions [0, 1]" in message, message
    assert "did not answer" in message and "ownership_expiration_ms" in message, message
