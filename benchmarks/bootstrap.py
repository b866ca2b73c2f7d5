"""`python -m benchmarks bootstrap`: the compacted view's costs and the snapshot's speed.

Measures, on one broker process started for the run:

1. produce events/s into a topic with the view on and one with it off, in
   repetitions of the backbone's produce workload (one SDK producer,
   `send()` per event, 100-byte values, 10,000 keys) in ABBA order after a
   warm-up run, waiting for the view to catch up between repetitions so one
   run's maintenance does not slow the next;
2. the view's lag behind the log (events) sampled every 50 ms during the
   view-on runs, and how long it takes to catch up once the producer stops;
3. snapshot rows/s of a bootstrap over 1,000,000 distinct keys, unfiltered
   and filtered in the broker to 10% (mod:10:[3]); and how fast the view
   folds those keys in.

Prints JSON and writes its table to RESULTS.md (unless --no-record).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import machine, scenarios
from benchmarks.broker import running_broker
from benchmarks.results import record
from sdk import Admin, Producer, Reader

OUT = Path(__file__).resolve().parent / "out"
SAMPLE_S = 0.05
COLUMNS = ("scenario", "events", "rate", "unit", "seconds", "detail")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks bootstrap", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="per produce repetition")
    parser.add_argument("--repeats", type=int, default=2, help="produce repetitions per mode")
    parser.add_argument("--snapshot-keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    parser.add_argument("--broker-arg", dest="broker_args", action="append", default=[],
                        help="extra broker flag, e.g. --broker-arg=--view-linger-ms=100")
    return parser.parse_args(argv)


async def _view_state(admin: Admin, topic: str) -> tuple[int, int]:
    """(end offset, view offset) of partition 0."""
    p = (await admin.describe_topic(topic)).partitions[0]
    return p.end_offset, p.view_offset


async def _wait_caught_up(admin: Admin, topic: str, timeout_s: float = 600) -> float:
    """Seconds until the view holds the whole log (bounded)."""
    began = time.perf_counter()
    while True:
        end, view = await _view_state(admin, topic)
        if view >= end:
            return time.perf_counter() - began
        if time.perf_counter() - began > timeout_s:
            raise TimeoutError(f"the view of {topic} is still {end - view} events behind")
        await asyncio.sleep(SAMPLE_S / 2)


async def _sample_lag(admin: Admin, topic: str, lags: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        end, view = await _view_state(admin, topic)
        lags.append(end - view)
        await asyncio.sleep(SAMPLE_S)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def produce_on_off(broker: str, broker_pid: int,
                         options: argparse.Namespace) -> list[dict[str, Any]]:
    """Alternate view-on / view-off produce repetitions on one broker."""
    workload = scenarios.Workload(options.events, options.value_bytes)
    rates: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}  # broker CPU µs per event
    lags: list[int] = []
    catch_up_s: list[float] = []
    async with Admin(broker) as admin:
        await scenarios.produce(broker, scenarios.Workload(100_000, options.value_bytes),
                                topic="produce-warm-up")
        for i in range(options.repeats):
            for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):  # ABBA order
                topic = f"produce-view-{mode}-{i}"
                await admin.create_topic(topic, view=mode == "on")
                stop = asyncio.Event()
                sampler = asyncio.create_task(_sample_lag(admin, topic, lags, stop)) \
                    if mode == "on" else None
                cpu_before = cpu_seconds(broker_pid)
                result = await scenarios.produce(broker, workload, topic=topic, create=False)
                stop.set()
                if sampler is not None:
                    await sampler
                    catch_up_s.append(await _wait_caught_up(admin, topic))
                cpu[mode].append((cpu_seconds(broker_pid) - cpu_before) * 1e6 / options.events)
                rates[mode].append(result["events_per_s"])
    on, off = statistics.mean(rates["on"]), statistics.mean(rates["off"])
    cpu_on, cpu_off = statistics.mean(cpu["on"]), statistics.mean(cpu["off"])
    return [
        _row("produce, view off", options.events, off, "events/s", options.events / off,
             f"runs {_runs(rates['off'])}; broker CPU {cpu_off:.2f} µs/event"),
        _row("produce, view on", options.events, on, "events/s", options.events / on,
             f"runs {_runs(rates['on'])}; on/off = {on / off:.2f}; broker CPU "
             f"{cpu_on:.2f} µs/event (view folding included)"),
        _row("view lag during produce (view on)", options.events, max(lags), "events (max)",
             max(catch_up_s), f"median {int(statistics.median(lags)):,} events over "
             f"{len(lags)} samples; seconds = longest catch-up after the producer stopped"),
    ]


async def snapshot_rates(broker: str, options: argparse.Namespace) -> list[dict[str, Any]]:
    """Fold 1,000,000 distinct keys into a view, then bootstrap them (all, then 10%)."""
    keys = options.snapshot_keys
    value = os.urandom(options.value_bytes)
    async with Admin(broker) as admin:
        await admin.create_topic("snapshot", view=True)
        began = time.perf_counter()
        async with await Producer.create(broker, "snapshot") as producer:
            for start in range(0, keys, 10_000):
                chunk = range(start, min(start + 10_000, keys))
                await producer.send_batch(list(chunk), [value] * len(chunk), partition=0)
            await producer.flush()
        produced_s = time.perf_counter() - began
        fold_s = produced_s + await _wait_caught_up(admin, "snapshot")
    rows = [_row("view folds distinct keys (produce to caught up)", keys, keys / fold_s,
                 "keys/s", fold_s, "send_batch of 10,000 keys; the view catches up after")]
    for name, key_filter in (("snapshot, unfiltered", None), ("snapshot, filtered to 10%",
                                                                "mod:10:[3]")):
        count, seconds = await _read_snapshot(broker, key_filter)
        rows.append(_row(name, keys, keys / seconds, "keys scanned/s", seconds,
                         f"{count:,} rows delivered ({count / seconds:,.0f} rows/s)"))
    return rows


async def _read_snapshot(broker: str, key_filter: str | None) -> tuple[int, float]:
    count = 0
    began = time.perf_counter()
    async with Reader(broker, "snapshot", 0, start="bootstrap", key_filter=key_filter,
                      include_tombstones=False) as reader:
        async for batch in reader:
            if batch.phase != "snapshot":
                break
            count += batch.count
    return count, time.perf_counter() - began


def _runs(rates: list[float]) -> str:
    return ", ".join(f"{r:,.0f}" for r in rates)


def _row(scenario: str, events: int, rate: float, unit: str, seconds: float,
         detail: str) -> dict[str, Any]:
    return {"scenario": scenario, "events": events, "rate": round(rate), "unit": unit,
            "seconds": round(seconds, 3), "detail": detail}


def table(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"`{report['command']}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, "
             f"Python {m['python']}, load average at start {m['loadavg']}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for result in report["results"]:
        cells = [f"{v:,}" if isinstance(v, int) else str(v)
                 for v in (result[c] for c in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run(broker: str, broker_pid: int,
              options: argparse.Namespace) -> list[dict[str, Any]]:
    return [*await produce_on_off(broker, broker_pid, options),
            *await snapshot_rates(broker, options)]


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    with running_broker(*options.broker_args) as (broker, broker_pid):
        results = asyncio.run(run(broker, broker_pid, options))
    report = {"machine": {**machine.describe(), "loadavg": " ".join(loadavg)},
              "command": " ".join(["python -m benchmarks bootstrap", *argv]), "results": results}
    print(json.dumps(report, indent=2))
    OUT.mkdir(exist_ok=True)
    (OUT / "bootstrap.json").write_text(json.dumps(report, indent=2))
    if not options.no_record:
        record(report, render=table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
