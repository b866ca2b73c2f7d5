"""`python -m benchmarks compare [options]`: Keybus beside Redis Streams and NATS JetStream.

Runs produce, consume and latency (end to end) on each system in turn, and
churn on Keybus (Key_Shared consumers coming and going) (servers
installed from Debian's packages if missing, started on 127.0.0.1 with a temp
dir and stopped by PID), prints JSON, saves benchmarks/out/compare.json,
writes a generated block into benchmarks/RESULTS.md and PNGs into
benchmarks/plots/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import compare_report, machine, plots
from benchmarks.measurement import KEY_SHARED_MODES, CompareWorkload
from benchmarks.peer_scenarios import SCENARIOS, Plan, run_all
from benchmarks.results import RESULTS
from benchmarks.systems import System

OUT = Path(__file__).resolve().parent / "out"


def _systems() -> dict[str, Callable[[], System]]:
    from benchmarks import keybus_driver
    from benchmarks.peers import nats_driver, redis_driver

    return {"keybus": keybus_driver.system, "redis": redis_driver.system,
            "nats": nats_driver.system}


def _names(text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)}")
    return names


def parse_args(argv: list[str]) -> argparse.Namespace:
    defaults = CompareWorkload()
    parser = argparse.ArgumentParser(prog="python -m benchmarks compare", description=__doc__)
    parser.add_argument("--systems", type=lambda t: _names(t, ("keybus", "redis", "nats")),
                        default=("keybus", "redis", "nats"), help="comma-separated")
    parser.add_argument("--scenarios", type=lambda t: _names(t, SCENARIOS), default=SCENARIOS,
                        help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--events", type=int, default=defaults.events,
                        help="events per throughput scenario (a hard cap)")
    parser.add_argument("--duration-s", type=float, default=None,
                        help="stop sending after this long (throughput scenarios)")
    parser.add_argument("--value-bytes", type=int, default=defaults.value_bytes)
    parser.add_argument("--keys", type=int, default=defaults.keys)
    parser.add_argument("--batch-events", type=int, default=defaults.batch_events)
    parser.add_argument("--consumers", type=int, default=defaults.consumers)
    parser.add_argument("--rate", type=int, default=defaults.rate_per_s,
                        help="events/s in the latency scenario")
    parser.add_argument("--latency-events", type=int, default=defaults.latency_events)
    parser.add_argument("--churn-events", type=int, default=defaults.churn_events,
                        help="churn scenario: events stored (untimed), then drained three times: "
                             "without membership changes, with them, without again")
    parser.add_argument("--churn-period-s", type=float, default=defaults.churn_period_s,
                        help="churn scenario: one consumer leaves and another rejoins this often")
    parser.add_argument("--key-shared-mode", choices=KEY_SHARED_MODES,
                        default=defaults.key_shared_mode,
                        help="how Keybus's Key_Shared subscriptions assign keys to consumers "
                             "(consistent: consistent hashing, the broker's default as "
                             "Pulsar's; auto_split: PIP-34's hash ranges)")
    parser.add_argument("--deadline-s", type=float, default=defaults.deadline_s,
                        help="a scenario still running after this is stopped, marked incomplete")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    parser.add_argument("--no-plots", action="store_true")
    return parser.parse_args(argv)


def workload_of(options: argparse.Namespace) -> CompareWorkload:
    """The workload the options describe; exits with a usage error when it cannot run."""
    try:
        return _workload(options)
    except ValueError as error:
        raise SystemExit(f"python -m benchmarks compare: {error}") from error


def _workload(options: argparse.Namespace) -> CompareWorkload:
    return CompareWorkload(events=options.events, duration_s=options.duration_s,
                           value_bytes=options.value_bytes, keys=options.keys,
                           batch_events=options.batch_events, consumers=options.consumers,
                           rate_per_s=options.rate, latency_events=options.latency_events,
                           deadline_s=options.deadline_s,
                           churn_events=options.churn_events,
                           churn_period_s=options.churn_period_s,
                           key_shared_mode=options.key_shared_mode)


DISPLAY_ONLY = ("--no-progress", "--no-plots", "--no-record")  # the figures do not depend on them


def recorded_command(argv: list[str]) -> str:
    """The command that heads the RESULTS.md block: without display-only flags, so a rerun
    with or without a progress bar replaces the same block."""
    return " ".join(["python -m benchmarks compare",
                     *(arg for arg in argv if arg not in DISPLAY_ONLY)])


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    workload = workload_of(options)
    makers = _systems()
    load_before = os.getloadavg()[0]
    rows, infos = run_all([makers[name] for name in options.systems],
                          Plan(workload, options.scenarios, not options.no_progress))
    # Other work on the machine skews every figure: the load average says how much there was.
    load = {"load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2)}
    report: dict[str, Any] = {
        "command": recorded_command(argv),
        "machine": {**machine.describe(), **load}, "workload": asdict(workload),
        "scenarios": list(options.scenarios), "systems": infos, "results": rows}
    OUT.mkdir(exist_ok=True)
    (OUT / "compare.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({**report, "results": [{k: v for k, v in row.items()
                                              if k not in ("latency_quantiles", "latency_histogram")}
                                             for row in rows]},
                     indent=2))
    if not options.no_plots:
        for path in plots.draw(report):
            print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}",
                  file=sys.stderr)
    if not options.no_record:
        text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
        RESULTS.write_text(compare_report.replace_block(text, report["command"],
                                                        compare_report.body(report)))
    return 0
