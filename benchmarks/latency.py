"""`python -m benchmarks latency [options]`: publish-to-delivery latency against its floor.

One run measures, in this order:

1. the physical floor (`floor.py`): append 4 KiB + fsync on the disk that holds
   the brokers' temp data dirs, one at a time and as an ideal group commit
   (`--group-commit-s` of fsyncs back to back, weighted by the events that
   would wait on them), and a unary gRPC round trip on 127.0.0.1;
2. each system (Keybus Key_Shared with fsync before ack, the same with
   `--no-fsync`, Redis Streams with a consumer group, NATS JetStream with a
   pull consumer, and the grpcio fan-out floor without and with fsync:
   `fanout_floor.py`, a relay with nothing of a broker in it, the least a
   broker on grpcio's asyncio stack pays here; `--systems` picks some), on a
   fresh server: optionally the produce and
   end-to-end consume throughput (`--throughput-events`, Keybus with fsync and
   Redis: the ratios the issue keeps), then the latency scenario at each rate
   of `--rates` (default 1,000, 10,000 and 50,000 events/s) for
   `--duration-s` each, with `--consumers` (4) consumer processes.

The latency scenario is open loop: the producer sends on a fixed schedule
(one small batch per millisecond) and stamps every value with the time its
send was *due*, not when the loop got to it, so a stall of the client, the
server or the machine counts against every event it delayed (no coordinated
omission). Latency is the arrival at a consumer minus that stamp (one
CLOCK_MONOTONIC for every process), recorded in an HdrHistogram
(`histogram.py`); p50, p99, p99.9 and max are read from it.

The issue's targets are checked in the same run (`latency_report.py`) and
printed with the machine, the load average and every figure they use; the
JSON goes to benchmarks/out/latency.json and a block to RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks import broker_metrics, floor, latency_report, machine
from benchmarks.measurement import CompareWorkload
from benchmarks.peer_scenarios import CONSUME, LATENCY, PRODUCE, Plan, measure
from benchmarks.profiling import broker_profiled
from benchmarks.results import RESULTS
from benchmarks.systems import Server, System

OUT = Path(__file__).resolve().parent / "out"
SYSTEMS = ("keybus", "keybus-no-fsync", "redis", "nats", "grpc-floor", "grpc-floor-fsync")
DEFAULT_SYSTEMS = SYSTEMS
KEY_SHARED = "Keybus Key_Shared"
THROUGHPUT_SYSTEMS = ("keybus", "redis")  # the ratios the issue keeps: produce and Key_Shared
STREAM = "latency"
STORED = "stored"
Row = dict[str, Any]


def _keybus_server(fsync: bool) -> Callable[[Path], contextlib.AbstractContextManager[Server]]:
    """The Keybus broker, with fsync (its default) or `--no-fsync`, with its Prometheus
    endpoint on: each latency row reports the broker's WAL fsyncs and garbage
    collections in it (broker_metrics.py)."""

    @contextlib.contextmanager
    def server(tmp: Path) -> Iterator[Server]:
        from benchmarks import keybus_driver
        from benchmarks.broker import running_broker
        from benchmarks.peers.servers import free_port

        port = free_port()
        flags = () if fsync else ("--no-fsync",)
        with running_broker("--metrics-port", str(port), *flags) as (address, pid):
            yield Server(address, pid, keybus_driver._version() + ("" if fsync else " --no-fsync"),
                         metrics=f"127.0.0.1:{port}")

    return server


def _keybus(fsync: bool) -> System:
    """Keybus with its Key_Shared consumers only (the issue's 4 Key_Shared consumers)."""
    from benchmarks import keybus_driver

    base = keybus_driver.system()
    clients = tuple(c for c in base.clients if c.label == KEY_SHARED)
    if fsync:
        return replace(base, server=_keybus_server(True), clients=clients, pending=(), churn=None)
    return replace(base, name="Keybus --no-fsync", server=_keybus_server(False), pending=(), churn=None,
                   clients=tuple(replace(c, label=KEY_SHARED + ", --no-fsync") for c in clients),
                   durability="no fsync: acknowledged once in RocksDB's memtable and WAL "
                              "(OS page cache), as Redis acknowledges before its fsync")


def _makers() -> dict[str, Callable[[], System]]:
    from benchmarks import fanout_floor
    from benchmarks.peers import nats_driver, redis_driver

    return {"keybus": lambda: _keybus(True), "keybus-no-fsync": lambda: _keybus(False),
            "redis": redis_driver.system, "nats": nats_driver.system,
            "grpc-floor": lambda: fanout_floor.system(False),
            "grpc-floor-fsync": lambda: fanout_floor.system(True)}


def _names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names or any(name not in SYSTEMS for name in names):
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(SYSTEMS)}")
    return names


def _rates(text: str) -> tuple[int, ...]:
    try:
        rates = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give events/s as integers, e.g. "
                                         "1000,10000,50000") from None
    if not rates or min(rates) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every rate must be >= 1 event/s")
    return rates


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", type=_names, default=DEFAULT_SYSTEMS,
                        help="comma-separated: " + ", ".join(SYSTEMS))
    parser.add_argument("--rates", type=_rates, default=(1_000, 10_000, 50_000),
                        help="events/s, comma-separated")
    parser.add_argument("--duration-s", type=float, default=5.0,
                        help="seconds of sending per rate")
    parser.add_argument("--warmup-s", type=float, default=1.0,
                        help="seconds sent at the rate before latencies are recorded")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--throughput-events", type=int, default=500_000,
                        help="events of the produce and consume throughput runs (0: skip)")
    parser.add_argument("--floor-samples", type=int, default=1_000)
    parser.add_argument("--group-commit-s", type=float, default=5.0,
                        help="seconds of the ideal group commit on the disk (0: skip)")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy on the Keybus brokers during their 10,000 events/s run: "
                             "benchmarks/out/profile-latency-*-broker.txt")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    options = parser.parse_args(argv)
    if options.warmup_s < 0 or options.duration_s <= 0 or options.consumers < 1 \
            or options.floor_samples < 1 or options.throughput_events < 0 \
            or options.group_commit_s < 0:
        parser.error("--duration-s, --consumers and --floor-samples must be positive, "
                     "--throughput-events, --warmup-s and --group-commit-s >= 0")
    return options


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _measured(row: Row, **extra: Any) -> Row:
    row.update(extra)
    row["load_1min_after"] = _load()
    return row


def _throughput(system: System, server: Server, workload: CompareWorkload,
                show_progress: bool) -> list[Row]:
    plan = Plan(workload, (PRODUCE, CONSUME), show_progress)
    system.create_stream(server.address, STORED, workload)
    load = _load()
    produced = _measured(measure(system, server, PRODUCE, None, STORED, plan), load_1min=load)
    rows = [produced]
    if produced.get("complete") and produced.get("events"):
        load = _load()
        rows.append(_measured(measure(system, server, CONSUME, system.clients[0], STORED, plan,
                                      stored=produced["events"]), load_1min=load))
    system.drop_stream(server.address, STORED)
    return rows


def _latency(system: System, server: Server, workload: CompareWorkload, rate: int,
             duration_s: float, show_progress: bool) -> Row:
    paced = replace(workload, rate_per_s=rate, deadline_s=duration_s + workload.warmup_s + 120,
                    latency_events=max(1, int(rate * (duration_s + workload.warmup_s))))
    system.create_stream(server.address, STREAM, paced)
    try:
        load = _load()
        metrics = server.metrics
        before = broker_metrics.scrape(metrics) if metrics else ""
        row = measure(system, server, LATENCY, system.clients[0], STREAM,
                      Plan(paced, (LATENCY,), show_progress))
        if metrics:
            after = broker_metrics.scrape(metrics)
            row["wal_fsyncs"] = broker_metrics.fsyncs_between(
                broker_metrics.fsync_buckets(before), broker_metrics.fsync_buckets(after))
            row["gc_pauses"] = broker_metrics.gc_between(
                broker_metrics.gc_totals(before), broker_metrics.gc_totals(after))
        return _measured(row, rate_per_s=rate, load_1min=load)
    finally:
        system.drop_stream(server.address, STREAM)


def run_system(key: str, system: System, options: argparse.Namespace,
               workload: CompareWorkload) -> tuple[list[Row], Row, Row | None]:
    """Rows of one system, what ran, and (Keybus with fsync) the gRPC round trip."""
    info: Row = {"system": system.name, "durability": system.durability, "version": "not run"}
    rows: list[Row] = []
    round_trip = None
    with tempfile.TemporaryDirectory(prefix="keybus-latency-") as tmp, \
            system.server(Path(tmp)) as server:
        info["version"] = server.version
        if key == "keybus":
            round_trip = {**floor.grpc_round_trip(server.address, options.floor_samples),
                          "load_1min": _load()}
        if options.throughput_events and key in THROUGHPUT_SYSTEMS:
            rows += _throughput(system, server, workload, not options.no_progress)
        for rate in options.rates:
            profile = options.profile and key.startswith("keybus") and rate == 10_000
            with broker_profiled(profile, server.pid, OUT / f"profile-latency-{key}"):
                rows.append(_latency(system, server, workload, rate, options.duration_s,
                                     not options.no_progress))
    return rows, info, round_trip


def recorded_command(argv: list[str]) -> str:
    display_only = ("--no-progress", "--no-record", "--profile")
    return " ".join(["python -m benchmarks latency", *(a for a in argv if a not in display_only)])


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    workload = CompareWorkload(events=max(1, options.throughput_events),
                               consumers=options.consumers, warmup_s=options.warmup_s)
    makers = _makers()
    load_before = _load()
    disk = {**floor.disk_fsync(None, options.floor_samples), "load_1min": _load()}
    group_commit = ({**floor.disk_group_commit(None, options.group_commit_s),
                     "load_1min": _load()} if options.group_commit_s else None)
    rows: list[Row] = []
    infos: list[Row] = []
    round_trip: Row | None = None
    for key in options.systems:
        system_rows, info, trip = run_system(key, makers[key](), options, workload)
        rows += system_rows
        infos.append(info)
        round_trip = trip or round_trip
    report: dict[str, Any] = {
        "command": recorded_command(argv),
        "machine": {**machine.describe(), "load_1min_before": load_before,
                    "load_1min_after": _load()},
        "workload": {**asdict(workload), "rates": list(options.rates),
                     "duration_s": options.duration_s},
        "floor": {"disk_fsync": disk, "disk_group_commit": group_commit,
                  "grpc_round_trip": round_trip},
        "systems": infos, "results": rows}
    report["targets"] = latency_report.targets(report)
    OUT.mkdir(exist_ok=True)
    (OUT / "latency.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({**report, "results": [
        {k: v for k, v in row.items() if k not in ("latency_quantiles", "latency_histogram")}
        for row in rows]}, indent=2))
    text = latency_report.body(report)
    print(text, file=sys.stderr)
    if not options.no_record:
        from benchmarks.compare_report import replace_block

        old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
        RESULTS.write_text(replace_block(old, report["command"], text))
    return 0
