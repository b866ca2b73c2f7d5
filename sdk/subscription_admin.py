"""Subscription administration: list, describe, seek and delete subscriptions.

`Admin` inherits these methods beside its topic ones, so one client does
both while each file stays small. Both build on `AdminClient` (one unary
call per method, broker errors mapped to KeybusError subclasses) and return
the wire types.
"""

from __future__ import annotations

from collections.abc import Sequence

from sdk.admin_client import AdminClient
from sdk.consumer_config import check_partitions
from sdk.core.names import NAME_CHARACTERS
from sdk.core.pb import keybus_pb2 as pb
from sdk.reader import Start, start_to_proto


class SubscriptionAdmin(AdminClient):
    """Subscription administration on one broker (arguments as AdminClient)."""

    async def list_subscriptions(self, topic: str) -> list[pb.SubscriptionInfo]:
        """Every subscription of `topic`, described.

        Raises:
            TopicNotFound, Unavailable, KeybusError. ValueError: a topic that is not a str.
        """
        _check_names(topic=topic)
        response = await self._call("ListSubscriptions", pb.ListSubscriptionsRequest(topic=topic))
        return list(response.subscriptions)

    async def describe_subscription(self, topic: str, subscription: str) -> pb.SubscriptionInfo:
        """Per partition: cursor, backlog, unacked, dispatch rate, consumers with
        their hash ranges, and the slots that wait and why.

        Raises:
            TopicNotFound, NotFound (no such subscription), Unavailable, KeybusError.
        """
        _check_names(topic=topic, subscription=subscription)
        info: pb.SubscriptionInfo = await self._call("DescribeSubscription",
                                                     pb.DescribeSubscriptionRequest(
                                                         topic=topic, subscription=subscription))
        return info

    async def seek(self, topic: str, subscription: str, position: Start,
                   partitions: Sequence[int] = ()) -> pb.SubscriptionInfo:
        """Move the cursor to "earliest", "latest", an offset or {"scn": n}
        (on the given partitions, default all); events from there are delivered again.

        Raises:
            NotFound, OffsetOutOfRange, InvalidArgument, Unavailable, KeybusError.
            ValueError: a name that is not a str, a position or partitions that are invalid.
        """
        _check_names(topic=topic, subscription=subscription)
        request = pb.SeekSubscriptionRequest(topic=topic, subscription=subscription,
                                             position=start_to_proto(position, "position"),
                                             partitions=check_partitions(partitions, "partitions"))
        info: pb.SubscriptionInfo = await self._call("SeekSubscription", request)
        return info

    async def delete_subscription(self, topic: str, subscription: str, force: bool = False) -> None:
        """Delete a subscription and its cursors; with force, also while consumers
        are attached (their streams end with NOT_FOUND).

        Raises:
            NotFound, FailedPrecondition (consumers attached), Unavailable, KeybusError.
        """
        _check_names(topic=topic, subscription=subscription)
        await self._call("DeleteSubscription", pb.DeleteSubscriptionRequest(
            topic=topic, subscription=subscription, force=force))


def _check_names(**names: object) -> None:
    """A name that is not a str: protobuf said only "bad argument type for built-in
    operation", and None went out as "" (the broker then named no subscription)."""
    for field, value in names.items():
        if not isinstance(value, str):
            raise ValueError(f"{field} {value!r} is invalid: give a name (a str of "
                             f"characters from {NAME_CHARACTERS})")
