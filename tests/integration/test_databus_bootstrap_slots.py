"""A Databus bootstrap that finds the broker's bootstrap slots taken waits for one.

Goal: the broker serves `bootstrap_streams_max` bootstrap streams in their
snapshot or catch-up at once and refuses more with RESOURCE_EXHAUSTED, "retry
later". A registration bootstraps its partitions side by side, so with more
partitions than free slots (a topic of 65 partitions against the default 64,
or other consumers bootstrapping) it stopped at once with that error: a probe
against a broker with one slot saw `wait()` raise ResourceExhausted before a
single row of a 2-partition topic. Now a refused partition asks again after
a backoff (said once at WARNING) and every partition ends its bootstrap
holding the log's latest value per key.
Method: one broker process with --bootstrap-streams-max 1; a topic of three
partitions of 3,000 keys each; a combined consumer that starts at "bootstrap".
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from sdk import Admin, Producer
from sdk.databus import DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.config import DatabusConfig
from sdk.databus.results import SUCCESS, CallbackResult
from tests.support.broker_process import BrokerProcess

TOPIC = "slots-db"
PARTITIONS = 3
KEYS = 3_000


class State(DatabusCombinedConsumerBase):
    def __init__(self) -> None:
        self.state: dict[tuple[int, int | str], bytes] = {}
        self.ended = 0
        self.errors: list[Exception] = []

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        self.state[(event.partition, event.key)] = event.value
        return SUCCESS

    def on_end_bootstrap(self) -> CallbackResult:
        self.ended += 1
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.errors.append(error)
        return SUCCESS


def test_partitions_beyond_the_brokers_bootstrap_slots_wait_for_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = BrokerProcess(tmp_path / "data", "--bootstrap-streams-max", "1")
    broker.start()

    async def go() -> tuple[State, dict[tuple[int, int | str], bytes]]:
        async with Admin(broker.address) as admin:
            await admin.create_topic(TOPIC, partitions=PARTITIONS)
        model: dict[tuple[int, int | str], bytes] = {}
        async with await Producer.create(broker.address, TOPIC) as producer:
            for partition in range(PARTITIONS):
                events = [{"key": k, "value": f"{partition}-{k}".encode()} for k in range(KEYS)]
                await producer.send_window(events, partition=partition)
                model.update({(partition, k): f"{partition}-{k}".encode() for k in range(KEYS)})
        consumer = State()
        # Small reads: each partition's snapshot takes several messages, so the
        # partitions' streams overlap and the broker's one slot is contended.
        client = DatabusClient(broker.address, config=DatabusConfig(reader_bytes_max=4_096))
        client.register(consumer, topic=TOPIC, start="bootstrap", bootstrap=True)
        async with client:
            deadline = time.monotonic() + 60
            while consumer.ended < PARTITIONS and not consumer.errors:
                assert time.monotonic() < deadline, f"{consumer.ended} partitions bootstrapped"
                await asyncio.sleep(0.05)
        return consumer, model

    try:
        with caplog.at_level(logging.INFO, logger="keybus.databus"):
            consumer, model = asyncio.run(go())
    finally:
        broker.stop()
    assert not consumer.errors, consumer.errors
    assert consumer.ended == PARTITIONS and consumer.state == model
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("waits for a bootstrap slot" in m for m in said), said
