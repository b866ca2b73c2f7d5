"""A truncation rolls back the compacted view and ends readers past the cut.

Goal: the relay node's truncation hook (`RelayNode._truncated`, run before
readers wake) rebuilds a view that folded events past the cut, so no dropped
event stays in it; `Partition.check_truncation` ends a read past the cut. A
view folds only below the high watermark, which no truncation cuts, so in a
cluster this is a safety net: here the partition has no high watermark (a
log written without one) to reach it.

Method: a real partition with a view (RocksDB in a temp dir, no broker
process) takes real produce requests; `replica_log.truncate` cuts its tail
with the node's hook; the view is read through its store.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.partition import now_ms
from broker.relay import replica_log
from broker.relay.node import RelayNode
from broker.relay.settings import RelaySettings
from broker.topics import TopicRegistry
from broker.view.codec import decode_entry, entries_prefix, split_entry_suffix
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb


def produce(keys: list[int], value: bytes) -> pb.ProduceRequest:
    batch = pb.EventBatch(count=len(keys), key_ints=keys, slots=slots_of(keys),
                          values=[value] * len(keys))
    return pb.ProduceRequest(topic="t", batch=batch)


def view_offsets(registry: TopicRegistry) -> dict[object, int]:
    """key -> offset of the event the view holds for it."""
    views = registry.views.views
    prefix = entries_prefix(registry.meta("t").topic_id, 0)
    found: dict[object, int] = {}
    it = views.iterator()
    it.seek(prefix)
    while it.valid() and bytes(it.key()).startswith(prefix):
        found[split_entry_suffix(bytes(it.key())[len(prefix):])[1]] = \
            decode_entry(bytes(it.value())).offset
        it.next()
    return found


async def scenario(path: Path) -> None:
    store = RocksStore(str(path), fsync=False)
    registry = TopicRegistry(store, Settings(view_linger_ms=100))  # passes soon
    await registry.open()
    try:
        await registry.create("t", pb.TopicConfig(partitions=1, view=pb.VIEW_ON))
        partition = registry.partition("t", 0)
        view = registry.views.of("t", 0)
        await partition.submit(produce(list(range(10)), b"kept"))
        await partition.submit(produce(list(range(5, 15)), b"dropped"))
        assert await view.wait_for(20, 10)
        assert view_offsets(registry) == {**{k: k for k in range(5)},
                                          **{k: k + 5 for k in range(5, 15)}}
        mark = len(partition.truncations)
        relay = RelaySettings("b", "127.0.0.1:1", "", "/keybus", 4000, 100, 1000, 1000, 1000, 1000)
        node = RelayNode(registry, None, relay)
        dropped = await partition.run_on_task(lambda p: replica_log.truncate(
            p, 10, lambda end: node._truncated("t", 0, end)))
        assert dropped is not None and dropped.events == 10
        assert await view.wait_for(10, 10)
        assert view_offsets(registry) == {k: k for k in range(10)}  # as before the tail
        assert view.state.offset_next == 10 and view.state.keys == 10
        partition.check_truncation(mark, 10)  # at the cut: reads on
        with pytest.raises(BrokerError, match="truncated to offset 10"):
            partition.check_truncation(mark, 12)
    finally:
        await registry.close()


def test_a_truncation_rebuilds_a_view_past_the_cut(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path / "db"))


async def trimmed_scenario(path: Path) -> None:
    store = RocksStore(str(path), fsync=False)
    registry = TopicRegistry(store, Settings(view_linger_ms=100))  # passes soon
    await registry.open()
    try:
        # about 1 kB, 1 kB, 50 kB, 50 kB: retention keeps the last two records
        await registry.create("t", pb.TopicConfig(partitions=1, view=pb.VIEW_ON,
                                                  retention_bytes=101_000))
        partition = registry.partition("t", 0)
        view = registry.views.of("t", 0)
        await partition.submit(produce(list(range(10)), b"x" * 100))  # offsets 0-9
        await partition.submit(produce(list(range(10, 20)), b"x" * 100))  # 10-19
        await partition.submit(produce(list(range(20, 25)), b"k" * 10_000))  # 20-24
        await partition.submit(produce(list(range(25, 30)), b"d" * 10_000))  # 25-29
        assert await view.wait_for(30, 10)
        assert await partition.enforce_retention(now_ms()) == 2
        assert partition.start_offset == 20
        relay = RelaySettings("b", "127.0.0.1:1", "", "/keybus", 4000, 100, 1000, 1000, 1000, 1000)
        node = RelayNode(registry, None, relay)
        await partition.run_on_task(lambda p: replica_log.truncate(
            p, 25, lambda end: node._truncated("t", 0, end)))
        assert await view.wait_for(25, 10), view.state
        # keys 0-19 were only in the trimmed records: the rebuilt view lacks them, and says so
        assert set(view_offsets(registry)) == set(range(20, 25))
        assert view.gap == 20
        assert registry.views.views.gap(registry.meta("t").topic_id, 0) == 20
    finally:
        await registry.close()


def test_a_rebuild_over_a_trimmed_log_records_the_keys_it_lacks(tmp_path: Path) -> None:
    """Before, the rebuilt view lacked the keys only in the trimmed records and had no
    gap: Bootstrap served it as whole."""
    asyncio.run(trimmed_scenario(tmp_path / "db"))
