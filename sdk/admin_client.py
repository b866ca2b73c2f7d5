"""AdminClient: what every admin class shares (channel, deadline, error mapping).

One broker's unary calls: a lazily opened channel, a deadline per call, and
gRPC errors mapped to KeybusError subclasses (naming the broker when it
cannot be reached). `SubscriptionAdmin` and `Admin` build on it.

Before its first call a client waits at most connect_timeout_ms for the
channel to connect: a broker that took the TCP connection and never answered
(a stopped or hung process: the kernel accepts for it) would otherwise hold
the call until the keepalive ping gives up (~15 s) or the call's deadline
(30 s) ends, and be told as "cannot connect". A refused connection fails the
call at once, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, parse_broker, stub_of
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
            await self._wait_connected()
        try:
            return await getattr(stub, method)(request, timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self.broker) from None

    async def _wait_connected(self) -> None:
        """Wait until the channel is connected (then calls go) or has failed to
        connect (then the call fails at once with gRPC's reason, e.g. refused);
        still connecting after connect_timeout_ms: Unavailable, worded by whether
        the broker's port takes a TCP connection (frozen) or not (no answer)."""
        assert self._channel is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connect_s
        state = self._channel.get_state(try_to_connect=True)
        while state in (grpc.ChannelConnectivity.IDLE, grpc.ChannelConnectivity.CONNECTING):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise await self._silent()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._channel.wait_for_state_change(state), remaining)
            state = self._channel.get_state(try_to_connect=True)
        self._connected = state is grpc.ChannelConnectivity.READY

    async def _silent(self) -> errors.Unavailable:
        """The error for a channel still connecting after connect_timeout_ms."""
        waited = f"within {self._connect_s:g} s"
        host, port = parse_broker(self.broker)
        try:  # bounded: only tells a port that takes connections from one that does not
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
        except (OSError, TimeoutError):
            return errors.unreachable(self.broker, f"no answer (connect timed out {waited})")
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return errors.unreachable(self.broker, f"{errors.ACCEPTED_SILENT} {waited}")

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
