"""broker/rpc/subscribe_servicer.py: a consumer's stream that ends on its side is logged.

Goal: one INFO line names the consumer and the events it held whenever its
Subscribe stream ends other than by the broker's refusal. A connection gRPC
closed (a frozen consumer that missed the keepalive pings) often ends the
request stream as a half-close does, before the servicer is cancelled; a
line logged only on cancellation missed those. A refusal logs no such line
(its status says what was wrong). Method: the servicer over a fake manager
and request streams that end or are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc
import grpc.aio
import pytest

from broker.rpc.subscribe_servicer import SubscribeServicer
from broker.subscription.consumer_state import ConsumerSpec, Session
from sdk.core.pb import keybus_pb2 as pb

GONE = "consumer 'c' of subscription 's' on topic 't' is gone"


class FakeManager:
    """Attaches one session; holds 3 unacknowledged events when it detaches."""

    def __init__(self) -> None:
        self.detached: list[str] = []

    async def attach(self, request: pb.SubscribeOpen) -> Session:
        spec = ConsumerSpec(request.consumer_name, 0, (), 0, 0, (0,))
        return Session(spec, request.topic, request.subscription, outbox_max=8)

    def spec_of(self, session: Session) -> Any:
        return SimpleNamespace(type=pb.SHARED, mode=pb.CONSISTENT)

    def grant(self, session: Session, permits: pb.Permits) -> None:
        pass

    def detach(self, session: Session) -> int:
        self.detached.append(session.name)
        return 3


class FakeContext:
    def __init__(self) -> None:
        self.aborted: grpc.StatusCode | None = None

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: object = ()
                    ) -> None:
        self.aborted = code
        raise grpc.aio.AbortError()  # as grpcio's: abort never returns


async def _requests(*bodies: pb.SubscribeRequest) -> AsyncIterator[pb.SubscribeRequest]:
    for body in bodies:
        yield body
        await asyncio.sleep(0)


OPEN = pb.SubscribeRequest(open=pb.SubscribeOpen(topic="t", subscription="s",
                                                 consumer_name="c"))


def _run(requests: AsyncIterator[pb.SubscribeRequest]) -> tuple[FakeManager, FakeContext]:
    manager, context = FakeManager(), FakeContext()

    async def go() -> None:
        servicer = SubscribeServicer(manager)  # type: ignore[arg-type]
        with contextlib.suppress(grpc.aio.AbortError):
            async for _ in servicer.Subscribe(requests, context):  # type: ignore[arg-type]
                pass
    asyncio.run(asyncio.wait_for(go(), 5))
    return manager, context


def test_a_request_stream_ended_before_any_cancel_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "keybus.subscribe")
    permits = pb.SubscribeRequest(permits=pb.Permits(partition=0, count=10))
    manager, context = _run(_requests(OPEN, permits))  # then EOF, as a closed connection
    assert manager.detached == ["c"] and context.aborted is None
    lines = [r.getMessage() for r in caplog.records if r.name == "keybus.subscribe"]
    assert len(lines) == 1 and lines[0].startswith(GONE), lines
    assert "3 unacknowledged events go back for redelivery" in lines[0]


def test_a_refused_stream_logs_no_gone_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "keybus.subscribe")
    manager, context = _run(_requests(OPEN, OPEN))  # a second open is refused
    assert manager.detached == ["c"]
    assert context.aborted == grpc.StatusCode.INVALID_ARGUMENT
    assert not [r for r in caplog.records if GONE in r.getMessage()]


def test_a_stream_grpc_cancels_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "keybus.subscribe")
    manager = FakeManager()

    async def open_then_wait() -> AsyncIterator[pb.SubscribeRequest]:
        yield OPEN
        await asyncio.Event().wait()  # the consumer says nothing more
        yield OPEN  # never reached

    async def go() -> None:
        stream = SubscribeServicer(manager).Subscribe(  # type: ignore[arg-type]
            open_then_wait(), FakeContext())  # type: ignore[arg-type]

        async def drain() -> None:
            async for _ in stream:
                pass
        task = asyncio.get_running_loop().create_task(drain())
        await asyncio.sleep(0.05)
        task.cancel()  # as gRPC cancels the call's task
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert manager.detached == ["c"]
    asyncio.run(asyncio.wait_for(go(), 5))
    assert [r for r in caplog.records if r.getMessage().startswith(GONE)]


def test_a_stream_whose_requests_end_aborted_still_detaches_its_consumer() -> None:
    """A read of a call the broker aborted (its token expired: rpc/stream_rights.py)
    raises grpcio's AbortError. The pump let it escape, and the servicer's cleanup
    re-raised it from `await pump` before it detached the session: the consumer
    stayed attached, and its reconnect was refused ("already attached") for good."""
    manager = FakeManager()

    async def open_then_aborted() -> AsyncIterator[pb.SubscribeRequest]:
        yield OPEN
        await asyncio.sleep(0)
        raise grpc.aio.AbortError()

    async def go() -> None:
        stream = SubscribeServicer(manager).Subscribe(  # type: ignore[arg-type]
            open_then_aborted(), FakeContext())  # type: ignore[arg-type]

        async def drain() -> None:
            async for _ in stream:
                pass
        task = asyncio.get_running_loop().create_task(drain())
        await asyncio.sleep(0.05)
        task.cancel()  # as gRPC cancels an aborted call's task
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AbortError):
            await task
        assert manager.detached == ["c"]
    asyncio.run(asyncio.wait_for(go(), 5))
