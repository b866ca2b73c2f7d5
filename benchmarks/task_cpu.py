"""What each asyncio task of the broker costs its event loop, for `benchmarks/stages.py`.

loop_cpu.py splits the loop's CPU by synchronous step; more than half of it
fell in no step: grpcio's reads and writes, asyncio's switches and the async
bodies between the steps. This splits the whole loop another way, by the task
whose step (one `send` into its coroutine, up to its next `await` that
suspends) the loop was running: the partition's task, each dispatcher's,
each produce stream's pump, and grpcio's coroutine for each RPC (which runs
the servicer's response generator and writes its messages). What no task
step holds is callbacks: grpcio's completion queue, timers, uvloop itself.

How: `install` makes every task created on the loop from then on run its
coroutine through `Timed`, which adds the main thread's own CPU
(`time.thread_time`) in each step to the coroutine's name (a supervised
task, `broker/supervision.py`, by the first word of its name). The figures
are per commit, as loop_cpu.py's.
"""

from __future__ import annotations

import asyncio
import collections.abc
import time
from collections.abc import Callable, Coroutine
from typing import Any

# what a task holds, by its key (others are shown by their coroutine's name alone)
WHAT = {
    "_handle_exceptions": "grpcio's coroutine of one RPC: its messages read and written, "
                          "the servicer's response generator (Subscribe's outbox, "
                          "Produce's answers)",
    "supervise:dispatcher": "a dispatcher's rounds (broker/subscription/dispatcher.py)",
    "supervise:partition": "the partition's group commits (broker/partition.py)",
    "ProduceServicer._pump": "a produce stream's requests: read, checked, queued",
    "SubscribeServicer._pump": "a consumer stream's requests: acks, permits, nacks",
}


class Tally:
    """CPU seconds and steps per task key, on the loop's thread; only once `counting()`
    says so (the stages run: from the first produce request on, as loop_cpu.py's whole)."""

    def __init__(self, counting: Callable[[], bool] = lambda: True) -> None:
        self.cpu_s: dict[str, float] = {}
        self.steps: dict[str, int] = {}
        self.counting = counting

    def add(self, key: str, cpu_s: float) -> None:
        if not self.counting():
            return
        self.cpu_s[key] = self.cpu_s.get(key, 0.0) + cpu_s
        self.steps[key] = self.steps.get(key, 0) + 1

    def report(self) -> dict[str, list[float]]:
        return {k: [self.steps[k], round(self.cpu_s[k], 6)] for k in self.cpu_s}


class Timed(collections.abc.Coroutine):  # type: ignore[type-arg]
    """A coroutine that counts the CPU of each of its steps (asyncio.Task drives it)."""

    __slots__ = ("_coro", "_key", "_tally")

    def __init__(self, coro: Coroutine[Any, Any, Any], key: str, tally: Tally) -> None:
        self._coro, self._key, self._tally = coro, key, tally

    def send(self, value: Any) -> Any:
        return self._step(self._coro.send, value)

    def throw(self, *args: Any) -> Any:
        return self._step(self._coro.throw, *args)

    def _step(self, step: Callable[..., Any], *args: Any) -> Any:
        began = time.thread_time()
        try:
            return step(*args)
        finally:
            self._tally.add(self._key, time.thread_time() - began)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:
        return self


def key_of(coro: Coroutine[Any, Any, Any]) -> str:
    """The coroutine's name; a supervised task's with the first word of its name."""
    key = getattr(coro, "__qualname__", type(coro).__name__)
    frame = getattr(coro, "cr_frame", None)
    if key == "supervise" and frame is not None:
        key += ":" + str(frame.f_locals.get("name", "")).split(" ")[0]
    return key


def install(loop: asyncio.AbstractEventLoop, tally: Tally) -> None:
    """Time every task created on `loop` from now on (call on the loop's thread)."""
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        return asyncio.Task(Timed(coro, key_of(coro), tally), loop=loop, **kwargs)

    loop.set_task_factory(factory)


def per_commit(report: dict[str, list[float]], loop_total_s: float,
               commits: int) -> list[dict[str, Any]]:
    """Each task's steps and CPU-µs per commit, largest first; then what no task step
    holds (callbacks), and the loop in all (loop_cpu.py's whole)."""
    n = max(commits, 1)
    rows = [{"task": key, "what": WHAT.get(key, ""), "steps_per_commit": round(steps / n, 2),
             "us_per_step": round(cpu_s / max(steps, 1) * 1e6, 1),
             "us_per_commit": round(cpu_s / n * 1e6, 1)}
            for key, (steps, cpu_s) in sorted(report.items(), key=lambda kv: -kv[1][1])
            if cpu_s / n * 1e6 >= 0.5]
    outside = loop_total_s - sum(cpu_s for _, cpu_s in report.values())
    rows.append({"task": "in no task step", "what": "callbacks: grpcio's completion queue, "
                 "timers, uvloop", "steps_per_commit": None, "us_per_step": None,
                 "us_per_commit": round(outside / n * 1e6, 1)})
    rows.append({"task": "**the loop in all**", "what": f"{commits:,} commits",
                 "steps_per_commit": None, "us_per_step": None,
                 "us_per_commit": round(loop_total_s / n * 1e6, 1)})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task | what it holds | steps per commit | CPU-µs per step | CPU-µs per commit |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = [r["steps_per_commit"], r["us_per_step"], r["us_per_commit"]]
        lines.append(f"| {r['task']} | {r['what']} | "
                     + " | ".join("—" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)
