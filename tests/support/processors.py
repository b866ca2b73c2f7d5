"""What the event processor tests share: the redis-server fixture, the
ownership store of each kind, producing, and waiting on a condition.

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
from sdk.stores import BrokerOwnershipStore, OwnershipStore, RedisOwnershipStore
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
