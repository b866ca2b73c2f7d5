"""What the broker's event loop spends its CPU on, per commit, for `benchmarks/stages.py`.

The latency benchmark's grpcio fan-out floor (fanout_floor.py) showed that
the broker's event-loop thread, busy 0.7 of a core at 10,000 events/s where a
bare relay needs 0.25, is what stands between Keybus and the issue's p50
limits. This says where that thread's CPU goes: `install` wraps the broker's
main synchronous steps of an event's path so each call made on the main
thread (the event loop) adds its own CPU time (`time.thread_time`, so a
call that waits for the GIL or a core does not count its wait) to its line;
a call inside another wrapped call counts in its own line and not in the outer
one's (a dispatcher's round runs inside `Partition.publish` when the commit
runs it: `PartitionDispatcher._round_now`), so each line is its own. The
broker's stage_trace.py installs it under its own stamps, so their cost is
not counted.

The figures are per commit (a WriteBatch of the log: one group commit), not
per event: the loop's work goes with the produce requests and the groups
they make, and the producer's Nagle's rule sends fewer, larger requests
when the broker is slower, so CPU per event moves with the latency.
What is not in a line is grpcio's reads and writes, asyncio's task switches
and everything else on the loop: `loop_total` is the whole thread's CPU
from the first produce request to the last wrapped call.

It names private methods: a rename breaks it loudly (the bounded run in
tests/integration/test_bench_stages.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# (module, class or None, name, what it holds): each a synchronous step on the loop
STEPS: tuple[tuple[str, str | None, str, str], ...] = (
    ("broker.rpc.produce_servicer", "ProduceServicer", "_submit",
     "a produce request's checks (fields, batch, slots) and its queueing"),
    ("broker.partition", "Partition", "_commit_now", "the rest of a commit `submit` runs "
     "itself, the partition's task waiting for work"),
    ("broker.partition_write", None, "_decide", "the partition's decision: offsets, SCN, "
     "the producer's sequence"),
    ("broker.log.rocks_store", "RocksStore", "append", "the group's record and its "
     "WriteBatch (rocksdict's write holds the GIL)"),
    ("broker.partition", "Partition", "publish", "the durable end moves, dispatchers woken"),
    ("broker.subscription.dispatcher", "PartitionDispatcher", "_round_now", "the rest of a "
     "dispatcher's round, run in the commit"),
    ("broker.subscription.dispatcher", None, "read_events_in", "a dispatcher reads the "
     "recent records"),
    ("broker.subscription.core", "PartitionCore", "process_read", "the read's events planned "
     "to consumers (Key_Shared: by slot owner and permits)"),
    ("broker.subscription.core", "PartitionCore", "next_read", "what to read next"),
    ("broker.subscription.core", "PartitionCore", "process_tick", "a round's timers"),
    ("broker.subscription.dispatcher", "PartitionDispatcher", "_deliver", "a Delivery cut "
     "and queued for a consumer's stream"),
    ("broker.subscription.manager", "SubscriptionManager", "ack", "a consumer's ack message"),
    ("broker.subscription.core", "PartitionCore", "snapshot", "the cursor to persist"),
)


class Tally:
    """CPU seconds and calls per step, made on the main thread; the thread's CPU from the
    first produce request (the first `_submit`) to the last wrapped call."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.cpu_s: dict[str, float] = {}
        self.first_s: float | None = None
        self.last_s = 0.0
        self.inner: list[float] = []  # per wrapped call in progress: its wrapped calls' CPU

    def report(self) -> dict[str, Any]:
        return {"steps": {k: [self.calls[k], round(self.cpu_s[k], 6)] for k in self.calls},
                "loop_total_s": round(self.last_s - (self.first_s or self.last_s), 6)}


def _counted(tally: Tally, key: str, step: Callable[..., Any], main: int) -> Callable[..., Any]:
    cpu = time.thread_time
    ident = threading.get_ident

    def counted(*args: Any, **kwargs: Any) -> Any:
        if ident() != main:
            return step(*args, **kwargs)
        tally.inner.append(0.0)
        began = cpu()
        if tally.first_s is None and key.endswith("._submit"):
            tally.first_s = began
        try:
            return step(*args, **kwargs)
        finally:
            tally.last_s = ended = cpu()
            whole = ended - began
            tally.cpu_s[key] = tally.cpu_s.get(key, 0.0) + whole - tally.inner.pop()
            tally.calls[key] = tally.calls.get(key, 0) + 1
            if tally.inner:  # the outer call's own time leaves this one out
                tally.inner[-1] += whole
    return counted


def install(tally: Tally) -> None:
    """Wrap every step of STEPS (call from the main thread, before the broker starts)."""
    import importlib

    main = threading.get_ident()
    for module_name, class_name, name, _ in STEPS:
        module = importlib.import_module(module_name)
        owner = module if class_name is None else getattr(module, class_name)
        key = f"{class_name or module_name.rsplit('.', 1)[-1]}.{name}"
        setattr(owner, name, _counted(tally, key, getattr(owner, name), main))


def per_commit(report: dict[str, Any], commits: int) -> list[dict[str, Any]]:
    """Each step's calls and CPU-µs per commit and per call, and its share of the loop,
    largest first; then what is in no step, and the loop in all."""
    total = report["loop_total_s"]
    what = {f"{c or m.rsplit('.', 1)[-1]}.{n}": w for m, c, n, w in STEPS}
    rows = []
    for key, (calls, cpu_s) in sorted(report["steps"].items(), key=lambda kv: -kv[1][1]):
        rows.append({"step": key, "what": what.get(key, ""),
                     "calls_per_commit": round(calls / max(commits, 1), 2),
                     "us_per_call": round(cpu_s / max(calls, 1) * 1e6, 1),
                     "us_per_commit": round(cpu_s / max(commits, 1) * 1e6, 1),
                     "share": round(cpu_s / total, 3) if total else None})
    outside = total - sum(cpu for _, cpu in report["steps"].values())
    rows.append({"step": "in no step", "what": "grpcio's reads and writes, asyncio's task "
                 "switches, everything else on the loop", "calls_per_commit": None,
                 "us_per_call": None, "us_per_commit": round(outside / max(commits, 1) * 1e6, 1),
                 "share": round(outside / total, 3) if total else None})
    rows.append({"step": "**the loop in all**", "what": f"{commits:,} commits",
                 "calls_per_commit": None, "us_per_call": None,
                 "us_per_commit": round(total / max(commits, 1) * 1e6, 1), "share": 1.0})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| step on the event loop | what it holds | calls per commit | CPU-µs per call "
             "| CPU-µs per commit | share of the loop |", "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["calls_per_commit"], r["us_per_call"], r["us_per_commit"], r["share"]]
        lines.append(f"| {r['step']} | {r['what']} | "
                     + " | ".join("—" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)
