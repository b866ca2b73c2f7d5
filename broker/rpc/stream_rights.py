"""Open streams keep no right they no longer have: expiry and revocation end them.

A call is authenticated and authorized when it opens (rpc/auth.py); a
Subscribe, a following Read or a Bootstrap then stays open for days. Without
more, a stream opened with a JWT would go on after the token's `exp`, and one
whose consume grant was revoked would go on receiving (Kafka re-authenticates
connections, KIP-368; Pulsar checks credentials' expiry on open connections).
So every streaming call is registered here while it is open, and ended:

* at its token's expiry (`exp` plus `auth_jwt_leeway_ms`, the instant the
  broker would refuse the token at open): UNAUTHENTICATED, "token expired; get
  a new one". One timer per stream with an expiring token (a `call_later`
  handle in the event loop's heap: no task, no work until it fires);
* when the right it was opened with is gone (a revoked grant):
  PERMISSION_DENIED naming the principal, the topic and the permission. One
  sweep every `auth_recheck_interval_ms` over the open streams re-decides
  each stream's opening request from the decision cache (superusers and
  streams checked per request, Produce, re-decide nothing). The sweep also
  re-checks expiry against the wall clock, in case it moved past a timer.

Nothing runs per event: a delivery costs nothing more. The sweep task runs
only while streams are open. The SDK opens an ended stream again with its
credentials read anew (a rotated token file), so rotation loses nothing
(sdk/reconnect.py, rule 6).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.errors import BrokerError
from broker.rpc.stream_writes import end_stream

if TYPE_CHECKING:
    from broker.rpc.auth import CallCheck

log = logging.getLogger("keybus.security")


class OpenStream:
    """One open streaming call: its checks, its task, its expiry timer."""

    __slots__ = ("check", "task", "timer")

    def __init__(self, check: CallCheck, task: asyncio.Task[Any]) -> None:
        self.check = check
        self.task = task
        self.timer: asyncio.TimerHandle | None = None


class StreamRights:
    """The open streams of this broker and the checks that end them."""

    def __init__(self, interval_ms: int, clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_ms / 1000
        self.clock = clock
        self.streams: set[OpenStream] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def opened(self, check: CallCheck) -> OpenStream:
        """Register the calling task's stream (call from its handler)."""
        task = asyncio.current_task()
        assert task is not None, "a stream is served in a task"
        stream = OpenStream(check, task)
        self.streams.add(stream)
        if check.expires_s is not None:
            self._arm(stream)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep_loop(), name="keybus-stream-rights")
        return stream

    def closed(self, stream: OpenStream) -> None:
        self.streams.discard(stream)
        if stream.timer is not None:
            stream.timer.cancel()
            stream.timer = None

    def sweep(self) -> int:
        """Re-check every open stream now; returns how many were ended."""
        now_s = self.clock()
        ended = 0
        for stream in list(self.streams):
            error = stream.check.recheck(now_s)
            if error is not None:
                self._end(stream, error)
                ended += 1
        return ended

    def _arm(self, stream: OpenStream) -> None:
        expires_s = stream.check.expires_s
        assert expires_s is not None
        delay_s = max(0.0, expires_s - self.clock())
        stream.timer = asyncio.get_running_loop().call_later(delay_s, self._expire, stream)

    def _expire(self, stream: OpenStream) -> None:
        stream.timer = None
        if stream not in self.streams:
            return
        error = stream.check.recheck(self.clock())
        if error is None:  # the loop's clock ran ahead of the wall clock: wait the rest
            self._arm(stream)
        else:
            self._end(stream, error)

    def _end(self, stream: OpenStream, error: BrokerError) -> None:
        self.closed(stream)
        check = stream.check
        log.info("%s stream of principal %r ended: %s", check.name, check.principal,
                 error.message)
        end_stream(stream.task, error)

    async def _sweep_loop(self) -> None:
        while self.streams:
            await asyncio.sleep(self.interval_s)
            self.sweep()
