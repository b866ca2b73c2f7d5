"""`python -m benchmarks SCENARIO [options]`: run benchmarks, print JSON, update RESULTS.md.

Scenarios: produce, read (reads what produce wrote), filtered-read, all.
Every run starts its own broker on 127.0.0.1 with a temp data dir.

`python -m benchmarks spark-read [--events N] [--repeats N] [--value-bytes B]`
counts a Keybus topic in Spark against a bare Python data source and prints
JSON (see benchmarks/spark_read.py; needs pyspark and Java).

`python -m benchmarks cluster [--events N] [--kills K]` measures replication
(acks=leader/1/2) and failover time with 3 brokers and ZooKeeper (see
benchmarks/cluster.py).
`python -m benchmarks bootstrap [options]` measures the compacted view (produce
with it on versus off, its lag) and bootstrap snapshots (see benchmarks/bootstrap.py).

`python -m benchmarks compare [options]` runs Keybus beside Redis Streams and
NATS JetStream (see benchmarks/compare.py; `compare --help` for its options).

`python -m benchmarks latency [options]` measures open-loop publish-to-delivery
latency at several rates beside the disk's fsync, a gRPC round trip and a bare
grpcio fan-out relay, with Redis and NATS in the same run (see
benchmarks/latency.py and benchmarks/fanout_floor.py).

`python -m benchmarks stages [options]` splits that latency by stage: a traced
broker, one producer and Key_Shared consumers (see benchmarks/stages.py), and
the broker's event-loop CPU per commit by step (benchmarks/loop_cpu.py) and by
task (benchmarks/task_cpu.py). `python -m benchmarks stages-ab --base REV` runs
it on this code and on REV alternately and compares the loop's CPU per commit
(benchmarks/stages_ab.py). `python -m benchmarks core-path` runs a dispatcher's own
work per commit in one process and counts its CPU and Python calls, alone or
`--base REV` against REV (benchmarks/core_path.py).

`python -m benchmarks databus [--events N] [--window-events W] [--members M]` runs
a Databus callback group over windows of W events against a plain Reader on the
same data (see benchmarks/databus_group.py).

`python -m benchmarks databus-shares [--base REV]` times Key_Shared Databus window
shares from `send_window`'s due time to `on_end_window`, two consumers on one
subscription (see benchmarks/databus_shares.py).

`python -m benchmarks view-pass` times a compacted view pass on a worker
thread and how late the main thread wakes meanwhile (see benchmarks/view_pass.py).
`python -m benchmarks wal [options]` measures the write-ahead log a broker keeps,
its produce round trips once steady and a restart after SIGKILL (see
benchmarks/wal.py).
`python -m benchmarks restart [--rounds N]` times how soon a producer, a consumer and
a reader carry on after their broker is killed and started again (see
benchmarks/restart.py).
`python -m benchmarks memory [options]` measures a broker's memory with a topic of
many partitions whose Key_Shared consumers stalled (see benchmarks/memory.py).
`python -m benchmarks simulate --seeds N` runs the dispatch simulation's long
run (see benchmarks/simulate.py).
`python -m benchmarks soak [--minutes N] [--rate R]` runs one broker under steady
produce, Key_Shared consumer churn, a Shared subscription and follow readers, and
checks delivery, order, draining and resource growth (see benchmarks/soak.py).

`python -m benchmarks fuzz --examples N` fuzzes every method of a live broker
(benchmarks/fuzz.py); `python -m benchmarks secure` measures produce and
Key_Shared end to end with TLS and tokens against plain text in one run
(benchmarks/secure.py).

`python -m benchmarks processors [options]` times event processors: balancing
from cold, recovering a killed one's partitions, and events/s with checkpoints
(see benchmarks/processors.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import machine, scenarios
from benchmarks.broker import running_broker
from benchmarks.profiling import profiled
from benchmarks.results import record

OUT = Path(__file__).resolve().parent / "out"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("scenario", choices=["produce", "read", "filtered-read", "all"])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch-events", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--no-fsync", action="store_true", help="acknowledge before fsync")
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    parser.add_argument("--profile", action="store_true",
                        help="profile the client (pyinstrument) and the broker (py-spy) during "
                             "produce; write benchmarks/out/profile-*.txt")
    return parser.parse_args(argv)


async def run_scenarios(scenario: str, broker: str, broker_pid: int,
                        workload: scenarios.Workload, profile: bool) -> list[dict[str, Any]]:
    """Every scenario of one command in one event loop (grpc.aio binds to it)."""
    with profiled(profile, broker_pid, OUT / "profile-produce"):
        results = [await scenarios.produce(broker, workload)]
    if scenario != "produce":
        results.append(await scenarios.read(broker, workload))
    if scenario in ("filtered-read", "all"):
        results.append(await scenarios.filtered_read(broker, workload))
    return results


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["compare"]:
        from benchmarks import compare  # its own options; needs redis, nats-py, matplotlib, tqdm

        return compare.main(arguments[1:])
    if arguments[:1] == ["latency"]:
        from benchmarks import latency  # open-loop latency against the disk and gRPC floor

        return latency.main(arguments[1:])
    if arguments[:1] == ["stages"]:
        from benchmarks import stages  # where each millisecond of the latency goes

        return stages.main(arguments[1:])
    if arguments[:1] == ["stages-ab"]:
        from benchmarks import stages_ab  # the loop's CPU per commit, this code against a rev

        return stages_ab.main(arguments[1:])
    if arguments[:1] == ["core-path"]:
        from benchmarks import core_path  # a dispatcher's own work per commit, one process

        return core_path.main(arguments[1:])
    if arguments[:1] == ["view-pass"]:
        from benchmarks import view_pass  # what a compacted view pass costs the event loop

        return view_pass.main(arguments[1:])
    if arguments[:1] == ["wal"]:
        from benchmarks import wal  # the write-ahead log kept, its fsyncs, a restart

        return wal.main(arguments[1:])
    if arguments[:1] == ["restart"]:
        from benchmarks import restart  # how soon clients carry on after a broker restart

        return restart.main(arguments[1:])
    if arguments[:1] == ["memory"]:
        from benchmarks import memory  # a broker's RSS with many partitions, consumers stalled

        return memory.main(arguments[1:])
    if arguments[:1] == ["soak"]:
        from benchmarks import soak  # minutes of load and churn: leaks, stuck consumers, loss

        return soak.main(arguments[1:])
    if arguments[:1] == ["simulate"]:
        from benchmarks import simulate  # the dispatch simulation, on every core

        return simulate.main(arguments[1:])
    if arguments[:1] == ["cluster"]:
        from benchmarks import cluster  # 3 brokers and ZooKeeper (Debian's zookeeper package)

        return cluster.main(arguments[1:])
    if arguments[:1] == ["bootstrap"]:
        from benchmarks import bootstrap  # compacted view and snapshot figures

        return bootstrap.main(arguments[1:])
    if arguments[:1] == ["processors"]:
        from benchmarks import processors  # its own options; Redis rows need redis-server

        return processors.main(arguments[1:])
    if arguments[:1] == ["databus"]:
        from benchmarks import databus_group  # the callback layer against a plain Reader

        return databus_group.main(arguments[1:])
    if arguments[:1] == ["databus-shares"]:
        from benchmarks import databus_shares  # Key_Shared window shares: send to presented

        return databus_shares.main(arguments[1:])
    if arguments[:1] == ["spark-read"]:
        from benchmarks import spark_read  # its own options; needs pyspark and Java

        spark_read.main(arguments[1:])
        return 0
    if arguments[:1] == ["fuzz"]:
        from benchmarks import fuzz  # needs hypothesis (dev dependency)

        code: int = fuzz.main(arguments[1:])
        return code
    if arguments[:1] == ["secure"]:
        from benchmarks import secure  # TLS + tokens against plain text, same run

        code = secure.main(arguments[1:])
        return code
    options = parse_args(arguments)
    workload = scenarios.Workload(options.events, options.value_bytes, options.keys,
                                  options.batch_events, not options.no_fsync, options.partitions)
    broker_args = ["--no-fsync"] if options.no_fsync else []
    with running_broker(*broker_args) as (broker, broker_pid):
        OUT.mkdir(exist_ok=True)
        results = asyncio.run(run_scenarios(options.scenario, broker, broker_pid, workload,
                                            options.profile))
    report = {"machine": machine.describe(), "command": "python -m benchmarks " + " ".join(
        sys.argv[1:] if argv is None else argv), "results": results}
    print(json.dumps(report, indent=2))
    (OUT / f"{options.scenario}.json").write_text(json.dumps(report, indent=2))
    if not options.no_record:
        record(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
