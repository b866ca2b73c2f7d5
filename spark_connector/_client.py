"""The connector's broker calls: the SDK for reads and describes, raw gRPC for produce.

Reads go through `sdk.sync.SyncReader` (bounded, with hash ranges and a
filter; it reconnects and resumes on a broken stream) and describes through
`sdk.sync.SyncAdmin`; this module only adds the context a Spark user needs
in error messages (which call, which broker, what to check).

TO BE REPLACED BY THE SDK: the produce half (`init_producer`,
`ProduceStream`) stands in for `sdk.producer.Producer` until that lets the
caller choose the producer id, which the connector derives from the Spark
task so that a retried task re-sends under the same id (task_producer.py).

Runs on the driver (describe) and in Spark tasks (read, produce). Every
channel is opened and closed by the call that needs it: nothing here is
pickled.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import grpc

from sdk import errors
from sdk.channel import CHANNEL_OPTIONS, target_of
from sdk.core.model import HashRange, TopicPartition
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.subscription_admin import SubscriptionAdmin
from sdk.sync import LoopThread, SyncAdmin, SyncReader
from spark_connector.partitioning import PartitionBounds

CALL_TIMEOUT_S = 30.0


class BrokerCallError(RuntimeError):
    """A broker call failed; the message says which call, which broker and why.

    Attributes:
        out_of_range: a read's start offset is no longer stored (retention).
    """

    def __init__(self, message: str, out_of_range: bool = False) -> None:
        super().__init__(message)
        self.out_of_range = out_of_range


def _failure(call: str, broker: str, error: errors.KeybusError) -> BrokerCallError:
    hint = ""
    if isinstance(error, errors.Unavailable):
        hint = " (is the broker running, and is option 'broker' its address?)"
    return BrokerCallError(f"keybus {call} on broker {broker} failed: {error.message}{hint}",
                           isinstance(error, errors.OffsetOutOfRange))


def describe(broker: str, topics: Sequence[str]) -> dict[TopicPartition, PartitionBounds]:
    """Stored offsets of every partition of `topics` (DescribeTopic).

    Raises:
        BrokerCallError: a topic does not exist, or the broker cannot be reached.
    """
    out: dict[TopicPartition, PartitionBounds] = {}
    with SyncAdmin(broker) as admin:
        for topic in topics:
            try:
                info = admin.describe_topic(topic)
            except errors.KeybusError as e:
                raise _failure(f"DescribeTopic({topic!r})", broker, e) from None
            for p in info.partitions:
                out[TopicPartition(topic, p.partition)] = PartitionBounds(p.start_offset,
                                                                          p.end_offset)
    return out


def subscription_ranges(broker: str, topics: Sequence[str], subscription: str
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
                info = loop.run(_describe_subscription(broker, topic, subscription),
                                CALL_TIMEOUT_S)
            except errors.KeybusError as e:
                raise _failure(f"DescribeSubscription({topic!r}, {subscription!r})", broker,
                               e) from None
            for p in info.partitions:
                out[TopicPartition(topic, p.partition)] = [
                    [HashRange(r.slot_first, r.slot_last) for r in c.ranges] for c in p.consumers]
    finally:
        loop.stop()
    return out


async def _describe_subscription(broker: str, topic: str, subscription: str
                                 ) -> pb.SubscriptionInfo:
    async with SubscriptionAdmin(broker) as admin:
        return await admin.describe_subscription(topic, subscription)


def read_records(broker: str, topic: str, partition: int, start: int | str, stop: int,
                 ranges: Sequence[HashRange] | None, key_filter: pb.KeyFilter | None,
                 events_max: int) -> Iterator[pb.Record]:
    """The records of a bounded read of [start, stop); ranges None = every slot.

    Args:
        start: an offset, or "earliest".
    Raises:
        BrokerCallError: the read failed (out_of_range set when the start
            offset is no longer stored).
    """
    try:
        with SyncReader(broker, topic, partition, start=start, stop_offset=stop,
                        hash_ranges=ranges, key_filter=key_filter,
                        events_max=events_max) as reader:
            for batch in reader:
                yield batch.record
    except errors.KeybusError as e:
        raise _failure(f"Read({topic!r}/{partition})", broker, e) from None


# ---------------------------------------------------------------- produce


@contextmanager
def connect(broker: str) -> Iterator[pb_grpc.KeybusStub]:
    """A stub on a fresh synchronous channel, closed on exit."""
    channel = grpc.insecure_channel(target_of(broker), options=CHANNEL_OPTIONS)
    try:
        yield pb_grpc.KeybusStub(channel)
    finally:
        channel.close()


def _rpc_failure(call: str, broker: str, error: grpc.RpcError) -> BrokerCallError:
    return _failure(call, broker, errors.from_rpc_error(error))


def init_producer(stub: pb_grpc.KeybusStub, broker: str, topic: str) -> int:
    """A fresh producer id from the broker (InitProducer)."""
    try:
        response = stub.InitProducer(pb.InitProducerRequest(topic=topic), timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as e:
        raise _rpc_failure(f"InitProducer({topic!r})", broker, e) from None
    return int(response.producer_id)


class ProduceStream:
    """One pipelined Produce stream: `submit` requests, `next_response` answers.

    At most `in_flight_max` requests are unanswered; `submit` never blocks on
    the network (the caller reads answers first when the pipeline is full).
    A gRPC thread takes requests from a queue that can hold all of them plus
    the end-of-stream marker, so no put ever waits.
    """

    def __init__(self, stub: pb_grpc.KeybusStub, broker: str, in_flight_max: int) -> None:
        self.broker = broker
        self.in_flight_max = in_flight_max
        self.in_flight: dict[int, pb.ProduceRequest] = {}
        self._next_request_id = 1
        self._closed = False
        self._requests: queue.Queue[pb.ProduceRequest | None] = queue.Queue(in_flight_max + 1)
        self._responses: Iterator[pb.ProduceResponse] = stub.Produce(
            iter(self._requests.get, None))

    def submit(self, request: pb.ProduceRequest) -> None:
        assert len(self.in_flight) < self.in_flight_max, "read an answer first"
        request.request_id = self._next_request_id
        self._next_request_id += 1
        self.in_flight[request.request_id] = request
        self._requests.put(request)

    def next_response(self) -> tuple[pb.ProduceRequest, pb.ProduceResponse]:
        """The next answer and the request it answers.

        Raises:
            BrokerCallError: the stream broke.
        """
        try:
            response = next(self._responses)
        except grpc.RpcError as e:
            raise _rpc_failure("Produce", self.broker, e) from None
        except StopIteration:
            raise BrokerCallError(f"keybus Produce on broker {self.broker}: the stream ended "
                                  f"with {len(self.in_flight)} requests unanswered") from None
        request = self.in_flight.pop(response.request_id)
        return request, response

    def close(self) -> None:
        """End the stream; cancel it when answers are still due (a failed task). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._requests.put_nowait(None)
        cancel = getattr(self._responses, "cancel", None)
        if self.in_flight and cancel is not None:
            cancel()


def response_error(broker: str, response: pb.ProduceResponse) -> BrokerCallError:
    """The error a failed ProduceResponse stands for."""
    mapped = errors.from_code(response.error_code, response.error_message)
    return BrokerCallError(f"keybus Produce to {response.topic!r}/{response.partition} on "
                           f"broker {broker} failed: {mapped.message}")
