"""`python -m benchmarks wal`: the write-ahead log a broker keeps, and its fsyncs once steady.

A RocksDB log file lives until every column family with writes in it has
flushed them. The broker's small families (topics, partitions, producers)
rarely fill a memtable, so without `wal_bytes_max` they kept every log file
(RocksDB's own bound is four times all memtables: gigabytes), which costs disk
and what a restart after a crash replays. And a log file that reuses an
obsolete one (`wal_recycle_files`) is fsynced without writing its size.

Two settings alternate, `--rounds` times each, each on a fresh broker (fsync
on, 127.0.0.1, a temp data directory):
- `bound and reuse`: the broker's defaults;
- `neither`: `--wal-bytes-max` 64 GiB and `--wal-recycle-files 0`, which is
  what the broker did before it had them.

A round fills one topic with `--fill-mb` MB (requests of 500 events of 4 kB),
then measures `--sends` produce round trips of one 100-byte event each, one
awaited at a time (each waits for its group commit's fsync; the share of the
broker's WAL fsyncs meanwhile that took 0.25 ms or less, its histogram's first
bucket, is read from its metrics), then counts the log files' bytes, kills
the broker with SIGKILL and times its restart until it serves. Prints a
markdown table; nothing is written to RESULTS.md (copy the table with its
command).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import machine
from benchmarks.broker_metrics import fsync_buckets, scrape
from benchmarks.measurement import percentile
from keybus import Admin, Producer
from tests.support.broker_process import free_port

SETTINGS = {"bound and reuse": (),
            "neither": ("--wal-bytes-max", str(64 << 30), "--wal-recycle-files", "0")}
FILL_EVENT_BYTES = 4_000
FILL_BATCH = 500
FAST_S = 0.00025  # keybus_wal_fsync_seconds' first bucket


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks wal", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fill-mb", type=int, default=1_000, help="MB produced before timing")
    parser.add_argument("--sends", type=int, default=3_000, help="timed round trips per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each setting")
    parser.add_argument("--no-record", action="store_true", help="(nothing is recorded)")
    return parser.parse_args(argv)


class Broker:
    """A broker process on a data directory that outlives it (restarted after SIGKILL)."""

    def __init__(self, data_dir: Path, extra: tuple[str, ...]) -> None:
        self.data_dir, self.extra = data_dir, extra
        self.metrics = f"127.0.0.1:{free_port()}"
        self.process: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self) -> float:
        """Start; seconds until it serves (its ready file is written)."""
        ready = self.data_dir.parent / "ready"
        ready.unlink(missing_ok=True)
        began = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "broker", "--data-dir", str(self.data_dir), "--host",
             "127.0.0.1", "--port", "0", "--ready-file", str(ready), "--log-level", "WARNING",
             "--metrics-port", self.metrics.rsplit(":", 1)[1], *self.extra])
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() - began > 120:
                raise RuntimeError("the benchmark's broker did not start")
            time.sleep(0.01)
        self.address = f"127.0.0.1:{ready.read_text()}"
        return time.monotonic() - began

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(number)
            self.process.wait(30)


async def fill_and_time(address: str, metrics: str, fill_mb: int, sends: int
                        ) -> tuple[list[float], float]:
    """Fill the topic, then the round trips (seconds) of `sends` single awaited sends,
    and the share of the broker's WAL fsyncs meanwhile that took 0.25 ms or less (its
    histogram's first bucket)."""
    async with Admin(address) as admin:
        await admin.create_topic("wal")
    producer = await Producer.create(address, "wal")
    try:
        value = os.urandom(FILL_EVENT_BYTES)
        events = fill_mb * 1_000_000 // FILL_EVENT_BYTES
        for first in range(0, events, FILL_BATCH):
            await producer.send_batch(list(range(first, first + FILL_BATCH)), [value] * FILL_BATCH)
        await producer.flush()
        times = []
        small = b"x" * 100
        before = fsync_buckets(scrape(metrics))
        for i in range(sends):
            began = time.perf_counter()
            await (await producer.send(i, small))
            times.append(time.perf_counter() - began)
        after = fsync_buckets(scrape(metrics))
        fast = after[FAST_S] - before.get(FAST_S, 0.0)
        return sorted(times), fast / max(1.0, after[math.inf] - before.get(math.inf, 0.0))
    finally:
        await producer.close()


def log_bytes(data_dir: Path) -> tuple[int, int]:
    files = list(data_dir.rglob("*.log"))
    return len(files), sum(f.stat().st_size for f in files)


def round_of(name: str, options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="keybus-bench-wal-") as tmp:
        broker = Broker(Path(tmp) / "data", SETTINGS[name])
        broker.start()
        try:
            times, fast = asyncio.run(fill_and_time(broker.address, broker.metrics,
                                                    options.fill_mb, options.sends))
            files, size = log_bytes(broker.data_dir)
            broker.signal(signal.SIGKILL)
            restart_s = broker.start()
        finally:
            broker.signal(signal.SIGTERM)
    return {"setting": name, "p50_ms": percentile(times, 50) * 1e3,
            "p99_ms": percentile(times, 99) * 1e3, "fast": fast, "files": files, "mb": size / 1e6,
            "restart_s": restart_s}


def render(runs: list[dict[str, Any]], options: argparse.Namespace, argv: list[str]) -> str:
    info = machine.describe()
    lines = [f"`python -m benchmarks wal {' '.join(argv)}`".replace(" `", "`")
             + f" — {info['date']}, {info['nproc']} cores, {info['cpu']}, Python "
             f"{info['python']}; {options.fill_mb:,} MB filled, then {options.sends:,} awaited "
             f"sends of one event; load (1 min) {os.getloadavg()[0]:.2f} at the end", "",
             "| setting | send round trip p50 ms | p99 ms | WAL fsyncs <= 0.25 ms | WAL files | "
             "WAL MB | restart after SIGKILL, s |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        lines.append(f"| {run['setting']} | {run['p50_ms']:.3f} | {run['p99_ms']:.3f} | "
                     f"{run['fast']:.0%} | {run['files']} | {run['mb']:,.0f} | {run['restart_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    runs = [round_of(name, options) for _ in range(options.rounds) for name in SETTINGS]
    print(render(runs, options, argv))
    return 0
