"""One memory budget for every dispatcher's record cache (`cache_budget.py`).

Goal: what all dispatchers keep read stays within the broker's budget however
many subscriptions and partitions there are. Each cache gets an equal share,
never more than its own bound; a dispatcher that joins shrinks the others'
shares and wakes those that hold more, so their next round trims them (a
stalled subscription gives memory back too); one that leaves gives its share
back. The dispatcher's store reads shrink with the share, so a read is not
thrown away at once.

Method: the budget with small stand-in caches; real `RecordCache`s with real
stored records; a real subscription manager on a real RocksDB store
(subscriptions made and deleted through it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from broker.config import Settings
from broker.log.rocks_store import RocksStore
from broker.subscription.cache_budget import CacheBudget
from broker.subscription.delivery import RecordCache
from broker.subscription.manager import SubscriptionManager
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb
from tests.unit.test_subscription_delivery import stored


@dataclass(eq=False)
class Held:
    bytes: int = 0


def test_each_cache_gets_an_equal_share_within_its_own_bound() -> None:
    budget = CacheBudget(bytes_max=100, cache_bytes_max=40)
    caches = [Held() for _ in range(4)]
    shares = []
    for cache in caches:
        budget.join_all([(cache, lambda: None)])
        shares.append(budget.share)
    assert shares == [40, 40, 33, 25]  # never above the cache's own bound
    budget.leave(caches[0])
    budget.leave(caches[0])  # twice: nothing more changes
    assert (len(budget), budget.share) == (3, 33)


def test_a_join_wakes_the_dispatchers_whose_caches_hold_more_than_the_new_share() -> None:
    budget = CacheBudget(bytes_max=100, cache_bytes_max=50)
    woken: list[str] = []
    full, small = Held(50), Held(10)
    budget.join_all([(full, lambda: woken.append("full"))])
    budget.join_all([(small, lambda: woken.append("small"))])
    assert woken == []  # 50 each: nobody holds more
    budget.join_all([(Held(), lambda: woken.append("new"))])
    assert budget.share == 33 and woken == ["full"]
    assert budget.held() == 60


def test_a_subscription_joins_all_its_partitions_at_once() -> None:
    budget = CacheBudget(bytes_max=100, cache_bytes_max=50)
    woken: list[str] = []
    budget.join_all([(Held(50), lambda: woken.append("full"))])
    budget.join_all((Held(), lambda: woken.append("new")) for _ in range(3))
    assert (len(budget), budget.share, woken) == (4, 25, ["full"])


def test_a_cache_trims_to_its_share_and_grows_back_when_a_dispatcher_leaves() -> None:
    records = [stored(base, 3) for base in range(0, 24, 3)]
    record_memory = max(record.memory_bytes for record in records)
    budget = CacheBudget(bytes_max=8 * record_memory, cache_bytes_max=6 * record_memory)
    cache = RecordCache(6 * record_memory, budget)
    budget.join_all([(cache, lambda: None)])
    other = Held()
    budget.join_all([(other, lambda: None)])  # share: 4 records' memory
    for record in records:
        cache.add(record)
    assert cache.limit() == 4 * record_memory
    cache.trim(-1)  # the oldest go until what is left fits the share
    assert cache.bytes <= 4 * record_memory < cache.bytes + record_memory
    assert cache.find(23) is not None and cache.find(0) is None
    budget.leave(other)  # the share grows back to the cache's own bound
    assert cache.limit() == 6 * record_memory
    assert RecordCache(6 * record_memory).limit() == 6 * record_memory  # no budget: own bound


def test_the_manager_shares_one_budget_among_every_subscription_partition(tmp_path: Path
                                                                          ) -> None:
    settings = Settings(dispatch_cache_broker_bytes_max=12 << 20,
                        dispatch_cache_bytes_max=4 << 20)

    async def body() -> None:
        store = RocksStore(str(tmp_path), fsync=False)
        registry = TopicRegistry(store, settings)
        await registry.open()
        await registry.create("t", pb.TopicConfig(partitions=2))
        manager = SubscriptionManager(registry, store, settings, {})
        await manager.open()
        budget = manager.cache_budget
        for name in ("a", "b", "c"):
            await manager.ensure(pb.SubscribeOpen(
                topic="t", subscription=name, consumer_name="x", type=pb.KEY_SHARED,
                initial_position=pb.StartPosition(earliest=True)), created_ms=1)
        assert (len(budget), budget.share) == (6, 2 << 20)
        [dispatcher] = manager._subscription("t", "a").dispatchers[:1]
        assert dispatcher.cache.limit() == 2 << 20  # and the store reads with it
        await manager.delete("t", "a", force=True)
        assert (len(budget), budget.share) == (4, 3 << 20)
        await manager.close()
        assert len(budget) == 0
        await registry.close()
        store.close()

    asyncio.run(body())
