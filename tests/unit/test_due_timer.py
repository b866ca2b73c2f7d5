"""Goal: the latency scenario's DueTimer never lets a paced send start before it is due,
and an unpaced loop runs no timer thread.

Method: a real loop and the real thread, checked on CLOCK_MONOTONIC (how early, never
how late: lateness is what the benchmark measures, not what a test asserts).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from benchmarks.due_timer import DueTimer


def test_a_wait_ends_at_or_after_the_due_time() -> None:
    async def run() -> list[float]:
        early = []
        async with DueTimer() as timer:
            for step in range(20):
                due = time.monotonic() + 0.001 * (step % 3)
                await timer.wait_until(due)
                early.append(due - time.monotonic())
        return early

    assert max(asyncio.run(run())) <= 0  # never woken before it was due


def test_an_inactive_timer_starts_no_thread_and_refuses_to_wait() -> None:
    async def run() -> None:
        before = threading.active_count()
        async with DueTimer(active=False) as timer:
            await timer.wait_until(time.monotonic() - 1)  # past: at once
            assert threading.active_count() == before
            with pytest.raises(RuntimeError, match="inactive"):
                await timer.wait_until(time.monotonic() + 1)

    asyncio.run(run())
