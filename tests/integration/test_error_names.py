"""A failed call names its error: the catalogue's name in the trailing metadata.

Goal: clients tell errors that share a status code apart without reading the
message, which is for people and may be reworded (four OUT_OF_RANGE, for one:
a Spark task answers retention and a log whose offsets went back differently).
The broker puts the error's name (broker/errors.py) under `keybus-error` in
every failed call's trailing metadata; the SDK reads it into
`KeybusError.broker_error`. Method: a real broker process, its errors seen
through the SDK and through a bare gRPC stub (what any client sees).
"""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from sdk import Admin, OffsetOutOfRange, Producer, Reader, TopicNotFound
from sdk.channel import open_channel, stub_of
from sdk.core.error_names import ERROR_NAME_KEY, error_name_of
from sdk.core.pb import keybus_pb2 as pb
from tests.support.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    process = BrokerProcess(tmp_path_factory.mktemp("names") / "data")
    process.start()
    yield process  # type: ignore[misc]
    process.stop()


def test_the_sdk_reads_the_name_of_each_error(broker: BrokerProcess) -> None:
    async def go() -> None:
        async with Admin(broker.address) as admin:
            await admin.create_topic("named", 1)
            with pytest.raises(TopicNotFound) as missing:
                await admin.describe_topic("nowhere")
            assert missing.value.broker_error == "topic_not_found"
            with pytest.raises(Exception) as bad_name:
                await admin.create_topic("no spaces", 1)
            assert getattr(bad_name.value, "broker_error", None) == "topic_name_invalid"
        async with await Producer.create(broker.address, "named") as producer:
            for i in range(5):
                await producer.send(i, b"x")
        with pytest.raises(OffsetOutOfRange) as past_end:
            async with Reader(broker.address, "named", 0, start=100, follow=False) as reader:
                [batch async for batch in reader]
        assert past_end.value.broker_error == "offset_past_end"

    asyncio.run(go())


def test_any_grpc_client_finds_the_name_in_the_trailing_metadata(broker: BrokerProcess) -> None:
    async def go() -> tuple[grpc.StatusCode, str]:
        channel = open_channel(broker.address)
        try:
            call = stub_of(channel).DescribeTopic(pb.DescribeTopicRequest(topic="nowhere"),
                                                  timeout=30)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call
            metadata = failed.value.trailing_metadata()
            assert any(key == ERROR_NAME_KEY for key, _ in metadata)
            return failed.value.code(), error_name_of(metadata)
        finally:
            await channel.close()

    assert asyncio.run(go()) == (grpc.StatusCode.NOT_FOUND, "topic_not_found")


def test_no_metadata_is_no_name() -> None:
    assert error_name_of(None) == ""
    assert error_name_of((("other", "x"),)) == ""
    assert error_name_of(((ERROR_NAME_KEY, b"log_truncated"),)) == "log_truncated"
