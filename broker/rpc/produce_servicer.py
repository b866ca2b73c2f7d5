"""Produce (bidi stream) and InitProducer.

The stream is pipelined: requests are handed to their partitions as they
arrive (up to `produce_in_flight_max` unanswered), and answers go back in
request order. A bad request gets an error answer; the stream stays open.
That includes requests refused before they got here (`guard.Refused`:
undecodable, over request_bytes_max, or not permitted): the answer carries
the request id when the bytes parsed, else 0, and comes in request order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypeAlias

import grpc

from broker.errors import BrokerError
from broker.log.rocks_store import RocksStore
from broker.relay.node import RelayNode
from broker.rpc.guard import Refused
from broker.rpc.status import refuse_unknown_fields, unary
from broker.topics import TopicRegistry
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.produce")
CHOSEN_ID_MIN = 1 << 63  # ids with the high bit set are chosen by clients (proto)
# An InitProducer id carries its leader epoch above this bit (relay chaining), so
# two leaders of a topic never hand out the same id.
PRODUCER_ID_EPOCH_SHIFT = 40
_Outcome: TypeAlias = "asyncio.Future[pb.ProduceResponse] | BrokerError"
_Pending: TypeAlias = "tuple[pb.ProduceRequest | Refused, asyncio.Future[_Outcome]]"


class ProduceServicer:
    def __init__(self, registry: TopicRegistry, store: RocksStore, in_flight_max: int,
                 relay: RelayNode | None = None) -> None:
        self.registry = registry
        self.store = store
        self.in_flight_max = in_flight_max
        self.relay = relay  # relay chaining: acks after n copies, leadership checks
        # Ids below 2^63 come from InitProducer: one it never gave is refused, so a
        # client cannot write under (and advance the sequences of) another's id.
        self.issued_id_max = store.peek_id("next_producer_id")

    async def Produce(self, requests: AsyncIterator[pb.ProduceRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProduceResponse]:
        pending: asyncio.Queue[_Pending | None] = asyncio.Queue(self.in_flight_max)
        pump = asyncio.get_running_loop().create_task(self._pump(requests, pending))
        try:
            while (item := await pending.get()) is not None:
                request, submitted = item
                yield await self._answer(request, await submitted)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await pump

    async def _pump(self, requests: AsyncIterator[pb.ProduceRequest],
                    pending: asyncio.Queue[_Pending | None]) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for request in requests:
                # The answer's place first, then the request: a partition with nothing
                # else to do commits it inside `submit` (Partition._commit_now), and its
                # answer is then written ahead of the deliveries that commit queued,
                # as when the partition's task commits it.
                submitted: asyncio.Future[_Outcome] = loop.create_future()
                await pending.put((request, submitted))
                try:
                    submitted.set_result(self._submit(request))
                except Exception as e:  # unexpected: the answer raises it, nothing waits on
                    submitted.set_exception(e)
                    raise
        finally:
            await pending.put(None)

    def _submit(self, request: pb.ProduceRequest | Refused
                ) -> asyncio.Future[pb.ProduceResponse] | BrokerError:
        if isinstance(request, Refused):  # undecodable, too large or not permitted
            return request.error
        try:
            refuse_unknown_fields(request)
            partition = self.registry.partition(request.topic, request.partition)
            if self.relay is not None:  # a follower says who leads before anything else
                self.relay.check_writable(request.topic)
            if not self._issued(request.producer_id, partition.leader_epoch):
                raise BrokerError("producer_not_issued", producer_id=request.producer_id)
            return partition.submit(request)
        except BrokerError as e:
            return e

    def _issued(self, producer_id: int, leader_epoch: int) -> bool:
        """A chosen id, one this broker's InitProducer gave, or one an earlier leader
        of the topic gave (its state travels with the log; relay chaining)."""
        if producer_id == 0 or producer_id >= CHOSEN_ID_MIN:
            return True
        epoch = producer_id >> PRODUCER_ID_EPOCH_SHIFT
        if epoch < leader_epoch:
            return True
        counter = producer_id & ((1 << PRODUCER_ID_EPOCH_SHIFT) - 1)
        return epoch == leader_epoch and counter <= self.issued_id_max

    async def _answer(self, request: pb.ProduceRequest | Refused,
                      outcome: asyncio.Future[pb.ProduceResponse] | BrokerError
                      ) -> pb.ProduceResponse:
        if isinstance(request, Refused):  # answer with what parsed of it, if anything
            parsed = request.message
            request = parsed if isinstance(parsed, pb.ProduceRequest) else pb.ProduceRequest()
        if not isinstance(outcome, BrokerError):
            try:
                response = await outcome
                if self.relay is not None:
                    await self.relay.acknowledged(request.topic, request.partition,
                                                  response.base_offset + response.count)
                return response
            except BrokerError as e:
                outcome = e
            except Exception as e:  # storage failure: tell the client, keep serving
                log.exception("produce to %s/%d failed", request.topic, request.partition)
                return pb.ProduceResponse(request_id=request.request_id, topic=request.topic,
                                          partition=request.partition,
                                          error_code=grpc.StatusCode.UNAVAILABLE.value[0],
                                          error_message=f"storage error: {e}")
        return pb.ProduceResponse(request_id=request.request_id, topic=request.topic,
                                  partition=request.partition,
                                  error_code=outcome.code.value[0],
                                  error_message=outcome.message)

    @unary
    async def InitProducer(self, request: pb.InitProducerRequest,
                           context: grpc.aio.ServicerContext) -> pb.InitProducerResponse:
        partitions = self.registry.meta(request.topic).partitions
        epoch = 0
        if self.relay is not None:  # ids of different leaders of a topic never collide
            self.relay.check_writable(request.topic)
            epoch = self.registry.partitions(request.topic)[0].leader_epoch
        producer_id = await asyncio.to_thread(self.store.next_id, "next_producer_id")
        self.issued_id_max = max(self.issued_id_max, producer_id)
        producer_id |= epoch << PRODUCER_ID_EPOCH_SHIFT
        return pb.InitProducerResponse(producer_id=producer_id,
                                       next_sequences=[0] * partitions)
