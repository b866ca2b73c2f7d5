"""A producer's first connection: the channel (or the leader's), the topic's
partition count, and the start of whatever is built on them, retried while a
failover is under way.

Its own module so the producer's module keeps to sending. `Producer.create`
passes `start`, which builds the producer on the connection and starts its
sender (InitProducer): a leader that moves during either is looked up again
until `request_timeout_ms`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import grpc.aio

from sdk import errors
from sdk.channel import open_channel, stub_of
from sdk.cluster import LeaderChannel, is_cluster
from sdk.connect_wait import wait_connected
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.producer_config import ProducerConfig
from sdk.security import ClientSecurity

T = TypeVar("T")


async def connect_and_start(broker: str, topic: str, config: ProducerConfig,
                            security: ClientSecurity | None,
                            start: Callable[[grpc.aio.Channel, pb_grpc.KeybusAsyncStub, int,
                                             LeaderChannel | None], Awaitable[T]]) -> T:
    """Connect (to the topic's leader, with several brokers), find the partition
    count, and return what `start(channel, stub, partitions, leader)` makes.

    Raises:
        ValueError: an empty topic name. TopicNotFound, Unavailable, KeybusError:
            the broker's answer (with several brokers, once request_timeout_ms passed).
    """
    leader = LeaderChannel(broker, topic, config.request_timeout_ms, security) \
        if is_cluster(broker) else None
    deadline = time.monotonic() + config.request_timeout_ms / 1000
    while True:
        if leader is not None:  # several brokers: ask the leader (again, if it moved)
            await leader.connect(unreachable_ms=config.connect_timeout_ms)
        channel = leader.channel if leader is not None and leader.channel \
            else open_channel(broker, security)
        try:
            stub = stub_of(channel)
            if leader is None:  # a frozen broker is told within connect_timeout_ms
                await wait_connected(channel, broker, min(
                    config.connect_timeout_ms, config.request_timeout_ms) / 1000)
            partitions = await _partitions_of(stub, topic, config.request_timeout_ms,
                                              leader.address if leader else broker)
            return await start(channel, stub, partitions, leader)
        except (errors.Unavailable, errors.NotLeader):
            if leader is None or time.monotonic() >= deadline:
                await (leader.close() if leader is not None else channel.close())
                raise
            await asyncio.sleep(config.retry_backoff_ms / 1000)  # a failover under way
        except BaseException:
            await (leader.close() if leader is not None else channel.close())
            raise


async def _partitions_of(stub: pb_grpc.KeybusAsyncStub, topic: str, timeout_ms: int,
                         broker: str | None = None) -> int:
    """The topic's partition count (DescribeTopic).

    Raises:
        ValueError: empty topic name. TopicNotFound, KeybusError: broker errors.
    """
    if not topic or not isinstance(topic, str):
        raise ValueError(f"topic {topic!r} is invalid: give the name of an existing topic")
    try:
        info = await stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic),
                                        timeout=timeout_ms / 1000)
    except grpc.RpcError as e:
        raise errors.from_rpc_error(e, broker) from None
    return partition_count(info)


def partition_count(info: pb.TopicInfo) -> int:
    """A DescribeTopic answer's partition count (its config's, else the partitions listed)."""
    return info.config.partitions or len(info.partitions) or 1
