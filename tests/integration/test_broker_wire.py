"""Broker behaviour at the wire, against a real broker process and RocksDB.

Goal: the backbone's promises hold for any client: round trips with int and
string keys, atomic windows, SCN rules, idempotent retries, and clear errors
for bad input while the broker keeps serving.
Method: sync gRPC stubs speaking proto/keybus.proto directly to a broker
subprocess on 127.0.0.1 (the SDK has its own tests).
"""

from __future__ import annotations

import grpc
import pytest

from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic, events_of, int_batch, produce, read_all, stub


def test_round_trip_int_and_string_keys(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "round-trip")
    batch = pb.EventBatch(count=3, key_ints=[7, 0, -9], key_strings=["", "user-1", ""],
                          values=[b"a", b"b", b"c"], sources=["people"],
                          headers=[pb.Headers(entries={"h": b"1"})])
    responses = produce(client, [pb.ProduceRequest(topic="round-trip", batch=batch)])
    assert responses[0].error_code == 0 and responses[0].count == 3
    got = list(events_of(read_all(client, "round-trip")))
    assert [(o, k, v) for o, k, v, _ in got] == [(0, 7, b"a"), (1, "user-1", b"b"), (2, -9, b"c")]
    assert [scn for *_, scn in got] == [1, 2, 3]  # a plain batch: one SCN per event


def test_window_shares_one_scn_and_is_read_whole(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "windows")
    window = pb.ProduceRequest(topic="windows", window=True, batch=int_batch(list(range(50))))
    plain = pb.ProduceRequest(topic="windows", batch=int_batch([1, 2]))
    first, second = produce(client, [window, plain])
    assert first.window and first.count == 50 and second.scn_first == first.scn_first + 1
    records = read_all(client, "windows")
    assert [r.batch.count for r in records] == [50, 2]
    assert {scn for *_, scn in events_of(records[:1])} == {first.scn_first}


def test_supplied_scn_must_increase_and_resent_window_stores_nothing(
        shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "scn")
    window = pb.ProduceRequest(topic="scn", scn=1000, batch=int_batch([1, 2, 3]))
    ok, again, lower = produce(client, [window, window,
                                        pb.ProduceRequest(topic="scn", scn=999, batch=int_batch([4]))])
    assert ok.error_code == 0 and ok.scn_first == 1000 and ok.window
    for refused in (again, lower):
        assert refused.error_code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "must increase" in refused.error_message and "1000" in refused.error_message
    assert len(list(events_of(read_all(client, "scn")))) == 3
    start = read_all(client, "scn", start=pb.StartPosition(scn=1000))
    assert [r.base_offset for r in start] == [0]


def test_retry_after_lost_response_is_not_stored_twice(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "retry")
    producer_id = client.InitProducer(pb.InitProducerRequest(topic="retry")).producer_id
    request = pb.ProduceRequest(topic="retry", batch=int_batch([1, 2]), producer_id=producer_id,
                                sequence=0)
    # First attempt: the client gives up before reading the answer (a lost response).
    call = client.Produce(iter([request]))
    call.cancel()
    first = produce(client, [request])[0]  # the retry, on a new stream
    retry = produce(client, [request])[0]  # and once more
    assert retry.duplicate and retry.base_offset == first.base_offset
    assert len(list(events_of(read_all(client, "retry")))) == 2
    nxt = produce(client, [pb.ProduceRequest(topic="retry", batch=int_batch([3]),
                                             producer_id=producer_id, sequence=1)])[0]
    assert not nxt.duplicate and nxt.base_offset == 2
    gap = produce(client, [pb.ProduceRequest(topic="retry", batch=int_batch([4]),
                                             producer_id=producer_id, sequence=5)])[0]
    assert gap.error_code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "expected sequence 2" in gap.error_message


def test_read_from_offset_and_hash_ranges(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "ranges")
    produce(client, [pb.ProduceRequest(topic="ranges", batch=int_batch(list(range(100))))])
    tail = list(events_of(read_all(client, "ranges", start=pb.StartPosition(offset=95))))
    assert [o for o, *_ in tail] == [95, 96, 97, 98, 99]
    low = read_all(client, "ranges", hash_ranges=[pb.HashRange(slot_first=0, slot_last=32767)])
    high = read_all(client, "ranges", hash_ranges=[pb.HashRange(slot_first=32768, slot_last=65535)])
    low_offsets = {o for o, *_ in events_of(low)}
    high_offsets = {o for o, *_ in events_of(high)}
    assert not low_offsets & high_offsets and low_offsets | high_offsets == set(range(100))


BAD_PRODUCE = [
    (pb.ProduceRequest(topic="nope", batch=int_batch([1])), grpc.StatusCode.NOT_FOUND, "'nope' does not exist"),
    (pb.ProduceRequest(topic="bad-input", partition=3, batch=int_batch([1])),
     grpc.StatusCode.INVALID_ARGUMENT, "allowed 0..1"),
    (pb.ProduceRequest(topic="bad-input", window=True, batch=pb.EventBatch()),
     grpc.StatusCode.INVALID_ARGUMENT, "empty batch or window"),
    (pb.ProduceRequest(topic="bad-input", batch=pb.EventBatch(count=1, key_ints=[1], values=[b"x" * 2_000_000])),
     grpc.StatusCode.INVALID_ARGUMENT, "limit of 1,048,576 bytes per event"),
    (pb.ProduceRequest(topic="bad-input", batch=pb.EventBatch(count=1, key_strings=[""], values=[b"x"])),
     grpc.StatusCode.INVALID_ARGUMENT, "empty string key"),
    (pb.ProduceRequest(topic="bad-input", batch=pb.EventBatch(count=2, key_ints=[1], values=[b"x", b"y"])),
     grpc.StatusCode.INVALID_ARGUMENT, "key_ints has 1"),
]


@pytest.mark.parametrize(("request_", "code", "text"), BAD_PRODUCE)
def test_bad_produce_is_refused_and_broker_keeps_serving(
        shared_broker: BrokerProcess, request_: pb.ProduceRequest, code: grpc.StatusCode,
        text: str) -> None:
    client = stub(shared_broker.address)
    try:
        create_topic(client, "bad-input", partitions=2)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.ALREADY_EXISTS
    good = pb.ProduceRequest(topic="bad-input", batch=int_batch([42]))
    bad, after = produce(client, [request_, good])
    assert bad.error_code == code.value[0] and text in bad.error_message, bad.error_message
    assert after.error_code == 0  # same stream, still serving


def _status(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_bad_admin_and_read_requests(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    create_topic(client, "admin-bad")
    cases = [
        (lambda: client.CreateTopic(pb.CreateTopicRequest(topic="a b")), "INVALID_ARGUMENT", "[A-Za-z0-9._-]"),
        (lambda: client.CreateTopic(pb.CreateTopicRequest(topic="x", config=pb.TopicConfig(partitions=5000))),
         "INVALID_ARGUMENT", "allowed 1..1024"),
        (lambda: client.DescribeTopic(pb.DescribeTopicRequest(topic="missing")), "NOT_FOUND", "does not exist"),
        (lambda: read_all(client, "admin-bad", partition=9), "INVALID_ARGUMENT", "allowed 0..0"),
        (lambda: read_all(client, "admin-bad", start=pb.StartPosition(offset=77)), "OUT_OF_RANGE", "0..0"),
        (lambda: read_all(client, "admin-bad", start=pb.StartPosition()), "INVALID_ARGUMENT", "earliest, latest"),
        (lambda: read_all(client, "admin-bad", events_max=10**9), "INVALID_ARGUMENT", "events_max"),
        (lambda: read_all(client, "admin-bad", hash_ranges=[pb.HashRange(slot_first=9, slot_last=3)]),
         "INVALID_ARGUMENT", "9-3"),
    ]
    for call, code, text in cases:
        error = _status(call)
        assert error.code().name == code and text in (error.details() or ""), error.details()
    # An option this broker does not know (unknown field 100) is refused, not ignored.
    raw = pb.CreateTopicRequest(topic="unknown-opt").SerializeToString() + b"\xa0\x06\x01"
    channel = grpc.insecure_channel(shared_broker.address)
    create = channel.unary_unary("/keybus.v1.Keybus/CreateTopic")
    error = _status(lambda: create(raw, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown field number 100" in str(error.details())
    assert client.DescribeTopic(pb.DescribeTopicRequest(topic="admin-bad")).topic == "admin-bad"


def test_topic_admin_lifecycle(shared_broker: BrokerProcess) -> None:
    client = stub(shared_broker.address)
    info = create_topic(client, "lifecycle", partitions=3)
    assert [p.partition for p in info.partitions] == [0, 1, 2]
    assert "lifecycle" in [t.topic for t in client.ListTopics(pb.ListTopicsRequest()).topics]
    client.DeleteTopic(pb.DeleteTopicRequest(topic="lifecycle"))
    assert "lifecycle" not in [t.topic for t in client.ListTopics(pb.ListTopicsRequest()).topics]
    info = create_topic(client, "lifecycle", partitions=1)  # re-created empty
    assert info.partitions[0].end_offset == 0
