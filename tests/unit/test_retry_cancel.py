"""Stopping a client that is retrying: its task ends, whatever gRPC makes of the cancel.

Goal: a Consumer reconnecting to a lost broker, and a RetryingCall (Reader,
bootstrap) retrying a broken stream, end when their task is cancelled
(close()), even when gRPC hands the cancel back as a CANCELLED status
instead of CancelledError — which a retry loop would otherwise take for a
lost broker and retry forever, so that close() never returned (seen under
load in tests/integration/test_broker_shutdown.py).
Method: a small fake call whose read() waits, and on a cancel answers
AioRpcError(CANCELLED) as gRPC's aio call can; the real Consumer and
RetryingCall code around it; bounded waits.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio

from sdk.consumer import Consumer
from sdk.retrying_call import RetryingCall

BOUND_S = 5.0
ATTEMPTS_MAX = 1  # the one call that is cancelled; a second is a retry


class CancelledAsStatusCall:
    """A stream call that never answers; a cancel comes back as CANCELLED."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()

    async def read(self) -> Any:
        self.opened.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            raise grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, grpc.aio.Metadata(),
                                       grpc.aio.Metadata(), "Locally cancelled by application!"
                                       ) from None

    def cancel(self) -> bool:
        return True


class FakeStub:
    def __init__(self) -> None:
        self.calls: list[CancelledAsStatusCall] = []

    def Subscribe(self, requests: Any) -> CancelledAsStatusCall:
        return _next_call(self.calls)


def _next_call(calls: list[CancelledAsStatusCall]) -> CancelledAsStatusCall:
    if len(calls) >= ATTEMPTS_MAX:  # retried on after the cancel: end the test's task
        raise RuntimeError(f"{len(calls)} attempts: the cancel was taken for a lost broker")
    calls.append(CancelledAsStatusCall())
    return calls[-1]


async def _cancel_and_wait(task: asyncio.Task[Any], opened: asyncio.Event) -> None:
    await asyncio.wait_for(opened.wait(), BOUND_S)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    assert task in done, "the task took its cancel for a lost broker and retried on"
    assert task.cancelled()


def test_a_reconnecting_consumer_ends_when_closed() -> None:
    async def go() -> None:
        consumer = Consumer("127.0.0.1:1", "t", "s", retry_backoff_ms=1, retry_backoff_max_ms=2)
        stub = FakeStub()
        consumer._conn.stub = stub  # type: ignore[assignment]
        consumer._link.ever_connected = True  # it was attached, then lost its broker
        task = asyncio.create_task(consumer._connect(reconnecting=True))
        while not stub.calls:
            await asyncio.sleep(0.001)
        consumer._closed = True  # as close() does before it cancels the task
        await _cancel_and_wait(task, stub.calls[0].opened)
        assert len(stub.calls) == 1  # no new attempt after the cancel
        await consumer._conn.close()
    asyncio.run(go())


def test_a_retrying_call_ends_when_cancelled() -> None:
    calls: list[CancelledAsStatusCall] = []

    def open_call() -> CancelledAsStatusCall:
        return _next_call(calls)

    async def go() -> None:
        stream = RetryingCall(open_call, True, None, 1, 2)
        task = asyncio.create_task(stream.read())
        while not calls:
            await asyncio.sleep(0.001)
        await _cancel_and_wait(task, calls[0].opened)
        assert len(calls) == 1
    asyncio.run(go())
