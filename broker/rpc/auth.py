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

A streaming call stays registered in `StreamRights` while it is open: it is
ended when its token expires, or when the right its opening request needed
is revoked (rpc/stream_rights.py).

Health checks and reflection are not Keybus methods and stay open. The
principal of the current call is in `current_principal` for servicers that
need it (WhoAmI).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from cryptography import x509

from broker.errors import BrokerError
from broker.rpc.guard import ANSWERED_IN_STREAM, SERVICE_PREFIX, Refused, method_name
from broker.rpc.status import abort
from broker.rpc.stream_rights import StreamRights
from broker.security.permissions import AccessTable, Rule, decide, rule_for
from broker.security.providers import (
    TOKEN_EXPIRED,
    AuthenticationError,
    Authenticator,
    Credentials,
    Identity,
    bearer_token,
)
from sdk.core.pb import keybus_pb2 as pb

current_principal: contextvars.ContextVar[str] = contextvars.ContextVar(
    "keybus_principal", default="")


def certificate_name(context: grpc.aio.ServicerContext) -> str:
    names: list[bytes] = context.auth_context().get("x509_common_name") or [b""]
    return names[0].decode(errors="replace")


def certificate_expiry(context: grpc.aio.ServicerContext) -> float | None:
    """The peer certificate's notAfter (epoch seconds), from the PEM gRPC puts in
    the call's auth context (`x509_pem_cert`); None without one."""
    pems: list[bytes] = context.auth_context().get("x509_pem_cert") or []
    return _not_after(pems[0]) if pems else None


@functools.lru_cache(maxsize=1024)
def _not_after(pem: bytes) -> float | None:
    """Parsed once per certificate (a connection's calls share it)."""
    try:
        return x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()
    except ValueError:
        return None


class CallCheck:
    """The checks of one call: who it is, and whether a request is allowed.

    `opening` is the request whose right a stream keeps while open (a Read's
    or Bootstrap's request, Subscribe's `open`); None where every request is
    checked (Produce). `expires_s`: when the credentials stop being valid.
    """

    def __init__(self, name: str, rule: Rule, table: AccessTable, principal: str,
                 expires_s: float | None = None, expired: str = TOKEN_EXPIRED) -> None:
        self.name = name
        self.rule = rule
        self.table = table
        self.principal = principal
        self.expires_s = expires_s
        self.expired = expired
        self.opening: Any = None

    def recheck(self, now_s: float) -> BrokerError | None:
        """Why an open stream must end now (expired credentials, a revoked
        right), or None. Pure given the table; the decision is cached there."""
        if self.expires_s is not None and now_s >= self.expires_s:
            what = "token" if self.expired == TOKEN_EXPIRED else "client certificate"
            return BrokerError("unauthenticated", detail=f"{self.name}: {self.expired} (an "
                               f"open stream ends when the {what} it was opened with expires)")
        if self.opening is None:
            return None
        denied = decide(self.table, self.principal, self.rule, self.opening)
        if denied is None:
            return None
        return BrokerError("permission_denied", detail="the right this stream was opened with "
                           f"was revoked: {denied.message(self.name)}")

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
                if self.opening is None and self.name not in ANSWERED_IN_STREAM \
                        and not isinstance(request, Refused):
                    self.opening = request  # Subscribe's open: the right the stream keeps
                yield request
            elif self.name in ANSWERED_IN_STREAM:
                yield Refused(error, request)
            else:
                raise error

    def filtered(self, response: Any) -> Any:
        """ListTopics shows only the topics the caller holds a permission on;
        ListSubscriptions only the subscriptions it may use (a restricted one's
        backlog and cursors are its users', as DescribeSubscription's)."""
        if self.table.is_superuser(self.principal):
            return response
        if self.name == "ListTopics":
            visible = [t for t in response.topics if self.table.visible(self.principal, t.topic)]
            return pb.ListTopicsResponse(topics=visible)
        if self.name == "ListSubscriptions":
            usable = [s for s in response.subscriptions
                      if self.table.may_use(self.principal, s.topic, s.subscription)]
            if len(usable) < len(response.subscriptions):
                shown = pb.ListSubscriptionsResponse()
                shown.CopyFrom(response)
                del shown.subscriptions[:]
                shown.subscriptions.extend(usable)
                return shown
        return response


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Authenticates every Keybus call and authorizes each request."""

    def __init__(self, authenticator: Authenticator, table: AccessTable,
                 recheck_interval_ms: int = 5_000) -> None:
        self.authenticator = authenticator
        self.table = table
        self.rights = StreamRights(recheck_interval_ms)
        table.revoke_listeners.append(self.rights.sweep)  # a revoke ends streams at once

    def _check(self, name: str, token: str, context: grpc.aio.ServicerContext) -> CallCheck:
        cert_name, cert_expires_s = "", None
        if self.authenticator.certificate_principal and not token:
            cert_name, cert_expires_s = certificate_name(context), certificate_expiry(context)
        try:
            identity: Identity = self.authenticator.identify(
                Credentials(token, cert_name, cert_expires_s), time.time())
        except AuthenticationError as e:
            raise BrokerError("unauthenticated", detail=f"{name}: {e}") from None
        current_principal.set(identity.principal)
        return CallCheck(name, rule_for(name), self.table, identity.principal,
                         identity.expires_s, identity.expired)

    async def _allowed(self, name: str, token: str, request: Any,
                       context: grpc.aio.ServicerContext) -> CallCheck:
        """The check of a call whose one request is known up front (unary and
        server-streaming calls), once its caller is authenticated and the request
        allowed; otherwise the call ends here, UNAUTHENTICATED or PERMISSION_DENIED
        (`abort` raises), before the servicer sees it."""
        try:
            check = self._check(name, token, context)
            error = check.denial(request)
        except BrokerError as e:
            error = e
        if error is not None:
            await abort(context, error)
        return check

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
            check = await self._allowed(name, token, request, context)
            return check.filtered(await inner(request, context))
        return behavior

    def _server_stream(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            check = await self._allowed(name, token, request, context)
            check.opening = request
            stream = self.rights.opened(check)
            try:
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        yield response
            finally:
                self.rights.closed(stream)
        return behavior

    def _bidi(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[Any]:
            try:
                check = self._check(name, token, context)
            except BrokerError as e:
                await abort(context, e)
            stream = self.rights.opened(check)
            try:
                async with contextlib.aclosing(inner(check.requests(requests), context)
                                               ) as responses:
                    async for response in responses:
                        yield response
            finally:
                self.rights.closed(stream)
        return behavior

    def _client_stream(self, name: str, token: str, inner: Any) -> Any:
        async def behavior(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            try:
                check = self._check(name, token, context)
            except BrokerError as e:
                await abort(context, e)
            return await inner(check.requests(requests), context)
        return behavior
