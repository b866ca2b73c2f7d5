"""Requests are decoded and size-checked before any servicer sees them.

A server interceptor wraps every Keybus method: its request deserializer
never raises (gRPC would answer UNKNOWN with a Python exception name) but
returns a `Refused` holding the status to answer:

* bytes that are not the method's protobuf message -> INVALID_ARGUMENT;
* a request over `request_bytes_max` -> RESOURCE_EXHAUSTED naming the limit
  and the size. gRPC's own receive limit sits above it (server.py), so a
  request between the two gets this clean answer and, on Produce, the
  stream stays open for the next request.

Unary requests are refused here. On streams, Produce answers a `Refused`
in the stream (it reaches the servicer, which echoes the request id when
the bytes parsed); on every other stream a `Refused` message ends the call
with its status, raised where the servicer reads its next request.

A wrapping stream closes the stream it wraps when it is closed itself
(`aclosing`): a call ended while a response was being written (a client gone,
or ended by the broker: stream_writes.py) runs the servicer's `finally` in
its own task at once, not later in a task of the garbage collector's, after
the call's status is sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from broker.errors import BrokerError
from broker.rpc.status import abort
from sdk.core.pb import keybus_pb2 as pb

SERVICE_PREFIX = "/keybus.v1.Keybus/"
# Streams that answer each request, so a refused request gets its own answer.
ANSWERED_IN_STREAM = frozenset({"Produce"})


@dataclass(frozen=True, slots=True)
class Refused:
    """A request refused before a servicer saw it. `message` is the parsed
    request when the bytes parsed (e.g. too large), so an answer can name it."""

    error: BrokerError
    message: Message | None = None


def method_name(full_method: str) -> str:
    return full_method.rsplit("/", 1)[-1]


def request_type_name(method: str) -> str:
    """The request message's name of a Keybus method (the method's name if unknown)."""
    found = pb.DESCRIPTOR.services_by_name["Keybus"].methods_by_name.get(method)
    return found.input_type.name if found is not None else method


def safe_decoder(decode: Callable[[bytes], Any], message_name: str,
                 bytes_max: int) -> Callable[[bytes], Any]:
    """A deserializer that returns a Refused instead of raising."""
    def decoder(data: bytes) -> Any:
        try:
            message = decode(data)
        except Exception as e:  # protobuf raises DecodeError, or worse on nonsense
            return Refused(BrokerError("request_undecodable", message=message_name,
                                       size=len(data), detail=str(e) or type(e).__name__))
        if len(data) > bytes_max:
            return Refused(BrokerError("request_over_limit", message=message_name,
                                       size=len(data), max=bytes_max), message)
        return message
    return decoder


async def raise_refused(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Pass a stream's requests on; raise the error of a refused one."""
    async for request in requests:
        if isinstance(request, Refused):
            raise request.error
        yield request


def _unary_request(behavior: Callable[..., Any], streaming_response: bool) -> Callable[..., Any]:
    # grpc.aio picks how to run a handler by its kind (coroutine or async
    # generator function), so each wrapper is of its handler's kind.
    if streaming_response:
        async def stream_behavior(request: Any, context: grpc.aio.ServicerContext
                                  ) -> AsyncIterator[Any]:
            if isinstance(request, Refused):
                await abort(context, request.error)
            async with contextlib.aclosing(behavior(request, context)) as responses:
                async for response in responses:
                    yield response
        return stream_behavior

    async def unary_behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Refused):
            await abort(context, request.error)
        return await behavior(request, context)
    return unary_behavior


def _stream_request(behavior: Callable[..., Any], streaming_response: bool
                    ) -> Callable[..., Any]:
    if streaming_response:
        async def bidi(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
                       ) -> AsyncIterator[Any]:
            async with contextlib.aclosing(behavior(raise_refused(requests), context)
                                           ) as responses:
                async for response in responses:
                    yield response
        return bidi

    async def client_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
                            ) -> Any:
        return await behavior(raise_refused(requests), context)
    return client_stream


def guard_handler(method: str, handler: grpc.RpcMethodHandler, bytes_max: int
                  ) -> grpc.RpcMethodHandler:
    """The handler with a safe deserializer and refusals answered as statuses."""
    name = method_name(method)
    decoder = safe_decoder(handler.request_deserializer or bytes, request_type_name(name),
                           bytes_max)
    replaced: dict[str, Any] = {"request_deserializer": decoder}
    kind = _kind(handler)
    behavior = getattr(handler, kind)
    if not handler.request_streaming:
        replaced[kind] = _unary_request(behavior, handler.response_streaming)
    elif name not in ANSWERED_IN_STREAM:
        replaced[kind] = _stream_request(behavior, handler.response_streaming)
    return handler._replace(**replaced)


def _kind(handler: grpc.RpcMethodHandler) -> str:
    return {(False, False): "unary_unary", (False, True): "unary_stream",
            (True, False): "stream_unary", (True, True): "stream_stream"}[
        (handler.request_streaming, handler.response_streaming)]


class GuardInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Applies `guard_handler` to every Keybus method."""

    def __init__(self, request_bytes_max: int) -> None:
        self.request_bytes_max = request_bytes_max

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(SERVICE_PREFIX):
            return handler
        return guard_handler(method, handler, self.request_bytes_max)
