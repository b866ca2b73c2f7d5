"""`python -m benchmarks processors [options]`: event processors balancing and processing.

Processors run as child processes (`benchmarks/processor_child.py`), on a
fresh broker (and a redis-server, installed from Debian's packages when
missing, for the Redis rows), all on 127.0.0.1:

- balance: 3 processors started together over --partitions (32) partitions;
  seconds until the ownership store lists 10/11/11 live records (cold).
  Then one is SIGKILLed: seconds until the other two own everything
  (16/16): the recovery, which waits for the victim's ownership to expire.
  Run per ownership store and per --expirations-ms.
- throughput: 3 processors over --throughput-partitions partitions, each
  checkpointing every --checkpoint-every (1,000) events per partition.
  Live: balanced first, then --events events produced; events/s from the
  first send to the last event processed (the producer's own rate beside
  it). Drain: --drain-events events stored first, ownership assigned 4/4/4 in the
  store before the processors start (so none is stolen or read twice);
  events/s from the first event processed to the last.

Prints JSON, saves benchmarks/out/processors.json and writes a block into
benchmarks/RESULTS.md (unless --no-record).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from benchmarks import compare_report, machine
from benchmarks.broker import running_broker
from benchmarks.peers.servers import ensure_installed, free_port, running_server
from benchmarks.results import RESULTS
from sdk import Admin, Producer
from sdk.stores import (
    BrokerOwnershipStore,
    OwnershipStore,
    PartitionOwnership,
    RedisOwnershipStore,
)

OUT = Path(__file__).resolve().parent / "out"
TIMEOUT_S = 300.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks processors", description=__doc__)
    parser.add_argument("--scenarios", default="balance,throughput")
    parser.add_argument("--stores", default="broker,redis", help="ownership stores, comma-separated")
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--interval-ms", type=int, default=1_000)
    parser.add_argument("--expirations-ms", default="3000,6000,12000")
    parser.add_argument("--strategy", default="greedy", choices=["greedy", "balanced"])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--drain-events", type=int, default=1_000_000,
                        help="the stored backlog of the drain measurement")
    parser.add_argument("--throughput-partitions", type=int, default=12)
    parser.add_argument("--checkpoint-every", type=int, default=1_000)
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    return parser.parse_args(argv)


class Children:
    """Processor child processes of one group; counts read from their files."""

    def __init__(self, directory: Path, broker: str, topic: str, group: str, redis: str | None,
                 options: argparse.Namespace, expiration_ms: int) -> None:
        self.directory = directory
        self.common = ["--broker", broker, "--topic", topic, "--group", group,
                       "--strategy", options.strategy, "--interval-ms", str(options.interval_ms),
                       "--expiration-ms", str(expiration_ms),
                       "--checkpoint-every", str(options.checkpoint_every),
                       *(["--redis", redis] if redis else [])]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, owner: str) -> None:
        count = self.directory / f"{owner}.count"
        command = [sys.executable, "-m", "benchmarks.processor_child", *self.common,
                   "--owner", owner, "--count-file", str(count)]
        self.processes[owner] = subprocess.Popen(command, stdin=subprocess.DEVNULL)

    def kill(self, owner: str) -> None:
        self.processes[owner].send_signal(signal.SIGKILL)
        self.processes[owner].wait(10)

    def total(self) -> int:
        found = 0
        for owner in self.processes:
            with contextlib.suppress(OSError, ValueError):
                found += int((self.directory / f"{owner}.count").read_text() or 0)
        return found

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


async def live_counts(store: OwnershipStore, topic: str, group: str, expiration_ms: int
                      ) -> Counter[str]:
    now = time.time_ns() // 1_000_000
    listed = await store.list_ownership("", topic, group)
    return Counter(o.owner_id for o in listed
                   if o.owner_id and o.last_modified_ms + expiration_ms >= now)


async def wait_counts(store: OwnershipStore, topic: str, group: str, expiration_ms: int,
                      expected: list[int], began: float) -> float:
    """Seconds since `began` until the live records per owner are `expected` (sorted)."""
    while True:
        counts = await live_counts(store, topic, group, expiration_ms)
        if sorted(counts.values()) == expected:
            return time.monotonic() - began
        if time.monotonic() - began > TIMEOUT_S:
            raise TimeoutError(f"ownership not {expected} within {TIMEOUT_S} s: {counts}")
        await asyncio.sleep(0.02)


def targets(partitions: int, owners: int) -> list[int]:
    low, extra = divmod(partitions, owners)
    return sorted([low + 1] * extra + [low] * (owners - extra))


@contextlib.asynccontextmanager
async def three_processors(broker: str, redis: str | None, options: argparse.Namespace,
                           directory: Path, topic: str, partitions: int, expiration_ms: int,
                           backlog: int = 0
                           ) -> AsyncIterator[tuple[Any, Children, tuple[float, float]]]:
    """A new topic and 3 processor children on it; yields (ownership store, children,
    (seconds from their start to the first claim, and to a balanced store)). backlog: store that many events
    and write the balanced ownership for the children before they start (nothing
    to steal, nothing read twice), and do not wait."""
    async with Admin(broker) as admin:
        await admin.create_topic(topic, partitions=partitions)
    if backlog:
        await _produce(broker, topic, backlog)
    store: Any = (RedisOwnershipStore(redis, ttl_ms=expiration_ms) if redis
                  else BrokerOwnershipStore(broker))
    if backlog:
        await store.claim_ownership([PartitionOwnership("", topic, "bench", p, f"p{p % 3}")
                                     for p in range(partitions)])
    children = Children(directory / topic, broker, topic, "bench", redis, options, expiration_ms)
    children.directory.mkdir(parents=True)
    try:
        began = time.monotonic()
        for owner in ("p0", "p1", "p2"):
            children.start(owner)
        if backlog:
            yield store, children, (0.0, 0.0)
            return
        first_s = await _first_claim(store, topic, began)
        cold_s = await wait_counts(store, topic, "bench", expiration_ms, targets(partitions, 3),
                                   began)
        yield store, children, (first_s, cold_s)
    finally:
        children.stop()
        await store.close()


async def _first_claim(store: OwnershipStore, topic: str, began: float) -> float:
    """Seconds from `began` until any record exists (the children are up)."""
    while not await store.list_ownership("", topic, "bench"):
        if time.monotonic() - began > TIMEOUT_S:
            raise TimeoutError(f"no claim within {TIMEOUT_S} s")
        await asyncio.sleep(0.01)
    return time.monotonic() - began


async def balance_row(broker: str, redis: str | None, kind: str, expiration_ms: int,
                      options: argparse.Namespace, directory: Path, topic: str) -> dict[str, Any]:
    async with three_processors(broker, redis, options, directory, topic, options.partitions,
                                expiration_ms) as (store, children, (first_s, cold_s)):
        await asyncio.sleep(options.interval_ms / 1000 * 1.5)  # settled: every renewal landed
        children.kill("p0")
        killed = time.monotonic()
        recover_s = await wait_counts(store, topic, "bench", expiration_ms,
                                      targets(options.partitions, 2), killed)
    return {"scenario": "balance", "ownership_store": kind, "partitions": options.partitions,
            "strategy": options.strategy, "interval_ms": options.interval_ms,
            "expiration_ms": expiration_ms, "first_claim_s": round(first_s, 2),
            "cold_balance_s": round(cold_s, 2),
            "balance_after_first_claim_intervals": round(
                (cold_s - first_s) * 1000 / options.interval_ms, 1),
            "recover_s": round(recover_s, 2),
            "recover_minus_expiration_s": round(recover_s - expiration_ms / 1000, 2)}


async def throughput_row(broker: str, redis: str | None, kind: str, options: argparse.Namespace,
                         directory: Path, topic: str) -> dict[str, Any]:
    partitions, events = options.throughput_partitions, options.events
    expiration_ms = 6 * options.interval_ms
    async with three_processors(broker, redis, options, directory, topic, partitions,
                                expiration_ms) as (_, children, _):
        await asyncio.sleep(options.interval_ms / 1000 * 1.5)
        first_send = time.monotonic()
        produced_s = await _produce(broker, topic, events)
        elapsed = await _until_processed(children, events, first_send)
    # Long enough that no assigned record expires while the children start on a busy machine.
    drain = await _drain(broker, redis, options, directory, f"{topic}-drain", 60_000)
    return {"scenario": "throughput", "ownership_store": kind, "partitions": partitions,
            "events": events, "checkpoint_every": options.checkpoint_every,
            "live_events_per_s": round(events / elapsed), "live_seconds": round(elapsed, 2),
            "producer_events_per_s": round(events / produced_s),
            "drain_events": options.drain_events,
            "drain_events_per_s": round(options.drain_events / drain),
            "drain_seconds": round(drain, 2)}


async def _until_processed(children: Children, events: int, since: float) -> float:
    """Seconds from `since` until the children processed `events` in all."""
    while children.total() < events:
        if time.monotonic() - since > TIMEOUT_S:
            raise TimeoutError(f"{children.total()} of {events} processed in {TIMEOUT_S} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - since


async def _drain(broker: str, redis: str | None, options: argparse.Namespace, directory: Path,
                 topic: str, expiration_ms: int) -> float:
    """Seconds from the first event processed to the last, over a stored backlog
    (ownership assigned 4/4/4 before the processors start: none is stolen)."""
    partitions, events = options.throughput_partitions, options.drain_events
    async with three_processors(broker, redis, options, directory, topic, partitions,
                                expiration_ms, backlog=events) as (store, children, _):
        while children.total() == 0:
            await asyncio.sleep(0.005)
        first = time.monotonic()
        elapsed = await _until_processed(children, events, first)
        owned = await live_counts(store, topic, "bench", expiration_ms)
        assert sorted(owned.values()) == targets(partitions, 3), owned  # nothing moved
    return elapsed


async def _produce(broker: str, topic: str, events: int, batch: int = 1_000) -> float:
    began = time.monotonic()
    value = b"x" * 100
    async with await Producer.create(broker, topic) as producer:
        futures = []
        for start in range(0, events, batch):
            keys = list(range(start, min(events, start + batch)))
            futures.append(await producer.send_batch(keys, [value] * len(keys)))
        await producer.flush()
        for future in futures:
            await future
    return time.monotonic() - began


@contextlib.contextmanager
def redis_url(needed: bool) -> Iterator[str | None]:
    """A redis-server without persistence on a free port (None when not needed)."""
    if not needed:
        yield None
        return
    binary = ensure_installed("redis-server", "redis-server")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="keybus-bench-redis-") as tmp:
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                   "--save", "", "--appendonly", "no"]
        with running_server(command, port, Path(tmp) / "redis.log"):
            yield f"redis://127.0.0.1:{port}/0"


async def run(options: argparse.Namespace, broker: str, redis: str | None,
              directory: Path) -> list[dict[str, Any]]:
    rows = []
    scenarios = options.scenarios.split(",")
    for kind in options.stores.split(","):
        url = redis if kind == "redis" else None
        if "balance" in scenarios:
            for expiration in (int(e) for e in options.expirations_ms.split(",")):
                rows.append(await balance_row(broker, url, kind, expiration, options, directory,
                                              f"balance-{kind}-{expiration}"))
                print(json.dumps(rows[-1]), file=sys.stderr)
        if "throughput" in scenarios:
            rows.append(await throughput_row(broker, url, kind, options, directory,
                                             f"throughput-{kind}"))
            print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def body(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"`{report['command']}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, "
             f"Python {m['python']}, load {m['load_1min_before']} before / "
             f"{m['load_1min_after']} after (1 min; a shared machine)", ""]
    for scenario in ("balance", "throughput"):
        rows = [r for r in report["results"] if r["scenario"] == scenario]
        if rows:
            columns = [c for c in rows[0] if c != "scenario"]
            lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(f"{r[c]:,}" if isinstance(r[c], int) else str(r[c])
                                        for c in columns) + " |" for r in rows]
            lines.append("")
    return "\n".join(lines).rstrip("\n")


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="keybus-bench-processors-") as tmp, \
            redis_url("redis" in options.stores.split(",")) as redis, \
            running_broker() as (broker, _):
        rows = asyncio.run(run(options, broker, redis, Path(tmp)))
    report: dict[str, Any] = {"command": " ".join(["python -m benchmarks processors",
                                   *(a for a in argv if a != "--no-record")]),
              "machine": {**machine.describe(), "load_1min_before": round(load_before, 2),
                          "load_1min_after": round(os.getloadavg()[0], 2)},
              "results": rows}
    OUT.mkdir(exist_ok=True)
    (OUT / "processors.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    if not options.no_record:
        text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
        RESULTS.write_text(compare_report.replace_block(text, report["command"], body(report)))
    return 0
