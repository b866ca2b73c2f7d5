"""`python -m benchmarks memory`: a broker's memory with many partitions and stalled consumers.

What an operator sizes a broker by: its resident memory (RSS) once a topic of
many partitions has Key_Shared subscriptions whose consumers took what their
permits allowed and stopped (a stalled application: every dispatcher keeps its
look-ahead and its records read). Without a broker-wide bound each dispatcher
kept up to 16 MiB of records and each partition's per-slot arrays took their
whole size, so memory grew with partitions times subscriptions
(docs/architecture.md, "The bounds and what they cost").

Runs a real broker process (no fsync, no compacted view, metrics on), creates
one topic of `--partitions` partitions with `--events` events of
`--value-bytes` each, then per subscription `--consumers` Key_Shared consumers
that take a batch (those that have one) and stall. Prints a markdown table: the broker's RSS
after producing and with every subscription stalled (the largest of several
samples), the growth per partition and subscription, and what the dispatchers'
caches hold (`keybus_dispatch_cache_bytes`) against the budget. Nothing is
written to RESULTS.md (copy the table with its command).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import time
from pathlib import Path

from benchmarks import machine
from benchmarks.broker import running_broker
from benchmarks.broker_metrics import scrape
from keybus.dev_cluster import free_port
from sdk import Admin, Consumer, Producer

SAMPLES = 5


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--subscriptions", type=int, default=1)
    parser.add_argument("--consumers", type=int, default=3, help="per subscription")
    parser.add_argument("--events", type=int, default=100_000, help="in all partitions")
    parser.add_argument("--value-bytes", type=int, default=1_000)
    parser.add_argument("--settle-s", type=float, default=5.0,
                        help="wait after the consumers stall, before sampling")
    parser.add_argument("--broker-option", action="append", default=[],
                        help="a broker option (repeatable), e.g. "
                             "--broker-option=--dispatch-cache-broker-bytes-max=33554432")
    parser.add_argument("--no-record", action="store_true", help="(nothing is recorded)")
    return parser.parse_args(argv)


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cache_bytes(metrics: str) -> float:
    found = re.search(r"^keybus_dispatch_cache_bytes (\S+)$", scrape(metrics), re.MULTILINE)
    return float(found[1]) if found else -1.0  # a broker that does not report it


async def load(address: str, args: argparse.Namespace) -> None:
    async with Admin(address) as admin:
        await admin.create_topic("memory", partitions=args.partitions, view=False)
    value = b"v" * args.value_bytes
    async with await Producer.create(address, "memory") as producer:
        futures = []
        for i in range(args.events):
            futures.append(await producer.send(i, value, ordering_key=str(i)))
            if len(futures) >= 10_000:
                await asyncio.gather(*futures)
                futures = []
        await asyncio.gather(*futures)


async def stall(address: str, args: argparse.Namespace, pid: int, metrics: str
                ) -> tuple[float, float]:
    """Subscribe, take one batch each, wait; (largest RSS MB, largest cache bytes)."""
    consumers = []
    try:
        for s in range(args.subscriptions):
            for c in range(args.consumers):
                consumer = await Consumer.subscribe(address, "memory", f"s{s}", type="key_shared",
                                                    consumer_name=f"s{s}c{c}", start="earliest")
                consumers.append(consumer)
        for consumer in consumers:  # takes a batch if it has one: the first consumer of a
            # subscription may hold every event, whose slots then wait for its acks
            with contextlib.suppress(TimeoutError):
                await consumer.receive_batch(timeout_s=2)
        await asyncio.sleep(args.settle_s)
        rss, cached = 0.0, -1.0
        for _ in range(SAMPLES):
            await asyncio.sleep(1.0)
            rss, cached = max(rss, resident_mb(pid)), max(cached, cache_bytes(metrics))
        return rss, cached
    finally:
        for consumer in consumers:
            await consumer.close()


async def measure(address: str, args: argparse.Namespace, pid: int, metrics: str
                  ) -> tuple[float, float, float]:
    """(RSS MB once loaded, largest RSS MB stalled, largest cache bytes), on one loop
    (grpcio's poller outlives a loop closed under it)."""
    await load(address, args)
    loaded = resident_mb(pid)
    stalled, cached = await stall(address, args, pid, metrics)
    return loaded, stalled, cached


def run(args: argparse.Namespace) -> str:
    metrics = f"127.0.0.1:{free_port()}"
    options = ["--no-fsync", "--no-view-default", "--metrics-port", metrics.split(":")[1],
               *args.broker_option]
    with running_broker(*options) as (address, pid):
        began = time.monotonic()
        loaded, stalled, cached = asyncio.run(measure(address, args, pid, metrics))
        elapsed = time.monotonic() - began
    per = (stalled - loaded) * 1024 / (args.partitions * args.subscriptions)
    info = machine.describe()
    return "\n".join([
        f"{info['date']}, {info['nproc']} cores ({info['cpu']}), 1-min load average "
        f"{os.getloadavg()[0]:.2f} after the run, which took {elapsed:.0f} s", "",
        "| partitions | subscriptions x consumers | events | RSS loaded MB | RSS stalled MB "
        "| growth per partition and subscription KB | dispatch caches MB |",
        "|---|---|---|---|---|---|---|",
        f"| {args.partitions} | {args.subscriptions} x {args.consumers} | {args.events:,} "
        f"| {loaded:.0f} | {stalled:.0f} | {per:.0f} "
        f"| {f'{cached / 2**20:.1f}' if cached >= 0 else 'not reported'} |"])


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.partitions < 1 or args.subscriptions < 1 or args.consumers < 1 or args.events < 1:
        print("memory: --partitions, --subscriptions, --consumers and --events must be >= 1",
              file=sys.stderr)
        return 2
    print(run(args))
    return 0
