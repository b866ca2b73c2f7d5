"""A full disk under a real broker: it stops, says why, and keeps what it acknowledged.

Goal (broker/log/store_failure.py): when the data directory's disk fills, the
broker neither hangs nor serves refusals forever. It logs one line, stops with
exit status 74 within seconds, and every event it acknowledged is read back
after the disk has room again; started on the still-full disk it refuses in
one line (status 74), never a traceback.
Method: a real broker process whose data directory is a small tmpfs mounted
for the test (a real file system, a real ENOSPC from RocksDB's own writes); an
SDK producer sends 4 KiB events of distinct keys until its sends fail. Bounded:
a 16 MiB disk, 60 s of sending at most, 127.0.0.1 only. Needs root (mount);
skipped, saying so, where mounting is not allowed.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.store_failure import EXIT_STORE_FAILED
from sdk.producer import Producer
from tests.support.broker_process import REPO, BrokerProcess
from tests.support.wire import create_topic, read_all, stub

DISK_MB = 16
VALUE_BYTES = 4096
SEND_S_MAX = 60.0
STOP_S_MAX = 15.0  # from the first refused send to the broker's exit


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_MB mounted for the test, unmounted after it."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _grow(disk: Path, size_mb: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_mb}m", str(disk)], check=True)


async def _send_until_refused(address: str) -> tuple[dict[int, tuple[int, int]], float]:
    """Send distinct keys until a send fails; the acknowledged (key -> (partition,
    offset)) and the monotonic time of the first failure."""
    producer = await Producer.create(address, "full", delivery_timeout_ms=5_000,
                                     idempotent=True)
    acked: dict[int, tuple[int, int]] = {}
    value = os.urandom(VALUE_BYTES)
    began, key = time.monotonic(), 0
    try:
        while time.monotonic() - began < SEND_S_MAX:
            futures = [(k, await producer.send(k, value)) for k in range(key, key + 50)]
            key += 50
            for k, future in futures:
                try:
                    done = await future
                except Exception:
                    return acked, time.monotonic()
                acked[k] = (done.partition, done.offset)
        raise AssertionError(f"the {DISK_MB} MiB disk never filled in {SEND_S_MAX} s")
    finally:
        await producer.close(timeout_ms=0)


def _start_on_full_disk(data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(data_dir),
                           "--host", "127.0.0.1", "--port", "0"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_full_disk_stops_the_broker_and_keeps_what_it_acknowledged(small_disk: Path) -> None:
    broker = BrokerProcess(small_disk / "data")
    broker.log_path = small_disk.parent / "broker.log"  # the log must not fill the disk
    broker.start()
    try:
        create_topic(stub(broker.address), "full", partitions=2)
        acked, refused_at = asyncio.run(_send_until_refused(broker.address))
        assert broker.process is not None
        broker.process.wait(STOP_S_MAX + max(0.0, refused_at - time.monotonic()))
    finally:
        broker.kill()
    log = broker.log_path.read_text()
    assert broker.process.returncode == EXIT_STORE_FAILED, (len(acked), log[-2000:])
    assert "No space left on device" in log and "stores nothing more and stops" in log
    assert "keybus broker: stopped: its storage" in log
    assert "Traceback" not in log, log[-3000:]
    assert len(acked) >= 100, f"only {len(acked)} events acknowledged before the disk filled"

    again = _start_on_full_disk(small_disk / "data")
    assert again.returncode == EXIT_STORE_FAILED, again.stderr[-2000:]
    lines = again.stderr.strip().splitlines()
    assert lines[-1].startswith("keybus broker: error: cannot open the log"), lines
    assert "free space" in lines[-1] and "Traceback" not in again.stderr

    _grow(small_disk, DISK_MB * 4)
    broker.start()
    try:
        client = stub(broker.address)
        stored: dict[int, tuple[int, int]] = {}
        for partition in (0, 1):
            offset = 0
            for record in read_all(client, "full", partition):  # a plain client: 4 MiB
                assert record.base_offset == offset, f"a hole before {record.base_offset}"
                for i, key in enumerate(record.batch.key_ints):
                    stored[key] = (partition, record.base_offset + i)
                offset += record.batch.count
        lost = [k for k, where in acked.items() if stored.get(k) != where]
        assert not lost, f"{len(lost)} acknowledged events lost or moved, e.g. {lost[:5]}"
        after = asyncio.run(_one_more(broker.address))
        assert after.offset >= 0
    finally:
        broker.stop()
        gc.collect()  # the producers' gRPC objects, here rather than inside a later ast.parse


async def _one_more(address: str):  # type: ignore[no-untyped-def]
    producer = await Producer.create(address, "full", delivery_timeout_ms=10_000)
    try:
        return await (await producer.send(10**9, b"after the disk has room"))
    finally:
        await producer.close()
