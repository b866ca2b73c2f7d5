"""Waiting at a follow read's tail while a passed position is pending.

Why apart: a filtered follow Read (broker/rpc/read_servicer.py) and a
Bootstrap stream's online phase (broker/view/bootstrap.py) wait for new
records the same way, and the view layer should not import the Read
servicer. The rules of when to tell are broker/read_passed.py's (pure); this
is their clock and their one wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from broker.read_passed import Passed, PassedPositions


def now_ms() -> int:
    """The clock of the passed-position pacer (broker/read_passed.py): monotonic ms."""
    return int(time.monotonic() * 1000)


async def wait_at_tail(wait: Callable[[], Awaitable[None]],
                       passing: PassedPositions | None) -> Passed | None:
    """Wait for new records (`wait`: the partition's). A filtered read with a
    position pending waits at most until it is due, then returns it to tell
    (read_passed.py rule 2): the pass that dropped those records is over.
    """
    wait_ms = passing.wait_ms(now_ms()) if passing is not None else None
    if passing is None or wait_ms is None:
        await wait()
        return None
    try:
        async with asyncio.timeout(wait_ms / 1000):
            await wait()
    except TimeoutError:
        return passing.take(now_ms())
    return None
