"""Authentication and authorization of every Keybus call: a server interceptor.

Installed only when authentication is on (server.py). For each call it
authenticates once (bearer token in the `authorization` metadata, or the
client certificate's common name; `security/providers.py`): no credentials
or bad ones -> UNAUTHENTICATED before any request is read. Then each request
is checked against the RPC's rule (`security/permissions.py`): a call
without the right gets PERMISSION_DENIED naming the principal, the topic and
the permission, and reaches no servicer, so it changes nothing. On Produce
every request is checked (each names its topic) and a refused one is
answered in the stream; on Subscribe the `open` message is checked.

Health checks and reflection are not Keybus methods and stay open. The
principal of the current call is in `current_principal` for servicers that
need it (WhoAmI).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from broker.errors import BrokerError
from broker.rpc.guard import ANSWERED_IN_STREAM, SERVICE_PREFIX, Refused, method_name
from broker.security.permissions import AccessTable, Rule, decide, rule_for
from broker.security.providers import (
    AuthenticationError,
    Authenticator,
    Credentials,
    bearer_token,
)
from sdk.core.pb import keybus_pb2 as pb

current_principal: contextvars.ContextVar[str] = contextvars.ContextVar(
    "keybus_principal", default="")


def certificate_name(context: grpc.aio.ServicerContext) -> str:
    names: list[bytes] = context.auth_context().get("x509_common_name") or [b""]
    return names[0].decode(errors="replace")


class CallCheck:
    """The checks of one call: who it is, and whether a request is allowed."""

    def __init__(self, name: str, rule: Rule, table: AccessTable, principal: str) -> None:
        self.name = name
        self.rule = rule
        self.table = table
        self.principal = principal

    def denial(self, request: Any) -> BrokerError | None:
        if isinstance(request, Refused):
            return None  # the guard answers it
        denied = decide(self.table, self.principal, self.rule, request)
        return None if denied is None else BrokerError("permission_denied",
                                                       detail=denied.message(self.name))

    async def requests(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """A stream's requests, each checked; a denied one is answered in the
        stream (Produce) or ends the call."""
        async for request in requests:
            error = self.denial(request)
            if error is None:
                yield request
            elif self.name in ANSWERED_IN_STREAM:
                yield Refused(error, request)
            else:
                raise error

    def filtered(self, response: Any) -> Any:
        """ListTopics shows only the topics the caller holds a permission on."""
        if self.name == "ListTopics" and not self.table.is_superuser(self.principal):
            visible = [t for t in response.topics if self.table.visible(self.principal, t.topic)]
            return pb.ListTopicsResponse(topics=visible)
        return response


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Authenticates every Keybus call and authorizes each request."""

    def __init__(self, authenticator: Authenticator, table: AccessTable) -> None:
        self.authenticator = authenticator
        self.table = table

    def _check(self, name: str, token: str, context: grpc.aio.ServicerContext) -> CallCheck:
        cert_name = certificate_name(context) if self.authenticator.certificate_principal else ""
        try:
            principal = self.authenticator.authenticate(Credentials(token, cert_name), time.time())
        except AuthenticationError as e:
            raise BrokerError("unauthenticated", detail=f"{name}: {e}") from None
        current_principal.set(principal)
        return CallCheck(name, rule_for(name), self.table, principal)

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(SERVICE_PREFIX):
            return handler
        token = bearer_token(handler_call_details.invocation_metadata)
        name = method_name(method)
        if handler.request_streaming and handler.response_streaming:
            return handler._replace(
                stream_stream=self._bidi(name, token, handler.stream_stream))
        if handler.request_streaming:
            return handler._replace(
                stream_unary=self._client_stream(name, token, handler.stream_unary))
        if handler.response_streaming:
            return handler._replace(
                unary_stream=self._server_stream(name, token, handler.unary_stream))
        return handler._replace(
            unary_unary=self._unary(name, token, handler.unary_unary))

    def _unary(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                check = self._check(name, token, context)
                error = check.denial(request)
            except BrokerError as e:
                error = e
            if error is not None:
                await context.abort(error.code, error.message)
            return check.filtered(await inner(request, context))
        return behavior

    def _server_stream(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                error = self._check(name, token, context).denial(request)
            except BrokerError as e:
                error = e
            if error is not None:
                await context.abort(error.code, error.message)
            async for response in inner(request, context):
                yield response
        return behavior

    def _bidi(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[Any]:
            try:
                check = self._check(name, token, context)
            except BrokerError as e:
                await context.abort(e.code, e.message)
            async for response in inner(check.requests(requests), context):
                yield response
        return behavior

    def _client_stream(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            try:
                check = self._check(name, token, context)
            except BrokerError as e:
                await context.abort(e.code, e.message)
            return await inner(check.requests(requests), context)
        return behavior
