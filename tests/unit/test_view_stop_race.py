"""A view's stop ends its maintainer even when new data woke the maintainer's wait
in the same loop step as the stop's cancel.

Before, the maintainer waited with `asyncio.wait_for`, which on Python 3.11
returns the inner result and drops a cancel that arrives after the inner wait
finished but before `wait_for` resumed (gh-86296). The maintainer then went on
forever and `PartitionView.stop`, awaiting it, never returned: a topic deleted
while a producer sent hung its DeleteTopic (about 2 runs in 36 of
test_topic_delete.py's in-use test with two running at once) and no user of the
topic ended, since its partitions were stopped only after its views.

The fake log wakes its waiters as `Partition.publish` does (a fresh event each
time); the stop comes 0..3 loop steps after the wake, which covers the window.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import Settings
from broker.errors import BrokerError
from broker.view import service
from broker.view.codec import ViewState

STOP_WITHIN_S = 5.0  # a stop takes a few loop steps; a dropped cancel never ends


class Views:
    """A view store at `offset_next` whose passes fold to the end they are given."""

    def __init__(self, offset_next: int) -> None:
        self.offset_next = offset_next

    def state(self, topic_id: int, partition: int) -> ViewState:
        return ViewState(self.offset_next, 0, 0, 0, 0)

    def gap(self, topic_id: int, partition: int) -> int:
        return 0

    def fold_pass(self, topic_id: int, partition: int, end: int, events_max: int,
                  bytes_max: int, backlog: bool = False) -> ViewState:
        return ViewState(end, 0, 0, 0, 0)

    def sweep(self, topic_id: int, partition: int, before_ms: int, entries_max: int
              ) -> ViewState:
        return ViewState(self.offset_next, 0, 0, 0, 0)


class InlineWorker:
    def run(self, work: Any, *args: Any, backlog: bool = False) -> asyncio.Future[ViewState]:
        future: asyncio.Future[ViewState] = asyncio.get_running_loop().create_future()
        future.set_result(work(*args))
        return future


class Log:
    """A partition whose waiters wake at `publish`, as `Partition.publish` wakes them."""

    meta = SimpleNamespace(name="t", topic_id=1, delete_retention_ms=0)
    index = 0

    def __init__(self, end_offset: int) -> None:
        self.end_offset = end_offset
        self.waiting = 0
        self.closed = False
        self._appended = asyncio.Event()

    async def wait_for_data(self, offset: int) -> None:
        self.waiting += 1
        await self._appended.wait()
        if self.closed:
            raise BrokerError("topic_deleted", topic="t")

    def close(self) -> None:
        """End a maintainer that outlived its stop (as the partition's stop would)."""
        self.closed = True
        self.publish()

    def publish(self) -> None:
        event, self._appended = self._appended, asyncio.Event()
        event.set()


async def stop_right_after_a_wake(view_offset: int, end_offset: int, steps: int,
                                  settings: Settings) -> None:
    log = Log(end_offset)
    view = service.PartitionView(Views(view_offset), log, settings,  # type: ignore[arg-type]
                                 InlineWorker())  # type: ignore[arg-type]
    view.start()
    for _ in range(100):  # the maintainer reaches its wait for data
        if log.waiting:
            break
        await asyncio.sleep(0.001)
    assert log.waiting
    log.publish()
    for _ in range(steps):
        await asyncio.sleep(0)
    # Bounded without cancelling the stop (it would take a cancel as its own).
    stopping = asyncio.create_task(view.stop())
    done, _ = await asyncio.wait([stopping], timeout=STOP_WITHIN_S)
    log.close()
    await stopping
    assert done, (f"the view's stop, {steps} loop steps after new data woke its "
                  f"maintainer, did not end within {STOP_WITHIN_S} s")


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_stop_ends_the_maintainer_waiting_at_the_log_end(steps: int) -> None:
    settings = Settings(view_linger_ms=0, view_sweep_interval_ms=3_600_000)
    asyncio.run(stop_right_after_a_wake(10, 10, steps, settings))


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
def test_stop_ends_the_maintainer_lingering_for_a_full_pass(steps: int) -> None:
    settings = Settings(view_linger_ms=3_600_000, view_sweep_interval_ms=3_600_000)
    asyncio.run(stop_right_after_a_wake(10, 11, steps, settings))
