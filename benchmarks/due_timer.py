"""Wake an asyncio loop at a due time, precisely: the latency scenario's pacing.

An asyncio loop wakes for a timer up to 1 ms late: the selector's epoll
timeout has millisecond resolution and is rounded up (uvloop's timers are
whole milliseconds too). The latency scenario stamps each event with the
time its send was *due* (open loop), so the timer's lateness, about 0.4 ms at
the median, is charged to the system under test, while the sync loop (Redis's
client) sleeps with `time.sleep`, which is precise to tens of microseconds.
`DueTimer` gives the asyncio loops (Keybus, NATS) the same: one thread of its
own sleeps until the due time with `time.sleep` and wakes the loop with
`call_soon_threadsafe`. Lateness still counts: it is measured and charged
as before, it is just no longer the timer's rounding.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time

# The timer thread needs the GIL to wake the loop; Python's default switch interval
# (5 ms) would let a busy loop thread keep it that long. The broker uses the same value.
SWITCH_INTERVAL_S = 0.0005


class DueTimer:
    """`await wait_until(due)` returns at CLOCK_MONOTONIC time `due` (or at once if past).
    One waiter at a time; use as an async context manager (starts and stops the thread).
    `active=False` (unpaced loops): no thread, and waiting for a future time is an error."""

    def __init__(self, active: bool = True) -> None:
        self.active = active
        self._loop = asyncio.get_running_loop()
        self._requests: queue.SimpleQueue[tuple[float, asyncio.Future[None]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._run, name="due-timer", daemon=True)

    async def __aenter__(self) -> DueTimer:
        if not self.active:
            return self
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.active:
            return
        self._requests.put(None)
        await asyncio.to_thread(self._thread.join, 5)

    async def wait_until(self, due: float) -> None:
        if due <= time.monotonic():
            return
        if not self.active:
            raise RuntimeError("an inactive DueTimer cannot wait")
        woken: asyncio.Future[None] = self._loop.create_future()
        self._requests.put((due, woken))
        await woken

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            due, woken = request
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._loop.call_soon_threadsafe(_wake, woken)


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # the waiter may have been cancelled
        woken.set_result(None)
