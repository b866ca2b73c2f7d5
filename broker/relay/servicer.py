"""The relay RPCs: DescribeCluster, EpochEnd, ReportReplicaPositions (gRPC shell).

Registered as a handler of its own beside the service's main one
(`relay_handler`): gRPC asks each generic handler in turn for a method.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from broker.errors import BrokerError
from broker.relay.node import RelayNode
from broker.rpc.service import SERVICE
from broker.rpc.status import abort, refuse_unknown_fields, unary
from sdk.core.pb import keybus_pb2 as pb


class RelayServicer:
    def __init__(self, node: RelayNode) -> None:
        self.node = node

    @unary
    async def DescribeCluster(self, request: pb.DescribeClusterRequest,
                              context: grpc.aio.ServicerContext) -> pb.ClusterInfo:
        return self.node.describe(request.topic)

    @unary
    async def EpochEnd(self, request: pb.EpochEndRequest,
                       context: grpc.aio.ServicerContext) -> pb.EpochEndResponse:
        return await self.node.epoch_end(request)

    async def ReportReplicaPositions(self, positions: AsyncIterator[pb.ReplicaPosition],
                                     context: grpc.aio.ServicerContext
                                     ) -> AsyncIterator[pb.ReplicaPositionAck]:
        count = 0
        stream = object()  # its follower follows while it is open (broker/relay/acks.py)
        try:
            async for position in positions:  # each one checked (rpc/auth.py) as it comes
                refuse_unknown_fields(position)
                self.node.report(position, stream)
                count += 1
                yield pb.ReplicaPositionAck(positions=count)
        except BrokerError as e:
            await abort(context, e)
        finally:  # ended, broken or cancelled (the follower's process gone)
            self.node.reports_ended(stream)


def relay_handler(servicer: RelayServicer) -> grpc.GenericRpcHandler:
    """The relay methods of the Keybus service."""
    return grpc.method_handlers_generic_handler(SERVICE, {
        "DescribeCluster": grpc.unary_unary_rpc_method_handler(
            servicer.DescribeCluster, pb.DescribeClusterRequest.FromString,
            pb.ClusterInfo.SerializeToString),
        "EpochEnd": grpc.unary_unary_rpc_method_handler(
            servicer.EpochEnd, pb.EpochEndRequest.FromString, pb.EpochEndResponse.SerializeToString),
        "ReportReplicaPositions": grpc.stream_stream_rpc_method_handler(
            servicer.ReportReplicaPositions, pb.ReplicaPosition.FromString,
            pb.ReplicaPositionAck.SerializeToString),
    })
