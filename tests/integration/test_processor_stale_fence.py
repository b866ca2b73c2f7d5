"""A stale fence in the file checkpoint store is told, not looped over in silence.

Goal: the file store's fences live beside its checkpoints, so they outlast what
their epochs came from: a group moved from Redis to the broker's ownership store
(whose epochs count from 1), or a topic deleted and created again under the same
directory. The ownership store then keeps giving a partition to a processor whose
every registration the fence refuses, and before, the partition closed as
"ownership_lost" each cycle with nothing in the log and no on_error: it was never
processed and nobody was told. The same claim epoch refused twice is that case (a
race refuses an epoch once: whoever fenced a newer one holds the partition), so it
now goes to on_error and the log once, naming the fence and where the docs say
what to do; deleting the fence file (as they say) lets the partition work.

Method: a real broker process (the ownership store, epochs from 1), the real file
store with a fence of epoch 10**15 planted for partition 0 under another owner,
one processor on 0.5 s intervals; every wait bounded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sdk import Admin
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import FileCheckpointStore, OwnershipLost
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, produce, wait_for

PARTITIONS = 2
EVENTS = 5


def test_a_stale_fence_goes_to_on_error_and_its_removal_lets_the_partition_work(
        shared_broker: BrokerProcess, tmp_path: Path) -> None:
    async def go() -> None:
        topic = "stale-fence"
        async with Admin(shared_broker.address) as admin:
            await admin.create_topic(topic, partitions=PARTITIONS)
        await produce(shared_broker.address, topic, PARTITIONS, EVENTS)
        store = FileCheckpointStore(tmp_path)
        await store.fence("", topic, "g", 0, 10**15, "a-processor-of-long-ago")
        processed: set[tuple[int, int]] = set()
        errors: list[BaseException] = []

        async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
            processed.update((context.partition, offset) for offset in batch.offsets)
            await context.update_checkpoint(batch)

        processor = EventProcessor(
            shared_broker.address, topic, "g", owner_id="p", on_event=on_event,
            on_error=lambda context, error: errors.append(error), checkpoint_store=store,
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS)
        await processor.start()
        try:
            await wait_for(lambda: any("stale" in str(e) for e in errors), 20,
                           "on_error told of the stale fence",
                           state=lambda: f"errors {errors!r}, processed {sorted(processed)}")
            told = next(e for e in errors if "stale" in str(e))
            assert isinstance(told, OwnershipLost)
            assert "a-processor-of-long-ago" in str(told) and "docs/event-processor.md" in str(told)
            assert {p for p, _ in processed} == {1}  # partition 0 refused, partition 1 works
            fences = list(tmp_path.rglob("0.fence"))
            assert len(fences) == 1
            fences[0].unlink()  # what the docs say to do after a change of ownership store
            await wait_for(lambda: len(processed) == PARTITIONS * EVENTS, 20,
                           "partition 0 processed once its fence is gone",
                           state=lambda: f"processed {sorted(processed)}")
        finally:
            await processor.stop()
    asyncio.run(go())
