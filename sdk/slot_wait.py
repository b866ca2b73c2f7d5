"""Waiting for a bootstrap slot of a busy broker: a wait, not an outage.

The broker serves `bootstrap_streams_max` Bootstrap streams in their snapshot
or catch-up at once and refuses more with RESOURCE_EXHAUSTED, its error named
`too_many_bootstraps` ("retry later"; the name travels in the trailing
metadata, sdk/core/error_names.py; the limit only in the message's words).
A bootstrap that finds every slot taken waits for one instead of failing, so
a topic with more partitions than free slots, or a broker other clients are
bootstrapping from, can still be bootstrapped. Every bootstrap in the SDK
(Reader, and the Databus client and `keybus bootstrap` through it) waits here,
in the Reader's stream (sdk/retrying_call.py), and nowhere above it.

Rules (pure: no I/O, time is an argument):

1. Only a refusal named `too_many_bootstraps` (by the wording, from a broker
   that sends no names) is waited out (`slots_taken`); any other
   RESOURCE_EXHAUSTED is final.
2. The broker answered: it is not lost. The wait is said through its own
   report, `on_slot_wait(True, message)` once when it begins, naming the
   partition, the broker and the broker's words (which give its limit), and
   `on_slot_wait(False, message)` once when a stream is accepted. Never
   through `on_connection_change`, which tells an application its broker is
   gone (a Databus registration turns that into on_error(Unavailable)).
   Without a callback, `log_slot_wait`: the wait at WARNING, its end at INFO,
   on the `keybus.bootstrap` logger.
3. It asks again after a backoff doubling from `backoff_first_ms` to
   `backoff_max_ms`, for `timeout_ms` (0 = until a slot is free, said in the
   first message), then fails with ResourceExhausted saying how long it
   waited and which setting ran out. The shell ends the wait on close().
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdk import errors

# The broker's name of the refusal (broker/errors.py).
TOO_MANY_BOOTSTRAPS = "too_many_bootstraps"
# on_slot_wait(waiting, message): called with True when a bootstrap begins to wait for a
# free slot of its broker, with False when it got one. May be a coroutine function. Runs
# on the client's event loop: keep it short.
SlotWaitCallback = Callable[[bool, str], Any]
_log = logging.getLogger("keybus.bootstrap")


def slots_taken(error: errors.KeybusError) -> bool:
    """The broker refused the stream because its bootstrap slots are all in use
    (its error `too_many_bootstraps` says "retry later"); other refusals are final."""
    if not isinstance(error, errors.ResourceExhausted):
        return False
    if error.broker_error:  # the error's name (sdk/core/error_names.py): not its wording
        return error.broker_error == TOO_MANY_BOOTSTRAPS
    return "bootstrap_streams_max" in error.message  # a broker that sends no names


def log_slot_wait(waiting: bool, message: str) -> None:
    """The report when the application gave no `on_slot_wait`: the wait is a WARNING
    (Python prints it on stderr even when logging is not set up), its end INFO."""
    _log.log(logging.WARNING if waiting else logging.INFO, "%s", message)


@dataclass(frozen=True, slots=True)
class SlotWaitPolicy:
    """How one bootstrap waits; durations in milliseconds.

    Attributes:
        timeout_ms: how long one wait may last before the bootstrap fails
            (0 = until a slot is free).
        backoff_first_ms / backoff_max_ms: the pause between two asks doubles
            from the first to the cap.
    """

    timeout_ms: int = 0
    backoff_first_ms: int = 100
    backoff_max_ms: int = 1_000

    def __post_init__(self) -> None:
        if type(self.timeout_ms) is not int or self.timeout_ms < 0:
            raise ValueError(f"slot_wait_timeout_ms={self.timeout_ms!r} is invalid: need an "
                             "int >= 0 (0 = until a slot is free)")
        for name in ("backoff_first_ms", "backoff_max_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: need an int >= 1")


class SlotWait:
    """One bootstrap stream's waits for a slot: waiting since when, the next pause.

    Args:
        what: the partition, for the messages ("orders/0").
        broker: the broker's address, for the messages.
        policy: the bound and the backoff.
    """

    def __init__(self, what: str, broker: str, policy: SlotWaitPolicy) -> None:
        self.what = what
        self.broker = broker
        self.policy = policy
        self.since_ms: int | None = None  # the first refusal of the current wait
        self._pause_ms = policy.backoff_first_ms

    @property
    def waiting(self) -> bool:
        return self.since_ms is not None

    def process_refused(self, error: errors.KeybusError,
                        now_ms: int) -> tuple[int, str | None]:
        """The broker refused a stream for want of a slot (`slots_taken`).

        Returns:
            (milliseconds to wait before asking again, message to report now
            or None: only the first refusal of a wait is said).
        Raises:
            ResourceExhausted: the wait passed `timeout_ms` (its broker_error
                is the broker's).
        """
        pause_ms = self._pause_ms
        self._pause_ms = min(self._pause_ms * 2, self.policy.backoff_max_ms)
        limit = self.policy.timeout_ms
        if self.since_ms is None:
            self.since_ms = now_ms
            bound = f"for up to {limit / 1000:g} s" if limit else "until one is free"
            return pause_ms, (f"{self.what} waits for a bootstrap slot of the broker at "
                              f"{self.broker} (asking again every "
                              f"{self.policy.backoff_max_ms / 1000:g} s at most, {bound}); "
                              f"the broker said: {error.message}")
        if limit and now_ms - self.since_ms + pause_ms > limit:
            failed = errors.ResourceExhausted(
                f"{self.what} waited {(now_ms - self.since_ms) / 1000:.1f} s for a bootstrap "
                f"slot of the broker at {self.broker}, and slot_wait_timeout_ms={limit} ran "
                f"out: {error.message}", error.code)
            failed.broker_error = error.broker_error
            raise failed
        return pause_ms, None

    def process_accepted(self, now_ms: int) -> str | None:
        """A stream was accepted (its first message came). Returns the message to
        report if it had waited for its slot."""
        since, self.since_ms = self.since_ms, None
        self._pause_ms = self.policy.backoff_first_ms
        if since is None:
            return None
        return (f"{self.what} got a bootstrap slot of the broker at {self.broker} after "
                f"{(now_ms - since) / 1000:.1f} s")
