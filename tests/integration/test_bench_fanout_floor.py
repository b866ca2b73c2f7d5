"""Goal: the latency benchmark's grpcio fan-out floor runs under the same harness as Keybus
and its peers and counts every event, with and without its fsync: a real relay process
on 127.0.0.1, one producer process and 2 consumer processes.

Method: `run_system` on the latency scenario only (500 events at 1,000 events/s, a 20 s
deadline), for both floor systems.
"""

from __future__ import annotations

import pytest

from benchmarks import fanout_floor
from benchmarks.measurement import CompareWorkload
from benchmarks.peer_scenarios import LATENCY, Plan, run_system

WORKLOAD = CompareWorkload(events=500, batch_events=200, consumers=2, rate_per_s=1_000,
                           latency_events=500, deadline_s=20.0)


@pytest.mark.parametrize("fsync", [False, True])
def test_the_floor_delivers_every_event_with_its_latency(fsync: bool) -> None:
    rows, info = run_system(fanout_floor.system(fsync), Plan(WORKLOAD, (LATENCY,), False))
    assert info["version"].startswith("grpcio ") and info["durability"]
    (row,) = rows
    assert row["scenario"] == LATENCY and row["complete"] and row["events"] == 500, row
    assert row["latency_samples"] == 500
    assert 0 < row["p50_ms"] <= row["p99_ms"]
    loop = row["server_main_thread"]  # the relay's event loop worked, and it is one thread
    assert 0 < loop["cpu_s_per_m"] <= row["cpu_s_per_m_server"] and 0 < loop["cores"] <= 1.05
