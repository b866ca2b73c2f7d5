"""Subscription administration: list, describe, seek and delete subscriptions.

Beside `Admin` (topics) rather than inside it, so each stays one small
file; both are one unary call per method with broker errors mapped to
KeybusError subclasses, returning the wire types (pb.SubscriptionInfo).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.reader import Start, start_to_proto


class SubscriptionAdmin:
    """Subscription administration on one broker.

    Args:
        broker: "host:port"; ignored when `channel` is given.
        request_timeout_ms: deadline per call (default 30000).
        channel: a grpc.aio channel to share (not closed by close()).
    """

    def __init__(self, broker: str = "localhost:6650", *, request_timeout_ms: int = 30_000,
                 channel: grpc.aio.Channel | None = None) -> None:
        self.broker = broker
        self._timeout_s = request_timeout_ms / 1000
        self._channel = channel
        self._owns_channel = channel is None
        self._stub: pb_grpc.KeybusAsyncStub | None = None

    def _connect(self) -> pb_grpc.KeybusAsyncStub:
        if self._stub is None:
            if self._channel is None:
                self._channel = open_channel(self.broker)
            self._stub = stub_of(self._channel)
        return self._stub

    async def list_subscriptions(self, topic: str) -> list[pb.SubscriptionInfo]:
        """Every subscription of `topic`, described.

        Raises:
            TopicNotFound, Unavailable, KeybusError.
        """
        try:
            response = await self._connect().ListSubscriptions(
                pb.ListSubscriptionsRequest(topic=topic), timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        return list(response.subscriptions)

    async def describe_subscription(self, topic: str, subscription: str) -> pb.SubscriptionInfo:
        """Per partition: cursor, backlog, unacked, dispatch rate, consumers with
        their hash ranges, and the slots that wait and why.

        Raises:
            TopicNotFound, NotFound (no such subscription), Unavailable, KeybusError.
        """
        try:
            info: pb.SubscriptionInfo = await self._connect().DescribeSubscription(
                pb.DescribeSubscriptionRequest(topic=topic, subscription=subscription),
                timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        return info

    async def seek(self, topic: str, subscription: str, position: Start,
                   partitions: Sequence[int] = ()) -> pb.SubscriptionInfo:
        """Move the cursor to "earliest", "latest", an offset or {"scn": n}
        (on the given partitions, default all); events from there are delivered again.

        Raises:
            NotFound, OffsetOutOfRange, InvalidArgument, Unavailable, KeybusError.
        """
        request = pb.SeekSubscriptionRequest(topic=topic, subscription=subscription,
                                             position=start_to_proto(position),
                                             partitions=list(partitions))
        try:
            info: pb.SubscriptionInfo = await self._connect().SeekSubscription(
                request, timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        return info

    async def delete_subscription(self, topic: str, subscription: str, force: bool = False) -> None:
        """Delete a subscription and its cursors; with force, also while consumers
        are attached (their streams end with NOT_FOUND).

        Raises:
            NotFound, FailedPrecondition (consumers attached), Unavailable, KeybusError.
        """
        try:
            await self._connect().DeleteSubscription(pb.DeleteSubscriptionRequest(
                topic=topic, subscription=subscription, force=force), timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    async def close(self) -> None:
        if self._owns_channel and self._channel is not None:
            await self._channel.close()
        self._channel = None
        self._stub = None

    async def __aenter__(self) -> SubscriptionAdmin:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()
