"""`python -m benchmarks databus-shares`: how long a Key_Shared window share takes to present.

Why: a Databus consumer on a Key_Shared subscription presents its share of
each window once the share is complete. Told nothing by the broker, it can
only close a share lacking the window's last event when a later window
arrives or after `window_linger_ms` of silence; a broker that marks where
shares end (`Delivery.open_windows`) lets it close each share with its last
part. This measures what a user feels: from the time `send_window` was
*due* (windows go out open loop, every `--interval-ms`, so a stalled
producer counts against the windows it delayed) to each consumer's
`on_end_window` of its share, with two consumers on one subscription.

`--base REV` runs the same measurement over REV's broker and SDK (a temporary
git worktree on PYTHONPATH) and over this tree, alternately, `--pairs` times.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

# broker and SDK from whichever tree is first on the path (`--base`: REV's)
from benchmarks.broker import running_broker
from benchmarks.measurement import percentile
from sdk import Admin, Producer
from sdk.consumer import ConsumerConfig
from sdk.databus import DatabusClient, DatabusConfig, DatabusConsumerBase, Scn

TOPIC = SUBSCRIPTION = "shares-bench"
RUN_TIMEOUT_S = 300
CONSUMERS = 2


class Timing(DatabusConsumerBase):
    """Notes the monotonic time of each share's end, by SCN."""

    def __init__(self) -> None:
        self.started: set[int] = set()
        self.ended: dict[int, float] = {}
        self.events = 0

    def on_start_window(self, scn: Scn) -> None:
        self.started.add(int(scn))

    def on_event(self, event: object) -> None:
        self.events += 1

    def on_end_window(self, scn: Scn) -> None:
        self.ended.setdefault(int(scn), time.monotonic())


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks databus-shares",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--events", type=int, default=10, help="events per window")
    parser.add_argument("--interval-ms", type=float, default=100.0,
                        help="between two windows' due times")
    parser.add_argument("--base", default="", help="a git revision to compare against")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    options = parser.parse_args(argv)
    for name in ("windows", "events", "pairs"):
        if getattr(options, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if options.interval_ms <= 0:
        parser.error("--interval-ms must be above 0")
    return options


async def _run(address: str, options: argparse.Namespace) -> dict[str, Any]:
    async with Admin(address) as admin:
        await admin.create_topic(TOPIC, partitions=1)
    consumers = [Timing() for _ in range(CONSUMERS)]
    due: dict[int, float] = {}
    rng = random.Random(1)
    async with contextlib.AsyncExitStack() as clients:
        for consumer in consumers:
            client = DatabusClient(address, config=DatabusConfig())
            client.register_shared(consumer, topic=TOPIC, subscription=SUBSCRIPTION,
                                   consumer_config=ConsumerConfig(type="key_shared",
                                                                  start="earliest"))
            await clients.enter_async_context(client)
        async with await Producer.create(address, TOPIC) as producer:
            start = time.monotonic() + 0.2
            for w in range(options.windows):
                at = start + w * options.interval_ms / 1000
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                result = await producer.send_window(
                    [{"key": rng.randrange(1 << 40), "value": b"x" * 100, "source": "s"}
                     for _ in range(options.events)], partition=0)
                due[result.scn] = at
        deadline = time.monotonic() + 60
        total = options.windows * options.events
        while sum(c.events for c in consumers) < total or \
                any(c.started.difference(c.ended) for c in consumers):
            if time.monotonic() > deadline:
                raise TimeoutError("the consumers did not present every window in 60 s")
            await asyncio.sleep(0.01)
    latencies = sorted(1000 * (ended - due[scn]) for c in consumers
                       for scn, ended in c.ended.items() if scn in due)
    return {"shares": len(latencies), "p50_ms": round(percentile(latencies, 50), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "max_ms": round(latencies[-1], 2)}


def measure(options: argparse.Namespace) -> dict[str, Any]:
    with running_broker() as (address, _):
        return asyncio.run(_run(address, options))


def run_side(tree: Path, options: argparse.Namespace) -> dict[str, Any]:
    """This measurement over the broker and SDK of `tree`, in a process of its own."""
    from benchmarks.worktree import run_script_over  # this tree's, not REV's

    arguments = ["--json", "--windows", str(options.windows), "--events", str(options.events),
                 "--interval-ms", str(options.interval_ms)]
    output = run_script_over(tree, Path(__file__).resolve(), arguments, RUN_TIMEOUT_S)
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def compare(options: argparse.Namespace) -> int:
    from benchmarks.worktree import REPO, WorktreeError, checked_out

    rows = []
    try:
        with checked_out(options.base, "keybus-shares-") as worktree:
            for _ in range(options.pairs):
                rows.append(("base", run_side(worktree, options)))
                rows.append(("head", run_side(REPO, options)))
    except WorktreeError as e:
        print(f"databus-shares: cannot check out {options.base!r}: {e}", file=sys.stderr)
        return 2
    print(f"`python -m benchmarks databus-shares --base {options.base} --windows "
          f"{options.windows} --events {options.events} --interval-ms {options.interval_ms}`")
    print("\n| side | shares | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|")
    for side, figures in rows:
        print(f"| {side} | {figures['shares']} | {figures['p50_ms']} | {figures['p99_ms']} | "
              f"{figures['max_ms']} |")
    return 0


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.base:
        return compare(options)
    figures = measure(options)
    print(json.dumps(figures) if options.json else
          f"{figures['shares']} window shares from send_window's due time to "
          f"on_end_window: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, "
          f"max {figures['max_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
