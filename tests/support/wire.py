"""Small helpers for tests that speak the wire contract directly (sync gRPC)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import grpc

from sdk.core.columns import record_events
from sdk.core.hashing import slots_of
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc


def stub(address: str) -> pb_grpc.KeybusStub:
    return pb_grpc.KeybusStub(grpc.insecure_channel(address))


def int_batch(keys: list[int], value_prefix: bytes = b"v") -> pb.EventBatch:
    return pb.EventBatch(count=len(keys), key_ints=keys, slots=slots_of(keys),
                         values=[value_prefix + str(k).encode() for k in keys])


def produce(client: pb_grpc.KeybusStub, requests: Iterable[pb.ProduceRequest]
            ) -> list[pb.ProduceResponse]:
    return list(client.Produce(iter(list(requests)), timeout=30))


def read_all(client: pb_grpc.KeybusStub, topic: str, partition: int = 0,
             **fields: object) -> list[pb.Record]:
    start = fields.pop("start", pb.StartPosition(earliest=True))
    request = pb.ReadRequest(topic=topic, partition=partition, start=start, **fields)  # type: ignore[arg-type]
    return [r for response in client.Read(request, timeout=30) for r in response.records]


def events_of(records: Iterable[pb.Record]) -> Iterator[tuple[int, object, bytes, int]]:
    """(offset, key, value, scn) of every event."""
    for record in records:
        for e in record_events(record):
            yield e.offset, e.key, e.value, e.scn


def create_topic(client: pb_grpc.KeybusStub, topic: str, partitions: int = 1) -> pb.TopicInfo:
    return client.CreateTopic(pb.CreateTopicRequest(
        topic=topic, config=pb.TopicConfig(partitions=partitions)), timeout=10)


def fill_topic(client: pb_grpc.KeybusStub, topic: str, events: int, record_events: int,
               value_bytes: int) -> None:
    """Create `topic` and write `events` events (keys 0.., values of `value_bytes`
    each, the key's digits padded with dots) in records of `record_events`."""
    create_topic(client, topic)
    for first in range(0, events, record_events):
        keys = list(range(first, first + record_events))
        batch = int_batch(keys)
        batch.ClearField("values")
        batch.values.extend(f"{k}".encode().ljust(value_bytes, b".") for k in keys)
        assert produce(client, [pb.ProduceRequest(topic=topic, batch=batch)])[0].error_code == 0


def stalled_subscribe(topic: str, subscription: str, name: str, done: threading.Event,
                      permits: int = 1000, grant: threading.Event | None = None,
                      ) -> Iterator[pb.SubscribeRequest]:
    """The requests of a Subscribe stream that opens a Shared subscription from the
    earliest event, grants `permits` on partition 0 (once `grant` is set, if given),
    then sends nothing more and keeps its request stream open until `done` (whoever
    holds the call may never read it)."""
    yield pb.SubscribeRequest(open=pb.SubscribeOpen(
        topic=topic, subscription=subscription, consumer_name=name, type=pb.SHARED,
        initial_position=pb.StartPosition(earliest=True)))
    if grant is not None:
        grant.wait(60)
    yield pb.SubscribeRequest(permits=pb.Permits(partition=0, count=permits))
    done.wait(60)
