"""A Databus consumer restarted after its topic was deleted and created again does not skip.

Goal: a registration checkpointed window scn 5 (offset 4) of topic t in a
FileCheckpointStore (a store the broker does not delete with the topic); t
was then deleted and created again, and the new topic holds 10 windows, MORE
than the checkpoint. Before, the restarted registration resumed at
`{"scn": 6}` of the new log, which was long enough, and presented only its
windows 6..10: the new topic's first five windows were skipped without a
word. Now each checkpoint records the topic's incarnation and, on start, one
of another incarnation is treated as a checkpoint retention passed:
- without bootstrap: the registration does not start (on_error, wait()
  raises CheckpointOtherIncarnation, an OffsetOutOfRange, naming both
  incarnations and what to do); no event is presented;
- with bootstrap=True: the partition bootstraps the new topic (every one of
  its keys is presented) and the log says so in one WARNING naming both;
- made again while the registration opens (after DescribeTopic, before the
  read: a slow checkpoint store), the read is refused by the broker: it is
  asked of the incarnation the start was judged against, and fails with
  TopicRecreated naming both; the old code's Reader, given none, read the new
  topic from scn 6 on and skipped its first five windows without a word.
Method: one broker process for the module (real RocksDB); the first run
consumes the old topic's five windows and stops (a clean stop writes the
checkpoint); Admin deletes and creates the topic again; every wait bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, OffsetOutOfRange, Producer, TopicRecreated
from sdk.databus import DatabusClient, DatabusCombinedConsumerBase, DbusEvent
from sdk.databus.errors import CheckpointOtherIncarnation
from sdk.databus.results import SUCCESS, CallbackResult
from sdk.stores import FileCheckpointStore
from sdk.stores.records import Checkpoint
from tests.support.broker_process import BrokerProcess

OLD_WINDOWS, NEW_WINDOWS, NAME = 5, 10, "billing"
WITHIN_S = 30.0  # a broker and a bootstrap on a loaded 2-core machine


class Recorder(DatabusCombinedConsumerBase):
    """Records the lifecycle calls and the keys presented (online or bootstrap)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.keys: list[int | str] = []
        self.values: set[bytes] = set()

    def on_start_consumption(self) -> CallbackResult:
        self.calls.append("start")
        return SUCCESS

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self.keys.append(event.key)
        self.values.add(event.value)
        return SUCCESS

    def on_bootstrap_event(self, event: DbusEvent) -> CallbackResult:
        return self.on_event(event)

    def on_error(self, error: Exception) -> CallbackResult:
        self.calls.append(("error", error))
        return SUCCESS

    def on_stop_consumption(self) -> CallbackResult:
        self.calls.append("stop")
        return SUCCESS


async def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {WITHIN_S} s: {what}")
        await asyncio.sleep(0.02)


async def _create(address: str, topic: str, windows: int, value: bytes) -> str:
    """Create the topic (one partition) with `windows` windows; its incarnation."""
    async with Admin(address) as admin:
        info = await admin.create_topic(topic, partitions=1, view=True)
    async with await Producer.create(address, topic) as producer:
        for key in range(windows):
            await producer.send_window([{"key": key, "value": value, "source": "a"}],
                                       partition=0)
    return str(info.incarnation)


async def _recreated_after_checkpoint(address: str, topic: str,
                                      store: FileCheckpointStore) -> tuple[str, str]:
    """Consume the old topic, checkpoint, recreate it with more windows; both incarnations."""
    old = await _create(address, topic, OLD_WINDOWS, b"old")
    consumer = Recorder()
    client = DatabusClient(address, checkpoint_store=store)
    client.register(consumer, topic=topic, name=NAME)
    async with client:
        await _until(lambda: len(consumer.keys) == OLD_WINDOWS, "the old topic's windows")
    checkpoint = await store.get_checkpoint("", topic, NAME, 0)
    assert checkpoint is not None and (checkpoint.offset, checkpoint.scn) == (4, 5), checkpoint
    assert checkpoint.incarnation == old, checkpoint  # the old code: ""
    async with Admin(address) as admin:
        await admin.delete_topic(topic)
    new = await _create(address, topic, NEW_WINDOWS, b"new")
    assert new != old
    return old, new


async def _restart(address: str, topic: str, store: FileCheckpointStore,
                   bootstrap: bool) -> tuple[Recorder, DatabusClient]:
    consumer = Recorder()
    client = DatabusClient(address, checkpoint_store=store)
    client.register(consumer, topic=topic, name=NAME, bootstrap=bootstrap)
    await client.start()
    return consumer, client


def test_without_bootstrap_the_restart_fails_naming_both_incarnations(
        shared_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = "databus-again-fail"

    async def go() -> tuple[str, str, Recorder, BaseException | None]:
        store = FileCheckpointStore(tmp_path)
        old, new = await _recreated_after_checkpoint(shared_broker.address, topic, store)
        consumer, client = await _restart(shared_broker.address, topic, store, bootstrap=False)
        try:
            await _until(lambda: "stop" in consumer.calls or len(consumer.keys) >= 5,
                         "the restarted registration to stop or present windows")
            await asyncio.sleep(0.2)  # any window the old code presented arrives meanwhile
        finally:
            await client.stop()
        try:
            await client.wait()
        except Exception as e:
            return old, new, consumer, e
        return old, new, consumer, None

    old, new, consumer, raised = asyncio.run(go())
    # the old code: no error, the new topic's keys 5..9 presented and 0..4 skipped
    assert consumer.keys == [], consumer.keys
    assert isinstance(raised, CheckpointOtherIncarnation), repr(raised)
    assert isinstance(raised, OffsetOutOfRange)
    message = str(raised)
    assert old in message and new in message and "bootstrap=True" in message, message
    assert consumer.calls == ["start", ("error", raised), "stop"]


def test_with_bootstrap_the_restart_bootstraps_the_new_topic_with_one_warning(
        shared_broker: BrokerProcess, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    topic = "databus-again-bootstrap"

    async def go() -> tuple[str, str, Recorder]:
        store = FileCheckpointStore(tmp_path)
        old, new = await _recreated_after_checkpoint(shared_broker.address, topic, store)
        consumer, client = await _restart(shared_broker.address, topic, store, bootstrap=True)
        try:
            await _until(lambda: NEW_WINDOWS - 1 in consumer.keys or "stop" in consumer.calls,
                         "the new topic's last key")  # the last in key and in log order
        finally:
            await client.stop()
        await client.wait()
        checkpoint = await store.get_checkpoint("", topic, NAME, 0)
        assert checkpoint is not None and checkpoint.incarnation == new, checkpoint
        return old, new, consumer

    with caplog.at_level(logging.INFO, logger="keybus.databus"):
        old, new, consumer = asyncio.run(go())
    # the old code: only keys 5..9 (resumed at scn 6 of the new log), no warning
    assert set(consumer.keys) == set(range(NEW_WINDOWS)), consumer.keys
    assert consumer.values == {b"new"}
    assert not any(isinstance(call, tuple) for call in consumer.calls), consumer.calls
    said = [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and old in r.getMessage()]
    assert len(said) == 1 and new in said[0] and "bootstrapping" in said[0], said


class RecreatingStore(FileCheckpointStore):
    """A file store whose get_checkpoint, once armed, first deletes the topic and
    creates it again with more windows (as if the store were slow while that
    happened), then answers with the old topic's checkpoint."""

    def __init__(self, root: Path, address: str) -> None:
        super().__init__(root)
        self.address = address
        self.armed = False
        self.new = ""

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        if self.armed:
            self.armed = False
            async with Admin(self.address) as admin:
                await admin.delete_topic(topic)
            self.new = await _create(self.address, topic, NEW_WINDOWS, b"new")
        return await super().get_checkpoint(namespace, topic, consumer_group, partition)


def test_a_topic_made_again_while_the_registration_opens_is_refused_by_the_broker(
        shared_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = "databus-again-opening"

    async def go() -> tuple[str, str, Recorder, BaseException | None]:
        store = RecreatingStore(tmp_path, shared_broker.address)
        old = await _create(shared_broker.address, topic, OLD_WINDOWS, b"old")
        first = Recorder()
        client = DatabusClient(shared_broker.address, checkpoint_store=store)
        client.register(first, topic=topic, name=NAME)
        async with client:
            await _until(lambda: len(first.keys) == OLD_WINDOWS, "the old topic's windows")
        store.armed = True
        consumer, client = await _restart(shared_broker.address, topic, store, bootstrap=False)
        try:
            await _until(lambda: "stop" in consumer.calls or NEW_WINDOWS - 1 in consumer.keys,
                         "the restarted registration to stop or present the last window")
        finally:
            await client.stop()
        try:
            await client.wait()
        except Exception as e:
            return old, store.new, consumer, e
        return old, store.new, consumer, None

    old, new, consumer, raised = asyncio.run(go())
    assert new and new != old
    # the old code: keys 5..9 of the new topic presented, 0..4 skipped, no error
    assert consumer.keys == [], consumer.keys
    assert isinstance(raised, TopicRecreated), repr(raised)
    assert old in str(raised) and new in str(raised), str(raised)
    assert consumer.calls == ["start", ("error", raised), "stop"]
