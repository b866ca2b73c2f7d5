"""A gRPC client interceptor that holds back the start of every Read call.

Why: a reader at "latest" whose Read call starts late has its position fixed
late; a second's delay (far longer than producing an event takes, even on a
loaded machine) turns the race "was the start fixed before the user's next
event?" into a deterministic outcome (tests/integration/test_reader_latest.py,
test_latest_background.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc.aio

READ_START_DELAY_S = 1.0


class SlowReadStart(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Delays the start of every Read call (the window in which "latest" was unfixed)."""

    def __init__(self, delay_s: float = READ_START_DELAY_S) -> None:
        self.delay_s = delay_s

    async def intercept_unary_stream(self, continuation: Callable[..., Awaitable[Any]],
                                     client_call_details: Any, request: Any) -> Any:
        if client_call_details.method.endswith(b"/Read"):  # grpc.aio gives bytes
            await asyncio.sleep(self.delay_s)
        return await continuation(client_call_details, request)


class SlowDescribe(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Delays every DescribeTopic call: what a client that looks up its topic
    before it subscribes (a Databus Key_Shared registration) does first."""

    async def intercept_unary_unary(self, continuation: Callable[..., Awaitable[Any]],
                                    client_call_details: Any, request: Any) -> Any:
        if client_call_details.method.endswith(b"/DescribeTopic"):
            await asyncio.sleep(READ_START_DELAY_S)
        return await continuation(client_call_details, request)


def slow_read_channel(address: str, delay_s: float = READ_START_DELAY_S) -> grpc.aio.Channel:
    """A plain-text channel to `address` whose Read calls start `delay_s` late."""
    return grpc.aio.insecure_channel(address, interceptors=[SlowReadStart(delay_s)])


def slow_describe_channel(address: str) -> grpc.aio.Channel:
    """A plain-text channel to `address` whose DescribeTopic calls answer a second late."""
    return grpc.aio.insecure_channel(address, interceptors=[SlowDescribe()])
