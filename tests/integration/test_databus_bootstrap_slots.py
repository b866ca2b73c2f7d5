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
The test holds the one slot itself (a Bootstrap stream of another topic that it
does not read, its window at HTTP/2's 64 KB) until the consumer says it waits:
left to the partitions' own streams overlapping, the slot was not always
contended (one fresh-clone run saw no wait).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import grpc
import pytest

from sdk import Admin, Producer
from sdk.channel import stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.databus import DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.config import DatabusConfig
from sdk.databus.results import SUCCESS, CallbackResult
from tests.support.broker_process import BrokerProcess

TOPIC = "slots-db"
PARTITIONS = 3
KEYS = 3_000
HOLDER = "slots-holder"  # a topic whose bootstrap the test opens and leaves unread
HOLDER_EVENTS, HOLDER_VALUE_BYTES = 200, 2_000  # 400 KB: far past a 64 KB window


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
        holder = await _hold_the_slot(broker.address)
        consumer = State()
        client = DatabusClient(broker.address, config=DatabusConfig(reader_bytes_max=4_096))
        client.register(consumer, topic=TOPIC, start="bootstrap", bootstrap=True)
        async with client:
            deadline = time.monotonic() + 30
            while not _said_wait(caplog):
                assert time.monotonic() < deadline, "the consumer never waited for the slot"
                await asyncio.sleep(0.05)
            await holder.close()  # the slot is free: the consumer's next ask gets it
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


def _said_wait(caplog: pytest.LogCaptureFixture) -> bool:
    return any("waits for a bootstrap slot" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


async def _hold_the_slot(address: str) -> grpc.aio.Channel:
    """Take the broker's one bootstrap slot and keep it: a Bootstrap stream of a
    400 KB topic read for one message only. The broker's stream then waits on
    the client's receive window (64 KB, no BDP probe to widen it) before its
    catch-up ends, which is when a slot is given back. Closing the channel
    returned ends the stream and frees the slot."""
    async with Admin(address) as admin:
        await admin.create_topic(HOLDER, partitions=1)
    async with await Producer.create(address, HOLDER) as producer:
        await producer.send_window([{"key": k, "value": b"x" * HOLDER_VALUE_BYTES}
                                    for k in range(HOLDER_EVENTS)], partition=0)
    channel = grpc.aio.insecure_channel(address, options=[("grpc.http2.bdp_probe", 0)])
    call = stub_of(channel).Bootstrap(pb.BootstrapRequest(topic=HOLDER, partition=0,
                                                          bytes_max=4_096))
    await call.read()  # the stream is open: it holds the slot
    return channel
