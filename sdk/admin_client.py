"""AdminClient: what every admin class shares (channel, deadline, error mapping).

One broker's unary calls: a lazily opened channel, a deadline per call, and
gRPC errors mapped to KeybusError subclasses (naming the broker when it
cannot be reached). `SubscriptionAdmin` and `Admin` build on it.

Before its first call a client waits at most connect_timeout_ms for the
channel to connect (sdk/connect_wait.py): a broker that took the TCP
connection and never answers is told within seconds, not after the keepalive
ping gives up. A refused connection fails the call at once, as before.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.connect_wait import wait_connected
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.security import ClientSecurity


class AdminClient:
    """One broker's unary admin calls: a lazily opened channel, a deadline per
    call, and gRPC errors mapped to KeybusError subclasses.

    Args:
        broker: "host:port" (port defaults to 6650); ignored when `channel` is given.
        request_timeout_ms: deadline per call (default 30000).
        connect_timeout_ms: how long the first call waits for the channel to
            connect (at most request_timeout_ms) before it fails, naming a broker
            that accepted the connection but did not answer (default 5000).
        channel: a grpc.aio channel to share (not closed by close()).
        security: TLS and credentials (sdk.security.ClientSecurity); None =
            the ambient default, else plain text.
    """

    def __init__(self, broker: str = "localhost:6650", *, request_timeout_ms: int = 30_000,
                 channel: grpc.aio.Channel | None = None,
                 security: ClientSecurity | None = None,
                 connect_timeout_ms: int = 5_000) -> None:
        self.broker = broker
        self._security = security
        self._timeout_s = request_timeout_ms / 1000
        self._connect_s = min(connect_timeout_ms, request_timeout_ms) / 1000
        self._connected = False
        self._channel = channel
        self._owns_channel = channel is None
        self._stub: pb_grpc.KeybusAsyncStub | None = None

    def _connect(self) -> pb_grpc.KeybusAsyncStub:
        """The stub, opening the channel on first use (needs the running loop)."""
        if self._stub is None:
            if self._channel is None:
                self._channel = open_channel(self.broker, self._security)
            self._stub = stub_of(self._channel)
        return self._stub

    async def _call(self, method: str, request: Any) -> Any:
        """One unary call by name; a broker error becomes a KeybusError."""
        stub = self._connect()
        if not self._connected:
            assert self._channel is not None
            self._connected = await wait_connected(self._channel, self.broker, self._connect_s)
        try:
            return await getattr(stub, method)(request, timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self.broker) from None

    async def close(self) -> None:
        """Close the channel this client opened. Idempotent."""
        if self._owns_channel and self._channel is not None:
            await self._channel.close()
        self._channel = None
        self._stub = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()
