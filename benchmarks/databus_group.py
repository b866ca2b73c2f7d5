"""`python -m benchmarks databus`: the Databus callback layer against a plain Reader.

Stores N events as consistency windows of W events (one partition), then,
in the same run and on the same data:
* reader: a plain SDK Reader from the earliest offset to the end, counting
  events per batch (no per-event work): the floor.
* databus, 1 consumer and 4-member group: a DatabusClient registration
  with trivial sync callbacks (on_event counts) reading the same log, with
  whole-window checkpoints to a file store once a second, until the last
  window's on_end_window.
Per-event overhead of the callback layer = (t_databus - t_reader) / N.
The target (issue 12): the 4-member group delivers >= 300,000 events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from typing import Any

from benchmarks import machine
from benchmarks.broker import running_broker
from benchmarks.results import record
from sdk import Admin, Producer, Reader
from sdk.databus import DatabusClient, DatabusConfig, DatabusConsumerBase, Scn
from sdk.databus.event import DbusEvent
from sdk.databus.results import SUCCESS, CallbackResult
from sdk.stores import FileCheckpointStore

TARGET_EVENTS_PER_S = 300_000
TOPIC = "databus-bench"


class Counting(DatabusConsumerBase):
    """Trivial callbacks: count events; member 0 counts windows and says when all are in."""

    def __init__(self, windows: int, done: asyncio.Event | None) -> None:
        self.events = 0
        self.windows_left = windows
        self.done = done

    def on_event(self, event: DbusEvent) -> CallbackResult:
        self.events += 1
        return SUCCESS

    def on_end_window(self, scn: Scn) -> CallbackResult:
        if self.done is not None:
            self.windows_left -= 1
            if self.windows_left == 0:
                self.done.set()
        return SUCCESS


async def store_windows(broker: str, events: int, window_events: int, value_bytes: int) -> None:
    """N events as windows of W (keys spread over 10,000), 64 windows in flight."""
    async with Admin(broker) as admin:
        await admin.create_topic(TOPIC, partitions=1)
    value = os.urandom(value_bytes)
    async with await Producer.create(broker, TOPIC) as producer:
        pending: list[Any] = []
        for first in range(0, events, window_events):
            window = [{"key": (first + i) % 10_000, "value": value, "source": "orders"}
                      for i in range(min(window_events, events - first))]
            pending.append(asyncio.ensure_future(producer.send_window(window, partition=0)))
            if len(pending) >= 64:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)


async def read_plain(broker: str, events: int) -> float:
    count = 0
    began = time.perf_counter()
    async with Reader(broker, TOPIC, 0, stop_offset=events) as reader:
        async for batch in reader:
            count += batch.count
    seconds = time.perf_counter() - began
    assert count == events, (count, events)
    return seconds


async def read_databus(broker: str, events: int, window_events: int, members: int,
                       checkpoint_dir: str) -> float:
    windows = -(-events // window_events)
    done = asyncio.Event()
    group = [Counting(windows, done if i == 0 else None) for i in range(members)]
    config = DatabusConfig(checkpoint_windows_n=0, checkpoint_interval_ms=1_000)
    client = DatabusClient(broker, checkpoint_store=FileCheckpointStore(checkpoint_dir),
                           config=config)
    client.register(group if members > 1 else group[0], topic=TOPIC, sources=["orders"],
                    name=f"bench-{members}")
    began = time.perf_counter()
    await client.start()
    await asyncio.wait_for(done.wait(), 600)
    seconds = time.perf_counter() - began
    await client.stop()
    assert sum(member.events for member in group) == events
    return seconds


def row(scenario: str, events: int, window_events: int, value_bytes: int,
        seconds: float) -> dict[str, Any]:
    return {"scenario": scenario, "events": events, "value_bytes": value_bytes,
            "keys": 10_000, "batch_events": window_events, "partitions": 1, "fsync": True,
            "events_per_s": round(events / seconds), "mb_per_s":
                round(events * value_bytes / seconds / 1e6, 1), "seconds": round(seconds, 3)}


async def run(broker: str, options: argparse.Namespace) -> list[dict[str, Any]]:
    n, w, v = options.events, options.window_events, options.value_bytes
    await store_windows(broker, n, w, v)
    with tempfile.TemporaryDirectory(prefix="keybus-bench-checkpoints-") as checkpoints:
        reader_s = await read_plain(broker, n)
        single_s = await read_databus(broker, n, w, 1, checkpoints)
        group_s = await read_databus(broker, n, w, options.members, checkpoints)
    rows = [row("reader (plain, per batch)", n, w, v, reader_s),
            row("databus, 1 consumer", n, w, v, single_s),
            row(f"databus, {options.members}-member group", n, w, v, group_s)]
    for result, seconds in zip(rows[1:], (single_s, group_s), strict=True):
        result["overhead_us_per_event"] = round((seconds - reader_s) / n * 1e6, 2)
        result["ratio_to_reader"] = round(reader_s / seconds, 3)
    rows[2]["target_events_per_s"] = TARGET_EVENTS_PER_S
    rows[2]["target_met"] = rows[2]["events_per_s"] >= TARGET_EVENTS_PER_S
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks databus", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--window-events", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    options = parser.parse_args(argv)
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[0]
    with running_broker() as (broker, _pid):
        rows = asyncio.run(run(broker, options))
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[0]
    report = {"machine": machine.describe(),
              "command": " ".join(["python -m benchmarks databus", *argv]),
              "load_1min_before_after": [load_before, load_after],
              "results": rows}
    print(json.dumps(report, indent=2))
    if not options.no_record:
        record(report, notes=notes(report))
    return 0


def notes(report: dict[str, Any]) -> str:
    group = report["results"][2]
    single = report["results"][1]
    return (f"Per-event overhead of the callback layer over the plain reader: "
            f"{single['overhead_us_per_event']} µs (1 consumer), "
            f"{group['overhead_us_per_event']} µs ({group['scenario']}). Target "
            f"{TARGET_EVENTS_PER_S:,} events/s for the group: "
            f"{'met' if group['target_met'] else 'NOT met'}. 1-min load average "
            f"{report['load_1min_before_after'][0]} before, "
            f"{report['load_1min_before_after'][1]} after.")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
