"""Shared fixtures: a real broker process per test module or per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.broker_process import BrokerProcess
from tests.support.redis_server import REDIS_PASSWORD, RedisServer, redis_unavailable

# No per-example deadline: Hypothesis's default (200 ms) times the machine, and a
# loaded 2-core run failed property tests on it (no property took long, the CPU
# was shared). Every test stays bounded by its example count.
settings.register_profile("keybus", deadline=None)
settings.load_profile("keybus")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh broker on a temp dir, stopped after the test."""
    process = BrokerProcess(tmp_path / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests use distinct topics)."""
    process = BrokerProcess(tmp_path_factory.mktemp("shared") / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server that asks for `REDIS_PASSWORD`; skipped loudly when
    redis-server cannot be installed."""
    reason = redis_unavailable()
    if reason is not None:
        pytest.skip(f"REDIS-SERVER UNAVAILABLE, Redis password tests not run: {reason}")
    server = RedisServer(tmp_path_factory.mktemp("redis-auth"), password=REDIS_PASSWORD)
    server.start()
    yield server
    server.stop()
