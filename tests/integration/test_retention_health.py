"""Retention by size and by age, and the standard health and reflection services.

Goal: retention trims whole records, oldest first, keeps the newest, and the
partition's offsets stay dense; reads below the new start are refused with
OUT_OF_RANGE. The broker answers grpc.health.v1 and server reflection.
Method: a broker process with a short retention check interval; poll
DescribeTopic (bounded) until the start offset moves.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import int_batch, produce, read_all, stub


def _wait_for_start(client: object, topic: str, minimum: int, timeout_s: float = 20) -> pb.TopicInfo:
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.DescribeTopic(pb.DescribeTopicRequest(topic=topic))  # type: ignore[attr-defined]
        if info.partitions[0].start_offset >= minimum or time.monotonic() > deadline:
            return info
        time.sleep(0.05)


@pytest.fixture
def fast_retention_broker(tmp_path: Path):  # type: ignore[no-untyped-def]
    broker = BrokerProcess(tmp_path / "data", "--retention-check-interval-ms", "50")
    broker.start()
    yield broker
    broker.stop()


def test_retention_by_size_trims_whole_records(fast_retention_broker: BrokerProcess) -> None:
    client = stub(fast_retention_broker.address)
    client.CreateTopic(pb.CreateTopicRequest(topic="sized", config=pb.TopicConfig(retention_bytes=20_000)))
    produce(client, [pb.ProduceRequest(topic="sized", batch=int_batch(list(range(i, i + 100))))
                     for i in range(0, 2_000, 100)])
    info = _wait_for_start(client, "sized", 100)
    start = info.partitions[0].start_offset
    assert start > 0 and start % 100 == 0, start  # whole records only
    assert info.partitions[0].bytes <= 20_000 + 5_000
    offsets = [r.base_offset for r in read_all(client, "sized")]
    assert offsets[0] == start and offsets[-1] == 1_900  # the newest record stays, dense
    with pytest.raises(grpc.RpcError) as caught:
        read_all(client, "sized", start=pb.StartPosition(offset=0))
    assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "removed by retention" in (caught.value.details() or "")


def test_retention_by_age_keeps_the_newest_record(fast_retention_broker: BrokerProcess) -> None:
    client = stub(fast_retention_broker.address)
    client.CreateTopic(pb.CreateTopicRequest(topic="aged", config=pb.TopicConfig(retention_ms=300)))
    produce(client, [pb.ProduceRequest(topic="aged", batch=int_batch([i])) for i in range(5)])
    info = _wait_for_start(client, "aged", 4)
    assert info.partitions[0].start_offset == 4 and info.partitions[0].end_offset == 5
    assert [r.base_offset for r in read_all(client, "aged")] == [4]  # expired, but the newest
    produce(client, [pb.ProduceRequest(topic="aged", batch=int_batch([9]))])
    info = _wait_for_start(client, "aged", 5)
    assert info.partitions[0].start_offset == 5
    assert [r.base_offset for r in read_all(client, "aged")] == [5]


def test_health_and_reflection(shared_broker: BrokerProcess) -> None:
    channel = grpc.insecure_channel(shared_broker.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "keybus.v1.Keybus"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    answer = next(iter(reflection.ServerReflectionInfo(iter([request]), timeout=10)))
    names = {s.name for s in answer.list_services_response.service}
    assert {"keybus.v1.Keybus", "grpc.health.v1.Health"} <= names


def test_idle_producer_state_expires(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--retention-check-interval-ms", "50",
                           "--producer-expiry-ms", "200", "--producer-expiry-check-interval-ms", "0")
    broker.start()
    try:
        client = stub(broker.address)
        client.CreateTopic(pb.CreateTopicRequest(topic="expiry"))
        producer_id = client.InitProducer(pb.InitProducerRequest(topic="expiry")).producer_id
        first = pb.ProduceRequest(topic="expiry", batch=int_batch([1]), producer_id=producer_id, sequence=0)
        assert produce(client, [first])[0].error_code == 0
        assert produce(client, [first])[0].duplicate  # remembered while fresh
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            late = pb.ProduceRequest(topic="expiry", batch=int_batch([2]), producer_id=producer_id, sequence=1)
            answer = produce(client, [late])[0]
            if answer.error_code:
                break
            time.sleep(0.1)  # still known (stored, or answered as a duplicate): wait for expiry
        assert answer.error_code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "unknown" in answer.error_message
    finally:
        broker.stop()
