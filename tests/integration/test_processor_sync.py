"""The blocking face of the event processor, with the file checkpoint store.

Goal: code without an event loop can run a processor: blocking callbacks
run on worker threads and may checkpoint (fenced: the file store fences);
with a store that cannot fence, fencing is off by default and asking for it
is refused with a clear error; a second processor started after the first
stopped resumes from the file checkpoints.
Method: a real broker process; SyncEventProcessor with the broker's
ownership store and a FileCheckpointStore in a temp dir.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from sdk import Admin, Unavailable
from sdk.processor import EventProcessor, SyncEventProcessor, SyncPartitionContext
from sdk.reader import ReadBatch
from sdk.stores import FileCheckpointStore
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, produce


def test_a_blocking_processor_checkpoints_to_files_and_a_successor_resumes(
        shared_broker: BrokerProcess, tmp_path: Path) -> None:
    broker, topic = shared_broker.address, "sync-processor"

    async def prepare() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=2)
        await produce(broker, topic, 2, 30)
    asyncio.run(prepare())
    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def on_event(context: SyncPartitionContext, batch: ReadBatch) -> None:
        time.sleep(0.01)  # a blocking callback: it runs on a worker thread
        with lock:
            seen.extend((context.partition, o, threading.current_thread().name)
                        for o in batch.offsets)
        checkpoint = context.update_checkpoint(batch)
        assert checkpoint.epoch == context.epoch > 0  # the file store fences

    def run_until(count: int) -> None:
        processor = SyncEventProcessor(
            broker, topic, "files", on_event=on_event,
            checkpoint_store=FileCheckpointStore(tmp_path / "checkpoints"),
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS)
        with processor:
            deadline = time.monotonic() + 30
            while len(seen) < count and time.monotonic() < deadline:
                time.sleep(0.05)
            assert processor.owned_partitions == [0, 1]
        assert len(seen) == count

    run_until(60)
    assert {name for *_, name in seen} != {threading.current_thread().name}
    asyncio.run(produce(broker, topic, 2, 10, first_key=30))
    run_until(80)  # only the 20 new events: it resumed from the file checkpoints
    assert sorted((p, o) for p, o, _ in seen[60:]) == [(p, o) for p in (0, 1) for o in range(30, 40)]


class _Unfenced(FileCheckpointStore):
    """A checkpoint store that says it cannot fence (as a user's own may)."""

    supports_fencing = False


def test_fencing_with_a_store_that_cannot_fence_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot fence"):
        EventProcessor("127.0.0.1:1", "t", "g", on_event=print, fencing=True,
                       checkpoint_store=_Unfenced(tmp_path))
    for bad, match in (({"strategy": "fastest"}, "strategy"),
                       ({"ownership_expiration_ms": 100, "load_balancing_interval_ms": 500},
                        "ownership_expiration_ms"),
                       ({"start": "middle"}, "start"),
                       ({"start": {0: "earliest", -1: 3}}, "partition")):
        with pytest.raises(ValueError, match=match):
            EventProcessor("127.0.0.1:1", "t", "g", on_event=print, **bad)  # type: ignore[arg-type]


def test_a_processor_without_its_broker_says_so_within_seconds() -> None:
    async def go() -> float:
        errors: list[BaseException] = []
        port = free_port()  # nothing listens there
        processor = EventProcessor(f"127.0.0.1:{port}", "t", "g", on_event=print,
                                   on_error=lambda context, e: errors.append(e),
                                   load_balancing_interval_ms=INTERVAL_MS,
                                   ownership_expiration_ms=EXPIRATION_MS)
        began = time.monotonic()
        await processor.start()
        try:
            while not errors and time.monotonic() - began < 10:
                await asyncio.sleep(0.05)
        finally:
            await processor.stop()
        assert errors and isinstance(errors[0], Unavailable), errors
        return time.monotonic() - began
    assert asyncio.run(go()) < 5
