"""Supervision of one subscription dispatcher: never stuck, never silent.

A dispatcher (`dispatcher.py`) whose round raises something unexpected (a
store read that fails, a bug in the core) must not leave its subscription
partition dead until the broker restarts. `DispatcherSupervision` runs the
dispatcher's loop under `broker.supervision.supervise` and gives it the two
halves of the contract:

* `fail`: every consumer stream attached to the dispatcher ends with
  UNAVAILABLE naming the dispatcher and the cause (`task_failed`), so SDK
  consumers reconnect on their own; attaching is refused with the same status
  until the restart (`check`); a dead-letter append in flight is cancelled,
  since it would act on the failed core (the dispatcher waits on new data
  through a partition listener, not a task of its own).
* `restart`: a new core from the cursor persisted in the store (what was acked
  since the last persist is delivered again: at least once, as after a broker
  restart) with an empty record cache. Consumers that reconnect are attached
  to it as to any dispatcher. It first waits for every cursor write in flight
  to land: a SeekSubscription's write (`dispatcher_upkeep.seek_together`) that
  landed after the restart read the disk left the new core at the cursor from
  before the seek, though the seek answered OK (the events it asked to have
  again were never delivered; a forward seek's were delivered again). A seek
  whose write fails fails for its caller, and the restart reads the old cursor.

The backoff between the two is the broker's shared `task_restart_backoff_ms`
.. `task_restart_backoff_max_ms`. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from broker.errors import BrokerError
from broker.partition import now_ms
from broker.subscription.core import PartitionCore
from broker.subscription.cursor import Cursor
from broker.supervision import RestartBackoff, describe_cause, supervise

if TYPE_CHECKING:
    from broker.subscription.dispatcher import PartitionDispatcher

log = logging.getLogger("keybus.dispatch")


class DispatcherSupervision:
    """Failure and restart of one `PartitionDispatcher` (see the module docstring)."""

    def __init__(self, dispatcher: PartitionDispatcher) -> None:
        self.dispatcher = dispatcher
        self.failure: dict[str, Any] | None = None  # task_failed's fields while failed
        self.restarts = 0

    @property
    def what(self) -> str:
        spec = self.dispatcher.spec
        return (f"the dispatcher of subscription {spec.name!r} on "
                f"{spec.topic!r}/{self.dispatcher.index}")

    def run(self, body: Callable[[], Awaitable[None]]) -> Coroutine[Any, Any, None]:
        """The task's coroutine: `body` (the dispatcher's loop) supervised."""
        settings = self.dispatcher.settings
        backoff = RestartBackoff(settings.task_restart_backoff_ms,
                                 settings.task_restart_backoff_max_ms)
        spec = self.dispatcher.spec
        name = f"dispatcher {spec.topic}/{self.dispatcher.index}/{spec.name}"
        return supervise(name, body, self.fail, self.restart, backoff, log)

    def check(self) -> None:
        """Refuse a new consumer while the dispatcher waits to restart.

        Raises:
            BrokerError: task_failed (UNAVAILABLE), naming the dispatcher and the cause.
        """
        if self.failure is not None:
            raise BrokerError("task_failed", **self.failure)

    def fail(self, error: Exception, retry_ms: int) -> None:
        """End every attached stream with the cause; refuse attaches until `restart`."""
        self.failure = {"what": self.what, "cause": describe_cause(error), "retry_ms": retry_ms}
        failure = self.failure
        dispatcher = self.dispatcher
        if dispatcher._dead_letter_task is not None:
            dispatcher._dead_letter_task.cancel()  # it would act on the failed core
        dispatcher._dead_letter_task = None
        # A cursor write in flight (`_persist_task`) is left to land: it holds a
        # consistent snapshot, and the restart waits for it before it reads the cursor.
        sessions = list(dispatcher.sessions.values())
        dispatcher.sessions.clear()
        for session in sessions:
            session.close(BrokerError("task_failed", **failure))

    async def restart(self) -> None:
        """A new core from the persisted cursor, once no cursor write is in flight
        (raises if the store cannot be read)."""
        dispatcher = self.dispatcher
        # A seek that comes meanwhile makes its write the `_persist_task`: wait for it
        # too. From the last check on, nothing awaits until the new core is in place.
        while (writing := dispatcher._persist_task) is not None and not writing.done():
            await asyncio.wait([writing])
        spec, partition = dispatcher.spec, dispatcher.partition
        data = dispatcher.store.get_cursor(partition.meta.topic_id, dispatcher.index, spec.name)
        cursor = Cursor.from_bytes(data) if data else Cursor(partition.start_offset)
        dispatcher.core = PartitionCore(spec.type, spec.mode, dispatcher.index,
                                        dispatcher.core.limits, cursor, now_ms())
        dispatcher.cache.clear()
        # what the failed core decided and `_round_now` left for the task's round
        dispatcher._unsent, dispatcher._deferred_read = [], None
        dispatcher.persisted_mark_delete = cursor.mark_delete
        dispatcher.persisted_acked_ranges = cursor.acked_range_count()
        self.failure = None
        self.restarts += 1
