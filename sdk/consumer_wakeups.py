"""When the consumer's tasks wake: a delivery for the waiting receives, and the flush
of acks, nacks and permits. Split from consumer.py (one job: loop-side signals).

Both run once per delivery, so each costs one future and at most one timer handle
per wait (no asyncio.timeout, no task of their own). Rules:
1. A receive waits until something arrives (`Arrivals.wake`) or its deadline.
2. Acks gather for `ack_flush_ms` after the first one, then leave in one message;
   a permit grant or a nack (`FlushSignal.soon`) ends the gathering at once, so
   neither ever waits for the ack window.

Runs on the consumer's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Arrivals:
    """Receives waiting for a delivery (or for the consumer to fail or close)."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    async def wait(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        """Wait for `wake` or until `deadline` (loop time; None: no deadline).

        Raises:
            TimeoutError: the deadline passed first.
        """
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if deadline is None else loop.call_at(deadline, _time_out, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiters and waiter in self._waiters:  # timed out or cancelled
                self._waiters.remove(waiter)

    def wake(self) -> None:
        """Something arrived: wake every waiting receive."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class FlushSignal:
    """When the background task sends what is pending (rule 2)."""

    def __init__(self) -> None:
        self._wanted = asyncio.Event()
        self._gathering: asyncio.Future[None] | None = None

    def want(self) -> None:
        """Acks are pending: send them after the gathering window."""
        self._wanted.set()

    def soon(self) -> None:
        """A permit grant or a nack is due: send it (and the acks so far) now."""
        self._wanted.set()
        _set_done(self._gathering)

    async def next_flush(self, loop: asyncio.AbstractEventLoop, flush_s: float,
                         urgent: Callable[[], bool]) -> None:
        """Return when the pending messages should go: after `flush_s` of gathering,
        at once when `urgent()` (a grant is due) or when `soon` is called meanwhile."""
        await self._wanted.wait()
        if flush_s and not urgent():
            waiter = self._gathering = loop.create_future()
            timer = loop.call_later(flush_s, _set_done, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._gathering = None
        self._wanted.clear()  # what gathered meanwhile goes now, not next round


def _set_done(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
