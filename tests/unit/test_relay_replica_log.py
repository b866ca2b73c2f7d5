"""Replica log: a follower stores the leader's records as they are, and drops a diverged tail.

Goal: rules 1-4 of `broker/relay/replica_log.py` on real partitions (real
RocksDB in a temp dir, no broker process): the copy is byte-for-byte the
leader's log with the same offsets, SCNs and producer state; anything that
does not continue the log is refused and stores nothing; a truncation cuts
whole records, rewinds producer state and ends readers waiting past it;
`epoch_end` finds where a log stops agreeing with an older epoch.

Method: a leader partition takes real produce requests; its stored records
are parsed and handed to a follower partition's replica path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log import codec
from broker.log.rocks_store import RocksStore
from broker.partition import Partition
from broker.read_path import ReadSpec
from broker.relay import replica_log
from broker.relay.replica_log import ReplicaError, plan_replica
from broker.topics import TopicRegistry
from broker.windows import PartitionClock
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb


async def open_partition(path: Path) -> tuple[TopicRegistry, Partition]:
    store = RocksStore(str(path), fsync=False)
    registry = TopicRegistry(store, Settings())
    await registry.open()
    await registry.create("t", pb.TopicConfig(partitions=1))
    return registry, registry.partition("t", 0)


def request(keys: list[int], producer_id: int = 0, sequence: int = 0, window: bool = False,
            scn: int = 0) -> pb.ProduceRequest:
    batch = pb.EventBatch(count=len(keys), key_ints=keys, slots=slots_of(keys),
                          values=[b"v%d" % k for k in keys])
    return pb.ProduceRequest(topic="t", batch=batch, producer_id=producer_id, sequence=sequence,
                             window=window, scn=scn)


def stored(partition: Partition) -> list[tuple[int, bytes]]:
    return [(base, bytes(value)) for base, value in
            partition.store.records_from(partition.meta.topic_id, partition.index, 0)]


def records(partition: Partition) -> list[pb.Record]:
    return [pb.Record.FromString(codec.record_bytes(v)) for _, v in stored(partition)]


def run(body: Callable[[Path], Awaitable[Any]], tmp_path: Path) -> Any:
    return asyncio.run(body(tmp_path))


def test_the_copy_is_the_leaders_log_byte_for_byte(tmp_path: Path) -> None:
    async def body(path: Path) -> None:
        leader_registry, leader = await open_partition(path / "leader")
        follower_registry, follower = await open_partition(path / "follower")
        leader.leader_epoch = 3
        await leader.submit(request([1, 2, 3], producer_id=7, sequence=0))
        await leader.submit(request([4, 5], window=True, scn=100))
        await leader.submit(request([6], producer_id=7, sequence=1))
        plan = await follower.run_on_task(lambda p: replica_log.replicate(p, records(leader)))
        assert plan.events == 6 and plan.next_offset == 6
        assert stored(follower) == stored(leader)
        assert (follower.end_offset, follower.last_scn) == (leader.end_offset, leader.last_scn)
        assert follower.store.load_producer(follower.meta.topic_id, 0, 7) == \
            leader.store.load_producer(leader.meta.topic_id, 0, 7)
        assert [r.leader_epoch for r in records(follower)] == [3, 3, 3]
        # Idempotence travels: the follower answers a retry of sequence 1 as a duplicate.
        follower.write_guard = None
        answer = await follower.submit(request([6], producer_id=7, sequence=1))
        assert answer.duplicate and answer.base_offset == 5
        await leader_registry.close()
        await follower_registry.close()
    run(body, tmp_path)


def test_records_that_do_not_continue_the_log_are_refused() -> None:
    batch = pb.EventBatch(count=2, key_ints=[1, 2], slots=slots_of([1, 2]), values=[b"a", b"b"])

    def record(base: int, scn: int, **extra: Any) -> pb.Record:
        return pb.Record(topic="t", base_offset=base, scn_first=scn, batch=batch, **extra)

    clock = PartitionClock(next_offset=10, last_scn=20)
    limits = (1 << 20, 100_000)
    with pytest.raises(ReplicaError, match="next offset is 10"):
        plan_replica([record(12, 30)], clock, 0, *limits)
    with pytest.raises(ReplicaError, match="not above the last SCN 20"):
        plan_replica([record(10, 20)], clock, 0, *limits)
    with pytest.raises(ReplicaError, match="subset"):
        plan_replica([record(10, 30, offsets=[10])], clock, 0, *limits)
    bad = pb.Record(topic="t", base_offset=10, scn_first=30,
                    batch=pb.EventBatch(count=2, key_ints=[1], values=[b"a", b"b"]))
    with pytest.raises(ReplicaError, match="key"):
        plan_replica([bad], clock, 0, *limits)
    plan = plan_replica([record(10, 30), record(12, 32)], clock, 0, *limits)
    assert (plan.next_offset, plan.last_scn, plan.events) == (14, 33, 4)
    # An empty log starts where the upstream's retained log starts.
    empty = plan_replica([record(500, 9)], PartitionClock(0, 0), 0, *limits)
    assert (empty.start_offset, empty.next_offset) == (500, 502)


def test_truncation_cuts_whole_records_and_rewinds_producer_state(tmp_path: Path) -> None:
    async def body(path: Path) -> None:
        registry, partition = await open_partition(path / "p")
        for sequence in range(3):
            await partition.submit(request(list(range(sequence * 10, sequence * 10 + 10)),
                                           producer_id=9, sequence=sequence))
        waiting = asyncio.ensure_future(partition.wait_for_data(30))
        await asyncio.sleep(0)
        seen: list[int] = []

        async def before_publish(end: int) -> None:
            seen.append(end)
        dropped = await partition.run_on_task(
            lambda p: replica_log.truncate(p, 15, before_publish))
        assert dropped is not None and (dropped.offset, dropped.events, dropped.records) == (10, 20, 2)
        assert seen == [10] and (partition.end_offset, partition.last_scn) == (10, 10)
        state = partition.store.load_producer(partition.meta.topic_id, 0, 9)
        assert state is not None and [r.sequence for r in codec.decode_producer_results(state)] == [0]
        assert not waiting.done()  # waits for new events past 30, as before
        waiting.cancel()
        # The producer's sequence 1 is new again: stored at offset 10.
        answer = await partition.submit(request([99], producer_id=9, sequence=1))
        assert not answer.duplicate and answer.base_offset == 10
        assert await partition.run_on_task(lambda p: replica_log.truncate(p, 50)) is None
        await registry.close()
    run(body, tmp_path)


def test_a_log_the_upstreams_retention_overtook_restarts_at_its_start(tmp_path: Path) -> None:
    """Rule 5: the log is emptied and goes on from the upstream's start; the offsets
    in between are announced removed, so a read of this broker that meets them ends
    with OUT_OF_RANGE instead of skipping them."""
    async def body(path: Path) -> None:
        leader_registry, leader = await open_partition(path / "leader")
        registry, follower = await open_partition(path / "follower")
        for first in range(0, 12, 2):  # records at offsets 0, 2, .., 10
            await leader.submit(request([first, first + 1]))
        upstream = records(leader)
        await follower.run_on_task(lambda p: replica_log.replicate(p, upstream[:3]))
        assert await follower.run_on_task(lambda p: replica_log.restart_at(p, 6)) is None
        restart = await follower.run_on_task(lambda p: replica_log.restart_at(p, 8))
        assert restart == replica_log.Restart(0, 6, 8)
        assert stored(follower) == [] and follower.removing_below == 8
        assert (follower.start_offset, follower.log_end, follower.end_offset, follower.bytes) \
            == (8, 8, 8, 0)
        tail = follower.store.recover_tail(follower.meta.topic_id, 0)  # as after a restart
        assert (tail.start_offset, tail.next_offset, tail.bytes) == (8, 8, 0)
        with pytest.raises(BrokerError, match="start offset 4 of t/0 was removed by retention"):
            follower.resolve_start(pb.StartPosition(offset=4))
        await follower.run_on_task(lambda p: replica_log.replicate(p, upstream[4:]))
        assert stored(follower) == stored(leader)[4:]
        spec = ReadSpec(follower.meta.topic_id, 0, None, 100, 1 << 20, None, None)
        chunk = await follower.read(spec, 4)  # a reader that was at offset 4
        assert chunk.records == [] and chunk.removed == (4, 8)
        assert follower.info().start_offset == 8
        await registry.close()
        await leader_registry.close()
    run(body, tmp_path)


def test_an_empty_log_whose_first_record_comes_later_marks_the_offsets_before(
        tmp_path: Path) -> None:
    """Rule 2's empty log at offset 0 taking a first record at 4: a reader at 0 is
    told 0..3 were removed, never moved past them in silence."""
    async def body(path: Path) -> None:
        leader_registry, leader = await open_partition(path / "leader")
        registry, follower = await open_partition(path / "follower")
        for first in range(0, 6, 2):
            await leader.submit(request([first, first + 1]))
        await follower.run_on_task(lambda p: replica_log.replicate(p, records(leader)[2:]))
        assert (follower.start_offset, follower.removing_below) == (4, 4)
        spec = ReadSpec(follower.meta.topic_id, 0, None, 100, 1 << 20, None, None)
        assert (await follower.read(spec, 0)).removed == (0, 4)
        await registry.close()
        await leader_registry.close()
    run(body, tmp_path)


def test_epoch_end_finds_the_first_record_of_a_later_epoch(tmp_path: Path) -> None:
    async def body(path: Path) -> None:
        registry, partition = await open_partition(path / "p")
        for epoch in (0, 0, 1, 1, 3):
            partition.leader_epoch = epoch
            await partition.submit(request([1, 2]))
        tid, store = partition.meta.topic_id, partition.store

        def end(epoch: int) -> int:
            return replica_log.epoch_end(store, tid, 0, 0, partition.end_offset, epoch)
        assert [end(e) for e in (0, 1, 2, 3, 4)] == [4, 8, 8, 10, 10]
        assert replica_log.last_epoch(store, tid, 0, partition.end_offset) == 3
        assert replica_log.last_epoch(store, tid, 0, 0) == 0
        await registry.close()
    run(body, tmp_path)


def test_a_record_whose_slots_do_not_match_its_keys_is_refused(tmp_path: Path) -> None:
    async def body(path: Path) -> None:
        registry, partition = await open_partition(path / "p")
        wrong = pb.Record(topic="t", base_offset=0, scn_first=1, batch=pb.EventBatch(
            count=2, key_ints=[1, 2], slots=[7, 7], values=[b"a", b"b"]))
        with pytest.raises(BrokerError, match="slot"):
            await partition.run_on_task(lambda p: replica_log.replicate(p, [wrong]))
        assert stored(partition) == [] and partition.end_offset == 0
        await registry.close()
    run(body, tmp_path)


def test_a_truncation_below_the_start_starts_the_log_over_at_zero(tmp_path: Path) -> None:
    """Rule 6: a follower whose log starts at 4 (the offsets before announced removed)
    drops it whole for another log (its upstream's topic created again) that begins
    at 0 with lower SCNs: the log is a new partition's, whose first record at 0 is
    taken; readers and subscriptions are sent to 0. Before, it stayed empty at 4 with
    the old SCN clock, and offset 0 was refused for ever."""
    async def body(path: Path) -> None:
        old_registry, old = await open_partition(path / "old")
        new_registry, new = await open_partition(path / "new")
        registry, follower = await open_partition(path / "follower")
        for first in range(0, 8, 2):
            await old.submit(request([first, first + 1], producer_id=7, sequence=first // 2))
        await new.submit(request([100, 101]))
        await follower.run_on_task(lambda p: replica_log.replicate(p, records(old)[2:]))
        follower.set_high_watermark(8)
        assert (follower.start_offset, follower.removing_below, follower.log_end) == (4, 4, 8)
        seen: list[int] = []

        async def before_publish(end: int) -> None:
            seen.append(end)
        dropped = await follower.run_on_task(
            lambda p: replica_log.truncate(p, 0, before_publish))
        assert dropped is not None and (dropped.offset, dropped.end_before, dropped.records,
                                        dropped.events) == (4, 8, 2, 4)
        assert seen == [0] and stored(follower) == []
        assert (follower.start_offset, follower.removing_below, follower.log_end,
                follower.end_offset, follower.clock.last_scn, follower.bytes) == (0, 0, 0, 0, 0, 0)
        assert follower.limit.high_watermark == 0 and follower.truncations[-1] == 0
        assert follower.store.producer_states(follower.meta.topic_id, 0) == {}
        tail = follower.store.recover_tail(follower.meta.topic_id, 0)  # as after a restart
        assert (tail.start_offset, tail.next_offset, tail.bytes) == (0, 0, 0)
        await follower.run_on_task(lambda p: replica_log.replicate(p, records(new)))
        assert stored(follower) == stored(new)
        spec = ReadSpec(follower.meta.topic_id, 0, None, 100, 1 << 20, None, None)
        assert (await follower.read(spec, 0)).removed is None
        for closing in (registry, new_registry, old_registry):
            await closing.close()
    run(body, tmp_path)
