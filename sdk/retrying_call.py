"""A server-streaming gRPC call that opens itself again after a failure worth a retry.

Readers (log reads and bootstraps) keep their position themselves and build
the request for each attempt, so a reopened call continues where the last
one stopped. How long to retry and what to tell is the link rule of
sdk/reconnect.py: a broker never reached fails within connect_timeout_ms; a
lost one is told through `on_connection_change` and retried for
retry_timeout_ms (following: forever by default), then the error is raised
as a KeybusError. A call the broker ended because its token expired is
opened again at once with credentials read anew (rule 6). With several
brokers, `prepare` finds the topic's leader before each attempt
(sdk/cluster.py); its Unavailable counts as a failed attempt. A bootstrap
the broker refuses for want of a free slot (`too_many_bootstraps`) is no lost
broker: it waits for one by the rules of sdk/slot_wait.py, said through
`on_slot_wait`. A call closed by `cancel()` (the Reader's close) is not opened
again: `read` then returns None. A reopen the broker answers with an error that
ends the read (the topic deleted, or deleted and created again) reports a lost
broker back before the error is raised: it answered.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import retry_wait
from sdk.reconnect import (
    ENDS_READ,
    VIEW_NOT_READY,
    ConnectionCallback,
    Link,
    RetryPolicy,
    failure_of,
    log_connection_change,
    reauthenticates,
)
from sdk.slot_wait import SlotWait, SlotWaitCallback, log_slot_wait, slots_taken

# Stream failures worth a reconnect (a restarting broker shows as these).
RETRIABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                   grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def retry_timeout_default_ms(follow: bool) -> int:
    """How long a lost broker is retried when the caller did not say: a following
    read forever (0), another 30 s."""
    return 0 if follow else 30_000


class RetryingCall:
    """Messages of a call opened by `open_call()`, reopened after retriable failures.

    Args:
        open_call: starts the call (builds the request for this attempt).
        follow: the default retry_timeout_ms is forever (else 30000).
        retry_timeout_ms: how long a lost broker is retried (None: by follow;
            0 = forever).
        backoff_ms, backoff_max_ms: as Reader's.
        connect_timeout_ms: how long a broker never reached is tried (0 = forever).
        broker: the address, for the messages.
        on_connection_change: told (False, message) when the broker is lost,
            (True, message) when it is back; may be a coroutine function.
        prepare: awaited before each open (several brokers: find the leader,
            within about connect_timeout_ms); its Unavailable before the first
            connection is raised (it has already waited), later it is
            retried and reported like a broken call.
        channel: the channel the calls are opened on now; a retry then waits
            for it to connect again rather than its whole backoff
            (sdk.channel.retry_wait).
        reauthenticate: awaited before a call the broker ended for its
            credentials is opened again (rule 6): the owner may open a new
            channel, for a rotated client certificate (sdk.channel.renews_channel).
    """

    def __init__(self, open_call: Callable[[], Any], follow: bool, retry_timeout_ms: int | None,
                 backoff_ms: int, backoff_max_ms: int, *, connect_timeout_ms: int = 5_000,
                 broker: str = "the broker",
                 on_connection_change: ConnectionCallback | None = None,
                 prepare: Callable[[], Awaitable[None]] | None = None,
                 channel: Callable[[], grpc.aio.Channel | None] | None = None,
                 reauthenticate: Callable[[], Awaitable[None]] | None = None,
                 topic: str = "", slot_wait: SlotWait | None = None,
                 on_slot_wait: SlotWaitCallback | None = None) -> None:
        self._open = open_call
        self._topic = topic
        self._reauthenticate = reauthenticate
        self._channel = channel or (lambda: None)
        self._prepare = prepare
        if retry_timeout_ms is None:
            retry_timeout_ms = retry_timeout_default_ms(follow)
        self._link = Link(broker, RetryPolicy(connect_timeout_ms, retry_timeout_ms, backoff_ms,
                                              backoff_max_ms))
        self._on_connection_change = on_connection_change or log_connection_change
        self._slots = slot_wait
        self._on_slot_wait = on_slot_wait or log_slot_wait
        self._closed = False  # cancel() was called: no call is opened again
        self._call: Any = None
        self._answered = False  # the open call sent a message (so it was authenticated)
        self._ever_answered = False  # some call sent a message: the topic existed then
        self.reconnects = 0  # calls opened again after a failure
        # The failure behind the last report of a lost broker, with its status code, for an
        # owner that says more than the message (a relay follower names the code).
        self.last_failure: grpc.RpcError | errors.Unavailable | None = None

    async def read(self) -> Any:
        """The next message; None when the call ended normally.

        Raises:
            KeybusError: a failure not worth a retry, or retries ran out.
        """
        while True:
            if self._closed:
                return None
            try:
                if self._call is None:
                    if self._prepare is not None:
                        await self._prepare()
                    self._call = self._open()
                    self._answered = False
                message = await self._call.read()
            except (grpc.RpcError, errors.Unavailable) as e:
                self._call = None
                if cancelling():  # a cancel gRPC turned into CANCELLED: stop, do not retry
                    raise asyncio.CancelledError from None
                if self._closed:  # closed meanwhile (another task's close()): no outage
                    return None
                if self._answered and isinstance(e, grpc.RpcError) and reauthenticates(e):
                    self.reconnects += 1  # its credentials expired: open it again now (rule 6)
                    if self._reauthenticate is not None:
                        await self._reauthenticate()
                    continue
                delay_ms = await self._after_failure(e)
                self.reconnects += 1
                await retry_wait(self._channel(), delay_ms)
                continue
            if self._link_unsettled() or (self._slots is not None and self._slots.waiting):
                await self._answered_now()  # only then: a message on a settled link awaits nothing
            self._answered = True  # the call was open: its credentials were accepted
            self._ever_answered = True
            if message is grpc.aio.EOF:
                self._call = None
                return None
            return message

    async def _after_failure(self, error: grpc.RpcError | errors.Unavailable) -> int:
        """Report a failed attempt; the delay before the next one. Raises what no
        retry mends."""
        self.last_failure = error
        refused = self._slot_refusal(error)
        if refused is not None and self._slots is not None:
            await self._link_answered()  # the broker is there: a lost one is back
            delay_ms, note = self._slots.process_refused(refused, _now_ms())
            if note is not None:
                await _call(self._on_slot_wait, True, note)
            return delay_ms
        try:
            delay_ms, note = self._process(error)
        except errors.KeybusError:
            if _ends_with_answer(error) and self._link.lost and not self._link.refused:
                # the broker's answer ends the read (the topic deleted, or made again):
                # it is back, and a user told it was lost hears that before the error
                await self._link_answered()
            raise
        if note is not None:
            await self._report(False, note)
        return delay_ms

    def _slot_refusal(self, error: grpc.RpcError | errors.Unavailable) -> errors.KeybusError | None:
        """The broker's refusal for want of a bootstrap slot, or None."""
        if not isinstance(error, grpc.RpcError) or \
                error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            return None
        answered = errors.from_rpc_error(error, self._link.broker)
        return answered if slots_taken(answered) else None

    async def _answered_now(self) -> None:
        """The call sent a message: report the end of an outage or of a slot wait."""
        await self._link_answered()
        if self._slots is not None and self._slots.waiting:
            note = self._slots.process_accepted(_now_ms())
            if note is not None:
                await _call(self._on_slot_wait, False, note)

    async def _link_answered(self) -> None:
        """The broker answered (a message or a refusal): report a lost one back."""
        if self._link_unsettled():
            note = self._link.process_connected(_now_ms())
            if note is not None:
                await self._report(True, note)

    def _link_unsettled(self) -> bool:
        """The link was lost, refused or never connected: the broker's next answer is
        news (`Link.process_connected`). On a settled link it would say nothing."""
        return self._link.lost or self._link.refused or not self._link.ever_connected

    def _process(self, error: grpc.RpcError | errors.Unavailable) -> tuple[int, str | None]:
        """(the delay before the next attempt, what to report) of a failed attempt:
        a refusal by a broker that answered (rule 7), else a lost broker; raises
        what no retry mends."""
        if isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.UNAVAILABLE:
            answered = errors.from_rpc_error(error, self._link.broker)
            if answered.broker_error in ENDS_READ:
                raise answered from None
            if answered.broker_error in VIEW_NOT_READY:
                return self._link.process_refusal(answered, _now_ms())
        reason, never_reached = self._failure(error)
        return self._link.process_failure(reason, never_reached, _now_ms())

    def _failure(self, error: grpc.RpcError | errors.Unavailable) -> tuple[str, bool]:
        """(reason, never reached) of a failure worth a retry; raises the others."""
        if isinstance(error, errors.Unavailable):  # from prepare: no leader found
            if not self._link.ever_connected and self._link.policy.connect_timeout_ms:
                raise error
            return str(error), not self._link.ever_connected
        if error.code() not in RETRIABLE_CODES:
            mapped = errors.from_rpc_error(error, self._link.broker)
            if self._ever_answered and self._topic:  # it was read: a topic gone since was deleted
                mapped = errors.deleted_if_gone(mapped, self._topic)
            raise mapped from None
        return failure_of(error)

    async def _report(self, connected: bool, message: str) -> None:
        await _call(self._on_connection_change, connected, message)

    def cancel(self) -> None:
        """Close: cancel the open call; none is opened again (`read` returns None)."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()
            self._call = None


def _ends_with_answer(error: grpc.RpcError | errors.Unavailable) -> bool:
    """Whether the failure is the broker's own answer that no retry mends (a status
    other than a lost connection's, or a view that lacks keys), not a broker away."""
    if not isinstance(error, grpc.RpcError):
        return False  # prepare's Unavailable: no broker answered
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return errors.from_rpc_error(error).broker_error in ENDS_READ
    return code not in RETRIABLE_CODES and code != grpc.StatusCode.DEADLINE_EXCEEDED


async def _call(callback: Callable[[bool, str], Any], flag: bool, message: str) -> None:
    """Run an application's callback, a plain or a coroutine function."""
    result = callback(flag, message)
    if inspect.isawaitable(result):
        await result


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def cancelling() -> bool:
    """The running task was asked to stop. A cancel that reaches a gRPC call
    while it completes can come back as a CANCELLED status instead of
    CancelledError; a retry loop must not take that for a lost broker and
    retry on, or the task never ends (close() would wait on it forever)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
