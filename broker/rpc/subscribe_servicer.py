"""Subscribe: the bidirectional consumer stream.

The first message must be `open`; the manager validates it and attaches the
consumer. Then two flows run side by side: a pump task hands permits, acks
and nacks to the manager as they arrive, and this generator sends what the
dispatchers queued in the session's bounded outbox (serialized
SubscribeResponse bytes: deliveries are assembled from stored record bytes,
see `broker/subscription/delivery.py`). A refused request ends the stream
with its status; the consumer's unacknowledged events go back for
redelivery when the stream ends, however it ends.

A stream that ends other than by the broker's refusal (the consumer closed
it, its connection dropped, or the broker's keepalive closed a connection
whose client did not answer pings: a frozen consumer) is logged as one INFO
line naming the consumer and the events it held. gRPC gives the servicer no
reason, so the line lists the possible ones; nor does it tell a lost
connection from a clean close: the request stream of a connection gRPC
closed may end as a half-close does, before the generator is cancelled, so
a cancellation alone would miss some frozen consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc

from broker.errors import BrokerError
from broker.rpc.status import refuse_unknown_fields, streaming
from broker.subscription.consumer_state import Session
from broker.subscription.manager import SubscriptionManager
from sdk.core.pb import keybus_pb2 as pb

log = logging.getLogger("keybus.subscribe")


class SubscribeServicer:
    def __init__(self, manager: SubscriptionManager) -> None:
        self.manager = manager

    @streaming
    async def Subscribe(self, requests: AsyncIterator[pb.SubscribeRequest],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        try:
            first = await anext(aiter(requests))
        except StopAsyncIteration:
            return
        refuse_unknown_fields(first)
        body = first.WhichOneof("body")
        if body != "open":
            raise BrokerError("subscribe_open_missing", got=body or "an empty message")
        session = await self.manager.attach(first.open)
        pump: asyncio.Task[None] | None = None
        refused = False  # the broker ended the stream (a refusal, a fault), not the client
        try:
            spec = self.manager.spec_of(session)
            yield pb.SubscribeResponse(opened=pb.Opened(
                partitions=session.spec.partitions, type=spec.type,  # type: ignore[arg-type]
                key_shared_mode=spec.mode,  # type: ignore[arg-type]
                marks_share_ends=spec.type != pb.SHARED)).SerializeToString()
            pump = asyncio.get_running_loop().create_task(self._pump(requests, session))
            while (message := await session.outbox.get()) is not None:
                session.writing(message)
                yield message
                session.written(message)
            if session.error is not None:
                raise session.error
        except Exception:  # not CancelledError or GeneratorExit: gRPC ending the call
            refused = True
            raise
        finally:
            if pump is not None:
                pump.cancel()
                # Whatever the pump ended with, the session is detached below: a
                # consumer left attached is refused its reconnect ("already attached")
                # for good. The pump's own failures are handled in it (_pump).
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pump
            held = self.manager.detach(session)
            if not refused:
                log.info("consumer %r of subscription %r on topic %r is gone: its stream "
                         "ended (the consumer closed it, its connection dropped, or it did "
                         "not answer the broker's keepalive pings); %d unacknowledged events "
                         "go back for redelivery", session.name, session.subscription,
                         session.topic, held)

    async def _pump(self, requests: AsyncIterator[pb.SubscribeRequest], session: Session) -> None:
        manager = self.manager
        try:
            async for request in requests:
                refuse_unknown_fields(request)
                body = request.WhichOneof("body")
                if body == "permits":
                    manager.grant(session, request.permits)
                elif body == "ack":
                    manager.ack(session, request.ack)
                elif body == "nack":
                    manager.nack(session, request.nack)
                elif body == "open":
                    raise BrokerError("subscribe_open_twice")
            session.close()  # the consumer half-closed: end the stream cleanly
        except BrokerError as e:
            session.close(e)
        except (grpc.aio.AioRpcError, grpc.aio.AbortError, ConnectionError):
            # AbortError: a read of a call the broker aborted (its token expired,
            # its grant revoked: rpc/stream_rights.py)
            session.close()
