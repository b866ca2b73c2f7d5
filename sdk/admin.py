"""Admin: create, list, describe and delete topics, and (inherited from
SubscriptionAdmin) list, describe, seek and delete subscriptions.

Thin by design: one unary call per method, broker errors mapped to
KeybusError subclasses. Returns the wire types (pb.TopicInfo), which carry
config and per-partition offsets without a second copy of the schema here.
`AdminClient` (admin_client.py) is the part every admin class shares.
"""

from __future__ import annotations

from sdk.admin_client import AdminClient
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.wire_ints import INT64_MAX, UINT32_MAX
from sdk.subscription_admin import SubscriptionAdmin

__all__ = ["Admin", "AdminClient"]


class Admin(SubscriptionAdmin):
    """Topic and subscription administration on one broker (arguments as AdminClient)."""

    async def create_topic(self, name: str, partitions: int = 1, retention_ms: int = 0,
                           retention_bytes: int = 0, *, view: bool | None = None,
                           compacted: bool = False,
                           delete_retention_ms: int = 0) -> pb.TopicInfo:
        """Create a topic.

        Args:
            partitions: 1..the broker's partitions_max (default 1).
            retention_ms: keep events this long; 0 = the broker's default
                (its retention_ms: forever unless set), -1 = forever.
            retention_bytes: per partition; 0 = the broker's default (no size
                limit unless set), -1 = no size limit.
            view: keep a compacted view (latest event per key and source) for
                bootstrap; None (default) = the broker's view_default.
            compacted: Kafka's cleanup.policy=compact: retention keeps at least
                the latest event per key (needs the view).
            delete_retention_ms: tombstones stay this long; 0 = broker default.
        Returns:
            The new topic's TopicInfo.
        Raises:
            ValueError: a number that is not an int the wire can carry (named),
                before any call; AlreadyExists, InvalidArgument (names the bad
                field), Unavailable.
        """
        for arg, value, low, high in (("partitions", partitions, 0, UINT32_MAX),
                                      ("retention_ms", retention_ms, -1, INT64_MAX),
                                      ("retention_bytes", retention_bytes, -1, INT64_MAX),
                                      ("delete_retention_ms", delete_retention_ms, 0, INT64_MAX)):
            if type(value) is not int or not low <= value <= high:  # protobuf names no field
                raise ValueError(f"{arg}={value!r} is invalid: need an int {low}..{high}")
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
