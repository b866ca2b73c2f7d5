"""Shared fixtures: a real broker process per test module or per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from keybus.dev_cluster import port_range
from tests.support.broker_process import BrokerProcess
from tests.support.redis_server import REDIS_PASSWORD, RedisServer, redis_unavailable

# No per-example deadline: Hypothesis's default (200 ms) times the machine, and a
# loaded 2-core run failed property tests on it (no property took long, the CPU
# was shared). Every test stays bounded by its example count.
settings.register_profile("keybus", deadline=None)
settings.load_profile("keybus")


def _own_port_range() -> None:
    """Give this xdist worker a slice of the free-port range of its own.

    Why: a worker's broker restarted on its port leaves it free for a moment,
    and two workers can check the same port free before either binds it; a
    broker then failed to start with "the port is in use" (1 test in 2,176 on
    CI). Child processes (brokers, cluster dev, Redis) inherit the slice.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return
    index = int(worker[2:])
    low, high = port_range()
    width = (high - low) // count
    os.environ["KEYBUS_PORT_RANGE"] = f"{low + index * width}-{low + (index + 1) * width}"


_own_port_range()


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
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a module that applies retention every 50 ms (not every few
    seconds), so a test sees a trim soon after it fills a topic past its limit."""
    process = BrokerProcess(tmp_path_factory.mktemp("retention") / "data",
                            "--retention-check-interval-ms", "50")
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
