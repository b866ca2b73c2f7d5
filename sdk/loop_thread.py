"""The loop thread under every blocking (Sync) SDK class.

Each Sync object runs its async twin on an asyncio loop in a daemon thread of
its own and blocks the caller on `run`. Rules this module keeps, because users
call Sync classes from plain threads, web workers and scripts:

1. A call that stops waiting (a timeout, Ctrl-C) cancels its coroutine, so a
   receive the caller gave up on cannot take the next event behind its back.
2. A closed client, or one used in a process forked after it was made (its
   loop thread stayed in the parent), answers with an error saying so instead
   of `RuntimeError: Event loop is closed` or a wait that never ends.
3. A client still open when the interpreter exits gets its `at_exit` called
   by an `atexit` hook, before the daemon thread would be cut off with events
   or acks still buffered. A daemon thread whose call then fails because of
   it (a worker still receiving) waits for the process to end, as it would
   have without the hook, instead of printing a traceback as the program ends.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sdk import errors

R = TypeVar("R")

log = logging.getLogger("keybus")

_LIVE: weakref.WeakSet[LoopThread] = weakref.WeakSet()


def check_timeout_s(timeout_s: object, name: str = "timeout_s") -> None:
    """Refuse a timeout that is not None or a number of seconds >= 0.

    Raises:
        ValueError: naming the value and what is allowed.
    """
    if timeout_s is None:
        return
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s < 0:
        raise ValueError(f"{name}={timeout_s!r} is invalid: give seconds as a number >= 0, "
                         "or None to wait without a limit")


class LoopThread:
    """An asyncio event loop running forever in a daemon thread.

    Args:
        name: the thread's name.
        owner: the client in error messages ("SyncConsumer of topic 't' ...").
        closed_error: raised by a call after stop() (ProducerClosed for a producer).
    """

    def __init__(self, name: str, owner: str = "",
                 closed_error: type[errors.KeybusError] = errors.KeybusError) -> None:
        self.loop = asyncio.new_event_loop()
        self.owner = owner or name
        self.closed_error = closed_error
        self.forked = False  # set in a child process by os.register_at_fork
        self.at_exit: Callable[[], None] | None = None  # run at interpreter exit (rule 3)
        self.exiting = False  # the atexit hook has begun (rule 3)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def check_usable(self, call: str) -> None:
        """Raise if this client cannot serve `call` any more (rule 2)."""
        if self.forked:
            raise RuntimeError(
                f"{self.owner} was made before os.fork() and cannot be used in the child "
                f"process (its loop thread stayed in the parent); {call}() refused: make "
                "the client after the fork (e.g. in gunicorn's post_fork hook, or without "
                "--preload)")
        if self.loop.is_closed():
            raise self.closed_error(f"{self.owner} is closed: {call}() after close(); "
                                    "make a new one", errors.CANCELLED)

    def run(self, coro: Coroutine[Any, Any, R], timeout_s: float | None = None) -> R:
        """Run a coroutine on the loop and wait for its result.

        Raises:
            RuntimeError: called from the loop's own thread (it would deadlock),
                or in a process forked after the client was made.
            KeybusError (closed_error): after stop().
            ValueError: timeout_s is not None or a number >= 0.
            TimeoutError: not done within timeout_s (the coroutine is cancelled).
            KeyboardInterrupt: Ctrl-C while waiting (the coroutine is cancelled).
        """
        call = getattr(coro, "__name__", "call")
        try:
            check_timeout_s(timeout_s)
        except ValueError:
            coro.close()
            raise
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if future.done():  # the coroutine's own TimeoutError (a receive's timeout_s)
                raise
            future.cancel()
            raise TimeoutError(f"{self.owner}: {call}() not done within "
                               f"timeout_s={timeout_s}") from None
        except BaseException:  # KeyboardInterrupt, SystemExit: stop what we waited for
            future.cancel()
            self._park_if_exiting()
            raise

    def _park_if_exiting(self) -> None:
        """Rule 3: at exit, a daemon thread's failed call waits for the end."""
        if self.exiting and threading.current_thread() is not threading.main_thread():
            threading.Event().wait()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Run callback(*args) on the loop without waiting (acks)."""
        try:
            self.check_usable(getattr(callback, "__name__", "call"))
        except BaseException:
            self._park_if_exiting()
            raise
        self.loop.call_soon_threadsafe(callback, *args)

    def submit(self, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
        """Start a coroutine on the loop; return its future without waiting.

        Raises:
            RuntimeError, KeybusError (closed_error): as run().
        """
        try:
            self.check_usable(getattr(coro, "__name__", "call"))
            if threading.current_thread() is self._thread:
                raise RuntimeError("a blocking Keybus call was made on the SDK's loop thread "
                                   "(e.g. from a done callback); call it from another thread")
        except BaseException:
            coro.close()
            self._park_if_exiting()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Cancel what still runs on the loop (grpc's own call tasks too), stop
        it and join the thread. Idempotent."""
        if self.loop.is_closed() or self.forked:
            return
        with contextlib.suppress(RuntimeError, TimeoutError):
            asyncio.run_coroutine_threadsafe(_cancel_others(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _cancel_others() -> None:
    """Let finished calls settle, then cancel and await every other task."""
    await asyncio.sleep(0)
    current = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _run_at_exit() -> None:
    """Look after the clients the program left open (rule 3), one at a time."""
    for thread in list(_LIVE):
        if thread.at_exit is None or thread.forked or thread.loop.is_closed():
            continue
        thread.exiting = True
        try:
            thread.at_exit()
        except Exception as error:  # the exit goes on; say what was lost
            log.warning("at exit, %s failed: %s", thread.owner, error)
        except KeyboardInterrupt:  # Ctrl-C again: the user will not wait
            log.warning("at exit, %s was interrupted; what it still held is lost",
                        thread.owner)
            return


def _mark_forked() -> None:
    for thread in list(_LIVE):
        thread.forked = True


atexit.register(_run_at_exit)
os.register_at_fork(after_in_child=_mark_forked)
