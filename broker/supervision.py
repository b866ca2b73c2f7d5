"""Supervision of the broker's long-lived tasks: never stuck, never silent.

A task that owns state others wait on (a partition's writer, the processor
stores) must not die of an unexpected exception: every request queued for it
would wait forever, and nothing would say why. `supervise` runs the task's
body; when the body raises something unexpected it

1. logs the traceback, once per distinct cause (a cause that repeats on every
   restart is logged again as one line, not a traceback per attempt; a
   `BrokerError`, such as the store's failure, is a known state: one line);
2. calls the owner's `fail(error, retry_ms)`: the owner fails what is in
   flight and refuses later requests with a status naming itself and the cause;
3. waits a bounded backoff (`RestartBackoff`, doubling to a cap) and calls the
   owner's `restart()`, which reloads its state from the store; a restart that
   raises counts as another failure; then runs the body again.

Cancellation (the owner stopping) ends supervision at once. `RestartBackoff`
is the pure part; the rest is a thin shell (it reads the monotonic clock to
tell a long healthy run, after which the backoff starts over, from a crash loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.errors import BrokerError

CAUSE_CHARS_MAX = 200


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    """Delay before the n-th consecutive restart: first_ms, doubling, at most max_ms."""

    first_ms: int
    max_ms: int

    def delay_ms(self, failures: int) -> int:
        assert failures >= 1, failures
        return min(self.max_ms, self.first_ms << min(failures - 1, 32))


class Command(Protocol):
    """A request queued for a task; answered through its future."""

    future: asyncio.Future[Any]


def fail_pending(in_flight: list[Any], queue: asyncio.Queue[Any],
                 error: Callable[[], Exception]) -> None:
    """Answer every command a task held (`in_flight`) or had queued with a
    fresh `error()`, so nobody waits on a task that stopped. Empties both."""
    commands: list[Command] = [*in_flight]
    in_flight.clear()
    while not queue.empty():
        commands.append(queue.get_nowait())
    for command in commands:
        if not command.future.done():
            command.future.set_exception(error())


def describe_cause(error: BaseException) -> str:
    """One line naming an exception: its type and message, bounded in length."""
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= CAUSE_CHARS_MAX else text[:CAUSE_CHARS_MAX - 3] + "..."


# Reloads a task's state after its backoff; a coroutine when the reload must first wait
# for something in flight (a dispatcher's cursor write: dispatcher_supervision.py).
Restart = Callable[[], Awaitable[None] | None]


async def supervise(name: str, body: Callable[[], Awaitable[None]],
                    fail: Callable[[Exception, int], None], restart: Restart,
                    backoff: RestartBackoff, log: logging.Logger) -> None:
    """Run `body` forever, restarting it after an unexpected exception.

    Args:
        name: what the log lines call the task ("partition orders/3").
        body: the task's loop; returning ends supervision (a clean stop).
        fail: called with the exception and the delay before the restart, at
            once: fail what is in flight, refuse what comes until `restart`.
        restart: reload the owner's state (awaited when it returns an awaitable);
            raising counts as a new failure.
        backoff: delays between restarts.
        log: where failures are reported.
    """
    failures = 0
    last_cause = ""
    while True:
        started = time.monotonic()
        try:
            await body()
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if (time.monotonic() - started) * 1000 > backoff.max_ms:
                failures = 0  # it ran well for a while: not a crash loop
            failures, last_cause = await _recover(name, e, failures, last_cause, fail, restart,
                                                  backoff, log)


async def _recover(name: str, error: Exception, failures: int, last_cause: str,
                   fail: Callable[[Exception, int], None], restart: Restart,
                   backoff: RestartBackoff, log: logging.Logger) -> tuple[int, str]:
    """Report, fail the owner, back off and restart until a restart succeeds."""
    while True:
        failures += 1
        delay_ms = backoff.delay_ms(failures)
        cause = describe_cause(error)
        if cause != last_cause and isinstance(error, BrokerError):  # a known state: no trace
            log.error("%s failed (%s); restarting it in %d ms", name, cause, delay_ms)
        elif cause != last_cause:
            log.error("%s failed; restarting it in %d ms", name, delay_ms, exc_info=error)
        else:
            log.warning("%s failed again (%s, %d in a row); restarting it in %d ms",
                        name, cause, failures, delay_ms)
        last_cause = cause
        fail(error, delay_ms)
        await asyncio.sleep(delay_ms / 1000)
        try:
            reloading = restart()
            if reloading is not None:
                await reloading
        except Exception as e:
            error = e
            continue
        log.warning("%s restarted after %d failure(s)", name, failures)
        return failures, last_cause


def mark_seen(future: asyncio.Future[Any]) -> None:
    """A done-callback that marks a failed future's error as seen. Why: when a store
    failure stops the broker, the waiters (a Produce stream's answer, the partition's
    task, a view pass's caller) are cancelled first, and asyncio would log each error
    as never retrieved, with a traceback, though the failure was reported once."""
    if not future.cancelled():
        future.exception()


def nothing_to_fail(error: Exception, retry_ms: int) -> None:
    """`fail` for a task that holds no request (a loop that retries on its own
    schedule): `supervise`'s log line is the whole report."""


def nothing_to_reload() -> None:
    """`restart` for a task whose body rebuilds everything it needs each run."""
