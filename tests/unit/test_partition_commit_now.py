"""Goal: a produce request that finds the partition's task waiting for work is committed
by `submit` itself (`Partition._commit_now`), without waiting for the task to be woken,
and keeps every promise of a commit by the task: nothing is seen or answered before it is
durable, requests that arrive during its fsync gather into the next group, in order,
each answered once; a failure reaches supervision (answered, then the partition reopens
from the store); a stop answers it and publishes nothing afterwards.

Method: a real Partition on a real RocksStore in a temp dir, on an event loop, whose WAL
fsync can be held or made to fail; the listeners (what wakes the dispatchers) note when
and where they run. The partition is made idle first by one request through its task.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import Partition, TopicMeta
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import int_batch

WAIT_S = 10.0


class HeldSyncStore(RocksStore):
    """A RocksStore whose WAL fsync waits while `hold` is clear, and raises `fault`."""

    def __init__(self, path: str, fsync: bool) -> None:
        super().__init__(path, fsync=fsync)
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.fault: Exception | None = None

    def sync_wal(self) -> None:
        self.entered.set()
        self.hold.wait(WAIT_S)
        if self.fault is not None:
            raise self.fault
        super().sync_wal()


def request(keys: list[int]) -> pb.ProduceRequest:
    return pb.ProduceRequest(topic="t", partition=0, batch=int_batch(keys))


@asynccontextmanager
async def idle_partition(path: Path, fsync: bool
                         ) -> AsyncIterator[tuple[HeldSyncStore, Partition, list[tuple[int, object]]]]:
    """A started partition whose task waits for work, and its listener's notes: the end
    offset and the task each publish ran in (None: a loop callback)."""
    store = HeldSyncStore(str(path / "db"), fsync)
    settings = Settings(fsync=fsync, task_restart_backoff_ms=100, task_restart_backoff_max_ms=200)
    partition = Partition(store, TopicMeta("t", 1, 1, 0, 0, 0), 0, settings,
                          store.recover_tail(1, 0))
    published: list[tuple[int, object]] = []
    partition.listeners.add(lambda: published.append(
        (partition.end_offset, asyncio.current_task())))
    partition.start()
    try:
        first = partition.submit(request([0]))  # the task has not run yet: queued for it
        assert (await asyncio.wait_for(first, WAIT_S)).base_offset == 0
        published.clear()
        yield store, partition, published
    finally:
        store.hold.set()
        await partition.stop()
        store.close()


def test_without_fsync_a_request_is_durable_published_and_answered_within_submit(
        tmp_path: Path) -> None:
    async def run() -> None:
        async with idle_partition(tmp_path, fsync=False) as (store, partition, published):
            answer = partition.submit(request([1, 2]))
            assert answer.done(), "the answer waited for the partition's task"
            assert answer.result().base_offset == 1 and partition.end_offset == 3
            assert published == [(3, asyncio.current_task())]  # the caller's step
            assert [base for base, _ in store.records_from(1, 0, 0)] == [0, 1]

    asyncio.run(run())


def test_with_fsync_requests_arriving_during_its_fsync_gather_into_the_next_group(
        tmp_path: Path) -> None:
    async def run() -> None:
        async with idle_partition(tmp_path, fsync=True) as (store, partition, published):
            store.hold.clear()
            store.entered.clear()
            now = partition.submit(request([1]))
            assert await asyncio.to_thread(store.entered.wait, WAIT_S)  # its fsync runs
            assert not now.done() and partition.end_offset == 1  # nothing seen before it
            later = [partition.submit(request([2 + i, 12 + i])) for i in range(3)]
            await asyncio.sleep(0.05)
            assert partition.end_offset == 1 and not any(f.done() for f in later)
            store.hold.set()
            answers = await asyncio.wait_for(asyncio.gather(now, *later), WAIT_S)
            assert [a.base_offset for a in answers] == [1, 2, 4, 6]
            # one publish for the request `submit` wrote, in the fsync's callback (no
            # task), then one for the three that gathered behind it: one group commit
            assert published == [(2, None), (8, None)]

    asyncio.run(run())


@pytest.mark.parametrize("fsync", [True, False])
def test_a_failure_in_the_commit_submit_ran_goes_to_supervision_and_the_partition_reopens(
        tmp_path: Path, fsync: bool) -> None:
    async def run() -> None:
        async with idle_partition(tmp_path, fsync) as (store, partition, _):
            if fsync:
                store.fault = OSError("fsync failed")
            else:  # a dispatcher's wake that raises, in the caller's step
                partition.listeners.add(_raises)
            with pytest.raises(BrokerError) as failed:
                await asyncio.wait_for(partition.submit(request([1, 2])), WAIT_S)
            assert failed.value.code == grpc.StatusCode.UNAVAILABLE
            assert ("fsync failed" if fsync else "listener bug") in failed.value.message
            store.fault = None
            partition.listeners.discard(_raises)
            for _ in range(int(WAIT_S / 0.02)):  # reopened from the store, after a backoff
                try:
                    again = await asyncio.wait_for(partition.submit(request([3])), WAIT_S)
                    break
                except BrokerError as e:
                    assert e.kind.name == "partition_failed", e.message
                    await asyncio.sleep(0.02)
            else:
                raise AssertionError("the partition never reopened")
            # the store holds the failed request's records (written, then not synced, or
            # synced before the listener raised): their offsets are not given again
            assert again.base_offset == 3 and partition.end_offset == 4

    asyncio.run(run())


def _raises() -> None:
    raise RuntimeError("listener bug")


def test_stop_during_its_fsync_answers_it_and_publishes_nothing_after(tmp_path: Path) -> None:
    async def run() -> None:
        async with idle_partition(tmp_path, fsync=True) as (store, partition, published):
            store.hold.clear()
            store.entered.clear()
            answer = partition.submit(request([1]))
            assert await asyncio.to_thread(store.entered.wait, WAIT_S)
            await partition.stop()  # (it tells the listeners itself)
            published.clear()
            with pytest.raises(BrokerError, match="shutting down"):
                await asyncio.wait_for(answer, WAIT_S)
            store.hold.set()
            await asyncio.sleep(0.05)  # the fsync's callback, had it anything to do
            assert published == [] and partition.end_offset == 1

    asyncio.run(run())
