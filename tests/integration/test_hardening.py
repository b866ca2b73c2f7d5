"""Clean refusals at the wire: the three defects of issue 14, each fixed.

Goal: (1) request bytes that are not the method's protobuf message get
INVALID_ARGUMENT on every method (they got UNKNOWN with a Python exception
name); (2) a request over request_bytes_max (32 MiB) gets RESOURCE_EXHAUSTED
naming the limit and the size, and the Produce stream stays open for the
next request (a 34 MiB request was stored); (3) the broker verifies the
slots column against the ordering keys and refuses a mismatch (wrong slots
were stored and broke per-key order), fills it in when absent, and refuses
a producer id InitProducer never gave. (4) A 10,000-character name is quoted
shortened in the refusal: echoed whole it made a 20 KiB status header, which
gRPC drops for RESOURCE_EXHAUSTED "Stream removed", losing the message.
(5) ListCheckpoints of a partition the topic lacks is refused, as every
other RPC naming a partition is (it answered "no checkpoint").
Method: a real broker process with its default limits; raw bytes and
messages over sync gRPC; every refusal read back to show nothing was stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from sdk.core.hashing import slot_of, slots_of
from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, events_of, int_batch, produce, read_all, stub

METHODS = pb.DESCRIPTOR.services_by_name["Keybus"].methods_by_name
# Not a protobuf message: field 1 as a length-delimited value longer than the data.
GARBAGE = b"\x0a\xff\xff\xff\x0f\x01\x02"
REQUEST_BYTES_MAX = 32 << 20


def raw_call(address: str, method: str, payload: bytes) -> grpc.RpcError:
    """Send raw bytes to a method; return the error it ends with."""
    channel = grpc.insecure_channel(address)
    descriptor = METHODS[method]
    path = f"/keybus.v1.Keybus/{method}"
    try:
        if descriptor.client_streaming:
            call = channel.stream_stream(path)(iter([payload]), timeout=10)
            responses = list(call)
            raise AssertionError(f"{method} answered {responses!r}")
        if descriptor.server_streaming:
            list(channel.unary_stream(path)(payload, timeout=10))
        else:
            channel.unary_unary(path)(payload, timeout=10)
    except grpc.RpcError as e:
        return e
    finally:
        channel.close()
    raise AssertionError(f"{method} accepted undecodable bytes")


@pytest.mark.parametrize("method", sorted(set(METHODS) - {"Produce"}))
def test_undecodable_request_is_invalid_argument_on_every_method(
        shared_broker: BrokerProcess, method: str) -> None:
    error = raw_call(shared_broker.address, method, GARBAGE)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    name = METHODS[method].input_type.name
    assert f"not a valid keybus.v1.{name}" in error.details()


def _stream(requests: list[bytes]) -> Iterator[bytes]:
    yield from requests


def test_produce_answers_undecodable_and_oversize_requests_in_the_open_stream(
        shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "hardening-size")
    value = b"x" * ((1 << 20) - 1024)  # each event under event_bytes_max
    big = pb.ProduceRequest(topic="hardening-size", request_id=7, batch=pb.EventBatch(
        count=34, key_ints=list(range(34)), values=[value] * 34))
    small = pb.ProduceRequest(topic="hardening-size", request_id=8, batch=int_batch([1, 2]))
    big_bytes = big.SerializeToString()
    assert REQUEST_BYTES_MAX < len(big_bytes) < 2 * REQUEST_BYTES_MAX
    channel = grpc.insecure_channel(shared_broker.address)
    produce_raw = channel.stream_stream("/keybus.v1.Keybus/Produce",
                                        response_deserializer=pb.ProduceResponse.FromString)
    answers = list(produce_raw(_stream([GARBAGE, big_bytes, small.SerializeToString()]), timeout=60))
    garbage, too_big, ok = answers
    assert garbage.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "not a valid keybus.v1.ProduceRequest" in garbage.error_message
    assert too_big.error_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert too_big.request_id == 7
    assert str(len(big_bytes)) in too_big.error_message
    assert str(REQUEST_BYTES_MAX) in too_big.error_message
    assert ok.error_code == 0 and ok.request_id == 8 and ok.base_offset == 0  # stream stayed open
    assert [r.batch.count for r in read_all(client, "hardening-size")] == [2]


def test_wrong_slots_refused_absent_slots_filled_in(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "hardening-slots")
    keys = [10, 11, 12]
    wrong = list(slots_of(keys))
    wrong[1] = (wrong[1] + 1) % 65536
    refused, broadcast, ordering, good, absent = produce(client, [
        pb.ProduceRequest(topic="hardening-slots", batch=pb.EventBatch(
            count=3, key_ints=keys, slots=wrong, values=[b"a", b"b", b"c"])),
        pb.ProduceRequest(topic="hardening-slots", batch=pb.EventBatch(
            count=3, key_ints=keys, slots=[slot_of(10)], values=[b"a", b"b", b"c"])),
        pb.ProduceRequest(topic="hardening-slots", batch=pb.EventBatch(
            count=2, key_ints=[1, 2], ordering_keys=["user-7"], slots=slots_of([1, 2]),
            values=[b"a", b"b"])),
        pb.ProduceRequest(topic="hardening-slots", batch=int_batch(keys)),
        pb.ProduceRequest(topic="hardening-slots", batch=pb.EventBatch(
            count=2, key_strings=["k1", "k2"], values=[b"a", b"b"])),
    ])
    for answer, index in ((refused, 1), (broadcast, 1), (ordering, 0)):
        assert answer.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert f"batch.slots: event {index} has slot" in answer.error_message
    assert "'user-7'" in ordering.error_message  # the key that was hashed is named
    assert good.error_code == 0 and absent.error_code == 0
    records = read_all(client, "hardening-slots")
    assert [r.batch.count for r in records] == [3, 2]  # nothing of the refused ones
    assert list(records[1].batch.slots) == slots_of(["k1", "k2"])


def test_producer_id_never_issued_is_refused(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "hardening-ids")
    issued = client.InitProducer(pb.InitProducerRequest(topic="hardening-ids")).producer_id
    forged, chosen, own = produce(client, [
        pb.ProduceRequest(topic="hardening-ids", batch=int_batch([1]), producer_id=issued + 1000),
        pb.ProduceRequest(topic="hardening-ids", batch=int_batch([2]), producer_id=(1 << 63) + 5),
        pb.ProduceRequest(topic="hardening-ids", batch=int_batch([3]), producer_id=issued),
    ])
    assert forged.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "never given by InitProducer" in forged.error_message
    assert chosen.error_code == 0 and own.error_code == 0
    assert [r.batch.key_ints[0] for r in read_all(client, "hardening-ids")] == [2, 3]


def test_scns_and_view_fields_that_would_stop_a_partition_are_refused(
        shared_broker: BrokerProcess) -> None:
    """Found from outside: a supplied SCN of 2**64-1 was stored, and every later produce
    to the partition failed for good (its SCNs passed the wire's uint64; ListTopics
    failed for every topic); an opcode outside the enum or a source of 64 KiB was
    stored, and the partition's compacted view, hence its retention, stopped for good.
    Now each is refused, nothing of it stored, and the partition goes on."""
    client = stub(shared_broker.address)
    create_topic(client, "hardening-scn")
    topic = "hardening-scn"
    too_large, largest, plain, opcode, source = produce(client, [
        pb.ProduceRequest(topic=topic, batch=int_batch([1]), scn=(1 << 64) - 1),
        pb.ProduceRequest(topic=topic, batch=int_batch([2]), scn=(1 << 63) - 1),
        pb.ProduceRequest(topic=topic, batch=int_batch([3, 4, 5])),
        pb.ProduceRequest(topic=topic, batch=pb.EventBatch(
            count=1, key_ints=[6], values=[b"v"], opcodes=[7])),
        pb.ProduceRequest(topic=topic, batch=pb.EventBatch(
            count=1, key_ints=[7], values=[b"v"], sources=["s" * 65_536])),
    ])
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert too_large.error_code == invalid
    assert "is over the limit of 9223372036854775807 for a supplied SCN" in too_large.error_message
    assert (largest.error_code, largest.scn_first) == (0, (1 << 63) - 1)
    assert (plain.error_code, plain.scn_first) == (0, 1 << 63)
    assert opcode.error_code == invalid and "allowed UPSERT (0) or DELETE (1)" in \
        opcode.error_message
    assert source.error_code == invalid and "65,536 bytes (UTF-8)" in source.error_message
    assert [e[1] for e in events_of(read_all(client, topic))] == [2, 3, 4, 5]
    assert topic in [t.topic for t in client.ListTopics(pb.ListTopicsRequest(), timeout=10).topics]
    deadline = time.monotonic() + 60
    while True:  # the view takes every stored event (a pass a second)
        info = client.DescribeTopic(pb.DescribeTopicRequest(topic=topic), timeout=10)
        if info.partitions[0].view_offset == 4:
            break
        assert time.monotonic() < deadline, f"the view stopped at {info.partitions[0]}"
        time.sleep(0.2)


LONG_NAME = "t" * 10_000


def _refusal(call: Callable[[], object]) -> grpc.RpcError:
    try:
        call()
    except grpc.RpcError as e:
        return e
    raise AssertionError("the call was answered")


def test_a_long_name_is_quoted_shortened_in_every_refusal(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "hardening-long", partitions=2)
    group = {"namespace": "ns", "topic": "hardening-long", "consumer_group": "g"}
    calls: list[tuple[Callable[[], object], grpc.StatusCode]] = [
        (lambda: client.DescribeTopic(pb.DescribeTopicRequest(topic=LONG_NAME), timeout=10),
         grpc.StatusCode.NOT_FOUND),
        (lambda: client.InitProducer(pb.InitProducerRequest(topic=LONG_NAME), timeout=10),
         grpc.StatusCode.NOT_FOUND),
        (lambda: read_all(client, LONG_NAME), grpc.StatusCode.NOT_FOUND),
        (lambda: client.DescribeSubscription(pb.DescribeSubscriptionRequest(
            topic="hardening-long", subscription=LONG_NAME), timeout=10),
         grpc.StatusCode.NOT_FOUND),
        (lambda: client.ClaimOwnership(pb.ClaimOwnershipRequest(**group, claims=[
            pb.OwnershipClaim(partition=0, owner_id=LONG_NAME)]), timeout=10),
         grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for call, code in calls:
        error = _refusal(call)
        assert error.code() == code, error.details()
        assert "(10,000 characters)" in error.details() and "t" * 65 not in error.details()
        assert len(error.details().encode()) <= 2048


def test_list_checkpoints_refuses_a_partition_out_of_range(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "hardening-checkpoints", partitions=2)
    group = {"namespace": "ns", "topic": "hardening-checkpoints", "consumer_group": "g"}
    assert not client.ListCheckpoints(pb.ListCheckpointsRequest(**group, partitions=[1]),
                                      timeout=10).checkpoints
    error = _refusal(lambda: client.ListCheckpoints(
        pb.ListCheckpointsRequest(**group, partitions=[1, 9]), timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert error.details() == ("partition=9 is out of range for topic 'hardening-checkpoints'; "
                               "allowed 0..1")
