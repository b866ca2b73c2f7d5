"""Event processor stores over gRPC: ListOwnership, ClaimOwnership,
ListCheckpoints, UpdateCheckpoint, FenceCheckpoints.

Each method converts proto to the store's model, calls one
`ProcessorStores` method and converts back. Registered as a generic handler
of its own for the Keybus service (`processor_handler`), beside the one in
`service.py`: a server tries its handlers in turn, so the two sets of
methods need no shared table.
"""

from __future__ import annotations

import grpc

from broker.errors import BrokerError
from broker.processor_stores.keys import Owned, Position
from broker.processor_stores.rules import Claim
from broker.processor_stores.service import Group, ProcessorStores
from broker.rpc.service import SERVICE
from broker.rpc.status import unary
from sdk.core.pb import keybus_pb2 as pb

BOOTSTRAP_CHARS_MAX = 1 << 16  # a checkpoint's bootstrap position (JSON with a source and key)


def _ownership(group: Group, partition: int, owned: Owned) -> pb.OwnershipRecord:
    return pb.OwnershipRecord(namespace=group.namespace, topic=group.topic,
                              consumer_group=group.consumer_group, partition=partition,
                              owner_id=owned.owner_id, etag=owned.etag,
                              last_modified_ms=owned.last_modified_ms, epoch=owned.epoch)


def _checkpoint(group: Group, partition: int, position: Position) -> pb.CheckpointRecord:
    return pb.CheckpointRecord(namespace=group.namespace, topic=group.topic,
                               consumer_group=group.consumer_group, partition=partition,
                               offset=position.offset, scn=position.scn, epoch=position.epoch,
                               bootstrap=position.bootstrap, incarnation=group.incarnation)


class ProcessorStoreServicer:
    def __init__(self, stores: ProcessorStores) -> None:
        self.stores = stores

    @unary
    async def ListOwnership(self, request: pb.ListOwnershipRequest,
                            context: grpc.aio.ServicerContext) -> pb.ListOwnershipResponse:
        group = self.stores.group(request.namespace, request.topic, request.consumer_group)
        return pb.ListOwnershipResponse(ownership=[
            _ownership(group, partition, owned)
            for partition, owned in self.stores.list_ownership(group)])

    @unary
    async def ClaimOwnership(self, request: pb.ClaimOwnershipRequest,
                             context: grpc.aio.ServicerContext) -> pb.ClaimOwnershipResponse:
        group = self.stores.group(request.namespace, request.topic, request.consumer_group)
        claims = [Claim(c.partition, c.owner_id, c.etag) for c in request.claims]
        won = await self.stores.claim(group, claims)
        return pb.ClaimOwnershipResponse(won=[_ownership(group, p, o) for p, o in won])

    @unary
    async def ListCheckpoints(self, request: pb.ListCheckpointsRequest,
                              context: grpc.aio.ServicerContext) -> pb.ListCheckpointsResponse:
        group = self.stores.group(request.namespace, request.topic, request.consumer_group)
        found = self.stores.list_checkpoints(group, list(request.partitions))
        return pb.ListCheckpointsResponse(
            checkpoints=[_checkpoint(group, p, position) for p, position in found])

    @unary
    async def UpdateCheckpoint(self, request: pb.UpdateCheckpointRequest,
                               context: grpc.aio.ServicerContext) -> pb.UpdateCheckpointResponse:
        checkpoint = request.checkpoint
        group = self.stores.group(checkpoint.namespace, checkpoint.topic,
                                  checkpoint.consumer_group)
        if len(checkpoint.bootstrap) > BOOTSTRAP_CHARS_MAX:
            raise BrokerError("checkpoint_invalid",
                              detail=f"checkpoint.bootstrap has {len(checkpoint.bootstrap)} "
                                     f"characters; allowed at most {BOOTSTRAP_CHARS_MAX}")
        await self.stores.update_checkpoint(group, checkpoint.partition, Position(
            checkpoint.offset, checkpoint.scn, checkpoint.epoch, checkpoint.bootstrap),
            checkpoint.incarnation)
        return pb.UpdateCheckpointResponse()

    @unary
    async def FenceCheckpoints(self, request: pb.FenceCheckpointsRequest,
                               context: grpc.aio.ServicerContext) -> pb.FenceCheckpointsResponse:
        group = self.stores.group(request.namespace, request.topic, request.consumer_group)
        await self.stores.fence(group, request.partition, request.epoch, request.owner_id)
        return pb.FenceCheckpointsResponse()


def processor_handler(servicer: ProcessorStoreServicer) -> grpc.GenericRpcHandler:
    """The generic handler of the five processor store methods."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_type.FromString, response_type.SerializeToString)
        for name, request_type, response_type in (
            ("ListOwnership", pb.ListOwnershipRequest, pb.ListOwnershipResponse),
            ("ClaimOwnership", pb.ClaimOwnershipRequest, pb.ClaimOwnershipResponse),
            ("ListCheckpoints", pb.ListCheckpointsRequest, pb.ListCheckpointsResponse),
            ("UpdateCheckpoint", pb.UpdateCheckpointRequest, pb.UpdateCheckpointResponse),
            ("FenceCheckpoints", pb.FenceCheckpointsRequest, pb.FenceCheckpointsResponse))
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)
