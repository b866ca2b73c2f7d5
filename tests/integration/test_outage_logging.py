"""A lost broker is said once, not once per retry.

Goal: a client that loses its broker says so once (WARNING), retries quietly
(DEBUG) and says once that it is back; a line per retry (one a second at the
capped backoff) buries everything else in an application's log.
Method: a real broker process killed with SIGKILL while a producer has an
event waiting and a consumer is subscribed, left down for a few seconds (the
retries reach their capped backoff), then restarted on the same port and data
directory. Every record of the `keybus` loggers is captured at DEBUG; at
INFO and above, no message template may repeat during the outage.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import Admin, Consumer, Producer
from tests.support.broker_process import BrokerProcess

OUTAGE_S = 5.0


async def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _repeated(records: list[logging.LogRecord]) -> dict[str, int]:
    """Lines said more than once at INFO or above: by logger, level and the message's
    start without digits (a retry's line differs only in times, ports, counts)."""
    counts = collections.Counter(
        f"{r.name} {r.levelname} {''.join(c for c in r.getMessage() if not c.isdigit())[:50]}"
        for r in records if r.levelno >= logging.INFO)
    return {line: n for line, n in counts.items() if n > 1}


def test_an_outage_is_said_once_and_retries_are_quiet(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    caplog.set_level(logging.DEBUG, logger="keybus")

    def said(level: int, text: str) -> bool:
        return any(r.levelno == level and text in r.getMessage() for r in caplog.records)

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("hush", 1)
        consumer = await Consumer.subscribe(broker.address, "hush", "s")
        producer = await Producer.create(broker.address, "hush", delivery_timeout_ms=120_000)
        await (await producer.send(1, b"before"))
        caplog.clear()
        broker.kill()
        waiting = await producer.send(2, b"during")  # the sender retries while it waits
        await asyncio.sleep(OUTAGE_S)
        during = list(caplog.records)
        assert _repeated(during) == {}
        # ... and the retries did happen: logged at DEBUG.
        assert any(r.levelno == logging.DEBUG and "broke" in r.getMessage() for r in during)
        await asyncio.to_thread(broker.start)
        assert (await asyncio.wait_for(waiting, 30)).offset == 1
        await _wait_for(lambda: said(logging.INFO, "producer of topic 'hush': the broker "
                                     f"at {broker.address} answers again after") and said(
            logging.INFO, f"the broker at {broker.address} is back after"), 30, "the return")
        assert said(logging.WARNING, f"producer of topic 'hush' lost the broker at {broker.address}")
        assert said(logging.WARNING, f"lost the broker at {broker.address}")
        assert _repeated(caplog.records) == {}  # the whole outage, return included
        for client in (producer, consumer):
            await client.close()

    try:
        asyncio.run(go())
    finally:
        broker.stop()
