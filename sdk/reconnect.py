"""How a long-running SDK client (Reader, Consumer) treats its link to the broker.

Never stuck, never silent: a client that cannot reach its broker says so
within seconds, and one that loses it says so while it retries.

Rules (pure: no I/O, time is an argument):

1. Before the first connection, a call that never reached a broker (refused,
   unknown host) is retried for `connect_timeout_ms`, counted from the first
   failure: the last wait is cut to end at that deadline and one more attempt
   is made then (a broker back at 4.5 s of 5 is reached); if it fails too, the
   call fails with `cannot reach broker at HOST:PORT: <reason> — is it
   running?`. A wrong address is an answer the caller needs now, not after
   minutes; a broker restarting with its clients is one they wait for.
2. Once the broker was reached, losing it is reported once (the shell calls
   `on_connection_change(False, message)`), retried with capped doubling
   backoff for `retry_timeout_ms` (0 = until it is back), and its return is
   reported (`on_connection_change(True, message)`). An application that
   gives no callback gets `log_connection_change`: a WARNING on the `keybus`
   logger, which Python prints on stderr even when logging is not set up.
3. A broker that stops answering with its connection open (frozen, hung)
   is lost too: the channel's keepalive pings (sdk/channel.py) close the
   connection when one goes unanswered, within ~15 s, and rule 2 applies.
4. A lost broker is retried for `retry_timeout_ms`, counted from the loss, as
   rule 1 counts: the last wait is cut to end at that deadline and one more
   attempt is made then; if it fails too, the client fails with Unavailable
   naming the broker, the reason and the setting.
5. A stream that ended because grpcio could not write a request on it
   (`ended_on_write`) may not have lost its broker at all: the broker's own
   status (say, NOT_FOUND "topic 'T' was deleted") can end the call just
   before an ack is written, and grpcio then puts INTERNAL in its place. The
   client reconnects at once and says nothing (`defer_report`); the broker's
   answer to that tells which it was. Only if that attempt fails too is the
   broker reported lost, with the first reason. Once per `backoff_max_ms`: a
   broker that keeps ending streams so gets the backoff of rule 2.
6. A stream the broker ended because its token expired (UNAUTHENTICATED on
   an open stream, `reauthenticates`) is opened again at once with
   credentials read anew; a refusal of that open is the client's error. A
   client certificate is read anew too: on a new channel, when its files
   hold one usable now (sdk.channel.renews_channel). The producer, which
   opens again only at its next send, also renews once on a refusal at open
   while a usable certificate is on disk (sdk/sender.py, `_reauthenticated`).
7. A reconnect the broker answers with a refusal (`process_refusal`: an
   Exclusive subscription another consumer took meanwhile, the subscription's
   consumer limit reached, no longer the topic's leader) is no lost broker:
   it is reported once with the broker's own words, `the broker at HOST:PORT
   refuses the reconnect: <its message>; retrying`, again when its words
   change, retried with the backoff of rule 2 within `retry_timeout_ms`
   (the last wait ends at that deadline, as in rule 4; if the attempt then is
   refused too, the client fails with the refusal's own error), and its end is
   reported (`the broker at HOST:PORT accepts the reconnect after refusing it
   for N s`). As Pulsar's client, which keeps reconnecting on ConsumerBusy:
   the other consumer may go. A refusal that may be the broker still holding
   this client's previous stream (`settling`) is reported only once it lasts
   `backoff_max_ms`. A broker lost again after a refusal is reported lost again.
   A read the broker answers UNAVAILABLE because its compacted view is not
   ready (`VIEW_NOT_READY`) is such a refusal too, not a lost broker; one whose
   view lacks keys (`ENDS_READ`) ends the read with the broker's error at once.

The shell (reader.py, consumer.py) makes the calls, sleeps the delays this
returns and runs the callbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from sdk import errors
from sdk.core.keepalive import unanswered_ping

# on_connection_change(connected, message): called with False when the broker
# is lost (the client retries), with True when it is back. May be a coroutine
# function. Runs on the client's event loop: keep it short.
ConnectionCallback = Callable[[bool, str], Any]
_log = logging.getLogger("keybus.connection")


def log_connection_change(connected: bool, message: str) -> None:
    """The report when the application gave no `on_connection_change`: a lost broker
    is a WARNING (shown on stderr by Python's last-resort handler when logging is not
    configured), its return INFO."""
    _log.log(logging.INFO if connected else logging.WARNING, "%s", message)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Limits of one client's retries; every duration in milliseconds.

    Attributes:
        connect_timeout_ms: how long the first connection may fail before the
            client gives up (0 = retry forever, e.g. a relay waiting for its
            upstream).
        retry_timeout_ms: how long a lost broker is retried (0 = forever).
        backoff_first_ms / backoff_max_ms: the wait between attempts doubles
            from the first to the cap.
    """

    connect_timeout_ms: int = 5_000
    retry_timeout_ms: int = 0
    backoff_first_ms: int = 100
    backoff_max_ms: int = 2_000

    def __post_init__(self) -> None:
        for name in ("connect_timeout_ms", "retry_timeout_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"{name}={value!r} is invalid: need an int >= 0 (0 = forever)")
        for name in ("backoff_first_ms", "backoff_max_ms"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: need an int >= 1")


class Link:
    """The state of one client's link: never connected, connected, or lost since when."""

    def __init__(self, broker: str, policy: RetryPolicy) -> None:
        self.broker = broker
        self.policy = policy
        self.ever_connected = False
        self.lost_since_ms: int | None = None
        self._first_failure_ms: int | None = None
        self._backoff_ms = policy.backoff_first_ms
        self._deferred: str | None = None  # the reason of a failure not reported (rule 5)
        self._deferred_ms: int | None = None
        self._refused: str | None = None  # the refusal reported last (rule 7)
        self._refused_since_ms: int | None = None

    @property
    def lost(self) -> bool:
        return self.lost_since_ms is not None

    @property
    def refused(self) -> bool:
        """The last attempt was refused (rule 7): the next answer ends that."""
        return self._refused is not None

    def process_connected(self, now_ms: int) -> str | None:
        """The broker answered. Returns the message to report if it was lost."""
        self.ever_connected = True
        self._first_failure_ms = None
        self._backoff_ms = self.policy.backoff_first_ms
        self._deferred = None
        refused, refused_since = self._refused, self._refused_since_ms
        self._refused = self._refused_since_ms = None
        lost_since, self.lost_since_ms = self.lost_since_ms, None
        if refused is not None and refused_since is not None:
            message = (f"the broker at {self.broker} accepts the reconnect after refusing it "
                       f"for {(now_ms - refused_since) / 1000:.1f} s")
            if lost_since is not None:
                message += f" (away {(now_ms - lost_since) / 1000:.1f} s in all)"
            return message
        if lost_since is None:
            return None
        return f"the broker at {self.broker} is back after {(now_ms - lost_since) / 1000:.1f} s"

    def defer_report(self, reason: str, now_ms: int) -> bool:
        """A connected stream ended ambiguously (rule 5). True: reconnect at once,
        reporting nothing; a failure of that attempt is reported with this reason.
        False (the broker is lost already, or one was deferred within
        backoff_max_ms): treat it as any failure (`process_failure`)."""
        if self.lost or (self._deferred_ms is not None and
                         now_ms - self._deferred_ms < self.policy.backoff_max_ms):
            return False
        self._deferred, self._deferred_ms = reason, now_ms
        return True

    def process_failure(self, reason: str, never_reached: bool,
                        now_ms: int) -> tuple[int, str | None]:
        """An attempt failed in a way worth a retry.

        Args:
            reason: what went wrong, in a user's words.
            never_reached: the call did not reach a broker (see
                errors.connection_failure); otherwise the broker was there.
        Returns:
            (milliseconds to wait before the next attempt, message to report
            now or None).
        Raises:
            Unavailable: the first connection failed for connect_timeout_ms,
                or a lost broker did not come back within retry_timeout_ms.
        """
        if self._deferred is not None:  # the attempt after an ambiguous end failed too
            reason, never_reached, self._deferred = self._deferred, False, None
        delay_ms = self._next_delay()
        refused, self._refused = self._refused, None
        self._refused_since_ms = None
        if refused is not None:  # the refusal was the last word: gone since (rule 7)
            self.lost_since_ms = self.lost_since_ms if self.lost_since_ms is not None else now_ms
            return delay_ms, f"lost the broker at {self.broker} ({reason}); {self._plan()}"
        if not self.ever_connected and never_reached:
            if self._first_failure_ms is None:
                self._first_failure_ms = now_ms
            limit = self.policy.connect_timeout_ms
            if not limit:
                return delay_ms, None
            left_ms = self._first_failure_ms + limit - now_ms
            if left_ms <= 0:  # the attempt at the deadline failed too
                raise errors.unreachable(self.broker, reason)
            return min(delay_ms, left_ms), None  # the last wait ends at the deadline
        self.ever_connected = True
        message = None
        if self.lost_since_ms is None:
            self.lost_since_ms = now_ms
            message = f"lost the broker at {self.broker} ({reason}); {self._plan()}"
        limit = self.policy.retry_timeout_ms
        if not limit:
            return delay_ms, message
        left_ms = self.lost_since_ms + limit - now_ms
        if left_ms <= 0 and message is None:  # the attempt at the deadline failed too
            raise errors.Unavailable(
                f"lost the broker at {self.broker} ({reason}) and it did not come back "
                f"within {limit / 1000:g} s (retry_timeout_ms={limit})", errors.UNAVAILABLE)
        return min(delay_ms, max(left_ms, 0)), message  # the last wait ends at the deadline

    def process_refusal(self, error: errors.KeybusError, now_ms: int,
                        settling: bool = False) -> tuple[int, str | None]:
        """The broker answered a reconnect and refused it for now (rule 7).

        Args:
            error: the broker's answer (its message is the reason reported).
            settling: the refusal may be the broker still holding this client's
                previous stream: reported only once it lasts backoff_max_ms.
        Returns:
            (milliseconds to wait before the next attempt, message to report
            now or None).
        Raises:
            KeybusError: of the refusal's kind, once refusals (and the outage
                before them) passed retry_timeout_ms.
        """
        self._deferred = None  # the broker answered: it is there
        self.ever_connected = True
        delay_ms = self._next_delay()
        if self._refused_since_ms is None:
            self._refused_since_ms = now_ms
        reason = error.message
        limit = self.policy.retry_timeout_ms
        began_ms = self.lost_since_ms if self.lost_since_ms is not None else self._refused_since_ms
        if limit:  # as a lost broker (rule 4): the last wait ends at the deadline
            delay_ms = min(delay_ms, max(began_ms + limit - now_ms, 0))
        if limit and now_ms - began_ms >= limit:  # the attempt at the deadline was refused too
            failed = type(error)(
                f"the broker at {self.broker} refused the reconnect for "
                f"{(now_ms - self._refused_since_ms) / 1000:.1f} s, and retry_timeout_ms={limit} "
                f"ran out: {reason}", error.code)
            failed.broker_error = error.broker_error
            raise failed
        if reason == self._refused or (
                settling and now_ms - self._refused_since_ms < self.policy.backoff_max_ms):
            return delay_ms, None
        self._refused = reason
        return delay_ms, f"the broker at {self.broker} refuses the reconnect: {reason}; " \
                         f"{self._plan()}"

    def _next_delay(self) -> int:
        delay_ms = self._backoff_ms
        self._backoff_ms = min(self._backoff_ms * 2, self.policy.backoff_max_ms)
        return delay_ms

    def _plan(self) -> str:
        limit = self.policy.retry_timeout_ms
        return f"retrying for up to {limit / 1000:g} s" if limit else "retrying"


# A refusal of a reconnect by these broker errors (broker/errors.py) ends the client:
# the subscription now differs from what it asks (deleted and made again meanwhile with
# another type or setting, or its dead letters would close a cycle), which no retry
# changes. Other refusals depend on other consumers or on leadership, which move.
ENDS_CLIENT = frozenset({"subscription_type_mismatch", "subscription_setting_mismatch",
                         "dead_letter_cycle"})
# A read the broker answers UNAVAILABLE with these errors is refused for now, not lost
# (rule 7): its compacted view is being loaded or folded again, and will be served.
VIEW_NOT_READY = frozenset({"view_loading", "view_rebuilding"})
# ... and with these, refused for good: a view that lacks keys is never served as whole,
# whatever the retries (the message says what to do instead).
ENDS_READ = frozenset({"view_incomplete"})
# Codes of a broker that is there and refuses for now (rule 7).
_REFUSED = frozenset({errors.FAILED_PRECONDITION, errors.ALREADY_EXISTS,
                      errors.RESOURCE_EXHAUSTED})


def refused_for_now(error: errors.KeybusError) -> bool:
    """Whether a reconnect's refusal is retried (rule 7) rather than the client's end."""
    return error.code in _REFUSED and error.broker_error not in ENDS_CLIENT


def failure_of(error: grpc.RpcError) -> tuple[str, bool]:
    """(reason in a user's words, whether the call never reached a broker)."""
    details_fn = getattr(error, "details", None)
    details = (details_fn() or "") if callable(details_fn) else ""
    never = errors.connection_failure(details)
    if never is not None:
        return never, True
    silent = unanswered_ping(details)
    if silent is not None:
        return silent, False
    lowered = details.lower()
    if not details or any(text in lowered for text in _CLOSED):
        return "connection closed", False
    return details.split("; ")[0], False


def reauthenticates(error: grpc.RpcError) -> bool:
    """Whether an open stream's end asks for a new call with credentials read
    anew (rule 6): the broker ended it because its token expired. Only for a
    stream that was open: the same status at open is the client's error."""
    code_fn = getattr(error, "code", None)
    return callable(code_fn) and code_fn() == grpc.StatusCode.UNAUTHENTICATED


def ended_on_write(error: grpc.RpcError) -> bool:
    """Whether grpcio ended the stream because a request's write failed (INTERNAL,
    "Internal error from Core"): the call had ended already, by the broker's status
    (which grpcio then drops) or by a broken connection. See rule 5."""
    code_fn, details_fn = getattr(error, "code", None), getattr(error, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = (details_fn() or "") if callable(details_fn) else ""
    return code == grpc.StatusCode.INTERNAL and "internal error from core" in details.lower()


# gRPC's texts for an open connection that ended (the broker stopped or went away);
# "internal error from core" is grpcio's for a write on a stream whose connection broke.
_CLOSED = ("socket closed", "cancelling all calls", "connection reset", "broken pipe", "goaway",
           "stream removed", "rst_stream", "internal error from core")
