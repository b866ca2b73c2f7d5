"""The threads that run the compacted views' passes, at a lower CPU priority than the loop.

Why a thread of its own, and why nicer: a view pass is background work (the
view lags the log by design), yet at 10,000 events/s it takes 40-90 ms of a
core once a second. On a small machine that burst takes a core away from the
broker's event loop and its clients, and the events that arrive meanwhile
wait: the latency's p99. What hurts is the CPU, not the GIL: another process
burning 60 ms of CPU a second raised the p99 of `python -m benchmarks stages`
as much as the view did (RESULTS.md, "The view pass at a lower CPU
priority"). A thread with a higher nice value gets a core when the
latency-critical threads leave one, so its bursts fill the idle time.

The price is starvation on a machine whose cores stay busy: at nice 19 a
thread gets about 1.5% of a core that a normal one wants. So two kinds of
pass run on a second thread at the broker's own priority: a pass that works
off a backlog (the caller says so: two full passes wait), and every pass for
`CATCH_UP_S` after one that waited for a core much longer than it ran
(`starved`). A pass already running at nice 19 cannot be moved: on a
machine whose cores stay busy it can take long (25,000 events, 0.4 CPU-s,
took 28 s with both cores kept busy by two other processes).

On Linux a thread's nice value is its own (setpriority on its thread id);
elsewhere the setting is not applied and passes run at the broker's
priority. A nice value can only be raised without privilege, so the thread
never gets a lower one than the broker process has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from broker.supervision import mark_seen

log = logging.getLogger("keybus.view")
T = TypeVar("T")
STARVED_WALL_S = 2.0  # a pass that took this long ...
STARVED_RATIO = 4.0  # ... and this many times its own CPU time waited for a core
CATCH_UP_S = 10.0  # then passes run at the broker's priority this long


def starved(wall_s: float, cpu_s: float) -> bool:
    """Did a pass of `wall_s` seconds, `cpu_s` of them on a core, mostly wait for one?
    (Waiting for the GIL also counts as wall time: hence the ratio and a floor.)"""
    return wall_s >= STARVED_WALL_S and wall_s >= STARVED_RATIO * cpu_s


class ViewWorker:
    """The threads of every view pass, sweep and rebuild of a broker's views: one at
    `nice`, one at the broker's priority for a backlog or after a starved pass.

    One of each is enough: a pass holds the GIL for nearly all its work (Python and
    rocksdict calls), so more passes at once would not overlap anyway."""

    def __init__(self, nice: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._nice = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="keybus-view",
            initializer=lower_priority, initargs=(nice,))
        self._plain = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="keybus-view-catch-up")
        self._clock = clock
        self._catch_up_until = 0.0  # written by the threads, read by the loop: one float

    def run(self, work: Callable[..., T], *args: int, backlog: bool = False) -> asyncio.Future[T]:
        """`work(*args)` on a worker thread, as a future of the running loop; at the
        broker's priority when it works off a `backlog` or after a starved pass."""
        catching_up = backlog or self._clock() < self._catch_up_until
        executor = self._plain if catching_up else self._nice
        future = asyncio.get_running_loop().run_in_executor(
            executor, functools.partial(self._timed, work, *args))
        future.add_done_callback(mark_seen)  # a stop cancels its waiter: no "never retrieved"
        return future

    def _timed(self, work: Callable[..., T], *args: int) -> T:
        began_wall, began_cpu = self._clock(), time.thread_time()
        try:
            return work(*args)
        finally:
            now = self._clock()
            wall_s, cpu_s = now - began_wall, time.thread_time() - began_cpu
            if starved(wall_s, cpu_s):
                self._catch_up_until = now + CATCH_UP_S
                log.info("view pass took %.1f s for %.2f CPU-s (waiting for a core): passes "
                         "run at the broker's priority for %.0f s", wall_s, cpu_s, CATCH_UP_S)

    def close(self) -> None:
        """Let a pass in flight finish, then end the threads (the views stopped first)."""
        self._nice.shutdown(wait=True)
        self._plain.shutdown(wait=True)


def lower_priority(nice: int) -> None:
    """Give the calling thread the nice value `nice` (0-19), or the process's own if that
    is higher. Logs and goes on when the system does not allow it."""
    if not sys.platform.startswith("linux"):
        return  # a thread's own nice value is Linux's; elsewhere it would nice the process
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as e:
        log.warning("view worker: nice %d not applied (%s); passes run at the broker's "
                    "priority", nice, e)
