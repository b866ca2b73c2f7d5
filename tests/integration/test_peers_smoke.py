"""The comparison's drivers against real servers, on a tiny workload.

Goal: each system's producer and consumers run under the harness and count
every event: Redis Streams (redis-server), NATS JetStream (nats-server), and
Keybus's producer; servers end by PID; a client that fails is reported.
Method: `run_system` with 2,000 events (500 in the latency scenario at
1,000 events/s), 2 consumer processes and a 20 s deadline per scenario. A
server binary that is missing and cannot be installed (apt-get, as root)
skips its test with the reason; so does a missing client library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.link import Link, Task
from benchmarks.measurement import CompareWorkload
from benchmarks.peer_scenarios import CONSUME, LATENCY, PRODUCE, Plan, run_system
from benchmarks.peers.servers import INSTALL_TIMEOUT_S, ServerUnavailable, ensure_installed
from benchmarks.progress import NoProgress
from benchmarks.runner import ClientFailed, run_clients
from benchmarks.systems import System

WORKLOAD = CompareWorkload(events=2_000, batch_events=200, consumers=2, rate_per_s=1_000,
                           latency_events=500, deadline_s=20.0)
# Room for apt-get update and install (each bounded by INSTALL_TIMEOUT_S) on a fresh machine,
# so the timeout never kills dpkg midway; the runs themselves take seconds.
pytestmark = pytest.mark.timeout(2 * INSTALL_TIMEOUT_S + 120)


def _peer(module: str, library: str, binary: str) -> System:
    pytest.importorskip(library, reason=f"{library} is not installed (see pyproject's pins)")
    try:
        ensure_installed(binary, binary)
    except ServerUnavailable as error:
        pytest.skip(f"{binary} unavailable: {error}")
    driver: Any = __import__(f"benchmarks.peers.{module}", fromlist=["system"])
    return driver.system()  # type: ignore[no-any-return]


def _check(rows: list[dict[str, Any]], expected: dict[str, int]) -> None:
    by_scenario = {row["scenario"]: row for row in rows}
    assert set(by_scenario) == set(expected), rows
    for scenario, events in expected.items():
        row = by_scenario[scenario]
        assert "events_per_s" in row, row.get("note")
        assert row["events"] == events and row["complete"], row
        assert row["client_cpu_s"] > 0 and row["server_cpu_s"] >= 0
    assert 0 < by_scenario[LATENCY]["p50_ms"] <= by_scenario[LATENCY]["p99_ms"]
    assert by_scenario[LATENCY]["latency_samples"] == expected[LATENCY]


@pytest.mark.parametrize(("module", "library", "binary"), [
    ("redis_driver", "redis", "redis-server"),
    ("nats_driver", "nats", "nats-server"),
])
def test_peer_runs_every_scenario_and_counts_every_event(module: str, library: str,
                                                         binary: str) -> None:
    system = _peer(module, library, binary)
    rows, info = run_system(system, Plan(WORKLOAD, show_progress=False))
    assert info["version"] != "not run" and info["durability"]
    _check(rows, {PRODUCE: 2_000, CONSUME: 2_000, LATENCY: 500})


def test_keybus_producer_under_the_same_harness() -> None:
    from benchmarks import keybus_driver

    rows, info = run_system(keybus_driver.system(), Plan(WORKLOAD, (PRODUCE,), False))
    produce = [row for row in rows if row["scenario"] == PRODUCE]
    assert len(produce) == 1 and produce[0]["events"] == 2_000 and produce[0]["complete"], rows
    assert "fsync before ack" in info["durability"]


def test_keybus_subscriptions_and_churn_under_the_same_harness() -> None:
    """Every subscription type's consume and latency rows (Exclusive with its one consumer,
    Failover with standbys that receive nothing and still end), and the churn row, count
    every event. Key_Shared runs in auto-split mode here (the subscription and every
    consumer must agree on it, or the subscribe is refused); consistent hashing is the
    benchmark's default."""
    from dataclasses import replace

    from benchmarks import keybus_driver
    from benchmarks.peer_scenarios import CHURN

    workload = replace(WORKLOAD, churn_events=20_000, churn_period_s=0.3,
                       key_shared_mode="auto_split")
    rows, _ = run_system(keybus_driver.system(), Plan(workload, show_progress=False))
    consumers = {"Keybus Key_Shared": 2, "Keybus Shared": 2, "Keybus Exclusive (1 consumer)": 1,
                 "Keybus Failover (1 active, others standby)": 2}
    for label, count in consumers.items():
        by_scenario = {row["scenario"]: row for row in rows if row["system"] == label}
        assert set(by_scenario) == {CONSUME, LATENCY}, rows
        for scenario, events in ((CONSUME, 2_000), (LATENCY, 500)):
            row = by_scenario[scenario]
            assert "events_per_s" in row, row.get("note")
            # a 2,000-event drain can take under one CPU clock tick: >= 0, not > 0
            assert row["events"] == events and row["complete"] and row["client_cpu_s"] >= 0, row
            assert row["consumers"] == count, row
        latency = by_scenario[LATENCY]
        assert 0 < latency["p50_ms"] <= latency["p99_ms"] and latency["latency_samples"] == 500
    churn = [row for row in rows if row["scenario"] == CHURN]
    assert len(churn) == 1 and "events_per_s" in churn[0], churn
    assert churn[0]["events"] == 20_000 and churn[0]["complete"], churn[0]
    assert churn[0]["describe_samples"] > 0 and churn[0]["membership_changes"] >= 0


def test_redis_server_ends_by_pid(tmp_path: Path) -> None:
    system = _peer("redis_driver", "redis", "redis-server")
    with system.server(tmp_path) as server:
        pid = server.pid
        assert Path(f"/proc/{pid}").exists()
    assert not Path(f"/proc/{pid}").exists()


def failing_producer(task: Task, link: Link) -> dict[str, Any]:
    """A client that fails after the start: its traceback must reach the parent."""
    link.start()
    raise RuntimeError(f"client {os.getpid()} failed on purpose")


def failing_before_start(task: Task, link: Link) -> dict[str, Any]:
    raise ConnectionError("no server there")


@pytest.mark.parametrize("worker", [failing_producer, failing_before_start])
def test_a_failing_client_is_reported_not_waited_for(worker: Any) -> None:
    task = Task("127.0.0.1:9", "none", WORKLOAD)
    with pytest.raises(ClientFailed, match=r"on purpose|no server there"):
        run_clients(worker, None, task, None, NoProgress())
