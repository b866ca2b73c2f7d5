"""Goal: a group commit makes its records durable before anything can see them, and only
then moves the durable end, fills the partition's recent records with the very bytes it
wrote and calls the listeners (the dispatchers' wake); with and without fsync (without,
a small group is written on the loop), and anything else that changes the log (a relay's
work on the task, retention) empties the recent records.

Method: a real Partition on a real RocksStore in a temp dir, on an event loop; produce
requests through `submit`, then compare the recent records with what the store returns for
the same offsets, and count listener calls.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.partition import Partition, TopicMeta
from sdk.accumulator import fill_batch
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb


def request(keys: list[int]) -> pb.ProduceRequest:
    out = pb.ProduceRequest(topic="t", partition=0)
    fill_batch(out.batch, keys, [b"v%d" % k for k in keys], slots_of(keys))
    return out


async def _commit_then_publish(path: Path, fsync: bool) -> None:
    store = RocksStore(str(path), fsync=fsync)
    meta = TopicMeta("t", 1, 1, 0, 0, 0)
    partition = Partition(store, meta, 0, Settings(fsync=fsync), store.recover_tail(1, 0))
    seen: list[int] = []
    partition.listeners.add(lambda: seen.append(partition.end_offset))
    partition.start()
    try:
        answers = await asyncio.gather(*(partition.submit(request([3 * i, 3 * i + 1, 3 * i + 2]))
                                         for i in range(4)))
        assert [a.base_offset for a in answers] == [0, 3, 6, 9]
        assert partition.end_offset == 12 and seen and seen[-1] == 12
        held = partition.recent.from_offset(4)
        assert held is not None and held[0][0] == 3
        stored = list(store.records_from(1, 0, 3))
        assert [(base, bytes(value)) for base, value in stored] == held
        await partition.run_on_task(lambda p: asyncio.sleep(0))  # e.g. a relay's append
        assert partition.recent.from_offset(4) is None
        await partition.submit(request([100]))
        assert partition.recent.from_offset(12) is not None  # contiguous again from here
        assert partition.recent.from_offset(4) is None
        await partition.enforce_retention(0)  # retention and compaction run on the task too
        assert partition.recent.from_offset(12) is None
    finally:
        await partition.stop()
        store.close()
    assert partition.closed


@pytest.mark.parametrize("fsync", [True, False])
def test_records_are_seen_only_once_durable_and_recent_holds_what_was_written(
        tmp_path: Path, fsync: bool) -> None:
    asyncio.run(_commit_then_publish(tmp_path / "db", fsync))


@pytest.mark.parametrize("fsync", [True, False])
def test_a_group_is_published_and_answered_before_the_partitions_task_resumes(
        tmp_path: Path, fsync: bool) -> None:
    """After the fsync, the listeners and the answers run in the fsync's callback (no task),
    ahead of what the loop queued meanwhile; without fsync, on the partition's task."""
    async def run() -> None:
        store = RocksStore(str(tmp_path / "db"), fsync=fsync)
        meta = TopicMeta("t", 1, 1, 0, 0, 0)
        partition = Partition(store, meta, 0, Settings(fsync=fsync), store.recover_tail(1, 0))
        published_in: list[object] = []
        partition.listeners.add(lambda: published_in.append(asyncio.current_task()))
        partition.start()
        try:
            answer = await partition.submit(request([1, 2]))
            assert answer.base_offset == 0 and partition.end_offset == 2
            if fsync:
                assert published_in == [None]
            else:
                task = published_in[0]
                assert isinstance(task, asyncio.Task) and "partition" in task.get_name()
        finally:
            await partition.stop()
            store.close()

    asyncio.run(run())


def test_a_compacted_topic_keeps_no_recent_records(tmp_path: Path) -> None:
    async def run() -> None:
        store = RocksStore(str(tmp_path / "db"), fsync=False)
        meta = TopicMeta("t", 1, 1, 0, 0, 0, view=True, compacted=True)
        partition = Partition(store, meta, 0, Settings(fsync=False), store.recover_tail(1, 0))
        partition.start()
        try:
            await partition.submit(request([1, 2]))
            assert partition.end_offset == 2 and partition.recent.from_offset(0) is None
        finally:
            await partition.stop()
            store.close()

    asyncio.run(run())
