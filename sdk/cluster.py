"""Several brokers, one leader per topic: find it and follow it across failovers.

Given "h1:6650,h2:6650,h3:6650", a client asks every broker for its role in
the topic (`DescribeCluster`) and talks to the one that takes produce now;
if two claim it, the higher leader epoch wins (the older one can no longer
acknowledge anything). After a broken stream or a "not the leader" answer
it asks again, with capped backoff, until `find_timeout_ms`; a failover
takes a few seconds. A single address keeps the plain behaviour (a
follower then answers FAILED_PRECONDITION naming the leader: NotLeader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, parse_broker, renews_channel, stub_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.security import ClientSecurity

log = logging.getLogger("keybus.cluster")
PROBE_TIMEOUT_S = 2.0
FIND_TIMEOUT_MS = 30_000  # how long find_leader asks by default


def split_brokers(broker: str) -> list[str]:
    """The addresses of a comma-separated broker list, each checked.

    Raises:
        ValueError: an empty entry or an address that does not parse.
    """
    addresses = [part.strip() for part in broker.split(",")]
    for address in addresses:
        parse_broker(address)
    return addresses


def is_cluster(broker: str) -> bool:
    """Several addresses: the client finds and follows the leader."""
    return isinstance(broker, str) and "," in broker


async def describe_role(address: str, topic: str, timeout_s: float = PROBE_TIMEOUT_S,
                        security: ClientSecurity | None = None) -> pb.TopicRoleInfo:
    """One broker's view of `topic` (its role, leader, epoch).

    Raises:
        KeybusError: the broker's error (TopicNotFound, Unavailable, ...).
    """
    channel = open_channel(address, security)
    try:
        info = await stub_of(channel).DescribeCluster(pb.DescribeClusterRequest(topic=topic),
                                                      timeout=timeout_s)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e, address) from None
    finally:
        await channel.close()
    return info.topics[0] if info.topics else pb.TopicRoleInfo(topic=topic)


async def find_leader(addresses: list[str], topic: str, timeout_ms: int = FIND_TIMEOUT_MS,
                      backoff_ms: int = 100, backoff_max_ms: int = 1_000,
                      security: ClientSecurity | None = None,
                      unreachable_ms: int | None = None) -> str:
    """The address of the broker that takes produce for `topic` now.

    `unreachable_ms`: fail sooner when no broker at all could be reached for this long
    (a failover keeps brokers answering, so only a cluster that is down, or a wrong
    list, ends there); None: only `timeout_ms` ends the search.

    Raises:
        TopicNotFound: no broker has the topic.
        Unavailable: no leader within timeout_ms, or no broker reached within
            unreachable_ms; the message says what each broker answered last.
    """
    began = time.monotonic()
    deadline = began + timeout_ms / 1000
    reached_last = began
    while True:
        answers = await asyncio.gather(*(_probe(a, topic, security) for a in addresses))
        writable = [(info.leader_epoch, -i, address) for i, (address, info) in enumerate(answers)
                    if isinstance(info, pb.TopicRoleInfo) and info.writable]
        if writable:
            return max(writable)[2]
        if all(isinstance(info, errors.TopicNotFound) for _, info in answers):
            raise errors.TopicNotFound(f"no broker of {','.join(addresses)} has topic {topic!r}")
        now = time.monotonic()
        if not all(isinstance(info, errors.Unavailable) for _, info in answers):
            reached_last = now
        if unreachable_ms is not None and now - reached_last >= unreachable_ms / 1000:
            raise errors.Unavailable(f"no broker of {','.join(addresses)} could be reached "
                                     f"within {unreachable_ms} ms ({_all_said(answers)})")
        if now >= deadline:
            raise errors.Unavailable(f"no leader of topic {topic!r} within {timeout_ms} ms "
                                     f"({_all_said(answers)})")
        await asyncio.sleep(backoff_ms / 1000)
        backoff_ms = min(backoff_ms * 2, backoff_max_ms)


async def topic_broker(broker: str, topic: str, timeout_ms: int = FIND_TIMEOUT_MS,
                       security: ClientSecurity | None = None) -> str:
    """The address to ask about `topic`: `broker` itself when it is one address,
    the topic's leader when it is several (its metadata is the newest).

    Raises:
        TopicNotFound, Unavailable: as find_leader (several brokers only).
    """
    if not is_cluster(broker):
        return broker
    return await find_leader(split_brokers(broker), topic, timeout_ms, security=security)


async def _probe(address: str, topic: str, security: ClientSecurity | None
                 ) -> tuple[str, pb.TopicRoleInfo | errors.KeybusError]:
    try:
        return address, await describe_role(address, topic, security=security)
    except errors.KeybusError as e:
        return address, e


def _all_said(answers: list[tuple[str, pb.TopicRoleInfo | errors.KeybusError]]) -> str:
    return "; ".join(f"{a}: {_said(info)}" for a, info in answers)


def _said(info: pb.TopicRoleInfo | errors.KeybusError) -> str:
    if isinstance(info, errors.KeybusError):
        return str(info)
    return f"{info.role}" + (f" ({info.detail})" if info.detail else "")


class LeaderChannel:
    """A channel to the current leader of one topic, moved when the leader moves."""

    def __init__(self, broker: str, topic: str, find_timeout_ms: int = FIND_TIMEOUT_MS,
                 security: ClientSecurity | None = None) -> None:
        self.addresses = split_brokers(broker)
        self.topic = topic
        self.find_timeout_ms = find_timeout_ms
        self.security = security
        self.address = ""
        self.channel: grpc.aio.Channel | None = None

    async def connect(self, unreachable_ms: int | None = None) -> pb_grpc.KeybusAsyncStub:
        """Find the leader and open a channel to it (again after a failure).

        Raises:
            TopicNotFound, Unavailable: as find_leader (`unreachable_ms` is its).
        """
        address = await find_leader(self.addresses, self.topic, self.find_timeout_ms,
                                    security=self.security, unreachable_ms=unreachable_ms)
        if address != self.address or self.channel is None:
            if self.address:
                log.info("topic %s: leader moved from %s to %s", self.topic, self.address, address)
            await self.close()
            self.address, self.channel = address, open_channel(address, self.security)
        return stub_of(self.channel)

    async def renew(self, now_s: float) -> bool:
        """Close the channel when a rotated client certificate is on disk
        (sdk.channel.renews_channel): the next `connect` opens a new one."""
        if not renews_channel(self.security, now_s):
            return False
        await self.close()
        return True

    async def close(self) -> None:
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await self.channel.close()
            self.channel = None
