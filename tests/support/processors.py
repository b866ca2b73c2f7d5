"""What the event processor tests share: the redis-server fixture, the
ownership store of each kind, producing, waiting on a condition, and one
processor run recorded callback by callback (`Recorder`, `run_recorded`).

Import the fixtures into a test module (`from tests.support.processors
import redis_server  # noqa: F401`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk import Producer
from sdk.processor import CheckpointReset, EventProcessor, PartitionContext
from sdk.reader import ReadBatch
from sdk.stores import (
    BrokerOwnershipStore,
    CheckpointStore,
    OwnershipStore,
    RedisOwnershipStore,
)
from tests.support.redis_server import RedisServer, redis_unavailable

OWNERSHIP_KINDS = ("broker", "redis")
INTERVAL_MS = 500
EXPIRATION_MS = 2_000


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server for the module; skipped loudly when it cannot be installed."""
    reason = redis_unavailable()
    if reason is not None:
        pytest.skip(f"REDIS-SERVER UNAVAILABLE, Redis ownership tests not run: {reason}")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


def ownership_store(kind: str, broker: str, redis: RedisServer | None) -> OwnershipStore:
    """A fresh ownership store client of the kind ("broker" or "redis")."""
    if kind == "broker":
        return BrokerOwnershipStore(broker)
    assert redis is not None
    return RedisOwnershipStore(redis.url, ttl_ms=EXPIRATION_MS)


async def close_store(store: Any) -> None:
    await store.close()


async def wait_for(condition: Callable[[], bool | Awaitable[bool]], timeout_s: float,
                   what: str, every_s: float = 0.05,
                   state: Callable[[], str] | None = None) -> float:
    """Poll until condition() holds; returns the seconds it took.

    Raises:
        AssertionError: naming `what`, and what `state()` says at the end, when it
            does not hold within timeout_s.
    """
    began = time.monotonic()
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return time.monotonic() - began
        if time.monotonic() - began > timeout_s:
            said = f"; {state()}" if state is not None else ""
            raise AssertionError(f"not within {timeout_s} s: {what}{said}")
        await asyncio.sleep(every_s)


async def produce(broker: str, topic: str, partitions: int, per_partition: int,
                  first_key: int = 0) -> None:
    """Send per_partition events to every partition (keys from first_key), stored."""
    async with await Producer.create(broker, topic) as producer:
        for partition in range(partitions):
            keys = list(range(first_key, first_key + per_partition))
            await producer.send_batch(keys, [b"v"] * per_partition, partition=partition)
        await producer.flush()


def out_path(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{name}.txt"


class Recorder:
    """What a processor's callbacks saw: events (checkpointed as they come), the
    checkpoint resets its partitions started with, and errors."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.resets: list[CheckpointReset | None] = []
        self.errors: list[BaseException] = []

    def initialize(self, context: PartitionContext) -> None:
        self.resets.append(context.checkpoint_reset)

    async def event(self, context: PartitionContext, batch: ReadBatch) -> None:
        self.offsets += batch.offsets
        await context.update_checkpoint(batch)

    def error(self, context: PartitionContext | None, error: BaseException) -> None:
        self.errors.append(error)

    def state(self) -> str:
        last = repr(self.errors[-1]) if self.errors else "none"
        return (f"offsets {self.offsets[-5:]} ({len(self.offsets)}), resets {self.resets}, "
                f"{len(self.errors)} errors, the last: {last}")


def run_recorded(address: str, redis: RedisServer, topic: str, group: str,
                 checkpoints: CheckpointStore, recorder: Recorder,
                 until: Callable[[Recorder], Awaitable[None]], **options: Any) -> None:
    """Run one processor (Redis ownership, INTERVAL_MS, EXPIRATION_MS) until
    `until(recorder)` returns; `until` bounds its own wait."""
    async def go() -> None:
        ownership = RedisOwnershipStore(redis.url, ttl_ms=EXPIRATION_MS)
        processor = EventProcessor(
            address, topic, group, on_event=recorder.event,
            on_partition_initialize=recorder.initialize, on_error=recorder.error,
            ownership_store=ownership, checkpoint_store=checkpoints,
            load_balancing_interval_ms=INTERVAL_MS, ownership_expiration_ms=EXPIRATION_MS,
            **options)
        try:
            async with processor:
                await until(recorder)
        finally:
            await ownership.close()
    asyncio.run(go())
