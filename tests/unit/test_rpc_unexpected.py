"""A method's unexpected failure is answered with a status that says so.

Goal: a bug or a failed store call in a servicer method (not a BrokerError) is
answered `INTERNAL` "`<method>` failed on the broker on an unexpected error
(<cause>) ...", with the error's name (`call_failed`) in the trailing metadata,
and logged once with its trace; before, grpcio answered UNKNOWN "Unexpected
<class 'RuntimeError'>: ..." (a seek whose write failed did). A BrokerError
keeps its own status, and an abort passes through.
Method: the status wrappers around small methods, with a context that records
the abort (unit: no server).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from broker.errors import BrokerError
from broker.rpc.status import streaming, unary
from sdk.core.error_names import ERROR_NAME_KEY
from sdk.core.pb import keybus_pb2 as pb


class Aborted(grpc.aio.AbortError):  # type: ignore[misc]
    pass


class Context:
    def __init__(self) -> None:
        self.status: tuple[grpc.StatusCode, str, Any] | None = None

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Any = ()) -> None:
        self.status = (code, details, trailing_metadata)
        raise Aborted()


class Servicer:
    @unary
    async def CreateTopic(self, request: Any, context: Any) -> Any:
        raise RuntimeError("IO error: No space left on device")

    @unary
    async def DeleteTopic(self, request: Any, context: Any) -> Any:
        raise BrokerError("topic_not_found", topic="t")

    @streaming
    async def Read(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield pb.ReadResponse()
        raise KeyError("partitions")

    @streaming
    async def Bootstrap(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield pb.ReadResponse()
        raise BrokerError("topic_not_found", topic="t")

    @unary
    async def DescribeTopic(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the method's own")

    @streaming
    async def Subscribe(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield pb.ReadResponse()
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the method's own")


def _call(method: Any, request: Any) -> Context:
    context = Context()

    async def go() -> None:
        with pytest.raises(Aborted):
            result = method(Servicer(), request, context)
            if hasattr(result, "__aiter__"):
                async for _ in result:
                    pass
            else:
                await result
    asyncio.run(go())
    return context


def test_an_unexpected_error_is_internal_naming_the_method_and_cause(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="keybus.rpc"):
        context = _call(Servicer.CreateTopic, pb.CreateTopicRequest(topic="t"))
    assert context.status is not None
    code, details, metadata = context.status
    assert code == grpc.StatusCode.INTERNAL
    assert details.startswith("CreateTopic failed on the broker on an unexpected error "
                              "(RuntimeError: IO error: No space left on device)")
    assert (ERROR_NAME_KEY, "call_failed") in metadata
    assert [r.exc_info is not None for r in caplog.records] == [True]


def test_a_stream_that_fails_midway_says_so_too() -> None:
    context = _call(Servicer.Read, pb.ReadRequest(topic="t"))
    assert context.status is not None
    assert context.status[0] == grpc.StatusCode.INTERNAL
    assert context.status[1].startswith("Read failed on the broker")


def test_a_broker_error_keeps_its_status() -> None:
    context = _call(Servicer.DeleteTopic, pb.DeleteTopicRequest(topic="t"))
    assert context.status is not None
    assert context.status[0] == grpc.StatusCode.NOT_FOUND
    assert (ERROR_NAME_KEY, "topic_not_found") in context.status[2]


def test_a_broker_error_midway_through_a_stream_keeps_its_status() -> None:
    context = _call(Servicer.Bootstrap, pb.ReadRequest(topic="t"))
    assert context.status is not None
    assert context.status[0] == grpc.StatusCode.NOT_FOUND
    assert (ERROR_NAME_KEY, "topic_not_found") in context.status[2]


@pytest.mark.parametrize("method", [Servicer.DescribeTopic, Servicer.Subscribe])
def test_an_abort_by_the_method_itself_passes_through(
        method: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="keybus.rpc"):
        context = _call(method, pb.ReadRequest(topic="t"))
    assert context.status == (grpc.StatusCode.FAILED_PRECONDITION, "the method's own", ())
    assert caplog.records == []
