"""`python -m benchmarks simulate --seeds N`: the long run of the dispatch simulation.

Runs seeds N.. of `tests/sim/harness.py` (the real `PartitionCore` under seeded
random schedules; see that module for what every step checks) on every core,
prints a JSON summary and writes its block in RESULTS.md. A failing seed is
printed with its message and how to replay it (`KEYBUS_SIM_SEED=<seed>` with
the test, or `run_seed(seed, steps)`); the command then exits 1.

Usage: python -m benchmarks simulate [--seeds N] [--steps S] [--start SEED]
       [--jobs J] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import time
from typing import Any

from benchmarks.machine import describe
from benchmarks.results import record_block


def run_one(seed_steps: tuple[int, int]) -> dict[str, Any]:
    """One seed in a worker process: its stats, or the violation it found."""
    from tests.sim.harness import run_seed
    from tests.sim.model import Violation

    seed, steps = seed_steps
    try:
        stats = run_seed(seed, steps)
    except Violation as error:
        return {"seed": seed, "failure": str(error)}
    return {"seed": seed, "steps": stats.steps, "rounds": stats.rounds,
            "deliveries": stats.deliveries, "redeliveries": stats.redeliveries,
            "events": stats.events, "restarts": stats.restarts}


def load_average() -> str:
    """The 1-minute load average (the machine is shared: say how busy it was)."""
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks simulate", description=__doc__)
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000, help="steps per seed")
    parser.add_argument("--start", type=int, default=None, help="first seed (default random)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-record", action="store_true", help="do not update RESULTS.md")
    return parser.parse_args(argv)


def summary(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    done = [r for r in rows if "failure" not in r]
    steps = sum(r["steps"] for r in done)
    return {"seeds": len(rows), "failed": [r for r in rows if "failure" in r],
            "steps": steps, "rounds": sum(r["rounds"] for r in done),
            "events": sum(r["events"] for r in done),
            "deliveries": sum(r["deliveries"] for r in done),
            "redeliveries": sum(r["redeliveries"] for r in done),
            "restarts": sum(r["restarts"] for r in done), "seconds": round(seconds, 1),
            "steps_per_s": round(steps / seconds) if seconds else 0}


def block(command: str, result: dict[str, Any], load: tuple[str, str]) -> str:
    m = result["machine"]
    lines = [f"`{command}` — {m['date']}, {m['nproc']} cores, {m['cpu']}, Python {m['python']}, "
             f"{result['jobs']} worker processes; load average (1 min) {load[0]} before, "
             f"{load[1]} after", "",
             "| seeds | steps | dispatch rounds | events | deliveries | redeliveries | broker "
             "restarts | failed seeds | seconds | steps/s |", "|" + "---|" * 10]
    lines.append("| " + " | ".join(f"{result[k]:,}" for k in (
        "seeds", "steps", "rounds", "events", "deliveries", "redeliveries", "restarts")) +
        f" | {len(result['failed'])} | {result['seconds']:,} | {result['steps_per_s']:,} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    start = options.start if options.start is not None else random.randrange(1 << 40)
    seeds = [(start + i, options.steps) for i in range(options.seeds)]
    load_before = load_average()
    began = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(options.jobs) as pool:
        rows = pool.map(run_one, seeds, chunksize=max(1, len(seeds) // (8 * options.jobs)))
    result = summary(rows, time.monotonic() - began)
    result.update(machine=describe(), jobs=options.jobs, start=start, steps_per_seed=options.steps)
    for failure in result["failed"][:5]:
        print(f"seed {failure['seed']} FAILED (replay: KEYBUS_SIM_SEED={failure['seed']} "
              f"KEYBUS_SIM_STEPS={options.steps}): {failure['failure']}", file=sys.stderr)
    print(json.dumps({k: v for k, v in result.items() if k != "failed"} |
                     {"failed_seeds": [f["seed"] for f in result["failed"]]}, indent=2))
    if not options.no_record:
        command = f"python -m benchmarks simulate --seeds {options.seeds} --steps {options.steps}"
        load_after = load_average()
        record_block(command, block(command, result, (load_before, load_after)))
    return 1 if result["failed"] else 0
