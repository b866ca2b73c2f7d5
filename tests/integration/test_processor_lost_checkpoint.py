"""A checkpoint written by a callback that outlived its partition's ownership.

Goal: a processor refuses, by its own knowledge, to checkpoint a partition
it no longer owns, before any store sees the write (here the file store):
the callback gets OwnershipLost (nothing is written, as Kafka refuses the
commit of a consumer that lost the partition with CommitFailedException),
and `stats.checkpoints_refused` counts it. The old processor stored it, so
a paused ex-owner could move a new owner's checkpoint back.
Two ways a callback outlives the claim: it awaits while the ownership store
(a real redis-server) is SIGSTOPped, so the processor's watch closes the
partition as lost meanwhile; or it blocks the event loop (a sync sleep past
the expiration), so no renewal is sent and no watch runs until it returns.
Method: a real broker process, a real redis-server, a FileCheckpointStore;
0.5 s interval, 2 s expiration; every wait bounded.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from sdk import Admin
from sdk.processor import EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import FileCheckpointStore, RedisOwnershipStore
from sdk.stores.fencing import OwnershipLost
from tests.support.broker_process import BrokerProcess
from tests.support.processors import EXPIRATION_MS, INTERVAL_MS, produce, wait_for
from tests.support.redis_server import RedisServer, redis_unavailable


@pytest.fixture
def redis(tmp_path: Path) -> RedisServer:
    reason = redis_unavailable()
    if reason is not None:
        pytest.skip(f"REDIS-SERVER UNAVAILABLE, lost-checkpoint tests not run: {reason}")
    return RedisServer(tmp_path / "redis")


@pytest.mark.parametrize("outlives", ["store_stopped", "loop_blocked"])
def test_a_checkpoint_after_the_claim_lapsed_is_refused_and_not_stored(
        outlives: str, shared_broker: BrokerProcess, redis: RedisServer,
        tmp_path: Path) -> None:
    broker, topic = shared_broker.address, f"lost-checkpoint-{outlives}"
    checkpoints = FileCheckpointStore(tmp_path / "checkpoints")
    outcome: list[BaseException | None] = []
    processors: list[EventProcessor] = []  # the one processor, for its callback

    async def on_event(context: PartitionContext, batch: ReadBatch) -> None:
        if outcome:
            return
        if outlives == "store_stopped":
            assert redis.process is not None
            redis.process.send_signal(signal.SIGSTOP)
            await wait_for(lambda: context.lease_lapsed(time.monotonic_ns() // 1_000_000)
                           and processors[0].stats.lapses == 1, 15, "the claim lapsed")
        else:
            time.sleep(EXPIRATION_MS / 1000 + 0.5)  # the loop is blocked: nothing renews
        try:
            await context.update_checkpoint(batch)
        except OwnershipLost as e:
            outcome.append(e)
        else:
            outcome.append(None)

    async def go() -> None:
        async with Admin(broker) as admin:
            await admin.create_topic(topic, partitions=1)
        store = RedisOwnershipStore(redis.url, ttl_ms=EXPIRATION_MS, socket_timeout_s=1.0)
        processor = EventProcessor(
            broker, topic, "g", on_event=on_event, on_error=lambda _c, _e: None,
            ownership_store=store, checkpoint_store=checkpoints,
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS)
        processors.append(processor)
        async with processor:
            await wait_for(lambda: processor.owned_partitions == [0], 15, "claimed")
            await produce(broker, topic, 1, 3)
            await wait_for(lambda: bool(outcome), 20, "the late checkpoint was tried")
            assert redis.process is not None
            redis.process.send_signal(signal.SIGCONT)
        await store.close()

    redis.start()
    try:
        asyncio.run(go())
    finally:
        if redis.process is not None and redis.process.poll() is None:
            redis.process.send_signal(signal.SIGCONT)
        redis.stop()
    (refused,) = outcome
    assert isinstance(refused, OwnershipLost), "a checkpoint after the claim lapsed was stored"
    assert "lapsed" in str(refused) and "not written" in str(refused), str(refused)
    assert processors[0].stats.checkpoints_refused == 1
    assert asyncio.run(checkpoints.get_checkpoint("", topic, "g", 0)) is None

