"""A partition whose checkpoint is past the log's end: offset_reset decides.

Goal: partition 0's checkpoint is offset 100 and its log ends at 10 (the log
was cut after the checkpoint, the topic deleted and made again, or the
checkpoint edited or restored). The
broker refuses a read from 101 (offset_past_end); before, the processor
called on_partition_initialize, then failed the read with a bare
OffsetOutOfRange every cycle whatever `offset_reset` said, and once the log
reached 101 resumed there, skipping offsets 10..100 of the new log unseen.
- "fail" (the default): the partition does not start and keeps failing,
  every cycle, with CheckpointPastEnd (a CheckpointExpired) naming the
  checkpoint, the log's end, the events that would be skipped and the
  options; on_partition_initialize is not called; the checkpoint stays.
- "earliest": resume at the log's start: every stored event and every new
  one is processed, in offset order; one WARNING; context.checkpoint_reset.
- "latest": resume at the log end: only the events stored after
  on_partition_initialize.
Method: a real broker process, a real redis-server as the ownership store,
the checkpoint written to a FileCheckpointStore (a store the broker does not
check, as a restored or hand-edited one); 0.5 s interval, every wait bounded.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from sdk.processor import CheckpointExpired, CheckpointReset
from sdk.processor.offset_reset import CheckpointPastEnd
from sdk.stores import FileCheckpointStore
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

CHECKPOINT, LOG_END, GROUP = 100, 10, "g"


def _produce(address: str, topic: str, first: int, count: int) -> None:
    produce(stub(address), [pb.ProduceRequest(topic=topic, batch=int_batch(
        list(range(first, first + count)), b"x"))])


def _checkpoint_past_end(address: str, topic: str, root: Path) -> FileCheckpointStore:
    """A topic whose log holds offsets 0..9 and a group checkpoint at offset 100."""
    stub(address).CreateTopic(pb.CreateTopicRequest(topic=topic, config=pb.TopicConfig(
        partitions=1)), timeout=10)
    _produce(address, topic, 0, LOG_END)
    store = FileCheckpointStore(root)
    asyncio.run(store.update_checkpoint(Checkpoint("", topic, GROUP, 0, CHECKPOINT, 0, 0)))
    return store


def _run(address: str, redis: RedisServer, topic: str, checkpoints: FileCheckpointStore,
         recorder: Recorder, until: Any, **options: Any) -> None:
    run_recorded(address, redis, topic, GROUP, checkpoints, recorder, until, **options)


def _stored(checkpoints: FileCheckpointStore, topic: str) -> int | None:
    found = asyncio.run(checkpoints.get_checkpoint("", topic, GROUP, 0))
    return None if found is None else found.offset


@pytest.mark.parametrize("options", [{}, {"offset_reset": "fail"}], ids=["default", "fail"])
def test_fail_keeps_the_partition_failing_with_a_message_that_names_the_way_on(
        broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path, options: dict[str, str]) -> None:
    address, topic = broker.address, "past-end-fail"
    checkpoints = _checkpoint_past_end(address, topic, tmp_path / "checkpoints")
    recorder = Recorder()

    async def failed_twice(seen: Recorder) -> None:
        await wait_for(lambda: len(seen.errors) >= 2, 30, "two cycles failed",
                       state=seen.state)
    _run(address, redis_server, topic, checkpoints, recorder, failed_twice, **options)
    for error in recorder.errors:
        assert isinstance(error, CheckpointPastEnd), repr(error)
        assert isinstance(error, CheckpointExpired)  # code that handles one handles both
        assert (f"{topic}/0 of group 'g': checkpoint offset {CHECKPOINT} is past the log's "
                f"end {LOG_END} (it holds offsets 0..{LOG_END - 1})") in str(error), str(error)
        assert (f"would skip unseen the next {CHECKPOINT - LOG_END + 1} events it stores "
                f"(offsets {LOG_END}..{CHECKPOINT})") in str(error), str(error)
        assert "pass offset_reset='earliest' (resume at 0) or 'latest'" in str(error)
    assert recorder.offsets == [] and recorder.resets == []  # never initialized
    assert _stored(checkpoints, topic) == CHECKPOINT


def test_earliest_resumes_at_the_log_start_and_processes_every_event(
        broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    address, topic = broker.address, "past-end-earliest"
    checkpoints = _checkpoint_past_end(address, topic, tmp_path / "checkpoints")
    recorder = Recorder()

    async def all_read(seen: Recorder) -> None:
        await wait_for(lambda: LOG_END - 1 in seen.offsets, 30, "the stored events processed",
                       state=seen.state)
        await asyncio.to_thread(_produce, address, topic, LOG_END, 10)
        await wait_for(lambda: LOG_END + 9 in seen.offsets, 30, "the new events processed",
                       state=seen.state)
    with caplog.at_level(logging.WARNING, logger="keybus.processor"):
        _run(address, redis_server, topic, checkpoints, recorder, all_read,
             offset_reset="earliest")
    assert recorder.offsets == list(range(LOG_END + 10))
    assert recorder.resets == [CheckpointReset("earliest", CHECKPOINT, 0, 0, LOG_END)]
    assert recorder.errors == []
    said = [r.getMessage() for r in caplog.records if "past the log's end" in r.getMessage()]
    assert said == [
        f"event processor {topic}/g partition 0: checkpoint offset {CHECKPOINT} is past the "
        f"log's end {LOG_END} (it holds offsets 0..{LOG_END - 1}; the topic made again, or the "
        "log cut after the checkpoint); offset_reset='earliest': resuming at offset "
        "0, skipping 0 events still stored"]
    assert _stored(checkpoints, topic) == LOG_END + 9


def test_latest_resumes_at_the_log_end(broker: BrokerProcess,
                                       redis_server: RedisServer,  # noqa: F811
                                       tmp_path: Path) -> None:
    address, topic = broker.address, "past-end-latest"
    checkpoints = _checkpoint_past_end(address, topic, tmp_path / "checkpoints")
    recorder = Recorder()

    async def new_events_read(seen: Recorder) -> None:
        await wait_for(lambda: bool(seen.resets), 30, "the partition initialized",
                       state=seen.state)
        await asyncio.to_thread(_produce, address, topic, LOG_END, 10)
        await wait_for(lambda: len(seen.offsets) >= 10, 30, "the new events processed",
                       state=seen.state)
    _run(address, redis_server, topic, checkpoints, recorder, new_events_read,
         offset_reset="latest")
    assert recorder.offsets == list(range(LOG_END, LOG_END + 10))  # none of the stored ones
    reset = CheckpointReset("latest", CHECKPOINT, 0, LOG_END, LOG_END)
    assert recorder.resets == [reset] and reset.skipped == LOG_END and reset.removed == 0
    assert recorder.errors == []
