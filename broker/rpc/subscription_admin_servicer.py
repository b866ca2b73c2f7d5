"""Subscription administration: list, describe, seek, delete."""

from __future__ import annotations

import grpc

from broker.rpc.status import unary
from broker.subscription.manager import SubscriptionManager
from sdk.core.pb import keybus_pb2 as pb


class SubscriptionAdminServicer:
    def __init__(self, manager: SubscriptionManager) -> None:
        self.manager = manager

    @unary
    async def ListSubscriptions(self, request: pb.ListSubscriptionsRequest,
                                context: grpc.aio.ServicerContext
                                ) -> pb.ListSubscriptionsResponse:
        return pb.ListSubscriptionsResponse(subscriptions=self.manager.list_all(request.topic))

    @unary
    async def DescribeSubscription(self, request: pb.DescribeSubscriptionRequest,
                                   context: grpc.aio.ServicerContext) -> pb.SubscriptionInfo:
        return self.manager.describe(request.topic, request.subscription)

    @unary
    async def SeekSubscription(self, request: pb.SeekSubscriptionRequest,
                               context: grpc.aio.ServicerContext) -> pb.SubscriptionInfo:
        return await self.manager.seek(request.topic, request.subscription, request.position,
                                       list(request.partitions))

    @unary
    async def DeleteSubscription(self, request: pb.DeleteSubscriptionRequest,
                                 context: grpc.aio.ServicerContext
                                 ) -> pb.DeleteSubscriptionResponse:
        await self.manager.delete(request.topic, request.subscription, request.force)
        return pb.DeleteSubscriptionResponse()
