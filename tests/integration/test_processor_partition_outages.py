"""A failing partition is logged once per outage, not once per cycle.

Goal: a partition whose work fails every cycle (the application's on_event
raises on it; its checkpoint cannot be read when it starts) makes one
WARNING, not one per cycle; the repeats are DEBUG (the partition's "closed
... error" line too); once it works again one INFO says so, how long it was
down and how often it failed; the other partitions are processed meanwhile.
on_error, when given, still gets every failure, no WARNING is logged, and
the recovery INFO is logged all the same (no callback says it).
Method: one processor in this process (0.5 s interval) against a real broker
process, a real redis-server holding ownership, and the broker's or a file
checkpoint store; the log is read through caplog; waits are bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sdk import Admin, Producer
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import Checkpoint, FileCheckpointStore, OwnershipStore
from tests.support.broker_process import BrokerProcess
from tests.support.processors import (
    EXPIRATION_MS,
    INTERVAL_MS,
    ownership_store,
    produce,
    redis_server,  # noqa: F401
    wait_for,
)
from tests.support.redis_server import RedisServer

PARTITIONS = 3
EVENTS = 20  # per partition
FAILURES = 4  # cycles the failing partition fails


def said(caplog: pytest.LogCaptureFixture, level: int, part: str) -> list[str]:
    """The processor's log lines at that level that contain `part`."""
    return [r.getMessage() for r in caplog.records
            if r.name == "keybus.processor" and r.levelno == level and part in r.getMessage()]


def with_checkpoints(broker: str, topic: str, on_event: Callable[..., Awaitable[None]],
                     store: OwnershipStore, checkpoints: FileCheckpointStore) -> EventProcessor:
    """A processor of `topic` ("billing") on a file checkpoint store."""
    return EventProcessor(broker, topic, "billing", on_event=on_event, ownership_store=store,
                          checkpoint_store=checkpoints, load_balancing_interval_ms=INTERVAL_MS,
                          ownership_expiration_ms=EXPIRATION_MS)


async def create_topic(broker: str, topic: str) -> None:
    async with Admin(broker) as admin:
        await admin.create_topic(topic, partitions=PARTITIONS)
    await produce(broker, topic, PARTITIONS, EVENTS)


@pytest.mark.parametrize("with_on_error", [False, True], ids=["log", "on_error"])
def test_an_on_event_that_raises_for_a_while_warns_once_then_says_it_recovered(
        shared_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        caplog: pytest.LogCaptureFixture, with_on_error: bool) -> None:
    caplog.set_level(logging.DEBUG, logger="keybus.processor")
    topic = f"raising-{'on-error' if with_on_error else 'log'}"
    processed: Counter[int] = Counter()  # partition -> events handled
    raised: list[float] = []  # when on_event raised on partition 0
    reported: list[tuple[int | None, BaseException]] = []
    others_done_at_failure: list[bool] = []

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        if context.partition == 0 and len(raised) < FAILURES:
            raised.append(asyncio.get_running_loop().time())
            others_done_at_failure.append(all(processed[p] == EVENTS for p in (1, 2)))
            raise ValueError(f"cannot handle offset {batch.offsets[0]}")
        processed[context.partition] += batch.count
        await context.update_checkpoint(batch)

    async def on_error(context: PartitionContext | None, error: BaseException) -> None:
        reported.append((context.partition if context else None, error))

    async def run() -> None:
        await create_topic(shared_broker.address, topic)
        store = ownership_store("redis", shared_broker.address, redis_server)
        processor = EventProcessor(shared_broker.address, topic, "billing", on_event=on_event,
                                   on_error=on_error if with_on_error else None,
                                   ownership_store=store, load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        async with processor:
            await wait_for(lambda: processed[0] == EVENTS, 20,
                           f"partition 0 processed once on_event stops raising ({raised})")
            await wait_for(lambda: bool(said(caplog, logging.INFO, "works again")), 5,
                           "the recovery line")
        await store.close()
    asyncio.run(run())

    assert len(raised) == FAILURES
    assert processed == Counter({0: EVENTS, 1: EVENTS, 2: EVENTS})
    # the other partitions were processed while partition 0 failed
    assert any(others_done_at_failure[1:]), others_done_at_failure
    warnings = said(caplog, logging.WARNING, "")
    repeats = said(caplog, logging.DEBUG, "partition 0 (on_event) still failing (ValueError")
    recoveries = said(caplog, logging.INFO, "works again")
    closed_with_error = said(caplog, logging.INFO, "closed PartitionContext")
    closed_with_error = [line for line in closed_with_error if line.endswith(": error")]
    assert len(recoveries) == 1, recoveries
    assert recoveries[0].startswith(f"event processor {topic}/billing partition 0 (on_event) "
                                    "works again after ")
    assert recoveries[0].endswith(f"(failed {FAILURES} attempts; last: ValueError)")
    assert len(closed_with_error) == 1, closed_with_error  # the repeats close at DEBUG
    if with_on_error:
        assert warnings == [], warnings
        assert [(p, type(e)) for p, e in reported] == [(0, ValueError)] * FAILURES
    else:
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(f"event processor {topic}/billing partition 0 (on_event) "
                                      "failed (ValueError): cannot handle offset 0")
        assert len(repeats) == FAILURES - 1, repeats


def test_a_checkpoint_unreadable_at_start_warns_once_then_says_it_recovered(
        shared_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """The file checkpoint store cannot read partition 1's checkpoint (the
    file is not JSON): that partition fails to start every cycle until the
    file is fixed; partitions 0 and 2 go on."""
    caplog.set_level(logging.DEBUG, logger="keybus.processor")
    topic = "unreadable"
    processed: Counter[int] = Counter()
    checkpoints = FileCheckpointStore(tmp_path)
    broken = tmp_path / "%00" / topic / "billing" / "checkpoint" / "1.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        processed[context.partition] += batch.count
        await context.update_checkpoint(batch)

    async def run() -> None:
        await create_topic(shared_broker.address, topic)
        store = ownership_store("redis", shared_broker.address, redis_server)
        processor = with_checkpoints(shared_broker.address, topic, on_event, store, checkpoints)
        async with processor:
            await wait_for(lambda: len(said(caplog, logging.DEBUG, "still failing"))
                           >= FAILURES - 1, 20, "partition 1 failing to start, cycle after cycle")
            assert processed == Counter({0: EVENTS, 2: EVENTS})
            broken.unlink()  # fixed: no checkpoint, it starts at the earliest event
            await wait_for(lambda: processed[1] == EVENTS, 20, "partition 1 processed once fixed")
            await wait_for(lambda: bool(said(caplog, logging.INFO, "works again")), 5,
                           "the recovery line")
        await store.close()
    asyncio.run(run())

    warnings = said(caplog, logging.WARNING, "")
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"event processor {topic}/billing partition 1 (starting) "
                                  "failed (ValueError): checkpoint file ")
    assert "is unreadable" in warnings[0]
    recoveries = said(caplog, logging.INFO, "works again")
    assert len(recoveries) == 1, recoveries
    assert recoveries[0].startswith(f"event processor {topic}/billing partition 1 (starting) "
                                    "works again after ")
    assert "; last: ValueError)" in recoveries[0]


def test_a_read_that_works_again_with_no_new_event_says_it_recovered(
        shared_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """Partition 1's checkpoint is past its log end (its topic was recreated, say): the
    read is refused every cycle. Once the log reaches the checkpoint the read works and
    waits at the end, with no event to hand over: the recovery line comes all the same
    (before, only a batch said so, and an idle partition never did)."""
    caplog.set_level(logging.DEBUG, logger="keybus.processor")
    topic = "ahead"
    checkpoints = FileCheckpointStore(tmp_path)
    processed: Counter[int] = Counter()

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        processed[context.partition] += batch.count

    async def run() -> None:
        await create_topic(shared_broker.address, topic)
        await checkpoints.update_checkpoint(Checkpoint("", topic, "billing", 1, EVENTS + 4, 0))
        store = ownership_store("redis", shared_broker.address, redis_server)
        processor = with_checkpoints(shared_broker.address, topic, on_event, store, checkpoints)
        async with processor:
            await wait_for(lambda: len(said(caplog, logging.DEBUG, "still failing"))
                           >= FAILURES - 1, 20, "partition 1's read refused, cycle after cycle")
            async with await Producer.create(shared_broker.address, topic) as producer:
                await producer.send_batch(list(range(5)), [b"v"] * 5, partition=1)
                await producer.flush()  # the log now ends where the checkpoint resumes
            await wait_for(lambda: bool(said(caplog, logging.INFO, "works again")), 10,
                           "the recovery line, with no event after the checkpoint")
        await store.close()
    asyncio.run(run())

    warnings = said(caplog, logging.WARNING, "")
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"event processor {topic}/billing partition 1 (reading) failed")
    recoveries = said(caplog, logging.INFO, "works again")
    assert len(recoveries) == 1, recoveries
    assert recoveries[0].startswith(f"event processor {topic}/billing partition 1 (reading) "
                                    "works again after ")
    assert processed == Counter({0: EVENTS, 2: EVENTS})  # nothing past partition 1's checkpoint
