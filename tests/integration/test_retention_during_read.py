"""Retention that removes events while a read is being served ends the read.

Goal: a read never skips offsets silently. Before, a read whose start passed
the up-front check and whose next chunk's offsets retention then removed went
on from the next stored record: the reader got a gap and no error, so nothing
above it (failOnDataLoss, a databus client) could tell. Now the stream sends
every record before the gap, then ends with OUT_OF_RANGE naming the missing
offsets and what the partition holds; the SDK Reader hands out the batches
received, then raises OffsetOutOfRange with that message, its next_offset at
the first missing offset.
Method: a broker process checking retention every 50 ms; a topic with
retention_ms=1500 and 6 MB in 300 records of 10 events; a read (10 events a
response) on a channel without BDP probing, so HTTP/2 flow control holds the
broker's stream after about 64 KB while the reader waits; the reader takes
one response, waits (bounded) until retention removed all but the newest
record, then reads on.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio
import pytest

from sdk import errors
from sdk.core.pb import keybus_pb2 as pb
from sdk.core.pb import keybus_pb2_grpc as pb_grpc
from sdk.reader import Reader
from tests.support.broker_process import BrokerProcess
from tests.support.wire import int_batch, produce, stub

RECORDS, EVENTS, VALUE_BYTES = 300, 10, 2_000
LAST = (RECORDS - 1) * EVENTS  # the newest record's base: retention keeps it
# A client's receive window stays at HTTP/2's initial 64 KB: the broker's stream waits.
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0)]



def _fill(address: str, topic: str) -> pb_grpc.KeybusStub:
    client = stub(address)
    client.CreateTopic(pb.CreateTopicRequest(topic=topic, config=pb.TopicConfig(
        retention_ms=1_500)), timeout=10)
    produce(client, [pb.ProduceRequest(topic=topic, batch=int_batch(
        list(range(i, i + EVENTS)), b"x" * VALUE_BYTES)) for i in range(0, RECORDS * EVENTS, EVENTS)])
    return client


def _wait_for_trim(client: pb_grpc.KeybusStub, topic: str) -> None:
    deadline = time.monotonic() + 20
    while client.DescribeTopic(pb.DescribeTopicRequest(topic=topic),
                               timeout=10).partitions[0].start_offset < LAST:
        assert time.monotonic() < deadline, "retention did not trim"
        time.sleep(0.05)


def _held(topic: str, first: int) -> str:
    return (f"offsets {first}..{LAST - 1} of {topic}/0, which this read had reached, were "
            f"removed by retention: the partition holds offsets {LAST}..{LAST + EVENTS - 1}")


def test_a_read_ends_with_out_of_range_when_retention_removes_what_it_reaches(
        retention_broker: BrokerProcess) -> None:
    topic = "trimmed-mid-read"
    client = _fill(retention_broker.address, topic)
    with grpc.insecure_channel(retention_broker.address, options=SMALL_WINDOW) as channel:
        stream = pb_grpc.KeybusStub(channel).Read(pb.ReadRequest(
            topic=topic, start=pb.StartPosition(earliest=True), events_max=EVENTS), timeout=60)
        bases = [r.base_offset for r in next(stream).records]
        _wait_for_trim(client, topic)
        with pytest.raises(grpc.RpcError) as caught:
            for response in stream:
                bases += [r.base_offset for r in response.records]
    assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    # Every record before the gap, none after it.
    first_missing = bases[-1] + EVENTS
    assert bases == list(range(0, first_missing, EVENTS)) and first_missing < LAST
    assert _held(topic, first_missing) in (caught.value.details() or ""), caught.value.details()


def test_the_sdk_reader_hands_out_what_came_then_raises_offset_out_of_range(
        retention_broker: BrokerProcess) -> None:
    topic = "trimmed-mid-sdk-read"
    client = _fill(retention_broker.address, topic)

    async def scenario() -> tuple[list[int], Reader, errors.OffsetOutOfRange]:
        offsets: list[int] = []
        async with grpc.aio.insecure_channel(retention_broker.address,
                                             options=SMALL_WINDOW) as channel:
            reader = Reader(retention_broker.address, topic, 0, channel=channel,
                            events_max=EVENTS)
            offsets += (await reader.__anext__()).offsets
            await asyncio.to_thread(_wait_for_trim, client, topic)
            with pytest.raises(errors.OffsetOutOfRange) as caught:
                async for batch in reader:
                    offsets += batch.offsets
            return offsets, reader, caught.value

    offsets, reader, error = asyncio.run(scenario())
    first_missing = offsets[-1] + 1
    assert offsets == list(range(first_missing)) and first_missing < LAST
    assert reader.next_offset == first_missing  # where a caller that goes on would resume
    assert _held(topic, first_missing) in error.message, error.message
