"""Which channel a consumer's Subscribe streams use. Split from consumer.py (one job:
the channel): the caller's, its own, or, given several brokers, the topic's leader's
(found again on a reconnect); renewed when a rotated client certificate is on disk.
"""

from __future__ import annotations

import time

import grpc.aio

from sdk import errors
from sdk.channel import open_channel, renew_channel, stub_of
from sdk.cluster import FIND_TIMEOUT_MS, LeaderChannel, is_cluster
from sdk.consumer_link import ConsumerLink
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.security import ClientSecurity


class ConsumerChannel:
    """A consumer's channel and stub; `stub` is where the next stream opens."""

    def __init__(self, broker: str, topic: str, connect_timeout_ms: int,
                 channel: grpc.aio.Channel | None, security: ClientSecurity | None) -> None:
        """Several brokers ("h1:6650,h2:6650"): subscribe on the topic's leader, follow
        it. Finding it takes up to connect_timeout_ms (a reconnect retries after that)."""
        self.broker = broker
        self._owns_channel = channel is None
        self._security = security
        self._leader = LeaderChannel(broker, topic, connect_timeout_ms or FIND_TIMEOUT_MS,
                                     security) \
            if channel is None and is_cluster(broker) else None
        self.channel = channel if channel is not None or self._leader \
            else open_channel(broker, security)
        self.stub: pb_grpc.KeybusAsyncStub | None = \
            stub_of(self.channel) if self.channel is not None else None

    async def find_leader(self, links: ConsumerLink, reconnecting: bool,
                          reconnect: bool) -> bool:
        """Point the stub at the topic's leader (True at once for one broker); False
        (after waiting, as for a lost broker: reported, bounded by retry_timeout_ms)
        while none is known and the consumer is reconnecting."""
        if self._leader is None:
            return True
        try:
            self.stub = await self._leader.connect()
        except errors.KeybusError as e:
            if not reconnecting or not reconnect:
                raise
            await links.wait_to_retry(str(e), never_reached=False)
            return False
        return True

    async def renew(self, links: ConsumerLink) -> None:
        """Before a stream the broker ended for its credentials is opened again: a
        new channel when a rotated client certificate is on disk
        (sdk.channel.renews_channel). A channel given by the caller is kept."""
        if self._leader is not None:
            await self._leader.renew(time.time())  # find_leader opens a new one
        elif self._owns_channel and self.channel is not None:
            renewed = await renew_channel(self.channel, self.broker, self._security, time.time())
            if renewed is not None:
                self.channel, self.stub = renewed, stub_of(renewed)
                links.use_channel(renewed)

    async def close(self) -> None:
        if self._leader is not None:
            await self._leader.close()
        elif self._owns_channel and self.channel is not None:
            await self.channel.close()
