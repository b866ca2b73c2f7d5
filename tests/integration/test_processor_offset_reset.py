"""A partition whose checkpoint retention has passed: offset_reset decides.

Goal: the checkpoint of partition 0 is offset 4 and retention has since
removed offsets 0..S-1 (S > 5), so the events after the checkpoint are gone.
- "fail" (the default, as before: nothing is skipped unasked): the partition
  does not start and keeps failing, every cycle, with CheckpointExpired
  naming the checkpoint, the log's start, the events lost and the option
  that moves on (before, a bare OffsetOutOfRange from the read, after
  on_partition_initialize, with no word of a way out); the checkpoint stays.
- "earliest": the partition resumes at S and delivers every retained event
  once, in offset order (the processor's at-least-once guarantee, here with
  no handover: exactly once); one WARNING says the partition, the expired
  checkpoint, the log's start and the events skipped, and
  on_partition_initialize sees `context.checkpoint_reset`; the application's
  next checkpoint ends it. Before, the partition failed every cycle.
- "latest": it resumes at the log end: none of the retained events, every
  event stored after on_partition_initialize.
Method: a real broker process checking retention every 50 ms, a topic whose
retention_bytes holds two of its 20 KB records, so producing four removes
the first two (size, not age: nothing more goes while the test runs); the
checkpoint written through the broker's store before the trim; a real
redis-server as the ownership store; 0.5 s interval, every wait bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from sdk.processor import (
    CheckpointExpired,
    CheckpointReset,
    EventProcessor,
    PartitionContext,
)
from sdk.reader import ReadBatch
from sdk.stores import BrokerCheckpointStore, RedisOwnershipStore
from sdk.stores.records import Checkpoint
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, redis_server, wait_for  # noqa: F401
from tests.support.redis_server import RedisServer
from tests.support.wire import int_batch, produce, stub

EVENTS, VALUE_BYTES = 10, 2_000  # a record of 10 events is about 20 KB
RETENTION_BYTES = 50_000  # holds two records
CHECKPOINT = 4
GROUP = "g"



def _produce_records(address: str, topic: str, first: int, records: int) -> None:
    """`records` produce calls (one record each) of EVENTS events from offset `first`."""
    produce(stub(address), [pb.ProduceRequest(topic=topic, batch=int_batch(
        list(range(base, base + EVENTS)), b"x" * VALUE_BYTES))
        for base in range(first, first + records * EVENTS, EVENTS)])


def _partition(address: str, topic: str) -> pb.PartitionInfo:
    info = stub(address).DescribeTopic(pb.DescribeTopicRequest(topic=topic), timeout=10)
    return info.partitions[0]


def _expired_checkpoint(address: str, topic: str) -> tuple[int, int]:
    """A topic whose group checkpoint (offset 4) retention passed: (log start, log end)."""
    stub(address).CreateTopic(pb.CreateTopicRequest(topic=topic, config=pb.TopicConfig(
        partitions=1, retention_bytes=RETENTION_BYTES)), timeout=10)
    _produce_records(address, topic, 0, 1)

    async def checkpoint() -> None:
        async with BrokerCheckpointStore(address) as store:
            await store.update_checkpoint(Checkpoint("", topic, GROUP, 0, CHECKPOINT, 0, 0))
    asyncio.run(checkpoint())
    _produce_records(address, topic, EVENTS, 3)
    deadline = time.monotonic() + 20
    while (partition := _partition(address, topic)).start_offset < 2 * EVENTS:
        assert time.monotonic() < deadline, f"retention did not trim: {partition}"
        time.sleep(0.05)
    assert partition.start_offset > CHECKPOINT + 1 and partition.end_offset == 4 * EVENTS
    return partition.start_offset, partition.end_offset


class Recorder:
    """What the callbacks saw."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.resets: list[CheckpointReset | None] = []
        self.errors: list[BaseException] = []
        self.closes: list[tuple[CheckpointReset | None, str]] = []

    def initialize(self, context: PartitionContext) -> None:
        # getattr: on the code before offset_reset the old failure shows, not an AttributeError
        self.resets.append(getattr(context, "checkpoint_reset", None))

    async def event(self, context: PartitionContext, batch: ReadBatch) -> None:
        self.offsets += batch.offsets
        await context.update_checkpoint(batch)

    def close(self, context: PartitionContext, reason: str) -> None:
        self.closes.append((context.checkpoint_reset, reason))

    def error(self, context: PartitionContext | None, error: BaseException) -> None:
        self.errors.append(error)

    def state(self) -> str:
        last = repr(self.errors[-1]) if self.errors else "none"
        return (f"offsets {self.offsets[:3]}..{self.offsets[-3:]}, resets {self.resets}, "
                f"{len(self.errors)} errors, the last: {last}")


def _run(address: str, redis: RedisServer, topic: str, recorder: Recorder, until: Any,
         **options: Any) -> None:
    """Run one processor until `until(recorder)` holds (within 30 s), then stop it."""
    async def go() -> None:
        store = RedisOwnershipStore(redis.url, ttl_ms=EXPIRATION_MS)
        processor = EventProcessor(
            address, topic, GROUP, on_event=recorder.event,
            on_partition_initialize=recorder.initialize, on_partition_close=recorder.close,
            on_error=recorder.error, ownership_store=store,
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS,
            **options)
        try:
            async with processor:
                await until(recorder)
        finally:
            await store.close()
    asyncio.run(go())


async def _stored_checkpoint(address: str, topic: str) -> int | None:
    async with BrokerCheckpointStore(address) as store:
        checkpoint = await store.get_checkpoint("", topic, GROUP, 0)
    return None if checkpoint is None else checkpoint.offset


@pytest.mark.parametrize("options", [{}, {"offset_reset": "fail"}], ids=["default", "fail"])
def test_fail_keeps_the_partition_failing_with_a_message_that_names_the_way_on(
        retention_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        options: dict[str, str]) -> None:
    address, topic = retention_broker.address, f"reset-fail-{len(options)}"
    start, _ = _expired_checkpoint(address, topic)
    recorder = Recorder()

    async def failed_twice(seen: Recorder) -> None:
        await wait_for(lambda: len(seen.errors) >= 2, 30, "two cycles failed",
                       state=seen.state)
    _run(address, redis_server, topic, recorder, failed_twice, **options)
    for error in recorder.errors:
        assert isinstance(error, CheckpointExpired), repr(error)
        assert (f"{topic}/0 of group 'g': checkpoint offset {CHECKPOINT} is behind the log's "
                f"start {start}: retention removed offsets {CHECKPOINT + 1}..{start - 1} "
                f"({start - CHECKPOINT - 1} events this group never processed)") in str(error)
        assert "pass offset_reset='earliest'" in str(error), str(error)
    assert recorder.offsets == [] and recorder.resets == []  # never started
    assert asyncio.run(_stored_checkpoint(address, topic)) == CHECKPOINT


def test_earliest_resumes_at_the_log_start_and_processes_every_retained_event(
        retention_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    address, topic = retention_broker.address, "reset-earliest"
    start, end = _expired_checkpoint(address, topic)
    recorder = Recorder()

    async def all_read(seen: Recorder) -> None:
        await wait_for(lambda: bool(seen.offsets) and seen.offsets[-1] == end - 1, 30,
                       "every retained event processed",
                       state=seen.state)
    with caplog.at_level(logging.WARNING, logger="keybus.processor"):
        _run(address, redis_server, topic, recorder, all_read, offset_reset="earliest")
    assert recorder.offsets == list(range(start, end))
    reset = CheckpointReset("earliest", CHECKPOINT, start, start)
    assert recorder.resets == [reset] and recorder.closes == [(reset, "shutdown")]
    assert recorder.errors == []
    said = [r.getMessage() for r in caplog.records if "behind the log's start" in r.getMessage()]
    assert said == [
        f"event processor {topic}/g partition 0: checkpoint offset {CHECKPOINT} is behind the "
        f"log's start {start} (retention removed offsets {CHECKPOINT + 1}..{start - 1}); "
        f"offset_reset='earliest': resuming at offset {start}, skipping "
        f"{start - CHECKPOINT - 1} events ({start - CHECKPOINT - 1} removed by retention)"]
    assert asyncio.run(_stored_checkpoint(address, topic)) == end - 1


def test_latest_resumes_at_the_log_end(retention_broker: BrokerProcess,
                                       redis_server: RedisServer) -> None:  # noqa: F811
    address, topic = retention_broker.address, "reset-latest"
    start, end = _expired_checkpoint(address, topic)
    recorder = Recorder()

    async def new_events_read(seen: Recorder) -> None:
        await wait_for(lambda: bool(seen.resets), 30, "the partition initialized",
                       state=seen.state)
        await asyncio.to_thread(_produce_records, address, topic, end, 1)
        await wait_for(lambda: len(seen.offsets) >= EVENTS, 30, "the new events processed",
                       state=seen.state)
    _run(address, redis_server, topic, recorder, new_events_read, offset_reset="latest")
    assert recorder.offsets == list(range(end, end + EVENTS))  # none of the retained ones
    assert recorder.resets == [CheckpointReset("latest", CHECKPOINT, start, end)]
    assert recorder.resets[0] is not None and recorder.resets[0].skipped == end - CHECKPOINT - 1
    assert recorder.errors == []
