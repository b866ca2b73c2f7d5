"""The leader's disk fills under load: it stops, a follower leads, nothing acknowledged is lost.

Goal: the fail-stop of broker/log/store_failure.py in a cluster. A leader that
can store nothing more leaves (exit 74) instead of holding the topic while
refusing every write; ZooKeeper hands leadership to a follower within the
failover bound, a producer given every broker address goes on there (`acks`
1: the new leader's one follower acknowledges), and every event acknowledged before and after is on the new leader
once, at the offset it was acknowledged with.
Method: Debian's ZooKeeper (installed when missing) on a free 127.0.0.1 port;
three `python -m broker` processes, each with its data directory on a tmpfs
of its own mounted for the test (needs root; skipped, saying so, elsewhere).
Once the cluster settles, the leader's tmpfs is shrunk to what it holds plus
a few MiB, so only its disk fills. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from broker.log.store_failure import EXIT_STORE_FAILED
from keybus.dev_cluster import BrokerRunner, start_cluster
from sdk import Producer
from sdk.core.columns import keys_of
from tests.support.relay_cluster import cluster_story, records, wait_for, wait_settled, writable
from tests.support.wire import create_topic, stub
from tests.support.zookeeper import ZooKeeperServer, zookeeper_running

DISK_MB = 256
ROOM_MB = 6  # what the leader's disk keeps free once shrunk
VALUE_BYTES = 4096
AFTER_FAILOVER = 300  # events acknowledged by the new leader before the producer stops
FAILOVER_S_MAX = 10.0  # the store's failure to an ack from the new leader (the old one resigns)
RUN_S_MAX = 120.0


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    with zookeeper_running(tmp_path / "zk") as server:
        yield server


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[list[Path]]:
    """broker-1..3's data directories, each a tmpfs of DISK_MB."""
    mounted: list[Path] = []
    try:
        for i in range(1, 4):
            where = tmp_path / f"broker-{i}"
            where.mkdir()
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs",
                                   str(where)], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
            mounted.append(where)
        yield mounted
    finally:
        for where in mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


def _shrink_to_room(disk: Path) -> None:
    """Resize the tmpfs to what it holds now plus ROOM_MB."""
    stats = os.statvfs(disk)
    used_mb = (stats.f_blocks - stats.f_bfree) * stats.f_frsize // (1 << 20)
    subprocess.run(["mount", "-o", f"remount,size={used_mb + ROOM_MB}m", str(disk)], check=True)


async def _produce(address: str, acked: dict[int, tuple[int, int]], acked_at: list[float],
                   marks: dict[str, float]) -> None:
    """Send distinct keys in batches until the new leader acknowledged AFTER_FAILOVER."""
    value = os.urandom(VALUE_BYTES)
    began, key = time.monotonic(), 0
    async with await Producer.create(address, "t", idempotent=True,
                                     delivery_timeout_ms=60_000) as producer:
        while time.monotonic() - began < RUN_S_MAX:
            futures = [(k, await producer.send(k, value)) for k in range(key, key + 20)]
            key += 20
            for k, future in futures:
                done = await future
                acked[k] = (done.partition, done.offset)
            acked_at.append(time.time())  # wall clock, as the broker's log lines
            if "acked_then" not in marks and "stopped" in marks:
                marks["acked_then"] = len(acked)
            if "acked_then" in marks and len(acked) >= marks["acked_then"] + AFTER_FAILOVER:
                return
        raise AssertionError(f"not done in {RUN_S_MAX} s: {len(acked)} acknowledged, {marks}")


def test_a_leader_whose_disk_fills_hands_over_and_loses_nothing(
        zookeeper: ZooKeeperServer, disks: list[Path], tmp_path: Path) -> None:
    brokers = start_cluster(tmp_path, 3, zookeeper.address, 1, extra={
        "zookeeper_root": "/keybus-test/full", "relay_retry_backoff_max_ms": 500,
        "relay_sync_interval_ms": 200, "acks_timeout_ms": 60_000})
    try:
        create_topic(stub(brokers[0].address), "t")
        old = wait_settled(brokers, "t", followers=2)
        _shrink_to_room(disks[old])
        acked: dict[int, tuple[int, int]] = {}
        marks: dict[str, float] = {}
        watcher = threading.Thread(target=_note_exit, args=(brokers[old], marks), daemon=True)
        watcher.start()
        acked_at: list[float] = []
        asyncio.run(_produce(",".join(b.address for b in brokers), acked, acked_at, marks))
        failed_at = _failure_time(brokers[old].log_path.read_text())
        failover_s = min(t for t in acked_at if t > failed_at) - failed_at
        assert failover_s < FAILOVER_S_MAX, cluster_story(brokers, "t")
        process = brokers[old].process
        assert process is not None and process.returncode == EXIT_STORE_FAILED, \
            cluster_story(brokers, "t")
        log = brokers[old].log_path.read_text()
        assert "No space left on device" in log and "Traceback" not in log, log[-3000:]
        new = writable(brokers, "t")
        assert len(new) == 1 and new[0] != old, cluster_story(brokers, "t")
        wait_for(lambda: _stored(brokers[new[0]]).keys() >= acked.keys(), 30,
                 "every acknowledged event on the new leader")
        stored = _stored(brokers[new[0]])
        moved = {k: (at, stored.get(k)) for k, at in acked.items() if stored.get(k) != [at[1]]}
        assert not moved, f"acknowledged events missing, moved or twice: {list(moved.items())[:5]}"
        print(f"the full leader stopped after about {marks['acked_then']:.0f} acknowledged "
              f"events; the first acknowledgement after its store failed came "
              f"{failover_s:.2f} s later; "
              f"{len(acked)} acknowledged in all, each once on the new leader")
    finally:
        for broker in brokers:
            broker.kill()


def _failure_time(log: str) -> float:
    """The wall-clock time of the broker's CRITICAL store-failure line."""
    line = next(line for line in log.splitlines() if " CRITICAL keybus.store " in line)
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")  # logging's local asctime
    return stamp.timestamp()


def _note_exit(broker: BrokerRunner, marks: dict[str, float]) -> None:
    """Note when the broker's process is seen gone (polled every 10 ms, for RUN_S_MAX)."""
    deadline = time.monotonic() + RUN_S_MAX
    while broker.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    marks["stopped"] = time.monotonic()


def _stored(broker: BrokerRunner) -> dict[int, list[int]]:
    """key -> the offsets holding it on this broker (one partition)."""
    stored: dict[int, list[int]] = {}
    for record in records(broker.address, "t"):
        offsets = list(record.offsets) or range(record.base_offset,
                                                record.base_offset + record.batch.count)
        for key, offset in zip(keys_of(record.batch), offsets, strict=True):
            stored.setdefault(int(key), []).append(offset)
    return stored
