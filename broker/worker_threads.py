"""Blocking store work a task runs on worker threads, which its stop waits for.

Why: cancelling a task that awaits `asyncio.to_thread` does not stop the
thread. A partition stopped because its topic is deleted would otherwise
let a retention trim or a compaction step still on its thread land after
the topic's keys were deleted (`RocksStore.delete_topic`), writing some back
(the partition's state, rewritten records) under a topic id that nothing
deletes again.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerThreads:
    """Runs blocking calls on the default executor; `settle` waits for every one
    still running, also those whose awaiting task was cancelled."""

    def __init__(self) -> None:
        self._running: set[asyncio.Future[Any]] = set()

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        future = asyncio.get_running_loop().run_in_executor(None, functools.partial(work, *args))
        self._running.add(future)
        future.add_done_callback(self._finished)
        return await asyncio.shield(future)  # cancelled: the call still runs, `settle` waits

    def _finished(self, future: asyncio.Future[Any]) -> None:
        self._running.discard(future)
        if not future.cancelled():
            future.exception()  # the awaiting task (if not cancelled) raised it already

    async def settle(self) -> None:
        """Return once no call is running."""
        while self._running:
            await asyncio.wait(set(self._running))
