"""SIGUSR1 writes every asyncio task's stack to the broker's log: a debugging aid.

A hang that leaves every thread idle (py-spy shows nothing) is an await that
nothing completes; which await only the tasks' own stacks tell. `kill -USR1
<broker pid>` logs each pending task, the chain of coroutines it waits in and
what the innermost one awaits, at WARNING, then the broker goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

log = logging.getLogger("keybus.broker.tasks")
FRAMES_MAX = 40


def awaited_frames(coro: Any) -> Iterator[FrameType]:
    """The frames of `coro` and of each coroutine it awaits in turn, outermost first.
    Why by hand: `Task.get_stack` gives a suspended task's outermost frame only, and
    `Task.print_stack` fails on a frame without a line number (grpcio's)."""
    for _ in range(FRAMES_MAX):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            return
        yield frame
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)


def describe_tasks(tasks: set[asyncio.Task[Any]]) -> str:
    """Every task's name and the chain it waits in, one block each, sorted by name."""
    out = io.StringIO()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"--- {task.get_name()}\n")
        for frame in awaited_frames(task.get_coro()):
            code = frame.f_code
            out.write(f"    {code.co_filename}:{frame.f_lineno} in {code.co_name}\n")
        # what the innermost frame awaits (CPython's Task keeps it in _fut_waiter)
        out.write(f"    awaits {getattr(task, '_fut_waiter', None)!r}\n")
    return out.getvalue()


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Log every task's stack on SIGUSR1 (where the loop supports signal handlers)."""
    def dump() -> None:
        tasks = asyncio.all_tasks(loop)
        log.warning("%d asyncio tasks (SIGUSR1):\n%s", len(tasks), describe_tasks(tasks))
    # AttributeError: no SIGUSR1 (Windows); NotImplementedError: a loop without handlers
    with contextlib.suppress(NotImplementedError, AttributeError):
        loop.add_signal_handler(signal.SIGUSR1, dump)
