"""Goal: the consumer's loop-side signals (sdk/consumer_wakeups.py) wake a receive on a
delivery or time it out without leaking waiters, gather acks for the flush window, and
never hold a permit grant or a nack behind that window; the shared state
(sdk/consumer_state.py) drains nacks and acks before permits.

Method: the signals on a real event loop; waits bounded by asyncio.timeout, never a
sleep standing in for a result.
"""

from __future__ import annotations

import asyncio

import pytest

from sdk.consumer_state import ConsumerState
from sdk.consumer_wakeups import Arrivals, FlushSignal
from sdk.fetch_buffer import FetchBuffer


async def _a_wake_ends_every_wait_and_a_deadline_times_out_without_leaking() -> None:
    loop = asyncio.get_running_loop()
    arrivals = Arrivals()
    waits = [asyncio.ensure_future(arrivals.wait(loop, None)) for _ in range(2)]
    await asyncio.sleep(0)
    arrivals.wake()
    async with asyncio.timeout(5):
        await asyncio.gather(*waits)
    with pytest.raises(TimeoutError):
        await arrivals.wait(loop, loop.time() + 0.01)
    cancelled = asyncio.ensure_future(arrivals.wait(loop, loop.time() + 60))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert arrivals._waiters == []  # neither the timed-out nor the cancelled one stays


def test_a_wake_ends_every_wait_and_a_deadline_times_out_without_leaking() -> None:
    asyncio.run(_a_wake_ends_every_wait_and_a_deadline_times_out_without_leaking())


async def _acks_gather_for_the_window_and_a_grant_or_nack_ends_it_at_once() -> None:
    loop = asyncio.get_running_loop()
    flush = FlushSignal()
    flush.want()
    began = loop.time()
    async with asyncio.timeout(5):
        await flush.next_flush(loop, 0.05, lambda: False)
    assert loop.time() - began >= 0.04  # gathered for the window
    flush.want()
    waiting = asyncio.ensure_future(flush.next_flush(loop, 60.0, lambda: False))
    await asyncio.sleep(0)
    flush.soon()  # a nack or a grant: no waiting for the 60 s window
    async with asyncio.timeout(5):
        await waiting
    flush.want()
    async with asyncio.timeout(5):  # a grant already due: no gathering at all
        await flush.next_flush(loop, 60.0, lambda: True)


def test_acks_gather_for_the_window_and_a_grant_or_nack_ends_it_at_once() -> None:
    asyncio.run(_acks_gather_for_the_window_and_a_grant_or_nack_ends_it_at_once())


def test_nacks_and_acks_drain_before_permits_and_empty_the_state() -> None:
    state = ConsumerState(FetchBuffer(4))
    state.buffer.initial_grants([0])
    state.buffer.count_taken(0, 2)
    state.acks.add_range(0, 10, 12)
    state.cumulative[0] = 5
    state.nacks.append((0, [3], 0, []))
    bodies = [r.WhichOneof("body") for r in state.drain_requests()]
    assert bodies == ["nack", "ack", "ack", "permits"]
    assert state.drain_requests() == []
