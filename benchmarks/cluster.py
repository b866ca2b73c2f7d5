"""`python -m benchmarks cluster`: replication cost and failover time, 3 brokers + ZooKeeper.

Everything on 127.0.0.1 (ZooKeeper from Debian's package, brokers as
processes, the client in this process), in a temp directory:

1. Produce rate with `acks = leader`, `1` and `2`: one SDK producer given
   all three addresses, `send()` per event until everything is acknowledged;
   a fresh cluster per setting. While it runs, the followers' lag (events
   the leader holds that a follower does not) is sampled every 100 ms from
   `DescribeCluster`.
2. Time without a leader: with a light producer running, SIGKILL the leader,
   time until another broker takes produce (polled every 20 ms), restart the
   killed broker, wait until all three agree; repeat `--kills` times and
   report the median.

`summarize_lags` and `median` are pure (tests/unit/test_bench_cluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from benchmarks import machine
from benchmarks.results import record
from keybus.dev_cluster import BrokerRunner, ZooKeeperServer, start_cluster
from sdk import Admin, Producer
from sdk.channel import open_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb

SESSION_MS = 2_000
ACKS = ("leader", "1", "2")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks cluster", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000, help="per acks setting")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--kills", type=int, default=5, help="leader kills (median of them)")
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    return parser.parse_args(argv)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


async def roles(brokers: list[BrokerRunner], topic: str) -> list[pb.TopicRoleInfo | None]:
    async def one(runner: BrokerRunner) -> pb.TopicRoleInfo | None:
        if not runner.running():
            return None
        channel = open_channel(runner.address)
        try:
            info = await stub_of(channel).DescribeCluster(
                pb.DescribeClusterRequest(topic=topic), timeout=2)
        except grpc.RpcError:
            return None
        finally:
            await channel.close()
        return info.topics[0] if info.topics else None
    return list(await asyncio.gather(*(one(b) for b in brokers)))


async def settle(brokers: list[BrokerRunner], topic: str, lag_max: int = 0,
                 timeout_s: float = 60) -> int:
    """Wait until one broker leads and every other copies it, at most `lag_max`
    events behind (0: at its end); the leader's index."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await roles(brokers, topic)
        leaders = [i for i, r in enumerate(found) if r is not None and r.writable]
        if len(leaders) == 1:
            leader = found[leaders[0]]
            assert leader is not None
            end = sum(p.log_end_offset for p in leader.partitions)
            if all(r is not None and (r is leader or (
                    r.role == "follower" and r.leader_epoch == leader.leader_epoch
                    and end - sum(p.log_end_offset for p in r.partitions) <= lag_max))
                   for r in found):
                return leaders[0]
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the cluster did not settle within {timeout_s} s")


def summarize_lags(samples: list[int]) -> dict[str, int]:
    """Follower lag samples (events) as max and median."""
    if not samples:
        return {"lag_events_max": 0, "lag_events_median": 0}
    return {"lag_events_max": max(samples), "lag_events_median": int(statistics.median(samples))}


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


async def sample_lag(brokers: list[BrokerRunner], topic: str, stop: asyncio.Event,
                     samples: list[int]) -> None:
    while not stop.is_set():
        found = [r for r in await roles(brokers, topic) if r is not None]
        leader = [r for r in found if r.writable]
        if leader:
            end = sum(p.log_end_offset for p in leader[0].partitions)
            samples.extend(end - sum(p.log_end_offset for p in r.partitions)
                           for r in found if r.role == "follower")
        await asyncio.sleep(0.1)


async def produce_rate(brokers: list[BrokerRunner], events: int, value_bytes: int
                       ) -> dict[str, Any]:
    addresses = ",".join(b.address for b in brokers)
    async with Admin(brokers[0].address) as admin:
        await admin.create_topic("bench")
    await settle(brokers, "bench")
    value = os.urandom(value_bytes)
    samples: list[int] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_lag(brokers, "bench", stop, samples))
    async with await Producer.create(addresses, "bench") as producer:
        began = time.perf_counter()
        for i in range(events):
            await producer.send(i % 10_000, value)
        await producer.flush()
        seconds = time.perf_counter() - began
    stop.set()
    await sampler
    return {"events": events, "seconds": round(seconds, 3),
            "events_per_s": int(events / seconds), **summarize_lags(samples)}


async def kill_loop(brokers: list[BrokerRunner], kills: int) -> dict[str, Any]:
    addresses = ",".join(b.address for b in brokers)
    async with Admin(brokers[0].address) as admin:
        await admin.create_topic("failover")
    await settle(brokers, "failover")
    stop = asyncio.Event()
    producer = await Producer.create(addresses, "failover", linger_ms=1)

    async def trickle() -> None:  # a light producer: the cluster is in use when killed
        i = 0
        while not stop.is_set():
            future = await producer.send(i, b"x")
            future.add_done_callback(lambda f: f.exception())  # failures are expected here
            i += 1
            await asyncio.sleep(0.002)
    producing = asyncio.create_task(trickle())
    without_leader: list[float] = []
    try:
        for _ in range(kills):
            old = await settle(brokers, "failover", lag_max=1_000)
            await asyncio.to_thread(brokers[old].kill)
            began = time.monotonic()
            while not any(r is not None and r.writable for r in await roles(brokers, "failover")):
                if time.monotonic() - began > 60:
                    raise TimeoutError("no new leader within 60 s")
                await asyncio.sleep(0.02)
            without_leader.append(time.monotonic() - began)
            await asyncio.to_thread(brokers[old].start)
    finally:
        stop.set()
        await asyncio.wait_for(producing, 180)
        await producer.close(timeout_ms=60_000)
    return {"kills": kills, "without_leader_s_median": round(median(without_leader), 3),
            "without_leader_s_min": round(min(without_leader), 3),
            "without_leader_s_max": round(max(without_leader), 3),
            "without_leader_s": [round(s, 3) for s in without_leader]}


def run_cluster(root: Path, zookeeper: ZooKeeperServer, name: str, acks: str,
                body: Any) -> dict[str, Any]:
    brokers = start_cluster(root / name, 3, zookeeper.address, acks,
                            session_timeout_ms=SESSION_MS,
                            extra={"zookeeper_root": f"/bench/{name}", "relay_sync_interval_ms": 500,
                                   "relay_retry_backoff_max_ms": 1000})
    try:
        return dict(asyncio.run(body(brokers)))
    finally:
        for runner in brokers:
            runner.kill()


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    load_before = load_average()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="keybus-bench-cluster-") as tmp:
        root = Path(tmp)
        zookeeper = ZooKeeperServer(root / "zookeeper")
        zookeeper.start()
        try:
            for acks in ACKS:
                (root / f"acks-{acks}").mkdir()
                result = run_cluster(root, zookeeper, f"acks-{acks}", acks, lambda b: produce_rate(
                    b, options.events, options.value_bytes))
                results.append({"scenario": f"produce, acks={acks}", **result})
            (root / "kills").mkdir()
            results.append({"scenario": "time without a leader after kill -9 (acks=2)",
                            **run_cluster(root, zookeeper, "kills", "2",
                                          lambda b: kill_loop(b, options.kills))})
        finally:
            zookeeper.stop()
    report = {"machine": {**machine.describe(), "load_before": load_before,
                          "load_after": load_average()},
              "command": "python -m benchmarks cluster " + " ".join(argv), "results": results}
    print(json.dumps(report, indent=2))
    if not options.no_record:
        record(report, render=render)
    return 0


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"`{report['command'].strip()}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, "
             f"Python {m['python']}, load average {m['load_before']} before / {m['load_after']} "
             "after (machine shared with other work)", "",
             "| scenario | events | events/s | follower lag max / median (events) | seconds |",
             "|---|---|---|---|---|"]
    for r in report["results"]:
        if "events_per_s" in r:
            lines.append(f"| {r['scenario']} | {r['events']:,} | {r['events_per_s']:,} | "
                         f"{r['lag_events_max']:,} / {r['lag_events_median']:,} | {r['seconds']} |")
    for r in report["results"]:
        if "kills" in r:
            lines += ["", f"Time without a leader after `kill -9` of the leader, {r['kills']} kills: "
                      f"median **{r['without_leader_s_median']} s** (min {r['without_leader_s_min']}, "
                      f"max {r['without_leader_s_max']}; each: {r['without_leader_s']}). ZooKeeper "
                      f"session timeout {SESSION_MS} ms."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
