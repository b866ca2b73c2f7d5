"""A streaming query whose topic is deleted while it runs.

Goal: Kafka's rule. A deleted topic is data loss: with failOnDataLoss=false
the query logs it and goes on, and when the topic is created again it reads
the new topic from its start; with true it fails when it plans the next
micro-batch, saying the topic was deleted and what to do. (The old code
failed the query in either case with DescribeTopic's "does not exist".)
Also the broker's answers a task tells apart: a read past the log's end (the
offsets went back) and a read of a deleted topic, as the connector's client
classifies them.
Method: the shared local[2] session and broker; a memory sink; the topic is
deleted between two processAllAvailable calls, then created again with new
events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sdk.core.pb import keybus_pb2 as pb
from spark_connector import _client
from tests.e2e.conftest import Topics

pytestmark = pytest.mark.spark


def _start(topics: Topics, name: str, checkpoint: Path, fail: str) -> Any:
    stream = (topics.spark.readStream.format("keybus").option("broker", topics.address)
              .option("topic", name).option("startingOffsets", "earliest")
              .option("failOnDataLoss", fail).load())
    return (stream.select("offset", "key_long").writeStream.format("memory")
            .queryName(name.replace("-", "_")).option("checkpointLocation", str(checkpoint))
            .start())


def _delete(topics: Topics, name: str) -> None:
    topics.stub.DeleteTopic(pb.DeleteTopicRequest(topic=name), timeout=10)


def test_without_fail_on_data_loss_the_query_goes_on_and_reads_the_new_topic(
        topics: Topics, tmp_path: Path) -> None:
    name = topics.make("spark-deleted-skip")
    topics.produce_ints(name, 0, list(range(10)))
    query = _start(topics, name, tmp_path / "checkpoint", "false")
    try:
        query.processAllAvailable()
        _delete(topics, name)
        query.processAllAvailable()  # the old code failed here: the topic does not exist
        topics.make(name)
        topics.produce_ints(name, 0, list(range(100, 105)))  # offsets 0..4 again
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
        rows = sorted((r.offset, r.key_long)
                      for r in topics.spark.sql(f"SELECT * FROM {query.name}").collect())
    finally:
        query.stop()
    assert rows == sorted([(o, o) for o in range(10)] + [(o, 100 + o) for o in range(5)])


def test_with_fail_on_data_loss_the_query_says_the_topic_was_deleted(
        topics: Topics, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    name = topics.make("spark-deleted-fail")
    topics.produce_ints(name, 0, list(range(10)))
    query = _start(topics, name, tmp_path / "checkpoint", "true")
    try:
        query.processAllAvailable()
        _delete(topics, name)
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(60)  # bounded: still running after 60 s fails the test
    finally:
        query.stop()
    message = str(caught.value)
    assert f"topic {name!r} was deleted, the query had read {name}/0 up to offset 10" in message
    assert "failOnDataLoss=false" in message and "new checkpointLocation" in message, message


def test_the_broker_answers_a_task_tells_apart(topics: Topics) -> None:
    name = topics.make("spark-deleted-reads")
    topics.produce_ints(name, 0, list(range(10)))
    with pytest.raises(_client.BrokerCallError) as past_end:
        list(_client.read_records(topics.address, name, 0, 20, 30, None, None, 100))
    assert past_end.value.failure == _client.Failure.PAST_END, past_end.value
    _delete(topics, name)
    with pytest.raises(_client.BrokerCallError) as gone:
        list(_client.read_records(topics.address, name, 0, 0, 10, None, None, 100))
    assert gone.value.failure == _client.Failure.TOPIC_GONE, gone.value
