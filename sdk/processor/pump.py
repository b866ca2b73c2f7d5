"""One owned partition at work: fence, find where to start, read, hand over.

A pump runs as one task per claim. In order: wait for the previous claim's
pump of the same partition to finish (never two readers of one partition in
one processor); register the epoch with a fencing checkpoint store; read
that partition's checkpoint only (not the group's); decide where to resume
(after the checkpoint; one behind the log's start, or of another
incarnation of the topic, by `offset_reset`: offset_reset.py); open its
reader and wait for the broker's first answer (a
"latest" start becomes the log end now, so every event stored after
on_partition_initialize is delivered; a checkpoint past the log's end is
refused now, and `offset_reset` decides where to open it instead); say
a reset once (WARNING, `context.checkpoint_reset`); call
on_partition_initialize; then
hand each batch to on_event until told to stop, the claim's lease runs
out, or the checkpoint store says the ownership was lost. A stop never
interrupts a callback: the pump stops before the next batch.
on_partition_close follows on_partition_initialize whatever ends the pump.

A failure closes the partition ("error") and the next cycle reopens it, so
a failure that lasts comes back every cycle: each goes to on_error, but the
log says it once per outage of that partition's step (`PartitionOutages`),
and says when the step works again (that recovery line is logged with or
without on_error: nothing else tells that it is over).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sdk import errors
from sdk.processor.context import CloseReason, PartitionContext, monotonic_ms
from sdk.processor.offset_reset import (
    CheckpointReset,
    OffsetReset,
    is_other_incarnation,
    is_past_end,
    reset_message,
    resume_at,
    resume_other_incarnation,
    resume_past_end,
)
from sdk.processor.outages import Line, PartitionOutages
from sdk.reader import ReadBatch, Reader, Start
from sdk.stores.fencing import FencingCheckpointStore, OwnershipLost
from sdk.stores.protocols import CheckpointStore

log = logging.getLogger("keybus.processor")
StartPositions = Start | Mapping[int, Start]
# (partition, step, error) -> the line of the broker's outage, or None: not the broker's
BrokerAway = Callable[[int, str, BaseException], Line | None]


async def call(callback: Callable[..., Any] | None, *args: Any) -> None:
    """Call a callback that may be a plain function or a coroutine function."""
    if callback is None:
        return
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


@dataclass(frozen=True, slots=True)
class Callbacks:
    """The application's callbacks (each may be sync or async)."""

    on_event: Callable[[PartitionContext, ReadBatch], Any]
    on_partition_initialize: Callable[[PartitionContext], Any] | None = None
    on_partition_close: Callable[[PartitionContext, CloseReason], Any] | None = None
    on_error: Callable[[PartitionContext | None, BaseException], Any] | None = None

    async def error(self, context: PartitionContext | None, error: BaseException,
                    line: Line | None = None) -> None:
        """Tell on_error, every time; without one, the log: `line` when the
        caller chose it (a failed cycle or partition step, told once per
        outage: outages.py), else a WARNING. A failing on_error is logged."""
        try:
            if self.on_error is None:
                if line is None:
                    log.warning("event processor error (%s): %s", context, error)
                else:
                    log.log(line.level, "%s", line.message)
            await call(self.on_error, context, error)
        except Exception:
            log.exception("on_error failed while reporting %r", error)


class PartitionPump:
    """Processes one claim of one partition (see the module docstring)."""

    def __init__(self, context: PartitionContext, checkpoint_store: CheckpointStore,
                 fencing: bool, start_position: StartPositions, callbacks: Callbacks,
                 open_reader: Callable[[int, Start], Reader],
                 on_events: Callable[[int], None], outages: PartitionOutages,
                 previous: asyncio.Task[None] | None = None, *,
                 offset_reset: OffsetReset = "fail", log_start_offset: int | None = None,
                 log_end_offset: int | None = None,
                 broker_away: BrokerAway | None = None) -> None:
        self.context = context
        self._store = checkpoint_store
        self._fencing = fencing
        self._start_position = start_position
        self._offset_reset = offset_reset
        self._log_start_offset = log_start_offset  # from the cycle that claimed it (or None)
        self._log_end_offset = log_end_offset  # as well
        self._past_end = False  # the checkpoint was past the log's end (offset_reset applied)
        self._other_incarnation = False  # ... or of another incarnation (as well)
        self._reader: Reader | None = None  # the partition's reader, once opened
        self._broker_away = broker_away
        self._callbacks = callbacks
        self._open_reader = open_reader
        self._on_events = on_events
        self._outages = outages
        self._step = "starting"  # where a failure would be: a step of PartitionOutages
        self._repeating = False  # the last failure was a repeat (logged at DEBUG)
        self._previous = previous
        self._stop = asyncio.Event()
        self._stop_reason: CloseReason = "shutdown"
        self._quiet_close = False  # the close is part of an outage said already
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self._run())

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, reason: CloseReason, quiet: bool = False) -> None:
        """Stop before the next batch (a callback in progress finishes). quiet: the
        close line is DEBUG (the outage that closes it was said already)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._quiet_close = quiet
            self._stop.set()
            if reason == "ownership_lost":  # a callback still running may not checkpoint
                self.context.disown()

    async def _run(self) -> None:
        if self._previous is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._previous
        context, opened = self.context, False
        reason: CloseReason = "shutdown"
        try:
            start = await self._resume_position()
            self._worked("starting")
            if self._stop.is_set():
                reason = self._stop_reason
                return
            self._step = "reading"
            opened_at = await self._open(start)
            reader = self._reader
            if opened_at is None or reader is None:
                reason = self._stop_reason
                return
            self._note_reset(opened_at, reader)
            self._step = "on_partition_initialize"
            await call(self._callbacks.on_partition_initialize, context)
            opened = True
            self._worked("on_partition_initialize")
            reason = await self._pump(reader)
        except OwnershipLost:
            reason = "ownership_lost"
        except Exception as e:
            reason = "error"
            await self._failed(e)
        finally:
            context.closed(reason)
            if self._reader is not None:
                await self._reader.close()
            if opened:
                self._step = "on_partition_close"
                try:
                    await call(self._callbacks.on_partition_close, context, reason)
                except Exception as e:
                    await self._failed(e)
                else:
                    self._worked("on_partition_close")
            # an outage going on reopens (and closes) the partition every cycle
            quiet = self._repeating or self._quiet_close
            log.log(logging.DEBUG if quiet else logging.INFO, "closed %s: %s",
                    context, reason)

    async def _failed(self, error: BaseException) -> None:
        """Every failure to on_error; without one, the log once per outage: the
        broker's when the step could not reach it (said once for the processor),
        else this step's own."""
        line = None
        if self._broker_away is not None:
            line = self._broker_away(self.context.partition, self._step, error)
        if line is None:
            line = self._outages.failed(self.context.partition, self._step, error,
                                        time.monotonic())
            self._repeating = line.level < logging.INFO
        else:
            self._quiet_close = True  # its close is part of the broker's outage
        await self._callbacks.error(self.context, error, line)

    def _worked(self, step: str) -> None:
        """A step that failed before works: say so once (with or without on_error).
        Runs per batch: nothing failing (the usual case) costs one length check."""
        if not self._outages:
            return
        line = self._outages.worked(self.context.partition, step, time.monotonic())
        if line is not None:
            log.log(line.level, "%s", line.message)

    async def _resume_position(self) -> Start:
        """Fence, then start after this partition's checkpoint (or at start_position)."""
        context = self.context
        if self._fencing:
            await self._fence()
        checkpoint = await self._store.get_checkpoint(context.namespace, context.topic,
                                                      context.consumer_group, context.partition)
        context.checkpoint = checkpoint
        if checkpoint is None:
            return start_for(self._start_position, context.partition)
        where = f"{context.topic}/{context.partition} of group {context.consumer_group!r}"
        log_start, log_end = self._log_start_offset, self._log_end_offset
        if (is_other_incarnation(checkpoint.incarnation, context.incarnation)
                and log_start is not None and log_end is not None):
            resumed = resume_other_incarnation(where, checkpoint.offset, checkpoint.incarnation,
                                               context.incarnation, log_start, log_end,
                                               self._offset_reset)
            self._other_incarnation = True
            return resumed
        return resume_at(where, checkpoint.offset, log_start, self._offset_reset)

    async def _open(self, start: Start) -> Start | None:
        """Open the partition's reader (`self._reader`) at `start`; where it
        opened, or None if a stop came first. When the broker refuses a start
        after the checkpoint as past the log's end, `offset_reset` says where
        to open instead (CheckpointPastEnd for "fail")."""
        try:
            return start if await self._positioned(self._reader_at(start)) else None
        except errors.OffsetOutOfRange as e:
            start = self._past_end_start(start, e)
        assert self._reader is not None
        await self._reader.close()  # the refused one: one reader at a time
        return start if await self._positioned(self._reader_at(start)) else None

    def _reader_at(self, start: Start) -> Reader:
        """A new reader at `start` (`self._reader`, which the pump closes)."""
        self._reader = reader = self._open_reader(self.context.partition, start)
        # the read works once the broker says it reached the log end, events or not
        reader.on_tail = lambda _: self._worked("reading")
        return reader

    def _past_end_start(self, start: Start, refused: errors.OffsetOutOfRange) -> Start:
        """Where to open instead of after a checkpoint the broker found past the
        log's end (offset_reset.py). Any other refusal, or a description of the
        log that does not show it (read before the log was cut: the next cycle
        reads it again), is raised as it came."""
        context, checkpoint = self.context, self.context.checkpoint
        log_start, log_end = self._log_start_offset, self._log_end_offset
        if checkpoint is None or not is_past_end(refused.broker_error, start, checkpoint.offset,
                                                 log_start, log_end):
            raise refused
        assert log_start is not None and log_end is not None
        where = f"{context.topic}/{context.partition} of group {context.consumer_group!r}"
        resumed = resume_past_end(where, checkpoint.offset, log_start, log_end,
                                  self._offset_reset)
        self._past_end = True
        return resumed

    def _note_reset(self, start: Start, reader: Reader) -> None:
        """A checkpoint behind the log's start was reset (offset_reset.py): one
        WARNING, and `context.checkpoint_reset` for the callbacks. Runs once the
        reader is open, so a "latest" reset knows the offset it resumes at."""
        context, checkpoint = self.context, self.context.checkpoint
        other = self._other_incarnation
        if (checkpoint is None or (start == checkpoint.offset + 1 and not other)
                or self._log_start_offset is None):
            return
        resumed = start if isinstance(start, int) else reader.next_offset
        if resumed is None:  # no first answer yet (a "latest" open always has one)
            resumed = reader.end_offset or self._log_start_offset
        reset = CheckpointReset(self._offset_reset, checkpoint.offset, self._log_start_offset,
                                resumed,
                                self._log_end_offset if self._past_end or other else None,
                                checkpoint.incarnation if other else "",
                                context.incarnation if other else "")
        context.checkpoint_reset = reset
        log.warning("%s", reset_message(f"event processor {context.topic}/"
                                        f"{context.consumer_group} partition "
                                        f"{context.partition}", reset))

    async def _positioned(self, reader: Reader) -> bool:
        """Open the reader and wait for the broker's first answer (a following
        read gets one at once), before on_partition_initialize: a "latest"
        start is the log end now, so every event stored after that callback is
        delivered (Azure's promise for a partition's starting position), and a
        start the broker refuses (a checkpoint past the log's end) fails now,
        before the callback. False: a stop came first (the open is cancelled)."""
        opening = asyncio.ensure_future(reader.open(first_answer=True))
        stop_wait = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait((opening, stop_wait), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()
        if opening.done():
            opening.result()  # a failure closes the partition ("error"), as a read's does
            return True
        opening.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await opening
        return False

    async def _fence(self) -> None:
        """Register the claim's epoch. A refusal closes the partition as lost; the same
        epoch refused again is a stale fence, which no cycle mends: it goes to on_error
        and the log (once per outage) instead of closing the partition in silence
        every cycle."""
        context = self.context
        store: FencingCheckpointStore = self._store  # type: ignore[assignment]
        try:
            await store.fence(context.namespace, context.topic, context.consumer_group,
                              context.partition, context.epoch, context.owner_id)
        except OwnershipLost as e:
            if self._outages.fence_refused(context.partition, context.epoch):
                await self._failed(OwnershipLost(
                    f"{context.topic}/{context.partition} of group {context.consumer_group!r}: "
                    f"the checkpoint store refused epoch {context.epoch} again, which the "
                    f"ownership store still gives to {context.owner_id!r} ({e}); its fence "
                    "is stale (left by another ownership store, or by a topic of this name "
                    "deleted and created again): see 'Epochs per ownership store' in "
                    "docs/event-processor.md"))
            raise
        self._outages.fence_registered(context.partition)

    async def _pump(self, reader: Reader) -> CloseReason:
        """Hand batches over until a stop, a lapsed lease or a lost ownership."""
        context = self.context
        stop_wait = asyncio.ensure_future(self._stop.wait())
        try:
            while True:
                self._step = "reading"
                batch = await self._next(reader, stop_wait)
                if batch is None:
                    return self._stop_reason
                self._worked("reading")
                if context.lease_lapsed(monotonic_ms()):  # the processor's watch may be late
                    return "ownership_lost"
                context.batch_read(batch, reader.end_offset)
                self._step = "on_event"
                await call(self._callbacks.on_event, context, batch)
                self._worked("on_event")
                self._on_events(batch.count)
                if context.lost:
                    return "ownership_lost"
                if self._stop.is_set():
                    return self._stop_reason
        finally:
            stop_wait.cancel()

    async def _next(self, reader: Reader, stop_wait: asyncio.Future[Any]) -> ReadBatch | None:
        """The next batch, or None once a stop is asked for (the read is cancelled)."""
        if self._stop.is_set():
            return None
        next_batch: asyncio.Future[ReadBatch] = asyncio.ensure_future(reader.__anext__())
        await asyncio.wait((next_batch, stop_wait), return_when=asyncio.FIRST_COMPLETED)
        if next_batch.done():
            try:
                return next_batch.result()
            except StopAsyncIteration:
                raise RuntimeError(f"the reader of {self.context} ended; a following read "
                                   "never ends") from None
        next_batch.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await next_batch
        return None


def start_for(position: StartPositions, partition: int) -> Start:
    """A partition's start without a checkpoint: one Start for all, or a
    mapping partition -> Start ("earliest" for partitions it leaves out)."""
    if isinstance(position, Mapping) and set(position) != {"scn"}:
        found: Start = position.get(partition, "earliest")  # type: ignore[call-overload]
        return found
    return position  # type: ignore[return-value]
