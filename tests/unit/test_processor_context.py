"""PartitionContext.update_checkpoint: what it stores, and what it refuses.

Goal: a checkpoint is only ever written for the context's own partition: an
event (or batch) of another partition or topic would be stored as this
partition's position, and the next owner would skip events.
Method: a real FileCheckpointStore in a temp dir; events and batches built as
the reader delivers them (pb.Record with topic and partition set).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdk.core.columns import Event
from sdk.core.pb import keybus_pb2 as pb
from sdk.processor.context import PartitionContext, monotonic_ms
from sdk.processor.metrics import ProcessorMetrics
from sdk.reader import ReadBatch
from sdk.stores import FileCheckpointStore, PartitionOwnership
from sdk.stores.fencing import OwnershipLost


def context_of(tmp_path: Path, partition: int) -> tuple[PartitionContext, FileCheckpointStore]:
    store = FileCheckpointStore(tmp_path)
    ownership = PartitionOwnership("", "orders", "billing", partition, "worker-a", "e1", 0, 1)
    metrics = ProcessorMetrics("orders", "billing", f"worker-a-{tmp_path.name}")
    # claimed just now: its lease runs (a claim sent at 0 would have lapsed long ago)
    return PartitionContext(ownership, store, False, metrics, 60_000, monotonic_ms()), store


def batch(topic: str, partition: int, base_offset: int, count: int) -> ReadBatch:
    record = pb.Record(topic=topic, partition=partition, base_offset=base_offset,
                       scn_first=base_offset + 1)
    record.batch.count = count
    return ReadBatch(record)


def test_own_partition_event_and_batch_are_stored(tmp_path: Path) -> None:
    context, store = context_of(tmp_path, 0)
    asyncio.run(context.update_checkpoint(Event(key=1, value=b"", topic="orders", partition=0,
                                                offset=9, scn=10)))
    assert asyncio.run(store.get_checkpoint("", "orders", "billing", 0)).offset == 9  # type: ignore[union-attr]
    asyncio.run(context.update_checkpoint(batch("orders", 0, 10, 5)))
    assert asyncio.run(store.get_checkpoint("", "orders", "billing", 0)).offset == 14  # type: ignore[union-attr]


@pytest.mark.parametrize("foreign", [
    Event(key=1, value=b"", topic="orders", partition=1, offset=49, scn=50),
    Event(key=1, value=b"", topic="payments", partition=0, offset=49, scn=50),
    batch("orders", 1, 40, 10),
    batch("payments", 0, 40, 10),
], ids=["event-other-partition", "event-other-topic", "batch-other-partition",
        "batch-other-topic"])
def test_another_partitions_event_is_refused(tmp_path: Path, foreign: Event | ReadBatch
                                              ) -> None:
    context, store = context_of(tmp_path, 0)
    with pytest.raises(ValueError, match=r"from (orders/1|payments/0), but this context is "
                                         r"orders/0"):
        asyncio.run(context.update_checkpoint(foreign))
    assert asyncio.run(store.get_checkpoint("", "orders", "billing", 0)) is None


def test_a_disowned_partition_is_not_checkpointed(tmp_path: Path) -> None:
    """A cycle found the partition lost while a callback still runs: refused, counted."""
    context, store = context_of(tmp_path, 0)
    context.disown()
    with pytest.raises(OwnershipLost, match=r"no longer owned by 'worker-a'.*offset 14\) was "
                                            r"not written"):
        asyncio.run(context.update_checkpoint(batch("orders", 0, 10, 5)))
    assert asyncio.run(store.get_checkpoint("", "orders", "billing", 0)) is None
    assert context._metrics.stats.checkpoints_refused == 1
