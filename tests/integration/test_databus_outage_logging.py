"""A Databus registration says a lost broker once, and its return once.

Goal: a registration reads over one channel through several streams (a
Reader per partition, or a Consumer) and watches that channel; a killed
broker ends them all at once. The log must say that outage once (WARNING)
and its end once (INFO), the other streams' and the watch's reports at
DEBUG; before, each partition's reader, the consumer and the watch each
said both (up to three WARNINGs and three INFOs for one outage of a
two-partition topic). The consumers' on_error still hears of the outage.
Method: a real broker process, a topic of two partitions with a window in
each; the registration (log reads, then a Key_Shared subscription) gets its
windows, the broker is SIGKILLed for a few seconds (past
unavailable_report_ms, so the watch reports too), restarted on the same port
and data directory, and a window produced after it must arrive. Every
`keybus` record is captured at DEBUG and counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import Admin, Producer, Unavailable
from sdk.consumer import ConsumerConfig
from sdk.databus import DatabusClient, DatabusConfig, DatabusConsumerBase, Scn
from tests.support.broker_process import BrokerProcess

OUTAGE_S = 4.0


class Counting(DatabusConsumerBase):
    def __init__(self) -> None:
        self.windows = 0
        self.errors: list[Exception] = []

    def on_end_window(self, scn: Scn) -> None:
        self.windows += 1

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)


async def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _window(address: str, partition: int, key: int) -> None:
    async with await Producer.create(address, "away", delivery_timeout_ms=60_000) as producer:
        await producer.send_window([{"key": key, "value": b"v", "source": "s"}],
                                   partition=partition)


@pytest.mark.parametrize("path", ["log", "key_shared"])
def test_a_registration_says_an_outage_once_and_its_return_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, path: str) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    caplog.set_level(logging.DEBUG, logger="keybus")
    consumer = Counting()

    def said(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno == level and r.name.startswith("keybus")
                and broker.address in r.getMessage()]

    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("away", 2)
        for partition in (0, 1):
            await _window(broker.address, partition, partition)
        client = DatabusClient(broker.address, config=DatabusConfig(unavailable_report_ms=1_000))
        if path == "log":
            client.register(consumer, topic="away", name="reg")
        else:
            client.register_shared(consumer, topic="away", subscription="reg",
                                   consumer_config=ConsumerConfig(type="key_shared",
                                                                  start="earliest"))
        async with client:
            await _until(lambda: consumer.windows >= 2, 60, "the first windows")
            caplog.clear()
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(OUTAGE_S)
            await _until(lambda: bool(consumer.errors), 30, "the outage notice (on_error)")
            await asyncio.to_thread(broker.start)
            await _window(broker.address, 0, 10)
            await _until(lambda: consumer.windows >= 3, 60, "a window after the outage")
            await _until(lambda: bool(said(logging.INFO)), 30, "the return said")

    try:
        asyncio.run(go())
    finally:
        broker.stop()
    assert said(logging.WARNING) == [
        f"reg: lost the broker at {broker.address} (connection closed); retrying; windows "
        "resume where they stopped"]
    back = said(logging.INFO)
    assert len(back) == 1 and back[0].startswith(f"reg: the broker at {broker.address} is "
                                                 "back after "), back
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # the other streams' reports happened, at DEBUG; the consumers still heard of it
    assert said(logging.DEBUG)
    assert any(isinstance(e, Unavailable) for e in consumer.errors)
