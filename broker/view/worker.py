"""The thread that runs the compacted views' passes, at a lower CPU priority than the loop.

Why a thread of its own, and why nicer: a view pass is background work (the
view lags the log by design), yet at 10,000 events/s it takes 40-90 ms of a
core once a second. On a small machine that burst takes a core away from the
broker's event loop and its clients, and the events that arrive meanwhile
wait: the latency's p99. What hurts is the CPU, not the GIL: another process
burning 60 ms of CPU a second raised the p99 of `python -m benchmarks stages`
as much as the view did (RESULTS.md, "The view pass at a lower CPU
priority"). A thread with a higher nice value gets a core when the
latency-critical threads leave one, so its bursts fill the idle time.

On Linux a thread's nice value is its own (setpriority on its thread id);
elsewhere the setting is not applied and the pass runs at the broker's
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
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("keybus.view")
T = TypeVar("T")


class ViewWorker:
    """One thread for every view pass, sweep and rebuild of a broker's views.

    One is enough: a pass holds the GIL for nearly all its work (Python and
    rocksdict calls), so passes of two partitions on two threads would not
    overlap anyway."""

    def __init__(self, nice: int) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="keybus-view",
            initializer=lower_priority, initargs=(nice,))

    def run(self, work: Callable[..., T], *args: int) -> asyncio.Future[T]:
        """`work(*args)` on the worker thread, as a future of the running loop."""
        return asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(work, *args))

    def close(self) -> None:
        """Let a pass in flight finish, then end the thread (the views stopped first)."""
        self._executor.shutdown(wait=True)


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
