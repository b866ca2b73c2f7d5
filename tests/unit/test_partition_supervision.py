"""Partition task supervision: an unexpected exception never leaves a request waiting.

Goal: when the partition task meets an exception it does not expect (in the
append loop or in retention), the requests it holds and those that come next
fail at once with UNAVAILABLE naming the partition and the cause, the
traceback is logged once, and the partition reopens from the store after a
bounded backoff, so produce works again once the cause is gone, with no gap
or duplicate in the offsets.
Method: a real RocksStore on a temp dir whose reads can be made to raise (the
fault goes in through the Partition's constructor); every await is bounded by
a timeout, so a hang fails the test instead of stalling it. Also the pure
`RestartBackoff` and the generic `supervise` loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import grpc
import pytest

from broker.config import ConfigError, Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import Partition, TopicMeta, now_ms
from broker.processor_stores.rules import Claim
from broker.processor_stores.service import ProcessorStores
from broker.supervision import RestartBackoff, describe_cause, supervise
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb
from tests.support.wire import int_batch

WAIT_S = 10.0


class FaultyStore(RocksStore):
    """A RocksStore whose producer-state reads and expiry raise while `fault` is set."""

    fault: Exception | None = None

    def load_producer(self, topic_id: int, partition: int, producer_id: int) -> bytes | None:
        if self.fault is not None:
            raise self.fault
        return super().load_producer(topic_id, partition, producer_id)

    def get_value(self, family: str, key: bytes) -> bytes | None:
        if self.fault is not None and family == "ownership":
            raise self.fault
        return super().get_value(family, key)

    def expire_producers(self, topic_id: int, partition: int, used_before_ms: int) -> list[int]:
        if self.fault is not None:
            raise self.fault
        return super().expire_producers(topic_id, partition, used_before_ms)


def _request(keys: list[int], producer_id: int = 0) -> pb.ProduceRequest:
    return pb.ProduceRequest(topic="t", partition=0, batch=int_batch(keys),
                             producer_id=producer_id, sequence=0)


async def _open(path: Path) -> tuple[FaultyStore, Partition]:
    store = FaultyStore(str(path / "log.rocksdb"), fsync=False)
    meta = TopicMeta("t", 1, 1, 0, 0, 0)
    settings = Settings(task_restart_backoff_ms=200, task_restart_backoff_max_ms=400)
    partition = Partition(store, meta, 0, settings, store.recover_tail(1, 0))
    partition.start()
    return store, partition


async def _produce_when_back(partition: Partition, keys: list[int]) -> pb.ProduceResponse:
    """Produce, retrying while the partition says it is reopening (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await asyncio.wait_for(partition.submit(_request(keys)), WAIT_S)
        except BrokerError as e:
            assert e.kind.name == "partition_failed", e.message
            assert time.monotonic() < deadline, "the partition never reopened"
            await asyncio.sleep(0.02)


def test_failure_in_append_loop_fails_in_flight_and_later_requests_then_reopens(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        store, partition = await _open(tmp_path)
        first = await asyncio.wait_for(partition.submit(_request([1, 2, 3])), WAIT_S)
        assert first.base_offset == 0
        store.fault = OSError("disk on fire")
        # Both go into one group commit (queued while the task is busy, not written by
        # `submit` itself): the first moves the clock in memory, the second (an
        # idempotent producer) makes the task read the store.
        busy = asyncio.Event()

        async def hold(_: Partition) -> None:
            busy.set()
            await asyncio.sleep(0.05)

        held = partition.run_on_task(hold)
        await asyncio.wait_for(busy.wait(), WAIT_S)
        good = partition.submit(_request([4, 5]))
        bad = partition.submit(_request([6], producer_id=(1 << 63) + 7))
        for future in (good, bad):
            with pytest.raises(BrokerError) as failed:
                await asyncio.wait_for(future, WAIT_S)
            assert failed.value.code == grpc.StatusCode.UNAVAILABLE
            assert "'t'/0" in failed.value.message and "disk on fire" in failed.value.message
        with pytest.raises(BrokerError, match="disk on fire"):  # later ones: refused at once
            partition.submit(_request([7]))
        await asyncio.wait_for(held, WAIT_S)
        store.fault = None
        again = await _produce_when_back(partition, [8, 9])
        assert again.base_offset == 3  # what was in memory only was dropped: no gap
        assert partition.end_offset == 5
        await partition.stop()
        store.close()

    with caplog.at_level(logging.WARNING, logger="keybus.partition"):
        asyncio.run(scenario())
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1, [r.getMessage() for r in caplog.records]
    assert "partition t/0 failed" in tracebacks[0].getMessage()
    assert "disk on fire" in str(tracebacks[0].exc_info[1])  # type: ignore[index]


class FailingSyncStore(RocksStore):
    """A durable RocksStore whose WAL fsync raises while `fault` is set (the group's
    WriteBatch is already in RocksDB's memtable and WAL by then)."""

    fault: Exception | None = None

    def sync_wal(self) -> None:
        if self.fault is not None:
            raise self.fault
        super().sync_wal()


def test_failed_fsync_fails_the_group_and_reopens_from_what_the_store_holds(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FailingSyncStore(str(tmp_path / "log.rocksdb"), fsync=True)
        settings = Settings(task_restart_backoff_ms=200, task_restart_backoff_max_ms=400)
        partition = Partition(store, TopicMeta("t", 1, 1, 0, 0, 0), 0, settings,
                              store.recover_tail(1, 0))
        partition.start()
        assert (await asyncio.wait_for(partition.submit(_request([1, 2])), WAIT_S)).base_offset == 0
        store.fault = OSError("fsync failed")
        with pytest.raises(BrokerError) as failed:  # never acknowledged: not known durable
            await asyncio.wait_for(partition.submit(_request([3, 4, 5])), WAIT_S)
        assert failed.value.code == grpc.StatusCode.UNAVAILABLE
        assert "fsync failed" in failed.value.message
        assert partition.end_offset == 2  # nobody read what was not synced
        store.fault = None
        again = await _produce_when_back(partition, [6])
        # Reopened from the store, which holds the unsynced group: no offset is reused
        # for different events (a retry of an idempotent producer is a duplicate).
        assert again.base_offset == 5
        assert partition.end_offset == 6
        await partition.stop()
        store.close()

    asyncio.run(scenario())


def test_failure_in_retention_answers_the_trim_and_resumes(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, partition = await _open(tmp_path)
        await asyncio.wait_for(partition.submit(_request([1])), WAIT_S)
        store.fault = RuntimeError("retention bug")
        removed = await asyncio.wait_for(partition.enforce_retention(now_ms()), WAIT_S)
        assert removed == 0
        with pytest.raises(BrokerError, match="retention bug"):
            partition.submit(_request([2]))
        store.fault = None
        response = await _produce_when_back(partition, [3])
        assert response.base_offset == 1
        await partition.stop()
        store.close()

    asyncio.run(scenario())


class BlockingStore(RocksStore):
    """A RocksStore whose WAL fsync waits until released (an fsync stuck in the kernel;
    the partition runs it on a worker thread after writing the group on the loop)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, fsync=True)
        self.entered = threading.Event()
        self.release = threading.Event()

    def sync_wal(self) -> None:
        self.entered.set()
        self.release.wait(WAIT_S)
        super().sync_wal()


def test_stop_answers_the_group_in_flight(tmp_path: Path) -> None:
    store = BlockingStore(str(tmp_path / "log.rocksdb"))

    async def scenario() -> None:
        partition = Partition(store, TopicMeta("t", 1, 1, 0, 0, 0), 0, Settings(),
                              store.recover_tail(1, 0))
        partition.start()
        future = partition.submit(_request([1]))
        assert await asyncio.to_thread(store.entered.wait, WAIT_S)
        await partition.stop()
        with pytest.raises(BrokerError, match="shutting down"):
            await asyncio.wait_for(future, WAIT_S)
        store.release.set()

    asyncio.run(scenario())  # waits for the released append's thread
    store.close()


def test_processor_store_task_fails_the_round_then_restarts(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FaultyStore(str(tmp_path / "log.rocksdb"), fsync=False)
        settings = Settings(task_restart_backoff_ms=200, task_restart_backoff_max_ms=400)
        registry = TopicRegistry(store, settings)
        await registry.create("t", pb.TopicConfig(partitions=1))
        stores = ProcessorStores(store, registry, settings)
        stores.start()
        group = stores.group("ns", "t", "g")
        store.fault = RuntimeError("store bug")
        with pytest.raises(BrokerError, match=r"processor store task.*store bug") as failed:
            await asyncio.wait_for(stores.claim(group, [Claim(0, "a", "")]), WAIT_S)
        assert failed.value.code == grpc.StatusCode.UNAVAILABLE
        store.fault = None
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                won = await asyncio.wait_for(stores.claim(group, [Claim(0, "a", "")]), WAIT_S)
                break
            except BrokerError as e:
                assert "store bug" in e.message and time.monotonic() < deadline
                await asyncio.sleep(0.02)
        assert [partition for partition, _ in won] == [0]
        await stores.close()
        await registry.close()
        store.close()

    asyncio.run(scenario())


def test_restart_keeps_failing_while_the_cause_stays_and_logs_one_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    failures: list[int] = []
    restarts = {"left_to_fail": 2, "done": 0}

    async def body() -> None:
        if restarts["done"] == 0:
            raise ValueError("broken")

    def fail(error: Exception, retry_ms: int) -> None:
        failures.append(retry_ms)

    def restart() -> None:
        if restarts["left_to_fail"]:
            restarts["left_to_fail"] -= 1
            raise ValueError("broken")
        restarts["done"] += 1

    log = logging.getLogger("keybus.test.supervision")
    with caplog.at_level(logging.WARNING, logger=log.name):
        asyncio.run(asyncio.wait_for(
            supervise("job", body, fail, restart, RestartBackoff(1, 3), log), WAIT_S))
    assert failures == [1, 2, 3]  # doubling, capped
    assert sum(r.exc_info is not None for r in caplog.records) == 1
    assert any("restarted after 3 failure(s)" in r.getMessage() for r in caplog.records)


def test_backoff_doubles_to_its_cap_and_causes_are_one_bounded_line() -> None:
    backoff = RestartBackoff(100, 5_000)
    assert [backoff.delay_ms(n) for n in (1, 2, 3, 6, 7, 1_000)] == [100, 200, 400, 3_200,
                                                                     5_000, 5_000]
    cause = describe_cause(OSError("a\nb" + "x" * 500))
    assert cause.startswith("OSError: a b") and len(cause) == 200 and "\n" not in cause


def test_restart_backoff_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="task_restart_backoff_ms=0 must be > 0"):
        Settings(task_restart_backoff_ms=0)
    with pytest.raises(ConfigError, match="at most task_restart_backoff_max_ms=50"):
        Settings(task_restart_backoff_ms=100, task_restart_backoff_max_ms=50)
