"""Run a segment of callbacks on every member of a group: the runner's hands.

A segment (window.py) is a run of calls with no barrier inside; every
member makes its calls in order and the segment ends when all members are
done (the barrier), or at the first failure, which cancels the rest (as
Databus's MultiConsumerCallback cancels outstanding calls).

Two paths:
* Every callback of the segment is a plain function: members run one after
  the other on the event loop, events in a tight loop with no await, no
  task and one clock read per call. This is the fast path the benchmark
  measures.
* Some callback is a coroutine function: one task per member, so members
  run concurrently between barriers (a slow member does not hold up
  another's events); a watchdog cancels an async call that runs over the
  time budget.

A call counts as ERROR when it raises (logged with its traceback), returns
something that is not a result, or runs longer than `call_budget_ms` (a sync
call cannot be interrupted: it is judged when it returns).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from sdk.databus.bootstrap_callbacks import BOOTSTRAP_CALLBACK_NAMES
from sdk.databus.callbacks import CALLBACK_NAMES
from sdk.databus.event import DbusEvent, EventColumns
from sdk.databus.results import ERROR, SUCCESS, CallbackResult, merge, normalize
from sdk.databus.window import Call, EventsCall, Segment

_log = logging.getLogger("keybus.databus")


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling `fn` gives a coroutine (async def, also behind partial or __call__)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004


class GroupExecutor:
    """Makes the calls of segments on the members of one registration."""

    def __init__(self, members: Sequence[object], call_budget_ms: int, label: str = "") -> None:
        self.members = list(members)
        self.label = label
        self._budget_s = call_budget_ms / 1000
        self._fns: dict[str, list[Callable[..., Any]]] = {
            name: [getattr(member, name) for member in self.members]
            for name in CALLBACK_NAMES + _bootstrap_names(self.members)}
        self._async: dict[str, list[bool]] = {
            name: [is_async_callable(fn) for fn in fns] for name, fns in self._fns.items()}
        self._any_async = {name: any(flags) for name, flags in self._async.items()}

    async def run(self, segment: Segment) -> CallbackResult:
        """Every member's calls of `segment`; the most severe result.

        Raises:
            RuntimeError: the segment names a callback the members lack (a
                bug in the caller: bootstrap calls need combined consumers).
        """
        try:
            any_async = any(self._any_async[call.name] for call in segment.calls)
        except KeyError as e:
            raise RuntimeError(
                f"{self.label}: a {e.args[0]} call reached members that lack it (bootstrap "
                "callbacks are known only when every member has them)") from None
        if any_async:
            return await self._run_async(segment)
        return self._run_sync(segment)

    # ------------------------------------------------------------ sync path

    def _run_sync(self, segment: Segment) -> CallbackResult:
        worst = SUCCESS
        for m in range(len(self.members)):
            for call in segment.calls:
                if isinstance(call, EventsCall):  # on_event, or on_bootstrap_event
                    positions = call.slices[m]
                    if not positions:
                        continue
                    result = self._events_sync(m, call.name, call.payload, positions)
                else:
                    assert isinstance(call, Call)
                    result = self._call_sync(m, call)
                if result is not SUCCESS:
                    worst = merge(worst, result)
                    if worst.is_failure:
                        return worst
        return worst

    def _call_sync(self, m: int, call: Call) -> CallbackResult:
        fn = self._fns[call.name][m]
        before = perf_counter()
        try:
            returned = fn(*call.args)
        except Exception:
            _log.exception("%s: %s%r of %s raised; counted as ERROR", self.label,
                           call.name, call.args, self._who(m))
            return ERROR
        elapsed = perf_counter() - before
        if elapsed > self._budget_s:
            return self._over_budget(call.name, m, elapsed)
        return self._checked(returned, call.name, m)

    def _events_sync(self, m: int, name: str, payload: object,
                     positions: Sequence[int]) -> CallbackResult:
        """The hot loop: one event object and one clock read per call, no await.
        `name`: on_event or on_bootstrap_event, of member `m`."""
        assert isinstance(payload, EventColumns)
        fn = self._fns[name][m]
        worst = SUCCESS
        budget_s = self._budget_s
        clock = perf_counter
        make = DbusEvent
        before = clock()
        i = -1
        try:
            for i in positions:
                returned = fn(make(payload, i))
                after = clock()
                if after - before > budget_s:
                    return self._over_budget(name, m, after - before)
                before = after
                if returned is not None and returned is not SUCCESS:
                    result = self._checked(returned, name, m)
                    if result.is_failure:
                        return result
                    worst = merge(worst, result)
        except Exception:
            _log.exception("%s: %s of %s raised at offset %d; counted as ERROR",
                           self.label, name, self._who(m), payload.offset_at(i) if i >= 0 else -1)
            return ERROR
        return worst

    # ------------------------------------------------------------ async path

    async def _run_async(self, segment: Segment) -> CallbackResult:
        loop = asyncio.get_running_loop()
        started: list[float | None] = [None] * len(self.members)
        tasks = [loop.create_task(self._chain(m, segment, started))
                 for m in range(len(self.members))]
        try:
            return await self._watch(tasks, started, loop)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, tasks: list[asyncio.Task[CallbackResult]],
                     started: list[float | None],
                     loop: asyncio.AbstractEventLoop) -> CallbackResult:
        """Wait for every member; the first failure or a call over budget ends it."""
        worst = SUCCESS
        pending = set(tasks)
        while pending:
            now = loop.time()
            deadlines = [s + self._budget_s for m, s in enumerate(started)
                         if s is not None and tasks[m] in pending]
            timeout = max(0.0, min(deadlines) - now) if deadlines else self._budget_s
            done, pending = await asyncio.wait(pending, timeout=timeout,
                                               return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                worst = merge(worst, task.result())
            if worst.is_failure:
                return worst
            now = loop.time()
            for m, task in enumerate(tasks):
                begun = started[m]
                if task in pending and begun is not None and now - begun > self._budget_s:
                    return self._over_budget("an async callback", m, now - begun)
        return worst

    async def _chain(self, m: int, segment: Segment,
                     started: list[float | None]) -> CallbackResult:
        """Member m's calls of the segment, in order; stops at its first failure."""
        worst = SUCCESS
        for call in segment.calls:
            if isinstance(call, EventsCall):
                positions = call.slices[m]
                result = await self._events_async(m, call.name, call.payload, positions,
                                                  started) if positions else SUCCESS
            else:
                assert isinstance(call, Call)
                result = await self._call_async(m, call.name, call.args, started)
            worst = merge(worst, result)
            if worst.is_failure:
                return worst
        return worst

    async def _call_async(self, m: int, name: str, args: tuple[Any, ...],
                          started: list[float | None]) -> CallbackResult:
        if not self._async[name][m]:
            return self._call_sync(m, Call(name, args))
        started[m] = asyncio.get_running_loop().time()
        try:
            returned = await self._fns[name][m](*args)
        except Exception:
            _log.exception("%s: %s%r of %s raised; counted as ERROR", self.label, name,
                           args, self._who(m))
            return ERROR
        finally:
            started[m] = None
        return self._checked(returned, name, m)

    async def _events_async(self, m: int, name: str, payload: object, positions: Sequence[int],
                            started: list[float | None]) -> CallbackResult:
        assert isinstance(payload, EventColumns)
        if not self._async[name][m]:
            return self._events_sync(m, name, payload, positions)
        fn = self._fns[name][m]
        worst = SUCCESS
        loop = asyncio.get_running_loop()
        for i in positions:
            started[m] = loop.time()
            try:
                returned = await fn(DbusEvent(payload, i))
            except Exception:
                _log.exception("%s: %s of %s raised at offset %d; counted as "
                               "ERROR", self.label, name, self._who(m), payload.offset_at(i))
                return ERROR
            finally:
                started[m] = None
            if returned is not None and returned is not SUCCESS:
                result = self._checked(returned, name, m)
                if result.is_failure:
                    return result
                worst = merge(worst, result)
        return worst

    # ------------------------------------------------------------ results

    def _checked(self, returned: object, name: str, m: int) -> CallbackResult:
        result = normalize(returned)
        if result is None:
            kind = "an awaitable (declare the callback async def)" if inspect.isawaitable(
                returned) else repr(returned)
            if inspect.iscoroutine(returned):
                returned.close()
            _log.error("%s: %s of %s returned %s, not a CallbackResult; counted as ERROR",
                       self.label, name, self._who(m), kind)
            return ERROR
        if result.is_failure:
            _log.warning("%s: %s of %s returned %s", self.label, name, self._who(m),
                         result.name)
        return result

    def _over_budget(self, name: str, m: int, elapsed_s: float) -> CallbackResult:
        _log.error("%s: %s of %s ran %.0f ms, over call_budget_ms=%.0f; counted as ERROR",
                   self.label, name, self._who(m), elapsed_s * 1000, self._budget_s * 1000)
        return ERROR

    def _who(self, m: int) -> str:
        """Member m as the logs name it: its index in the group and its class."""
        return f"member {m} ({type(self.members[m]).__name__})"


def _bootstrap_names(members: Sequence[object]) -> tuple[str, ...]:
    """The bootstrap callbacks, when every member has them (a combined consumer)."""
    if all(callable(getattr(m, name, None)) for m in members for name in BOOTSTRAP_CALLBACK_NAMES):
        return BOOTSTRAP_CALLBACK_NAMES
    return ()
