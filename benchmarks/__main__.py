"""`python -m benchmarks SCENARIO [options]`: run benchmarks, print JSON, update RESULTS.md.

Scenarios: produce, read (reads what produce wrote), filtered-read, all.
Every run starts its own broker on 127.0.0.1 with a temp data dir.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    workload = scenarios.Workload(options.events, options.value_bytes, options.keys,
                                  options.batch_events, not options.no_fsync, options.partitions)
    broker_args = ["--no-fsync"] if options.no_fsync else []
    results: list[dict[str, Any]] = []
    OUT.mkdir(exist_ok=True)
    with running_broker(*broker_args) as (broker, broker_pid):
        with profiled(options.profile, broker_pid, OUT / "profile-produce"):
            results.append(scenarios.run(scenarios.produce(broker, workload)))
        if options.scenario != "produce":
            results.append(scenarios.run(scenarios.read(broker, workload)))
        if options.scenario in ("filtered-read", "all"):
            results.append(scenarios.run(scenarios.filtered_read(broker, workload)))
    report = {"machine": machine.describe(), "command": "python -m benchmarks " + " ".join(
        sys.argv[1:] if argv is None else argv), "results": results}
    print(json.dumps(report, indent=2))
    (OUT / f"{options.scenario}.json").write_text(json.dumps(report, indent=2))
    if not options.no_record:
        record(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
