"""One registration at work: the loop that feeds the runner and carries out its steps.

The shell around the pure `WindowRunner`: it takes items from the window
source's inbox (pieces, aborts, notices, failures), gives them to the
runner with the time, and does what the runner answers: a segment of calls
through the `GroupExecutor`, a checkpoint write through the source, a sleep
before a retry. Idle time becomes ticks (time-based checkpoints, outage
notices). Runs as one asyncio task per registration.

Rules:
1. Whatever ends consumption reaches the consumers: a source that cannot
   open (no such topic, a broker refusing a setting, a broker not reached
   within connect_timeout_ms, a checkpoint the registration cannot resume)
   gets on_start_consumption, on_error(cause), on_stop_consumption, and a
   WARNING; an unexpected exception (a bug) gets on_error and
   on_stop_consumption, and is logged with its traceback. Neither escapes the task: `wait()` raises it,
   `stop()` never does.
2. The loop checks for a stop request before each item, and yields to the
   event loop once `YIELD_EVERY_S` of it has passed without a suspension:
   with sync callbacks and no checkpoint write nothing else suspends it, and
   a full inbox would otherwise be consumed whole before the task that asked
   to stop (or any other task) runs again. Not before each item: a yield
   costs 6-9 us, a quarter of what a one-event window costs the loop.
3. The broker link's health is looked at every `_HEALTH_EVERY_MS` between
   windows, busy or idle. Looked at only when the inbox was empty, an outage
   while read-ahead windows were being worked off was told only once they
   were all done, and a second outage soon after the first went untold (the
   link was never seen up in between, so it counted as the same outage).
4. on_start_consumption follows the source's open: a "latest" start is each
   partition's log end by then, so every event stored after that callback is
   delivered (Databus calls onStartConsumption once its puller reached the
   relay). A source that cannot open gets it before on_error (rule 1); one
   still opening when a notice is due (a broker not reached within
   `unavailable_report_ms`) gets it before that notice, and its "latest" is
   fixed only when the open succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from sdk import errors
from sdk.databus.config import DatabusConfig
from sdk.databus.connection import now_ms
from sdk.databus.errors import CheckpointFailed
from sdk.databus.executor import GroupExecutor
from sdk.databus.inbox import (
    AbortItem,
    FailureItem,
    Item,
    MarkerItem,
    NoticeItem,
    PassedItem,
    PieceItem,
    WindowSource,
)
from sdk.databus.runner import WindowRunner
from sdk.databus.runner_table import Finished, Persist, Phase, Sleep, Step
from sdk.databus.window import Call, Segment

_log = logging.getLogger("keybus.databus")
_IDLE_TICK_S = 0.2  # how often an idle registration checks time-based checkpoints and health
YIELD_EVERY_S = 0.001  # rule 2: the most loop time the registration takes in one go
_HEALTH_EVERY_MS = 200  # rule 3: how often a busy registration looks at the broker link
_REPORTABLE = (Phase.WAITING, Phase.OPEN)  # phases in which the runner takes a notice
_OPEN_GRACE_MS = 1_000  # how long a stop asked for while the source opens waits for its outcome


class DatabusRegistration:
    """A consumer or group registered for sources of a topic.

    Made by `DatabusClient.register` / `register_shared`; started by the
    client. `wait()` returns when consumption ended and raises its error.
    """

    def __init__(self, name: str, topic: str, members: Sequence[object],
                 sources: Sequence[str] | None, config: DatabusConfig,
                 source: WindowSource) -> None:
        self.name = name
        self.topic = topic
        self.members = list(members)
        self.sources = list(sources) if sources is not None else None
        self.config = config
        self.source = source
        self.runner = WindowRunner(config, len(self.members), sources)
        self.executor = GroupExecutor(self.members, config.call_budget_ms, label=name)
        self.error: Exception | None = None
        self._stop_requested = False
        self._yielded_s = 0.0  # monotonic time of the last yield (rule 2)
        self._health_ms = 0  # now_ms() of the last look at the source's health (rule 3)
        self._task: asyncio.Task[None] | None = None
        self._begun = False  # on_start_consumption was called (rule 4)
        self._began: Finished | None = None  # and ended consumption (FATAL/ERROR)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start consuming in a background task (on the running loop)."""
        if self._task is not None:
            raise RuntimeError(f"registration {self.name} was started already")
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name=f"keybus-databus-{self.name}")

    async def wait(self) -> None:
        """Until consumption ends. Raises the error that ended it, if any."""
        if self._task is None:
            raise RuntimeError(f"registration {self.name} was not started")
        await asyncio.shield(self._task)
        if self.error is not None:
            raise self.error

    def request_stop(self) -> None:
        """Ask consumption to stop after the current window; returns at once.

        Safe to call from a callback (the loop sees the request before the
        next window) or from any code on the registration's event loop;
        `stop()` does the same and then waits.
        """
        self._stop_requested = True
        self.source.inbox.wake()

    async def stop(self) -> None:
        """Finish the current window, checkpoint, call on_stop_consumption, close.

        Never raises the consumption's error (see `error` / `wait()`).
        """
        self.request_stop()
        if self._task is not None:
            await asyncio.shield(self._task)

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        try:
            self.error = await self._consume()
        except Exception as e:  # a bug in Keybus: the consumers still hear of it (rule 1)
            _log.exception("%s: consumption stopped by an unexpected error", self.name)
            self.error = e
            await self._last_calls(e)
        finally:
            await self.source.close()

    async def _consume(self) -> Exception | None:
        error = await self._open()
        finished = self._began if self._begun else await self._begin()
        if finished is None and error is not None:  # rule 1: reported, never silent
            _log.warning("%s: cannot start: %s", self.name, error,
                         exc_info=not isinstance(error, errors.KeybusError | ValueError))
            finished = await self._carry(self.runner.process_fail(error))
        while finished is None:
            finished = await self._carry(await self._next_step())
        if finished.error is not None:
            _log.info("%s: consumption stopped: %s", self.name, finished.error)
        return finished.error

    async def _begin(self) -> Finished | None:
        """on_start_consumption, once (rule 4): after the source opened, or with
        the first notice that it cannot open yet."""
        self._begun = True
        self._began = await self._carry(self.runner.start(now_ms()))
        return self._began

    async def _open(self) -> Exception | None:
        """Open the source: None when it is open (or a stop request cut it short),
        else why it cannot be. A broker still unreachable after `unavailable_report_ms`
        is told to the consumers (on_error, once) while the open goes on trying. A
        stop request waits `_OPEN_GRACE_MS` for the outcome, so that a quick failure
        (no such topic) is still reported, then gives up on the open."""
        opening = asyncio.ensure_future(self.source.open())
        give_up_ms: int | None = None
        try:
            while not opening.done():
                if self._stop_requested and give_up_ms is None:
                    give_up_ms = now_ms() + _OPEN_GRACE_MS
                if give_up_ms is not None and now_ms() >= give_up_ms:
                    return None  # the loop stops cleanly; close() releases what was opened
                await asyncio.wait({opening}, timeout=_IDLE_TICK_S)
                notice = self.source.health(now_ms()) if not opening.done() else None
                if notice is not None and not self._begun and await self._begin() is not None:
                    return None  # on_start_consumption stopped consumption
                if notice is not None:
                    await self._carry(self.runner.process_report(notice))
        finally:
            if not opening.done():
                opening.cancel()
                await asyncio.gather(opening, return_exceptions=True)
        if opening.cancelled():
            return None
        error = opening.exception()
        if error is not None and not isinstance(error, Exception):
            raise error  # KeyboardInterrupt and the like are not a consumption's error
        return error

    async def _last_calls(self, error: Exception) -> None:
        """After a bug: on_error and on_stop_consumption straight through the executor
        (the runner's state cannot be trusted), unless on_stop_consumption ran."""
        if self.runner.phase is Phase.STOPPED:
            return
        for call in (Call("on_error", (error,)), Call("on_stop_consumption")):
            try:
                await self.executor.run(Segment((call,)))
            except Exception:
                _log.exception("%s: %s after an unexpected error failed too", self.name,
                               call.name)

    async def _next_step(self) -> Step | None:
        """Wait for the next item (or an idle tick) and hand it to the runner."""
        runner = self.runner
        inbox = self.source.inbox
        if len(inbox) and not self._stop_requested and \
                time.monotonic() - self._yielded_s >= YIELD_EVERY_S:
            await asyncio.sleep(0)  # rule 2: get() would not suspend with items queued
            self._yielded_s = time.monotonic()
        if self._stop_requested:
            return runner.process_stop(now_ms())
        if runner.phase in _REPORTABLE and now_ms() - self._health_ms >= _HEALTH_EVERY_MS:
            notice = self._health(now_ms())  # rule 3: also while windows keep coming
            if notice is not None:
                return runner.process_report(notice)
        item = await inbox.get(_IDLE_TICK_S)
        if self._stop_requested:
            return runner.process_stop(now_ms())  # an item taken now is not processed
        now = now_ms()
        if item is None:
            notice = self._health(now)
            if notice is not None:
                return runner.process_report(notice)
            return runner.process_tick(now) if runner.phase is Phase.WAITING else None
        return self._give(item, now)

    def _health(self, now: int) -> Exception | None:
        self._health_ms = now
        return self.source.health(now)

    def _give(self, item: Item, now: int) -> Step | None:
        runner = self.runner
        if type(item) is PieceItem:
            return runner.process_piece(item.piece, item.closes, now)
        if type(item) is AbortItem:
            return runner.process_abort(now) if runner.phase is Phase.OPEN else None
        if type(item) is NoticeItem:
            return runner.process_report(item.error)
        if type(item) is MarkerItem:
            return runner.process_marker(item.name, now)
        if type(item) is PassedItem:
            return runner.process_passed(item.partition, item.offset, item.scn, now)
        assert isinstance(item, FailureItem)
        return runner.process_fail(item.error)

    async def _carry(self, step: Step | None) -> Finished | None:
        """Do what the runner says until it waits for input (None) or is finished."""
        runner, executor = self.runner, self.executor
        while step is not None:
            if type(step) is Segment:
                result = await executor.run(step)
                step = runner.process_result(result, now_ms())
            elif type(step) is Persist:
                step = runner.process_persisted(await self._persist(step), now_ms())
            elif type(step) is Sleep:
                await asyncio.sleep(step.ms / 1000)
                step = runner.process_slept(now_ms())
            else:
                assert isinstance(step, Finished)
                return step
        return None

    async def _persist(self, step: Persist) -> Exception | None:
        try:
            await self.source.persist(step.partition, step.offset, step.scn, step.position)
        except Exception as e:  # any store failure is reported, the windows stay pending
            _log.warning("%s: checkpoint of partition %d at scn %d failed: %s", self.name,
                         step.partition, step.scn, e)
            return CheckpointFailed(step.partition, step.scn, str(e))
        return None
