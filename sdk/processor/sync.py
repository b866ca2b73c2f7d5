"""The blocking face of EventProcessor for code without an event loop.

The processor runs on an SDK loop in a daemon thread (sdk.loop_thread.LoopThread).
Callbacks are plain functions; each runs on a worker thread (one partition's
callbacks one at a time, in order), so a callback may block and may call
`context.update_checkpoint(...)`, which waits for the store's answer.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from types import TracebackType
from typing import Any

from sdk.core.columns import Event
from sdk.loop_thread import LoopThread
from sdk.processor.arguments import check_callbacks
from sdk.processor.context import CloseReason, PartitionContext
from sdk.processor.metrics import ProcessorStats
from sdk.processor.processor import EventProcessor
from sdk.reader import ReadBatch
from sdk.stores.records import Checkpoint


class SyncPartitionContext:
    """A PartitionContext for blocking callbacks (the same attributes)."""

    def __init__(self, context: PartitionContext, loop: asyncio.AbstractEventLoop) -> None:
        self._context = context
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def update_checkpoint(self, event: Event | ReadBatch | None = None,
                          timeout_s: float | None = 60.0) -> Checkpoint:
        """As PartitionContext.update_checkpoint, blocking until stored.

        Raises:
            OwnershipLost, ValueError: as the async method; TimeoutError.
        """
        future = asyncio.run_coroutine_threadsafe(self._context.update_checkpoint(event),
                                                  self._loop)
        return future.result(timeout_s)

    def __repr__(self) -> str:
        return repr(self._context)


def _in_thread(callback: Callable[..., Any] | None, loop_of: Callable[[], asyncio.AbstractEventLoop]
               ) -> Callable[..., Any] | None:
    """Run a blocking callback on a worker thread with a SyncPartitionContext."""
    if callback is None:
        return None

    async def run(context: PartitionContext | None, *args: Any) -> None:
        wrapped = SyncPartitionContext(context, loop_of()) if context is not None else None
        result = await asyncio.to_thread(callback, wrapped, *args)
        if inspect.isawaitable(result):  # e.g. a lambda calling an async def: never awaited
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError(f"{getattr(callback, '__name__', callback)!r} returned an awaitable, "
                            "which SyncEventProcessor never awaits (the work was not done); "
                            "give a plain function, or use EventProcessor for async callbacks")
    return run


class SyncEventProcessor:
    """Blocking EventProcessor (arguments as EventProcessor; callbacks are
    plain functions run on worker threads).

    Raises:
        ValueError: as EventProcessor.
        TypeError: a callback that is not callable, or is a coroutine
            function (it would never be awaited: use EventProcessor).
    """

    def __init__(self, broker: str, topic: str, consumer_group: str, *,
                 on_event: Callable[[SyncPartitionContext, ReadBatch], Any],
                 on_partition_initialize: Callable[[SyncPartitionContext], Any] | None = None,
                 on_partition_close: Callable[[SyncPartitionContext, CloseReason], Any] | None = None,
                 on_error: Callable[[SyncPartitionContext | None, BaseException], Any] | None = None,
                 **options: Any) -> None:
        check_callbacks({"on_event": on_event, "on_partition_initialize": on_partition_initialize,
                         "on_partition_close": on_partition_close, "on_error": on_error},
                        blocking=True)
        self._thread = LoopThread(f"keybus-processor-{topic}-{consumer_group}")
        loop_of = lambda: self._thread.loop  # noqa: E731

        async def build() -> EventProcessor:
            return EventProcessor(
                broker, topic, consumer_group, on_event=_in_thread(on_event, loop_of),  # type: ignore[arg-type]
                on_partition_initialize=_in_thread(on_partition_initialize, loop_of),
                on_partition_close=_in_thread(on_partition_close, loop_of),
                on_error=_in_thread(on_error, loop_of), **options)
        try:
            self._processor = self._thread.run(build())
        except BaseException:
            self._thread.stop()
            raise
        self.owner_id = self._processor.owner_id

    def start(self) -> None:
        """Start balancing and processing (returns at once)."""
        self._thread.run(self._processor.start())

    def stop(self, timeout_s: float | None = 60.0) -> None:
        """Close every partition, release them, stop the loop thread. Idempotent."""
        if self._thread.loop.is_closed():
            return
        try:
            self._thread.run(self._processor.stop(), timeout_s)
        finally:
            self._thread.stop()

    @property
    def owned_partitions(self) -> list[int]:
        return self._processor.owned_partitions

    @property
    def stats(self) -> ProcessorStats:
        return self._processor.stats

    def __enter__(self) -> SyncEventProcessor:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
