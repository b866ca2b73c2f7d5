"""The consumer's thin shell over the link rules of sdk/reconnect.py.

Decides, for a Subscribe open that failed or a stream that ended, whether
the consumer waits and tries again (a lost broker: rule 2; a reconnect the
broker refuses for now: rule 7) or ends with the broker's error; reports
through the consumer's `on_connection_change` and sleeps the delays. The
rules themselves are pure (`Link`, `refused_for_now`); this module only
reads the gRPC error, keeps the clock and waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import retry_wait
from sdk.reconnect import Link, RetryPolicy, failure_of, refused_for_now

# An open stream (or a first open) that ended so may have lost its broker: retried.
RETRIABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                       grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                       grpc.StatusCode.DEADLINE_EXCEEDED})

# report(connected, message): the consumer runs its on_connection_change with them.
Report = Callable[[bool, str], Any]


class ConsumerLink:
    """One consumer's link to its broker: the `Link` state, the clock and the waits."""

    def __init__(self, broker: str, topic: str, policy: RetryPolicy, reconnect: bool,
                 channel: grpc.aio.Channel | None, report: Report) -> None:
        """Args: reconnect: the consumer's setting (False: every failure ends it).
        channel: the consumer's own channel, for `retry_wait` (None: sleep)."""
        self.broker = broker
        self.topic = topic
        self.reconnect = reconnect
        self.link = Link(broker, policy)
        self._channel = channel
        self._report = report

    def use_channel(self, channel: grpc.aio.Channel | None) -> None:
        """The consumer opened a new channel (a rotated client certificate)."""
        self._channel = channel

    def connected(self) -> None:
        """A stream opened: report the return (or the refusal's end) if one was told."""
        message = self.link.process_connected(_now_ms())
        if message is not None:
            self._report(True, message)

    async def open_failed(self, error: grpc.aio.AioRpcError, reconnecting: bool) -> None:
        """A Subscribe open failed: wait for the next attempt, or raise.

        Before the first attempt succeeded only UNAVAILABLE is retried (bounded by
        connect_timeout_ms); anything else is the caller's error, at once. On a
        reconnect, a broker that answered and refused for now (another consumer on
        the Exclusive subscription, its consumer limit, not the leader; a consumer
        name still held by this consumer's previous stream) is retried and reported
        with its reason (sdk/reconnect.py, rule 7).

        Raises:
            KeybusError: the broker's error (a topic gone while away: "topic 'T'
                was deleted"; a broker reported lost is reported back first, as the
                Reader does), or Unavailable / the refusal past the time limits.
        """
        code = error.code()
        if self.reconnect and code in RETRIABLE and \
                (reconnecting or code == grpc.StatusCode.UNAVAILABLE):
            await self.wait_to_retry(*failure_of(error))
            return
        mapped = errors.from_rpc_error(error, self.broker)
        if reconnecting and self.reconnect and refused_for_now(mapped):
            # ALREADY_EXISTS is our own name: the broker may not yet have seen the old stream go
            settling = mapped.code == errors.ALREADY_EXISTS
            delay_ms, message = self.link.process_refusal(mapped, _now_ms(), settling)
            if message is not None:
                self._report(False, message)
            await retry_wait(self._channel, delay_ms)
            return
        if reconnecting:  # it was attached: a topic gone since was deleted
            mapped = errors.deleted_if_gone(mapped, self.topic)
            if self.link.lost and not self.link.refused:  # it answered: say it is back first
                self.connected()
        raise mapped from None

    def defer_report(self, error: grpc.RpcError) -> bool:
        """A connected stream ended on a failed write (rule 5): True = reconnect at once."""
        return self.link.defer_report(failure_of(error)[0], _now_ms())

    async def retry_after(self, error: grpc.RpcError) -> None:
        """Wait before the next attempt; report a lost broker once.

        Raises:
            Unavailable: past connect_timeout_ms or retry_timeout_ms.
        """
        await self.wait_to_retry(*failure_of(error))

    async def wait_to_retry(self, reason: str, never_reached: bool) -> None:
        delay_ms, message = self.link.process_failure(reason, never_reached, _now_ms())
        if message is not None:
            self._report(False, message)
        await retry_wait(self._channel, delay_ms)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
