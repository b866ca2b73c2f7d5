"""A dispatcher's round timer due now works on uvloop, the broker's loop.

Goal: uvloop runs a call_at due within half a millisecond as call_soon, and
returns a Handle without when(); the dispatcher asked the handle when it
fires, so the next round's timer raised AttributeError and the dispatcher
stopped ("the dispatcher of subscription 's' ... stopped on an unexpected
error (AttributeError: 'uvloop.loop.Handle' object has no attribute
'when')"), which its consumers took for a lost broker (seen under load while
a topic was deleted). Now the due time is kept by the dispatcher.
Method: `PartitionDispatcher._arm` on a stand-in holding only what it uses,
in a uvloop loop; bounded.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import uvloop

from broker.subscription.dispatcher import PartitionDispatcher


def test_a_timer_due_now_then_one_due_later_wakes_the_round() -> None:
    async def go() -> None:
        wake = asyncio.Event()
        dispatcher = SimpleNamespace(_timer=None, _timer_due=0.0, _wake=wake)
        dispatcher._on_timer = lambda: PartitionDispatcher._on_timer(dispatcher)  # type: ignore[arg-type]
        PartitionDispatcher._arm(dispatcher, 0.0)  # type: ignore[arg-type]  # due now
        PartitionDispatcher._arm(dispatcher, 5.0)  # type: ignore[arg-type]  # keeps the sooner
        async with asyncio.timeout(5):
            await wake.wait()
        assert dispatcher._timer is None
        wake.clear()
        PartitionDispatcher._arm(dispatcher, 0.0)  # type: ignore[arg-type]
        PartitionDispatcher._arm(dispatcher, 0.0)  # type: ignore[arg-type]
        async with asyncio.timeout(5):
            await wake.wait()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(go())
