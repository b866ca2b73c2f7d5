"""A checkpoint of a topic since deleted and created again: offset_reset decides.

Goal: a processor checkpointed offset 100 of topic t in a FileCheckpointStore
(a store the broker does not delete with the topic); t was then deleted and
created again, and the new log already holds 150 events. Before, the broker
accepted the read from 101 (the new log is long enough) and the processor
resumed there, skipping offsets 0..100 of the new topic unseen, whatever
`offset_reset` said (the "past the log's end" check only sees a log shorter
than the checkpoint). Now the broker gives every topic an incarnation
(`TopicInfo.incarnation`, new at each create), the processor writes it into
each checkpoint, and a checkpoint of another incarnation is decided by
`offset_reset` before any read:
- "fail" (the default): the partition does not start, every cycle, with
  CheckpointOtherIncarnation (a CheckpointExpired) naming both incarnations
  and the options; on_partition_initialize is not called; the checkpoint stays.
- "earliest": every event of the new topic is processed; one WARNING;
  context.checkpoint_reset names both incarnations.
- "latest": only the events stored after on_partition_initialize.
- a checkpoint without an incarnation (a file written before they were kept)
  resumes after its offset as before.
- the broker's checkpoint store answers with the topic's incarnation and
  refuses a checkpoint of another one (a processor still on the old topic).
Method: a real broker process, a real redis-server as the ownership store,
checkpoints in a FileCheckpointStore written by a real processor run; 0.5 s
interval, every wait bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.processor import (
    CheckpointExpired,
    CheckpointOtherIncarnation,
    CheckpointReset,
)
from sdk.stores import BrokerCheckpointStore, FileCheckpointStore
from sdk.stores.records import Checkpoint
from tests.support.broker_process import BrokerProcess
from tests.support.processors import (  # noqa: F401
    Recorder,
    redis_server,
    run_recorded,
    wait_for,
)
from tests.support.redis_server import RedisServer
from tests.support.wire import int_batch, produce, stub

CHECKPOINT, NEW_LOG_END, GROUP = 100, 150, "g"


def _produce(address: str, topic: str, first: int, count: int) -> None:
    produce(stub(address), [pb.ProduceRequest(topic=topic, batch=int_batch(
        list(range(first, first + count)), b"x"))])


def _create(address: str, topic: str) -> str:
    """Create the topic (one partition); its incarnation."""
    info = stub(address).CreateTopic(pb.CreateTopicRequest(topic=topic, config=pb.TopicConfig(
        partitions=1)), timeout=10)
    assert info.incarnation, info
    return str(info.incarnation)


def _run(address: str, redis: RedisServer, topic: str, checkpoints: FileCheckpointStore,
         recorder: Recorder, until: Any, **options: Any) -> None:
    run_recorded(address, redis, topic, GROUP, checkpoints, recorder, until, **options)


def _stored(checkpoints: FileCheckpointStore, topic: str) -> Checkpoint | None:
    return asyncio.run(checkpoints.get_checkpoint("", topic, GROUP, 0))


def _recreated(address: str, redis: RedisServer, topic: str,
               root: Path) -> tuple[FileCheckpointStore, str, str]:
    """A processor checkpoints offset 100 of the topic; the topic is deleted and
    created again and its new log holds 150 events. The store and both incarnations."""
    old = _create(address, topic)
    _produce(address, topic, 0, CHECKPOINT + 1)
    checkpoints = FileCheckpointStore(root)

    async def checkpointed(seen: Recorder) -> None:
        await wait_for(lambda: CHECKPOINT in seen.offsets, 30, "the old topic processed",
                       state=seen.state)
    _run(address, redis, topic, checkpoints, Recorder(), checkpointed)
    stored = _stored(checkpoints, topic)
    assert stored is not None and (stored.offset, stored.incarnation) == (CHECKPOINT, old)
    stub(address).DeleteTopic(pb.DeleteTopicRequest(topic=topic), timeout=30)
    new = _create(address, topic)
    assert new != old
    _produce(address, topic, 0, NEW_LOG_END)
    return checkpoints, old, new


@pytest.mark.parametrize("options", [{}, {"offset_reset": "fail"}], ids=["default", "fail"])
def test_fail_keeps_the_partition_failing_naming_both_incarnations(
        broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path, options: dict[str, str]) -> None:
    address, topic = broker.address, "recreated-fail"
    checkpoints, old, new = _recreated(address, redis_server, topic, tmp_path / "checkpoints")
    recorder = Recorder()

    async def failed_twice(seen: Recorder) -> None:
        await wait_for(lambda: len(seen.errors) >= 2 or bool(seen.offsets), 30,
                       "two cycles failed", state=seen.state)
    _run(address, redis_server, topic, checkpoints, recorder, failed_twice, **options)
    assert recorder.offsets == [] and recorder.resets == [], recorder.state()  # never started
    for error in recorder.errors:
        assert isinstance(error, CheckpointOtherIncarnation), repr(error)
        assert isinstance(error, CheckpointExpired)  # code that handles one handles all
        assert (f"{topic}/0 of group 'g': checkpoint offset {CHECKPOINT} is of incarnation "
                f"{old!r} of the topic, which was deleted and created again: it is now "
                f"incarnation {new!r} (it holds offsets 0..{NEW_LOG_END - 1})") in str(error)
        assert ("pass offset_reset='earliest' (resume at 0, the new topic's start) or "
                "'latest'") in str(error), str(error)
    stored = _stored(checkpoints, topic)
    assert stored is not None and (stored.offset, stored.incarnation) == (CHECKPOINT, old)


def test_earliest_processes_every_event_of_the_new_topic(
        broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    address, topic = broker.address, "recreated-earliest"
    checkpoints, old, new = _recreated(address, redis_server, topic, tmp_path / "checkpoints")
    recorder = Recorder()

    async def all_read(seen: Recorder) -> None:
        await wait_for(lambda: NEW_LOG_END - 1 in seen.offsets, 30, "the new topic processed",
                       state=seen.state)
    with caplog.at_level(logging.WARNING, logger="keybus.processor"):
        _run(address, redis_server, topic, checkpoints, recorder, all_read,
             offset_reset="earliest")
    assert recorder.offsets == list(range(NEW_LOG_END))
    reset = CheckpointReset("earliest", CHECKPOINT, 0, 0, NEW_LOG_END, old, new)
    assert recorder.resets == [reset] and reset.other_incarnation and reset.skipped == 0
    assert recorder.errors == []
    said = [r.getMessage() for r in caplog.records if "created again" in r.getMessage()]
    assert said == [
        f"event processor {topic}/g partition 0: checkpoint offset {CHECKPOINT} is of "
        f"incarnation {old!r} of the topic, which was deleted and created again (now "
        f"incarnation {new!r}; it holds offsets 0..{NEW_LOG_END - 1}); "
        "offset_reset='earliest': resuming at offset 0, skipping 0 events still stored"]
    stored = _stored(checkpoints, topic)
    assert stored is not None and (stored.offset, stored.incarnation) == (NEW_LOG_END - 1, new)


def test_latest_resumes_at_the_new_topics_end(broker: BrokerProcess,
                                             redis_server: RedisServer,  # noqa: F811
                                             tmp_path: Path) -> None:
    address, topic = broker.address, "recreated-latest"
    checkpoints, old, new = _recreated(address, redis_server, topic, tmp_path / "checkpoints")
    recorder = Recorder()

    async def new_events_read(seen: Recorder) -> None:
        await wait_for(lambda: bool(seen.resets), 30, "the partition initialized",
                       state=seen.state)
        await asyncio.to_thread(_produce, address, topic, NEW_LOG_END, 10)
        await wait_for(lambda: len(seen.offsets) >= 10, 30, "the new events processed",
                       state=seen.state)
    _run(address, redis_server, topic, checkpoints, recorder, new_events_read,
         offset_reset="latest")
    assert recorder.offsets == list(range(NEW_LOG_END, NEW_LOG_END + 10))
    reset = CheckpointReset("latest", CHECKPOINT, 0, NEW_LOG_END, NEW_LOG_END, old, new)
    assert recorder.resets == [reset] and reset.skipped == NEW_LOG_END and reset.removed == 0
    assert recorder.errors == []


def test_a_checkpoint_without_incarnation_resumes_after_its_offset(
        broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path) -> None:
    """Old checkpoint files keep working as they did: nothing to compare, no reset."""
    address, topic = broker.address, "recreated-unknown"
    new = _create(address, topic)
    _produce(address, topic, 0, NEW_LOG_END)
    root = tmp_path / "checkpoints"
    checkpoints = FileCheckpointStore(root)
    asyncio.run(checkpoints.update_checkpoint(Checkpoint("", topic, GROUP, 0, CHECKPOINT, 0, 0)))
    [path] = root.rglob("0.json")
    assert json.loads(path.read_text()) == {"offset": CHECKPOINT, "scn": 0, "epoch": 0}
    recorder = Recorder()

    async def rest_read(seen: Recorder) -> None:
        await wait_for(lambda: NEW_LOG_END - 1 in seen.offsets, 30, "the rest processed",
                       state=seen.state)
    _run(address, redis_server, topic, checkpoints, recorder, rest_read)
    assert recorder.offsets == list(range(CHECKPOINT + 1, NEW_LOG_END))
    assert recorder.resets == [None] and recorder.errors == []
    assert json.loads(path.read_text())["incarnation"] == new  # written from now on


def test_the_broker_store_says_the_topics_incarnation_and_refuses_another(
        broker: BrokerProcess) -> None:
    address, topic = broker.address, "recreated-broker-store"
    old = _create(address, topic)
    _produce(address, topic, 0, 10)

    async def go() -> None:
        async with BrokerCheckpointStore(address) as store:
            await store.update_checkpoint(Checkpoint("", topic, GROUP, 0, 5, 0, 0,
                                                     incarnation=old))
            found = await store.get_checkpoint("", topic, GROUP, 0)
            assert found is not None and (found.offset, found.incarnation) == (5, old)
            await asyncio.to_thread(stub(address).DeleteTopic,
                                    pb.DeleteTopicRequest(topic=topic), timeout=30)
            new = await asyncio.to_thread(_create, address, topic)
            await asyncio.to_thread(_produce, address, topic, 0, 10)
            with pytest.raises(errors.FailedPrecondition) as refused:
                await store.update_checkpoint(Checkpoint("", topic, GROUP, 0, 7, 0, 0,
                                                         incarnation=old))
            assert (f"checkpoint offset 7 of {topic!r}/0 is of incarnation {old!r} of the "
                    f"topic, which was deleted and created again (it is now incarnation "
                    f"{new!r})") in str(refused.value), str(refused.value)
            assert await store.get_checkpoint("", topic, GROUP, 0) is None
            await store.update_checkpoint(Checkpoint("", topic, GROUP, 0, 7, 0, 0))  # unsaid
            found = await store.get_checkpoint("", topic, GROUP, 0)
            assert found is not None and (found.offset, found.incarnation) == (7, new)
    asyncio.run(go())
