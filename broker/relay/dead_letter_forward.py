"""A follower's dead letters, written on the leader of a dead-letter topic it only copies.

A subscription consumed on a follower may dead-letter into a topic this broker
copies: its partitions refuse local writes (the log is the leader's), so a
local append would be refused on every retry and the event would bounce
between the consumer and the refusal for ever. Pulsar's dead-letter producer
writes wherever the topic is owned; so does this: the batches go to the
topic's leader as a produce (answered once durable there, under its acks) and
come back to this broker through the copy. The subscription acknowledges the
events only after the leader's answer, so a failure redelivers, never loses.
"""

from __future__ import annotations

import grpc

from broker.relay.node import RelayNode
from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb

HOPS_MAX = 3  # a chained upstream names its own leader: follow it this many times
TIMEOUT_SLACK_S = 10.0  # past the leader's acks_timeout_ms, for the round trip


class DeadLetterForwarder:
    """Writes dead letters on the leader of a topic this broker follows."""

    def __init__(self, node: RelayNode) -> None:
        self.node = node

    def leader_of(self, topic: str) -> str | None:
        """The leader's address when this broker follows `topic`; None when it may
        write the topic itself (or does not know a leader: the local write says why)."""
        role = self.node.roles.get(topic)
        if role is None or role.role != "follower" or not role.leader:
            return None
        return role.leader

    async def write(self, leader: str, requests: list[pb.ProduceRequest]) -> int:
        """Produce `requests` on `leader` (or the leader it names); the events stored.

        Raises:
            KeybusError: the leader refused a batch or could not be reached.
        """
        timeout = self.node.relay.acks_timeout_ms / 1000 + TIMEOUT_SLACK_S
        for _ in range(HOPS_MAX):
            try:
                return await self._produce(leader, requests, timeout)
            except errors.NotLeader as e:
                if not e.leader or e.leader == leader:
                    raise
                leader = e.leader
        raise errors.FailedPrecondition(
            f"dead letters for topic {requests[0].topic!r} found no leader within {HOPS_MAX} "
            f"brokers (last asked: {leader})")

    async def _produce(self, leader: str, requests: list[pb.ProduceRequest],
                       timeout: float) -> int:
        numbered = [pb.ProduceRequest(topic=r.topic, partition=r.partition, batch=r.batch,
                                      request_id=i + 1) for i, r in enumerate(requests)]
        channel = open_channel(leader, self.node.relay.client_security)
        try:
            stored = 0
            answers = stub_of(channel).Produce(iter(numbered), timeout=timeout)
            async for answer in answers:
                if answer.error_code:
                    raise errors.from_code(answer.error_code,
                                           f"{leader}: {answer.error_message}")
                stored += answer.count
            return stored
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, leader) from None
        finally:
            await channel.close()
