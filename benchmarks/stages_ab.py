"""`python -m benchmarks stages-ab --base REV`: the broker's event loop, this code against REV.

Why: a change of a few CPU-µs per commit does not show in latency runs, and the
loop's CPU per commit (`python -m benchmarks stages`) moves a few percent from
one run to the next on a shared machine. Only runs of both versions,
alternated in the same minutes, tell such a change from the noise. This runs
`python -m benchmarks stages` (`--no-record`) `--pairs` times on each version,
alternately and in ABBA order (REV from a temporary git worktree, this code from the working
tree; the same Python and packages), and prints each run's loop CPU per
commit, per task where both versions have the split (task_cpu.py; when REV
has not, this code runs without it, as its timing costs the loop a little)
and its latency, then each side's mean and spread and whether the difference of the
means is larger than the spread of either side.

It must be run from a git checkout (it adds and removes the worktree).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

from benchmarks.worktree import REPO, WorktreeError, checked_out

RUN_TIMEOUT_S = 600
TASKS = ("supervise:dispatcher", "supervise:partition", "ProduceServicer._pump",
         "_handle_exceptions")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks stages-ab",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each version (3)")
    parser.add_argument("--rate", type=int, default=10_000, help="events/s (10000)")
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--fsync", action="store_true",
                        help="the broker fsyncs before it acks (default: --no-fsync, which "
                             "leaves out the disk's own noise)")
    options = parser.parse_args(argv)
    if options.pairs < 1 or options.rate < 1 or options.duration_s <= 0:
        parser.error("--pairs, --rate and --duration-s must be positive")
    return options


def figures(stages_report: dict[str, Any]) -> dict[str, float]:
    """One stages run's loop CPU per commit (in all and per task) and its latency."""
    run = stages_report["runs"][0]
    loop = next(r for r in run["loop_cpu"] if r["step"] == "**the loop in all**")
    out = {"loop": float(loop["us_per_commit"]), "p50_ms": float(run["total"]["p50_ms"]),
           "p99_ms": float(run["total"]["p99_ms"])}
    for row in run.get("task_cpu", []):
        if row["task"] in TASKS:
            out[row["task"]] = float(row["us_per_commit"])
    return out


def compare(base: list[dict[str, float]], head: list[dict[str, float]]) -> dict[str, Any]:
    """Each side's mean and spread (max - min) of every figure both have, the change of
    the means, and whether it is larger than either side's spread."""
    keys = [k for k in base[0] if all(k in r for r in base + head)]
    rows = []
    for key in keys:
        b, h = [r[key] for r in base], [r[key] for r in head]
        change = mean(h) - mean(b)
        spread = max(max(b) - min(b), max(h) - min(h))
        rows.append({"figure": key, "base": round(mean(b), 2), "head": round(mean(h), 2),
                     "change_pct": round(100 * change / mean(b), 1) if mean(b) else None,
                     "spread": round(spread, 2), "beyond_spread": abs(change) > spread})
    return {"rows": rows}


def render(options: argparse.Namespace, base: list[dict[str, float]],
           head: list[dict[str, float]], result: dict[str, Any]) -> str:
    lines = [f"`python -m benchmarks stages-ab --base {options.base} --pairs {options.pairs} "
             f"--rate {options.rate}{' --fsync' if options.fsync else ''}`", "",
             "| run | " + " | ".join(r["figure"] for r in result["rows"]) + " |",
             "|---|" + "---|" * len(result["rows"])]
    for i, (b, h) in enumerate(zip(base, head, strict=True), 1):
        for side, run in (("base", b), ("head", h)):
            lines.append(f"| {side} {i} | " + " | ".join(str(run[r["figure"]])
                                                      for r in result["rows"]) + " |")
    lines += ["", "| figure (µs per commit; latency ms) | base mean | head mean | change | "
              "largest spread of a side | beyond the spread |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['figure']} | {r['base']} | {r['head']} | {r['change_pct']}% | "
                     f"{r['spread']} | {'yes' if r['beyond_spread'] else 'no'} |")
    return "\n".join(lines)


def run_stages(directory: Path, options: argparse.Namespace, *extra: str) -> dict[str, float]:
    """`python -m benchmarks stages` in `directory`; its figures."""
    command = [sys.executable, "-m", "benchmarks", "stages", "--rates", str(options.rate),
               "--duration-s", str(options.duration_s), "--no-record",
               *([] if options.fsync else ["--no-fsync"]), *extra]
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    if done.returncode:
        raise RuntimeError(f"stages in {directory} exited {done.returncode}: "
                           f"{done.stderr.strip().splitlines()[-1:]}")
    return figures(json.loads((directory / "benchmarks" / "out" / "stages.json").read_text()))


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    base: list[dict[str, float]] = []
    head: list[dict[str, float]] = []
    try:
        with checked_out(options.base, "keybus-ab-") as worktree:
            # a base without the split by task: this code runs without it too (its timing
            # costs the loop about a µs a task step)
            head_extra = () if (worktree / "benchmarks" / "task_cpu.py").exists() else \
                ("--no-task-split",)
            sides = [(base, worktree, ()), (head, REPO, head_extra)]
            for pair in range(options.pairs):  # ABBA: a load that drifts weighs on both
                for runs, directory, extra in sides if pair % 2 == 0 else sides[::-1]:
                    runs.append(run_stages(directory, options, *extra))
    except WorktreeError as e:
        print(f"stages-ab: cannot check out {options.base!r}: {e}", file=sys.stderr)
        return 2
    print(render(options, base, head, compare(base, head)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
