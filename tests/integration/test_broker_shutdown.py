"""Ctrl-C on a broker with consumers attached: a quiet, lossless shutdown.

Goal: SIGINT ends the broker with exit 0 and a clean log — no traceback, no
"Task exception was never retrieved", no "topic ... was deleted" (nothing
was), no "created subscription" after "shutting down" — and every
subscription keeps its cursor: a consumer that reconnected while the broker
was closing must not reopen its subscription at "latest" and lose its backlog.
Method: a real broker process; six subscriptions, each with an SDK consumer
that acknowledged 10 of 100 events and reconnects as fast as it can; SIGINT
twice in a row (the race showed in about half the tries); after each
restart every backlog is still what was not acknowledged.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from sdk import Admin, Consumer, Producer
from tests.support.broker_process import BrokerProcess

SUBSCRIPTIONS = [f"s{i}" for i in range(6)]


async def _prepare(address: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic("quiet", 1)
    async with await Producer.create(address, "quiet") as producer:
        for key in range(100):
            await producer.send(key, b"x")
        await producer.flush()


async def _attach(address: str, acked: int) -> list[Consumer]:
    """A consumer per subscription that acknowledges 10 more events (to `acked` in all)."""
    consumers = []
    for name in SUBSCRIPTIONS:
        consumer = await Consumer.subscribe(address, "quiet", name, type="shared",
                                            start="earliest", retry_backoff_ms=1,
                                            retry_backoff_max_ms=5)
        for _ in range(10):
            consumer.ack(await consumer.receive(10))
        await consumer.flush_acks()
        consumers.append(consumer)
    async with Admin(address) as admin:
        deadline = time.monotonic() + 20
        while True:
            infos = await admin.list_subscriptions("quiet")
            if all(i.partitions[0].persisted_mark_delete == acked for i in infos):
                return consumers
            assert time.monotonic() < deadline, "cursors not persisted"
            await asyncio.sleep(0.05)


async def _backlogs(address: str) -> dict[str, int]:
    async with Admin(address) as admin:
        return {i.subscription: i.partitions[0].backlog
                for i in await admin.list_subscriptions("quiet")}


def test_sigint_with_consumers_attached_is_quiet_and_keeps_cursors(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()

    async def cycle(n: int) -> None:
        if n == 0:
            await _prepare(broker.address)
        acked = 10 * (n + 1)
        consumers = await _attach(broker.address, acked)
        assert broker.process is not None
        logged = broker.log_path.read_text()
        broker.process.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(broker.process.wait, 20)
        assert code == 0
        log = broker.log_path.read_text()[len(logged):]
        after = log[log.index("shutting down"):]
        for noise in ("Traceback", "Task exception", "was deleted", "created subscription",
                      "Error"):
            assert noise not in after, log
        assert "stopped" in after
        for consumer in consumers:
            await consumer.close()
        await asyncio.to_thread(broker.start)
        assert await _backlogs(broker.address) == dict.fromkeys(SUBSCRIPTIONS, 100 - acked)

    try:
        for i in range(2):
            asyncio.run(cycle(i))
    finally:
        broker.stop()
