"""Retention that passes a checkpoint while the registration opens is never a silent gap.

Goal: a registration resumes each partition at the first window after its
checkpoint. It looked at where the log starts, then read the checkpoints, then
opened its reads at `{"scn": checkpoint.scn + 1}`; an SCN below the log's start
reads from the start, without an error. So retention that removed the
windows after the checkpoint in between (a slow checkpoint store: a remote
database, a broker-held store behind a busy broker) made the consumer go on
from the new log start, skipping them in silence. A probe found it with a
store that answered after retention had passed its checkpoint: events of
offsets 5..N never came and nothing was said. Now the log start is looked at
again once the reads are open: such a partition fails with OffsetOutOfRange,
or bootstraps with `bootstrap=True`, as one whose checkpoint was already
older than the log does.
Method: one broker process (retention checked every 100 ms); a checkpoint
store whose get_checkpoint produces past retention and waits until the log
start moved past the checkpoint before it answers.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Producer, errors
from sdk.databus import DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.results import SUCCESS, CallbackResult
from sdk.stores import FileCheckpointStore
from sdk.stores.records import Checkpoint
from tests.support.bootstrap_model import describe_partition
from tests.support.broker_process import BrokerProcess

CHECKPOINT_OFFSET = 4  # windows of one event each: offset n has SCN n + 1


@pytest.fixture(scope="module")
def quick_retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    process = BrokerProcess(tmp_path_factory.mktemp("race") / "data",
                            "--retention-check-interval-ms", "100", "--view-linger-ms", "50")
    process.start()
    yield process
    process.stop()


class SlowStore(FileCheckpointStore):
    """A file store whose get_checkpoint lets retention pass the checkpoint first."""

    def __init__(self, root: Path, broker: str, topic: str) -> None:
        super().__init__(root)
        self.broker = broker
        self.topic = topic

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        async with await Producer.create(self.broker, self.topic) as producer:
            for _ in range(100):  # bounded: far more than retention keeps
                for n in range(50):
                    await producer.send_window([{"key": n, "value": b"x" * 200}], partition=0)
                if (await describe_partition(self.broker, self.topic)).start_offset \
                        > CHECKPOINT_OFFSET + 1:
                    break
                await asyncio.sleep(0.1)
        return await super().get_checkpoint(namespace, topic, consumer_group, partition)


class Recorder(DatabusCombinedConsumerBase):
    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.bootstrap_rows = 0
        self.errors: list[Exception] = []
        self.stopped = False
        self.bootstrapped = False

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self.offsets.append(event.offset)
        return SUCCESS

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        self.bootstrap_rows += 1
        return SUCCESS

    def on_end_bootstrap(self) -> CallbackResult:
        self.bootstrapped = True
        return SUCCESS

    def on_error(self, error: Exception) -> CallbackResult:
        self.errors.append(error)
        return SUCCESS

    def on_stop_consumption(self) -> CallbackResult:
        self.stopped = True
        return SUCCESS


async def _setup(broker: BrokerProcess, topic: str, root: Path) -> SlowStore:
    async with Admin(broker.address) as admin:
        await admin.create_topic(topic, partitions=1, retention_bytes=20_000)
    async with await Producer.create(broker.address, topic) as producer:
        for n in range(10):
            await producer.send_window([{"key": n, "value": b"v"}], partition=0)
    store = SlowStore(root, broker.address, topic)
    await store.update_checkpoint(Checkpoint("", topic, "r", 0, CHECKPOINT_OFFSET,
                                             CHECKPOINT_OFFSET + 1))
    return store


async def _consume(broker: BrokerProcess, store: SlowStore, topic: str,
                   bootstrap: bool) -> Recorder:
    consumer = Recorder()
    client = DatabusClient(broker.address, checkpoint_store=store)
    client.register(consumer, topic=topic, name="r", bootstrap=bootstrap)
    async with client:
        deadline = time.monotonic() + 60
        while not (consumer.stopped or consumer.offsets or consumer.bootstrapped):
            assert time.monotonic() < deadline, "no event, no bootstrap and no error"
            await asyncio.sleep(0.05)
    return consumer


def test_retention_passing_the_checkpoint_during_the_start_is_said(
        quick_retention_broker: BrokerProcess, tmp_path: Path) -> None:
    async def go() -> Recorder:
        store = await _setup(quick_retention_broker, "race-plain", tmp_path)
        return await _consume(quick_retention_broker, store, "race-plain", False)

    consumer = asyncio.run(go())
    assert not consumer.offsets, \
        f"skipped offsets {CHECKPOINT_OFFSET + 1}..{consumer.offsets[0] - 1} in silence"
    assert len(consumer.errors) == 1 and isinstance(consumer.errors[0], errors.OffsetOutOfRange)
    assert f"at offset {CHECKPOINT_OFFSET}, but retention removed" in str(consumer.errors[0])


def test_retention_passing_the_checkpoint_during_the_start_bootstraps(
        quick_retention_broker: BrokerProcess, tmp_path: Path) -> None:
    async def go() -> Recorder:
        store = await _setup(quick_retention_broker, "race-boot", tmp_path)
        return await _consume(quick_retention_broker, store, "race-boot", True)

    consumer = asyncio.run(go())
    assert not consumer.errors, consumer.errors
    assert consumer.bootstrapped and consumer.bootstrap_rows > 0, \
        f"no bootstrap: went on at offset {consumer.offsets[:1]} after checkpoint offset " \
        f"{CHECKPOINT_OFFSET}"
