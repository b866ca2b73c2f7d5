"""The connector's broker calls for reads and describes, through the SDK.

Reads go through `sdk.sync.SyncReader` (bounded, with hash ranges and a
filter; it reconnects and resumes on a broken stream) and describes through
`sdk.sync.SyncAdmin`; this module only adds the context a Spark user needs
in error messages (which call, which broker, what to check). Writes go
through `sdk.producer.Producer` (task_producer.py), which reports its
failures with `call_failure` too.

Runs on the driver (describe) and in Spark tasks (read). Every channel is
opened and closed by the call that needs it: nothing here is pickled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sdk import errors
from sdk.cluster import describe_role
from sdk.core.model import HashRange, TopicPartition
from sdk.core.pb import keybus_pb2 as pb
from sdk.security import ClientSecurity
from sdk.subscription_admin import SubscriptionAdmin
from sdk.sync import LoopThread, SyncAdmin, SyncReader
from spark_connector.partitioning import PartitionBounds

CALL_TIMEOUT_S = 30.0


class BrokerCallError(RuntimeError):
    """A broker call failed; the message says which call, which broker and why.

    Attributes:
        out_of_range: a read's start offset, or offsets it reached, are no longer
            stored (retention).
    """

    def __init__(self, message: str, out_of_range: bool = False) -> None:
        super().__init__(message)
        self.out_of_range = out_of_range


def call_failure(call: str, broker: str, error: errors.KeybusError) -> BrokerCallError:
    """The BrokerCallError for an SDK error of `call` on `broker`, with a hint."""
    hint = ""
    if isinstance(error, errors.Unavailable):
        hint = " (is the broker running, and is option 'broker' its address?)"
    return BrokerCallError(f"keybus {call} on broker {broker} failed: {error.message}{hint}",
                           isinstance(error, errors.OffsetOutOfRange))


def describe(broker: str, topics: Sequence[str], security: ClientSecurity | None = None
             ) -> dict[TopicPartition, PartitionBounds]:
    """Stored offsets of every partition of `topics` (DescribeTopic).

    Raises:
        BrokerCallError: a topic does not exist, or the broker cannot be reached.
    """
    return {TopicPartition(topic, p.partition): PartitionBounds(p.start_offset, p.end_offset)
            for topic, info in topic_infos(broker, topics, security).items()
            for p in info.partitions}


def topic_infos(broker: str, topics: Sequence[str],
                security: ClientSecurity | None = None) -> dict[str, pb.TopicInfo]:
    """DescribeTopic of each topic.

    Raises:
        BrokerCallError: a topic does not exist, or the broker cannot be reached.
    """
    out: dict[str, pb.TopicInfo] = {}
    with SyncAdmin(broker, security=security) as admin:
        for topic in topics:
            try:
                out[topic] = admin.describe_topic(topic)
            except errors.KeybusError as e:
                raise call_failure(f"DescribeTopic({topic!r})", broker, e) from None
    return out


def durable_ends(broker: str, topics: Sequence[str], security: ClientSecurity | None = None
                 ) -> dict[TopicPartition, int]:
    """Each partition's durable log end on `broker` (DescribeCluster), for a broker
    that reports them; DescribeTopic's end_offset is the readable end, held back
    to the high watermark on a broker of a cluster. Empty when the broker does
    not answer: the caller then goes by DescribeTopic alone."""
    loop = LoopThread("keybus-spark-describe")
    out: dict[TopicPartition, int] = {}
    try:
        for topic in topics:
            try:
                info = loop.run(describe_role(broker, topic, security=security), CALL_TIMEOUT_S)
            except errors.KeybusError:
                continue
            out.update({TopicPartition(topic, p.partition): p.log_end_offset
                        for p in info.partitions})
    finally:
        loop.stop()
    return out


def subscription_ranges(broker: str, topics: Sequence[str], subscription: str,
                        security: ClientSecurity | None = None
                        ) -> dict[TopicPartition, list[list[HashRange]]]:
    """Each consumer's hash ranges per topic partition of a Key_Shared
    subscription, as DescribeSubscription (and `keybus subscriptions describe`)
    reports them.

    Raises:
        BrokerCallError: the topic or subscription does not exist, or the
            broker cannot be reached.
    """
    loop = LoopThread("keybus-spark-describe")
    out: dict[TopicPartition, list[list[HashRange]]] = {}
    try:
        for topic in topics:
            try:
                info = loop.run(_describe_subscription(broker, topic, subscription, security),
                                CALL_TIMEOUT_S)
            except errors.KeybusError as e:
                raise call_failure(f"DescribeSubscription({topic!r}, {subscription!r})", broker,
                               e) from None
            for p in info.partitions:
                out[TopicPartition(topic, p.partition)] = [
                    [HashRange(r.slot_first, r.slot_last) for r in c.ranges] for c in p.consumers]
    finally:
        loop.stop()
    return out


async def _describe_subscription(broker: str, topic: str, subscription: str,
                                 security: ClientSecurity | None) -> pb.SubscriptionInfo:
    async with SubscriptionAdmin(broker, security=security) as admin:
        return await admin.describe_subscription(topic, subscription)


def read_records(broker: str, topic: str, partition: int, start: int | str, stop: int,
                 ranges: Sequence[HashRange] | None, key_filter: pb.KeyFilter | None,
                 events_max: int, security: ClientSecurity | None = None
                 ) -> Iterator[pb.Record]:
    """The records of a bounded read of [start, stop); ranges None = every slot.

    Args:
        start: an offset, or "earliest".
    Raises:
        BrokerCallError: the read failed (out_of_range set when the start
            offset, or offsets the read reached, are no longer stored).
    """
    try:
        with SyncReader(broker, topic, partition, start=start, stop_offset=stop,
                        hash_ranges=ranges, key_filter=key_filter,
                        events_max=events_max, security=security) as reader:
            for batch in reader:
                yield batch.record
    except errors.KeybusError as e:
        raise call_failure(f"Read({topic!r}/{partition})", broker, e) from None
