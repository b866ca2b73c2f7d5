"""An event processor says a lost broker once, what it means, and its return once.

Goal: a processor whose broker is killed saw it three ways, each said at
WARNING: every partition's reader ("lost the broker", once per partition),
the balancing cycle ("balancing failed") and, past the expiration, its
claims ("the claims of partitions ... lapsed"). Now one WARNING names the
broker and says what becomes of the partitions (they run on until their
claims lapse, then close, and are balanced again once it is back); the rest
is DEBUG (the partitions' "closed ... ownership_lost" lines too); one INFO
says it is back, how long, and which claims lapsed meanwhile. With the
ownership in Redis the same holds (the cycle needs the broker as well). A
Redis ownership store down while the broker answers is another outage: it
is still said at WARNING, with Redis's words, and nothing of a lost broker.
Method: one processor in this process (0.5 s interval, 2 s expiration), a
real broker process SIGKILLed for 5 s (past the expiration) and restarted on
the same port and data directory, real redis-server processes; every
`keybus` record is captured at DEBUG and counted; waits are bounded.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from sdk import Admin
from sdk.processor import EventProcessor
from tests.support.broker_process import BrokerProcess
from tests.support.processors import (
    EXPIRATION_MS,
    INTERVAL_MS,
    OWNERSHIP_KINDS,
    ownership_store,
    redis_server,  # noqa: F401
    wait_for,
)
from tests.support.redis_server import RedisServer, redis_unavailable

OUTAGE_S = 5.0  # past EXPIRATION_MS: the claims lapse
PARTITIONS = 2


def _records(records: list[logging.LogRecord], level: int) -> list[str]:
    """The `keybus` log lines at exactly that level."""
    return [r.getMessage() for r in records
            if r.name.startswith("keybus") and r.levelno == level]


async def _owns_all(processor: EventProcessor) -> None:
    await wait_for(lambda: processor.owned_partitions == list(range(PARTITIONS)), 60,
                   "the processor owns every partition",
                   state=lambda: f"owns {processor.owned_partitions}")


async def _reads_all(initialized: set[int]) -> None:
    """Every partition past on_partition_initialize: its reader is the one that
    sees the broker go. Owned is not enough on a loaded machine: a partition
    still reading its checkpoint when the broker is killed fails its start
    instead (said per partition, a case of its own)."""
    await wait_for(lambda: initialized == set(range(PARTITIONS)), 60,
                   "every partition is initialized", state=lambda: f"{sorted(initialized)}")


@pytest.mark.parametrize("kind", OWNERSHIP_KINDS)
def test_a_lost_broker_is_one_warning_and_its_return_one_info(
        tmp_path: Path, redis_server: RedisServer,  # noqa: F811
        caplog: pytest.LogCaptureFixture, kind: str) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    caplog.set_level(logging.DEBUG, logger="keybus")
    outage: list[logging.LogRecord] = []  # from the kill to the return said

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("away", PARTITIONS)
        store = ownership_store(kind, broker.address, redis_server)
        initialized: set[int] = set()
        processor = EventProcessor(broker.address, "away", "g", on_event=lambda c, b: None,
                                   on_partition_initialize=lambda c: initialized.add(c.partition),
                                   ownership_store=store, load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        async with processor:
            await _owns_all(processor)
            await _reads_all(initialized)
            caplog.clear()
            await asyncio.to_thread(broker.kill)
            await wait_for(lambda: processor.owned_partitions == [], 30,
                           "the claims lapse while the broker is away")
            await asyncio.sleep(max(0.0, OUTAGE_S - EXPIRATION_MS / 1000))
            await asyncio.to_thread(broker.start)
            await _owns_all(processor)
            await wait_for(lambda: bool(_records(caplog.records, logging.INFO)), 30,
                           "the return said")
            outage.extend(caplog.records)  # not the stop's lines
        await store.close()

    try:
        asyncio.run(go())
    finally:
        broker.stop()
    prefix = f"event processor away/g: lost the broker at {broker.address} ("
    warnings = _records(outage, logging.WARNING) + _records(outage, logging.ERROR)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(prefix), warnings
    assert (". Partitions [0, 1] run on until their claims lapse (no renewal without the "
            f"broker; ownership_expiration_ms={EXPIRATION_MS}), then close and are balanced "
            "again once it is back; said again only when it is back") in warnings[0]
    infos = _records(outage, logging.INFO)
    assert len(infos) == 1, infos
    assert infos[0].startswith(f"event processor away/g: the broker at {broker.address} is "
                               "back after "), infos
    assert "the claims of partitions [0, 1] lapsed and they closed; they are balanced " \
           "again now)" in infos[0]
    debug = _records(outage, logging.DEBUG)
    # what was said before at WARNING and INFO happened, and is DEBUG now
    assert any("lapsed while the broker" in line for line in debug), debug
    assert sum(line.endswith(": ownership_lost") for line in debug) == PARTITIONS, debug


def test_a_redis_store_down_while_the_broker_answers_is_still_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reason = redis_unavailable()
    if reason is not None:
        pytest.skip(f"REDIS-SERVER UNAVAILABLE, Redis ownership tests not run: {reason}")
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    caplog.set_level(logging.DEBUG, logger="keybus")

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("redis-away", PARTITIONS)
        store = ownership_store("redis", broker.address, redis)
        processor = EventProcessor(broker.address, "redis-away", "g", on_event=lambda c, b: None,
                                   ownership_store=store, load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        async with processor:
            await _owns_all(processor)
            caplog.clear()
            await asyncio.to_thread(redis.kill)
            await wait_for(lambda: processor.owned_partitions == [], 30,
                           "the claims lapse while Redis is away")
            await asyncio.to_thread(redis.start)
            await _owns_all(processor)
        await store.close()

    try:
        asyncio.run(go())
    finally:
        redis.stop()
        broker.stop()
    warnings = _records(caplog.records, logging.WARNING)
    assert any(line.startswith("event processor redis-away/g: balancing failed (")
               for line in warnings), warnings
    assert any("the claims of partitions [0, 1] lapsed" in line for line in warnings), warnings
    infos = _records(caplog.records, logging.INFO)
    assert not [line for line in warnings + infos
                if "lost the broker" in line or ("broker at" in line and "is back" in line)]
    assert any("balancing works again" in line for line in infos), infos
