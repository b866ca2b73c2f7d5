"""Admin: create, list, describe and delete topics.

Thin by design: one unary call per method, broker errors mapped to
KeybusError subclasses. Returns the wire types (pb.TopicInfo), which carry
config and per-partition offsets without a second copy of the schema here.
`AdminClient` is the part every admin class shares (channel, deadline,
error mapping); `SubscriptionAdmin` builds on it too.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.security import ClientSecurity


class AdminClient:
    """One broker's unary admin calls: a lazily opened channel, a deadline per
    call, and gRPC errors mapped to KeybusError subclasses.

    Args:
        broker: "host:port" (port defaults to 6650); ignored when `channel` is given.
        request_timeout_ms: deadline per call (default 30000).
        channel: a grpc.aio channel to share (not closed by close()).
        security: TLS and credentials (sdk.security.ClientSecurity); None =
            the ambient default, else plain text.
    """

    def __init__(self, broker: str = "localhost:6650", *, request_timeout_ms: int = 30_000,
                 channel: grpc.aio.Channel | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.broker = broker
        self._security = security
        self._timeout_s = request_timeout_ms / 1000
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
        try:
            return await getattr(self._connect(), method)(request, timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

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


class Admin(AdminClient):
    """Topic administration on one broker (arguments as AdminClient)."""

    async def create_topic(self, name: str, partitions: int = 1, retention_ms: int = 0,
                           retention_bytes: int = 0, *, view: bool | None = None,
                           compacted: bool = False,
                           delete_retention_ms: int = 0) -> pb.TopicInfo:
        """Create a topic.

        Args:
            partitions: 1..the broker's partitions_max (default 1).
            retention_ms: keep events this long; 0 = forever (default).
            retention_bytes: per partition; 0 = no size limit (default).
            view: keep a compacted view (latest event per key and source) for
                bootstrap; None (default) = the broker's view_default.
            compacted: Kafka's cleanup.policy=compact: retention keeps at least
                the latest event per key (needs the view).
            delete_retention_ms: tombstones stay this long; 0 = broker default.
        Returns:
            The new topic's TopicInfo.
        Raises:
            AlreadyExists, InvalidArgument (names the bad field), Unavailable.
        """
        config = pb.TopicConfig(
            partitions=partitions, retention_ms=retention_ms, retention_bytes=retention_bytes,
            view=pb.VIEW_DEFAULT if view is None else pb.VIEW_ON if view else pb.VIEW_OFF,
            compacted=compacted, delete_retention_ms=delete_retention_ms)
        info: pb.TopicInfo = await self._call("CreateTopic",
                                              pb.CreateTopicRequest(topic=name, config=config))
        return info

    async def list_topics(self) -> list[pb.TopicInfo]:
        """Every topic with its config and partitions.

        Raises:
            Unavailable, KeybusError.
        """
        response = await self._call("ListTopics", pb.ListTopicsRequest())
        return list(response.topics)

    async def describe_topic(self, name: str) -> pb.TopicInfo:
        """A topic's config and per-partition start/end offsets and last SCN.

        Raises:
            TopicNotFound, Unavailable, KeybusError.
        """
        info: pb.TopicInfo = await self._call("DescribeTopic", pb.DescribeTopicRequest(topic=name))
        return info

    async def delete_topic(self, name: str) -> None:
        """Delete a topic and its events.

        Raises:
            TopicNotFound, Unavailable, KeybusError.
        """
        await self._call("DeleteTopic", pb.DeleteTopicRequest(topic=name))
