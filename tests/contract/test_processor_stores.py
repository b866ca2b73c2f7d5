"""One contract for every ownership store and every checkpoint store.

Goal: the event processor may run on any pair of stores, so each store must
keep the same promises: a claim is a compare-and-set on the etag (a new
record only where none exists), exactly one of racing claims wins, only the
winners come back, a change of owner raises the epoch and a renewal or
release keeps it; checkpoints are last-writer-wins per partition (the
broker's store also names the topic's incarnation in what it answers); a fencing
store (the broker's, the file store) refuses an older epoch and says who
owns the partition.
Method: the same tests, parametrized over the broker's stores (a real broker
process), Redis (a real redis-server) and the file store; every test uses a
group of its own, so they share the servers.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, FailedPrecondition, InvalidArgument
from sdk.stores import (
    BrokerCheckpointStore,
    BrokerOwnershipStore,
    Checkpoint,
    FileCheckpointStore,
    OwnershipLost,
    PartitionOwnership,
    RedisOwnershipStore,
)
from tests.support.broker_process import BrokerProcess
from tests.support.processors import produce, redis_server  # noqa: F401
from tests.support.redis_server import RedisServer

TOPIC, PARTITIONS, EVENTS = "contract", 4, 50
_groups = itertools.count()


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    async def prepare() -> None:
        async with Admin(shared_broker.address) as admin:
            await admin.create_topic(TOPIC, partitions=PARTITIONS)
        await produce(shared_broker.address, TOPIC, PARTITIONS, EVENTS)
    asyncio.run(prepare())
    return shared_broker


def group() -> str:
    return f"g{next(_groups)}-{time.monotonic_ns()}"


@pytest.fixture(params=["broker", "redis"])
def ownership_factory(request: pytest.FixtureRequest, broker: BrokerProcess
                      ) -> Iterator[Callable[[], Any]]:
    if request.param == "broker":
        yield lambda: BrokerOwnershipStore(broker.address)
    else:
        redis: RedisServer = request.getfixturevalue("redis_server")
        yield lambda: RedisOwnershipStore(redis.url, ttl_ms=60_000)


@pytest.fixture(params=["broker", "file"])
def checkpoint_factory(request: pytest.FixtureRequest, broker: BrokerProcess,
                       tmp_path: Path) -> Callable[[], Any]:
    if request.param == "broker":
        return lambda: BrokerCheckpointStore(broker.address)
    return lambda: FileCheckpointStore(tmp_path)


def run_with(factory: Callable[[], Any], body: Callable[[Any], Awaitable[None]]) -> None:
    async def go() -> None:
        store = factory()
        try:
            await body(store)
        finally:
            if hasattr(store, "close"):
                await store.close()
    asyncio.run(go())


def claim(g: str, partition: int, owner: str, etag: str | None = None,
          namespace: str = "ns") -> PartitionOwnership:
    return PartitionOwnership(namespace, TOPIC, g, partition, owner, etag)


# ---------------------------------------------------------------- ownership


def test_a_new_record_only_where_none_exists(ownership_factory: Callable[[], Any]) -> None:
    g = group()

    async def body(store: Any) -> None:
        assert await store.list_ownership("ns", TOPIC, g) == []
        before = time.time_ns() // 1_000_000
        [won] = await store.claim_ownership([claim(g, 1, "a")])
        assert (won.partition, won.owner_id, won.consumer_group) == (1, "a", g)
        assert won.etag and won.epoch >= 1
        assert before - 5_000 <= won.last_modified_ms <= time.time_ns() // 1_000_000 + 5_000
        assert await store.claim_ownership([claim(g, 1, "b")]) == []
        assert await store.list_ownership("ns", TOPIC, g) == [won]
    run_with(ownership_factory, body)


def test_renewal_keeps_the_epoch_and_a_stale_etag_loses(ownership_factory: Callable[[], Any]
                                                        ) -> None:
    g = group()

    async def body(store: Any) -> None:
        [first] = await store.claim_ownership([claim(g, 0, "a")])
        [renewed] = await store.claim_ownership([first])
        assert renewed.etag != first.etag and renewed.epoch == first.epoch
        assert renewed.last_modified_ms >= first.last_modified_ms
        assert await store.claim_ownership([replace(first, owner_id="b")]) == []
        assert await store.list_ownership("ns", TOPIC, g) == [renewed]
    run_with(ownership_factory, body)


def test_a_new_owner_raises_the_epoch_and_a_release_keeps_it(
        ownership_factory: Callable[[], Any]) -> None:
    g = group()

    async def body(store: Any) -> None:
        [a] = await store.claim_ownership([claim(g, 2, "a")])
        [b] = await store.claim_ownership([replace(a, owner_id="b")])
        assert b.owner_id == "b" and b.epoch > a.epoch
        [released] = await store.claim_ownership([replace(b, owner_id="")])
        assert released.owner_id == "" and released.epoch == b.epoch
        listed = await store.list_ownership("ns", TOPIC, g)
        assert [(o.partition, o.owner_id) for o in listed] == [(2, "")]
        [again] = await store.claim_ownership([replace(released, owner_id="b")])
        assert again.epoch > b.epoch
    run_with(ownership_factory, body)


def test_only_the_winners_come_back_from_a_mixed_request(
        ownership_factory: Callable[[], Any]) -> None:
    g = group()

    async def body(store: Any) -> None:
        [taken] = await store.claim_ownership([claim(g, 0, "a")])
        won = await store.claim_ownership([claim(g, p, "b") for p in range(PARTITIONS)])
        assert sorted(o.partition for o in won) == [1, 2, 3]
        assert all(o.owner_id == "b" for o in won)
        listed = await store.list_ownership("ns", TOPIC, g)
        assert [o.owner_id for o in listed] == ["a", "b", "b", "b"]
        assert listed[0] == taken
    run_with(ownership_factory, body)


def test_exactly_one_of_racing_claims_wins(ownership_factory: Callable[[], Any]) -> None:
    g = group()
    racers = 6

    async def body(_: Any) -> None:
        stores = [ownership_factory() for _ in range(racers)]
        try:
            for partition in range(PARTITIONS):
                won = await asyncio.gather(*(
                    s.claim_ownership([claim(g, partition, f"r{i}")])
                    for i, s in enumerate(stores)))
                assert sum(len(w) for w in won) == 1, won
                [record] = [w[0] for w in won if w]
                # A second race, on the record's etag: again exactly one.
                won = await asyncio.gather(*(
                    s.claim_ownership([replace(record, owner_id=f"s{i}")])
                    for i, s in enumerate(stores)))
                assert sum(len(w) for w in won) == 1, won
        finally:
            for s in stores:
                await s.close()
    run_with(ownership_factory, body)


def test_groups_and_namespaces_are_apart(ownership_factory: Callable[[], Any]) -> None:
    g = group()

    async def body(store: Any) -> None:
        odd = "ns:{1}/x y"
        await store.claim_ownership([claim(g, 0, "a", namespace=odd)])
        await store.claim_ownership([claim(g + "x", 0, "b")])
        assert [o.owner_id for o in await store.list_ownership(odd, TOPIC, g)] == ["a"]
        assert await store.list_ownership("ns", TOPIC, g) == []
        assert [o.owner_id for o in await store.list_ownership("ns", TOPIC, g + "x")] == ["b"]
    run_with(ownership_factory, body)


# ---------------------------------------------------------------- checkpoints


def test_checkpoints_are_last_writer_wins_per_partition(
        checkpoint_factory: Callable[[], Any]) -> None:
    g = group()

    async def body(store: Any) -> None:
        assert await store.list_checkpoints("ns", TOPIC, g) == []
        assert await store.get_checkpoint("ns", TOPIC, g, 0) is None
        await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 3, 10, 11))
        await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 0, 40, 41))
        await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 3, 5, 6))  # backwards is allowed
        got = await store.get_checkpoint("ns", TOPIC, g, 3)
        # Written without the topic's incarnation (an older processor): the file store
        # keeps none, the broker's names the topic's (its checkpoints go with the topic).
        assert replace(got, incarnation="") == Checkpoint("ns", TOPIC, g, 3, 5, 6)
        assert len(got.incarnation) == (16 if isinstance(store, BrokerCheckpointStore) else 0)
        assert [(c.partition, c.offset) for c in await store.list_checkpoints("ns", TOPIC, g)] \
            == [(0, 40), (3, 5)]
        assert await store.list_checkpoints("other", TOPIC, g) == []
    run_with(checkpoint_factory, body)


@pytest.mark.parametrize("kind", ["broker", "file"])
def test_a_fencing_store_refuses_an_older_epoch_and_names_the_owner(
        kind: str, broker: BrokerProcess, tmp_path: Path) -> None:
    g = group()

    async def body(store: Any) -> None:
        assert store.supports_fencing
        await store.fence("ns", TOPIC, g, 1, 5, "owner-a")
        await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 1, 7, 8, epoch=5))
        with pytest.raises(OwnershipLost, match="owner-a"):
            await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 1, 9, 10, epoch=4))
        with pytest.raises(FailedPrecondition, match="never registered") as refused:
            await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 1, 9, 10, epoch=6))
        assert not isinstance(refused.value, OwnershipLost)
        with pytest.raises(OwnershipLost, match="owner-a"):
            await store.fence("ns", TOPIC, g, 1, 4, "owner-b")
        with pytest.raises(OwnershipLost, match="one owner"):
            await store.fence("ns", TOPIC, g, 1, 5, "owner-b")
        await store.fence("ns", TOPIC, g, 1, 5, "owner-a")  # idempotent
        await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 1, 12, 13, epoch=0))  # unfenced
        assert (await store.get_checkpoint("ns", TOPIC, g, 1)).offset == 12  # type: ignore[union-attr]
    run_with(lambda: BrokerCheckpointStore(broker.address) if kind == "broker"
             else FileCheckpointStore(tmp_path), body)


def test_a_broker_claim_fences_the_broker_checkpoints(broker: BrokerProcess) -> None:
    g = group()

    async def body(ownership: Any) -> None:
        async with BrokerCheckpointStore(broker.address) as checkpoints:
            [a] = await ownership.claim_ownership([claim(g, 0, "a")])
            await checkpoints.update_checkpoint(Checkpoint("ns", TOPIC, g, 0, 3, 4, a.epoch))
            [b] = await ownership.claim_ownership([replace(a, owner_id="b")])
            with pytest.raises(OwnershipLost, match="'b'"):
                await checkpoints.update_checkpoint(Checkpoint("ns", TOPIC, g, 0, 9, 9, a.epoch))
            await checkpoints.update_checkpoint(Checkpoint("ns", TOPIC, g, 0, 9, 9, b.epoch))
            # An epoch registered from elsewhere (e.g. Redis) is above the record's:
            # the next broker claim, even a renewal, goes above it.
            await checkpoints.fence("ns", TOPIC, g, 0, b.epoch + 100, "c")
            [renewed] = await ownership.claim_ownership([b])
            assert renewed.epoch == b.epoch + 101
    run_with(lambda: BrokerOwnershipStore(broker.address), body)


def test_the_broker_refuses_what_a_client_could_get_wrong(broker: BrokerProcess) -> None:
    g = group()

    async def body(store: Any) -> None:
        with pytest.raises(InvalidArgument, match=r"not in the log; allowed 0\.\.49"):
            await store.update_checkpoint(Checkpoint("ns", TOPIC, g, 0, EVENTS, 1))
        with pytest.raises(InvalidArgument, match="out of range"):
            await store.update_checkpoint(Checkpoint("ns", TOPIC, g, PARTITIONS, 0, 1))
        with pytest.raises(InvalidArgument, match="consumer_group"):
            await store.list_checkpoints("ns", TOPIC, "bad group!")
        async with BrokerOwnershipStore(broker.address) as ownership:
            with pytest.raises(InvalidArgument, match="claimed twice"):
                await ownership.claim_ownership([claim(g, 0, "a"), claim(g, 0, "b")])
            with pytest.raises(InvalidArgument, match="out of range"):
                await ownership.claim_ownership([claim(g, 99, "a")])
            with pytest.raises(InvalidArgument, match="owner_id"):
                await ownership.claim_ownership([claim(g, 0, "x" * 300)])
    run_with(lambda: BrokerCheckpointStore(broker.address), body)
