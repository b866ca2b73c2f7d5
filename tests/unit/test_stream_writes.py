"""broker/rpc/stream_writes.py: a failed write ends a stream as a cancellation.

Goal: the handler writes what the servicer yields; when a write fails because
the client is gone, the servicer's generator is closed at once (its `finally`
runs, as a consumer's detach must) and the handler ends with CancelledError,
which gRPC logs at DEBUG, instead of the write error gRPC logs with a
traceback. Method: the handler over a small generator and a fake context
whose second write fails as gRPC's does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from broker.rpc.stream_writes import WRITE_FAILED, written_by_us


class FakeContext:
    def __init__(self, writes_ok: int) -> None:
        self.writes_ok = writes_ok
        self.written: list[Any] = []

    async def write(self, message: Any) -> None:
        if len(self.written) == self.writes_ok:
            raise WRITE_FAILED("Failed \"execute_batch\"")
        self.written.append(message)


def test_a_failed_write_closes_the_generator_and_cancels() -> None:
    ended: list[str] = []

    async def responses(request: Any, context: Any) -> AsyncGenerator[int, None]:
        try:
            for i in range(10):
                yield i
        finally:
            ended.append("finally")

    context = FakeContext(writes_ok=1)
    handler = written_by_us("/keybus.v1.Keybus/Read", responses)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(handler(None, context))  # type: ignore[arg-type]
    assert context.written == [0] and ended == ["finally"]


def test_every_response_is_written_in_order() -> None:
    async def responses(request: Any, context: Any) -> AsyncGenerator[str, None]:
        for item in ("a", "b", "c"):
            yield item

    context = FakeContext(writes_ok=10)
    asyncio.run(written_by_us("m", responses)(None, context))  # type: ignore[arg-type]
    assert context.written == ["a", "b", "c"]
