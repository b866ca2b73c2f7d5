"""A server-streaming gRPC call that opens itself again after a failure worth a retry.

Readers (log reads and bootstraps) keep their position themselves and build
the request for each attempt, so a reopened call continues where the last
one stopped. Following: retries never stop (capped backoff); otherwise they
stop after retry_timeout_ms and the error is raised as a KeybusError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from sdk import errors

# Stream failures worth a reconnect (a restarting broker shows as these).
RETRIABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                   grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


class RetryingCall:
    """Messages of a call opened by `open_call()`, reopened after retriable failures.

    Args:
        open_call: starts the call (builds the request for this attempt).
        follow: retry forever; else give up after retry_timeout_ms.
        retry_timeout_ms, backoff_ms, backoff_max_ms: as Reader's.
    """

    def __init__(self, open_call: Callable[[], Any], follow: bool, retry_timeout_ms: int,
                 backoff_ms: int, backoff_max_ms: int,
                 prepare: Callable[[], Awaitable[None]] | None = None) -> None:
        self._open = open_call
        # Awaited before each open (several brokers: find the leader); an
        # Unavailable from it is retried like a broken call.
        self._prepare = prepare
        self._follow = follow
        self._retry_timeout_ms = retry_timeout_ms
        self._backoff = (backoff_ms, backoff_max_ms)
        self._call: Any = None
        self.reconnects = 0  # calls opened again after a failure

    async def read(self) -> Any:
        """The next message; None when the call ended normally.

        Raises:
            KeybusError: a failure not worth a retry, or retries ran out.
        """
        backoff_ms, backoff_max_ms = self._backoff
        waited_ms = 0
        while True:
            try:
                if self._call is None:
                    if self._prepare is not None:
                        await self._prepare()
                    self._call = self._open()
                message = await self._call.read()
            except (grpc.RpcError, errors.Unavailable) as e:
                self._call = None
                retriable = isinstance(e, errors.Unavailable) or e.code() in RETRIABLE_CODES
                if not retriable or (not self._follow and waited_ms >= self._retry_timeout_ms):
                    if isinstance(e, errors.KeybusError):
                        raise
                    raise errors.from_rpc_error(e) from None
                self.reconnects += 1
                await asyncio.sleep(backoff_ms / 1000)
                waited_ms += backoff_ms
                backoff_ms = min(backoff_ms * 2, backoff_max_ms)
                continue
            if message is grpc.aio.EOF:
                self._call = None
                return None
            return message

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
