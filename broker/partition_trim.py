"""A partition's retention pass, run on its task (behind the produces queued before it).

Retention removes whole records from the head: by age and size
(`log/retention.py` plans it from the head records' headers, on a worker
thread), never past the view's floor (`retention_floor`: what the compacted
view has not folded or a bootstrap still reads; looked at again once the plan
is made, since a bootstrap may pin its log meanwhile); a compacted topic rewrites
its head instead (`compact_head`). Idempotence state of producers unused for
`producer_expiry_ms` is dropped on the same pass, at most every
`producer_expiry_check_interval_ms`.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import takewhile
from typing import TYPE_CHECKING

from broker.log.retention import HeadRecord, plan_trim
from broker.log.rocks_store import head_records

if TYPE_CHECKING:
    from broker.partition import Partition


def below(head: Iterable[HeadRecord], floor: int | None) -> Iterable[HeadRecord]:
    """The head records retention may look at: those starting at or below
    `floor` (the one starting at it is never removed: plan_trim keeps the last)."""
    return head if floor is None else takewhile(lambda r: r.base_offset <= floor, head)


async def trim(partition: Partition, now_ms: int) -> int:
    """One pass; returns the records removed. Runs on the partition task."""
    partition.recent.clear()  # retention and compaction remove or rewrite records
    meta, store, index = partition.meta, partition.store, partition.index
    floor = partition.retention_floor() if partition.retention_floor is not None else None
    plan = None
    if partition.compact_head is not None:  # a compacted topic rewrites its head instead
        partition.start_offset, removed = await partition.compact_head(floor, now_ms)
        partition.bytes -= removed
    elif meta.retention_ms or meta.retention_bytes:
        plan = await partition.threads.run(lambda: plan_trim(
            below(head_records(store, meta.topic_id, index), floor),
            now_ms, meta.retention_ms, meta.retention_bytes, partition.bytes))
    if plan is not None and floor is not None and partition.retention_floor is not None \
            and partition.retention_floor() < plan.stop_offset:
        # A Bootstrap pinned log below the cut while the plan was made (it checked
        # removing_below, not set yet): keep it; the next pass plans with the pin.
        plan = None
    if plan is not None:
        partition.removing_below = plan.stop_offset
        await partition.threads.run(store.trim, meta.topic_id, index, plan.stop_offset,
                                plan.stop_scn, plan.stop_offset, partition.bytes - plan.bytes_removed)
        partition.start_offset = plan.stop_offset
        partition.bytes -= plan.bytes_removed
    settings = partition.settings
    if now_ms - partition.producers_checked_ms >= settings.producer_expiry_check_interval_ms:
        partition.producers_checked_ms = now_ms
        expired = await partition.threads.run(store.expire_producers, meta.topic_id, index,
                                          now_ms - settings.producer_expiry_ms)
        partition.producers.forget(expired)
    return plan.records_removed if plan else 0
