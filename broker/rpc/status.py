"""Error -> gRPC status, written once for every method.

`BrokerError` carries its status code and message from the catalogue. A
request that carries fields this broker does not know (a newer client's
option) is refused rather than silently ignored.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from broker.errors import BrokerError
from broker.supervision import describe_cause
from sdk.core.error_names import ERROR_NAME_KEY

log = logging.getLogger("keybus.rpc")
R = TypeVar("R")


def refuse_unknown_fields(message: Message) -> None:
    """Raise if the message, or a message field set in it, has unknown fields."""
    unknown = UnknownFieldSet(message)
    if len(unknown):
        descriptor = message.DESCRIPTOR
        raise BrokerError("unknown_field", message=descriptor.name,
                          number=unknown[0].field_number,
                          allowed=", ".join(descriptor.fields_by_name))
    for name in _singular_message_fields(message.DESCRIPTOR):
        if message.HasField(name):
            refuse_unknown_fields(getattr(message, name))


@functools.cache
def _singular_message_fields(descriptor: Descriptor) -> tuple[str, ...]:
    """The fields of a message type that hold one message (found once per type:
    `ListFields` would build a tuple for every set column of every request)."""
    return tuple(field.name for field in descriptor.fields
                 if field.message_type is not None and not field.is_repeated)


async def abort(context: grpc.aio.ServicerContext, error: BrokerError) -> NoReturn:
    """End the call with the error's status, its name in the trailing metadata
    (sdk/core/error_names.py: clients tell errors of one code apart by it)."""
    await context.abort(error.code, error.message,
                        trailing_metadata=((ERROR_NAME_KEY, error.kind.name),))
    raise AssertionError("abort returned")


def unary(method: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]
          ) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]:
    """Map BrokerError to a status for a unary method."""
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            refuse_unknown_fields(request)
            return await method(self, request, context)
        except Exception as e:
            await _end_on_failure(context, method.__name__, e)
    return wrapper


def streaming(method: Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[R]]
              ) -> Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[R]]:
    """Map BrokerError to a status for a server-streaming method."""
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[R]:
        try:
            if isinstance(request, Message):
                refuse_unknown_fields(request)
            async for item in method(self, request, context):
                yield item
        except Exception as e:
            await _end_on_failure(context, method.__name__, e)
    return wrapper


async def _end_on_failure(context: grpc.aio.ServicerContext, method: str,
                          error: Exception) -> NoReturn:
    """End a call whose method raised: a BrokerError with its own status, an abort
    the method made already passed on as it is (its status is set), anything else
    as `call_failed`. The one mapping both wrappers share, so a unary and a
    streaming method answer the same failure alike."""
    if isinstance(error, grpc.aio.AbortError):
        raise error
    if isinstance(error, BrokerError):
        await abort(context, error)
    await abort(context, _unexpected(method, error))


def _unexpected(method: str, error: Exception) -> BrokerError:
    """A method's unexpected failure (a bug, a failed store call): logged with its
    trace, answered as `call_failed` naming the method and the cause. Without this
    grpcio answered UNKNOWN "Unexpected <class ...>" and logged the trace itself."""
    log.error("%s failed on an unexpected error", method, exc_info=error)
    return BrokerError("call_failed", method=method, cause=describe_cause(error))
