"""Streamed responses are written here, so a client that went away ends its call quietly.

grpc.aio runs a handler that is an async generator by writing each response
itself. When the client is gone (it cancelled, a consumer was killed, the
connection dropped), that write fails with gRPC's `ExecuteBatchError`, and
unless gRPC has already noticed the client close (a race it mostly loses
while responses are flowing), it logs ERROR with a traceback: "ExecuteBatchError
raised in core by servicer method [/keybus.v1.Keybus/Subscribe]". A client
going away is normal, so this interceptor, the outermost, turns every such
handler into a coroutine handler (gRPC's reader/writer form) that writes the
responses itself. A failed write ends the call the way gRPC ends a cancelled
one: the generator is closed at once (its `finally` blocks run: a consumer is
detached, a bootstrap slot is given back) and `CancelledError` ends the
handler, which gRPC logs at DEBUG. There is nobody left to send a status to.

The broker can also end an open stream from outside it (`end_stream`: its
token expired, its grant was revoked; rpc/stream_rights.py): the call's task
is cancelled, wherever it waits (in the servicer, or in a write here), every
`finally` runs as on a client cancel, and the status recorded for the task is
then sent here. A task cancelled without a status would leave the client
waiting on a stream that sends nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import grpc
from grpc._cython import cygrpc

from broker.errors import BrokerError
from broker.rpc.status import abort

log = logging.getLogger("keybus.rpc")

# What a write to a finished call raises (grpc.aio's own type, not exported by
# `grpc`; gRPC's server catches it by this name too).
WRITE_FAILED: type[Exception] = cygrpc.ExecuteBatchError

Responses = Callable[[Any, grpc.aio.ServicerContext], AsyncGenerator[Any, None]]

# Calls the broker ended from outside, by their task: the status to send.
_ENDED: weakref.WeakKeyDictionary[asyncio.Task[Any], BrokerError] = weakref.WeakKeyDictionary()


def end_stream(task: asyncio.Task[Any], error: BrokerError) -> None:
    """End a streaming call (its task) with `error`'s status."""
    if not task.done():
        _ENDED[task] = error
        task.cancel()


async def _send_end_status(context: grpc.aio.ServicerContext) -> None:
    """After a cancel: send the status `end_stream` recorded, or stay cancelled."""
    task = asyncio.current_task()
    error = _ENDED.pop(task, None) if task is not None else None
    if error is None:
        raise asyncio.CancelledError()
    assert task is not None
    task.uncancel()
    await abort(context, error)


def written_by_us(method: str, responses: Responses
                  ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]:
    """A coroutine handler that writes what `responses` yields."""
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> None:
        stream = responses(request, context)
        try:
            async with contextlib.aclosing(stream):
                async for response in stream:
                    try:
                        await context.write(response)
                    except WRITE_FAILED:
                        log.debug("%s: the client went away; its stream ends", method)
                        raise asyncio.CancelledError() from None
        except asyncio.CancelledError:
            await _send_end_status(context)
    return handler


class StreamWriteInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Applies `written_by_us` to every streaming handler that is an async
    generator, of any service (it must be the first interceptor: the outermost)."""

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        kind = "stream_stream" if handler.request_streaming else "unary_stream"
        responses = getattr(handler, kind)
        if not inspect.isasyncgenfunction(responses):  # writes itself (e.g. health's Watch)
            return handler
        return handler._replace(**{kind: written_by_us(handler_call_details.method, responses)})
