"""`python -m benchmarks stages [options]`: where each millisecond of publish-to-delivery goes.

The latency benchmark (`latency.py`) says how long; this says where. One
broker runs under `stage_trace.py` (stamps at each step of the path), one
producer process sends at `--rates` in 1 ms ticks, paced and stamped as in the
latency scenario (each value carries the time its send was due),
`--consumers` Key_Shared consumer processes note each event's arrival; the
producer also notes when each batch left its accumulator for the Sender and
when its answer came back (the producer's round trip, which a tick due while
a request is out waits for). `stage_join.py` joins the notes on the offsets
and prints, per rate, p50 / p99 / p99.9 / max of every stage beside the disk's own
fsync, the broker's WAL fsyncs of the run (how many stalled 10 ms or more), the
CPU each process used, and where the broker's event-loop thread spent its CPU
per commit (`loop_cpu.py`). `--consumer-processes` puts the consumers on fewer
processes (one event loop each): what the processes' own wake-ups cost on a
small machine. `--round-spin-us` starts every dispatcher round with that much
busy work: runs with and without it say what a µs of the commit's path costs
the latency, so what a faster path would save. All clocks are CLOCK_MONOTONIC.

It patches private methods of the broker and the SDK: a diagnostic, not a
measure of the product (its stamps cost a few µs per step). The figures go
to benchmarks/out/stages.json and a block of RESULTS.md (unless --no-record).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import floor, loop_cpu, machine, task_cpu
from benchmarks.broker_metrics import STALL_S
from benchmarks.cpu import process_cpu_s
from benchmarks.histogram import figures_ms, of_ms
from benchmarks.results import record_block
from benchmarks.stage_join import STAGES, Arrival, round_trips_ns, stage_rows, wal_fsyncs_ns
from benchmarks.stage_run import consumers_process, produce, running_traced_broker

OUT = Path(__file__).resolve().parent / "out"
VALUE_BYTES = 100


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks stages",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--rates", default="1000,10000", help="events/s, comma-separated")
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--consumer-processes", type=int, default=0,
                        help="processes the consumers are spread over (default: one each)")
    parser.add_argument("--no-fsync", action="store_true", help="the broker acks before fsync")
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    parser.add_argument("--no-task-split", action="store_true",
                        help="leave out the loop's split by task (task_cpu.py), whose timing "
                             "costs the loop about a µs a task step: to compare with a version "
                             "without it (stages_ab.py)")
    parser.add_argument("--round-spin-us", type=int, default=0,
                        help="start every dispatcher round with this many µs of busy work "
                             "(thread CPU): what a µs of the commit's path costs the latency")
    options = parser.parse_args(argv)
    if options.round_spin_us < 0:
        parser.error("--round-spin-us must be 0 or more")
    processes = options.consumer_processes or options.consumers
    if options.consumers < 1 or not 1 <= processes <= options.consumers \
            or options.consumers % processes:
        parser.error("--consumers must be positive and a multiple of --consumer-processes")
    options.consumer_processes = processes
    return options


def run_rate(rate: int, options: argparse.Namespace) -> dict[str, Any]:
    """One broker, producer and consumers at `rate`; the stage figures."""
    events = max(1, int(rate * options.duration_s))
    with tempfile.TemporaryDirectory(prefix="keybus-stages-") as tmp:
        notes_file = Path(tmp) / "notes.json"
        with running_traced_broker(notes_file, options.no_fsync, not options.no_task_split,
                                   options.round_spin_us) as (address, pid):
            # spawn, not fork: the caller may already run gRPC (a test process does), and a
            # forked child of a process with gRPC's threads can abort
            spawn = multiprocessing.get_context("spawn")
            results: multiprocessing.Queue[Any] = spawn.Queue()
            done = spawn.Event()
            each = options.consumers // options.consumer_processes
            children = [spawn.Process(target=consumers_process,
                                      args=(address, events, results, done, each))
                        for _ in range(options.consumer_processes)]
            for child in children:
                child.start()
            for _ in range(options.consumers):
                results.get(timeout=60)  # each consumer says it is subscribed
            before = {"broker": process_cpu_s(pid),
                      "consumers": sum(process_cpu_s(c.pid or 0) for c in children)}
            began, producer_cpu = time.monotonic(), time.process_time()
            producer = asyncio.run(produce(address, rate, events, VALUE_BYTES))
            arrivals: list[Arrival] = []
            deadline = time.monotonic() + 60
            while len(arrivals) < events and time.monotonic() < deadline:
                arrivals.extend(Arrival(*a) for a in results.get(timeout=60))
            seconds = time.monotonic() - began
            cpu = {"producer": (time.process_time() - producer_cpu) / seconds,
                   "broker": (process_cpu_s(pid) - before["broker"]) / seconds,
                   "consumers": (sum(process_cpu_s(c.pid or 0) for c in children)
                                 - before["consumers"]) / seconds}
            done.set()
            for child in children:
                child.join(10)
        notes = json.loads(notes_file.read_text())
    rows = stage_rows(notes, arrivals, producer.left)
    round_trips = round_trips_ns(producer.left, producer.answered)
    columns: list[tuple[int, ...]] = list(zip(*rows, strict=True)) if rows else [() for _ in STAGES]
    stages = [{"stage": name, "what": what, **figures_ms(of_ms(max(0, v) / 1e6 for v in column))}
              for (name, what), column in zip(STAGES, columns, strict=True)]
    total = of_ms(sum(row) / 1e6 for row in rows)
    fsyncs = wal_fsyncs_ns(notes)
    wal_fsync = {**figures_ms(of_ms(d / 1e6 for d in fsyncs)),
                 "over_10ms": sum(d >= STALL_S * 1e9 for d in fsyncs)}
    tallied = next((n[1] for n in notes if n[0] == "loop_cpu"), None)
    tasks = next((n[1] for n in notes if n[0] == "task_cpu"), None)
    commits = sum(n[0] == "write" for n in notes)
    return {"rate": rate, "consumer_processes": options.consumer_processes,
            "loop_cpu": loop_cpu.per_commit(tallied, commits) if tallied else [],
            "task_cpu": task_cpu.per_commit(tasks, tallied["loop_total_s"], commits)
            if tasks and tallied else [],
            "wal_fsync": wal_fsync,
            "round_trip": figures_ms(of_ms(d / 1e6 for d in round_trips)),
            "requests": len(set(producer.left.values())),  # one `submit` time per batch
            "events": events, "joined": len(rows), "stages": stages,
            "total": figures_ms(total), "cpu_cores": {k: round(v, 3) for k, v in cpu.items()},
            "load": os.getloadavg()[0]}


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    disk = report["disk_fsync"]
    lines = [f"`{report['command']}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, Python "
             f"{m['python']}; every process on this machine, 127.0.0.1; "
             f"disk append 4 KiB + fsync p50 {disk['p50_ms']} / p99 {disk['p99_ms']} ms"]
    for run in report["runs"]:
        cpu = run["cpu_cores"]
        processes = run.get("consumer_processes")
        spread = (f", consumers in {processes} process{'es' if processes > 1 else ''}"
                  if processes else "")
        lines += ["", f"#### {run['rate']:,} events/s: {run['joined']:,} of {run['events']:,} "
                  f"events joined{spread}; CPU cores: broker {cpu['broker']}, producer "
                  f"{cpu['producer']}, consumers (together) {cpu['consumers']}; load "
                  f"{run['load']:.2f}", "",
                  "| stage | what it holds | p50 ms | p99 ms | p99.9 ms | max ms |",
                  "|---|---|---|---|---|---|"]
        for s in run["stages"] + [{"stage": "**due → arrival**", "what": "the whole latency",
                                   **run["total"]}]:
            lines.append(f"| {s['stage']} | {s['what']} | " + " | ".join(
                str(s.get(k, "—")) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")) + " |")
        trip = run.get("round_trip") or {}
        if trip.get("samples"):
            lines += ["", f"The producer's round trip (a batch leaves for the Sender → its "
                      f"answer is handled; a tick due meanwhile waits for it, Nagle's rule): "
                      f"p50 {trip['p50_ms']} / p99 {trip['p99_ms']} ms over "
                      f"{run['requests']:,} requests, {trip['samples']:,} ticks."]
        if run.get("loop_cpu"):
            lines += ["", "Where the broker's event-loop thread spent its CPU (its own time in "
                      "each step, benchmarks/loop_cpu.py), per commit:", "",
                      loop_cpu.table(run["loop_cpu"])]
        if run.get("task_cpu"):
            lines += ["", "The same loop by task: the CPU of each task's steps (from one "
                      "`await` that suspends to the next, benchmarks/task_cpu.py), per commit:",
                      "", task_cpu.table(run["task_cpu"])]
        wal = run.get("wal_fsync") or {}
        if wal.get("samples"):
            lines += ["", f"The broker's WAL fsyncs, on the syncer thread: {wal['samples']:,}, "
                      f"p50 {wal['p50_ms']} / p99 {wal['p99_ms']} / max {wal['max_ms']} ms; "
                      f"{wal['over_10ms']} took 10 ms or more (the disk stalled)."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    rates = [int(r) for r in options.rates.split(",") if r.strip()]
    report: dict[str, Any] = {
        "machine": machine.describe(), "command": "python -m benchmarks stages " + " ".join(argv),
        "disk_fsync": floor.disk_fsync(None, 500), "runs": []}
    for rate in rates:
        report["runs"].append(run_rate(rate, options))
    print(render(report))
    OUT.mkdir(exist_ok=True)
    (OUT / "stages.json").write_text(json.dumps(report, indent=2))
    if not options.no_record:
        record_block(report["command"].strip(), render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
