"""The relay node's own tasks (discovery, metrics, static role changes), supervised.

Each runs under `broker.supervision.supervise`: an unexpected exception is
logged with its traceback (once per distinct cause), the task's `fail` hook
says what is affected, and the body runs again after the relay's retry
backoff (`relay_retry_backoff_ms` .. `relay_retry_backoff_max_ms`). None of
them needs the broker to stop: discovery and metrics keep no state between
runs, and a role change is idempotent (a retry finishes what the failed
attempt began; see `RelayNode._spawn_role`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.supervision import RestartBackoff, nothing_to_fail, nothing_to_reload, supervise

log = logging.getLogger("keybus.relay")


class RelayTasks:
    """A set of supervised tasks, cancelled together."""

    def __init__(self, backoff_first_ms: int, backoff_max_ms: int) -> None:
        self.backoff = RestartBackoff(backoff_first_ms, backoff_max_ms)
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, name: str, body: Callable[[], Awaitable[None]],
              fail: Callable[[Exception, int], None] = nothing_to_fail) -> None:
        """Run `body` until it returns, restarting it after an unexpected exception."""
        task = asyncio.get_running_loop().create_task(
            supervise(name, body, fail, nothing_to_reload, self.backoff, log), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
