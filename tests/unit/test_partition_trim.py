"""A retention pass never removes log that a bootstrap pinned while the pass was planned.

Goal: `trim` plans on a worker thread (the event loop runs meanwhile) from the
retention floor it read before. A Bootstrap stream that pins its snapshot
offset in that moment passed its own check (nothing was being removed yet),
so the pass must look at the floor again before it cuts: the old pass cut past
the pin, and the stream's catch-up then failed with OUT_OF_RANGE (a Spark
snapshot micro-batch read past it, docs/spark.md). Method: a real RocksDB
store with 6 records of 5 events (offsets 0..29), a retention of 1 byte (every
record but the newest may go) and a partition shell whose worker thread takes
a pin while it plans; the next pass, with the pin gone, cuts as planned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.log import codec as log_codec
from broker.log.rocks_store import Append, RocksStore
from broker.partition_trim import trim
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb

RECORDS, EVENTS = 6, 5


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksStore]:
    store = RocksStore(str(tmp_path / "db"), fsync=False)
    appends = []
    for base in range(0, RECORDS * EVENTS, EVENTS):
        keys = list(range(base, base + EVENTS))
        batch = pb.EventBatch(count=EVENTS, key_ints=keys, slots=slots_of(keys),
                              values=[b"v%d" % k for k in keys])
        record = pb.Record(topic="t", partition=0, base_offset=base, scn_first=base + 1,
                           publish_time_ms=1, batch=batch)
        appends.append(Append(base, base + 1, EVENTS, False, log_codec.encode_record(
            record.SerializeToString(), 1, EVENTS, base + 1, False)))
    store.append(1, 0, appends, {}, 0, 0)
    yield store
    store.close()


class Threads:
    """Runs the plan at once, then `meanwhile` (what the event loop did while it ran)."""

    def __init__(self) -> None:
        self.meanwhile: Callable[[], None] = lambda: None

    async def run(self, work: Callable[..., Any], *args: Any) -> Any:
        result = work(*args)
        self.meanwhile()
        self.meanwhile = lambda: None
        return result


def _partition(store: RocksStore, floor: list[int]) -> Any:
    return SimpleNamespace(
        recent=set(), store=store, index=0, threads=Threads(),
        meta=SimpleNamespace(topic_id=1, retention_ms=0, retention_bytes=1),
        retention_floor=lambda: min(floor), compact_head=None, removing_below=0,
        start_offset=0, bytes=10_000, producers_checked_ms=0,
        settings=SimpleNamespace(producer_expiry_check_interval_ms=10**12))


def test_a_pin_taken_while_the_pass_plans_is_kept(store: RocksStore) -> None:
    floor = [30]  # the view holds everything; no pin yet
    partition = _partition(store, floor)
    partition.threads.meanwhile = lambda: floor.append(10)  # a bootstrap pins offset 10
    assert asyncio.run(trim(partition, now_ms=0)) == 0
    assert (partition.start_offset, partition.removing_below) == (0, 0)
    assert asyncio.run(trim(partition, now_ms=0)) == 2  # planned with the pin: up to it
    assert partition.start_offset == 10
    floor.remove(10)  # the bootstrap is done
    assert asyncio.run(trim(partition, now_ms=0)) == 3  # every record but the newest
    assert partition.start_offset == 25
