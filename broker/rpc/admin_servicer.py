"""Topic administration: create, list, describe, delete."""

from __future__ import annotations

import grpc

from broker.rpc.status import unary
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb


class AdminServicer:
    def __init__(self, registry: TopicRegistry) -> None:
        self.registry = registry

    @unary
    async def CreateTopic(self, request: pb.CreateTopicRequest,
                          context: grpc.aio.ServicerContext) -> pb.TopicInfo:
        return await self.registry.create(request.topic, request.config)

    @unary
    async def ListTopics(self, request: pb.ListTopicsRequest,
                         context: grpc.aio.ServicerContext) -> pb.ListTopicsResponse:
        return pb.ListTopicsResponse(
            topics=[self.registry.describe(name) for name in self.registry.names()])

    @unary
    async def DescribeTopic(self, request: pb.DescribeTopicRequest,
                            context: grpc.aio.ServicerContext) -> pb.TopicInfo:
        return self.registry.describe(request.topic)

    @unary
    async def DeleteTopic(self, request: pb.DeleteTopicRequest,
                          context: grpc.aio.ServicerContext) -> pb.DeleteTopicResponse:
        await self.registry.delete(request.topic)
        return pb.DeleteTopicResponse()
