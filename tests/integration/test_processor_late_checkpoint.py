"""A checkpoint write already under way when its writer's claim lapses.

Goal: the checkpoint store itself never lets an old owner's write move the
checkpoint of a partition a new owner has registered (fencing by ownership
epoch, as Event Hubs' etag and Kafka's generation fence), with either store
that the processor fences: the broker's and the file store. The processor's
own check (OwnershipLost once it knows the claim lapsed) cannot stop a write
already past it. The old file store stored that write, so a paused ex-owner
moved the new owner's checkpoint back.

The rule, and its one window: a new owner registers its epoch before it reads
its checkpoint, so an old owner's write either lands before the registration
(then the new owner starts after it: it was processed, and nothing of the new
owner's is overwritten) or is refused. Both orders are checked here.

Method: a real broker process, a real redis-server holding ownership, the
real checkpoint stores. Processor A checkpoints its first event (offset 0)
and that write is held on its way to the store (a slow disk or network: a
wrapper that waits before passing the call on); A is cut off from Redis (its
ownership calls fail as a closed port would), so its claim lapses and
processor B claims the partition. The held write is let go either after B
registered and checkpointed offset 9, or while B's registration is held.
0.5 s interval, 2 s expiration; every wait bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sdk import Admin, Unavailable
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import (
    BrokerCheckpointStore,
    Checkpoint,
    FileCheckpointStore,
    OwnershipLost,
    PartitionOwnership,
    RedisOwnershipStore,
)
from tests.support.broker_process import BrokerProcess
from tests.support.processors import (
    EXPIRATION_MS,
    INTERVAL_MS,
    produce,
    redis_server,  # noqa: F401
    wait_for,
)
from tests.support.redis_server import RedisServer

EVENTS = 10


class CutOff:
    """An ownership store whose link can be cut: then every call fails at once."""

    def __init__(self, inner: RedisOwnershipStore) -> None:
        self.inner = inner
        self.cut = False

    async def list_ownership(self, namespace: str, topic: str,
                             consumer_group: str) -> list[PartitionOwnership]:
        self._check()
        return await self.inner.list_ownership(namespace, topic, consumer_group)

    async def claim_ownership(self, claims: Sequence[PartitionOwnership]
                              ) -> list[PartitionOwnership]:
        self._check()
        return await self.inner.claim_ownership(claims)

    def _check(self) -> None:
        if self.cut:
            raise Unavailable("the link to redis is cut (test)")


class Held:
    """A checkpoint store whose update_checkpoint (or fence) can be held on
    its way: the call has left the processor and not reached the store."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.supports_fencing = getattr(inner, "supports_fencing", False)
        self.hold_update = self.hold_fence = False
        self.update_held, self.fence_held = asyncio.Event(), asyncio.Event()
        self.let_go = asyncio.Event()

    async def list_checkpoints(self, namespace: str, topic: str,
                               consumer_group: str) -> list[Checkpoint]:
        return await self.inner.list_checkpoints(namespace, topic, consumer_group)  # type: ignore[no-any-return]

    async def get_checkpoint(self, namespace: str, topic: str, consumer_group: str,
                             partition: int) -> Checkpoint | None:
        return await self.inner.get_checkpoint(namespace, topic, consumer_group, partition)  # type: ignore[no-any-return]

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        if self.hold_update:
            self.update_held.set()
            await asyncio.wait_for(self.let_go.wait(), 60)
        await self.inner.update_checkpoint(checkpoint)

    async def fence(self, namespace: str, topic: str, consumer_group: str, partition: int,
                    epoch: int, owner_id: str) -> None:
        if self.hold_fence:
            self.fence_held.set()
            await asyncio.wait_for(self.let_go.wait(), 60)
        await self.inner.fence(namespace, topic, consumer_group, partition, epoch, owner_id)


def checkpoint_store(kind: str, broker: str, directory: Path) -> Any:
    return BrokerCheckpointStore(broker) if kind == "broker" else FileCheckpointStore(directory)


async def close(store: Any) -> None:
    if hasattr(store, "close"):
        await store.close()


class Scenario:
    """A checkpoints offset 0 (held), loses the partition; B takes over."""

    def __init__(self, kind: str, broker: str, redis: RedisServer, topic: str,
                 directory: Path) -> None:
        self.kind, self.broker, self.redis, self.topic = kind, broker, redis, topic
        self.directory = directory
        self.a_outcome: list[BaseException | None] = []
        self.b_started_after: list[int | None] = []  # B's checkpoint at initialize
        self.b_offsets: list[int] = []

    def processor(self, owner: str, ownership: Any, checkpoints: Any, on_event: Any,
                  **more: Any) -> EventProcessor:
        return EventProcessor(
            self.broker, self.topic, "g", on_event=on_event, owner_id=owner,
            on_error=lambda _c, _e: None, ownership_store=ownership,
            checkpoint_store=checkpoints, load_balancing_interval_ms=INTERVAL_MS,
            ownership_expiration_ms=EXPIRATION_MS, **more)

    async def a_on_event(self, context: PartitionContext, batch: ReadBatch) -> None:
        if self.a_outcome:
            return
        self.a_link.cut = True  # from now on A renews nothing: its claim lapses
        try:
            await context.update_checkpoint(batch.events()[0])  # passes A's own check
        except OwnershipLost as e:
            self.a_outcome.append(e)
        else:
            self.a_outcome.append(None)

    async def b_on_initialize(self, context: PartitionContext) -> None:
        self.b_started_after.append(None if context.checkpoint is None
                                    else context.checkpoint.offset)

    async def b_on_event(self, context: PartitionContext, batch: ReadBatch) -> None:
        self.b_offsets.extend(batch.offsets)
        await context.update_checkpoint(batch)

    async def stored_offset(self) -> int | None:
        store = checkpoint_store(self.kind, self.broker, self.directory)
        try:
            found = await store.get_checkpoint("", self.topic, "g", 0)
        finally:
            await close(store)
        return None if found is None else found.offset

    async def stored_is_last(self) -> bool:
        return await self.stored_offset() == EVENTS - 1

    async def take_over(self, a: EventProcessor, b: EventProcessor, a_store: Held,
                        b_store: Held, land: str) -> None:
        """A's checkpoint is held while its claim lapses and B takes over; it
        is let go after B checkpointed, or while B's registration is held."""
        await wait_for(a_store.update_held.is_set, 20, "A's checkpoint is under way")
        await wait_for(lambda: a.stats.lapses == 1, 15, "A's claim lapsed")
        async with b:
            if land == "before_registration":
                await wait_for(b_store.fence_held.is_set, 20, "B claimed, not registered")
            else:
                await wait_for(self.stored_is_last, 20, "B checkpointed every event")
            a_store.let_go.set()
            await wait_for(lambda: bool(self.a_outcome), 20, "A's write landed")
            if land == "before_registration":
                b_store.let_go.set()  # only now B registers, reads and goes on
                await wait_for(self.stored_is_last, 20, "B checkpointed every event")

    async def run(self, land: str) -> None:
        async with Admin(self.broker) as admin:
            await admin.create_topic(self.topic, partitions=1)
        await produce(self.broker, self.topic, 1, EVENTS)
        self.a_link = CutOff(RedisOwnershipStore(self.redis.url, ttl_ms=EXPIRATION_MS))
        a_store = Held(checkpoint_store(self.kind, self.broker, self.directory))
        a_store.hold_update = True
        b_ownership = RedisOwnershipStore(self.redis.url, ttl_ms=EXPIRATION_MS)
        b_store = Held(checkpoint_store(self.kind, self.broker, self.directory))
        b_store.hold_fence = land == "before_registration"
        a = self.processor("a", self.a_link, a_store, self.a_on_event)
        b = self.processor("b", b_ownership, b_store, self.b_on_event,
                           on_partition_initialize=self.b_on_initialize)
        try:
            async with a:
                try:
                    await self.take_over(a, b, a_store, b_store, land)
                finally:  # a failure lets the held calls go: the processors stop at once
                    a_store.let_go.set()
                    b_store.let_go.set()
                    self.a_link.cut = False
        finally:
            for store in (self.a_link.inner, b_ownership, a_store.inner, b_store.inner):
                await close(store)


@pytest.mark.parametrize("kind", ["file", "broker"])
def test_a_write_under_way_at_the_lapse_never_moves_the_new_owners_checkpoint_back(
        kind: str, shared_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path) -> None:
    scenario = Scenario(kind, shared_broker.address, redis_server, f"late-in-flight-{kind}",
                        tmp_path / "checkpoints")
    asyncio.run(scenario.run("after_new_owner_checkpointed"))
    stored = asyncio.run(scenario.stored_offset())
    assert stored == EVENTS - 1, (
        f"the old owner's late write moved the new owner's checkpoint back to {stored}")
    (refused,) = scenario.a_outcome
    assert isinstance(refused, OwnershipLost), "the store took the old owner's late write"
    assert "'b'" in str(refused), str(refused)  # names the current owner


@pytest.mark.parametrize("kind", ["file", "broker"])
def test_a_write_landing_before_the_new_owner_registers_is_where_it_starts(
        kind: str, shared_broker: BrokerProcess, redis_server: RedisServer,  # noqa: F811
        tmp_path: Path) -> None:
    scenario = Scenario(kind, shared_broker.address, redis_server, f"late-gap-{kind}",
                        tmp_path / "checkpoints")
    asyncio.run(scenario.run("before_registration"))
    assert scenario.a_outcome == [None]  # stored: no new owner had registered
    assert scenario.b_started_after == [0]  # the new owner read it: it starts after it
    assert scenario.b_offsets == list(range(1, EVENTS))
    assert asyncio.run(scenario.stored_offset()) == EVENTS - 1
